package transport

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/mem"
)

// badICRCLink spoils the ICRC (the last byte) of every frame it sends, as a
// peer that sends from another UDP source port than its ICRC covers does.
type badICRCLink struct{ link.Link }

func (l badICRCLink) Send(fs []link.Frame) (int, error) {
	for i := range fs {
		if b := fs[i].Buf; len(b) > 0 {
			b[len(b)-1] ^= 0xff
		}
	}
	return l.Link.Send(fs)
}

// TestQPErrorICRC: a QP whose every frame fails the peer's ICRC check
// fails its Send with ErrPeerUnreachable and says that the peer never
// acknowledged; the peer's Recv that times out says that its endpoint
// dropped frames with a bad ICRC and what that means. Both still match
// their base errors with errors.Is, and errors.As gives the counters.
func TestQPErrorICRC(t *testing.T) {
	seed := testutil.Seed(t)
	_, pa, pb := memPorts(t, mem.Config{Seed: seed})
	cfg := Config{Seed: seed, MinRTO: time.Millisecond, MaxRTO: 20 * time.Millisecond, MaxRetries: 4}
	ea, err := NewEndpoint(badICRCLink{pa}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ea.Close()
	cfg.Seed++
	eb, err := NewEndpoint(pb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer eb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ca, cb := connectQPs(ctx, t, ea, eb)

	err = ca.Send(ctx, make([]byte, 5000))
	var qe *QPError
	if !errors.Is(err, ErrPeerUnreachable) || !errors.As(err, &qe) {
		t.Fatalf("Send whose frames all fail the ICRC: %v, want ErrPeerUnreachable as a *QPError", err)
	}
	if qe.QP.AcksReceived != 0 || qe.QP.TxPackets == 0 || qe.Remote.QPN != cb.Info().QPN || qe.Recv {
		t.Fatalf("QPError counters: %+v", qe)
	}
	for _, want := range []string{"timeouts", "0 ACKs received", "never acknowledged", "BadICRC"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("Send error %q does not say %q", err, want)
		}
	}

	short, cancelShort := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err = cb.Recv(short)
	cancelShort()
	qe = nil
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &qe) {
		t.Fatalf("Recv of frames that all fail the ICRC: %v, want the deadline as a *QPError", err)
	}
	if !qe.Recv || qe.Endpoint.BadICRC == 0 || qe.QP.RxPackets != 0 {
		t.Fatalf("QPError counters: %+v", qe)
	}
	for _, want := range []string{"nothing received", "with a bad ICRC", "UDP source port"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("Recv error %q does not say %q", err, want)
		}
	}
}

// TestQPErrorQuiet: errors that the counters do not explain stay bare: a
// Recv that times out while the peer sent nothing and nothing was dropped,
// a Send whose context was cancelled.
func TestQPErrorQuiet(t *testing.T) {
	_, ea, eb, ca, cb := endpointPair(t, mem.Config{Seed: testutil.Seed(t)}, Config{})
	defer ea.Close()
	defer eb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ca.Send(ctx, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, err := cb.Recv(ctx); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 10*time.Millisecond)
	_, err := cb.Recv(short)
	cancelShort()
	if err != context.DeadlineExceeded {
		t.Fatalf("Recv from a quiet peer: %v, want the bare deadline", err)
	}
	done, cancelDone := context.WithCancel(ctx)
	cancelDone()
	if err := ca.Send(done, []byte("x")); err != context.Canceled {
		t.Fatalf("Send with a cancelled context: %v, want the bare context.Canceled", err)
	}
}
