package spray

import (
	"encoding/binary"
	"fmt"

	"github.com/sprayfabric/spray/transport"
)

// RemoteLen is the length of an encoded transport.Remote.
const RemoteLen = 12

// AppendRemote appends r, the name of a registered region that a peer
// may write to, in RemoteLen bytes (address, then key, big endian), for
// the peer to decode with ParseRemote.
func AppendRemote(b []byte, r transport.Remote) []byte {
	b = binary.BigEndian.AppendUint64(b, r.Addr)
	return binary.BigEndian.AppendUint32(b, r.RKey)
}

// ParseRemote decodes what AppendRemote encoded.
func ParseRemote(b []byte) (transport.Remote, error) {
	if len(b) != RemoteLen {
		return transport.Remote{}, fmt.Errorf("spray: a remote region is %d bytes, not %d", RemoteLen, len(b))
	}
	return transport.Remote{Addr: binary.BigEndian.Uint64(b), RKey: binary.BigEndian.Uint32(b[8:])}, nil
}
