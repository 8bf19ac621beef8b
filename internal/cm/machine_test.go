package cm

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/link/rss"
	"github.com/sprayfabric/spray/transport"
)

// tracer records the transitions of an endpoint's handshakes, each
// handshake's path as "state>state>...".
type tracer struct {
	mu    sync.Mutex
	order []any
	paths map[any][]string
}

func traceOn(ep *Endpoint) *tracer {
	tr := &tracer{paths: map[any][]string{}}
	ep.trace = func(hs any, _, from, to string) {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		p, ok := tr.paths[hs]
		if !ok {
			tr.order = append(tr.order, hs)
			p = []string{from}
		}
		tr.paths[hs] = append(p, to)
	}
	return tr
}

var finals = map[string]bool{"connected": true, "rejected": true, "failed": true, "refused": true}

// first waits until the first handshake traced has reached a final state
// and returns its path.
func (tr *tracer) first(t *testing.T) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		tr.mu.Lock()
		var p []string
		if len(tr.order) > 0 {
			p = tr.paths[tr.order[0]]
		}
		tr.mu.Unlock()
		if len(p) > 0 && finals[p[len(p)-1]] {
			return strings.Join(p, ">")
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("no handshake reached a final state")
	return ""
}

// rawConn opens a TCP connection to addr, as a dialer written by hand.
func rawConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(time.Minute))
	t.Cleanup(func() { c.Close() })
	return c
}

