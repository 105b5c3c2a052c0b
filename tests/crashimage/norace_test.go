//go:build !race

package crashimage_test

const raceEnabled = false
