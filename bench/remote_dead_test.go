package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/testbed"
	"github.com/sprayfabric/spray/transport"
)

// peerGoneBound bounds the time from a peer's death to the survivor's
// error. The survivor learns it from its control connection's FIN, so it
// takes milliseconds; the bound leaves room for a loaded 2-core machine.
const peerGoneBound = 3 * time.Second

// The retransmission bounds of the perf runs of TestRemotePerfPeerDies:
// death is learnt from the control connection; the QPs of the live runs
// must outlast a loaded machine's scheduling stalls (about 5 s of
// silence before a QP fails).
const (
	loadedMinRTO     = 5 * time.Millisecond
	loadedMaxRetries = 50
)

// logLines collects log lines for a test to wait on.
type logLines struct {
	mu    sync.Mutex
	lines []string
	t     *testing.T
}

func (l *logLines) logf(format string, args ...any) {
	l.t.Helper()
	l.t.Logf(format, args...)
	l.mu.Lock()
	l.lines = append(l.lines, strings.TrimSpace(fmt.Sprintf(format, args...)))
	l.mu.Unlock()
}

// wait returns the first line holding every one of subs, or "" after d.
func (l *logLines) wait(d time.Duration, subs ...string) string {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		l.mu.Lock()
		for i, s := range l.lines {
			ok := true
			for _, sub := range subs {
				ok = ok && strings.Contains(s, sub)
			}
			if ok {
				l.lines = append(l.lines[:i:i], l.lines[i+1:]...)
				l.mu.Unlock()
				return s
			}
		}
		l.mu.Unlock()
	}
	return ""
}

// openFDs counts this process's open file descriptors (sockets, AF_XDP,
// eBPF programs and links among them).
func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// settles waits until f() returns want, and reports the last value.
func settles(want int, f func() int) (int, bool) {
	var got int
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if got = f(); got <= want {
			return got, true
		}
	}
	return got, false
}

