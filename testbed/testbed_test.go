package testbed

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sprayfabric/spray/internal/testutil"
)

func testPair(t *testing.T, cfg PairConfig) *Pair {
	t.Helper()
	testutil.SkipIfNotRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := NewPair(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// ping sends one ICMP echo request of size bytes from inside h to dst and
// waits for the reply.
func ping(h *Host, dst netip.Addr, size int) error {
	return h.Do(func() error {
		c, err := net.ListenPacket("ip4:icmp", "0.0.0.0")
		if err != nil {
			return err
		}
		defer c.Close()
		msg := make([]byte, 8+size)
		msg[0] = 8 // echo request
		id := uint16(os.Getpid())
		binary.BigEndian.PutUint16(msg[4:], id)
		binary.BigEndian.PutUint16(msg[6:], 1)
		for i := 8; i < len(msg); i++ {
			msg[i] = byte(i)
		}
		var s uint32
		for i := 0; i+1 < len(msg); i += 2 {
			s += uint32(msg[i])<<8 | uint32(msg[i+1])
		}
		if len(msg)%2 == 1 {
			s += uint32(msg[len(msg)-1]) << 8
		}
		for s > 0xFFFF {
			s = s>>16 + s&0xFFFF
		}
		binary.BigEndian.PutUint16(msg[2:], ^uint16(s))
		if _, err := c.WriteTo(msg, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
			return err
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 70000)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return err
			}
			if n == len(msg) && buf[0] == 0 && binary.BigEndian.Uint16(buf[4:]) == id && from.String() == dst.String() {
				if string(buf[8:n]) != string(msg[8:]) {
					return errors.New("echo reply payload differs")
				}
				return nil
			}
		}
	})
}

// tcpExchange listens in b, dials from a, and sends data both ways.
func tcpExchange(a, b *Host) error {
	var ln net.Listener
	if err := b.Do(func() (err error) {
		ln, err = net.Listen("tcp4", net.JoinHostPort(b.IP.String(), "0"))
		return err
	}); err != nil {
		return err
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c) // echo
	}()
	var c net.Conn
	if err := a.Do(func() (err error) {
		c, err = net.DialTimeout("tcp4", ln.Addr().String(), 10*time.Second)
		return err
	}); err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	want := strings.Repeat("spray over tcp ", 10000)
	go io.WriteString(c, want)
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if string(got) != want {
		return errors.New("TCP echo differs")
	}
	if la := c.LocalAddr().(*net.TCPAddr); la.IP.String() != a.IP.String() {
		return fmt.Errorf("TCP from %v, want %v", la.IP, a.IP)
	}
	return nil
}

func TestPair(t *testing.T) {
	p := testPair(t, PairConfig{})
	if len(p.A.Name) > 15 || !strings.HasPrefix(p.A.Link, p.Prefix) || !strings.HasPrefix(p.B.Name, p.Prefix) {
		t.Fatalf("names %q %q %q", p.Prefix, p.A.Name, p.B.Link)
	}
	if p.A.MAC == ([6]byte{}) || p.A.MAC == p.B.MAC || p.A.Ifindex == 0 || p.A.MTU != 1500 {
		t.Fatalf("hosts %+v %+v", p.A, p.B)
	}
	if err := ping(p.A, p.B.IP, 56); err != nil {
		t.Fatalf("ping A->B: %v", err)
	}
	if err := ping(p.B, p.A.IP, 56); err != nil {
		t.Fatalf("ping B->A: %v", err)
	}
	if err := tcpExchange(p.A, p.B); err != nil {
		t.Fatal(err)
	}
	// The hosts' addresses exist only in their namespaces.
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if a.IP.String() == p.A.IP.String() || a.IP.String() == p.B.IP.String() {
			t.Fatalf("testbed address %v in the caller's namespace", a.IP)
		}
	}
	// Command runs inside the namespace.
	out, err := p.A.Command(context.Background(), "ip", "-o", "-4", "addr", "show", "dev", p.A.Link).CombinedOutput()
	if err != nil || !strings.Contains(string(out), p.A.Prefix.String()) {
		t.Fatalf("ip addr in A: %v: %s", err, out)
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	assertGone(t, p.Prefix)
	if err := p.A.Do(func() error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Do after Close = %v", err)
	}
}

