// fabric.c: spray's test-fabric switch programs (tcx ingress and egress).
//
// Attached to both directions of switch ports (veth ends inside switch
// namespaces), they play what a fabric switch does for spray: INT hop
// records, RED-like ECN marking on queue delay, and fault injection. Package
// ebpf's doc (doc.go) describes the semantics in full; in short:
//
// Egress of port P, for every frame:
//  1. Faults of P (blackhole, random loss, Gilbert-Elliott burst loss),
//     on every frame or only on RoCE frames: drop and count the cause; with
//     trim on, a whole spray data packet that random or burst loss would
//     drop is cut to its headers instead (wire.Trim's format: trim bit,
//     lengths, checksums, a new ICRC) and sent on at priority.
//  1b. With trim_queue, a model of P's queue (bytes, drained at rate_mbps):
//     a whole spray data packet that would take it beyond trim_queue is
//     trimmed as in 1; with prio_class, trimmed packets and control frames
//     get that skb->priority, the qdisc class that sends them first.
//  2. Count packets and bytes; add the bytes to P's transmit counter.
//  3. RoCE frames (IPv4/IPv6, UDP destination 4791, a whole BTH): a spray
//     data packet with an INT region that has a free slot (after the
//     security header in a secured packet) gets a hop record
//     (switch, port, rate, TS = now, QLen 0, TxBytes); every RoCE frame
//     leaves its egress time and P in fabric_inflight, keyed by the packet.
//
// Ingress of port Q: count the frame; a RoCE frame found in fabric_inflight
// was sent by port P at time ts, so now - ts is the time it spent in P's
// queue (the qdisc after P's tcx egress, where the testbed shapes) and on the
// wire: the queue delay of P. It counts for P (measured, sum, maximum),
// fills QLen = delay x rate of the hop record P wrote, and marks CE by P's
// ECN settings.
//
// Shared with Go through bpf2go -type: struct fabric_port, fabric_counters.

//go:build ignore

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define ETH_HLEN 14
#define VLAN_HLEN 4
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88A8
#define IPV4_HLEN 20
#define IPV6_HLEN 40
#define UDP_HLEN 8
#define PROTO_UDP 17
#define ROCE_PORT 4791
#define BTH_LEN 12
#define ICRC_LEN 4
#define DATA_HLEN 24
#define OP_SPRAY_DATA 0xE0
#define FLAG_INT 0x01
#define INT_VERSION 1
#define INT_SHIM_OFF (BTH_LEN + DATA_HLEN)  // from the BTH
#define BTH_SECURED 0x40  // BTH byte 8: a security header follows the BTH
#define BTH_TRIMMED 0x20  // BTH byte 4: cut to its headers (wire.Trim)
#define BTH_PADCNT 0x30   // BTH byte 1
#define TRIM_PRIORITY 7   // skb->priority of a trimmed frame (TC_PRIO_CONTROL)
#define REDIRECT_MARK 0x7370726d  // skb->mark of a frame trimmed and sent to its port again
// ICRC_HDR_MAX bounds the bytes the ICRC of a trimmed packet covers after
// its 8 bytes of ones: IPv6, UDP, BTH, security and data headers.
#define ICRC_HDR_MAX (IPV6_HLEN + UDP_HLEN + BTH_LEN + SEC_LEN + DATA_HLEN)
#define SEC_LEN 16        // the security header
#define TAG_LEN 16        // a secured packet's tag, before the ICRC
#define INT_SHIM_LEN 4
#define HOP_LEN 24
#define MAX_HOPS 8
#define NO_HOP 0xff

#define TCX_NEXT -1
#define TC_ACT_SHOT 2

// Default sizes; the Go loader may change max_entries before loading.
#define MAX_PORTS 1024
#define MAX_INFLIGHT 65536

// port_slot is the slot of the port that this instance of the programs
// serves (its index in the per-port maps): the Go loader loads one instance
// per port, all sharing the maps, because tc programs have no reliable way
// to tell ports of different namespaces apart (ifindexes repeat, and
// bpf_get_netns_cookie looks at the socket, which a frame keeps across
// veth).
volatile const __u32 port_slot = 0xffffffff;

