package cc_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport"
	"github.com/sprayfabric/spray/transport/transporttest"
)

// transferResult is what a transfer over a link/mem bottleneck showed.
type transferResult struct {
	elapsed    time.Duration
	queueDrops uint64
	retrans    uint64
}

// runTransfer sends msgs from one engine to another over a link/mem fabric
// with a 10 Gb/s, 64 KiB egress queue, under a simulated clock, with the
// sender's controller from mk, and checks that every byte arrives intact.
func runTransfer(t *testing.T, seed uint64, mk func() cc.Controller, msgs [][]byte) transferResult {
	t.Helper()
	p := transporttest.NewPairWith(t,
		mem.Config{Seed: seed, Delay: 2 * time.Microsecond, Bandwidth: 10e9, QueueBytes: 64 << 10},
		transport.Config{Seed: seed, CC: mk},
		transporttest.Options{ConfigB: func(c *transport.Config) { c.CC = nil }})
	for i, m := range msgs {
		if err := p.QA.Post(transport.WorkRequest{ID: uint64(i + 1), Op: transport.OpSend, Data: m}); err != nil {
			t.Fatal(err)
		}
	}
	done := func() bool { return len(p.CA) >= len(msgs) && len(p.CB) >= len(msgs) }
	if err := p.Run(clock.Time(time.Minute), done); err != nil {
		t.Fatalf("%v: %d/%d received", err, len(p.CB), len(msgs))
	}
	for i, c := range p.CB {
		if c.Err != nil || !bytes.Equal(c.Data, msgs[i]) {
			t.Fatalf("message %d: err %v, %d bytes, want %d bytes intact", i, c.Err, len(c.Data), len(msgs[i]))
		}
	}
	return transferResult{elapsed: time.Duration(p.Clock.Now()), queueDrops: p.Fabric.Stats().QueueDrops, retrans: p.QA.Stats().Retransmits}
}

// TestTransferOverBottleneck runs each controller through the transport
// over a 10 Gb/s bottleneck: every message arrives intact; an uncontrolled
// sender overflows the queue, while Swift (from delay) and HPCC and DCQCN
// (pacing at the configured line rate: no INT or CNPs here) keep the link
// busy without a drop.
func TestTransferOverBottleneck(t *testing.T) {
	r := testutil.Rand(t)
	seed := r.Uint64()
	msgs := make([][]byte, 32)
	total := 0
	for i := range msgs {
		msgs[i] = make([]byte, 64<<10+r.IntN(64<<10))
		for j := range msgs[i] {
			msgs[i][j] = byte(r.Uint32())
		}
		total += len(msgs[i])
	}
	ideal := time.Duration(float64(total) / 1.25e9 * 1e9)
	res := map[string]transferResult{}
	for _, tc := range []struct {
		name string
		mk   func() cc.Controller
	}{
		{"fixed", func() cc.Controller { return cc.Fixed{} }},
		{"swift", func() cc.Controller {
			return cc.NewSwift(cc.SwiftConfig{PacketBytes: 1400, BaseTarget: 20 * time.Microsecond})
		}},
		{"swift from 200 packets", func() cc.Controller {
			return cc.NewSwift(cc.SwiftConfig{PacketBytes: 1400, BaseTarget: 20 * time.Microsecond, InitCwnd: 200})
		}},
		{"hpcc", func() cc.Controller { return cc.NewHPCC(cc.HPCCConfig{LineRate: 1.25e9}) }},
		{"dcqcn", func() cc.Controller { return cc.NewDCQCN(cc.DCQCNConfig{LineRate: 1.25e9}) }},
	} {
		got := runTransfer(t, seed, tc.mk, msgs)
		res[tc.name] = got
		t.Logf("%s: %d bytes in %v (line rate: %v), %d queue drops, %d retransmits", tc.name, total, got.elapsed, ideal, got.queueDrops, got.retrans)
		// A window that starts far above the path's capacity overflows the
		// queue once and pays for the losses (RACK, then an RTO for a lost
		// tail: about 1 ms here): it gets a looser bound.
		bound := ideal * 5 / 4
		if tc.name == "swift from 200 packets" {
			bound = ideal * 3
		}
		if tc.name != "fixed" && got.elapsed > bound {
			t.Errorf("%s: %v for what the link carries in %v", tc.name, got.elapsed, ideal)
		}
	}
	if res["fixed"].queueDrops == 0 {
		t.Error("an uncontrolled sender did not overflow the queue: the test proves nothing")
	}
	// Started at 200 packets (four times the queue), Swift loses the
	// excess of its first window or so, then stops the drops.
	if d, f := res["swift from 200 packets"].queueDrops, res["fixed"].queueDrops; d > f/20 {
		t.Errorf("swift from 200 packets: %d queue drops, uncontrolled %d", d, f)
	}
	for _, name := range []string{"swift", "hpcc", "dcqcn"} {
		if d := res[name].queueDrops; d != 0 {
			t.Errorf("%s: %d queue drops", name, d)
		}
	}
}
