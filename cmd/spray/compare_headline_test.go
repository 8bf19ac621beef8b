package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sprayfabric/spray/bench"
	"github.com/sprayfabric/spray/internal/testutil"
)

// TestCompareSimHeadline asserts the comparison's headline claims on the
// deterministic simulator, on the default testbed's configuration (spray
// compare --sim), with margins; on the real testbed they stay spray
// compare's report. Read from the JSON it writes: lossless, spray reaches
// at least 80% of the fabric's all-to-all limit; at 0.1% loss its mean and
// p99.9 are at most half of roce's without PFC (as the testbed runs it);
// when a spine link dies it completes every iteration, keeping at least
// (S-1)/S of its lossless rate with S spines, less a tenth.
func TestCompareSimHeadline(t *testing.T) {
	out := filepath.Join(t.TempDir(), "c.json")
	if err := runCompare([]string{"--sim", "--scenarios", "lossless,loss0.1,spinefail", "--profiles", "roce,spray",
		"--iters", "4", "--warmup", "1", "--seed", fmt.Sprint(testutil.Seed(t)), "--json", out, "--png", ""}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res bench.CompareResult
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	row := func(profile, scenario string) bench.CompareRow {
		t.Helper()
		for _, r := range res.Rows {
			if r.Profile == profile && r.Scenario == scenario {
				if r.Err != "" || r.Wrong != 0 || r.Iters != 4 {
					t.Fatalf("%s/%s: %d of 4 iterations, %d wrong: %s", scenario, profile, r.Iters, r.Wrong, r.Err)
				}
				return r
			}
		}
		t.Fatalf("no row %s/%s in %s", scenario, profile, b)
		return bench.CompareRow{}
	}
	lossless := row("spray", bench.ScenarioLossless)
	if share := lossless.AlgBW / res.AllToAllLimit; res.AllToAllLimit <= 0 || share < 0.8 {
		t.Errorf("lossless: spray's algbw %.4f GB/s is %.2f of the limit %.4f; want at least 0.80", lossless.AlgBW, share, res.AllToAllLimit)
	}
	spray, roce := row("spray", bench.ScenarioLoss01), row("roce-nopfc", bench.ScenarioLoss01)
	if r := float64(spray.Mean) / float64(roce.Mean); r > 0.5 {
		t.Errorf("0.1%% loss: spray's mean %v is %.2fx roce's %v; want at most 0.5x", spray.Mean, r, roce.Mean)
	}
	if r := float64(spray.P999) / float64(roce.P999); r > 0.5 {
		t.Errorf("0.1%% loss: spray's p99.9 %v is %.2fx roce's %v; want at most 0.5x", spray.P999, r, roce.P999)
	}
	fail := row("spray", bench.ScenarioSpineFail)
	const spines = 2 // the default testbed's
	if keep := float64(lossless.Mean) / float64(fail.Mean); keep < 0.9*(spines-1)/spines {
		t.Errorf("spine failure: spray's mean %v keeps %.2f of its lossless rate (%v); want at least %.2f", fail.Mean, keep, lossless.Mean, 0.9*(spines-1)/spines)
	}
	t.Logf("spray: %.2f of the limit lossless; at 0.1%% loss mean %.2fx roce's; %.2f of its rate after a spine failure",
		lossless.AlgBW/res.AllToAllLimit, float64(spray.Mean)/float64(roce.Mean), float64(lossless.Mean)/float64(fail.Mean))
}
