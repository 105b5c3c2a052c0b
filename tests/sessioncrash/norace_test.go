//go:build !race

package sessioncrash_test

const raceEnabled = false
