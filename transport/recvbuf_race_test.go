//go:build race

package transport

// raceEnabled: allocation counts are not checked under the race detector.
const raceEnabled = true
