//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/sprayfabric/spray/internal/testutil"

	"golang.org/x/sys/unix"
)

// testXSK is the least AF_XDP socket that receives: a UMEM of xskFrames
// frames, all handed to the kernel through the fill ring once, and an RX
// ring. It is no driver (package xdp is); it only shows that the program's
// redirects arrive.
type testXSK struct {
	fd     int
	umem   []byte
	fill   []byte
	rx     []byte
	off    unix.XDPMmapOffsets
	rxCons uint32
}

const (
	xskFrames    = 64 // also the size of every ring
	xskFrameSize = 2048
)

func sockopt(fd, op uintptr, opt int, p unsafe.Pointer, size uintptr) error {
	n := size
	arg := n
	if op == unix.SYS_GETSOCKOPT {
		arg = uintptr(unsafe.Pointer(&n))
	}
	if _, _, e := unix.Syscall6(op, fd, unix.SOL_XDP, uintptr(opt), uintptr(p), arg, 0); e != 0 {
		return e
	}
	return nil
}

// openXSK binds an AF_XDP socket in copy mode to queue 0 of ifindex, in the
// calling thread's network namespace.
func openXSK(tb testing.TB, ifindex int) *testXSK {
	tb.Helper()
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	testutil.SkipIfNotSupported(tb, err)
	x := &testXSK{fd: fd}
	tb.Cleanup(x.close)
	x.umem, err = unix.Mmap(-1, 0, xskFrames*xskFrameSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		tb.Fatal(err)
	}
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&x.umem[0]))), Len: uint64(len(x.umem)), Size: xskFrameSize}
	if err := sockopt(uintptr(fd), unix.SYS_SETSOCKOPT, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		tb.Fatalf("XDP_UMEM_REG: %v", err)
	}
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, opt, xskFrames); err != nil {
			tb.Fatalf("ring size option %d: %v", opt, err)
		}
	}
	if err := sockopt(uintptr(fd), unix.SYS_GETSOCKOPT, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&x.off), unsafe.Sizeof(x.off)); err != nil {
		tb.Fatalf("XDP_MMAP_OFFSETS: %v", err)
	}
	ringMap := func(pgoff int64, size uint64) []byte {
		b, err := unix.Mmap(fd, pgoff, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			tb.Fatalf("mmap ring at %#x: %v", pgoff, err)
		}
		return b
	}
	x.fill = ringMap(unix.XDP_UMEM_PGOFF_FILL_RING, x.off.Fr.Desc+xskFrames*8)
	x.rx = ringMap(unix.XDP_PGOFF_RX_RING, x.off.Rx.Desc+xskFrames*uint64(unsafe.Sizeof(unix.XDPDesc{})))
	for i := range uint64(xskFrames) {
		binary.NativeEndian.PutUint64(x.fill[x.off.Fr.Desc+i*8:], i*xskFrameSize)
	}
	atomic.StoreUint32(x.ring32(x.fill, x.off.Fr.Producer), xskFrames)
	if err := unix.Bind(fd, &unix.SockaddrXDP{Flags: unix.XDP_COPY, Ifindex: uint32(ifindex), QueueID: 0}); err != nil {
		tb.Fatalf("bind AF_XDP socket to ifindex %d queue 0: %v", ifindex, err)
	}
	return x
}

func (x *testXSK) ring32(ring []byte, off uint64) *uint32 {
	return (*uint32)(unsafe.Pointer(&ring[off]))
}

