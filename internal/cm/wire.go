package cm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/sprayfabric/spray/link/rss"
	"github.com/sprayfabric/spray/transport"
)

// The connection protocol (see the package doc): every message is an
// 8-byte header, "SPCM", version, type, body length (big endian), then the
// body. The header's layout is the same in every version, so that a peer
// can always read a rejection. Version 2 adds each side's steering (its
// RSS key and table and the queue of the QP's engine) to REQ and REP;
// version 3 adds each side's link (kind, IP MTU, UDP data ports) after
// it; version 4 adds each side's security block (the integrity-only
// choice and the pre-shared key's proof) after that. Version 5 changes no
// message: it says that this side's data path sends and takes ACKs with
// the message limit (wire.AckMsgLimit), which a build of version 4 or
// earlier drops as a bad header, so that a QP connected in version 4 or
// earlier sends none (transport.QPInfo.NoMsgLimit, TestCMOlderDataPath).
// A listener answers a request in the request's version (1 to 5), and a
// dialer that an older listener rejects dials again in the version its
// rejection names. Inside TLS, only version 4 and later are spoken.
const (
	cmVersion  = 5
	cmVersion4 = 4
	cmVersion3 = 3
	cmVersion2 = 2
	cmVersion1 = 1
	cmHdrLen   = 8
	// cmMaxBody bounds a version-1 body, cmMaxBody2 a version-2 one (room
	// for a steering block with the largest table), cmMaxBody3 a
	// version-3 one (a link block more), cmMaxBody4 one of any later
	// version (a security block more).
	cmMaxBody  = 512
	cmMaxBody2 = cmMaxBody + 2 + maxSteering
	cmMaxBody3 = cmMaxBody2 + linkBlockLen
	cmMaxBody4 = cmMaxBody3 + secBlockMax
	// maxSteering is the longest steering block's content: queue, table.
	maxSteering = 2 + rss.MaxEncodedLen
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

// Close markers: a secured Conn whose channel has ended sends DREQ and
// DREP over its QP as a SEND with immediate and no data, the immediate
// "SPC" and the message type (Conn.closeLocal). The QP authenticates
// them; a clear QP carries none.
const (
	markDREQ = 0x535043_00 | msgDREQ
	markDREP = 0x535043_00 | msgDREP
)

// Reject reasons.
const (
	rejBadRequest = 1
	rejVersion    = 2
	rejService    = 3
	rejProfile    = 4
	rejBusy       = 5
	rejInternal   = 6
	// Version 3's reasons; an older dialer reports them as ErrRejected
	// with the text.
	rejLink = 7 // the links cannot talk: kind, MTU or UDP port differ
	rejAddr = 8 // the QP's IP is not the address the request came from
	rejFull = 9 // the listener holds as many requests as it may: try again
	// Version 4's reasons.
	rejSecurity = 10 // one side runs the connection manager in TLS, the other in clear
	rejAuth     = 11 // the dialer did not prove the listener's pre-shared key
)

var errBadMessage = errors.New("spray: malformed connection message")

type cmMsg struct {
	version uint8
	typ     uint8
	body    []byte
}

// readMsg reads one message. A wrong magic or an oversized body (beyond
// its version's bodyLimit) is errBadMessage; a
// version this side does not speak is returned as read, with its body, for
// the caller to reject.
func readMsg(r io.Reader) (cmMsg, error) {
	var h [cmHdrLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return cmMsg{}, err
	}
	if [4]byte(h[:4]) != cmMagic {
		return cmMsg{}, fmt.Errorf("%w: bad magic %x", errBadMessage, h[:4])
	}
	n := binary.BigEndian.Uint16(h[6:])
	if limit := bodyLimit(h[4]); int(n) > limit {
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

// bodyLimit is the largest body of a message of version v.
func bodyLimit(v uint8) int {
	switch {
	case v <= cmVersion1:
		return cmMaxBody
	case v == cmVersion2:
		return cmMaxBody2
	case v == cmVersion3:
		return cmMaxBody3
	}
	return cmMaxBody4
}

// appendMsg appends a message of this side's version.
func appendMsg(b []byte, typ uint8, body []byte) []byte {
	return appendMsgV(b, cmVersion, typ, body)
}

// appendMsgV appends a message of version v.
func appendMsgV(b []byte, v, typ uint8, body []byte) []byte {
	b = append(b, cmMagic[:]...)
	b = append(b, v, typ)
	b = binary.BigEndian.AppendUint16(b, uint16(len(body)))
	return append(b, body...)
}

// connReq is a connection request: the dialer's QP, the service, from
// version 2 the dialer's steering (nil: none), from version 3 its link
// and from version 4 its security block.
type connReq struct {
	profile transport.Profile
	qp      transport.QPInfo
	service string
	steer   *transport.Steering
	link    linkInfo
	sec     secBlock
}

// connRep is a reply: the listener's QP, from version 2 its steering,
// from version 3 its link and from version 4 its security block.
type connRep struct {
	qp    transport.QPInfo
	steer *transport.Steering
	link  linkInfo
	sec   secBlock
}

// secBlock is version 4's security block: flags (1 byte), then the length
// of the sender's proof of the pre-shared key (1 byte, 0 or pskProofLen)
// and the proof. In a request, secIntegrityOnly asks for authenticated
// packets with payloads in clear; in a reply it says what the listener
// chose, and secPackets that the QP's packets are protected (keys
// installed). In clear, both sides send 0 and no proof.
type secBlock struct {
	flags uint8
	proof []byte
}

const (
	secPackets       = 1 << 0
	secIntegrityOnly = 1 << 1
	secFlagsKnown    = secPackets | secIntegrityOnly
	// secBlockMax is the longest security block: flags, length, proof.
	secBlockMax = 2 + pskProofLen
)

func (s secBlock) append(b []byte) []byte {
	b = append(b, s.flags, byte(len(s.proof)))
	return append(b, s.proof...)
}

func parseSec(b []byte) (secBlock, []byte, error) {
	if len(b) < 2 {
		return secBlock{}, nil, fmt.Errorf("%w: short security block", errBadMessage)
	}
	s := secBlock{flags: b[0]}
	n := int(b[1])
	if s.flags&^secFlagsKnown != 0 {
		return secBlock{}, nil, fmt.Errorf("%w: security flags %#x", errBadMessage, s.flags)
	}
	if (n != 0 && n != pskProofLen) || len(b) < 2+n {
		return secBlock{}, nil, fmt.Errorf("%w: key proof of %d bytes", errBadMessage, n)
	}
	if n > 0 {
		s.proof = b[2 : 2+n]
	}
	return s, b[2+n:], nil
}

// linkInfo is version 3's link block: the sender's link kind, its IP MTU
// and the UDP ports it receives data on and sends data to, each 0 where
// the sender does not know it (a caller's link). The receiver refuses a
// pair that cannot exchange frames (checkLink).
type linkInfo struct {
	kind     LinkKind
	mtu      uint16
	port     uint16
	peerPort uint16
}

// linkBlockLen is the length of an encoded linkInfo: kind (1 byte), MTU,
// port, peer port (2 bytes each, big endian).
const linkBlockLen = 7

func (l linkInfo) append(b []byte) []byte {
	b = append(b, byte(l.kind))
	b = binary.BigEndian.AppendUint16(b, l.mtu)
	b = binary.BigEndian.AppendUint16(b, l.port)
	return binary.BigEndian.AppendUint16(b, l.peerPort)
}

func parseLink(b []byte) (linkInfo, []byte, error) {
	if len(b) < linkBlockLen {
		return linkInfo{}, nil, fmt.Errorf("%w: short link block", errBadMessage)
	}
	l := linkInfo{kind: LinkKind(b[0]), mtu: binary.BigEndian.Uint16(b[1:]),
		port: binary.BigEndian.Uint16(b[3:]), peerPort: binary.BigEndian.Uint16(b[5:])}
	if l.kind > LinkRaw {
		return linkInfo{}, nil, fmt.Errorf("%w: link kind %d", errBadMessage, b[0])
	}
	return l, b[linkBlockLen:], nil
}

// appendSteering appends a version-2 steering block: its length (2 bytes,
// 0 for none), then the queue (2 bytes) and the table (rss's encoding).
// The address is the QP's, sent beside it. A steering the block cannot
// carry (a queue beyond 16 bits, a table beyond rss's bounds) goes as
// none: steering is an optimisation, never a reason to fail.
func appendSteering(b []byte, st *transport.Steering) []byte {
	start := len(b)
	b = append(b, 0, 0)
	if st == nil || st.Queue < 0 || st.Queue > 0xffff {
		return b
	}
	b = binary.BigEndian.AppendUint16(b, uint16(st.Queue))
	b, err := st.Table.AppendBinary(b)
	if err != nil {
		return append(b[:start], 0, 0)
	}
	binary.BigEndian.PutUint16(b[start:], uint16(len(b)-start-2))
	return b
}

// parseSteering reads a steering block for the QP at ip and returns what
// follows it.
func parseSteering(b []byte, ip netip.Addr) (*transport.Steering, []byte, error) {
	if len(b) < 2 {
		return nil, nil, fmt.Errorf("%w: no steering block", errBadMessage)
	}
	n := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	if n == 0 {
		return nil, b, nil
	}
	if n < 2 || n > maxSteering || len(b) < n {
		return nil, nil, fmt.Errorf("%w: steering block of %d bytes", errBadMessage, n)
	}
	t, err := rss.ParseTable(b[2:n])
	if err != nil {
		return nil, nil, fmt.Errorf("%w: steering: %w", errBadMessage, err)
	}
	return &transport.Steering{IP: ip, Table: t, Queue: int(binary.BigEndian.Uint16(b))}, b[n:], nil
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

// peerQP returns the peer's QP q described in a message of version v: a
// peer of version 4 or earlier drops an ACK with the message limit as a
// bad header, so this side's QP must send it none (TestCMOlderDataPath).
func peerQP(q transport.QPInfo, v uint8) transport.QPInfo {
	q.NoMsgLimit = v < cmVersion
	return q
}

// marshal encodes a request of this side's version.
func (r connReq) marshal() []byte { return r.marshalV(cmVersion) }

// marshalV encodes a request of version v: the steering from version 2,
// the link from version 3, the security block from version 4 on.
func (r connReq) marshalV(v uint8) []byte {
	b := []byte{byte(r.profile)}
	b = appendQPInfo(b, r.qp)
	b = append(b, byte(len(r.service)))
	b = append(b, r.service...)
	return appendBlocks(b, v, r.steer, r.link, r.sec)
}

// appendBlocks appends the blocks that follow a request's or a reply's QP
// (and service): the steering from version 2, the link from version 3,
// the security block from version 4.
func appendBlocks(b []byte, v uint8, steer *transport.Steering, link linkInfo, sec secBlock) []byte {
	if v >= cmVersion2 {
		b = appendSteering(b, steer)
	}
	if v >= cmVersion3 {
		b = link.append(b)
	}
	if v >= cmVersion4 {
		b = sec.append(b)
	}
	return b
}

// parseBlocks decodes the blocks appendBlocks wrote for version v, the
// steering for the QP at ip; bytes left over are an error.
func parseBlocks(b []byte, ip netip.Addr, v uint8) (steer *transport.Steering, link linkInfo, sec secBlock, err error) {
	if v >= cmVersion2 {
		if steer, b, err = parseSteering(b, ip); err != nil {
			return
		}
	}
	if v >= cmVersion3 {
		if link, b, err = parseLink(b); err != nil {
			return
		}
	}
	if v >= cmVersion4 {
		if sec, b, err = parseSec(b); err != nil {
			return
		}
	}
	if len(b) != 0 {
		err = fmt.Errorf("%w: %d trailing bytes", errBadMessage, len(b))
	}
	return
}

// parseReq decodes a request body of version v; the dialer's QP of a
// version before 5 takes no message limit (peerQP).
func parseReq(b []byte, v uint8) (connReq, error) {
	var r connReq
	if len(b) < 1 {
		return r, fmt.Errorf("%w: empty request", errBadMessage)
	}
	r.profile = transport.Profile(b[0])
	q, rest, err := parseQPInfo(b[1:])
	if err != nil {
		return r, err
	}
	r.qp = peerQP(q, v)
	if len(rest) < 1 || len(rest) < 1+int(rest[0]) {
		return r, fmt.Errorf("%w: service name", errBadMessage)
	}
	r.service = string(rest[1 : 1+int(rest[0])])
	rest = rest[1+int(rest[0]):]
	r.steer, r.link, r.sec, err = parseBlocks(rest, q.IP, v)
	return r, err
}

// marshalV encodes a reply of version v: the steering from version 2, the
// link from version 3, the security block from version 4.
func (r connRep) marshalV(v uint8) []byte {
	b := appendQPInfo(nil, r.qp)
	return appendBlocks(b, v, r.steer, r.link, r.sec)
}

// parseRep decodes a reply body of version v; the listener's QP of a
// version before 5 takes no message limit (peerQP).
func parseRep(b []byte, v uint8) (connRep, error) {
	var r connRep
	q, rest, err := parseQPInfo(b)
	if err != nil {
		return r, err
	}
	r.qp = peerQP(q, v)
	r.steer, r.link, r.sec, err = parseBlocks(rest, q.IP, v)
	return r, err
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
	case rejLink:
		s = ErrIncompatible
	case rejAddr:
		s = ErrPeerAddr
	case rejSecurity:
		s = ErrSecurityMismatch
	case rejAuth:
		s = ErrAuth
	default:
		s = ErrRejected
	}
	return fmt.Errorf("%w: %s", s, r.text)
}

// marshal encodes a reply of this side's version.
func (r connRep) marshal() []byte { return r.marshalV(cmVersion) }
