package main

import (
	"bytes"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

// TestSimCommand runs spray sim at a small size: the JSON has a row per
// profile and scenario with every flow done, the PNG decodes, and a
// second run with the same seed writes the same JSON bytes.
func TestSimCommand(t *testing.T) {
	dir := t.TempDir()
	run := func(name string) []byte {
		j := filepath.Join(dir, name+".json")
		p := filepath.Join(dir, name+".png")
		err := runSim([]string{"-q", "--topo", "leafspine:2x2x2,rate=10gbit", "--workload", "alltoall:256k",
			"--scenarios", "lossless,loss0.1", "--json", j, "--png", p})
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := png.Decode(f); err != nil {
			t.Fatalf("PNG: %v", err)
		}
		b, err := os.ReadFile(j)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b := run("a"), run("b")
	if !bytes.Equal(a, b) {
		t.Fatal("two runs with the same seed wrote different JSON")
	}
	var res struct {
		Rows []struct {
			Profile, Scenario string
			Flows, Done       int
		}
	}
	if err := json.Unmarshal(a, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 4 {
		t.Fatalf("%d rows, want 4", len(res.Rows))
	}
	for _, r := range res.Rows {
		if r.Flows != 12 || r.Done != r.Flows {
			t.Errorf("%s/%s: %d of %d flows done", r.Scenario, r.Profile, r.Done, r.Flows)
		}
	}
	if err := runSim([]string{"-q", "--topo", "ring:4"}); err == nil {
		t.Error("a bad topology gave no error")
	}
}
