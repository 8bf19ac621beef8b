package collective

import (
	"context"
	"errors"
	"net"
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
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func isClosedErr(err error) bool { return errors.Is(err, net.ErrClosed) }
