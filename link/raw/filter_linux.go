package raw

import "golang.org/x/sys/unix"

// Classic BPF, as the kernel's socket filters run it.
const (
	ldAbsW  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	ldAbsH  = unix.BPF_LD | unix.BPF_H | unix.BPF_ABS
	ldAbsB  = unix.BPF_LD | unix.BPF_B | unix.BPF_ABS
	ldIndH  = unix.BPF_LD | unix.BPF_H | unix.BPF_IND
	ldxMSH  = unix.BPF_LDX | unix.BPF_B | unix.BPF_MSH
	jeqK    = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	jsetK   = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	retK    = unix.BPF_RET | unix.BPF_K
	adPkt   = 0xFFFFF000 + 4 // SKF_AD_OFF + SKF_AD_PKTTYPE
	snapLen = 0x40000
)

// asm is one instruction with symbolic jump targets; "" falls through.
type asm struct {
	label  string
	code   uint16
	k      uint32
	jt, jf string
}

// filterProgram is the socket filter: accept UDP to port over IPv4 (not
// fragmented: MF and offset zero) or IPv6 (UDP as the first next header),
// untagged or with one 802.1Q tag; refuse the socket's own outgoing frames
// and frames for other hosts.
func filterProgram(port uint16) []unix.SockFilter {
	p := uint32(port)
	prog := []asm{
		{code: ldAbsW, k: adPkt},
		{code: jeqK, k: unix.PACKET_OUTGOING, jt: "drop"},
		{code: jeqK, k: unix.PACKET_OTHERHOST, jt: "drop"},
		{code: ldAbsH, k: 12},
		{code: jeqK, k: 0x8100, jt: "vlan"},
		{code: jeqK, k: 0x0800, jt: "ip4"},
		{code: jeqK, k: 0x86DD, jt: "ip6", jf: "drop"},
		{label: "ip4", code: ldAbsB, k: 14 + 9},
		{code: jeqK, k: 17, jf: "drop"},
		{code: ldAbsH, k: 14 + 6},
		{code: jsetK, k: 0x3FFF, jt: "drop"},
		{code: ldxMSH, k: 14},
		{code: ldIndH, k: 14 + 2},
		{code: jeqK, k: p, jt: "accept", jf: "drop"},
		{label: "ip6", code: ldAbsB, k: 14 + 6},
		{code: jeqK, k: 17, jf: "drop"},
		{code: ldAbsH, k: 14 + 40 + 2},
		{code: jeqK, k: p, jt: "accept", jf: "drop"},
		{label: "vlan", code: ldAbsH, k: 16},
		{code: jeqK, k: 0x0800, jt: "vip4"},
		{code: jeqK, k: 0x86DD, jt: "vip6", jf: "drop"},
		{label: "vip4", code: ldAbsB, k: 18 + 9},
		{code: jeqK, k: 17, jf: "drop"},
		{code: ldAbsH, k: 18 + 6},
		{code: jsetK, k: 0x3FFF, jt: "drop"},
		{code: ldxMSH, k: 18},
		{code: ldIndH, k: 18 + 2},
		{code: jeqK, k: p, jt: "accept", jf: "drop"},
		{label: "vip6", code: ldAbsB, k: 18 + 6},
		{code: jeqK, k: 17, jf: "drop"},
		{code: ldAbsH, k: 18 + 40 + 2},
		{code: jeqK, k: p, jt: "accept", jf: "drop"},
		{label: "accept", code: retK, k: snapLen},
		{label: "drop", code: retK, k: 0},
	}
	at := map[string]int{}
	for i, in := range prog {
		if in.label != "" {
			at[in.label] = i
		}
	}
	rel := func(i int, l string) uint8 {
		if l == "" {
			return 0
		}
		d := at[l] - i - 1
		if d < 0 || d > 255 {
			panic("raw: bad filter jump to " + l) // a bug in the table above
		}
		return uint8(d)
	}
	out := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		out[i] = unix.SockFilter{Code: in.code, K: in.k, Jt: rel(i, in.jt), Jf: rel(i, in.jf)}
	}
	return out
}
