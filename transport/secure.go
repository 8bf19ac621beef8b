package transport

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/sprayfabric/spray/transport/wire"
)

// Security are the keys of a secured QP (QP.Secure): every packet it sends
// carries a security header and an AES-GCM tag over its transport headers
// and payload, and its payload is encrypted unless IntegrityOnly; every
// packet it receives must carry a valid one (docs/design.md, "Security").
type Security struct {
	// Send and Recv are this side's traffic secrets, one per direction
	// (the dialer's Send is the listener's Recv). The QP derives its
	// AES-GCM packet keys from them (HKDF), one per key epoch.
	Send, Recv [32]byte
	// IntegrityOnly authenticates every packet but leaves payloads in clear.
	IntegrityOnly bool
}

// SecurityStats count what a secured QP dropped before the packet touched
// its state, and its key rotations. Every drop leaves the QP as it was: no
// ACK, NAK, congestion sample, path score or timer change.
type SecurityStats struct {
	// BadTag: the tag did not match (forged or corrupted header or
	// payload, wrong key), or the packet's protection mode (integrity
	// only or encrypted) is not the QP's.
	BadTag uint64
	// Replayed: a counter already received, within the replay window.
	// TooOld: a counter below the replay window.
	Replayed, TooOld uint64
	// BadEpoch: a key epoch the QP does not hold: retired, or too far
	// ahead of the current one.
	BadEpoch uint64
	// Unsecured: packets without a security header (or malformed one).
	Unsecured uint64
	// Trimmed: packets a switch cut to their headers (wire.Trim). Their
	// tag went with the payload, so nothing authenticates them: a
	// secured QP drops them as the queue would have, and its loss
	// detection repairs them.
	Trimmed uint64
	// TxRotations counts the send keys rotated to a new epoch,
	// RxRotations the receive epochs advanced to.
	TxRotations, RxRotations uint64
	// TxEpoch and RxEpoch are the current send and receive key epochs.
	TxEpoch, RxEpoch uint32
}

// Dropped returns the packets dropped for any security reason.
func (s SecurityStats) Dropped() uint64 {
	return s.BadTag + s.Replayed + s.TooOld + s.BadEpoch + s.Unsecured + s.Trimmed
}

// ErrSecure is wrapped by the errors of Secure.
var ErrSecure = errors.New("transport: cannot secure QP")

// Key schedule. Each direction's secret gives, for epoch e, an AES-128 key
// and a 12-byte IV by HKDF-Expand (SHA-256) with the label and e
// (big-endian) as info; the nonce of a packet is the IV XOR its 64-bit
// counter in the low 8 bytes (as TLS 1.3 does with its sequence number).
// The counter counts every packet of the direction (data, ACK, NAK, CNP,
// READ request and response, a retransmission is a new packet) across
// epochs and never repeats; the key changes every epochPackets packets,
// before the AES-GCM usage limit of one key (RFC 8446, section 5.5: 2^24.5
// full-size records).
const (
	secKeyLen  = 16
	secIVLen   = 12
	secLabel   = "spray qp key"
	secIVLabel = "spray qp iv"
	// defaultEpochPackets is the packets sent under one key epoch.
	defaultEpochPackets = 1 << 24
	// secAhead is how many epochs beyond its current one a receiver
	// accepts: a sender that rotated twice while every packet of the epoch
	// between was lost is still heard. Their keys are derived once, when
	// first named, so that forged epochs cost no repeated derivation.
	secAhead = 2
	// secOverhead is the bytes a secured packet adds: header and tag.
	secOverhead = wire.SecLen + wire.TagLen
)

// secKey is one epoch's AEAD and IV.
type secKey struct {
	epoch uint32
	aead  cipher.AEAD
	iv    [secIVLen]byte
}

func deriveKey(secret *[32]byte, epoch uint32) (secKey, error) {
	var info [len(secLabel) + 4]byte
	copy(info[:], secLabel)
	binary.BigEndian.PutUint32(info[len(secLabel):], epoch)
	key, err := hkdf.Expand(sha256.New, secret[:], string(info[:]), secKeyLen)
	if err != nil {
		return secKey{}, err
	}
	var ivInfo [len(secIVLabel) + 4]byte
	copy(ivInfo[:], secIVLabel)
	binary.BigEndian.PutUint32(ivInfo[len(secIVLabel):], epoch)
	iv, err := hkdf.Expand(sha256.New, secret[:], string(ivInfo[:]), secIVLen)
	if err != nil {
		return secKey{}, err
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return secKey{}, err
	}
	g, err := cipher.NewGCM(b)
	if err != nil {
		return secKey{}, err
	}
	k := secKey{epoch: epoch, aead: g}
	copy(k.iv[:], iv)
	return k, nil
}

