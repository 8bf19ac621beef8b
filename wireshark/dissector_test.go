package wireshark

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/pcap"
	"github.com/sprayfabric/spray/transport/wire"
)

// script is the dissector under test.
const script = "spray.lua"

// tsharkTimeout bounds one run of tshark.
const tsharkTimeout = 5 * time.Minute

// Expert severities as tshark prints _ws.expert.severity (PI_WARN,
// PI_ERROR).
const (
	severityWarn  = 0x00600000
	severityError = 0x00800000
)

// tshark returns the path of a tshark that runs Lua scripts, or skips the
// test.
func tshark(t *testing.T) string {
	t.Helper()
	path := testutil.SkipIfMissingTool(t, "tshark", "tshark")
	out, err := exec.Command(path, "-v").CombinedOutput()
	if err != nil {
		t.Fatalf("tshark -v: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("with Lua")) {
		testutil.SkipIfToolMissing(t, fmt.Errorf("%s was built without Lua: %w", path, testutil.ErrToolMissing))
	}
	// A tshark run as root ignores -X lua_script when its init.lua sets
	// run_user_scripts_when_superuser = false (Debian's sets it true).
	got := runTshark(t, path, filepath.Join("testdata", capOpcodes), "-c", "1", "-T", "fields", "-e", "spraywire.opcode")
	if len(bytes.TrimSpace(got)) == 0 {
		t.Fatalf("tshark did not run %s: as root, set run_user_scripts_when_superuser = true in "+
			"/usr/share/wireshark/init.lua or run the tests as another user", script)
	}
	return path
}

// runTshark runs tshark with the dissector loaded on the pcap file at path
// and returns its standard output. Any message of the Lua engine on
// standard error (a script that fails to load, a run-time error in the
// dissector) fails the test.
func runTshark(t *testing.T, bin, path string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), tsharkTimeout)
	defer cancel()
	all := append([]string{"-n", "-X", "lua_script:" + script, "-r", path}, args...)
	cmd := exec.CommandContext(ctx, bin, all...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark %s: %v\n%s", strings.Join(all, " "), err, stderr.Bytes())
	}
	if bytes.Contains(stderr.Bytes(), []byte("Lua")) {
		t.Fatalf("tshark %s: the Lua engine complains:\n%s", strings.Join(all, " "), stderr.Bytes())
	}
	return out
}

// fields are the dissector's fields that the test reads for every frame.
// Those in compared are checked against wire.Decode; the others (reserved
// bits, empty INT slots) only have to be present where the layout puts them.
var fields = []string{
	"frame.number", "frame.protocols", "_ws.malformed", "_ws.expert.severity", "_ws.expert.message",
	"spraywire.opcode", "spraywire.se", "spraywire.m", "spraywire.padcnt", "spraywire.tver", "spraywire.pkey",
	"spraywire.fecn", "spraywire.becn", "spraywire.trimmed", "spraywire.destqp", "spraywire.ackreq", "spraywire.psn",
	"spraywire.entropy", "spraywire.ecn",
	"spraywire.reth.va", "spraywire.reth.rkey", "spraywire.reth.len",
	"spraywire.aeth.syndrome", "spraywire.aeth.msn",
	"spraywire.syndrome.type", "spraywire.syndrome.value", "spraywire.nak",
	"spraywire.immdt", "spraywire.cnp.reserved",
	"spraywire.data.msgid", "spraywire.data.offset", "spraywire.data.msglen", "spraywire.data.kind",
	"spraywire.data.flags", "spraywire.data.flags.int", "spraywire.data.intmax", "spraywire.data.txtime",
	"spraywire.data.credit", "spraywire.data.credit.unsolicited", "spraywire.data.credit.credited",
	"spraywire.data.readreq",
	"spraywire.int.version", "spraywire.int.count", "spraywire.int.max",
	"spraywire.hop.switch", "spraywire.hop.port", "spraywire.hop.rate", "spraywire.hop.ts",
	"spraywire.hop.qlen", "spraywire.hop.txbytes",
	"spraywire.ack.cumpsn", "spraywire.ack.ackedpsn", "spraywire.ack.sackbase", "spraywire.ack.msgid",
	"spraywire.ack.echotime", "spraywire.ack.hold", "spraywire.ack.hold.ns", "spraywire.ack.hold.from_arrival",
	"spraywire.ack.ecncount", "spraywire.ack.entropy", "spraywire.ack.syndrome", "spraywire.ack.sackwords",
	"spraywire.ack.inthops", "spraywire.ack.sack", "spraywire.ack.sack.psns",
	"spraywire.ack.flags", "spraywire.ack.flags.credit", "spraywire.ack.credit",
	"spraywire.credit.count", "spraywire.credit.used", "spraywire.credit.flags", "spraywire.credit.flags.retry",
	"spraywire.secured", "spraywire.sec.version", "spraywire.sec.flags", "spraywire.sec.integrity",
	"spraywire.sec.epoch", "spraywire.sec.counter", "spraywire.sec.ciphertext", "spraywire.sec.tag",
	"spraywire.connbit", "spraywire.conn.version", "spraywire.conn.flags", "spraywire.conn.reply",
	"spraywire.conn.close", "spraywire.conn.srcqp", "spraywire.conn.psn", "spraywire.conn.peerpsn",
	"spraywire.conn.token", "spraywire.conn.ports",
	"spraywire.payload", "spraywire.payload.len", "spraywire.pad",
	"spraywire.icrc", "spraywire.icrc.status", "spraywire.icrc.computed",
}

