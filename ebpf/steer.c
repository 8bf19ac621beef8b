// steer.c: spray's host steering XDP program.
//
// It sends RoCEv2-style frames (UDP to one destination port, 4791 unless
// configured otherwise) to the AF_XDP socket bound to the RX queue they
// arrived on, and leaves every other frame to the kernel. The decision, in
// order (package ebpf's doc and its Go model in model_test.go say the same):
//
//  1. Ethernet, with at most one 802.1Q or 802.1ad tag; not IPv4/IPv6: pass.
//  2. The IPv4 protocol / IPv6 next-header byte is not in the frame or is
//     not UDP (IPv6 extension headers included): pass.
//  3. The IP header is truncated or inconsistent (version, IHL, total or
//     payload length beyond the frame, all its buffers counted): drop,
//     Malformed.
//  4. IPv4 fragment: pass (the kernel reassembles).
//  5. The UDP header does not fit in the IP payload: drop, Malformed.
//  6. UDP destination port is not the configured one: pass.
//  7. UDP length below 8 or beyond the IP payload: drop, Malformed.
//  8. A local address list is set and the destination is not in it: pass.
//  9. An allowlist is set and the source is not in it: drop, Refused.
// 10. Redirect to steer_xsks[rx_queue_index]: Steered; no socket for the
//     queue: pass, NoSocket.
// 11. With stamp set, a redirected frame gets 8 bytes prepended
//     (bpf_xdp_adjust_head) holding bpf_ktime_get_ns(), CLOCK_MONOTONIC
//     in ns, as a little-endian u64 (native order of bpfel, the only
//     target): the time it reached the host, before it waits in the
//     AF_XDP RX ring. No headroom for it: drop, NoRoom (a socket that
//     expects stamps must never read an unstamped frame). A passed frame
//     is never stamped.
//
// Every pass that is not NoSocket counts Passed, so the counters add up to
// the number of frames seen. Each check in 3, 5 and 7 is one the kernel makes
// too, so dropping such a frame here takes nothing from other applications.
//
// Shared with Go through bpf2go -type: struct steer_counters, steer_config,
// steer_addr.

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
#define STAMP_LEN 8

// Default sizes; the Go loader may change max_entries before loading.
#define MAX_QUEUES 256
#define MAX_LOCAL 64
#define MAX_ALLOW 16384

// steer_counters is the value of the one entry of steer_stats, per CPU.
struct steer_counters {
	__u64 steered;
	__u64 passed;
	__u64 malformed;
	__u64 refused;
	__u64 no_socket;
	__u64 no_room;
};

// steer_config is the value of the one entry of steer_cfg.
struct steer_config {
	__u16 port;        // UDP destination port, host byte order
	__u8 match_local;  // non-zero: only destinations in steer_local
	__u8 match_allow;  // non-zero: only sources in steer_allow
	__u8 stamp;        // non-zero: prepend the arrival time (rule 11)
	__u8 pad[3];       // zero
};

// steer_addr is the key of steer_local and steer_allow.
struct steer_addr {
	__u8 family;  // 4 or 6
	__u8 pad[3];  // zero
	__u8 addr[16];  // IPv4 in the first 4 bytes, the rest zero
};

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} steer_xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct steer_counters);
} steer_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct steer_config);
} steer_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_LOCAL);
	__type(key, struct steer_addr);
	__type(value, __u8);
} steer_local SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_ALLOW);
	__type(key, struct steer_addr);
	__type(value, __u8);
} steer_allow SEC(".maps");

static __always_inline __u16 load16(const __u8 *p)
{
	return ((__u16)p[0] << 8) | p[1];
}