// fabric_port is the configuration of one port: the value of
// fabric_cfg[slot]. Probabilities are thresholds on bpf_get_prandom_u32():
// an event happens when the draw is below the threshold, so 0 is never and
// 1<<32 always.
struct fabric_port {
	__u16 switch_id;
	__u16 port_id;
	__u32 rate_mbps;     // egress link rate, for INT and queue bytes
	__u64 ecn_kmin_ns;   // no marks at or below this queue delay
	__u64 ecn_kmax_ns;   // 0: no ECN marking; marks always at or above
	__u64 ecn_pmax;      // mark threshold at kmax (linear from kmin), of 1<<32
	__u64 loss;          // random loss
	__u64 ge_p;          // Gilbert-Elliott: good -> bad per frame
	__u64 ge_r;          // bad -> good per frame
	__u64 ge_loss_good;  // loss in the good state
	__u64 ge_loss_bad;   // loss in the bad state
	__u8 blackhole;      // drop every frame
	__u8 burst;          // Gilbert-Elliott on
	__u8 roce_only;      // faults only for RoCE frames
	__u8 edge;           // faces a host: ingress measures nothing
	__u8 trim;           // cut spray data packets that loss would drop
	__u8 pad[3];
	__u32 trim_queue;    // cut spray data packets beyond this many queued bytes; 0: never
	__u32 queue_limit;   // the port's queue limit, the queue model's cap; 0: none
	__u32 prio_class;    // skb->priority of trimmed and control frames; 0: 7 for trimmed only
	__u32 pad2;
};

// fabric_counters is the value of fabric_stats[slot], per CPU.
struct fabric_counters {
	__u64 packets;         // frames passed by egress
	__u64 bytes;           // their bytes (skb->len, from the MAC header)
	__u64 drop_loss;
	__u64 drop_burst;
	__u64 drop_blackhole;
	__u64 ecn_marked;      // CE marks for this port's queue
	__u64 int_stamped;     // hop records written
	__u64 int_full;        // INT regions without a free slot
	__u64 rx_packets;      // frames seen by ingress
	__u64 measured;        // queue delays measured for this port's queue
	__u64 qdelay_sum_ns;
	__u64 qdelay_max_ns;
	__u64 trimmed;         // spray data packets cut to their headers
	__u64 trimmed_queue;   // of which for the queue (trim_queue), not for loss
	__u64 drop_queue;      // data the queue trimmed but could not cut
};

// fabric_pkt_key identifies a RoCE packet in flight between a port's
// egress and the next port's ingress.
struct fabric_pkt_key {
	__u8 src[16];
	__u8 dst[16];
	__u32 dqp;
	__u32 psn;
	__u16 sport;
	__u8 opcode;
	__u8 family;
};

struct fabric_inflight_val {
	__u64 ts;    // bpf_ktime_get_ns() at egress
	__u32 slot;  // egress port
	__u8 hop;    // hop slot that egress wrote, or NO_HOP
	__u8 pad[3];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u32);
	__type(value, struct fabric_port);
} fabric_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u32);
	__type(value, struct fabric_counters);
} fabric_stats SEC(".maps");

// Transmitted bytes per port, shared by all CPUs (INT TxBytes).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u32);
	__type(value, __u64);
} fabric_tx SEC(".maps");

// Gilbert-Elliott state per port: 0 good, 1 bad.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} fabric_ge SEC(".maps");

// fabric_vq is each port's queue model: the bytes its egress passed that
// the link, draining at rate_mbps, has not sent yet.
struct vq_state {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 bytes;
	__u64 ts;  // bpf_ktime_get_ns() of the last update
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u32);
	__type(value, struct vq_state);
} fabric_vq SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_INFLIGHT);
	__type(key, struct fabric_pkt_key);
	__type(value, struct fabric_inflight_val);
} fabric_inflight SEC(".maps");

