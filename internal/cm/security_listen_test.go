package cm

import (
	"context"
	"errors"
	mrand "math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
)

// One endpoint opened without security serves a clear and a secured
// service on one connection manager, and another, also without, dials
// each with or without security of its own: a dial that matches the
// service connects with the protection both sides report and moves
// messages intact (SHA-256); a secured dial to the clear service and a
// clear dial to the secured one are refused with ErrSecurityMismatch,
// unless the side with security allows clear peers; a wrong key is
// refused with ErrAuth. No QP is left behind.
func TestSecurePerListener(t *testing.T) {
	seed := testutil.Seed(t)
	_, ea, eb := secPair(t, seed, nil, nil)
	lclear, err := eb.Listen("clear")
	if err != nil {
		t.Fatal(err)
	}
	lsec, err := eb.ListenWith("secured", ListenOptions{Security: &Security{PSK: testPSK}})
	if err != nil {
		t.Fatal(err)
	}
	otherPSK := []byte("fedcba9876543210fedcba9876543210")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := mrand.New(mrand.NewPCG(seed, 4))
	for _, tc := range []struct {
		name    string
		ln      *Listener
		opts    DialOptions
		want    Protection
		wantErr error
	}{
		{"clear-to-clear", lclear, DialOptions{}, ProtectionClear, nil},
		{"secured-to-secured", lsec, DialOptions{Security: &Security{PSK: testPSK}}, ProtectionEncrypted, nil},
		{"integrity-to-secured", lsec, DialOptions{Security: &Security{PSK: testPSK, IntegrityOnly: true}}, ProtectionEncrypted, nil},
		{"clear-to-secured", lsec, DialOptions{}, 0, ErrSecurityMismatch},
		{"secured-to-clear", lclear, DialOptions{Security: &Security{PSK: testPSK}}, 0, ErrSecurityMismatch},
		{"secured-allowing-clear-to-clear", lclear, DialOptions{Security: &Security{PSK: testPSK, AllowClear: true}}, ProtectionClear, nil},
		{"wrong-key", lsec, DialOptions{Security: &Security{PSK: otherPSK}}, 0, ErrAuth},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ea.DialWith(ctx, tc.ln.Addr(), tc.ln.service, tc.opts)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Dial: %v, want %v", err, tc.wantErr)
				}
				t.Logf("Dial: %v", err)
				if qps(t, ea) != 0 {
					t.Fatalf("dialer QPs left: %d", qps(t, ea))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b, err := tc.ln.Accept(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if a.Protection() != tc.want || b.Protection() != tc.want {
				t.Fatalf("protection %v and %v, want %v", a.Protection(), b.Protection(), tc.want)
			}
			if err := exchange(ctx, a, b, testutil.RandomMessages(r, 4, 64<<10)); err != nil {
				t.Fatalf("dialer to listener: %v", err)
			}
			if err := exchange(ctx, b, a, testutil.RandomMessages(r, 4, 64<<10)); err != nil {
				t.Fatalf("listener to dialer: %v", err)
			}
			a.Close()
			b.Close()
			if qps(t, ea) != 0 || qps(t, eb) != 0 {
				t.Fatalf("QPs left: %d and %d", qps(t, ea), qps(t, eb))
			}
		})
	}
}

// An endpoint with security runs one service in clear (ListenOptions.Clear)
// next to its secured default, and dials in clear on request; options
// that contradict each other, and a second TLS identity on one
// connection manager, are refused with ErrOptions.
func TestSecureListenOverrides(t *testing.T) {
	seed := testutil.Seed(t)
	ca := newPKI(t, "spray test CA")
	_, ea, eb := secPair(t, seed, nil, &Security{PSK: testPSK})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lclear, err := eb.ListenWith("clear", ListenOptions{Clear: true})
	if err != nil {
		t.Fatal(err)
	}
	ldef, err := eb.Listen("default")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ln   *Listener
		opts DialOptions
		want Protection
	}{
		{lclear, DialOptions{}, ProtectionClear},
		{ldef, DialOptions{Security: &Security{PSK: testPSK}}, ProtectionEncrypted},
	} {
		a, err := ea.DialWith(ctx, tc.ln.Addr(), tc.ln.service, tc.opts)
		if err != nil {
			t.Fatalf("dial %q: %v", tc.ln.service, err)
		}
		b, err := tc.ln.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if a.Protection() != tc.want || b.Protection() != tc.want {
			t.Fatalf("%q: protection %v and %v, want %v", tc.ln.service, a.Protection(), b.Protection(), tc.want)
		}
		if err := exchange(ctx, a, b, [][]byte{[]byte("hello " + tc.ln.service)}); err != nil {
			t.Fatal(err)
		}
		a.Close()
		b.Close()
	}
	if _, err := ea.DialWith(ctx, ldef.Addr(), "default", DialOptions{}); !errors.Is(err, ErrSecurityMismatch) {
		t.Fatalf("clear dial to the endpoint's secured default: %v, want ErrSecurityMismatch", err)
	}
	if _, err := eb.ListenWith("both", ListenOptions{Clear: true, Security: &Security{PSK: testPSK}}); !errors.Is(err, ErrOptions) {
		t.Fatalf("ListenWith Clear and Security: %v, want ErrOptions", err)
	}
	if _, err := ea.DialWith(ctx, ldef.Addr(), "default", DialOptions{Clear: true, Security: &Security{PSK: testPSK}}); !errors.Is(err, ErrOptions) {
		t.Fatalf("DialWith Clear and Security: %v, want ErrOptions", err)
	}
	// The first certificates replace the throwaway identity of the
	// pre-shared key; a second set is refused.
	if _, err := eb.ListenWith("cert1", ListenOptions{Security: certSecurity(t, ca, "b", false)}); err != nil {
		t.Fatalf("the first certificates: %v", err)
	}
	if _, err := eb.ListenWith("cert2", ListenOptions{Security: certSecurity(t, ca, "b2", false)}); !errors.Is(err, ErrOptions) {
		t.Fatalf("a second TLS identity: %v, want ErrOptions", err)
	}
	if qps(t, ea) != 0 || qps(t, eb) != 0 {
		t.Fatalf("QPs left: %d and %d", qps(t, ea), qps(t, eb))
	}
}

