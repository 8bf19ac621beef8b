package collective

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"time"
)

var noDeadline time.Time

// withConnDeadline runs fn, which reads (write false) or writes (write
// true) on c, so that the context's deadline and cancellation interrupt it.
// It returns the context's error when that is what stopped fn.
func withConnDeadline(ctx context.Context, c net.Conn, write bool, fn func() error) error {
	if write {
		return withDeadline(ctx, c.SetWriteDeadline, fn)
	}
	return withDeadline(ctx, c.SetReadDeadline, fn)
}

// withConnCtx is withConnDeadline for reads and writes alike.
func withConnCtx(ctx context.Context, c net.Conn, fn func() error) error {
	return withDeadline(ctx, c.SetDeadline, fn)
}

func withDeadline(ctx context.Context, set func(time.Time) error, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d, _ := ctx.Deadline()
	set(d)
	var stop func() bool
	var mu sync.Mutex
	finished := false
	if ctx.Done() != nil {
		// The callback may run after fn returned: it must not cut the
		// next call short.
		stop = context.AfterFunc(ctx, func() {
			mu.Lock()
			if !finished {
				set(time.Unix(1, 0))
			}
			mu.Unlock()
		})
	}
	err := fn()
	if stop != nil {
		mu.Lock()
		finished = true
		mu.Unlock()
		stop()
	}
	return ctxErr(ctx, err)
}

// ctxErr returns the context's error when it is what made err happen: a
// connection deadline taken from the context may fire a moment before the
// context's own timer.
func ctxErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if d, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) && time.Until(d) < time.Second {
		<-ctx.Done()
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func isClosedErr(err error) bool { return errors.Is(err, net.ErrClosed) }