// pkt is what parse learns about a frame.
struct pkt {
	__u32 l3;      // offset of the IP header
	__u32 l4;      // offset of the UDP header
	__u32 shim;    // offset of the INT shim, 0 without a usable region
	__u16 ipw0;    // first 16-bit word of the IP header, as in the frame
	__u16 udp_csum;
	__u8 family;   // 4 or 6
	__u8 tos;      // IPv4 TOS, IPv6 traffic class
	__u8 roce;     // UDP to 4791 with a whole BTH
	__u8 count;    // INT hop count
	__u8 max;      // INT hop slots
	__u8 ihl;      // IPv4 header length (bytes), 0 for IPv6
	// trim_end is the frame offset just after the data header of a whole,
	// untrimmed spray data packet that can be trimmed, or 0.
	__u32 trim_end;
	__u32 bth;     // offset of the BTH (RoCE frames)
	__u8 sec;      // security header length, 0 or SEC_LEN
	__u8 trimmed;  // a spray data packet cut to its headers
	struct fabric_pkt_key key;
};

static __always_inline __u16 load16(const __u8 *p)
{
	return ((__u16)p[0] << 8) | p[1];
}

// parse fills p for IPv4/IPv6 UDP frames and returns 0, or returns -1 for
// anything else (p->roce and p->shim are then 0).
static __always_inline int parse(struct __sk_buff *skb, struct pkt *p)
{
	__u8 b[IPV6_HLEN];
	__u32 off = ETH_HLEN;

	if (bpf_skb_load_bytes(skb, 0, b, ETH_HLEN) < 0)
		return -1;
	__u16 proto = load16(b + 12);
	if (proto == ETH_P_8021Q || proto == ETH_P_8021AD) {
		if (bpf_skb_load_bytes(skb, off, b, VLAN_HLEN) < 0)
			return -1;
		proto = load16(b + 2);
		off += VLAN_HLEN;
	}
	p->l3 = off;
	if (proto == ETH_P_IP) {
		if (bpf_skb_load_bytes(skb, off, b, IPV4_HLEN) < 0)
			return -1;
		__u32 hl = (__u32)(b[0] & 0x0f) * 4;
		if ((b[0] >> 4) != 4 || hl < IPV4_HLEN || b[9] != PROTO_UDP)
			return -1;
		if (load16(b + 6) & 0x3fff)  // fragment
			return -1;
		p->family = 4;
		p->tos = b[1];
		p->ihl = hl;
		__builtin_memcpy(p->key.src, b + 12, 4);
		__builtin_memcpy(p->key.dst, b + 16, 4);
		off += hl;
	} else if (proto == ETH_P_IPV6) {
		if (bpf_skb_load_bytes(skb, off, b, IPV6_HLEN) < 0)
			return -1;
		if ((b[0] >> 4) != 6 || b[6] != PROTO_UDP)
			return -1;
		p->family = 6;
		p->tos = (b[0] << 4) | (b[1] >> 4);
		__builtin_memcpy(p->key.src, b + 8, 16);
		__builtin_memcpy(p->key.dst, b + 24, 16);
		off += IPV6_HLEN;
	} else {
		return -1;
	}
	__builtin_memcpy(&p->ipw0, b, 2);
	p->key.family = p->family;
	p->l4 = off;

	if (bpf_skb_load_bytes(skb, off, b, UDP_HLEN + BTH_LEN) < 0)
		return 0;
	__u32 ulen = load16(b + 4);
	if (load16(b + 2) != ROCE_PORT || ulen < UDP_HLEN + BTH_LEN + ICRC_LEN)
		return 0;
	if (off + ulen > skb->len)
		return 0;
	__builtin_memcpy(&p->udp_csum, b + 6, 2);
	__u8 *bth = b + UDP_HLEN;
	p->roce = 1;
	p->key.sport = load16(b);
	p->key.opcode = bth[0];
	p->key.dqp = ((__u32)bth[5] << 16) | ((__u32)bth[6] << 8) | bth[7];
	p->key.psn = ((__u32)bth[9] << 16) | ((__u32)bth[10] << 8) | bth[11];

	if (bth[0] != OP_SPRAY_DATA)
		return 0;
	// A secured packet's extension headers, INT among them, follow its
	// security header; its tag reads the INT region as ones, so a record
	// stamped here leaves it valid (TestFabricINTSecured).
	__u32 sec = (bth[8] & BTH_SECURED) ? SEC_LEN : 0;
	__u32 tag = sec ? TAG_LEN : 0;
	__u32 bthoff = off + UDP_HLEN;
	p->bth = bthoff;
	p->sec = sec;
	p->trimmed = !!(bth[4] & BTH_TRIMMED);
	// Trimmable: whole (not trimmed yet), its data header before the tag
	// and ICRC, IPv4 without options or IPv6 (wire.Trim's rules).
	if (!(bth[4] & BTH_TRIMMED) && (p->ihl == IPV4_HLEN || p->family == 6) &&
	    UDP_HLEN + BTH_LEN + sec + DATA_HLEN + tag + ICRC_LEN <= ulen)
		p->trim_end = bthoff + BTH_LEN + sec + DATA_HLEN;
	if (bpf_skb_load_bytes(skb, bthoff + BTH_LEN + sec, b, DATA_HLEN + INT_SHIM_LEN) < 0)
		return 0;
	__u8 *shim = b + DATA_HLEN;
	if (!(b[13] & FLAG_INT) || shim[0] != INT_VERSION)
		return 0;
	__u8 max = shim[2];
	if (max == 0 || max > MAX_HOPS || max != b[14] || shim[1] > max)
		return 0;
	// The region must lie before the tag and the ICRC.
	if (UDP_HLEN + INT_SHIM_OFF + sec + INT_SHIM_LEN + (__u32)max * HOP_LEN + tag + ICRC_LEN > ulen)
		return 0;
	p->shim = bthoff + INT_SHIM_OFF + sec;
	p->count = shim[1];
	p->max = max;
	return 0;
}