// readRej reads a REJ from c, or fails the test.
func readRej(t *testing.T, c io.Reader) rejection {
	t.Helper()
	m, err := readMsg(c)
	if err != nil || m.typ != msgREJ {
		t.Fatalf("got %+v, %v; want a REJ", m, err)
	}
	r, err := parseRej(m.body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// rawREQ is a request for service "x" from a QP at ipA, of the version
// the endpoint speaks, with the link block of a caller's link.
func rawREQ() connReq {
	return connReq{qp: transport.QPInfo{QPN: 0x77, PSN: 1, MAC: macA, IP: ipA}, service: "x", link: linkInfo{mtu: 1500}}
}

func sendREQ(c net.Conn, r connReq) {
	c.Write(appendMsg(nil, msgREQ, r.marshal()))
}

// Every transition of the listener's handshake, driven by a dialer
// written by hand or by Dial: the path of states the listener went
// through, the rejection's reason the dialer read (0: none), the counter
// that moved, and no QP left behind by a handshake that failed. The rows
// are the table in docs/design.md ("The handshake's states").
func TestListenerTransitions(t *testing.T) {
	short := func(o *Options) { o.HandshakeTimeout = 300 * time.Millisecond }
	psk := func(o *Options) { o.Security = &Security{PSK: testPSK} }
	for _, tc := range []struct {
		name   string
		set    []func(*Options)
		listen func(t *testing.T, eb *Endpoint)       // the Listeners; nil: Listen("x")
		dial   func(t *testing.T, eb *Endpoint) uint8 // returns the REJ reason read, or 0
		path   string
		stat   func(Stats) uint64
	}{
		{name: "clear-connected", path: "first-byte>request>check>create>reply>ready>connected",
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				dialOK(t, eb, nil)
				return 0
			}, stat: func(s Stats) uint64 { return s.Accepted }},
		{name: "tls-connected", set: []func(*Options){psk}, path: "first-byte>tls>request>check>create>reply>ready>connected",
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				dialOK(t, eb, &Security{PSK: testPSK})
				return 0
			}, stat: func(s Stats) uint64 { return s.Accepted }},
		{name: "request-version-4", path: "first-byte>request>check>create>reply>ready>connected",
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				// A dialer of version 4 (its data path takes no message
				// limit) is answered in version 4, and its Conn's QP
				// sends it none.
				c := rawConn(t, eb.CMAddr())
				c.Write(appendMsgV(nil, cmVersion4, msgREQ, rawREQ().marshalV(cmVersion4)))
				if m, err := readMsg(c); err != nil || m.typ != msgREP || m.version != cmVersion4 {
					t.Fatalf("got %+v, %v; want a REP of version 4", m, err)
				}
				c.Write(appendMsgV(nil, cmVersion4, msgRTU, nil))
				eb.mu.Lock()
				ln := eb.listeners["x"]
				eb.mu.Unlock()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				conn, err := ln.Accept(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if conn.ver != cmVersion4 || !conn.Remote().NoMsgLimit {
					t.Fatalf("Conn of version %d, NoMsgLimit %v; want 4, true", conn.ver, conn.Remote().NoMsgLimit)
				}
				return 0
			}, stat: func(s Stats) uint64 { return s.Accepted }},
		{name: "first-byte-tls-without-security", path: "first-byte>rejected",
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				c := rawConn(t, eb.CMAddr())
				c.Write([]byte{0x16, 3, 1, 0, 1, 1})
				r := readRej(t, c)
				c.Close() // the listener lingers until the dialer closes
				return r.reason
			}, stat: func(s Stats) uint64 { return s.Rejected }},
		{name: "first-byte-timeout", set: []func(*Options){short}, path: "first-byte>failed",
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				c := rawConn(t, eb.CMAddr())
				if _, err := c.Read(make([]byte, 1)); err != io.EOF {
					t.Fatalf("a silent dialer read %v, want the channel closed", err)
				}
				return 0
			}, stat: func(s Stats) uint64 { return s.TimedOut }},
		{name: "first-byte-evicted", set: []func(*Options){func(o *Options) { o.MaxHandshakes = 1; o.HandshakeTimeout = 4 * time.Second }},
			path: "first-byte>failed",
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				c := rawConn(t, eb.CMAddr())
				waitHalfOpen(t, eb, 1)
				// The oldest request may be dropped once it has waited a
				// twentieth of the handshake timeout.
				for start := time.Now(); time.Since(start) < 4*time.Second/20; {
					time.Sleep(5 * time.Millisecond)
				}
				rawConn(t, eb.CMAddr())
				return readRej(t, c).reason
			}, stat: func(s Stats) uint64 { return s.Evicted }},
		{name: "tls-auth-failed", set: []func(*Options){psk}, path: "first-byte>tls>failed",
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				// A client that offers no TLS 1.3 fails the handshake.
				c := tls.Client(rawConn(t, eb.CMAddr()), &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12})
				if err := c.Handshake(); err == nil {
					t.Fatal("a TLS 1.2 handshake succeeded")
				}
				return 0
			}, stat: func(s Stats) uint64 { return s.AuthFailed }},
		{name: "tls-timeout", set: []func(*Options){psk, short}, path: "first-byte>tls>failed",
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				c := rawConn(t, eb.CMAddr())
				c.Write([]byte{0x16, 3, 1, 0, 200}) // a record header, and no record
				io.Copy(io.Discard, c)
				return 0
			}, stat: func(s Stats) uint64 { return s.TimedOut + 10*s.AuthFailed }}, // a timeout, not an authentication failure
		{name: "request-bad-magic", path: "first-byte>request>rejected",
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				c := rawConn(t, eb.CMAddr())
				c.Write([]byte("SPAMSPAM"))
				return readRej(t, c).reason
			}, stat: func(s Stats) uint64 { return s.Rejected }},
		{name: "request-version", path: "first-byte>request>rejected",
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				c := rawConn(t, eb.CMAddr())
				c.Write(appendMsgV(nil, 9, msgREQ, nil))
				return readRej(t, c).reason
			}, stat: func(s Stats) uint64 { return s.Rejected }},
		{name: "request-type", path: "first-byte>request>rejected",
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				c := rawConn(t, eb.CMAddr())
				c.Write(appendMsg(nil, msgRTU, nil))
				return readRej(t, c).reason
			}, stat: func(s Stats) uint64 { return s.Rejected }},
		{name: "request-unparsable", path: "first-byte>request>rejected",
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				c := rawConn(t, eb.CMAddr())
				c.Write(appendMsg(nil, msgREQ, rawREQ().marshal()[:10]))
				return readRej(t, c).reason
			}, stat: func(s Stats) uint64 { return s.Rejected }},
		{name: "request-old-version-in-tls", set: []func(*Options){psk}, path: "first-byte>tls>request>rejected",
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				c := tls.Client(rawConn(t, eb.CMAddr()), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, NextProtos: []string{"spray-cm"}})
				c.Write(appendMsgV(nil, cmVersion3, msgREQ, rawREQ().marshalV(cmVersion3)))
				return readRej(t, c).reason
			}, stat: func(s Stats) uint64 { return s.Rejected }},
		{name: "request-timeout", set: []func(*Options){short}, path: "first-byte>request>failed",
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				c := rawConn(t, eb.CMAddr())
				c.Write([]byte("SP"))
				io.Copy(io.Discard, c)
				return 0
			}, stat: func(s Stats) uint64 { return s.TimedOut }},
		{name: "check-security-required", path: "first-byte>request>check>rejected",
			listen: func(t *testing.T, eb *Endpoint) {
				if _, err := eb.ListenWith("x", ListenOptions{Security: &Security{PSK: testPSK}}); err != nil {
					t.Fatal(err)
				}
			},
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				c := rawConn(t, eb.CMAddr())
				sendREQ(c, rawREQ())
				return readRej(t, c).reason
			}, stat: func(s Stats) uint64 { return s.Rejected }},
		{name: "check-security-absent", path: "first-byte>tls>request>check>rejected",
			listen: func(t *testing.T, eb *Endpoint) {
				eb.ListenWith("secured", ListenOptions{Security: &Security{PSK: testPSK}})
				if _, err := eb.ListenWith("x", ListenOptions{Clear: true}); err != nil {
					t.Fatal(err)
				}
			},
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				dialErr(t, eb, &Security{PSK: testPSK}, ErrSecurityMismatch)
				return 0
			}, stat: func(s Stats) uint64 { return s.Rejected }},
		{name: "check-key-not-proven", set: []func(*Options){psk}, path: "first-byte>tls>request>check>rejected",
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				dialErr(t, eb, &Security{PSK: []byte("fedcba9876543210fedcba9876543210")}, ErrAuth)
				return 0
			}, stat: func(s Stats) uint64 { return s.AuthFailed }},
		{name: "check-profile", path: "first-byte>request>check>rejected",
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				c := rawConn(t, eb.CMAddr())
				r := rawREQ()
				r.profile = transport.RoCE
				sendREQ(c, r)
				return readRej(t, c).reason
			}, stat: func(s Stats) uint64 { return s.Rejected }},
		{name: "check-peer-address", set: []func(*Options){func(o *Options) { o.TrustPeerIP = false }}, path: "first-byte>request>check>rejected",
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				c := rawConn(t, eb.CMAddr())
				sendREQ(c, rawREQ()) // ipA, not 127.0.0.1
				return readRej(t, c).reason
			}, stat: func(s Stats) uint64 { return s.Rejected }},
		{name: "check-link", path: "first-byte>request>check>rejected",
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				c := rawConn(t, eb.CMAddr())
				r := rawREQ()
				r.link.mtu = 9000
				sendREQ(c, r)
				return readRej(t, c).reason
			}, stat: func(s Stats) uint64 { return s.Rejected }},
		{name: "check-unknown-service", path: "first-byte>request>check>rejected",
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				c := rawConn(t, eb.CMAddr())
				r := rawREQ()
				r.service = "nobody"
				sendREQ(c, r)
				return readRej(t, c).reason
			}, stat: func(s Stats) uint64 { return s.Rejected }},
		{name: "check-backlog-full", path: "first-byte>request>check>rejected",
			listen: func(t *testing.T, eb *Endpoint) {
				ln, err := eb.Listen("x")
				if err != nil {
					t.Fatal(err)
				}
				for len(ln.q) < cap(ln.q) {
					ln.q <- nil
				}
				t.Cleanup(func() {
					for len(ln.q) > 0 {
						<-ln.q
					}
				})
			},
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				c := rawConn(t, eb.CMAddr())
				sendREQ(c, rawREQ())
				return readRej(t, c).reason
			}, stat: func(s Stats) uint64 { return s.Rejected }},
		{name: "create-bad-steering", path: "first-byte>request>check>create>rejected",
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				c := rawConn(t, eb.CMAddr())
				r := rawREQ()
				r.steer = &transport.Steering{IP: ipA, Table: rss.Table{Key: make([]byte, 40), Indir: []uint32{0, 1}}, Queue: 7}
				sendREQ(c, r)
				return readRej(t, c).reason
			}, stat: func(s Stats) uint64 { return s.Rejected }},
		{name: "create-qp-fails", path: "first-byte>request>check>create>rejected",
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				eb.Endpoint.Close() // the transport: no QP can be created
				c := rawConn(t, eb.CMAddr())
				sendREQ(c, rawREQ())
				return readRej(t, c).reason
			}, stat: func(s Stats) uint64 { return s.Rejected }},
		{name: "create-connect-fails", path: "first-byte>request>check>create>rejected",
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				c := rawConn(t, eb.CMAddr())
				r := rawREQ()
				r.qp.IP = netip.MustParseAddr("2001:db8::1") // not the link's family
				sendREQ(c, r)
				return readRej(t, c).reason
			}, stat: func(s Stats) uint64 { return s.Rejected }},
		{name: "reply-write-fails", path: "first-byte>request>check>create>reply>failed",
			listen: func(t *testing.T, eb *Endpoint) {
				// The channel breaks as the reply is about to be written.
				traced := eb.trace
				eb.trace = func(hs any, role, from, to string) {
					traced(hs, role, from, to)
					if to == "reply" {
						hs.(*handshake).tc.Close()
					}
				}
				if _, err := eb.Listen("x"); err != nil {
					t.Fatal(err)
				}
			},
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				c := rawConn(t, eb.CMAddr())
				sendREQ(c, rawREQ())
				if m, err := readMsg(c); err == nil {
					t.Fatalf("read %+v after a reply that could not be written", m)
				}
				return 0
			}},
		{name: "ready-timeout", set: []func(*Options){func(o *Options) { o.HandshakeTimeout = time.Second }}, path: "first-byte>request>check>create>reply>ready>failed",
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				c := rawConn(t, eb.CMAddr())
				sendREQ(c, rawREQ())
				if m, err := readMsg(c); err != nil || m.typ != msgREP {
					t.Fatalf("got %+v, %v; want a REP", m, err)
				}
				io.Copy(io.Discard, c)
				return 0
			}, stat: func(s Stats) uint64 { return s.TimedOut }},
		{name: "ready-dialer-refuses", path: "first-byte>request>check>create>reply>ready>failed",
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				c := rawConn(t, eb.CMAddr())
				sendREQ(c, rawREQ())
				readMsg(c)
				c.Write(appendMsg(nil, msgREJ, rejection{reason: rejAddr, version: cmVersion, text: "no"}.marshal()))
				io.Copy(io.Discard, c)
				return 0
			}},
		{name: "ready-evicted", set: []func(*Options){func(o *Options) { o.MaxHandshakes = 1; o.HandshakeTimeout = 4 * time.Second }},
			path: "first-byte>request>check>create>reply>ready>failed",
			dial: func(t *testing.T, eb *Endpoint) uint8 {
				c := rawConn(t, eb.CMAddr())
				sendREQ(c, rawREQ())
				readMsg(c)
				for start := time.Now(); time.Since(start) < 4*time.Second/20; {
					time.Sleep(5 * time.Millisecond)
				}
				rawConn(t, eb.CMAddr())
				if _, err := io.Copy(io.Discard, c); err != nil {
					t.Fatal(err)
				}
				return 0 // after its REP, an evicted dialer gets no REJ
			}, stat: func(s Stats) uint64 { return s.Evicted }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seed := testutil.Seed(t)
			fab := mem.NewFabric(mem.Config{Seed: seed}, clock.NewSystem())
			t.Cleanup(func() { fab.Close() })
			eb := memEndpoint(t, fab, macB, ipB, seed, tc.set...)
			tr := traceOn(eb)
			if tc.listen != nil {
				tc.listen(t, eb)
			} else if _, err := eb.Listen("x"); err != nil {
				t.Fatal(err)
			}
			reason := tc.dial(t, eb)
			if got := tr.first(t); got != tc.path {
				t.Fatalf("path %s, want %s", got, tc.path)
			}
			if want := wantReason[tc.name]; reason != want {
				t.Fatalf("REJ reason %d, want %d", reason, want)
			}
			if tc.stat != nil {
				waitStat(t, eb, tc.stat)
			}
			if !strings.HasSuffix(tc.path, "connected") && tc.name != "create-qp-fails" {
				waitQPs(t, eb, 0)
			}
		})
	}
}

