// Package retransmit is the sender's scoreboard: it numbers packets, tracks
// which are in flight, acknowledged or lost, and decides what to resend.
//
// Use one Scoreboard per sending queue pair. The transport calls Next and
// OnSend for every new packet, OnSend again for every resend of a PSN that
// PopLost returned, OnAck for every ACK (spray SACK or classic cumulative
// ACK), OnNak for a classic NAK (PSN sequence error), and OnTimeout whenever
// the clock reaches NextTimeout. Every call that changes state appends
// Events (newly acknowledged or newly lost packets) to a slice the caller
// owns, so that congestion control and path scoring can follow.
//
// Two modes cover spray's profiles:
//
//   - SelectiveRepeat (spray): cumulative ACK plus SACK bitmap; loss is
//     detected by time, as RACK does (RFC 8985 section 6): a packet is lost
//     once a packet sent after it has been delivered and a reordering window
//     has passed. RACK is also kept per entropy (one path through an ECMP
//     fabric), so that a packet on a path with a deeper queue is judged
//     against its own path's RTT rather than declared lost because a later
//     packet took a faster path (see rackDetect). A tail loss probe (RFC 8985 section 7) resends the last
//     packet when ACKs stop, and the retransmission timer (RFC 6298) is the
//     last resort. Per-packet spraying reorders by design, so the window
//     grows when a declared loss turns out to be reordering.
//   - GoBackN (classic RoCEv2): cumulative ACKs only; a NAK or a timeout
//     resends everything from the first missing PSN, in order. With
//     Config.FixedRTO the timer is a RoCE NIC's Local ACK Timeout: fixed,
//     no RTT estimate, no backoff.
//
// The package is sans-IO: it reads no clock (every method takes now), starts
// no goroutines, does no I/O and, but for returned errors and the growth of
// its storage, allocates nothing. The ring of outstanding PSNs grows with
// them, doubling up to Config.Capacity, and Trim gives it back when none
// is outstanding; the per-entropy RACK table grows with the entropies in
// use. ACK information that refers to PSNs never sent is dropped whole and
// counted (Stats.BadAcks), never trusted.
//
// Errors: New and Config.Validate return errors wrapping ErrInvalidConfig;
// OnSend returns errors wrapping ErrFull, ErrUnexpectedPSN or ErrBadLength;
// after MaxRetries consecutive timeouts without progress, OnTimeout returns
// kind Failed and an error wrapping ErrRetryExceeded, and the scoreboard is
// dead from then on (Err reports it). Test with errors.Is.
//
// Caveats and deviations from RFC 8985: the reordering window cannot learn
// from DSACK (spray's receiver sends none); it learns from spurious
// retransmissions instead (see Config.MinReorderWindow), found by timing or
// by the send time an ACK echoes (Ack.AckedSentAt). Per-entropy state is
// kept in a table of 256 slots (an entropy in one of the 8 slots from its
// own), so with many entropies some are judged by plain RACK. A retransmission timeout declares lost the oldest
// packet and those sent more than RACK.rtt + reo_wnd ago (RFC 8985 6.3),
// not the whole window. It applies from the
// first ACK, reordering seen or not, since spraying reorders by design. The
// reordering timer fires at the earliest pending deadline, not the latest,
// and the tail loss probe is armed during loss recovery too, so that a lost
// resend at the tail costs two RTTs rather than an RTO. RTT samples follow
// Karn's rule: never from a retransmitted packet.
package retransmit