// store_csum writes n bytes (a multiple of 4, at an offset from the UDP
// header that is a multiple of 4 in the INT region) over old and updates the
// UDP checksum; a zero (absent) IPv4 UDP checksum stays zero.
static __always_inline void store_csum(struct __sk_buff *skb, struct pkt *p, __u32 off,
				       __u8 *old, __u8 *new, __u32 n)
{
	__u64 flags = p->udp_csum ? 0 : BPF_F_RECOMPUTE_CSUM;
	bpf_skb_store_bytes(skb, off, new, n, flags);
	if (p->udp_csum) {
		__s64 diff = bpf_csum_diff((__be32 *)old, n, (__be32 *)new, n, 0);
		bpf_l4_csum_replace(skb, p->l4 + 6, 0, diff, BPF_F_MARK_MANGLED_0);
	}
}

static __always_inline void put32(__u8 *b, __u32 v)
{
	b[0] = v >> 24;
	b[1] = v >> 16;
	b[2] = v >> 8;
	b[3] = v;
}

// crc_byte continues a reflected CRC-32 (IEEE 802.3 polynomial) over byte b.
static __always_inline __u32 crc_byte(__u32 c, __u8 b)
{
	c ^= b;
	for (int k = 0; k < 8; k++)
		c = (c >> 1) ^ (0xEDB88320 & -(c & 1));
	return c;
}

// crc_ctx is the state of the ICRC loop over a trimmed packet's headers.
struct crc_ctx {
	__u32 c;
	__u8 h[ICRC_HDR_MAX];  // the headers, variant fields as ones
};

// crc_step is bpf_loop's body: one header byte into the CRC.
static long crc_step(__u64 i, void *ctx)
{
	struct crc_ctx *x = ctx;
	if (i >= ICRC_HDR_MAX)
		return 1;
	x->c = crc_byte(x->c, x->h[i]);
	return 0;
}

