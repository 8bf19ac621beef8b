package pcap_test

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/sprayfabric/spray/bench"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/internal/wirecheck"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/pcap"
	"github.com/sprayfabric/spray/link/route"
	"github.com/sprayfabric/spray/testbed"
	"github.com/sprayfabric/spray/transport"
	"github.com/sprayfabric/spray/xdp"
)

// TestReadXDPTshark reads a region across a veth pair between two network
// namespaces over AF_XDP in the classic profile, captures the requester's
// link, and has tshark name the frames RDMA READ Request and Responses
// (First, Middle, Last, Only). Root only.
func TestReadXDPTshark(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := testbed.NewPair(ctx, testbed.PairConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	open := func(h *testbed.Host) link.Link {
		var l link.Link
		err := h.Do(func() error {
			var err error
			l, err = bench.OpenLink(bench.LinkSpec{Kind: bench.KindXDP, Ifindex: h.Ifindex, MAC: h.MAC, IP: h.IP, FrameSize: h.MTU + 14})
			return err
		})
		testutil.SkipIfNotSupported(t, err, xdp.ErrNotSupported)
		return l
	}
	path := filepath.Join(t.TempDir(), "read.pcap")
	w := createWriter(t, path)
	la, lb := pcap.Wrap(open(p.A), w), open(p.B)
	testutil.RealClock(t)
	cfg := transport.Config{Profile: transport.RoCE, Seed: testutil.Seed(t)}
	ea, err := transport.NewEndpoint(la, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ea.Close()
	cfg.Seed++
	eb, err := transport.NewEndpoint(lb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer eb.Close()
	hop := func(h *testbed.Host, to *testbed.Host) (mac [6]byte) {
		if err := h.Do(func() error {
			r, err := route.Resolve(ctx, to.IP)
			mac = r.DstMAC
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return mac
	}
	ca, err := ea.CreateQP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := eb.CreateQP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ia, ib := ca.Info(), cb.Info()
	ia.MAC, ib.MAC = hop(p.B, p.A), hop(p.A, p.B)
	if err := ca.Connect(ctx, ib); err != nil {
		t.Fatal(err)
	}
	if err := cb.Connect(ctx, ia); err != nil {
		t.Fatal(err)
	}
	region := make([]byte, 64<<10)
	rng := testutil.Rand(t)
	for i := range region {
		region[i] = byte(rng.Uint32())
	}
	mr, err := eb.Register(ctx, region, transport.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	small, large := make([]byte, 100), make([]byte, 20000)
	if err := ca.Read(ctx, small, mr.Remote(7)); err != nil {
		t.Fatal(err)
	}
	if err := ca.Read(ctx, large, mr.Remote(1000)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(small, region[7:107]) || !bytes.Equal(large, region[1000:21000]) {
		t.Fatal("the READs returned other bytes")
	}
	if err := ea.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = wirecheck.CheckWithTshark(path)
	testutil.SkipIfToolMissing(t, err, wirecheck.ErrToolMissing)
	names, err := wirecheck.TsharkOpcodeNames(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"RC RDMA Read Request", "RC RDMA Read Response First", "RC RDMA Read Response Middle", "RC RDMA Read Response Last", "RC RDMA Read Response Only"} {
		if names[want] == 0 {
			t.Fatalf("tshark named no frame %q; it named %v", want, names)
		}
	}
	t.Logf("tshark names %v", names)
}
