package reorder

import (
	"errors"
	"fmt"
	"math"
)

// Errors of the Assembler. They are returned wrapped: test with errors.Is.
var (
	// ErrTooManyMessages: the message id is at or beyond
	// Next()+MaxMessages, or its buffer would take the buffered bytes past
	// MaxBytes. Transient: drop the packet (do not mark its PSN) and count
	// it; the sender retransmits after older messages were popped.
	ErrTooManyMessages = errors.New("reorder: too many outstanding messages")
	// ErrStale: the message id was already completed and popped (a late
	// duplicate), or Place was given a message that is no longer
	// outstanding.
	ErrStale = errors.New("reorder: message already completed")
	// ErrTooLarge: the message length exceeds MaxMessageSize, or its
	// buffer alone exceeds MaxBytes. Permanent: this message can never be
	// accepted.
	ErrTooLarge = errors.New("reorder: message too large")
	// ErrLengthMismatch: the message id is outstanding with another
	// length.
	ErrLengthMismatch = errors.New("reorder: message length mismatch")
	// ErrOutOfBounds: offset+len(payload) exceeds the message length.
	ErrOutOfBounds = errors.New("reorder: payload outside the message")
	// ErrOverflow: the payload would place more bytes than the message
	// holds (bytes were placed twice, or the message is already complete).
	ErrOverflow = errors.New("reorder: message overfilled")
)

// Defaults and limits of Config.
const (
	DefaultMaxMessages    = 256
	DefaultMaxMessageSize = 1 << 30
	DefaultMaxBytes       = 4 << 30
	// MaxMaxMessages bounds Config.MaxMessages, the most slots of the ring
	// of Msg slots.
	MaxMaxMessages = 1 << 20
)

// Config bounds an Assembler. The zero value is the default configuration.
type Config struct {
	// MaxMessages is the number of outstanding (started, not yet popped)
	// messages and the span of message ids accepted beyond Next(): an id
	// at or beyond Next()+MaxMessages is refused. 0 means
	// DefaultMaxMessages (256); at most MaxMaxMessages.
	MaxMessages int
	// MaxMessageSize is the largest message length accepted. 0 means
	// DefaultMaxMessageSize (1 GiB); at most math.MaxUint32.
	MaxMessageSize int64
	// MaxBytes bounds the sum of the buffers (Msg.Buf) of outstanding
	// messages; messages without a buffer count 0. The message at Next()
	// is admitted even beyond this bound, so that in-order completion can
	// never deadlock behind later messages that filled the budget: Bytes()
	// stays below MaxBytes plus one message. 0 means DefaultMaxBytes
	// (4 GiB).
	MaxBytes int64
	// Alloc returns the buffer of a message created by Message with
	// withBuf: a slice of length n whose bytes may be stale. Place
	// overwrites every byte before the message completes when each byte
	// is placed once; a sender that places overlapping ranges leaves some
	// stale bytes in the message (they never leave the receiving
	// process). nil means make([]byte, n). A pool behind it lets a steady
	// stream of messages reuse buffers instead of allocating one each.
	Alloc func(n int) []byte
}