// trim cuts the spray data packet p (p->trim_end set) to its headers, as
// wire.Trim does: BTH with the trim bit set and PadCnt 0, the security
// header if any, the data header with Flags and INTMax 0, then an ICRC over
// them; the IP and UDP lengths follow, with the IPv4 header checksum, a
// zero IPv4 UDP checksum (spray sends none) and the IPv6 UDP checksum
// computed again. It returns 0, or -1 when the frame is left as it was or
// is no longer whole (the caller drops it). Guarded by TestFabricTrim.
static __always_inline int trim(struct __sk_buff *skb, struct pkt *p)
{
	__u32 hdr = p->trim_end;
	__u32 end = hdr + ICRC_LEN;
	__u32 n = hdr - p->l3;  // bytes the ICRC covers after its ones
	__u32 udp = p->l4 - p->l3, bth = p->bth - p->l3, data = bth + BTH_LEN + p->sec;
	if (n > ICRC_HDR_MAX || n < IPV4_HLEN + UDP_HLEN + BTH_LEN + DATA_HLEN ||
	    udp > IPV6_HLEN || bth > IPV6_HLEN + UDP_HLEN || data > ICRC_HDR_MAX - DATA_HLEN)
		return -1;
	if (bpf_skb_change_tail(skb, end, 0) < 0)
		return -1;

	struct crc_ctx x;
	__u8 *h = x.h;
	__builtin_memset(h, 0, ICRC_HDR_MAX);
	if (bpf_skb_load_bytes(skb, p->l3, h, n) < 0)
		return -1;
	h[bth + 1] &= ~BTH_PADCNT;
	h[bth + 4] |= BTH_TRIMMED;
	h[data + 13] = 0;  // Flags
	h[data + 14] = 0;  // INTMax
	__u16 ulen = end - p->l4;
	h[udp + 4] = ulen >> 8;
	h[udp + 5] = ulen;
	h[udp + 6] = 0;
	h[udp + 7] = 0;
	__u8 keep[4];
	if (p->family == 4) {
		__u16 tot = end - p->l3;
		h[2] = tot >> 8;
		h[3] = tot;
		h[10] = 0;
		h[11] = 0;
		__u32 sum = 0;
		for (int i = 0; i < IPV4_HLEN; i += 2)
			sum += ((__u32)h[i] << 8) | h[i + 1];
		sum = (sum & 0xffff) + (sum >> 16);
		sum = (sum & 0xffff) + (sum >> 16);
		h[10] = ~sum >> 8;
		h[11] = ~sum;
		keep[0] = h[1];
		keep[1] = h[8];
		keep[2] = h[10];
		keep[3] = h[11];
		h[1] = h[8] = h[10] = h[11] = 0xff;
	} else {
		__u16 pl = end - p->l4;
		h[4] = pl >> 8;
		h[5] = pl;
		keep[0] = h[0];
		keep[1] = h[1];
		keep[2] = h[2];
		keep[3] = h[3];
		h[0] |= 0x0f;
		h[1] = h[2] = h[3] = 0xff;
	}
	__u8 hlim = h[7], bth4 = h[bth + 4];

	// ICRC: 8 bytes of ones, then the headers with the variant fields as
	// ones (IPv4 TOS, TTL, checksum; IPv6 traffic class, flow label, hop
	// limit; UDP checksum; BTH byte 4). A trimmed packet has no INT region.
	if (p->family == 6)
		h[7] = 0xff;
	h[udp + 6] = 0xff;
	h[udp + 7] = 0xff;
	h[bth + 4] = 0xff;
	x.c = 0xffffffff;
	for (int i = 0; i < 8; i++)
		x.c = crc_byte(x.c, 0xff);
	bpf_loop(n, crc_step, &x, 0);
	__u32 c = ~x.c;
	__u8 icrc[ICRC_LEN] = {c, c >> 8, c >> 16, c >> 24};  // little-endian
	h[7] = hlim;
	h[udp + 6] = 0;
	h[udp + 7] = 0;
	h[bth + 4] = bth4;
	if (p->family == 4) {
		h[1] = keep[0];
		h[8] = keep[1];
		h[10] = keep[2];
		h[11] = keep[3];
	} else {
		h[0] = keep[0];
		h[1] = keep[1];
		h[2] = keep[2];
		h[3] = keep[3];
		// UDP checksum over the pseudo-header (addresses, length, next
		// header) and the trimmed datagram, ICRC included.
		__u8 ph[8] = {0, 0, ulen >> 8, ulen, 0, 0, 0, PROTO_UDP};
		__s64 sum = bpf_csum_diff(0, 0, (__be32 *)(h + 8), 32, 0);
		sum = bpf_csum_diff(0, 0, (__be32 *)ph, 8, sum);
		sum = bpf_csum_diff(0, 0, (__be32 *)icrc, ICRC_LEN, sum);
		if (n == IPV6_HLEN + UDP_HLEN + BTH_LEN + DATA_HLEN)
			sum = bpf_csum_diff(0, 0, (__be32 *)(h + IPV6_HLEN), UDP_HLEN + BTH_LEN + DATA_HLEN, sum);
		else
			sum = bpf_csum_diff(0, 0, (__be32 *)(h + IPV6_HLEN), UDP_HLEN + BTH_LEN + SEC_LEN + DATA_HLEN, sum);
		__u32 s32 = sum;
		s32 = (s32 & 0xffff) + (s32 >> 16);
		s32 = (s32 & 0xffff) + (s32 >> 16);
		__u16 cs = ~s32;
		if (cs == 0)
			cs = 0xffff;
		__builtin_memcpy(h + udp + 6, &cs, 2);
	}
	if (bpf_skb_store_bytes(skb, p->l3, h, n, 0) < 0 ||
	    bpf_skb_store_bytes(skb, hdr, icrc, ICRC_LEN, 0) < 0)
		return -1;
	skb->priority = TRIM_PRIORITY;
	p->shim = 0;
	p->trim_end = 0;
	p->trimmed = 1;
	return 0;
}