// Opcodes' extension headers (transport/wire/doc.go, "Extension headers
// after the BTH").
var (
	opRETH = []wire.Opcode{wire.OpWriteFirst, wire.OpWriteOnly, wire.OpWriteOnlyImm, wire.OpReadRequest}
	opImm  = []wire.Opcode{wire.OpSendLastImm, wire.OpSendOnlyImm, wire.OpWriteLastImm, wire.OpWriteOnlyImm}
	opAETH = []wire.Opcode{wire.OpReadResponseFirst, wire.OpReadResponseLast, wire.OpReadResponseOnly, wire.OpAcknowledge}
)

var nakNames = map[uint8]string{
	wire.NakPSNSequenceError: "PSN sequence error", wire.NakInvalidRequest: "invalid request",
	wire.NakRemoteAccessError: "remote access error", wire.NakRemoteOperational: "remote operational error",
	wire.NakInvalidRDRequest: "invalid RD request",
}

func b2s(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func u(v uint64) string { return strconv.FormatUint(v, 10) }

// sackPSNs lists the PSNs the SACK words mark received, as the dissector
// shows them: ranges "a-b" and single PSNs, comma-separated, PSNs modulo
// 2^24, "none" for none.
func sackPSNs(base uint32, words []uint64) string {
	var out []string
	first, last, open := uint32(0), uint32(0), false
	flush := func() {
		if !open {
			return
		}
		if first == last {
			out = append(out, u(uint64(first)))
		} else {
			out = append(out, u(uint64(first))+"-"+u(uint64(last)))
		}
	}
	for w, word := range words {
		for i := range 64 {
			if word>>i&1 == 0 {
				continue
			}
			psn := (base + uint32(64*w+i)) & 0xFFFFFF
			if open && psn == (last+1)&0xFFFFFF {
				last = psn
				continue
			}
			flush()
			first, last, open = psn, psn, true
		}
	}
	flush()
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ",")
}