// cut ends the latest relayed channel towards the listener as an on-path
// box forging it would: a reset (rst) or a FIN, with no TLS close_notify.
func (p *tapProxy) cut(rst bool) {
	<-p.ready
	p.mu.Lock()
	defer p.mu.Unlock()
	tc := p.toLister.(*net.TCPConn)
	if rst {
		tc.SetLinger(0)
		tc.Close()
		return
	}
	tc.CloseWrite()
}

// A FIN or a reset forged on the connection manager's channel tears a
// clear connection down at once (ErrPeerGone), but not a secured one:
// its channel's end is counted (CMStats.ChannelsCut) and its QP moves
// messages both ways intact (SHA-256) until Close.
func TestSecureChannelCut(t *testing.T) {
	for _, sec := range []*Security{nil, {PSK: testPSK}} {
		for _, rst := range []bool{false, true} {
			name := map[bool]string{false: "fin", true: "rst"}[rst]
			if sec == nil {
				name = "clear-" + name
			} else {
				name = "secured-" + name
			}
			t.Run(name, func(t *testing.T) {
				seed := testutil.Seed(t)
				fab := mem.NewFabric(mem.Config{Seed: seed}, clock.NewSystem())
				t.Cleanup(func() { fab.Close() })
				// Close waits this long for a DREP that the cut channel
				// cannot carry.
				short := func(o *Options) { o.CloseTimeout = 200 * time.Millisecond }
				ea := memEndpoint(t, fab, macA, ipA, seed, withSec(sec), short)
				eb := memEndpoint(t, fab, macB, ipB, seed+1, withSec(sec), short)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				ln, err := eb.Listen("x")
				if err != nil {
					t.Fatal(err)
				}
				p := newTapProxy(t, ln.Addr())
				a, b := connectVia(t, ea, eb, ln, p.addr())
				if err := exchange(ctx, a, b, [][]byte{[]byte("before")}); err != nil {
					t.Fatal(err)
				}
				p.cut(rst)
				if sec == nil {
					select {
					case <-b.Done():
					case <-ctx.Done():
						t.Fatal("the clear listener's Conn stayed up after its channel was cut")
					}
					if !errors.Is(b.Err(), ErrPeerGone) {
						t.Fatalf("listener's Err %v, want ErrPeerGone", b.Err())
					}
					a.Close()
					return
				}
				<-b.rdone // the listener's channel has ended
				if n := eb.CMStats().ChannelsCut; n != 1 {
					t.Fatalf("ChannelsCut %d, want 1", n)
				}
				r := mrand.New(mrand.NewPCG(seed, 5))
				if err := exchange(ctx, a, b, testutil.RandomMessages(r, 8, 64<<10)); err != nil {
					t.Fatalf("dialer to listener after the cut: %v", err)
				}
				if err := exchange(ctx, b, a, testutil.RandomMessages(r, 8, 64<<10)); err != nil {
					t.Fatalf("listener to dialer after the cut: %v", err)
				}
				if a.Err() != nil || b.Err() != nil {
					t.Fatalf("after the cut: Err %v and %v, want both open", a.Err(), b.Err())
				}
				b.Close()
				a.Close()
				if qps(t, ea) != 0 || qps(t, eb) != 0 {
					t.Fatalf("QPs left: %d and %d", qps(t, ea), qps(t, eb))
				}
			})
		}
	}
}

// A secured peer that ends its TLS session with close_notify, with no
// DREQ before it, closes the connection in order: this side's Conn is
// torn down with ErrPeerClosed, Recv returns io.EOF after what arrived,
// and nothing is counted as a cut channel.
func TestSecureCloseNotify(t *testing.T) {
	seed := testutil.Seed(t)
	_, ea, eb := secPair(t, seed, &Security{PSK: testPSK}, &Security{PSK: testPSK})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ln, err := eb.Listen("x")
	if err != nil {
		t.Fatal(err)
	}
	a, b := connectVia(t, ea, eb, ln, "")
	if err := exchange(ctx, b, a, [][]byte{[]byte("last words")}); err != nil {
		t.Fatal(err)
	}
	b.wmu.Lock()
	b.tc.Close() // a tls.Conn: close_notify, then the TCP close
	b.wmu.Unlock()
	select {
	case <-a.Done():
	case <-ctx.Done():
		t.Fatal("the dialer's Conn stayed up after the peer's close_notify")
	}
	if a.Err() != ErrPeerClosed {
		t.Fatalf("dialer's Err %v, want ErrPeerClosed", a.Err())
	}
	if n := ea.CMStats().ChannelsCut; n != 0 {
		t.Fatalf("dialer's ChannelsCut %d, want 0", n)
	}
	b.Close()
	if qps(t, ea) != 0 {
		t.Fatalf("dialer QPs left: %d", qps(t, ea))
	}
}