// recv returns a copy of the next received frame, waiting for it.
func (x *testXSK) recv(tb testing.TB) []byte {
	tb.Helper()
	for atomic.LoadUint32(x.ring32(x.rx, x.off.Rx.Producer)) == x.rxCons {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(x.fd), Events: unix.POLLIN}}, int(guard.Milliseconds()))
		if err != nil && err != unix.EINTR {
			tb.Fatalf("poll: %v", err)
		}
		if n == 0 {
			tb.Fatalf("no frame on the AF_XDP socket (producer %d, consumer %d)", atomic.LoadUint32(x.ring32(x.rx, x.off.Rx.Producer)), x.rxCons)
		}
	}
	at := x.off.Rx.Desc + uint64(x.rxCons%xskFrames)*uint64(unsafe.Sizeof(unix.XDPDesc{}))
	d := (*unix.XDPDesc)(unsafe.Pointer(&x.rx[at]))
	frame := bytes.Clone(x.umem[d.Addr : d.Addr+uint64(d.Len)])
	x.rxCons++
	atomic.StoreUint32(x.ring32(x.rx, x.off.Rx.Consumer), x.rxCons)
	return frame
}

func (x *testXSK) close() {
	for _, m := range [][]byte{x.fill, x.rx, x.umem} {
		if m != nil {
			unix.Munmap(m)
		}
	}
	unix.Close(x.fd)
}

// TestNetnsAFXDP steers UDP 4791 datagrams sent from the peer namespace to an
// AF_XDP socket and checks that they arrive intact there and not at the
// kernel's UDP socket on the port, until the socket is unregistered.
func TestNetnsAFXDP(t *testing.T) {
	p := newVethPair(t)
	s := loadTest(t, SteerConfig{Local: []netip.Addr{p.aIP}, Queues: 1})
	roce := udpListen(t, p.a, p.aIP, DefaultPort)
	to4791 := netip.AddrPortFrom(p.aIP, DefaultPort)
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

	// BPF_PROG_TEST_RUN now reports a redirect for queue 0 too.
	if got := runFrame(t, s, frameSpec{src: p.bIP, dst: p.aIP, dstPort: DefaultPort}.build()); got != outSteered {
		t.Errorf("test run with a registered socket: %v, want steered", got)
	}

	before := counters(t, s)
	const n = 20
	var sent []string
	for i := range n {
		sent = append(sent, fmt.Sprintf("spray xsk %02d %s", i, bytes.Repeat([]byte{'a' + byte(i)}, 70*i)))
	}
	udpSend(t, p.b, p.bIP, to4791, sent...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("counters at the end: %v", counters(t, s))
			var st unix.XDPStatistics
			err := sockopt(uintptr(x.fd), unix.SYS_GETSOCKOPT, unix.XDP_STATISTICS, unsafe.Pointer(&st), unsafe.Sizeof(st))
			t.Logf("socket statistics: %+v (%v); rx producer %d, fill consumer %d", st, err,
				atomic.LoadUint32(x.ring32(x.rx, x.off.Rx.Producer)), atomic.LoadUint32(x.ring32(x.fill, x.off.Fr.Consumer)))
		}
	})
	for i := range n {
		f := x.recv(t)
		// Ethernet 14 + IPv4 20 + UDP 8.
		if len(f) < 42 || binary.BigEndian.Uint16(f[12:]) != 0x0800 {
			t.Fatalf("frame %d: not an untagged IPv4 frame: %x", i, f)
		}
		if !bytes.Equal(f[0:6], p.aMAC) || netip.AddrFrom4([4]byte(f[30:34])) != p.aIP ||
			binary.BigEndian.Uint16(f[36:]) != DefaultPort {
			t.Errorf("frame %d: wrong addresses: %x", i, f[:42])
		}
		if got := string(f[42:]); got != sent[i] {
			t.Errorf("frame %d: payload %q, want %q", i, got, sent[i])
		}
	}
	if d := counters(t, s).Sub(before); d.Steered != n || d.NoSocket != 0 {
		t.Errorf("counters moved by %v; want Steered %d", d, n)
	}

	// Back to the kernel: the UDP socket's first datagram is the one sent
	// after Unregister, none of the steered ones.
	if err := s.Unregister(0); err != nil {
		t.Fatal(err)
	}
	udpSend(t, p.b, p.bIP, to4791, "after unregister")
	if got := udpRecv(t, roce); got != "after unregister" {
		t.Errorf("UDP socket got %q, want the datagram sent after Unregister", got)
	}
}