// control reports whether a RoCE opcode is a control frame that a trimming
// switch queues with the trimmed headers, as NDP does: spray ACKs and
// credits, RC ACKs and CNPs.
static __always_inline int control(__u8 op)
{
	return op == 0x11 || op == 0x81 || op == 0xE1 || op == 0xE2 || op == 0xE3;
}

// admit adds a frame to port cfg's queue model q, which drains at
// rate_mbps, and reports whether the frame is to be trimmed: a whole spray
// data packet (trimmable) that would take the model beyond trim_queue. The
// model then counts the hdr bytes left after trimming; a frame that would
// take it beyond queue_limit is not counted (the queue drops it).
// Guarded by TestFabricTrimQueue.
static __always_inline int admit(struct vq_state *q, struct fabric_port *cfg, __u32 len,
				 int trimmable, __u32 hdr, __u64 now)
{
	__u64 rate = cfg->rate_mbps, limit = cfg->queue_limit, thr = cfg->trim_queue;
	int cut = 0;
	bpf_spin_lock(&q->lock);
	if (now > q->ts) {
		__u64 el = now - q->ts;
		__u64 b = q->bytes;
		if (el >= 1000000000ULL) {
			b = 0;  // a second idle empties any queue
		} else {
			__u64 d = el * rate / 8000;  // ns x Mbit/s -> bytes
			b = b > d ? b - d : 0;
		}
		q->bytes = b;
		q->ts = now;
	}
	__u64 b = q->bytes;
	if (trimmable && b + len > thr) {
		cut = 1;
		len = hdr;
	}
	if (!limit || b + len <= limit)
		q->bytes = b + len;
	bpf_spin_unlock(&q->lock);
	return cut;
}

// chance reports whether an event of threshold thr (of 1<<32) happens.
static __always_inline int chance(__u64 thr)
{
	return thr && (__u64)bpf_get_prandom_u32() < thr;
}

