package transport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// QPError is the error of a blocking Conn call that the QP's counters
// explain: the peer stopped answering (ErrPeerUnreachable), a Send, Write
// or Read whose context ended before the peer acknowledged anything, or a
// Recv whose context ended with nothing received while this endpoint
// dropped frames it could not take. A bare "context deadline exceeded"
// leaves a user nothing to look at; the counters say whether frames left,
// whether any ACK came back and what this endpoint dropped, and the text
// says what to check (TestQPErrorICRC).
//
// It wraps Err: errors.Is(err, ErrPeerUnreachable), errors.Is(err,
// context.DeadlineExceeded) and the like hold as they do for Err, and
// errors.As(err, &qpErr) gives the counters.
type QPError struct {
	// Err is the error explained.
	Err error
	// Remote is the peer QP this one is connected to (QPN, MAC, IP, and
	// NoMsgLimit).
	Remote QPInfo
	// QP are the QP's counters when the call failed.
	QP QPStats
	// Endpoint are the counters of this QP's endpoint (every engine) when
	// the call failed.
	Endpoint EngineStats
	// Recv says the call was a Recv, waiting for the peer's data, rather
	// than a request waiting for the peer's acknowledgement.
	Recv bool
}

// Error returns Err's text followed by the counters and what to check.
func (e *QPError) Error() string {
	var b strings.Builder
	b.WriteString(e.Err.Error())
	b.WriteString(" (")
	s := e.QP
	if e.Recv {
		fmt.Fprintf(&b, "nothing received from QP %#x at %s: %d packets received, %d sent, %d ACKs received",
			e.Remote.QPN, e.Remote.IP, s.RxPackets, s.TxPackets, s.AcksReceived)
	} else {
		if !errors.Is(e.Err, ErrPeerUnreachable) { // that error says as much
			b.WriteString("no answer from ")
		}
		fmt.Fprintf(&b, "QP %#x at %s: %d ACKs received, %d packets sent, %d retransmitted, %d timeouts",
			e.Remote.QPN, e.Remote.IP, s.AcksReceived, s.TxPackets, s.Retransmits, s.Timeouts)
	}
	drops := e.drops()
	if drops != "" {
		b.WriteString("; this endpoint dropped ")
		b.WriteString(drops)
	}
	switch {
	case e.Recv && e.Endpoint.BadICRC > 0:
		b.WriteString("; frames that fail the ICRC were changed on the way, or sent from a UDP source port " +
			"other than the one their ICRC covers (a link/udp peer sends only from the ports it bound: its Entropies)")
	case e.Recv && e.Endpoint.UnknownQP > 0:
		b.WriteString("; frames for unknown QPs: the peer may be connected to a QP number this endpoint does not have")
	case s.AcksReceived == 0 && (!e.Recv || s.TxPackets > 0):
		b.WriteString("; the peer never acknowledged: check that it runs, that its QP is connected to this one, " +
			"that it receives at this address and port, and its endpoint's BadICRC and UnknownQP counters")
	}
	b.WriteString(")")
	return b.String()
}

// drops names this endpoint's nonzero drop counters ("3 with a bad ICRC,
// 1 for unknown QPs"), or returns "".
func (e *QPError) drops() string {
	st := e.Endpoint
	var parts []string
	for _, d := range []struct {
		n    uint64
		what string
	}{
		{st.BadICRC, "with a bad ICRC"},
		{st.UnknownQP, "for unknown QPs"},
		{st.NotRoCE, "not RoCEv2"},
		{st.Truncated, "truncated"},
		{st.BadHeader, "with a bad header"},
		{st.BadOpcode, "with a bad opcode"},
		{st.OtherMalformed, "otherwise malformed"},
	} {
		if d.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", d.n, d.what))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, ", ") + " frames"
}

// Unwrap returns Err.
func (e *QPError) Unwrap() error { return e.Err }

// explainWait bounds how long explain waits for the counters: the engine
// answers in microseconds unless it is stuck, and then the bare error is
// better than a call that does not return.
const explainWait = time.Second

// explain returns err as a *QPError when the counters explain it (see
// QPError), else err itself. recv says the call was a Recv. It is small
// enough to inline: a call that succeeded allocates nothing here
// (TestEndpointRecvNoAllocs).
func (c *Conn) explain(err error, recv bool) error {
	if err == nil {
		return nil
	}
	return c.explainErr(err, recv)
}

func (c *Conn) explainErr(err error, recv bool) error {
	var qe *QPError
	if errors.As(err, &qe) {
		return err
	}
	unreachable := errors.Is(err, ErrPeerUnreachable)
	if !unreachable && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), explainWait)
	defer cancel()
	e := &QPError{Err: err, Recv: recv && !unreachable}
	if serr := c.s.view(ctx, func() error {
		e.QP = c.qp.Stats()
		e.Remote = QPInfo{QPN: c.qp.rqpn, MAC: c.qp.rmac, IP: c.qp.rip, NoMsgLimit: c.qp.mwin.off}
		return nil
	}); serr != nil {
		return err
	}
	if e.Recv && e.QP.RxPackets > 0 || !e.Recv && !unreachable && e.QP.AcksReceived > 0 {
		return err // the peer answers: the wait was only too short
	}
	var serr error
	if e.Endpoint, serr = c.ep.Stats(ctx); serr != nil {
		return err
	}
	if e.Recv && e.Endpoint.Malformed()+e.Endpoint.UnknownQP == 0 && (e.QP.TxPackets == 0 || e.QP.AcksReceived > 0) {
		return err // nothing dropped, nothing unanswered: the peer sent nothing yet
	}
	return e
}