// The program is loaded with the xdp.frags flag, so that a device whose MTU
// exceeds a page (jumbo frames) can run it: a frame may then come in several
// buffers, data..data_end being only the first. Headers are read from the
// first buffer (a frame whose headers do not fit there passes or is dropped
// as truncated, as before), and the lengths that the IP and UDP headers
// claim are checked against the whole frame (bpf_xdp_get_buff_len).
SEC("xdp.frags")
int steer(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u64 flen = bpf_xdp_get_buff_len(ctx);
	__u32 zero = 0;

	struct steer_counters *cnt = bpf_map_lookup_elem(&steer_stats, &zero);
	struct steer_config *cfg = bpf_map_lookup_elem(&steer_cfg, &zero);
	if (!cnt || !cfg)
		return XDP_PASS;

	struct steer_addr src, dst;
	__builtin_memset(&src, 0, sizeof(src));
	__builtin_memset(&dst, 0, sizeof(dst));

	__u8 *l3 = data;
	__u8 *l4;
	__u32 l4len;

	if ((void *)(l3 + ETH_HLEN) > end)
		goto pass;
	__u16 proto = load16(l3 + 12);
	l3 += ETH_HLEN;
	if (proto == ETH_P_8021Q || proto == ETH_P_8021AD) {
		if ((void *)(l3 + VLAN_HLEN) > end)
			goto pass;
		proto = load16(l3 + 2);
		l3 += VLAN_HLEN;
	}

	if (proto == ETH_P_IP) {
		if ((void *)(l3 + 10) > end || l3[9] != PROTO_UDP)
			goto pass;
		if ((void *)(l3 + IPV4_HLEN) > end)
			goto malformed;
		if ((l3[0] >> 4) != 4)
			goto malformed;
		__u32 hl = (__u32)(l3[0] & 0x0f) * 4;
		__u32 tot = load16(l3 + 2);
		if (hl < IPV4_HLEN || tot < hl)
			goto malformed;
		if ((__u64)((void *)l3 - data) + tot > flen)
			goto malformed;
		if (load16(l3 + 6) & 0x3fff) // MF or a fragment offset
			goto pass;
		src.family = 4;
		dst.family = 4;
		__builtin_memcpy(src.addr, l3 + 12, 4);
		__builtin_memcpy(dst.addr, l3 + 16, 4);
		l4 = l3 + hl;
		l4len = tot - hl;
	} else if (proto == ETH_P_IPV6) {
		if ((void *)(l3 + 7) > end || l3[6] != PROTO_UDP)
			goto pass;
		if ((void *)(l3 + IPV6_HLEN) > end)
			goto malformed;
		if ((l3[0] >> 4) != 6)
			goto malformed;
		l4 = l3 + IPV6_HLEN;
		l4len = load16(l3 + 4);
		if ((__u64)((void *)l4 - data) + l4len > flen)
			goto malformed;
		src.family = 6;
		dst.family = 6;
		__builtin_memcpy(src.addr, l3 + 8, 16);
		__builtin_memcpy(dst.addr, l3 + 24, 16);
	} else {
		goto pass;
	}

	if (l4len < UDP_HLEN || (void *)(l4 + UDP_HLEN) > end)
		goto malformed;
	if (load16(l4 + 2) != cfg->port)
		goto pass;
	__u32 ulen = load16(l4 + 4);
	if (ulen < UDP_HLEN || ulen > l4len)
		goto malformed;

	if (cfg->match_local && !bpf_map_lookup_elem(&steer_local, &dst))
		goto pass;
	if (cfg->match_allow && !bpf_map_lookup_elem(&steer_allow, &src)) {
		cnt->refused++;
		return XDP_DROP;
	}

	long ret = bpf_redirect_map(&steer_xsks, ctx->rx_queue_index, XDP_PASS);
	if (ret != XDP_REDIRECT) {
		cnt->no_socket++;
		return ret;
	}
	// The redirect happens after the program returns, with the frame as it
	// is then, so the stamp goes in after the lookup: a frame passed to the
	// kernel (no socket) is never touched (TestSteerStamp).
	if (cfg->stamp) {
		__u64 now = bpf_ktime_get_ns();
		if (bpf_xdp_adjust_head(ctx, -STAMP_LEN))
			goto no_room;
		data = (void *)(long)ctx->data;
		end = (void *)(long)ctx->data_end;
		if (data + STAMP_LEN > end)
			goto no_room;
		__builtin_memcpy(data, &now, STAMP_LEN);
	}
	cnt->steered++;
	return XDP_REDIRECT;

no_room:
	cnt->no_room++;
	return XDP_DROP;

malformed:
	cnt->malformed++;
	return XDP_DROP;
pass:
	cnt->passed++;
	return XDP_PASS;
}

// The project's license; the program calls no GPL-only helper.
char __license[] SEC("license") = "Apache-2.0";
