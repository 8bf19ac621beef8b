package sim

import (
	"slices"
	"strings"
	"time"

	"github.com/sprayfabric/spray/clock"
)

// CollectiveStats are the completion times of one kind of collective
// (dispatch, combine, reduce-scatter, all-gather, or the workload's own:
// alltoall, ...) over every instance of it in a run: an instance is one
// EP group's dispatch or combine, one data parallel ring's
// reduce-scatter or all-gather, or the whole collective when it has no
// groups (Workload.Groups), in every step. Its time runs from its first
// flow posted to its last flow received.
type CollectiveStats struct {
	Name string `json:"name"`
	// Count is the instances that completed; Incomplete those with a
	// flow that failed or was not done, left out of the times.
	Count      int `json:"count"`
	Incomplete int `json:"incomplete,omitempty"`
	// Mean, P999 and Max of the completed instances' times. P999 is the
	// nearest rank: the max when there are fewer than 1,000 instances.
	Mean time.Duration `json:"mean_ns"`
	P999 time.Duration `json:"p999_ns"`
	Max  time.Duration `json:"max_ns"`
}

// kinds names the kinds of w's collectives in the order they repeat:
// its Phases, dispatch and combine for moe:SIZE, or else its kind
// (alltoall, permutation, ...), every collective alike.
func (w Workload) kinds() []string {
	switch {
	case len(w.Phases) > 0:
		return w.Phases
	case w.Steps > 0 && w.Iters == 2*w.Steps:
		return []string{"dispatch", "combine"}
	}
	kind, _, _ := strings.Cut(w.Name, ":")
	return []string{kind}
}

// collectiveStats returns the times of w's collectives by kind, from the
// flows' post and receive times; nil when w is not collectives (Iters
// unset).
func collectiveStats(w Workload, flows []flowState) []CollectiveStats {
	if w.Iters < 1 || len(flows) != len(w.Flows) {
		return nil
	}
	names := w.kinds()
	times := make([][]time.Duration, len(names))
	out := make([]CollectiveStats, len(names))
	var first, last []clock.Time
	var seen, ok []bool
	for c, rg := range w.Collectives() {
		p := c % len(names)
		var groups []int32
		if p < len(w.Groups) {
			groups = w.Groups[p]
		}
		n := 1
		for _, g := range groups {
			n = max(n, int(g)+1)
		}
		first, last = slices.Grow(first[:0], n)[:n], slices.Grow(last[:0], n)[:n]
		seen, ok = slices.Grow(seen[:0], n)[:n], slices.Grow(ok[:0], n)[:n]
		for k := range n {
			first[k], last[k], seen[k], ok[k] = clock.Never, 0, false, true
		}
		for i := rg[0]; i < rg[1]; i++ {
			k := 0
			if groups != nil {
				if k = int(groups[w.Flows[i].Src]); k < 0 {
					continue
				}
			}
			fs := &flows[i]
			seen[k] = true
			if !fs.recvd {
				ok[k] = false
				continue
			}
			first[k], last[k] = min(first[k], fs.start), max(last[k], fs.done)
		}
		for k := range n {
			switch {
			case !seen[k]:
			case ok[k]:
				times[p] = append(times[p], time.Duration(last[k]-first[k]))
			default:
				out[p].Incomplete++
			}
		}
	}
	for p, ts := range times {
		out[p].Name = names[p]
		out[p].Count = len(ts)
		if len(ts) == 0 {
			continue
		}
		slices.Sort(ts)
		var sum time.Duration
		for _, d := range ts {
			sum += d
		}
		out[p].Mean, out[p].P999, out[p].Max = sum/time.Duration(len(ts)), pct(ts, 99.9), ts[len(ts)-1]
	}
	return out
}
