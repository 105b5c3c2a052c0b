//go:build race

package crashimage_test

const raceEnabled = true
