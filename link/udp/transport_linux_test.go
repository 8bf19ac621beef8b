//go:build linux

package udp

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/transport"
)

// TestTransportRuns sends 8 MiB through spray's transport over two UDP
// links with offload on loopback: the message arrives intact (a hash),
// the link reports Segments, and the transport's runs on one entropy
// leave as UDP_SEGMENT messages of several frames each.
func TestTransportRuns(t *testing.T) {
	r := testutil.Rand(t)
	ipA, ipB := loopbackPair(r)
	base := testutil.LoopbackPort(r, 20000, 30000)
	var ents []uint16
	for k := range 8 {
		ents = append(ents, base+uint16(k))
	}
	a := open(t, Config{Local: ipA, Entropies: ents, FrameSize: 3514, SocketBuffer: 16 << 20})
	b := open(t, Config{Local: ipB, Entropies: ents, FrameSize: 3514, SocketBuffer: 16 << 20})
	if a.Info().Segments < 2 {
		t.Fatalf("a link with offload reports Segments %d", a.Info().Segments)
	}
	cfg := transport.Config{Seed: testutil.Seed(t), CC: func() cc.Controller { return &cc.Fixed{} }}
	ea, err := transport.NewEngine(a, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Seed++
	eb, err := transport.NewEngine(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	qa, err := ea.CreateQP()
	if err != nil {
		t.Fatal(err)
	}
	qb, err := eb.CreateQP()
	if err != nil {
		t.Fatal(err)
	}
	if err := qa.Connect(qb.Info()); err != nil {
		t.Fatal(err)
	}
	if err := qb.Connect(qa.Info()); err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, 8<<20)
	for i := range msg {
		msg[i] = byte(i*31 + i>>11)
	}
	if err := qa.Post(transport.WorkRequest{ID: 1, Op: transport.OpSend, Data: msg}); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewSystem()
	var ca, cb []transport.Completion
	deadline := time.Now().Add(2 * time.Minute)
	for len(ca) == 0 || len(cb) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("not done in 2 minutes: %+v, %+v", qa.Stats(), qb.Stats())
		}
		wa, err := ea.Step(clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		wb, err := eb.Step(clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		ca, cb = ea.Completions(ca), eb.Completions(cb)
		if !wa && !wb {
			if err := b.Wait(100 * time.Microsecond); err != nil {
				t.Fatal(err)
			}
		}
	}
	if ca[0].Err != nil || cb[0].Err != nil || cb[0].Op != transport.OpRecv || sha256.Sum256(cb[0].Data) != sha256.Sum256(msg) {
		t.Fatalf("message not delivered intact: %+v, %+v", ca[0], cb[0])
	}
	st := a.Counters()
	if st.TxSegmentMsgs == 0 || st.TxSegmented < 4*st.TxSegmentMsgs {
		t.Fatalf("%d frames in %d UDP_SEGMENT messages, want runs of 4 frames or more on average", st.TxSegmented, st.TxSegmentMsgs)
	}
	t.Logf("%d frames in %d UDP_SEGMENT messages; %d retransmissions", st.TxSegmented, st.TxSegmentMsgs, qa.Stats().Retransmits)
}