SEC("tc")
int fabric_egress(struct __sk_buff *skb)
{
	__u32 slot = port_slot;
	struct fabric_port *cfg = bpf_map_lookup_elem(&fabric_cfg, &slot);
	struct fabric_counters *cnt = bpf_map_lookup_elem(&fabric_stats, &slot);
	__u64 *tx = bpf_map_lookup_elem(&fabric_tx, &slot);
	__u32 *ge = bpf_map_lookup_elem(&fabric_ge, &slot);
	struct vq_state *vq = bpf_map_lookup_elem(&fabric_vq, &slot);
	if (!cfg || !cnt || !tx || !ge || !vq)
		return TCX_NEXT;
	// A frame this program trimmed and sent to the port again (below)
	// has been counted: it goes to the qdisc. The mark is the port's
	// alone: crossing into the next namespace clears it.
	if (skb->mark == REDIRECT_MARK) {
		skb->mark = 0;
		return TCX_NEXT;
	}

	struct pkt p;
	__builtin_memset(&p, 0, sizeof(p));
	parse(skb, &p);

	int cut = 0;  // trimmed here
	if (!cfg->roce_only || p.roce) {
		if (cfg->blackhole) {
			cnt->drop_blackhole++;
			return TC_ACT_SHOT;
		}
		int lost = 0;  // 1: random loss, 2: burst loss
		if (chance(cfg->loss)) {
			lost = 1;
		} else if (cfg->burst) {
			__u32 bad = *ge;
			if (bad ? chance(cfg->ge_r) : chance(cfg->ge_p)) {
				bad = !bad;
				*ge = bad;
			}
			if (chance(bad ? cfg->ge_loss_bad : cfg->ge_loss_good))
				lost = 2;
		}
		if (lost) {
			if (!cfg->trim || !p.trim_end || trim(skb, &p) < 0) {
				if (lost == 1)
					cnt->drop_loss++;
				else
					cnt->drop_burst++;
				return TC_ACT_SHOT;
			}
			cnt->trimmed++;
			cut = 1;
		}
	}
	// A queue past trim_queue trims what it can and takes the rest.
	if (cfg->trim_queue && cfg->rate_mbps) {
		int can = p.trim_end != 0;
		if (admit(vq, cfg, skb->len, can, p.trim_end + ICRC_LEN, bpf_ktime_get_ns())) {
			if (trim(skb, &p) < 0) {
				cnt->drop_queue++;
				return TC_ACT_SHOT;
			}
			cnt->trimmed++;
			cnt->trimmed_queue++;
			cut = 1;
		}
	}
	if (cfg->prio_class && p.roce && (p.trimmed || control(p.key.opcode)))
		skb->priority = cfg->prio_class;

	__u32 len = skb->len;
	__u64 txb = __sync_fetch_and_add(tx, len) + len;
	cnt->packets++;
	cnt->bytes += len;
	if (!p.roce)
		return TCX_NEXT;

	__u64 now = bpf_ktime_get_ns();
	struct fabric_inflight_val v = {.ts = now, .slot = slot, .hop = NO_HOP};
	if (p.shim) {
		if (p.count < p.max && p.count < MAX_HOPS) {
			__u32 off = p.shim + INT_SHIM_LEN + (__u32)p.count * HOP_LEN;
			__u8 old[HOP_LEN], rec[HOP_LEN];
			if (bpf_skb_load_bytes(skb, off, old, HOP_LEN) == 0) {
				rec[0] = cfg->switch_id >> 8;
				rec[1] = cfg->switch_id;
				rec[2] = cfg->port_id >> 8;
				rec[3] = cfg->port_id;
				put32(rec + 4, cfg->rate_mbps);
				put32(rec + 8, now >> 32);
				put32(rec + 12, now);
				put32(rec + 16, 0);
				put32(rec + 20, txb);
				store_csum(skb, &p, off, old, rec, HOP_LEN);
				__u8 oshim[INT_SHIM_LEN], nshim[INT_SHIM_LEN];
				if (bpf_skb_load_bytes(skb, p.shim, oshim, INT_SHIM_LEN) == 0) {
					__builtin_memcpy(nshim, oshim, INT_SHIM_LEN);
					nshim[1] = p.count + 1;
					store_csum(skb, &p, p.shim, oshim, nshim, INT_SHIM_LEN);
				}
				v.hop = p.count;
				cnt->int_stamped++;
			}
		} else {
			cnt->int_full++;
		}
	}
	bpf_map_update_elem(&fabric_inflight, &p.key, &v, BPF_ANY);
	// The qdisc took the frame's length before this program ran: a frame
	// cut here would be charged, shaped and queued at its old length. Sent
	// to the port again, it enters the qdisc at its new one (the check at
	// the top lets it through). TestLeafSpineTrim in package testbed.
	if (cut) {
		skb->mark = REDIRECT_MARK;
		return bpf_redirect(skb->ifindex, 0);
	}
	return TCX_NEXT;
}