// want returns the value of every compared field that spray's decoder gives
// for frame (decoded as p): several occurrences joined by "|", absent
// fields missing.
func want(frame []byte, p *wire.Packet) map[string]string {
	w := map[string]string{}
	set := func(k string, vs ...string) { w["spraywire."+k] = strings.Join(vs, "|") }
	b := &p.BTH
	set("opcode", u(uint64(b.Opcode)))
	set("se", b2s(b.SE))
	set("m", b2s(b.M))
	set("padcnt", u(uint64(b.PadCnt)))
	set("tver", u(uint64(b.TVer)))
	set("pkey", u(uint64(b.PKey)))
	set("fecn", b2s(b.FECN))
	set("becn", b2s(b.BECN))
	set("trimmed", b2s(b.Trimmed))
	set("destqp", u(uint64(b.DestQP)))
	set("ackreq", b2s(b.AckReq))
	set("psn", u(uint64(b.PSN)))
	set("secured", b2s(b.Secured))
	set("connbit", b2s(b.Conn))
	if b.Conn && !b.Trimmed {
		c := &p.Conn
		set("conn.version", u(wire.ConnVersion))
		set("conn.flags", u(uint64(c.Flags)))
		set("conn.reply", b2s(c.Flags&wire.ConnReply != 0))
		set("conn.close", b2s(c.Flags&wire.ConnClose != 0))
		set("conn.srcqp", u(uint64(c.SrcQP)))
		set("conn.psn", u(uint64(c.PSN)))
		set("conn.peerpsn", u(uint64(c.PeerPSN)))
		set("conn.token", u(c.Token))
		set("conn.ports", u(uint64(c.Ports[0])), u(uint64(c.Ports[1])), u(uint64(c.Ports[2])), u(uint64(c.Ports[3])))
	}
	encrypted := wantSec(frame, p, set)
	set("entropy", u(uint64(p.UDP.Src)))
	set("ecn", u(uint64(p.IP.TOS&3)))

	var syns []uint8
	reth, imm := slices.Contains(opRETH, b.Opcode), slices.Contains(opImm, b.Opcode)
	payload := b.Opcode.HasPayload()
	switch b.Opcode {
	case wire.OpSprayData:
		d := &p.Data
		reth, imm = d.Kind.HasRETH(), d.Kind.HasImm()
		payload = d.Kind != wire.KindReadReq
		set("data.msgid", u(uint64(d.MsgID)))
		set("data.offset", u(uint64(d.Offset)))
		set("data.msglen", u(uint64(d.MsgLen)))
		set("data.kind", u(uint64(d.Kind)))
		set("data.flags", u(uint64(d.Flags)))
		set("data.flags.int", b2s(d.Flags&wire.FlagINT != 0))
		set("data.intmax", u(uint64(d.INTMax)))
		set("data.txtime", u(d.TxTime))
		set("data.credit", u(uint64(d.Credit)))
		set("data.credit.unsolicited", b2s(d.Credit&wire.DataUnsolicited != 0))
		set("data.credit.credited", b2s(d.Credit&wire.DataCredited != 0))
		if b.Trimmed {
			// The headers alone: nothing after the data header.
			reth, imm, payload = false, false, false
		}
		if d.Kind == wire.KindReadResp && !b.Trimmed {
			set("data.readreq", u(uint64(p.Imm)))
		}
		if d.Flags&wire.FlagINT != 0 {
			set("int.version", u(wire.INTVersion))
			set("int.count", u(uint64(len(p.INT)/wire.HopLen)))
			set("int.max", u(uint64(d.INTMax)))
		}
	case wire.OpSprayAck:
		a := &p.Ack
		set("ack.cumpsn", u(uint64(a.CumPSN)))
		set("ack.ackedpsn", u(uint64(a.AckedPSN)))
		set("ack.sackbase", u(uint64(a.SackBase)))
		set("ack.msgid", u(uint64(a.MsgID)))
		set("ack.echotime", u(a.EchoTime))
		set("ack.hold", u(uint64(a.HoldNs)))
		set("ack.hold.ns", u(uint64(a.HoldNs&wire.HoldMask)))
		set("ack.hold.from_arrival", b2s(a.HoldNs&wire.HoldFromArrival != 0))
		set("ack.ecncount", u(uint64(a.ECNCount)))
		set("ack.entropy", u(uint64(a.Entropy)))
		set("ack.syndrome", u(uint64(a.Syndrome)))
		set("ack.sackwords", u(uint64(a.SackWords)))
		set("ack.inthops", u(uint64(a.INTHops)))
		set("ack.flags", u(uint64(a.Flags)))
		set("ack.flags.credit", b2s(a.Flags&wire.AckCredit != 0))
		set("ack.credit", u(uint64(a.Credit)))
		var ws []string
		for _, x := range a.Sack[:a.SackWords] {
			ws = append(ws, u(x))
		}
		set("ack.sack", ws...)
		set("ack.sack.psns", sackPSNs(a.SackBase, a.Sack[:a.SackWords]))
		syns = append(syns, a.Syndrome)
	case wire.OpCNP:
		set("cnp.reserved", strings.Repeat("00", wire.CNPPadLen))
	case wire.OpCreditGrant, wire.OpCreditRequest:
		c := &p.Credit
		set("credit.count", u(uint64(c.Count)))
		set("credit.used", u(uint64(c.Used)))
		set("credit.flags", u(uint64(c.Flags)))
		set("credit.flags.retry", b2s(c.Flags&wire.CreditRetry != 0))
	}
	if slices.Contains(opAETH, b.Opcode) {
		set("aeth.syndrome", u(uint64(p.AETH.Syndrome)))
		set("aeth.msn", u(uint64(p.AETH.MSN)))
		syns = append(syns, p.AETH.Syndrome)
	}
	for _, s := range syns {
		set("syndrome.type", u(uint64(s>>5&3)))
		set("syndrome.value", u(uint64(s&0x1F)))
		if wire.IsNak(s) {
			set("nak", nakNames[s])
		}
	}
	if reth {
		set("reth.va", u(p.RETH.VA))
		set("reth.rkey", u(uint64(p.RETH.RKey)))
		set("reth.len", u(uint64(p.RETH.Len)))
	}
	if imm {
		set("immdt", u(uint64(p.Imm)))
	}
	if n := len(p.INT) / wire.HopLen; n > 0 {
		var sw, port, rate, ts, qlen, tx []string
		for i := range n {
			h := wire.HopAt(p.INT, i)
			sw, port = append(sw, u(uint64(h.Switch))), append(port, u(uint64(h.Port)))
			rate, ts = append(rate, u(uint64(h.RateMbps))), append(ts, u(h.TS))
			qlen, tx = append(qlen, u(uint64(h.QLen))), append(tx, u(uint64(h.TxBytes)))
		}
		set("hop.switch", sw...)
		set("hop.port", port...)
		set("hop.rate", rate...)
		set("hop.ts", ts...)
		set("hop.qlen", qlen...)
		set("hop.txbytes", tx...)
	}
	if payload && encrypted {
		set("payload.len", u(uint64(len(p.Payload))))
		if n := len(p.Payload) + int(b.PadCnt); n > 0 {
			set("sec.ciphertext", hex.EncodeToString(p.Payload[:n]))
		}
	} else if payload {
		set("payload.len", u(uint64(len(p.Payload))))
		if len(p.Payload) > 0 {
			set("payload", hex.EncodeToString(p.Payload))
		}
		if b.PadCnt > 0 {
			set("pad", strings.Repeat("00", int(b.PadCnt)))
		}
	}
	// The ICRC, as the frame stores it (little-endian), and verified.
	end := ipEnd(frame)
	icrc := u(uint64(binary.LittleEndian.Uint32(frame[end-wire.ICRCLen : end])))
	set("icrc", icrc)
	set("icrc.computed", icrc)
	set("icrc.status", "1")
	return w
}