// xdpAttached reports whether an XDP program is attached to h's veth.
func xdpAttached(t *testing.T, h *testbed.Host) bool {
	var on bool
	if err := h.Do(func() error {
		l, err := netlink.LinkByName(h.Link)
		if err != nil {
			return err
		}
		on = l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return on
}

// TestRemotePerfPeerDies: in the middle of a 256 MiB perf run between two
// namespaces, over udp and xdp links, one side dies (its context ends: its
// control connection, QP, link and steering program go, as when the
// process is killed). The survivor ends its run with ErrPeerGone within
// peerGoneBound; a server then serves the next client in full; and once
// everything is idle no goroutine, file descriptor (socket, AF_XDP,
// eBPF) or XDP attachment is left beyond what was there before.
func TestRemotePerfPeerDies(t *testing.T) {
	p := newPair(t)
	addr := netip.AddrPortFrom(p.B.IP, DefaultControlPort).String()
	listen := func() net.Listener {
		var ln net.Listener
		if err := p.B.Do(func() (err error) {
			ln, err = net.Listen("tcp", addr)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return ln
	}
	logs := &logLines{t: t}
	var frames atomic.Int64 // received by the server
	wrap := func(l link.Link) link.Link { return countingLink{l, &frames} }
	// midTransfer waits until the server has received n more frames.
	midTransfer := func(kind string, n int64) {
		t.Helper()
		from := frames.Load()
		for end := time.Now().Add(30 * time.Second); frames.Load() < from+n; time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("%s: the transfer never started", kind)
			}
		}
	}
	dial := func(ctx context.Context, kind string, total int64) (PerfResult, error) {
		var res PerfResult
		err := p.A.Do(func() (err error) {
			res, err = DialPerf(ctx, addr, RemoteRun{Kind: kind, Transport: transport.Config{Seed: 7, MinRTO: loadedMinRTO, MaxRetries: loadedMaxRetries},
				Perf: PerfConfig{Total: total, MsgSize: 256 << 10, Pings: 10, Seed: 7}})
			return err
		})
		return res, err
	}
	goroutines0, fds0 := runtime.NumGoroutine(), openFDs(t)

	for _, kind := range []string{KindUDP, KindXDP} {
		// The client dies.
		sctx, stopServer := context.WithCancel(context.Background())
		ln := listen()
		served := make(chan error, 1)
		go func() {
			served <- p.B.Do(func() error {
				return ServePerf(sctx, ln, RemoteRun{Logf: logs.logf, Wrap: wrap, Transport: transport.Config{MinRTO: loadedMinRTO, MaxRetries: loadedMaxRetries}})
			})
		}()
		cctx, kill := context.WithCancel(context.Background())
		clientDone := make(chan error, 1)
		go func() { _, err := dial(cctx, kind, 256<<20); clientDone <- err }()
		midTransfer(kind, 2000)
		kill()
		killed := time.Now()
		if err := <-clientDone; err == nil {
			t.Fatalf("%s: the client's 256 MiB run finished before it was killed", kind)
		}
		t.Logf("%s: the killed client returned in %v", kind, time.Since(killed))
		line := logs.wait(peerGoneBound+time.Second, "perf client", "peer gone")
		if line == "" {
			t.Fatalf("%s: the server did not notice the dead client", kind)
		}
		gone := time.Since(killed)
		t.Logf("%s: the server noticed the dead client in %v: %s", kind, gone, line)
		if gone > peerGoneBound {
			t.Errorf("%s: the server took %v to notice the dead client", kind, gone)
		}
		// The next client gets served in full.
		res, err := dial(context.Background(), kind, 8<<20)
		if err != nil || !res.Integrity {
			t.Fatalf("%s: the next client: %v (integrity %v)", kind, err, res.Integrity)
		}

		// Two clients at once, on the kinds that share an interface
		// (xdp takes turns).
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range errs {
			wg.Go(func() {
				var res PerfResult
				res, errs[i] = dial(context.Background(), kind, 8<<20)
				if errs[i] == nil && !res.Integrity {
					errs[i] = ErrIntegrity
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("%s: two clients at once: %v", kind, err)
		}

		// The server dies.
		stopServer()
		if err := <-served; err != nil {
			t.Fatal(err)
		}
		sctx, stopServer = context.WithCancel(context.Background())
		ln = listen()
		go func() {
			served <- p.B.Do(func() error {
				return ServePerf(sctx, ln, RemoteRun{Logf: logs.logf, Wrap: wrap, Transport: transport.Config{MinRTO: loadedMinRTO, MaxRetries: loadedMaxRetries}})
			})
		}()
		go func() { _, err := dial(context.Background(), kind, 256<<20); clientDone <- err }()
		midTransfer(kind, 2000)
		stopServer()
		killed = time.Now()
		select {
		case err := <-served:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(peerGoneBound):
			t.Fatalf("%s: ServePerf did not return %v after its context ended", kind, peerGoneBound)
		}
		select {
		case err := <-clientDone:
			gone := time.Since(killed)
			t.Logf("%s: the client noticed the dead server in %v: %v", kind, gone, err)
			if !errors.Is(err, ErrPeerGone) {
				t.Errorf("%s: client's error %v, want ErrPeerGone", kind, err)
			}
		case <-time.After(peerGoneBound):
			t.Fatalf("%s: the client did not notice the dead server within %v", kind, peerGoneBound)
		}

		if n, ok := settles(goroutines0, runtime.NumGoroutine); !ok {
			buf := make([]byte, 1<<20)
			t.Fatalf("%s: %d goroutines left, %d before:\n%s", kind, n, goroutines0, buf[:runtime.Stack(buf, true)])
		}
		if n, ok := settles(fds0, func() int { return openFDs(t) }); !ok {
			t.Fatalf("%s: %d file descriptors open, %d before", kind, n, fds0)
		}
		if xdpAttached(t, p.A) || xdpAttached(t, p.B) {
			t.Fatalf("%s: an XDP program is still attached", kind)
		}
	}
}

// countingLink counts the frames a link receives.
type countingLink struct {
	link.Link
	n *atomic.Int64
}

func (l countingLink) Recv(fs []link.Frame) (int, error) {
	n, err := l.Link.Recv(fs)
	l.n.Add(int64(n))
	return n, err
}