SEC("tc")
int fabric_ingress(struct __sk_buff *skb)
{
	__u32 slot = port_slot;
	struct fabric_counters *cnt = bpf_map_lookup_elem(&fabric_stats, &slot);
	if (!cnt)
		return TCX_NEXT;
	cnt->rx_packets++;

	struct pkt p;
	__builtin_memset(&p, 0, sizeof(p));
	parse(skb, &p);
	if (!p.roce)
		return TCX_NEXT;
	// A frame that enters at an edge port comes from a host, not from a
	// port's egress: an entry with its key is stale (left by an earlier
	// copy dropped in a queue, or sent to a host), and measuring it would
	// count the time since then as queue delay.
	struct fabric_port *own = bpf_map_lookup_elem(&fabric_cfg, &slot);
	if (own && own->edge) {
		bpf_map_delete_elem(&fabric_inflight, &p.key);
		return TCX_NEXT;
	}
	struct fabric_inflight_val *vp = bpf_map_lookup_elem(&fabric_inflight, &p.key);
	if (!vp)
		return TCX_NEXT;
	struct fabric_inflight_val v = *vp;
	bpf_map_delete_elem(&fabric_inflight, &p.key);

	__u64 now = bpf_ktime_get_ns();
	__u64 delay = now > v.ts ? now - v.ts : 0;
	__u32 from = v.slot;
	struct fabric_port *cfg = bpf_map_lookup_elem(&fabric_cfg, &from);
	struct fabric_counters *fc = bpf_map_lookup_elem(&fabric_stats, &from);
	if (!cfg || !fc)
		return TCX_NEXT;
	fc->measured++;
	fc->qdelay_sum_ns += delay;
	if (delay > fc->qdelay_max_ns)
		fc->qdelay_max_ns = delay;

	// QLen of the hop record that the egress port wrote, if it is still
	// the record it wrote (same timestamp).
	if (p.shim && v.hop < p.count && v.hop < MAX_HOPS) {
		__u32 off = p.shim + INT_SHIM_LEN + (__u32)v.hop * HOP_LEN + 8;
		__u8 old[12], rec[12];
		if (bpf_skb_load_bytes(skb, off, old, 12) == 0) {
			__u64 ts = 0;
			for (int i = 0; i < 8; i++)
				ts = (ts << 8) | old[i];
			__builtin_memcpy(rec, old, 12);
			if (ts == v.ts) {
				// bytes = ns * Mbps / 8000, saturated
				__u64 q = delay * cfg->rate_mbps / 8000;
				if (delay > (~0ULL) / 1000000 || q > 0xffffffffULL)
					q = 0xffffffffULL;
				put32(rec + 8, q);
				store_csum(skb, &p, off, old, rec, 12);
			}
		}
	}

	// RED-like ECN marking of ECT packets on the egress port's queue delay.
	__u8 ecn = p.tos & 3;
	if (cfg->ecn_kmax_ns && (ecn == 1 || ecn == 2) && delay > cfg->ecn_kmin_ns) {
		int mark = 1;
		if (delay < cfg->ecn_kmax_ns) {
			// threshold = pmax * (delay - kmin) / (kmax - kmin), in
			// 1/65536 steps so that the product fits in 64 bits.
			__u64 span = cfg->ecn_kmax_ns - cfg->ecn_kmin_ns;
			__u64 x = delay - cfg->ecn_kmin_ns;
			__u64 pm = cfg->ecn_pmax >> 16;  // 0..65536
			if (span > (1ULL << 40)) {
				span >>= 24;
				x >>= 24;
			}
			__u64 thr = span ? pm * x / span : pm;
			mark = (__u64)(bpf_get_prandom_u32() & 0xffff) < thr;
		}
		if (mark) {
			if (p.family == 4) {
				__u8 tos = p.tos | 3;
				__u16 oldw = p.ipw0;
				__u8 *nw = (__u8 *)&p.ipw0;
				nw[1] = tos;
				bpf_skb_store_bytes(skb, p.l3 + 1, &tos, 1, 0);
				bpf_l3_csum_replace(skb, p.l3 + 10, oldw, p.ipw0, 2);
			} else {
				__u8 b1 = ((__u8 *)&p.ipw0)[1] | 0x30;
				bpf_skb_store_bytes(skb, p.l3 + 1, &b1, 1, BPF_F_RECOMPUTE_CSUM);
			}
			fc->ecn_marked++;
		}
	}
	return TCX_NEXT;
}

// The project's license; the programs call no GPL-only helper.
char __license[] SEC("license") = "Apache-2.0";
