package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sprayfabric/spray/bench"
)

// TestIncastFlags: bad arguments are refused before any testbed is built,
// and the table prints one row per result.
func TestIncastFlags(t *testing.T) {
	for _, args := range [][]string{{"--testbed", "pair"}, {"--testbed", "leafspine:0x1x1"}, {"extra"}, {"--senders", "x"}} {
		if err := runIncast(args); err == nil {
			t.Errorf("spray incast %q: no error", args)
		}
	}
	var b bytes.Buffer
	printIncast(&b, []bench.IncastResult{{Controller: "hpcc", Senders: 4, Jain: 1, JoinMs: 50}, {Controller: "none", Senders: 4, JoinMs: -1}})
	out := b.String()
	if lines := strings.Count(out, "\n"); lines != 3 || !strings.Contains(out, "hpcc") || !strings.Contains(out, "never") {
		t.Fatalf("table:\n%s", out)
	}
}
