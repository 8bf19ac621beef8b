// Package peek serves protocols that share a port: a server reads a
// connection's first bytes to tell them apart (a TLS ClientHello from a
// clear request) and speaks on a Conn that reads those bytes again.
package peek

import "net"

// TLSHandshake is the first byte of a TLS client's first record, the
// ClientHello (RFC 8446 5.1: record type handshake).
const TLSHandshake = 0x16

// Conn is a connection whose first bytes were already read; Read returns
// them before reading on (TestConnReadsPrefixFirst).
type Conn struct {
	net.Conn
	prefix []byte
}

// Prefixed returns c with prefix to be read first. It keeps prefix.
func Prefixed(c net.Conn, prefix []byte) *Conn { return &Conn{Conn: c, prefix: prefix} }

func (c *Conn) Read(b []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(b, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}
