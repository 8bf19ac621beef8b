//go:build !race

package bench

const collRace = false
