//go:build race

package bench

// collRace trims the collective tests under the race detector, which slows
// the 16 goroutines of an 8-rank in-process world tenfold.
const collRace = true