func assertGone(t *testing.T, prefix string) {
	t.Helper()
	left, err := Leftovers(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
}

func TestJumbo(t *testing.T) {
	p := testPair(t, PairConfig{MTU: 9000, Subnet: netip.MustParsePrefix("10.77.250.0/24")})
	if p.A.IP != netip.MustParseAddr("10.77.250.1") || p.B.IP != netip.MustParseAddr("10.77.250.2") {
		t.Fatalf("addresses %v %v", p.A.IP, p.B.IP)
	}
	err := p.B.Do(func() error {
		l, err := netlink.LinkByName(p.B.Link)
		if err != nil {
			return err
		}
		if l.Attrs().MTU != 9000 {
			return fmt.Errorf("MTU %d", l.Attrs().MTU)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(p.A, p.B.IP, 8900); err != nil { // a jumbo echo each way
		t.Fatal(err)
	}
}

func TestConfig(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	for _, c := range []PairConfig{
		{MTU: 20},
		{Subnet: netip.MustParsePrefix("fd00::/64")},
		{Subnet: netip.MustParsePrefix("10.77.1.0/31")},
	} {
		if _, err := NewPair(context.Background(), c); !errors.Is(err, ErrConfig) {
			t.Errorf("NewPair(%+v) = %v, want ErrConfig", c, err)
		}
	}
	if err := Cleanup(""); !errors.Is(err, ErrConfig) {
		t.Fatalf("Cleanup(\"\") = %v", err)
	}
}

// TestCleanup leaves a testbed behind as a crashed run would and removes it
// with Cleanup.
func TestCleanup(t *testing.T) {
	p := testPair(t, PairConfig{})
	unregister(p) // as if this process had died
	if left, _ := Leftovers(p.Prefix); len(left) != 2 {
		t.Fatalf("Leftovers = %v, want the two namespaces", left)
	}
	if err := Cleanup(p.Prefix); err != nil {
		t.Fatal(err)
	}
	assertGone(t, p.Prefix)
	if err := p.Close(); err != nil {
		t.Fatalf("Close after Cleanup: %v", err)
	}
}

// TestSignal runs a process that makes a testbed and gets SIGTERM; the
// testbed must be gone and the process must have died of the signal.
func TestSignal(t *testing.T) {
	if os.Getenv("SPRAY_TESTBED_CHILD") == "1" {
		p, err := NewPair(context.Background(), PairConfig{})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(p.Prefix)
		time.Sleep(time.Minute)
		os.Exit(3)
	}
	testutil.SkipIfNotRoot(t)
	cmd, prefix := child(t)
	if left, _ := Leftovers(prefix); len(left) != 2 {
		t.Errorf("child's testbed: %v", left)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Errorf("child ended with %v, want death by SIGTERM", err)
	}
	if left, _ := Leftovers(prefix); len(left) > 0 {
		Cleanup(prefix)
		t.Fatalf("left behind after SIGTERM: %v", left)
	}
}

// TestCleanupStale kills a process that holds a testbed with SIGKILL, which
// no handler sees, and checks that CleanupStale removes what it left.
func TestCleanupStale(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	live := testPair(t, PairConfig{})
	cmd, prefix := child(t)
	cmd.Process.Kill()
	cmd.Wait()
	if left, _ := Leftovers(prefix); len(left) != 2 {
		t.Fatalf("killed child's testbed: %v", left)
	}
	if err := CleanupStale(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, prefix)
	if left, _ := Leftovers(live.Prefix); len(left) != 2 {
		t.Fatalf("CleanupStale touched a live testbed: %v", left)
	}
}

// TestCleanupStalePIDNamespaces: two processes in two PID namespaces make
// a testbed each, the first as a PID past 100 in its namespace (one that
// names no process or thread in the second), the second as PID 1; the second's NewPair runs
// CleanupStale, and so does this process: both testbeds survive, since
// their owners hold them. Once both processes are killed, CleanupStale
// removes both.
func TestCleanupStalePIDNamespaces(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	unshare := testutil.SkipIfMissingTool(t, "unshare", "util-linux")
	self := "-test.run=^TestSignal$"
	// --mount-proc: netlink finds the thread's namespace by its PID in
	// /proc. The namespaces' bind mounts stay in each child's mount
	// namespace; their files in /run/netns are what a CleanupStale that
	// took the wrong testbed for abandoned would remove.
	a, pa := childCmd(t, exec.Command(unshare, "--pid", "--fork", "--mount-proc", "--kill-child", "sh", "-c", `i=0; while [ $i -lt 100 ]; do /bin/true; i=$((i+1)); done; "$0" "$1" & wait`, os.Args[0], self))
	b, pb := childCmd(t, exec.Command(unshare, "--pid", "--fork", "--mount-proc", "--kill-child", os.Args[0], self))
	if err := CleanupStale(); err != nil {
		t.Fatal(err)
	}
	for _, prefix := range []string{pa, pb} {
		if left, _ := Leftovers(prefix); len(left) != 2 {
			t.Errorf("testbed %s of a live process in its own PID namespace: %v, want its two namespaces", prefix, left)
		}
	}
	for _, c := range []*exec.Cmd{a, b} {
		c.Process.Kill()
		c.Wait()
	}
	// The kernel drops a lock when the last holder is gone.
	gone := func() bool {
		for _, prefix := range []string{pa, pb} {
			if _, inUse, _ := readOwner(prefix); inUse {
				return false
			}
		}
		return true
	}
	if !testutil.Poll(10*time.Second, gone) {
		t.Fatal("owner files still locked after their processes were killed")
	}
	if err := CleanupStale(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, pa)
	assertGone(t, pb)
}

// child starts this test binary as a process that makes a testbed and
// sleeps; it returns the process and the testbed's prefix.
func child(t *testing.T) (*exec.Cmd, string) {
	t.Helper()
	return childCmd(t, exec.Command(os.Args[0], "-test.run=^TestSignal$"))
}

// childCmd starts cmd, which runs this test binary's TestSignal child
// (perhaps through unshare), and returns it and the testbed's prefix.
func childCmd(t *testing.T, cmd *exec.Cmd) (*exec.Cmd, string) {
	t.Helper()
	cmd.Env = append(os.Environ(), "SPRAY_TESTBED_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	prefix := strings.TrimSpace(line)
	if err != nil || !strings.HasPrefix(prefix, "spt") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child said %q, %v", line, err)
	}
	return cmd, prefix
}
