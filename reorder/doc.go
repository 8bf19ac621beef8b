// Package reorder is the receiver side of spray's reliability: a PSN window
// that detects duplicates and builds SACK bitmaps, and an assembler that
// places payloads of sprayed packets in any order and completes messages in
// order.
//
// Use it, one Window and one Assembler per queue pair, for every data packet
// that decoded cleanly:
//
//	switch win.Check(pkt.PSN) {
//	case reorder.Outside: // sender overran the window: drop, count
//	case reorder.Duplicate: // drop the payload, still ACK
//	case reorder.New:
//		m, err := asm.Message(hdr.MsgID, hdr.MsgLen, isSend)
//		if errors.Is(err, reorder.ErrTooManyMessages) {
//			// drop and count, do NOT mark: the sender must retransmit it
//		}
//		_, err = asm.Place(m, hdr.Offset, payload)
//		win.Mark(pkt.PSN)
//		for m, ok := asm.Pop(); ok; m, ok = asm.Pop() {
//			// deliver m (copy what you need: m is reused)
//		}
//	}
//	base := win.Sack(pkt.PSN, ack.Sack[:n])
//
// Marking a PSN is a promise that its packet was taken: the next SACK
// acknowledges it and the sender forgets it. Hence Check first and Mark
// only once Message accepted the packet. (Calling Mark first and
// Message after, as a plain dedup, loses the packet whenever Message
// refuses it with ErrTooManyMessages.)
//
// The package is sans-IO: no clock, no goroutines, no I/O, no randomness.
// Mark, Sack and Place do not allocate; Message allocates one buffer per
// message that asks for one (through Config.Alloc, a pool, when set), and
// MessageInto places a message into the caller's buffer (a posted receive
// buffer) without allocating or counting it against MaxBytes.
//
// # Window
//
// Window tracks the Size PSNs [Cum, Cum+Size) in a ring bitmap, with 24-bit
// wrapping arithmetic from package psn. Cum, the cumulative ACK point,
// advances past every PSN that arrived contiguously. A PSN before Cum or
// already marked is a Duplicate; one at or beyond Cum+Size is Outside: the
// sender sent more than the window allows, the packet is not recorded and
// must be dropped (the sender retransmits it once Cum has moved). Memory is
// at most Size/8 bytes whatever the peer sends, and none while PSNs arrive
// in order: the ring grows to span the PSNs held ahead of a hole, and Trim
// gives it back. Sack reports the arrival bitmap of 64 to 256 PSNs,
// anchored at Cum or, when the packet just received lies further ahead,
// ending at that packet, so that the sender learns about its newest packet
// even behind a long hole.
//
// # Assembler
//
// Assembler keeps the messages in flight in a ring of up to MaxMessages
// slots, indexed by message id minus Next(), the oldest outstanding id; the
// ring grows with the span of ids in progress and Trim gives it back.
// Packets of a sprayed message arrive in any order, across paths of
// different delay, so Place writes each payload straight at its offset:
// no packet waits in a reorder queue and no byte is copied twice. Messages
// complete (Pop) strictly in id order nevertheless, because a queue pair
// promises in-order completion: a receive is matched to the application's
// posted buffers in order, and a WRITE-with-immediate signals that every
// earlier WRITE has landed. A complete message behind an incomplete one
// waits for it.
//
// The bounds and what happens at them: an id at or beyond
// Next()+MaxMessages, or a buffer that would take Bytes() past MaxBytes,
// gets ErrTooManyMessages; the caller drops the packet without marking its
// PSN (so it is not acknowledged) and the sender retransmits it later. The
// message at Next() is always admitted (a budget filled by later messages
// must not block the one that unblocks them), so Bytes() can exceed
// MaxBytes by at most one message. A length above MaxMessageSize, or a
// buffer larger than MaxBytes, gets ErrTooLarge, permanently. An id before Next() gets
// ErrStale: a late duplicate of a popped message. A packet that disagrees
// with the message length, falls outside the message or overfills it gets
// ErrLengthMismatch, ErrOutOfBounds or ErrOverflow; nothing is written.
//
// # Caveats
//
// Completion counts placed bytes; it does not remember which ranges were
// placed. Each byte must therefore be placed once: Window.Mark filters
// duplicates by PSN, which is enough as long as a retransmission reuses the
// PSN (and offset) of the original. If retransmissions carried new PSNs, the
// original and the copy could both be placed and a message could complete
// with a hole.
//
// Errors are sentinels wrapped with %w: test them with errors.Is.
// Neither type is safe for concurrent use; one engine loop owns them.
package reorder