// Validate reports a negative or too large field as an error wrapping
// ErrInvalidConfig.
func (c Config) Validate() error {
	switch {
	case c.MaxMessages < 0 || c.MaxMessages > MaxMaxMessages:
		return fmt.Errorf("%w: MaxMessages %d not in [0, %d]", ErrInvalidConfig, c.MaxMessages, MaxMaxMessages)
	case c.MaxMessageSize < 0 || c.MaxMessageSize > math.MaxUint32:
		return fmt.Errorf("%w: MaxMessageSize %d not in [0, %d]", ErrInvalidConfig, c.MaxMessageSize, uint32(math.MaxUint32))
	case c.MaxBytes < 0:
		return fmt.Errorf("%w: MaxBytes %d is negative", ErrInvalidConfig, c.MaxBytes)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.MaxMessages == 0 {
		c.MaxMessages = DefaultMaxMessages
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = DefaultMaxMessageSize
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	return c
}

// Msg is one message being reassembled. The Assembler owns it; the caller
// reads its fields and may set Kind, Imm, HasImm and Tag, which the
// Assembler only clears when the message is created. ID, Len, Got and Buf
// are informative: changing them does not change what the Assembler does.
type Msg struct {
	ID  uint32 // message id
	Len uint32 // message length in bytes
	Got uint32 // bytes placed so far
	// Buf is where Place copies the payload (length Len), or nil when the
	// caller places the bytes itself (RDMA WRITE into a registered region).
	Buf    []byte
	Kind   uint8
	Imm    uint32
	HasImm bool
	Tag    uint64 // the caller's

	// The Assembler's own copies, so that a caller writing the exported
	// fields cannot make Place write out of bounds.
	buf    []byte
	size   uint32
	got    uint32
	charge int64 // bytes counted against MaxBytes
	live   bool  // started and not yet popped
	done   bool  // every byte placed
}

// Assembler places the payloads of a queue pair's in-flight messages in any
// arrival order and hands completed messages out in message-id order.
//
// Message ids are per-QP uint32 sequence numbers that start at the first id
// given to NewAssembler and wrap; ids compare by signed 32-bit difference.
// The outstanding messages live in a ring of slots indexed by id-Next(),
// reused after Pop: no map. The ring starts empty and doubles (from 4
// slots, up to MaxMessages) when a message lies beyond it, and Trim gives
// it back when no message is outstanding: besides each message's buffer,
// an Assembler allocates only to grow its ring.
//
// The zero value is not usable: create one with NewAssembler. An Assembler is
// not safe for concurrent use.
type Assembler struct {
	cfg         Config
	slots       []Msg
	head        int    // slot of next
	next        uint32 // oldest outstanding id
	outstanding int
	bytes       int64
	popped      *Msg // last popped; its buffer reference is dropped at the next Pop
}

// NewAssembler returns an Assembler whose first message id is first. cfg's
// zero fields take their defaults; an invalid cfg is an error wrapping
// ErrInvalidConfig.
func NewAssembler(cfg Config, first uint32) (*Assembler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Assembler{
		cfg:  cfg,
		next: first,
	}, nil
}

// minSlots is the ring's first size: one message, as a QP of a collective
// receives one at a time and every busy receiver holds the ring (a slot
// is 112 bytes); more double it (TestAssemblerGrowsFromOne).
const minSlots = 1

// grow makes the ring hold at least d+1 slots (d < MaxMessages), with
// Next's slot at 0; only outstanding messages move (the others hold
// nothing of use, and a popped one's buffer is the caller's).
func (a *Assembler) grow(d int) {
	n := max(minSlots, len(a.slots))
	for n <= d {
		n *= 2
	}
	n = min(n, a.cfg.MaxMessages)
	slots := make([]Msg, n)
	for k := range a.slots {
		j := a.head + k
		if j >= len(a.slots) {
			j -= len(a.slots)
		}
		if a.slots[j].live {
			slots[k] = a.slots[j]
		}
	}
	a.slots, a.head, a.popped = slots, 0, nil
}

// Trim gives the ring back when no message is outstanding, and reports
// whether it had one.
func (a *Assembler) Trim() bool {
	if a.slots == nil || a.outstanding > 0 {
		return false
	}
	a.slots, a.head, a.popped = nil, 0, nil
	return true
}

// Trimmable reports whether Trim would give memory back.
func (a *Assembler) Trimmable() bool { return a.slots != nil && a.outstanding == 0 }

// Message returns the outstanding message id, creating it on first sight
// with length bytes and, when withBuf, a buffer Buf = make([]byte, length).
// For a message already outstanding, length must match (ErrLengthMismatch)
// and withBuf is ignored. The errors, wrapped: ErrStale for an id before
// Next() (already popped), ErrTooManyMessages for an id at or beyond
// Next()+MaxMessages or a buffer that would take the buffered bytes past
// MaxBytes (a message that buffers nothing is never refused for bytes),
// ErrTooLarge for a length above MaxMessageSize or a buffer larger than
// MaxBytes itself. The *Msg is valid until the next Message or
// MessageInto that creates a message, which may move the ring as it grows
// (from one slot); a refused call moves nothing.
func (a *Assembler) Message(id uint32, length uint32, withBuf bool) (*Msg, error) {
	d := int32(id - a.next)
	if d < 0 {
		return nil, fmt.Errorf("%w: message %d, next is %d", ErrStale, id, a.next)
	}
	if int(d) >= a.cfg.MaxMessages {
		return nil, fmt.Errorf("%w: message %d at or beyond %d+%d", ErrTooManyMessages, id, a.next, a.cfg.MaxMessages)
	}
	// A message beyond the ring is new: it is checked before the ring
	// grows, so a refused one moves nothing (TestAssemblerRefusedKeepsRing).
	if int(d) >= len(a.slots) {
		if _, err := a.admit(id, d, length, withBuf); err != nil {
			return nil, err
		}
		a.grow(int(d))
	}
	i := a.head + int(d)
	if i >= len(a.slots) {
		i -= len(a.slots)
	}
	m := &a.slots[i]
	if m.live {
		if m.size != length {
			return nil, fmt.Errorf("%w: message %d has length %d, packet says %d", ErrLengthMismatch, id, m.size, length)
		}
		return m, nil
	}
	charge, err := a.admit(id, d, length, withBuf)
	if err != nil {
		return nil, err
	}
	if m == a.popped {
		a.popped = nil
	}
	*m = Msg{ID: id, Len: length, size: length, charge: charge, live: true}
	if withBuf {
		if a.cfg.Alloc != nil {
			m.buf = a.cfg.Alloc(int(length))[:length]
		} else {
			m.buf = make([]byte, length)
		}
		m.Buf = m.buf
	}
	a.bytes += charge
	a.outstanding++
	return m, nil
}

// admit checks a new message id, d after Next(), of length bytes and
// returns the buffer bytes it charges: Message's ErrTooLarge and
// ErrTooManyMessages for bytes.
func (a *Assembler) admit(id uint32, d int32, length uint32, withBuf bool) (int64, error) {
	if int64(length) > a.cfg.MaxMessageSize {
		return 0, fmt.Errorf("%w: message %d of %d bytes, limit %d", ErrTooLarge, id, length, a.cfg.MaxMessageSize)
	}
	var charge int64
	if withBuf {
		charge = int64(length)
	}
	if charge > a.cfg.MaxBytes {
		return 0, fmt.Errorf("%w: message %d needs a buffer of %d bytes, MaxBytes is %d", ErrTooLarge, id, length, a.cfg.MaxBytes)
	}
	// A message that charges nothing (no buffer: a WRITE into registered
	// memory, or zero bytes) is never refused for bytes: the in-order
	// message is exempt from MaxBytes and may have taken the total past
	// it, and refusing one that adds nothing stalled its sender in
	// retransmission (FuzzAssembler's corpus, spray-exempt-zero-byte).
	if d != 0 && charge > 0 && a.bytes+charge > a.cfg.MaxBytes {
		return 0, fmt.Errorf("%w: message %d of %d bytes on top of %d buffered, limit %d", ErrTooManyMessages, id, length, a.bytes, a.cfg.MaxBytes)
	}
	return charge, nil
}

// MessageInto is Message for a message placed into the caller's buf (a
// posted receive buffer): on first sight it creates message id with
// Buf = buf[:length], not counted against MaxBytes (the memory is the
// caller's, bounded by what it posted). buf shorter than length is an
// error wrapping ErrTooLarge and creates nothing. For a message already
// outstanding it behaves as Message and ignores buf.
func (a *Assembler) MessageInto(id uint32, length uint32, buf []byte) (*Msg, error) {
	if m := a.Lookup(id); m != nil {
		return a.Message(id, length, false)
	}
	if uint64(len(buf)) < uint64(length) {
		return nil, fmt.Errorf("%w: message %d of %d bytes into a buffer of %d", ErrTooLarge, id, length, len(buf))
	}
	m, err := a.Message(id, length, false)
	if err != nil {
		return nil, err
	}
	m.buf = buf[:length:length]
	m.Buf = m.buf
	return m, nil
}

// Lookup returns the outstanding message id, or nil when it has not
// started, was popped or lies outside [Next(), Next()+MaxMessages).
func (a *Assembler) Lookup(id uint32) *Msg {
	d := int32(id - a.next)
	if d < 0 || int(d) >= len(a.slots) {
		return nil
	}
	i := a.head + int(d)
	if i >= len(a.slots) {
		i -= len(a.slots)
	}
	if m := &a.slots[i]; m.live {
		return m
	}
	return nil
}

// Peek returns the message Pop would return, without popping it.
func (a *Assembler) Peek() (*Msg, bool) {
	if len(a.slots) == 0 {
		return nil, false
	}
	m := &a.slots[a.head]
	if !m.live || !m.done {
		return nil, false
	}
	return m, true
}

// Place copies payload into m at byte offset off (when m has a buffer) and
// counts its bytes. It reports complete = true exactly once per message: on
// the call that places its last byte. A 0-length message completes on
// Place(m, 0, nil). Errors, wrapped: ErrOutOfBounds when off+len(payload)
// exceeds m.Len, ErrOverflow when the bytes placed would exceed m.Len (a
// non-empty payload for a complete message included), ErrStale when m is
// nil or no longer outstanding. On error nothing is copied or counted.
//
// Completion counts bytes, it does not track ranges: each byte must be
// placed once. Window.Mark gives that as long as a retransmitted packet
// keeps its PSN (and its offset).
func (a *Assembler) Place(m *Msg, off uint32, payload []byte) (complete bool, err error) {
	if m == nil || !m.live {
		return false, fmt.Errorf("%w: placing into a message that is not outstanding", ErrStale)
	}
	end := uint64(off) + uint64(len(payload))
	if end > uint64(m.size) {
		return false, fmt.Errorf("%w: bytes [%d, %d) of message %d of length %d", ErrOutOfBounds, off, end, m.ID, m.size)
	}
	if m.done {
		if len(payload) == 0 {
			return false, nil
		}
		return false, fmt.Errorf("%w: message %d is already complete", ErrOverflow, m.ID)
	}
	if uint64(m.got)+uint64(len(payload)) > uint64(m.size) {
		return false, fmt.Errorf("%w: message %d has %d of %d bytes, %d more", ErrOverflow, m.ID, m.got, m.size, len(payload))
	}
	if m.buf != nil {
		copy(m.buf[off:end], payload)
	}
	m.got += uint32(len(payload))
	m.Got = m.got
	if m.got == m.size {
		m.done = true
		return true, nil
	}
	return false, nil
}

// Pop returns the oldest outstanding message if it is complete, and frees
// its slot (releasing its MaxMessages and MaxBytes accounting): messages
// come out in id order. It returns false when the message at Next() has not
// started or not completed. The *Msg stays valid until the next call to Pop
// or Message; its Buf belongs to the caller from now on.
func (a *Assembler) Pop() (*Msg, bool) {
	if a.popped != nil {
		a.popped.buf, a.popped.Buf = nil, nil
		a.popped = nil
	}
	if len(a.slots) == 0 {
		return nil, false
	}
	m := &a.slots[a.head]
	if !m.live || !m.done {
		return nil, false
	}
	m.live = false
	a.bytes -= m.charge
	a.outstanding--
	a.next++
	a.head++
	if a.head == len(a.slots) {
		a.head = 0
	}
	a.popped = m
	return m, true
}

// Next returns the id of the oldest outstanding message: the next one Pop
// will return, whether or not it has started.
func (a *Assembler) Next() uint32 { return a.next }

// Outstanding returns the number of started messages not yet popped.
func (a *Assembler) Outstanding() int { return a.outstanding }

// Bytes returns the sum of the buffers of outstanding messages.
func (a *Assembler) Bytes() int64 { return a.bytes }
