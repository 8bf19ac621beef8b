package spray

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/sprayfabric/spray/transport"
)

// The connection protocol (see the package doc): every message is an
// 8-byte header, "SPCM", version, type, body length (big endian), then the
// body. The header's layout is the same in every version, so that a peer
// can always read a rejection.
const (
	cmVersion = 1
	cmHdrLen  = 8
	cmMaxBody = 512
	// MaxService is the longest service name, in bytes.
	MaxService = 255
)

var cmMagic = [4]byte{'S', 'P', 'C', 'M'}

// Message types, after rdma_cm's: request, reply, reject, ready to use,
// disconnect request and reply.
const (
	msgREQ  = 1
	msgREP  = 2
	msgREJ  = 3
	msgRTU  = 4
	msgDREQ = 5
	msgDREP = 6
)

// Reject reasons.
const (
	rejBadRequest = 1
	rejVersion    = 2
	rejService    = 3
	rejProfile    = 4
	rejBusy       = 5
	rejInternal   = 6
)

var errBadMessage = errors.New("spray: malformed connection message")

type cmMsg struct {
	version uint8
	typ     uint8
	body    []byte
}

// readMsg reads one message. A wrong magic or an oversized body is
// errBadMessage; a version other than cmVersion is returned as read, with
// its body, for the caller to reject.
func readMsg(r io.Reader) (cmMsg, error) {
	var h [cmHdrLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return cmMsg{}, err
	}
	if [4]byte(h[:4]) != cmMagic {
		return cmMsg{}, fmt.Errorf("%w: bad magic %x", errBadMessage, h[:4])
	}
	n := binary.BigEndian.Uint16(h[6:])
	if n > cmMaxBody {
		return cmMsg{}, fmt.Errorf("%w: body of %d bytes", errBadMessage, n)
	}
	m := cmMsg{version: h[4], typ: h[5], body: make([]byte, n)}
	if _, err := io.ReadFull(r, m.body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return cmMsg{}, err
	}
	return m, nil
}

func appendMsg(b []byte, typ uint8, body []byte) []byte {
	b = append(b, cmMagic[:]...)
	b = append(b, cmVersion, typ)
	b = binary.BigEndian.AppendUint16(b, uint16(len(body)))
	return append(b, body...)
}

// connReq is a connection request: the dialer's QP and the service.
type connReq struct {
	profile transport.Profile
	qp      transport.QPInfo
	service string
}

func appendQPInfo(b []byte, q transport.QPInfo) []byte {
	b = binary.BigEndian.AppendUint32(b, q.QPN)
	b = binary.BigEndian.AppendUint32(b, q.PSN)
	b = append(b, q.MAC[:]...)
	ip := q.IP.Unmap().AsSlice()
	b = append(b, byte(len(ip)))
	return append(b, ip...)
}

func parseQPInfo(b []byte) (transport.QPInfo, []byte, error) {
	var q transport.QPInfo
	if len(b) < 4+4+6+1 {
		return q, nil, fmt.Errorf("%w: short QP info", errBadMessage)
	}
	q.QPN = binary.BigEndian.Uint32(b)
	q.PSN = binary.BigEndian.Uint32(b[4:])
	copy(q.MAC[:], b[8:14])
	n := int(b[14])
	b = b[15:]
	if (n != 4 && n != 16) || len(b) < n {
		return q, nil, fmt.Errorf("%w: IP address of %d bytes", errBadMessage, n)
	}
	q.IP, _ = netip.AddrFromSlice(b[:n])
	if q.IP.Is4In6() || q.IP.IsUnspecified() {
		return q, nil, fmt.Errorf("%w: IP address %s", errBadMessage, q.IP)
	}
	if q.QPN >= 1<<24 || q.PSN >= 1<<24 {
		return q, nil, fmt.Errorf("%w: QPN %#x or PSN %#x beyond 24 bits", errBadMessage, q.QPN, q.PSN)
	}
	return q, b[n:], nil
}

func (r connReq) marshal() []byte {
	b := []byte{byte(r.profile)}
	b = appendQPInfo(b, r.qp)
	b = append(b, byte(len(r.service)))
	return append(b, r.service...)
}

func parseReq(b []byte) (connReq, error) {
	var r connReq
	if len(b) < 1 {
		return r, fmt.Errorf("%w: empty request", errBadMessage)
	}
	r.profile = transport.Profile(b[0])
	q, rest, err := parseQPInfo(b[1:])
	if err != nil {
		return r, err
	}
	r.qp = q
	if len(rest) < 1 || len(rest) != 1+int(rest[0]) {
		return r, fmt.Errorf("%w: service name", errBadMessage)
	}
	r.service = string(rest[1:])
	return r, nil
}

func parseRep(b []byte) (transport.QPInfo, error) {
	q, rest, err := parseQPInfo(b)
	if err == nil && len(rest) != 0 {
		err = fmt.Errorf("%w: %d trailing bytes", errBadMessage, len(rest))
	}
	return q, err
}

// rejection is a REJ body: reason, the rejecting side's version, text.
type rejection struct {
	reason  uint8
	version uint8
	text    string
}

func (r rejection) marshal() []byte {
	t := r.text
	if len(t) > 255 {
		t = t[:255]
	}
	b := []byte{r.reason, r.version, byte(len(t))}
	return append(b, t...)
}

func parseRej(b []byte) (rejection, error) {
	if len(b) < 3 || len(b) != 3+int(b[2]) {
		return rejection{}, fmt.Errorf("%w: rejection", errBadMessage)
	}
	return rejection{reason: b[0], version: b[1], text: string(b[3:])}, nil
}

// err turns a rejection into the error Dial returns.
func (r rejection) err() error {
	var s error
	switch r.reason {
	case rejVersion:
		return fmt.Errorf("%w: the peer speaks version %d, this side %d: %s", ErrVersion, r.version, cmVersion, r.text)
	case rejService:
		s = ErrUnknownService
	default:
		s = ErrRejected
	}
	return fmt.Errorf("%w: %s", s, r.text)
}
