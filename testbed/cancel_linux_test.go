package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/sprayfabric/spray/internal/testutil"
)

// cancelAfter is a context that reports itself cancelled from its n-th
// call of Err on: a build cancelled part-way, at a known step.
type cancelAfter struct {
	context.Context
	n int
}

func (c *cancelAfter) Err() error {
	if c.n--; c.n < 0 {
		return context.Canceled
	}
	return nil
}

// TestNewFabricStopsOnCancel: a leaf-spine build whose context is
// cancelled after some of its namespaces exist stops at the next step
// with an error wrapping the cause, and removes what it built.
func TestNewFabricStopsOnCancel(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	c, err := LeafSpineConfig{Hosts: 1, Leaves: 2, Spines: 2}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("spx%d-", os.Getpid()%100000)
	ours := func(name string) bool { return strings.HasPrefix(name, prefix) }
	for _, n := range []int{2, 7, 14} { // among the namespaces, the handles, the veths
		_, err := newFabric(&cancelAfter{Context: context.Background(), n: n}, prefix, c)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled after %d steps: %v, want context.Canceled", n, err)
		}
		if left, err := leftoversMatching(ours); err != nil || len(left) != 0 {
			t.Fatalf("cancelled after %d steps: left %v (%v)", n, left, err)
		}
	}
}
