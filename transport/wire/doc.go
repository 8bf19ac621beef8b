// Package wire is spray's frame codec: it encodes and decodes whole RoCEv2
// frames (Ethernet | IPv4 or IPv6 | UDP 4791 | BTH | extension headers |
// payload | pad | ICRC) in place, without allocating, for the classic RC
// opcodes, the RoCEv2 CNP and spray's own data and ACK packets.
//
// # Use
//
// To send, fill a Packet and encode it straight into a link's frame buffer:
//
//	n, err := wire.Encode(frame.Buf, &p, payload) // FrameLen(&p, len(payload)) bytes
//	frame.Buf = frame.Buf[:n]
//
// Encode computes the IPv4 total length and header checksum, the UDP length
// (and, for IPv6, the UDP checksum), the BTH pad count and the ICRC. To avoid
// copying the payload, write it at frame.Buf[HeaderLen(&p):] first and pass
// that slice as payload.
//
// To receive, decode into a reused Packet:
//
//	var p wire.Packet
//	if err := wire.Decode(frame.Buf, &p); err != nil { count(err); drop }
//
// Decode checks everything (lengths, IPv4 checksum, UDP port, opcode,
// extension headers, pad, ICRC) and leaves p.Payload and p.INT pointing into
// the frame. Encode, Decode, ICRC, HopAt and PutHop are safe for concurrent
// use on distinct buffers; the package has no state besides constant tables.
//
// The gopacket layers for these headers (for pcap tools and debugging) are in
// the sub-package wirelayers, so that the hot path does not link gopacket.
//
// # Errors
//
// Every error wraps one of ErrTruncated, ErrNotRoCE, ErrIPChecksum,
// ErrBadLength, ErrBadOpcode, ErrBadHeader, ErrBadICRC (Decode, ICRC) or
// ErrTooSmall, ErrBadOpcode, ErrBadHeader, ErrBadLength (Encode); test with
// errors.Is. Decode never allocates, not even for an error. Decode checks the
// ICRC before it looks at the opcode and the extension headers, so a
// corrupted frame gives ErrBadICRC and ErrBadOpcode means a well-formed packet
// of an opcode that spray does not speak.
//
// # Frame layout
//
// All multi-byte fields are big-endian (network byte order), except the ICRC,
// which is stored little-endian as RoCE NICs do. Offsets are in bytes from
// the start of each header.
//
// Ethernet (14 bytes, 18 with one 802.1Q tag):
//
//	off size field
//	  0    6 destination MAC
//	  6    6 source MAC
//	 12    2 EtherType 0x8100 (then TCI, 2 bytes, and the EtherType below) or
//	 12    2 EtherType 0x0800 (IPv4) / 0x86DD (IPv6)
//
// IPv4 (20 bytes; Encode writes no options, sets DF and ID = IP.ID; Decode
// skips options and rejects fragments) and IPv6 (40 bytes, next header UDP,
// no extension headers) are standard; variant fields are listed under ICRC.
//
// UDP (8 bytes): source port = entropy (chosen per packet by multipath),
// destination port 4791, length, checksum (0 for IPv4; computed for IPv6 by
// Encode, not verified by Decode).
//
// BTH, base transport header (12 bytes, IBA 9.2):
//
//	off size field
//	  0    1 opcode
//	  1    1 SE (bit 7) | M (bit 6) | PadCnt (bits 5-4) | TVer (bits 3-0, 0)
//	  2    2 P_Key
//	  4    1 FECN (bit 7) | BECN (bit 6) | Trimmed (bit 5) | reserved (bits 4-0)  [variant]
//	  5    3 destination QP
//	  8    1 AckReq (bit 7) | Secured (bit 6) | Conn (bit 5) | reserved (bits 4-0)
//	  9    3 PSN
//
// RETH, RDMA extended transport header (16 bytes): VA at 0 (8), R_Key at 8
// (4), DMA length at 12 (4). AETH, ACK extended transport header (4 bytes):
// syndrome at 0 (1), MSN at 1 (3). ImmDt (4 bytes): immediate data.
//
// Extension headers after the BTH, per opcode (IBA table 38; RoCEv2 CNP):
//
//	opcode                                     headers after BTH      payload
//	SEND First/Middle/Last/Only         00-02,04  -                   yes
//	SEND Last/Only with Immediate       03,05     ImmDt               yes
//	RDMA WRITE First/Only               06,0A     RETH                yes
//	RDMA WRITE Middle/Last              07,08     -                   yes
//	RDMA WRITE Last with Immediate      09        ImmDt               yes
//	RDMA WRITE Only with Immediate      0B        RETH, ImmDt         yes
//	RDMA READ Request                   0C        RETH                no
//	RDMA READ Response First/Last/Only  0D,0F,10  AETH                yes
//	RDMA READ Response Middle           0E        -                   yes
//	Acknowledge (ACK, NAK)              11        AETH                no
//	CNP                                 81        16 reserved bytes   no
//	spray Data                          E0        Data [INT] [RETH] [ImmDt]  yes
//	spray ACK                           E1        Ack, SACK words, hop records  no
//
// Every other opcode (UC, RD, UD, atomics, SEND with Invalidate) is
// ErrBadOpcode. A payload is followed by PadCnt zero bytes that make it a
// multiple of 4, then the 4-byte ICRC.
//
// The transport's RoCE profile sends an RDMA READ Request as one PSN of the
// requester's sequence and the READ Responses (AETH: ACK syndrome and the
// responder's MSN on First, Last and Only) as a message in the responder's
// own PSN sequence, acknowledged by the requester like any data; see
// package transport, "RDMA READ".
//
// spray Data header (24 bytes), after the BTH of OpSprayData:
//
//	off size field
//	  0    4 MsgID: per-QP message sequence number
//	  4    4 Offset: byte offset of this payload in the message
//	  8    4 MsgLen: length of the whole message
//	 12    1 Kind: 0 Send, 1 SendImm, 2 Write, 3 WriteImm, 4 ReadResp, 5 ReadReq
//	 13    1 Flags: bit 0 FlagINT; other bits must be 0
//	 14    1 INTMax: hop slots reserved (0-8); 0 without FlagINT
//	 15    1 Credit: 0x01 DataUnsolicited, 0x02 DataCredited, or 0 (a sender
//	         without credits); peers that do not know it ignore it
//	 16    8 TxTime: sender's transmit timestamp, ns
//
// It is followed by the INT region if Flags has FlagINT, then RETH for
// KindWrite, KindWriteImm and KindReadReq, then ImmDt for KindSendImm,
// KindWriteImm and KindReadResp, then the payload (OpKind.HasRETH, HasImm).
//
// RDMA READ in spray: a READ request is one data packet of KindReadReq in
// the requester's PSN and message sequence (MsgID its message, MsgLen and
// Offset 0, no payload) whose RETH names the region read (VA, R_Key, DMA
// length). The responder answers with a message of its own: data packets
// of KindReadResp in the responder's PSN and message sequence (MsgID,
// Offset and MsgLen of the response, MsgLen the DMA length), whose ImmDt is
// the MsgID of the request answered. Both directions are acknowledged and
// repaired like any data (SACK, selective resend).
//
// INT region (4 + 24*INTMax bytes, at INTShimOff = 36 bytes from the BTH):
// the shim, then INTMax hop slots that switches fill in place, slot i at
// shim+4+24*i. The whole region is variant (masked in the ICRC).
//
//	shim off size field
//	       0    1 version, INTVersion (1)
//	       1    1 hop count: slots filled so far (<= max); a switch writes
//	              slot <count> and increments it, or skips a full region
//	       2    1 max: slots reserved, equal to Data.INTMax
//	       3    1 reserved
//
// Hop record (24 bytes; Hop, HopAt, PutHop):
//
//	off size field
//	  0    2 Switch id
//	  2    2 egress Port
//	  4    4 RateMbps: egress link rate
//	  8    8 TS: egress timestamp, ns, switch clock
//	 16    4 QLen: queue depth, bytes
//	 20    4 TxBytes: transmitted-bytes counter of the port (wraps)
//
// spray Ack header (40 bytes), after the BTH of OpSprayAck:
//
//	off size field
//	  0    4 CumPSN: next expected PSN (24 bits, top byte 0)
//	  4    4 AckedPSN: PSN of the packet acknowledged (24 bits)
//	  8    4 SackBase: PSN of bit 0 of SACK word 0 (24 bits)
//	 12    4 MsgID: message a NAK refers to; with AckMsgLimit in a plain
//	         ACK, the receiver's message limit: the ID of the first
//	         message it has no room for
//	 16    8 EchoTime: TxTime of the packet AckedPSN
//	 24    4 HoldNs: receiver hold time, ns (bit 31: from host arrival)
//	 28    2 ECNCount: CE-marked packets since the last ACK
//	 30    2 Entropy: UDP source port of the packet AckedPSN
//	 32    1 Syndrome: SyndromeAck or a NAK code (AETH encoding)
//	 33    1 SackWords: 1-4
//	 34    1 INTHops: echoed hop records, 0-8
//	 35    1 Flags: bit 0 AckCredit, bit 1 AckMsgLimit (plain ACKs
//	         only); other bits must be 0
//	 36    4 Credit: with AckCredit, the receiver's cumulative credit for
//	         the sender in packets; 0 without (older peers write and
//	         ignore 0 in bytes 35-39)
//
// It is followed by SackWords 8-byte SACK words (bit i of word w, counting
// from the least significant bit, is PSN SackBase+64w+i) and INTHops hop
// records echoed from the data packet AckedPSN (not variant here). The
// transport echoes the packet that triggered the ACK, or the latest that
// carried records since its previous ACK when only some data packets
// carry an INT region (transport.Config.INTHops with AckEvery above 1);
// an ACK with no such packet echoes the trigger with INTHops 0.
//
// Credit header (12 bytes), after the BTH of OpCreditGrant (0xE2) and
// OpCreditRequest (0xE3); no payload; BTH PSN 0:
//
//	off size field
//	  0    4 Count: grant, the packets the sender may have sent against
//	         credit in all; request, the packets it wants that to reach
//	  4    4 Used: request, the packets sent against credit so far; grant 0
//	  8    1 Flags: bit 0 CreditRetry (a request sent again); others 0
//	  9    3 reserved, 0
//
// Counts are cumulative and wrap at 2^32 (serial order).
//
// CNP: the BTH (opcode 0x81, BECN set by convention) and 16 reserved bytes
// (zero on encode, ignored on decode), then the ICRC.
//
// Trimmed packets (BTH byte 4, bit 5: BTH.Trimmed) are spray data packets
// that a switch cut after the data header (Trim): the BTH, the security
// header if any, the data header with Flags and INTMax 0, and the ICRC the
// switch computed over them; no INT region, RETH, ImmDt, payload, pad or
// tag. Decode returns their headers and an empty payload.
//
// Packets of a QP made on demand (BTH byte 8, bit 5: BTH.Conn) carry the
// 32-byte connect header (Conn) after the opcode's other extension
// headers and before the payload: spray data and ACK packets only. conn.go
// has the layout.
//
// Secured packets (BTH byte 8, bit 6: BTH.Secured) carry a 16-byte security
// header (Sec: version and flags, key epoch, counter) between the BTH and
// the extension headers, and a 16-byte authentication tag between the pad
// and the ICRC; every offset above that counts from the BTH moves 16 bytes
// on (the INT shim is at INTShimOff+SecLen). Encode seals such a packet
// with Packet.Cipher; Open checks and decrypts one that Decode decoded.
// sec.go has the layout and what the tag covers.
//
// # ICRC
//
// The ICRC is CRC-32 with the IEEE 802.3 polynomial (hash/crc32.IEEE:
// reflected, initial value and final XOR all ones) over
//
//	8 bytes of 0xFF (the absent LRH)
//	IP header   IPv4: TOS, TTL, header checksum as all ones (options included, as they are)
//	            IPv6: traffic class, flow label, hop limit as all ones
//	UDP header  checksum as all ones
//	BTH         byte 4 (FECN, BECN, Trimmed, reserved) as all ones
//	the rest up to the ICRC, with spray's INT region (shim and all slots) as all ones
//
// and it is stored in the last 4 bytes little-endian: the bytes that scapy's
// contrib.roce writes, and that tshark shows, read big-endian, as
// infiniband.invariant.crc. The tests check both tools (IPv4 and IPv6).
// Masking the INT region lets switches stamp hop records without touching the
// ICRC; for IPv6 they must update the UDP checksum (StampHop does).
//
// # Caveats
//
// Encode does not pad frames to the 60-byte Ethernet minimum (a SEND with an
// empty payload over IPv4 is 58 bytes); links or NICs do. Decode accepts such
// padding. Decode does not verify the UDP checksum. Capture tools choose a
// dissector by the lower of the two UDP ports, so frames whose entropy
// (source port) is a well-known port below 4791 show up as that protocol in
// tshark or scapy; RoCE NICs draw source ports from 49152-65535.
package wire