// wantSec sets the security header's fields and the tag of a secured
// packet, and reports whether its payload is encrypted.
func wantSec(frame []byte, p *wire.Packet, set func(k string, vs ...string)) bool {
	if !p.BTH.Secured {
		return false
	}
	s := &p.Sec
	set("sec.version", u(wire.SecVersion))
	set("sec.flags", u(uint64(s.Flags)))
	set("sec.integrity", b2s(s.Flags&wire.SecIntegrityOnly != 0))
	set("sec.epoch", u(uint64(s.Epoch)))
	set("sec.counter", u(s.Counter))
	end := ipEnd(frame) - wire.ICRCLen
	set("sec.tag", hex.EncodeToString(frame[end-wire.TagLen:end]))
	return s.Flags&wire.SecIntegrityOnly == 0
}

// ipEnd returns the end of the IP packet in an Ethernet frame that
// wire.Decode accepted (Ethernet padding excluded).
func ipEnd(f []byte) int {
	ip := wire.EthLen
	if binary.BigEndian.Uint16(f[12:]) == 0x8100 {
		ip += wire.VLANLen
	}
	if f[ip]>>4 == 6 {
		return ip + wire.IPv6Len + int(binary.BigEndian.Uint16(f[ip+4:]))
	}
	return ip + int(binary.BigEndian.Uint16(f[ip+2:]))
}

// normalize turns one tshark field value into the form want uses: numbers
// (tshark prints some in hex) in decimal, each occurrence of a repeated
// field separately.
func normalize(field, v string) string {
	if v == "" || field == "spraywire.payload" || field == "spraywire.pad" || field == "spraywire.cnp.reserved" ||
		field == "spraywire.sec.ciphertext" || field == "spraywire.sec.tag" ||
		field == "spraywire.nak" || field == "spraywire.ack.sack.psns" {
		return v
	}
	parts := strings.Split(v, "|")
	for i, s := range parts {
		if n, err := strconv.ParseUint(s, 0, 64); err == nil {
			parts[i] = u(n)
		}
	}
	return strings.Join(parts, "|")
}

// coverage records what the golden captures exercise.
type coverage struct {
	opcodes   map[wire.Opcode]int
	kinds     map[wire.OpKind]int
	sackWords map[uint8]int
	syndromes map[string]int // "AETH 0x60", "ACK 0x62"
	intFill   map[string]int // "empty", "partial", "full" INT regions; "echo" in ACKs
	lower     map[string]int // "ipv6", "vlan", "CE"
}

