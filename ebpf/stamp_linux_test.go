//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// monotonic reads CLOCK_MONOTONIC in ns, the clock of bpf_ktime_get_ns.
func monotonic(tb testing.TB) int64 {
	tb.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		tb.Fatal(err)
	}
	return ts.Nano()
}

// runOut runs the program on frame with BPF_PROG_TEST_RUN (RX queue 0) and
// returns its outcome and the frame as the program left it.
func runOut(tb testing.TB, s *Steering, frame []byte) (outcome, []byte) {
	tb.Helper()
	before, err := s.Counters()
	if err != nil {
		tb.Fatal(err)
	}
	out := make([]byte, len(frame)+256)
	opts := &ebpf.RunOptions{Data: frame, DataOut: out}
	ret, err := s.Program().Run(opts)
	if err != nil {
		tb.Fatalf("Run on %d bytes: %v", len(frame), err)
	}
	after, err := s.Counters()
	if err != nil {
		tb.Fatal(err)
	}
	return outcome{ret, after.Sub(before)}, opts.DataOut
}

// TestSteerStamp: with Stamp, a frame redirected to a socket leaves the
// program with StampLen bytes in front holding bpf_ktime_get_ns() (between
// two CLOCK_MONOTONIC reads around the run, little endian) and the frame
// intact behind them; a frame that passes (no socket for its queue, another
// port) leaves unchanged, as does every frame without Stamp. Then, end to
// end, datagrams sent across a veth arrive at an AF_XDP socket stamped with
// a time between the send and the receive.
func TestSteerStamp(t *testing.T) {
	p := newVethPair(t)
	s := loadTest(t, SteerConfig{Local: []netip.Addr{p.aIP}, Queues: 1, Stamp: true})
	frame := frameSpec{src: p.bIP, dst: p.aIP, srcPort: 49152, dstPort: DefaultPort, payload: []byte("stamp me, not the kernel's copy")}.build()
	other := frameSpec{src: p.bIP, dst: p.aIP, srcPort: 49152, dstPort: 53, payload: []byte("dns")}.build()

	unchanged := func(name string, f []byte, want outcome) {
		t.Helper()
		got, out := runOut(t, s, f)
		if got != want || !bytes.Equal(out, f) {
			t.Errorf("%s: %v %+v, %d bytes out (intact %v); want %v, the frame unchanged", name, got, got.counter, len(out), bytes.Equal(out, f), want)
		}
	}
	unchanged("stamp, no socket", frame, outNoSocket)
	unchanged("stamp, other port", other, outPassed)

	var x *testXSK
	inNS(t, p.a, func() {
		if err := s.Attach(p.aIdx, Native); err != nil {
			t.Fatal(err)
		}
		x = openXSK(t, p.aIdx)
	})
	if err := s.Register(0, x.fd); err != nil {
		t.Fatalf("Register: %v", err)
	}
	t0 := monotonic(t)
	got, out := runOut(t, s, frame)
	t1 := monotonic(t)
	if got != outSteered {
		t.Fatalf("stamp, socket: %v %+v, want steered", got, got.counter)
	}
	if len(out) != StampLen+len(frame) || !bytes.Equal(out[StampLen:], frame) {
		t.Fatalf("stamp, socket: %d bytes out, want %d: the stamp and the frame intact (%x)", len(out), StampLen+len(frame), out)
	}
	if ts := int64(binary.LittleEndian.Uint64(out)); ts < t0 || ts > t1 {
		t.Errorf("stamp %d outside the run [%d, %d]", ts, t0, t1)
	}
	unchanged("stamp, socket, other port", other, outPassed)

	if err := s.Update(SteerConfig{Local: []netip.Addr{p.aIP}}); err != nil {
		t.Fatal(err)
	}
	unchanged("no stamp, socket", frame, outSteered)
	if err := s.Update(SteerConfig{Local: []netip.Addr{p.aIP}, Stamp: true}); err != nil {
		t.Fatal(err)
	}

	before := counters(t, s)
	const n = 8
	var sent []string
	for i := range n {
		sent = append(sent, fmt.Sprintf("stamped %02d %s", i, bytes.Repeat([]byte{'a' + byte(i)}, 150*i)))
	}
	start := monotonic(t)
	udpSend(t, p.b, p.bIP, netip.AddrPortFrom(p.aIP, DefaultPort), sent...)
	prev := start
	for i := range n {
		f := x.recv(t)
		now := monotonic(t)
		if len(f) < StampLen+42 {
			t.Fatalf("frame %d: %d bytes, too short for a stamp and headers", i, len(f))
		}
		ts := int64(binary.LittleEndian.Uint64(f))
		if ts < prev || ts > now {
			t.Errorf("frame %d: stamp %d outside [%d, %d] (the previous stamp or the send, the receive)", i, ts, prev, now)
		}
		prev = ts
		e := f[StampLen:]
		if !bytes.Equal(e[0:6], p.aMAC) || binary.BigEndian.Uint16(e[12:]) != 0x0800 || string(e[42:]) != sent[i] {
			t.Errorf("frame %d behind the stamp is not the datagram sent: %x", i, e[:min(len(e), 64)])
		}
	}
	if d := counters(t, s).Sub(before); d.Steered != n || d.NoRoom != 0 {
		t.Errorf("counters moved by %v; want Steered %d", d, n)
	}
}
