package bench

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sprayfabric/spray/ebpf"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/testbed"
	"github.com/sprayfabric/spray/transport"
)

func newPair(t *testing.T) *testbed.Pair {
	t.Helper()
	testutil.SkipIfNotRoot(t)
	testutil.RealClock(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := testbed.NewPair(ctx, testbed.PairConfig{MTU: 3500})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func transferSize() int64 {
	if testing.Short() {
		return 64 << 20
	}
	return 1 << 30
}

// TestPairTransfer moves 1 GiB from one namespace to the other over each
// kernel link, verified by SHA-256.
func TestPairTransfer(t *testing.T) {
	p := newPair(t)
	seed := testutil.Seed(t)
	for _, kind := range []string{KindXDP, KindUDP, KindRaw, KindTCP} {
		t.Run(kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			res, err := RunPair(ctx, p, PairRun{
				Kind:      kind,
				Transport: transport.Config{Seed: seed, MTU: 3500 + 14},
				Perf:      PerfConfig{Total: transferSize(), MsgSize: 1 << 20, Pings: 200, Seed: seed},
			})
			if err != nil {
				t.Fatal(err)
			}
			if !res.Integrity || res.Bytes != transferSize() {
				t.Fatalf("integrity %v, %d bytes", res.Integrity, res.Bytes)
			}
			// A packet the server received twice was sent twice.
			if res.Duplicates > res.Retransmits || res.Duplicates != res.ServerQP.Duplicates || res.Timeouts != res.ClientQP.Timeouts {
				t.Fatalf("duplicates %d, timeouts %d, of %d retransmits (server %+v)", res.Duplicates, res.Timeouts, res.Retransmits, res.ServerQP)
			}
			t.Logf("%s: %.2f Gbit/s, rtt p50 %.0f µs p99 %.0f µs, %d retransmits (%d duplicates, %d timeouts, %d link drops)",
				kind, res.GoodputGbps, res.RTTp50us, res.RTTp99us, res.Retransmits, res.Duplicates, res.Timeouts, res.LinkDrops)
		})
	}
}

// TestPairXDPUnderAttack runs an AF_XDP transfer while a raw socket in the
// client's namespace fires malformed frames at the server and a TCP
// connection between the namespaces carries data: the transfer completes
// intact, the malformed frames are counted, TCP keeps working.
func TestPairXDPUnderAttack(t *testing.T) {
	p := newPair(t)
	seed := testutil.Seed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// A TCP echo server in B, for the duration of the run.
	var ln net.Listener
	if err := p.B.Do(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(p.B.IP, 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	var injected int
	var tcpErr error
	tcpBytes := 0
	var steer ebpf.SteerCounters
	var steerErr error
	res, err := RunPair(ctx, p, PairRun{
		Kind:      KindXDP,
		Transport: transport.Config{Seed: seed, MTU: 3500 + 14},
		Perf:      PerfConfig{Total: transferSize() / 4, MsgSize: 1 << 20, Pings: -1, Seed: seed},
		During: func(ctx context.Context, _, server link.Link) {
			injected = injectMalformed(t, ctx, p)
			tcpBytes, tcpErr = tcpEcho(ctx, p, ln.Addr().String())
			// The program counts a frame as it arrives: every injected
			// frame is counted by now.
			steer, steerErr = server.(*XDPLink).Steering().Counters()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Integrity {
		t.Fatal("transfer corrupted")
	}
	if tcpErr != nil || tcpBytes == 0 {
		t.Fatalf("TCP while steering: %d bytes echoed, %v", tcpBytes, tcpErr)
	}
	if steerErr != nil {
		t.Fatal(steerErr)
	}
	st := steer
	counted := st.Malformed + res.Server.Malformed()
	t.Logf("injected %d; steering %v; server engine malformed %d; TCP echoed %d bytes", injected, st, res.Server.Malformed(), tcpBytes)
	if injected == 0 || counted < uint64(injected) {
		t.Fatalf("injected %d malformed frames, counted %d", injected, counted)
	}
}

// injectMalformed sends malformed RoCE frames from A's interface to B
// through an AF_PACKET socket until ctx ends or 2000 are sent.
func injectMalformed(t *testing.T, ctx context.Context, p *testbed.Pair) int {
	var fd int
	if err := p.A.Do(func() (err error) {
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		return err
	}); err != nil {
		t.Error(err)
		return 0
	}
	defer unix.Close(fd)
	sa := &unix.SockaddrLinklayer{Ifindex: p.A.Ifindex, Halen: 6}
	copy(sa.Addr[:], p.B.MAC[:])
	rng := testutil.Rand(t)
	n := 0
	for ; n < 2000 && ctx.Err() == nil; n++ {
		f := make([]byte, 14+20+8+12+rng.IntN(64))
		copy(f[0:6], p.B.MAC[:])
		copy(f[6:12], p.A.MAC[:])
		binary.BigEndian.PutUint16(f[12:], 0x0800)
		ip := f[14:34]
		ip[0], ip[8], ip[9] = 0x45, 64, 17
		binary.BigEndian.PutUint16(ip[2:], uint16(len(f)-14))
		src, dst := p.A.IP.As4(), p.B.IP.As4()
		copy(ip[12:16], src[:])
		copy(ip[16:20], dst[:])
		binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
		udp := f[34:42]
		binary.BigEndian.PutUint16(udp[0:], 50000)
		binary.BigEndian.PutUint16(udp[2:], 4791)
		binary.BigEndian.PutUint16(udp[4:], uint16(len(f)-34))
		for i := 42; i < len(f); i++ {
			f[i] = byte(rng.Uint32()) // a BTH and payload that no ICRC covers
		}
		if n%3 == 0 {
			binary.BigEndian.PutUint16(udp[4:], 3) // UDP length too short: malformed for the steering program
		}
		if err := unix.Sendto(fd, f, 0, sa); err != nil {
			t.Error(err)
			return n
		}
		if n%100 == 99 {
			time.Sleep(time.Millisecond)
		}
	}
	return n
}

func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// tcpEcho sends data over a TCP connection from A to the echo server in B
// and returns how many bytes came back.
func tcpEcho(ctx context.Context, p *testbed.Pair, addr string) (int, error) {
	var c net.Conn
	if err := p.A.Do(func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", addr)
		return err
	}); err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	msg := make([]byte, 64<<10)
	total := 0
	for i := 0; i < 16; i++ {
		if _, err := c.Write(msg); err != nil {
			return total, err
		}
		n, err := io.ReadFull(c, msg)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}
