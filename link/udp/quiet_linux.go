//go:build linux

package udp

// Quiet stops the socket from waking the runtime poller until the next
// Wait (link.Quieter).
func (l *Link) Quiet() { l.c.Quiet() }