// When Options.MaxHandshakes requests are being answered and the oldest
// has waited less than a twentieth of the handshake timeout, a new one is
// refused at once, before any state of its own: a REJ of reason 9 (Dial
// tries again), counted in Stats.Refused, and the request being answered
// goes on.
func TestListenerRefusesWhenFull(t *testing.T) {
	seed := testutil.Seed(t)
	fab := mem.NewFabric(mem.Config{Seed: seed}, clock.NewSystem())
	t.Cleanup(func() { fab.Close() })
	eb := memEndpoint(t, fab, macB, ipB, seed, func(o *Options) { o.MaxHandshakes = 1; o.HandshakeTimeout = time.Minute })
	if _, err := eb.Listen("x"); err != nil {
		t.Fatal(err)
	}
	rawConn(t, eb.CMAddr())
	waitHalfOpen(t, eb, 1)
	c := rawConn(t, eb.CMAddr())
	sendREQ(c, rawREQ())
	if r := readRej(t, c); r.reason != rejFull {
		t.Fatalf("REJ reason %d, want %d (full)", r.reason, rejFull)
	}
	if s := eb.CMStats(); s.Refused != 1 || s.Evicted != 0 || s.HalfOpen != 1 {
		t.Fatalf("Refused %d, Evicted %d, HalfOpen %d; want 1, 0, 1", s.Refused, s.Evicted, s.HalfOpen)
	}
}