// TestDissector decodes every golden capture with tshark and the dissector,
// and compares every field of every frame with what wire.Decode reads in
// the same frame. Every frame must be dissected by the dissector alone (its
// protocol last in frame.protocols), with a good ICRC, no malformed mark, no
// expert warning or error, and no "unknown" or "vendor specific" anywhere in
// its detailed dissection. Together the captures must hold every opcode
// wire knows, every data kind, every SACK size and every syndrome class.
func TestDissector(t *testing.T) {
	bin := tshark(t)
	cov := coverage{map[wire.Opcode]int{}, map[wire.OpKind]int{}, map[uint8]int{}, map[string]int{}, map[string]int{}, map[string]int{}}
	for _, name := range goldenCaptures {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("testdata", name)
			recs, err := pcap.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			args := []string{"-T", "fields", "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=|"}
			for _, f := range fields {
				args = append(args, "-e", f)
			}
			out := strings.TrimRight(string(runTshark(t, bin, path, args...)), "\n")
			lines := strings.Split(out, "\n")
			if len(lines) != len(recs) {
				t.Fatalf("tshark printed %d lines for %d frames", len(lines), len(recs))
			}
			var p wire.Packet
			for i, line := range lines {
				v := strings.Split(line, "\t")
				if len(v) != len(fields) {
					t.Fatalf("frame %d: %d fields in tshark's line, want %d: %q", i+1, len(v), len(fields), line)
				}
				got := map[string]string{}
				for j, f := range fields {
					got[f] = normalize(f, v[j])
				}
				where := fmt.Sprintf("%s frame %d", name, i+1)
				if got["frame.number"] != strconv.Itoa(i+1) {
					t.Fatalf("%s: tshark's line is for frame %s", where, got["frame.number"])
				}
				frame := recs[i].Data
				if err := wire.Decode(frame, &p); err != nil {
					t.Fatalf("%s: spray's codec rejects it: %v", where, err)
				}
				if !strings.HasSuffix(got["frame.protocols"], ":udp:spraywire") {
					t.Errorf("%s: protocols %s, want the dissector last after UDP", where, got["frame.protocols"])
				}
				if got["_ws.malformed"] != "" {
					t.Errorf("%s: tshark marks it malformed", where)
				}
				for _, s := range strings.Split(got["_ws.expert.severity"], "|") {
					if n, _ := strconv.ParseUint(s, 0, 32); n >= severityWarn {
						t.Errorf("%s: expert info of severity %#x: %s", where, n, got["_ws.expert.message"])
					}
				}
				w := want(frame, &p)
				for _, f := range fields {
					if !strings.HasPrefix(f, "spraywire.") {
						continue
					}
					if got[f] != w[f] {
						t.Errorf("%s (%v): %s is %q, spray's decoder says %q", where, p.BTH.Opcode, f, got[f], w[f])
					}
				}
				cov.add(&p, frame)
			}
			// The detailed dissection, for names the dissector does not know.
			for _, line := range strings.Split(string(runTshark(t, bin, path, "-V", "-O", "spraywire")), "\n") {
				l := strings.ToLower(line)
				for _, bad := range []string{"unknown", "vendor specific", "malformed", "expert info (error", "expert info (warn", "lua error"} {
					if strings.Contains(l, bad) {
						t.Errorf("%s: the detailed dissection says %q", name, strings.TrimSpace(line))
					}
				}
			}
		})
	}
	if t.Failed() {
		return
	}
	cov.check(t)
}

func (c *coverage) add(p *wire.Packet, frame []byte) {
	c.opcodes[p.BTH.Opcode]++
	if p.IP.Src.Is6() {
		c.lower["ipv6"]++
	}
	if p.Eth.HasVLAN {
		c.lower["vlan"]++
	}
	if p.IP.TOS&3 == wire.ECNCE {
		c.lower["CE"]++
	}
	switch p.BTH.Opcode {
	case wire.OpSprayData:
		c.kinds[p.Data.Kind]++
		if p.Data.Flags&wire.FlagINT != 0 {
			switch n := len(p.INT) / wire.HopLen; {
			case n == 0:
				c.intFill["empty"]++
			case n < int(p.Data.INTMax):
				c.intFill["partial"]++
			default:
				c.intFill["full"]++
			}
		}
	case wire.OpSprayAck:
		c.sackWords[p.Ack.SackWords]++
		c.syndromes[fmt.Sprintf("ACK %#02x", syndromeClass(p.Ack.Syndrome))]++
		if p.Ack.INTHops > 0 {
			c.intFill["echo"]++
		}
	}
	if p.BTH.Opcode == wire.OpAcknowledge {
		c.syndromes[fmt.Sprintf("AETH %#02x", syndromeClass(p.AETH.Syndrome))]++
	}
}

