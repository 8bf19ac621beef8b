package bench

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the p-th percentile (0 <= p <= 100) of samples by the
// nearest-rank method, or 0 for no samples. It sorts samples in place.
func Percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	if !slices.IsSorted(samples) {
		slices.Sort(samples)
	}
	rank := int(math.Ceil(p/100*float64(len(samples)) - 1e-9))
	rank = min(max(rank, 1), len(samples))
	return samples[rank-1]
}

// Summary is the distribution of a set of durations.
type Summary struct {
	N                   int
	Min, Mean, Max      time.Duration
	P50, P90, P99, P999 time.Duration
}

// Summarize computes a Summary; it sorts samples in place.
func Summarize(samples []time.Duration) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	slices.Sort(samples)
	var sum time.Duration
	for _, s := range samples {
		sum += s
	}
	return Summary{
		N: len(samples), Min: samples[0], Max: samples[len(samples)-1], Mean: sum / time.Duration(len(samples)),
		P50: Percentile(samples, 50), P90: Percentile(samples, 90), P99: Percentile(samples, 99), P999: Percentile(samples, 99.9),
	}
}
