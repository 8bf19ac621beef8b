//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/sprayfabric/spray/transport/wire"
	"golang.org/x/sys/unix"
)

// writable returns the byte ranges of frame that the fabric programs may
// change: the IPv4 TOS and header checksum, the IPv6 traffic class, the UDP
// checksum and the largest INT region a spray data packet can have. An
// empty result means the frame is not IP/UDP and must stay as it is.
func writable(frame []byte) [][2]int {
	if len(frame) < 14 {
		return nil
	}
	off := 14
	et := binary.BigEndian.Uint16(frame[12:])
	if et == 0x8100 || et == 0x88A8 {
		if len(frame) < 18 {
			return nil
		}
		et = binary.BigEndian.Uint16(frame[16:])
		off = 18
	}
	var r [][2]int
	switch {
	case et == 0x0800 && len(frame) >= off+20:
		r = append(r, [2]int{off + 1, off + 2}, [2]int{off + 10, off + 12})
		off += int(frame[off]&0x0f) * 4
	case et == 0x86DD && len(frame) >= off+40:
		r = append(r, [2]int{off, off + 2})
		off += 40
	default:
		return nil
	}
	shim := off + 8 + wire.INTShimOff
	return append(r, [2]int{off + 6, off + 8}, [2]int{shim, shim + wire.INTRegionMaxLen})
}

func inRanges(i int, rs [][2]int) bool {
	for _, r := range rs {
		if i >= r[0] && i < r[1] {
			return true
		}
	}
	return false
}

// FuzzFabric runs arbitrary frames through a port's egress and ingress (ECN
// marking every ECT frame) and checks that the programs pass every frame,
// keep its length, change only the bytes they may change, and keep a frame
// that wire.Decode accepts decodable, with one more hop record if there was
// room.
func FuzzFabric(f *testing.F) {
	for _, v6 := range []bool{false, true} {
		for _, intMax := range []uint8{0, 1, 8} {
			p, payload := sprayData(v6, intMax, wire.ECNECT1)
			f.Add(encode(f, &p, payload[:intMax*7]))
		}
	}
	p, payload := sprayData(false, 2, wire.ECNECT0)
	p.Eth.HasVLAN, p.Eth.VLAN = true, 100
	f.Add(encode(f, &p, payload))
	p, payload = sprayData(true, 3, 0)
	p.BTH.Opcode = wire.OpSendOnly
	f.Add(encode(f, &p, payload))
	f.Add(frameSpec{src: ip4B, dst: ip4A, srcPort: 1, dstPort: 4791, payload: make([]byte, 60)}.build())
	f.Add([]byte{})

	fab := loadFabricRun(f, PortConfig{RateMbps: testRate, ECN: ECNConfig{KMax: 1}})
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) < 14 || len(frame) > 4000 {
			return // BPF_PROG_TEST_RUN refuses these
		}
		var before wire.Packet
		valid := wire.Decode(frame, &before) == nil
		hops := len(before.INT) / wire.HopLen
		room := valid && before.BTH.Opcode == wire.OpSprayData && before.Data.Flags&wire.FlagINT != 0 &&
			hops < int(before.Data.INTMax)

		opts := ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256)}
		ret, err := fab.egress.Run(&opts)
		if errors.Is(err, unix.EINVAL) {
			return // the kernel refuses some frames for test runs (an IPv4 ethertype without a header)
		} else if err != nil {
			t.Fatal(err)
		}
		ret2, out2 := run(t, fab.ingress, bytes.Clone(opts.DataOut))
		if ret != retNext || ret2 != retNext {
			t.Fatalf("verdicts %d, %d; want TCX_NEXT", int32(ret), int32(ret2))
		}
		if len(out2) != len(frame) {
			t.Fatalf("length %d -> %d", len(frame), len(out2))
		}
		rs := writable(frame)
		for i := range frame {
			if out2[i] != frame[i] && !inRanges(i, rs) {
				t.Fatalf("byte %d changed (%#x -> %#x) outside the writable ranges %v", i, frame[i], out2[i], rs)
			}
		}
		if !valid {
			return
		}
		var after wire.Packet
		if err := wire.Decode(out2, &after); err != nil {
			t.Fatalf("valid frame no longer decodes: %v", err)
		}
		want := hops
		if room {
			want++
		}
		if got := len(after.INT) / wire.HopLen; got != want {
			t.Fatalf("%d hop records after the port, want %d", got, want)
		}
		if !bytes.Equal(after.Payload, before.Payload) {
			t.Fatal("payload changed")
		}
	})
}

// FuzzFabricTrim runs arbitrary frames through the egress of a port whose
// queue is always past its threshold (TrimQueue 1): a frame that
// wire.Decode accepts leaves cut exactly as wire.Trim cuts it, redirected,
// when wire.Trim takes it, and untouched otherwise; any frame is passed on,
// redirected or dropped, and a drop is counted.
func FuzzFabricTrim(f *testing.F) {
	for _, v6 := range []bool{false, true} {
		for _, intMax := range []uint8{0, 2} {
			p, payload := sprayData(v6, intMax, 0)
			f.Add(encode(f, &p, payload[:intMax*9]))
		}
	}
	p, payload := sprayData(false, 0, 0)
	p.Eth.HasVLAN, p.Eth.VLAN = true, 100
	f.Add(encode(f, &p, payload))
	p, _ = sprayData(false, 0, 0)
	p.BTH.Opcode = wire.OpSprayAck
	p.Ack = wire.Ack{CumPSN: 3, AckedPSN: 2, SackWords: 1}
	f.Add(encode(f, &p, nil))

	fab := loadFabricRun(f, PortConfig{RateMbps: testRate, TrimQueue: 1, PriorityClass: 0x10010})
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) < 14 || len(frame) > 4000 {
			return // BPF_PROG_TEST_RUN refuses these
		}
		var in wire.Packet
		valid := wire.Decode(frame, &in) == nil
		want := bytes.Clone(frame)
		n, terr := wire.Trim(want)
		before := portCounters(t, fab, testPort)
		opts := ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256)}
		ret, err := fab.egress.Run(&opts)
		if errors.Is(err, unix.EINVAL) {
			return
		} else if err != nil {
			t.Fatal(err)
		}
		d := portCounters(t, fab, testPort).Sub(before)
		out := opts.DataOut
		switch ret {
		case retShot:
			if d.DropQueue != 1 {
				t.Fatalf("dropped, counters moved by %v: want one DropQueue", d)
			}
			if valid && terr == nil {
				t.Fatalf("dropped a packet that wire.Trim cuts")
			}
		case retRedirect:
			if d.TrimmedQueue != 1 {
				t.Fatalf("redirected, counters moved by %v: want one TrimmedQueue", d)
			}
			if valid && (terr != nil || !bytes.Equal(out[:n], want[:n])) {
				t.Fatalf("cut to\n% x\nwire.Trim: %v\n% x", out[:min(len(out), 120)], terr, want[:min(n, 120)])
			}
		case retNext:
			if d.TrimmedQueue != 0 {
				t.Fatalf("passed on, counters moved by %v: want no trim", d)
			}
			if valid && terr == nil {
				t.Fatalf("passed on whole a packet that wire.Trim cuts")
			}
			if !bytes.Equal(out[:len(frame)], frame) && valid {
				t.Fatalf("a frame passed on was changed")
			}
		default:
			t.Fatalf("verdict %d", int32(ret))
		}
	})
}
