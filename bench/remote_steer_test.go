package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/link/rss"
	"github.com/sprayfabric/spray/transport"
)

// noRSS hides a multi-queue port's RSS configuration: four engines, no
// steering to offer, like an xdp link on a device without RSS.
type noRSS struct{ link.Multi }

// The steering in perf's hellos: it survives JSON, a malformed one is an
// error, and hellos with and without it are understood by peers of
// either kind. Then perf's QP exchange (serverQP, clientQP) over link/mem
// ports with four queues each: with both sides' RSS known, the run's
// bytes arrive intact and neither side hands a frame over; with the
// server's RSS unknown, the server's frames are still steered (the client
// hands nothing over) and the client's are handed over at the server.
func TestPerfHelloSteering(t *testing.T) {
	tab := rss.Spread(4, 128, nil)
	enc, _ := tab.MarshalBinary()
	qp := transport.QPInfo{QPN: 9, IP: netip.MustParseAddr("10.0.0.2")}
	b, err := json.Marshal(hello{QP: &qp, Steer: &helloSteering{Queue: 3, RSS: enc}})
	if err != nil {
		t.Fatal(err)
	}
	var h hello
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	st, err := h.Steer.steering(*h.QP)
	if err != nil || st == nil || st.Queue != 3 || st.IP != qp.IP || !slices.Equal(st.Table.Indir, tab.Indir) {
		t.Fatalf("%s decodes to %+v, %v", b, st, err)
	}
	// A peer that predates steering decodes the hello all the same.
	var old struct {
		QP *transport.QPInfo `json:"qp,omitempty"`
	}
	if err := json.Unmarshal(b, &old); err != nil || old.QP == nil {
		t.Fatalf("an old peer's decoding: %+v, %v", old, err)
	}
	// A hello without steering is no steering; a malformed one an error.
	if st, err := (*helloSteering)(nil).steering(qp); st != nil || err != nil {
		t.Fatalf("no steering: %+v, %v", st, err)
	}
	for _, bad := range []*helloSteering{{Queue: 1}, {Queue: 1, RSS: enc[:10]}, {Queue: -1, RSS: enc}, {Queue: 1 << 16, RSS: enc}} {
		if _, err := bad.steering(qp); err == nil {
			t.Errorf("steering %+v accepted", bad)
		}
	}

	for _, serverRSS := range []bool{true, false} {
		t.Run(fmt.Sprintf("server RSS %v", serverRSS), func(t *testing.T) {
			client, server := perfOverMem(t, serverRSS)
			if client.HandedOver != 0 {
				t.Errorf("the client handed %d frames over", client.HandedOver)
			}
			if serverRSS && server.HandedOver != 0 {
				t.Errorf("the server handed %d frames over", server.HandedOver)
			}
			if !serverRSS && server.HandedOver == 0 {
				t.Error("the server handed nothing over, though the client could not steer to it")
			}
		})
	}
}

// perfOverMem runs perf's QP exchange and a short run between two
// 4-engine endpoints on link/mem, over a net.Pipe control connection, and
// returns the client's and the server's engine counters.
func perfOverMem(t *testing.T, serverRSS bool) (client, server transport.EngineStats) {
	seed := testutil.Seed(t)
	fab := mem.NewFabric(mem.Config{Seed: seed, Delay: 2 * time.Microsecond}, clock.NewSystem())
	t.Cleanup(func() { fab.Close() })
	macC, macS := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
	pc, err := fab.NewMultiPort(macC, netip.MustParseAddr("10.0.0.1"), 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := fab.NewMultiPort(macS, netip.MustParseAddr("10.0.0.2"), 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	var sl link.Link = ps
	if !serverRSS {
		sl = noRSS{ps}
	}
	tc := transport.Config{Seed: seed, MaxRetries: 50}
	ec, err := transport.NewEndpoint(pc, tc)
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	tc.Seed++
	es, err := transport.NewEndpoint(sl, tc)
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cc, sc := net.Pipe()
	defer cc.Close()
	defer sc.Close()
	served := make(chan error, 1)
	go func() {
		k := newControl(ctx, sc)
		defer k.stop()
		qp, err := serverQP(ctx, k, es, KindXDP, 0, macC, nil)
		if err == nil {
			err = PerfServer(ctx, &SprayConn{C: qp, CQ: es.CQ()})
		}
		served <- err
	}()
	k := newControl(ctx, cc)
	defer k.stop()
	sh, err := k.recv(ctx, "server's answer")
	if err != nil {
		t.Fatal(err)
	}
	if (sh.Steer != nil) != serverRSS {
		t.Fatalf("server's steering %+v with RSS %v", sh.Steer, serverRSS)
	}
	qp, err := clientQP(ctx, k, ec, sh, macS, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := PerfClient(ctx, &SprayConn{C: qp, CQ: ec.CQ()}, PerfConfig{Total: 8 << 20, MsgSize: 256 << 10, Pings: 20, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if !res.Integrity {
		t.Fatal("integrity check failed")
	}
	if client, err = ec.Stats(ctx); err != nil {
		t.Fatal(err)
	}
	if server, err = es.Stats(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("handed over: client %d, server %d", client.HandedOver, server.HandedOver)
	return client, server
}
