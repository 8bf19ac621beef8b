package cm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport"
)

// hasQP reports whether ep's QP table holds the QP numbered qpn.
func hasQP(t *testing.T, ep *Endpoint, qpn uint32) bool {
	t.Helper()
	var s transport.Snapshot
	if err := ep.Snapshot(context.Background(), &s); err != nil {
		t.Fatal(err)
	}
	for _, q := range s.QPs {
		if q.QPN == qpn {
			return true
		}
	}
	return false
}

// halfOpen sends a request for service to the connection manager at addr
// and returns the TCP connection, never sending the RTU.
func halfOpen(addr, service string, qpn uint32) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	req := connReq{qp: transport.QPInfo{QPN: qpn, PSN: 1, MAC: macA, IP: ipA}, service: service}
	if _, err := c.Write(appendMsg(nil, msgREQ, req.marshal())); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// heapInUse returns the heap's bytes in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// vmRSS returns the process's resident set from /proc, or "?".
func vmRSS() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "?"
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// TestCMHalfOpenTimeout holds many requests open past the handshake
// timeout at once: the listener answers them with a REP (unless the
// timeout came first on a loaded machine), and when it closes one it has
// already destroyed its QP, which the QP table confirms; every one
// counts as timed out (or rejected, if its QP could not be created in
// time).
func TestCMHalfOpenTimeout(t *testing.T) {
	base := runtime.NumGoroutine()
	seed := testutil.Seed(t)
	fab := mem.NewFabric(mem.Config{Seed: seed}, clock.NewSystem())
	defer fab.Close()
	eb := memEndpoint(t, fab, macB, ipB, seed, func(o *Options) {
		o.HandshakeTimeout = 3 * time.Second
		o.MaxHandshakes = 1000
	})
	ln, err := eb.Listen("x")
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	qpns := make([]uint32, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c, err := halfOpen(ln.Addr(), "x", uint32(0x100+i))
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			m, err := readMsg(c)
			if err == io.EOF || err == nil && m.typ == msgREJ {
				return // timed out before its QP was connected (a loaded machine)
			}
			if err != nil || m.typ != msgREP {
				errs <- fmt.Errorf("request %d: %+v, %v, want a REP", i, m, err)
				return
			}
			rep, err := parseRep(m.body, m.version)
			if err != nil {
				errs <- err
				return
			}
			qpns[i] = rep.qp.QPN
			// The listener gives up on the silent dialer: EOF.
			if _, err := readMsg(c); err != io.EOF {
				errs <- fmt.Errorf("request %d: %v after the REP, want EOF", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	replied := 0
	for i, q := range qpns {
		if q == 0 {
			continue
		}
		replied++
		if hasQP(t, eb, q) {
			t.Fatalf("request %d: QP %#x still in the table after its handshake timed out", i, q)
		}
	}
	st := eb.CMStats()
	t.Logf("%d of %d requests got a REP; %+v", replied, n, st)
	if replied == 0 || st.TimedOut+st.Rejected != n || st.TimedOut < uint64(replied) || st.HalfOpen != 0 || st.Accepted != 0 {
		t.Fatalf("stats %+v, %d replied: want every one of %d timed out or rejected", st, replied, n)
	}
	if qps(t, eb) != 0 {
		t.Fatalf("%d QPs left", qps(t, eb))
	}
	eb.Close()
	testutil.WaitGoroutines(t, base)
}

// TestCMFlood fills a listener that holds 32 requests at most with
// requests that never complete, waits, then sends a flood of 10,000
// more with a legitimate Dial in the middle: the Dial connects and moves a message, the listener drops the oldest
// requests and refuses others (counted), never holds more than 32 (nor
// more than 64 QPs for them), and once the flood ends its QPs,
// goroutines and heap are back where they started.
func TestCMFlood(t *testing.T) {
	base := runtime.NumGoroutine()
	seed := testutil.Seed(t)
	fab := mem.NewFabric(mem.Config{Seed: seed}, clock.NewSystem())
	defer fab.Close()
	// The flood keeps the listener's engine busy creating QPs: give the
	// legitimate connection's ACKs time.
	patient := func(o *Options) { o.Transport.MaxRTO, o.Transport.MaxRetries = time.Second, 30 }
	ea := memEndpoint(t, fab, macA, ipA, seed, patient)
	eb := memEndpoint(t, fab, macB, ipB, seed+1, patient, func(o *Options) {
		o.MaxHandshakes = 32
		o.HandshakeTimeout = 2 * time.Second
	})
	ln, err := eb.Listen("x")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	heap0, rss0 := heapInUse(), vmRSS()

	// Requests that stay unanswered past a twentieth of the handshake
	// timeout fill the listener first, so that the flood's first requests
	// drop them: evictions happen however fast the flood runs.
	var stale []net.Conn
	defer func() {
		for _, c := range stale {
			c.Close()
		}
	}()
	for i := range 32 {
		c, err := halfOpen(ln.Addr(), "x", uint32(0x100+i))
		if err != nil {
			t.Fatal(err)
		}
		stale = append(stale, c)
	}
	for eb.CMStats().HalfOpen < 32 {
		if ctx.Err() != nil {
			t.Fatalf("the listener holds %d requests, want 32", eb.CMStats().HalfOpen)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(2*time.Second/20 + 50*time.Millisecond)

	const floods, per, held = 4, 2500, 16
	var sent sync.WaitGroup
	midway := make(chan struct{})
	var once sync.Once
	var maxHalfOpen, maxQPs, maxG int
	var mu sync.Mutex
	errs := make(chan error, floods+1)
	for f := range floods {
		sent.Go(func() {
			var open []net.Conn
			defer func() {
				for _, c := range open {
					c.Close()
				}
			}()
			for i := range per {
				c, err := halfOpen(ln.Addr(), "x", uint32(0x1000+f*per+i))
				if err != nil {
					errs <- err
					return
				}
				open = append(open, c)
				if len(open) > held {
					open[0].Close()
					open = open[1:]
				}
				if f == 0 && i == per/4 {
					once.Do(func() { close(midway) })
				}
				if i%64 == 0 {
					h := eb.CMStats().HalfOpen
					n, _ := eb.QPs(ctx)
					g := runtime.NumGoroutine()
					mu.Lock()
					maxHalfOpen = max(maxHalfOpen, h)
					maxQPs = max(maxQPs, n)
					maxG = max(maxG, g)
					mu.Unlock()
				}
			}
		})
	}
	sent.Go(func() {
		<-midway
		a, err := ea.Dial(ctx, ln.Addr(), "x")
		if err != nil {
			errs <- fmt.Errorf("a legitimate Dial during the flood: %w", err)
			return
		}
		b, err := ln.Accept(ctx)
		if err != nil {
			errs <- err
			return
		}
		if err := exchange(ctx, a, b, [][]byte{[]byte("through the flood")}); err != nil {
			errs <- err
		}
		a.Close()
		<-b.Done()
	})
	sent.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// The flood's last connections are closed: the listener's handlers
	// see it and end.
	deadline := time.Now().Add(30 * time.Second)
	for eb.CMStats().HalfOpen != 0 || qps(t, eb) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after the flood: %+v, %d QPs", eb.CMStats(), qps(t, eb))
		}
		time.Sleep(10 * time.Millisecond)
	}
	st := eb.CMStats()
	t.Logf("most QPs %d, goroutines %d", maxQPs, maxG)
	t.Logf("stats %+v, most half-open seen %d; heap in use %d -> %d KiB; RSS %s -> %s",
		st, maxHalfOpen, heap0>>10, heapInUse()>>10, rss0, vmRSS())
	// Sampled: the requests answered and those being dropped hold a QP
	// each, and the legitimate connection one.
	if maxHalfOpen > 32 || maxQPs > 2*32+1 || st.Evicted == 0 || st.Refused == 0 || st.Accepted != 1 {
		t.Fatalf("stats %+v, most half-open %d, most QPs %d: want at most 32 and 65, some evicted and refused, 1 accepted", st, maxHalfOpen, maxQPs)
	}
	if h := heapInUse(); h > heap0+16<<20 {
		t.Fatalf("heap in use %d KiB after the flood, %d before", h>>10, heap0>>10)
	}
	debug.FreeOSMemory()
	t.Logf("RSS %s once the runtime returned free memory", vmRSS())
	ea.Close()
	eb.Close()
	testutil.WaitGoroutines(t, base)
	if err := ctx.Err(); errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
}