// secState is a secured QP's keys, counters and replay window. It is the
// wire.Cipher of the QP's packets: seal under the send key of the
// header's epoch, open under the receive key that lookup chose.
type secState struct {
	send, recv [32]byte
	flags      uint8 // wire.SecIntegrityOnly or 0
	limit      uint64

	// send side: the counter of the next packet, the current key and
	// the counter its epoch started at.
	txCounter uint64
	txStart   uint64
	tx        secKey

	// receive side: keys[0] is the previous epoch (while prevOK), keys[1]
	// the current, keys[2:] the next secAhead, derived when first named
	// (have). rxFirst is the first counter authenticated in the current
	// epoch: the previous one retires once the replay window has moved a
	// whole window past it, when no packet of it could pass the window.
	keys   [2 + secAhead]secKey
	have   [2 + secAhead]bool
	prevOK bool
	// rxCur is the current receive epoch.
	rxCur   uint32
	rxFirst uint64
	replay  replayWindow
	opening *secKey // the key Open uses: set by admit

	nonce [secIVLen]byte
	stats SecurityStats
}

func newSecState(s Security, limit uint64, window int) (*secState, error) {
	st := &secState{send: s.Send, recv: s.Recv, limit: limit, txCounter: 1, txStart: 1}
	if s.IntegrityOnly {
		st.flags = wire.SecIntegrityOnly
	}
	var err error
	if st.tx, err = deriveKey(&st.send, 0); err != nil {
		return nil, err
	}
	if st.keys[1], err = deriveKey(&st.recv, 0); err != nil {
		return nil, err
	}
	st.have[1] = true
	st.replay.init(window)
	return st, nil
}

// nonceFor fills st.nonce for counter c under k.
func (st *secState) nonceFor(k *secKey, c uint64) []byte {
	st.nonce = k.iv
	for i := range 8 {
		st.nonce[4+i] ^= byte(c >> (56 - 8*i))
	}
	return st.nonce[:]
}

// next fills the security header of the next packet sent, rotating the
// send key first when the epoch has sent its limit.
func (st *secState) next(s *wire.Sec) {
	if st.txCounter-st.txStart >= st.limit {
		// Derivation fails only in a broken crypto library; the key
		// then stays (the peer holds it) and the next packet tries again.
		if k, err := deriveKey(&st.send, st.tx.epoch+1); err == nil {
			st.tx, st.txStart = k, st.txCounter
			st.stats.TxRotations++
			st.stats.TxEpoch = k.epoch
		}
	}
	*s = wire.Sec{Flags: st.flags, Epoch: st.tx.epoch, Counter: st.txCounter}
	st.txCounter++
}

// Seal seals under the send key (wire.Cipher).
func (st *secState) Seal(s *wire.Sec, aad, area []byte) {
	st.tx.aead.Seal(area[:0], st.nonceFor(&st.tx, s.Counter), area, aad)
}

// SealFrom seals src into area under the send key (wire.SourceSealer).
func (st *secState) SealFrom(s *wire.Sec, aad, area, src []byte) {
	st.tx.aead.Seal(area[:0], st.nonceFor(&st.tx, s.Counter), src, aad)
}

// errBadTag is Open's error: the tag does not match.
var errBadTag = errors.New("transport: bad packet tag")

// Open opens under the key admit chose (wire.Cipher).
func (st *secState) Open(s *wire.Sec, aad, area []byte) error {
	k := st.opening
	ct := area[:len(area)+wire.TagLen]
	if _, err := k.aead.Open(area[:0], st.nonceFor(k, s.Counter), ct, aad); err != nil {
		return errBadTag
	}
	return nil
}

// rxKey returns the slot of the receive key of epoch e, deriving it if it
// is one of the next secAhead, or -1 when the QP holds no key for e.
func (st *secState) rxKey(e uint32) int {
	d := int64(e) - int64(st.rxCur)
	switch {
	case d == -1:
		if !st.prevOK {
			return -1
		}
		return 0
	case d < -1 || d > secAhead:
		return -1
	}
	i := int(d) + 1
	if !st.have[i] {
		k, err := deriveKey(&st.recv, e)
		if err != nil {
			return -1
		}
		st.keys[i], st.have[i] = k, true
	}
	return i
}

// advance makes the epoch of slot i (> 1) the current one: the epoch
// before it stays as the previous one.
func (st *secState) advance(i int, counter uint64) {
	n := i - 1 // epochs moved
	for j := 0; j < len(st.keys); j++ {
		if j+n < len(st.keys) {
			st.keys[j], st.have[j] = st.keys[j+n], st.have[j+n]
		} else {
			st.keys[j], st.have[j] = secKey{}, false
		}
	}
	st.prevOK = st.have[0]
	st.rxCur = st.keys[1].epoch
	st.rxFirst = counter
	st.stats.RxRotations += uint64(n)
	st.stats.RxEpoch = st.rxCur
}

