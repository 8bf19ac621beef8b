package cm

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport"
)

// scriptedListener accepts one channel on a loopback port, inside TLS
// with sec's server configuration when sec is set, reads the request and
// lets answer reply; then it reads one more message and sends its type
// (0 when none) on the channel it returns.
func scriptedListener(t *testing.T, sec *security, answer func(c net.Conn, m cmMsg)) (string, <-chan uint8) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan uint8, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- 0
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Minute))
		if sec != nil {
			ts := tls.Server(c, sec.server)
			if ts.Handshake() != nil {
				got <- 0
				return
			}
			c = ts
		}
		m, err := readMsg(c)
		if err != nil {
			got <- 0
			return
		}
		if answer != nil {
			answer(c, m)
		}
		m, _ = readMsg(c)
		got <- m.typ
	}()
	return ln.Addr().String(), got
}

// rep is a reply from a listener's QP at ipB with a caller's link block.
func rep() connRep {
	return connRep{qp: transport.QPInfo{QPN: 0x88, PSN: 1, MAC: macB, IP: ipB}, link: linkInfo{mtu: 1500}}
}

func answerRep(r connRep) func(net.Conn, cmMsg) {
	return func(c net.Conn, m cmMsg) { c.Write(appendMsgV(nil, m.version, msgREP, r.marshalV(m.version))) }
}

func answerRej(reason, version uint8) func(net.Conn, cmMsg) {
	return func(c net.Conn, m cmMsg) {
		c.Write(appendMsgV(nil, m.version, msgREJ, rejection{reason: reason, version: version, text: "scripted"}.marshal()))
	}
}

// answerSecured replies inside TLS with the protection flags given and,
// when prove, the listener's proof of testPSK.
func answerSecured(flags uint8, prove bool) func(net.Conn, cmMsg) {
	return func(c net.Conn, m cmMsg) {
		r := rep()
		r.sec.flags = flags
		if prove {
			r.sec.proof, _ = pskProof(testPSK, c.(*tls.Conn).ConnectionState(), "listener")
		}
		c.Write(appendMsgV(nil, m.version, msgREP, r.marshalV(m.version)))
	}
}