// syndromeClass is a syndrome without its credit count or RNR timer.
func syndromeClass(s uint8) uint8 {
	if wire.IsNak(s) {
		return s
	}
	return s & 0xE0
}

func (c *coverage) check(t *testing.T) {
	for op := range 256 {
		if o := wire.Opcode(op); o.Known() && c.opcodes[o] == 0 {
			t.Errorf("no golden capture holds opcode %v (%#02x)", o, op)
		}
	}
	for k := wire.KindSend; k <= wire.KindReadReq; k++ {
		if c.kinds[k] == 0 {
			t.Errorf("no golden capture holds spray data of kind %v", k)
		}
	}
	for w := uint8(1); w <= wire.MaxSackWords; w++ {
		if c.sackWords[w] == 0 {
			t.Errorf("no golden capture holds a spray ACK with %d SACK words", w)
		}
	}
	for _, hdr := range []string{"AETH", "ACK"} {
		for _, s := range []uint8{wire.SyndromeAck, wire.SyndromeRNR, wire.NakPSNSequenceError, wire.NakInvalidRequest,
			wire.NakRemoteAccessError, wire.NakRemoteOperational, wire.NakInvalidRDRequest} {
			if k := fmt.Sprintf("%s %#02x", hdr, s); c.syndromes[k] == 0 {
				t.Errorf("no golden capture holds syndrome %s", k)
			}
		}
	}
	for _, k := range []string{"empty", "partial", "full", "echo"} {
		if c.intFill[k] == 0 {
			t.Errorf("no golden capture holds INT records: %s", k)
		}
	}
	for _, k := range []string{"ipv6", "vlan", "CE"} {
		if c.lower[k] == 0 {
			t.Errorf("no golden capture holds a frame with %s", k)
		}
	}
	t.Logf("opcodes %v; kinds %v; SACK words %v; syndromes %v; INT %v; %v", c.opcodes, c.kinds, c.sackWords, c.syndromes, c.intFill, c.lower)
}

// TestDissectorGoldenFromTransfers checks that the transfer captures hold
// what the transport actually sends, not only what the codec can encode:
// NAKs with a remote access error in both profiles, READs, CNPs, INT
// records stamped by the fabric and echoed in ACKs.
func TestDissectorGoldenFromTransfers(t *testing.T) {
	count := func(name string, pred func(*wire.Packet) bool) int {
		recs, err := pcap.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		var p wire.Packet
		for _, r := range recs {
			if wire.Decode(r.Data, &p) == nil && pred(&p) {
				n++
			}
		}
		return n
	}
	for _, c := range []struct {
		name, what string
		pred       func(*wire.Packet) bool
	}{
		{capSpray, "READ requests", func(p *wire.Packet) bool {
			return p.BTH.Opcode == wire.OpSprayData && p.Data.Kind == wire.KindReadReq
		}},
		{capSpray, "READ responses", func(p *wire.Packet) bool {
			return p.BTH.Opcode == wire.OpSprayData && p.Data.Kind == wire.KindReadResp
		}},
		{capSpray, "stamped INT records", func(p *wire.Packet) bool { return p.BTH.Opcode == wire.OpSprayData && len(p.INT) > 0 }},
		{capSpray, "echoed INT records", func(p *wire.Packet) bool { return p.BTH.Opcode == wire.OpSprayAck && p.Ack.INTHops > 0 }},
		{capSpray, "SACKs of PSNs past a hole", func(p *wire.Packet) bool {
			return p.BTH.Opcode == wire.OpSprayAck && p.Ack.Sack[0] != 0
		}},
		{capSpray, "remote access NAKs", func(p *wire.Packet) bool {
			return p.BTH.Opcode == wire.OpSprayAck && p.Ack.Syndrome == wire.NakRemoteAccessError
		}},
		{capRoCE, "READ requests", func(p *wire.Packet) bool { return p.BTH.Opcode == wire.OpReadRequest }},
		{capRoCE, "READ responses", func(p *wire.Packet) bool { return p.BTH.Opcode == wire.OpReadResponseFirst }},
		{capRoCE, "CNPs", func(p *wire.Packet) bool { return p.BTH.Opcode == wire.OpCNP }},
		{capRoCE, "sequence NAKs", func(p *wire.Packet) bool {
			return p.BTH.Opcode == wire.OpAcknowledge && p.AETH.Syndrome == wire.NakPSNSequenceError
		}},
		{capRoCE, "remote access NAKs", func(p *wire.Packet) bool {
			return p.BTH.Opcode == wire.OpAcknowledge && p.AETH.Syndrome == wire.NakRemoteAccessError
		}},
	} {
		if n := count(c.name, c.pred); n == 0 {
			t.Errorf("%s holds no %s", c.name, c.what)
		} else {
			t.Logf("%s: %d %s", c.name, n, c.what)
		}
	}
}

