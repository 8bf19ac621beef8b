package pcap

import (
	"time"

	"github.com/sprayfabric/spray/link"
)

// Wrap returns a link that forwards every call to l and records, in w, every
// frame passed to Send (before l.Send, which takes the frames) and every
// frame that Recv returns, stamped with the wall-clock time of the call. It
// does not change the frames. The returned link implements
// link.StatsReader, passing l's counters through, exactly when l does.
//
// Recording copies each frame into w's buffer on the caller's goroutine. A
// write error stops the recording but not the link: w keeps the error and
// returns it from Flush and Close. Closing the returned link closes l, not
// w, which may be shared by several links: close w after them.
//
// The returned link is as safe for concurrent use as l is (w is safe), and
// implements link.WaitSplitter exactly when l does.
func Wrap(l link.Link, w *Writer) link.Link {
	c := &capture{l: l, w: w}
	s, stats := l.(link.StatsReader)
	ws, split := l.(link.WaitSplitter)
	switch {
	case stats && split:
		return &statsSplitCapture{statsCapture: &statsCapture{capture: c, s: s}, WaitSplitter: ws}
	case stats:
		return &statsCapture{capture: c, s: s}
	case split:
		return &splitCapture{capture: c, WaitSplitter: ws}
	}
	return c
}

type splitCapture struct {
	*capture
	link.WaitSplitter
}

type statsSplitCapture struct {
	*statsCapture
	link.WaitSplitter
}

type capture struct {
	l link.Link
	w *Writer
}

type statsCapture struct {
	*capture
	s link.StatsReader
}

func (c *statsCapture) Stats() link.Stats { return c.s.Stats() }

func (c *capture) Info() link.Info { return c.l.Info() }

func (c *capture) Recv(fs []link.Frame) (int, error) {
	n, err := c.l.Recv(fs)
	if n > 0 && n <= len(fs) {
		c.w.writeFrames(time.Now(), fs[:n])
	}
	return n, err
}

func (c *capture) Release(fs []link.Frame) { c.l.Release(fs) }

func (c *capture) Alloc(fs []link.Frame) int { return c.l.Alloc(fs) }

func (c *capture) Send(fs []link.Frame) (int, error) {
	if len(fs) > 0 {
		c.w.writeFrames(time.Now(), fs)
	}
	return c.l.Send(fs)
}

func (c *capture) Wait(timeout time.Duration) error { return c.l.Wait(timeout) }

func (c *capture) Wake() { c.l.Wake() }

func (c *capture) Close() error { return c.l.Close() }
