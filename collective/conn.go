package collective

import (
	"context"
	"errors"
	"net"
	"os"
	"time"
)

var noDeadline time.Time

// withConnDeadline runs fn, which reads (write false) or writes (write
// true) on c, so that the context's deadline and cancellation interrupt it.
// It returns the context's error when that is what stopped fn.
func withConnDeadline(ctx context.Context, c net.Conn, write bool, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	set := c.SetReadDeadline
	if write {
		set = c.SetWriteDeadline
	}
	d, _ := ctx.Deadline()
	set(d)
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() { set(time.Unix(1, 0)) })
	}
	err := fn()
	if stop != nil {
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
	if _, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) {
		<-ctx.Done()
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func isClosedErr(err error) bool { return errors.Is(err, net.ErrClosed) }