// TestDissectorBadFrames hands the dissector frames that spray's codec
// rejects and checks that it reports each as an error naming the problem;
// and a frame of an opcode spray does not speak, which must go to
// Wireshark's InfiniBand dissector.
func TestDissectorBadFrames(t *testing.T) {
	bin := tshark(t)
	r := testutil.Rand(t)
	base := func(op wire.Opcode) wire.Packet { return lower(r, netVariants[0], op) }
	enc := func(p wire.Packet, payload []byte) []byte {
		buf := make([]byte, wire.FrameLen(&p, len(payload)))
		n, err := wire.Encode(buf, &p, payload)
		if err != nil {
			t.Fatal(err)
		}
		return buf[:n]
	}
	fixICRC := func(f []byte) []byte {
		c, err := wire.ICRC(f)
		if err != nil {
			t.Fatal(err)
		}
		binary.LittleEndian.PutUint32(f[len(f)-wire.ICRCLen:], c)
		return f
	}
	const bth = wire.EthLen + wire.IPv4Len + wire.UDPLen // BTH offset
	const data = bth + wire.BTHLen                       // data or ACK header
	dataPkt := func(intMax uint8, hops int) wire.Packet {
		p := base(wire.OpSprayData)
		p.Data = wire.Data{MsgID: 1, MsgLen: 100, Kind: wire.KindSend, TxTime: 5}
		if intMax > 0 {
			p.Data.Flags, p.Data.INTMax = wire.FlagINT, intMax
			p.INT = make([]byte, hops*wire.HopLen)
		}
		return p
	}
	ackPkt := func(hops uint8) wire.Packet {
		p := base(wire.OpSprayAck)
		p.Ack = wire.Ack{CumPSN: 10, AckedPSN: 9, SackBase: 10, SackWords: 1, INTHops: hops}
		p.INT = make([]byte, int(hops)*wire.HopLen)
		return p
	}
	cases := []struct {
		name   string
		frame  []byte
		expert string // a message the dissector must report
	}{
		{"payload byte flipped", func() []byte {
			f := enc(dataPkt(0, 0), []byte("payload!"))
			f[data+wire.DataHdrLen] ^= 1
			return f
		}(), "Bad ICRC"},
		{"data kind 9", func() []byte {
			f := enc(dataPkt(0, 0), []byte("payload!"))
			f[data+12] = 9
			return fixICRC(f)
		}(), "unknown kind 9"},
		{"data flag 0x02", func() []byte {
			f := enc(dataPkt(0, 0), []byte("payload!"))
			f[data+13] |= 2
			return fixICRC(f)
		}(), "unknown flags 0x02"},
		{"INT version 2", func() []byte {
			f := enc(dataPkt(4, 1), []byte("payload!"))
			f[data+wire.DataHdrLen] = 2 // masked in the ICRC
			return f
		}(), "INT version 2, want 1"},
		{"INT count above max", func() []byte {
			f := enc(dataPkt(2, 1), []byte("payload!"))
			f[data+wire.DataHdrLen+1] = 3
			return f
		}(), "INT hop count 3 above its 2 slots"},
		{"ACK without SACK words", func() []byte {
			f := enc(ackPkt(0), nil)
			f[data+33] = 0
			return fixICRC(f)
		}(), "0 SACK words, want 1-4"},
		{"ACK hop records cut short", func() []byte {
			f := enc(ackPkt(1), nil)
			f[data+34] = 3
			return fixICRC(f)
		}(), "echoed hop records needs 72 bytes, 24 left"},
		{"READ request with a payload", func() []byte {
			p := base(wire.OpSendOnly)
			f := enc(p, []byte("abcd"))
			f[bth] = byte(wire.OpReadRequest) // 16 RETH bytes missing; 4 payload bytes
			return fixICRC(f)
		}(), "RETH needs 16 bytes, 4 left"},
	}
	var frames [][]byte
	var ts []time.Duration
	var p wire.Packet
	for i, c := range cases {
		if err := wire.Decode(c.frame, &p); err == nil {
			t.Fatalf("%s: spray's codec accepts the frame", c.name)
		}
		frames, ts = append(frames, c.frame), append(ts, time.Duration(i))
	}
	// An opcode spray does not speak (UD SEND Only) goes to Wireshark.
	ud := fixICRC(enc(base(wire.OpSendOnly), make([]byte, 8)))
	ud[bth] = 0x64
	frames, ts = append(frames, ud), append(ts, time.Duration(len(frames)))

	path := filepath.Join(t.TempDir(), "bad.pcap")
	if err := os.WriteFile(path, writeCapture(t, frames, ts), 0o644); err != nil {
		t.Fatal(err)
	}
	out := strings.TrimRight(string(runTshark(t, bin, path, "-T", "fields", "-E", "separator=/t", "-E", "aggregator=|",
		"-e", "frame.protocols", "-e", "_ws.expert.severity", "-e", "_ws.expert.message", "-e", "spraywire.opcode")), "\n")
	lines := strings.Split(out, "\n")
	if len(lines) != len(frames) {
		t.Fatalf("tshark printed %d lines for %d frames:\n%s", len(lines), len(frames), out)
	}
	for i, c := range cases {
		v := strings.Split(lines[i], "\t")
		if len(v) != 4 || !strings.HasSuffix(v[0], ":spraywire") {
			t.Errorf("%s: tshark says %q", c.name, lines[i])
			continue
		}
		msgs, sevs := strings.Split(v[2], "|"), strings.Split(v[1], "|")
		found := false
		for j, m := range msgs {
			if strings.Contains(m, c.expert) && j < len(sevs) {
				n, _ := strconv.ParseUint(sevs[j], 0, 32)
				found = n == severityError
			}
		}
		if !found {
			t.Errorf("%s: expert infos %q (severities %s), want an error containing %q", c.name, v[2], v[1], c.expert)
		}
	}
	// The dissector is listed in frame.protocols (it was called), but it
	// adds no field: Wireshark's InfiniBand dissector decodes the frame.
	if v := strings.Split(lines[len(lines)-1], "\t"); len(v) != 4 || !strings.Contains(v[0], ":infiniband") || v[3] != "" {
		t.Errorf("UD SEND Only: tshark says %q, want Wireshark's InfiniBand dissector and no spraywire field", lines[len(lines)-1])
	}
}

