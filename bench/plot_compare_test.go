package bench

import (
	"bytes"
	"fmt"
	"image/png"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
)

// syntheticCompare is a comparison whose rows lie decades apart and one of
// which stopped early, as spinefail's roce and tcp rows do.
func syntheticCompare(rng *rand.Rand) CompareResult {
	res := CompareResult{Mode: "leafspine", Testbed: "leafspine:4x2x2,rate=1g", Link: KindXDP, AllToAll: "concurrent", Iterations: 30}
	for _, sc := range []string{"lossless", "loss0.1", "spinefail"} {
		for _, pr := range []struct {
			name string
			base time.Duration
			n    int
		}{{ProfileSpray, 4 * time.Millisecond, 30}, {ProfileRoCE, 70 * time.Millisecond, 30}, {ProfileTCP, 400 * time.Millisecond, 30}} {
			n := pr.n
			if sc == "spinefail" && pr.name != ProfileSpray {
				n = 10
			}
			r := CompareRow{Profile: pr.name, Scenario: sc, Bytes: 1 << 20, Ranks: 8}
			for range n {
				r.Samples = append(r.Samples, pr.base+time.Duration(rng.Float64()*float64(pr.base)))
			}
			r.summarize()
			res.Rows = append(res.Rows, r)
		}
	}
	return res
}

// TestCompareFigure: the figure names the run in its title, marks rows
// that stopped early, and puts every panel on one log axis whose labels
// share one format.
func TestCompareFigure(t *testing.T) {
	res := syntheticCompare(testutil.Rand(t))
	title := compareTitle(res)
	for _, want := range []string{"leafspine:4x2x2,rate=1g", "1 MiB", "link xdp", "30 iterations"} {
		if !strings.Contains(title, want) {
			t.Errorf("title %q does not name %q", title, want)
		}
	}
	if got := legendLabel(*res.Row(ProfileRoCE, "spinefail"), res.Iterations); got != "roce (stopped: 10/30 iterations)" {
		t.Errorf("legend of an early stop: %q", got)
	}
	if got := legendLabel(*res.Row(ProfileRoCE, "lossless"), res.Iterations); got != "roce" {
		t.Errorf("legend of a whole row: %q", got)
	}
	if xs := cdfPoints(res.Row(ProfileTCP, "spinefail").Samples, 30, 1); xs[len(xs)-1].Y > 10.0/30+1e-9 {
		t.Errorf("the CDF of a row with 10 of 30 iterations ends at %v", xs[len(xs)-1].Y)
	}
	lo, hi := xRange(4.1, 799)
	if lo != 2 || hi != 1000 {
		t.Errorf("x range of [4.1, 799] ms: [%v, %v], want [2, 1000]", lo, hi)
	}
	var labels []string
	for _, tk := range logTicks(lo, hi) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got := strings.Join(labels, " "); got != "3 10 30 100 300 1000" {
		t.Errorf("tick labels %q", got)
	}
	var img bytes.Buffer
	if err := WriteCompareCDF(&img, res); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(bytes.NewReader(img.Bytes())); err != nil {
		t.Fatalf("PNG does not decode: %v", err)
	}
}

// TestOnceLogf: a message that every socket logs alike is said once, and
// other messages still pass.
func TestOnceLogf(t *testing.T) {
	var got []string
	logf := onceLogf(func(format string, args ...any) { got = append(got, fmt.Sprintf(format, args...)) })
	for i := range 40 {
		logf("xdp: %s queue %d: driver offers no zero-copy, using copy mode", fmt.Sprintf("veth%d", i), 0)
	}
	logf("spinefail: %v", "link down")
	if len(got) != 2 || got[0] != "xdp: veth0 queue 0: driver offers no zero-copy, using copy mode" || got[1] != "spinefail: link down" {
		t.Fatalf("logged %q", got)
	}
}
