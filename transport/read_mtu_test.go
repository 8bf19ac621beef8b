package transport

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
)

// TestReadResponseNeverArrives: a READ from a 1500-byte-MTU requester of
// a 9000-byte-MTU responder, whose response frames the requester's link
// drops, fails with ErrPeerUnreachable naming the MTU, in simulated
// seconds, in both profiles; it does not wait forever.
func TestReadResponseNeverArrives(t *testing.T) {
	for _, prof := range []Profile{Spray, RoCE} {
		t.Run(prof.String(), func(t *testing.T) {
			seed := testutil.Seed(t)
			big := 0
			mc := mem.Config{Seed: seed, Filter: func(f []byte) bool {
				if len(f) > 1514 {
					big++
					return false
				}
				return true
			}}
			small := readConfig(prof, seed)
			small.MTU = 1514
			s := newSimPairOf(t, mc, small, readConfig(prof, seed+1), nil)
			src := make([]byte, 64<<10)
			mr := s.eb.Register(src, AccessRemoteRead)
			if err := s.qa.Post(WorkRequest{ID: 1, Op: OpRead, Data: make([]byte, len(src)), Remote: mr.Remote(0)}); err != nil {
				t.Fatal(err)
			}
			limit := clock.Time(time.Minute)
			if err := s.run(limit, func() bool { return len(s.ca) > 0 }); err != nil && len(s.ca) == 0 {
				t.Fatalf("the READ never ended: %v (simulated %v, %d big frames dropped)", err, s.clk.Now(), big)
			}
			c := s.ca[0]
			if !errors.Is(c.Err, ErrPeerUnreachable) || big == 0 {
				t.Fatalf("completion %+v after %d big frames dropped, want ErrPeerUnreachable", c, big)
			}
			if prof == Spray && !strings.Contains(c.Err.Error(), "MTU") {
				t.Fatalf("the error does not name the MTU: %v", c.Err)
			}
			t.Logf("simulated %v: %v", s.clk.Now(), c.Err)
		})
	}
}
