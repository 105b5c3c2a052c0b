//go:build race

package recovery_test

// raceEnabled: the race detector makes every byte copied cost; the slow
// exhaustive tests sample under it.
const raceEnabled = true