// admit authenticates a packet received for a secured QP and decrypts its
// payload in place: it checks the epoch, the replay window (without
// moving it), the tag, and only then moves the window and the epoch. A
// packet that fails is counted and must be dropped untouched.
func (st *secState) admit(frame []byte, pk *wire.Packet) bool {
	if !pk.BTH.Secured {
		st.stats.Unsecured++
		return false
	}
	if pk.BTH.Trimmed {
		st.stats.Trimmed++
		return false
	}
	c := pk.Sec.Counter
	i := st.rxKey(pk.Sec.Epoch)
	if i < 0 {
		st.stats.BadEpoch++
		return false
	}
	switch st.replay.check(c) {
	case replayOld:
		st.stats.TooOld++
		return false
	case replayDup:
		st.stats.Replayed++
		return false
	}
	if pk.Sec.Flags != st.flags {
		st.stats.BadTag++
		return false
	}
	st.opening = &st.keys[i]
	if err := wire.Open(frame, pk, st); err != nil {
		st.stats.BadTag++
		return false
	}
	st.replay.accept(c)
	if i > 1 {
		st.advance(i, c)
	} else if st.prevOK && st.replay.last >= st.rxFirst+st.replay.size() {
		st.prevOK, st.have[0], st.keys[0] = false, false, secKey{}
	}
	return true
}

// replayWindow is a sliding window over the counters received (RFC 6479's
// bitmap): last is the highest accepted, bit c%size of bits says whether c
// (last-size < c <= last) was. The zero value, after init, accepts every
// counter above 0.
type replayWindow struct {
	last uint64
	bits []uint64
}

type replayVerdict uint8

const (
	replayNew replayVerdict = iota
	replayDup
	replayOld
)

// init sizes the window to n counters (a multiple of 64).
func (r *replayWindow) init(n int) { r.bits = make([]uint64, max(n/64, 1)) }

func (r *replayWindow) size() uint64 { return uint64(len(r.bits)) * 64 }

// check reports whether counter c is new, already seen or below the window.
func (r *replayWindow) check(c uint64) replayVerdict {
	switch {
	case c == 0:
		return replayOld
	case c > r.last:
		return replayNew
	case r.last-c >= r.size():
		return replayOld
	}
	if r.bits[c/64%uint64(len(r.bits))]&(1<<(c%64)) != 0 {
		return replayDup
	}
	return replayNew
}

// accept records c, which check called new.
func (r *replayWindow) accept(c uint64) {
	n := uint64(len(r.bits))
	if c > r.last {
		// Clear the words between the last one and c's.
		from, to := r.last/64+1, c/64
		if to-from+1 >= n {
			clear(r.bits)
		} else {
			for w := from; w <= to; w++ {
				r.bits[w%n] = 0
			}
		}
		r.last = c
	}
	r.bits[c/64%n] |= 1 << (c % 64)
}

// Secure makes the QP a secured one (see Security): from then on it seals
// every packet it sends and drops, counting them in Stats().Security,
// packets that fail authentication, replays and clear packets, before they
// touch its state. Call it before Connect; both peers must secure their
// QPs with mirrored secrets (one's Send is the other's Recv) and the same
// IntegrityOnly. It returns an error after Connect, a second time, or for
// secrets that are zero or equal (each direction needs its own key).
func (q *QP) Secure(s Security) error {
	switch {
	case q.state != stateInit:
		return fmt.Errorf("%w: QP %#x already connected", ErrSecure, q.qpn)
	case q.sec != nil:
		return fmt.Errorf("%w: QP %#x already secured", ErrSecure, q.qpn)
	case s.Send == [32]byte{} || s.Recv == [32]byte{}:
		return fmt.Errorf("%w: zero traffic secret", ErrSecure)
	case s.Send == s.Recv:
		return fmt.Errorf("%w: Send and Recv secrets are equal", ErrSecure)
	}
	limit := q.cfg.secEpochPackets
	if limit == 0 {
		limit = defaultEpochPackets
	}
	st, err := newSecState(s, limit, 2*q.cfg.Window)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSecure, err)
	}
	q.sec = st
	q.seg = payloadSizeOver(q.cfg, q.lip.Is6(), secOverhead)
	return nil
}

// Secure secures the connection's QP (QP.Secure), before Connect.
func (c *Conn) Secure(ctx context.Context, s Security) error {
	return c.s.do(ctx, func() error { return c.qp.Secure(s) })
}

// Secured reports whether the QP is secured.
func (q *QP) Secured() bool { return q.sec != nil }

// admit is the receive hook of the engine's dispatch: it returns whether
// a packet for q may go on to q.handle. A secured QP authenticates and
// decrypts it first (secState.admit); a clear QP refuses secured packets,
// whose payload it could not read.
func (q *QP) admit(frame []byte, pk *wire.Packet) bool {
	if q.sec == nil {
		if pk.BTH.Secured {
			q.rareStats().BadPackets++
			return false
		}
		return true
	}
	return q.sec.admit(frame, pk)
}

// seal is the transmit hook of headers: a secured QP's packet gets its
// security header, the next counter and the QP's cipher.
func (q *QP) seal(pk *wire.Packet) {
	pk.Cipher = nil
	pk.BTH.Secured = false
	if q.sec == nil {
		return
	}
	q.sec.next(&pk.Sec)
	pk.BTH.Secured = true
	pk.Cipher = q.sec
}
