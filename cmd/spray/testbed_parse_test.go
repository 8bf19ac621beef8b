package main

import (
	"bytes"
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sprayfabric/spray/ebpf"
)

func TestParseECN(t *testing.T) {
	got, err := parseECN("20us,200us,0.2")
	want := ebpf.ECNConfig{KMin: 20 * time.Microsecond, KMax: 200 * time.Microsecond, PMax: 0.2}
	if err != nil || got != want {
		t.Fatalf("parseECN = %+v, %v; want %+v", got, err, want)
	}
	if got, err := parseECN(""); err != nil || got != (ebpf.ECNConfig{}) {
		t.Fatalf("parseECN(\"\") = %+v, %v; want off", got, err)
	}
	for _, bad := range []string{"20us", "20us,200us", "a,200us,0.2", "20us,b,0.2", "20us,200us,c",
		"200us,20us,0.2", "20us,200us,0", "20us,200us,1.5", "-1us,200us,0.2", "0,0,0.5", "20us,200us,NaN"} {
		if _, err := parseECN(bad); err == nil {
			t.Errorf("parseECN(%q) accepted", bad)
		}
	}
}

func TestParseBurst(t *testing.T) {
	for in, want := range map[string]ebpf.GilbertElliott{
		"0.01,0.3":          {P: 0.01, R: 0.3},
		"0.01,0.3,0,0.5":    {P: 0.01, R: 0.3, LossBad: 0.5},
		"0,0.5,0.001":       {R: 0.5, LossGood: 0.001},
		"off":               {},
		"0":                 {},
		"1,1,1,1":           {P: 1, R: 1, LossGood: 1, LossBad: 1},
		"0.5,0.5,0.25,0.75": {P: 0.5, R: 0.5, LossGood: 0.25, LossBad: 0.75},
	} {
		got, err := parseBurst(in)
		if err != nil || got != want {
			t.Errorf("parseBurst(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0.1", "0.1,0.2,0.3,0.4,0.5", "2,0.1", "0.1,-1", "x,y", "0,0.5", "NaN,0.1"} {
		if _, err := parseBurst(bad); err == nil {
			t.Errorf("parseBurst(%q) accepted", bad)
		}
	}
}

func TestParseInterleaved(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	name := fs.String("name", "", "")
	all := fs.Bool("all", false, "")
	pos, err := parseInterleaved(fs, []string{"leafspine:1x1x1", "--name", "x", "two", "--all", "three"})
	if err != nil || !reflect.DeepEqual(pos, []string{"leafspine:1x1x1", "two", "three"}) || *name != "x" || !*all {
		t.Fatalf("parseInterleaved = %q, %v; name %q all %v", pos, err, *name, *all)
	}
	if _, err := parseInterleaved(fs, []string{"a", "--nope"}); err == nil {
		t.Fatal("an unknown flag was accepted")
	}
}

// FuzzTestbedFlags: the fault and ECN parsers never panic, and what they
// accept is within the ranges the fabric programs take.
func FuzzTestbedFlags(f *testing.F) {
	for _, s := range []string{"20us,200us,0.2", "0.01,0.3", "0.01,0.3,0,0.5", "off", "1e-300,1,1,1", "1ms,1ms,1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if g, err := parseBurst(s); err == nil {
			for _, p := range []float64{g.P, g.R, g.LossGood, g.LossBad} {
				if !(p >= 0 && p <= 1) {
					t.Fatalf("parseBurst(%q) accepted %+v", s, g)
				}
			}
		}
		if e, err := parseECN(s); err == nil && s != "" {
			if e.KMin < 0 || e.KMax < e.KMin || !(e.PMax > 0 && e.PMax <= 1) || strings.Count(s, ",") != 2 {
				t.Fatalf("parseECN(%q) accepted %+v", s, e)
			}
		}
		var p probFlag
		if p.Set(s) == nil && !(p.v >= 0 && p.v <= 1) {
			t.Fatalf("--loss %q accepted %v", s, p.v)
		}
	})
}

// TestDownAllOnlyMine: down --all keeps the caller's persistent testbeds
// and leaves another login user's, and one of unknown maker, saying so.
func TestDownAllOnlyMine(t *testing.T) {
	logins := map[string]int{"mine": 1000, "theirs": 1001, "old": -1}
	var out bytes.Buffer
	got := onlyMine([]string{"mine", "theirs", "old"}, func(n string) int { return logins[n] }, 1000, &out)
	if len(got) != 1 || got[0] != "mine" {
		t.Fatalf("down --all would remove %v, want [mine]", got)
	}
	for _, want := range []string{"testbed theirs left alone: made by", "testbed old left alone: made by an unknown user (spray testbed down old removes it)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output %q lacks %q", out.String(), want)
		}
	}
}