// wantReason is the REJ reason each row's dialer reads (0: none, or read
// by Dial).
var wantReason = map[string]uint8{
	"first-byte-tls-without-security": rejSecurity,
	"first-byte-evicted":              rejFull,
	"request-bad-magic":               rejBadRequest,
	"request-version":                 rejVersion,
	"request-type":                    rejBadRequest,
	"request-unparsable":              rejBadRequest,
	"request-old-version-in-tls":      rejBadRequest,
	"check-security-required":         rejSecurity,
	"check-profile":                   rejProfile,
	"check-peer-address":              rejAddr,
	"check-link":                      rejLink,
	"check-unknown-service":           rejService,
	"check-backlog-full":              rejBusy,
	"create-bad-steering":             rejBadRequest,
	"create-connect-fails":            rejBadRequest,
	"create-qp-fails":                 rejInternal,
}

// dialOK dials eb's service "x" from a new endpoint with security sec
// and accepts the connection.
func dialOK(t *testing.T, eb *Endpoint, sec *Security) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fab := mem.NewFabric(mem.Config{Seed: 1}, clock.NewSystem())
	t.Cleanup(func() { fab.Close() })
	ea := memEndpoint(t, fab, macA, ipA, 1, withSec(sec))
	c, err := ea.Dial(ctx, eb.CMAddr(), "x")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
}

// dialErr dials eb's service "x" with security sec and wants an error
// wrapping want.
func dialErr(t *testing.T, eb *Endpoint, sec *Security, want error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fab := mem.NewFabric(mem.Config{Seed: 1}, clock.NewSystem())
	t.Cleanup(func() { fab.Close() })
	ea := memEndpoint(t, fab, macA, ipA, 1, withSec(sec))
	if _, err := ea.Dial(ctx, eb.CMAddr(), "x"); !errors.Is(err, want) {
		t.Fatalf("Dial: %v, want %v", err, want)
	}
}

func waitHalfOpen(t *testing.T, ep *Endpoint, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ep.CMStats().HalfOpen != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("HalfOpen %d, want %d", ep.CMStats().HalfOpen, n)
		}
	}
}

// waitStat waits until the counter stat reads picks is 1.
func waitStat(t *testing.T, ep *Endpoint, stat func(Stats) uint64) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); stat(ep.CMStats()) != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("counter %d, want 1 (%+v)", stat(ep.CMStats()), ep.CMStats())
		}
	}
}

func waitQPs(t *testing.T, ep *Endpoint, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); qps(t, ep) != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("QPs %d, want %d", qps(t, ep), n)
		}
	}
}