// Every transition of the dialer's handshake, against a listener written
// by hand (or a real one): the path of states, Dial's error, how Dial may
// try again (dialRetry), what the listener read after its answer (a REJ
// when the dialer refused the reply, RTU when connected), and no QP left
// when it failed. The rows are the table in docs/design.md ("The
// handshake's states").
func TestDialerTransitions(t *testing.T) {
	seed := testutil.Seed(t)
	pskSec, err := newSecurity(&Security{PSK: testPSK})
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := func(t *testing.T) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
		return ln.Addr().String()
	}
	type row struct {
		name       string
		sec        *Security      // the dialer's
		set        func(*Options) // the dialer's options
		listener   *security      // the scripted listener's TLS; nil: clear
		answer     func(net.Conn, cmMsg)
		addr       func(t *testing.T, fab *mem.Fabric) string // a real listener or an address; nil: the scripted one
		timeout    time.Duration
		path       string
		want       error // nil: connected
		next       dialRetry
		afterwards uint8  // what the scripted listener read after its answer
		breakAt    string // close the dialer's channel as it enters this state
	}
	realListener := func(sec *Security) func(*testing.T, *mem.Fabric) string {
		return func(t *testing.T, fab *mem.Fabric) string {
			eb := memEndpoint(t, fab, macB, ipB, seed+1, withSec(sec))
			if _, err := eb.Listen("x"); err != nil {
				t.Fatal(err)
			}
			return eb.CMAddr()
		}
	}
	rows := []row{
		{name: "connect-refused", addr: func(t *testing.T, _ *mem.Fabric) string { return refusedAddr(t) },
			path: "connect>failed", want: ErrRefused},
		{name: "clear-connected", addr: realListener(nil), path: "connect>request>reply>check>set-up>ready>connected"},
		{name: "tls-connected", sec: &Security{PSK: testPSK}, addr: realListener(&Security{PSK: testPSK}),
			path: "connect>tls>request>reply>check>set-up>ready>connected"},
		{name: "tls-listener-in-clear", sec: &Security{PSK: testPSK}, addr: realListener(nil),
			path: "connect>tls>failed", want: ErrSecurityMismatch},
		{name: "tls-listener-in-clear-allowed", sec: &Security{PSK: testPSK, AllowClear: true}, addr: realListener(nil),
			path: "connect>tls>failed", want: ErrSecurityMismatch, next: dialRetry{clear: true}},
		{name: "tls-certificate-refused", sec: certSecurity(t, newPKI(t, "the dialer's CA"), "a", false),
			addr: realListener(certSecurity(t, newPKI(t, "another CA"), "b", false)),
			path: "connect>tls>failed", want: ErrAuth},
		{name: "reply-timeout", timeout: time.Second, path: "connect>request>reply>failed", want: os.ErrDeadlineExceeded},
		{name: "reply-closed-unanswered", answer: func(c net.Conn, _ cmMsg) { c.Close() },
			path: "connect>request>reply>failed", want: io.EOF, next: dialRetry{again: true}},
		{name: "reply-rej-full", answer: answerRej(rejFull, cmVersion), path: "connect>request>reply>failed", want: ErrRejected, next: dialRetry{again: true}},
		{name: "reply-rej-older-version", answer: answerRej(rejVersion, cmVersion1), path: "connect>request>reply>failed", want: ErrVersion, next: dialRetry{ver: cmVersion1}},
		{name: "reply-rej-service", answer: answerRej(rejService, cmVersion), path: "connect>request>reply>failed", want: ErrUnknownService},
		{name: "reply-rej-link", answer: answerRej(rejLink, cmVersion), path: "connect>request>reply>failed", want: ErrIncompatible},
		{name: "reply-rej-address", answer: answerRej(rejAddr, cmVersion), path: "connect>request>reply>failed", want: ErrPeerAddr},
		{name: "reply-rej-security", answer: answerRej(rejSecurity, cmVersion), path: "connect>request>reply>failed", want: ErrSecurityMismatch},
		{name: "reply-rej-auth", answer: answerRej(rejAuth, cmVersion), path: "connect>request>reply>failed", want: ErrAuth},
		{name: "reply-rej-busy", answer: answerRej(rejBusy, cmVersion), path: "connect>request>reply>failed", want: ErrRejected},
		{name: "reply-other-version", answer: func(c net.Conn, _ cmMsg) { c.Write(appendMsgV(nil, cmVersion3, msgREP, rep().marshalV(cmVersion3))) },
			path: "connect>request>reply>failed", want: ErrVersion},
		{name: "reply-wrong-type", answer: func(c net.Conn, m cmMsg) { c.Write(appendMsgV(nil, m.version, msgRTU, nil)) },
			path: "connect>request>reply>failed", want: errBadMessage},
		{name: "reply-unparsable", answer: func(c net.Conn, m cmMsg) { c.Write(appendMsgV(nil, m.version, msgREP, []byte{1, 2, 3})) },
			path: "connect>request>reply>failed", want: errBadMessage},
		{name: "check-peer-address", set: func(o *Options) { o.TrustPeerIP = false }, answer: answerRep(rep()),
			path: "connect>request>reply>check>refused", want: ErrPeerAddr, afterwards: msgREJ},
		{name: "check-link", answer: answerRep(func() connRep { r := rep(); r.link.mtu = 9000; return r }()),
			path: "connect>request>reply>check>refused", want: ErrIncompatible, afterwards: msgREJ},
		{name: "check-key-not-proven", sec: &Security{PSK: testPSK}, listener: pskSec, answer: answerSecured(secPackets, false),
			path: "connect>tls>request>reply>check>refused", want: ErrAuth, afterwards: msgREJ},
		{name: "check-unprotected", sec: &Security{PSK: testPSK}, listener: pskSec, answer: answerSecured(0, true),
			path: "connect>tls>request>reply>check>refused", want: ErrRejected, afterwards: msgREJ},
		{name: "check-integrity-unasked", sec: &Security{PSK: testPSK}, listener: pskSec, answer: answerSecured(secPackets|secIntegrityOnly, true),
			path: "connect>tls>request>reply>check>refused", want: ErrRejected, afterwards: msgREJ},
		{name: "set-up-connect-fails", answer: answerRep(func() connRep { r := rep(); r.qp.IP = netip.MustParseAddr("2001:db8::2"); return r }()),
			path: "connect>request>reply>check>set-up>failed", want: transport.ErrInvalidRequest},
		{name: "request-write-fails", breakAt: "request", answer: answerRep(rep()),
			path: "connect>request>failed", want: net.ErrClosed},
		{name: "ready-write-fails", breakAt: "ready", answer: answerRep(rep()),
			path: "connect>request>reply>check>set-up>ready>failed", want: net.ErrClosed},
		{name: "ready-rtu", answer: answerRep(rep()), path: "connect>request>reply>check>set-up>ready>connected", afterwards: msgRTU},
	}
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			fab := mem.NewFabric(mem.Config{Seed: seed}, clock.NewSystem())
			t.Cleanup(func() { fab.Close() })
			set := []func(*Options){withSec(tc.sec)}
			if tc.set != nil {
				set = append(set, tc.set)
			}
			ea := memEndpoint(t, fab, macA, ipA, seed, set...)
			tr := traceOn(ea)
			if tc.breakAt != "" {
				traced := ea.trace
				ea.trace = func(hs any, role, from, to string) {
					traced(hs, role, from, to)
					if to == tc.breakAt {
						hs.(*dhs).tc.Close()
					}
				}
			}
			var got <-chan uint8
			var addr string
			if tc.addr != nil {
				addr = tc.addr(t, fab)
			} else {
				addr, got = scriptedListener(t, tc.listener, tc.answer)
			}
			timeout := tc.timeout
			if timeout == 0 {
				timeout = time.Minute
			}
			qc, err := ea.CreateQP(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			sec, err := newSecurity(tc.sec)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			c, next, err := ea.dialOnce(ctx, qc, cmVersion, sec, addr, "x")
			if path := tr.first(t); path != tc.path {
				t.Fatalf("path %s, want %s (error %v)", path, tc.path, err)
			}
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("dial: %v", err)
			case tc.want == nil:
				if tc.afterwards != 0 {
					if typ := <-got; typ != tc.afterwards {
						t.Fatalf("the listener read type %d after its reply, want %d", typ, tc.afterwards)
					}
				}
				c.Close()
				return
			case !errors.Is(err, tc.want):
				t.Fatalf("dial: %v, want %v", err, tc.want)
			case next != tc.next:
				t.Fatalf("dial again: %+v, want %+v", next, tc.next)
			}
			t.Logf("dial: %v", err)
			qc.Destroy(context.Background())
			if got != nil && tc.afterwards != 0 {
				if typ := <-got; typ != tc.afterwards {
					t.Fatalf("the listener read type %d after its reply, want %d", typ, tc.afterwards)
				}
			}
			if n := qps(t, ea); n != 0 {
				t.Fatalf("QPs left: %d", n)
			}
		})
	}
}