// TestDissectorClassicToInfiniband: with the preference
// classic_to_infiniband, Wireshark's InfiniBand dissector decodes the
// classic opcodes and the CNP, and the dissector keeps spray's own.
func TestDissectorClassicToInfiniband(t *testing.T) {
	bin := tshark(t)
	path := filepath.Join("testdata", capOpcodes)
	recs, err := pcap.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := strings.TrimRight(string(runTshark(t, bin, path, "-o", "spraywire.classic_to_infiniband:TRUE",
		"-T", "fields", "-E", "separator=/t", "-e", "frame.protocols", "-e", "spraywire.opcode", "-e", "infiniband.bth.opcode")), "\n")
	lines := strings.Split(out, "\n")
	if len(lines) != len(recs) {
		t.Fatalf("tshark printed %d lines for %d frames", len(lines), len(recs))
	}
	var p wire.Packet
	ib := 0
	for i, line := range lines {
		if err := wire.Decode(recs[i].Data, &p); err != nil {
			t.Fatal(err)
		}
		v := strings.Split(line, "\t")
		if len(v) != 3 {
			t.Fatalf("frame %d: tshark says %q", i+1, line)
		}
		own := p.BTH.Opcode >= wire.OpSprayData // spray's own range, 0xE0-0xFF
		if own && (v[1] == "" || v[2] != "") || !own && (v[1] != "" || !strings.Contains(v[0], ":infiniband")) {
			t.Errorf("frame %d (%v): tshark says %q", i+1, p.BTH.Opcode, line)
		}
		if !own {
			ib++
		}
	}
	if ib == 0 {
		t.Fatal("no classic frame in the capture")
	}
}
