//go:build linux

package raw

// Quiet stops the socket from waking the runtime poller until the next
// Wait (link.Quieter).
func (l *Link) Quiet() { l.c.Quiet() }
