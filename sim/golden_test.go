package sim

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"testing"
)

// goldenRun is one fixed-seed run whose rows are hashed.
type goldenRun struct {
	name, topo, work string
	profiles         []string
	scenarios        []string
	queues           int
	digest           string
}

// rowDigest hashes what a run's rows say of its behaviour: every flow's
// completion time in flow order, the events run, the fabric's drops,
// pauses and per-spine bytes, the transports' counters and the packet
// buffers. Not the wall time, nor metrics a report derives from these.
func rowDigest(rows []Row) string {
	h := sha256.New()
	var b [8]byte
	put := func(v uint64) {
		binary.LittleEndian.PutUint64(b[:], v)
		h.Write(b[:])
	}
	for _, r := range rows {
		h.Write([]byte(r.Scenario + "/" + r.Profile + "/" + r.Err))
		put(uint64(r.Done))
		for _, s := range r.Samples {
			put(uint64(s))
		}
		put(r.Events)
		put(uint64(r.PacketBuffers))
		put(uint64(r.Simulated))
		put(r.Drops.Total())
		put(r.Drops.Queue)
		put(r.PauseFrames)
		put(uint64(r.PausedTime))
		put(r.DataPackets)
		put(r.Retransmits)
		put(r.ECNMarks)
		put(r.Trimmed)
		for _, s := range r.SpineBytes {
			put(s)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestRunGolden runs fixed-seed comparisons that go through every path
// of the event loop and the fabric (PFC, loss, a failed link, trimming,
// planes, oversubscription, shapers, NIC queues, EP-group MoE steps) and
// compares a digest of their rows (rowDigest) with the one recorded
// here: a change to the simulator's cost that leaves its results alone
// leaves these digests alone. A change that moves one needs its reason
// in its commit and the new digest here.
func TestRunGolden(t *testing.T) {
	runs := []goldenRun{{
		name: "leafspine", topo: "leafspine:4x4x4,rate=100gbit,buffer=300k", work: "alltoall:256k",
		profiles: []string{ProfileRoCE, ProfileSpray}, scenarios: []string{ScenarioLossless, ScenarioLoss01, ScenarioLinkFail},
		digest: "0a64d6f1f726081f6ca69f40e2c58c5d0c0b22ef9bbd23acf572caa6751babee",
	}, {
		name: "moe", topo: "fattree:4,rate=100gbit", work: "moe:ep=8,tokens=64,place=spread,grad=256k,iters=2,compute=50us",
		profiles: []string{ProfileSpray, ProfileRoCE}, scenarios: []string{ScenarioLossless},
		digest: "6bdcf25abb2aa6def8ac16c7e180bdff27e5f62f724965329b4d2f70b0984955",
	}, {
		name: "trim-planes", topo: "fattree:4,rate=100gbit,trim,oversub=2,planes=2,buffer=100k", work: "alltoall:256k",
		profiles: []string{ProfileSpray}, scenarios: []string{ScenarioLossless, ScenarioLoss001},
		digest: "e03f8932ada9d98766c6c6027c3266e79af44425424dd6f5fa7874f5eae0b187",
	}, {
		name: "shaper-queues", topo: "leafspine:4x2x2,rate=25gbit,shaper=tbf", work: "incast:256k",
		profiles: []string{ProfileSpray, ProfileRoCE}, scenarios: []string{ScenarioLossless}, queues: 2,
		digest: "e28f9f259c3062799305a0b19cc39e27415aac9bee62fbbfafd0a5a7a64e8c15",
	}}
	for _, g := range runs {
		t.Run(g.name, func(t *testing.T) {
			tp := mustTopo(t, g.topo)
			w, err := ParseWorkloadOn(g.work, tp, 1)
			if err != nil {
				t.Fatal(err)
			}
			res, err := Run(Config{Topo: tp, Workload: w, Seed: 1, Profiles: g.profiles, Scenarios: g.scenarios, Queues: g.queues})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res.Rows {
				t.Logf("%s/%s: %d events, drops %+v, %d pauses, %d trimmed, %d retransmits", r.Scenario, r.Profile, r.Events, r.Drops, r.PauseFrames, r.Trimmed, r.Retransmits)
				if r.Done != r.Flows {
					t.Errorf("%s/%s: %d of %d flows done: %s", r.Scenario, r.Profile, r.Done, r.Flows, r.Err)
				}
			}
			if d := rowDigest(res.Rows); d != g.digest {
				t.Errorf("digest %s, want %s", d, g.digest)
			}
		})
	}
}

// TestParallelRowsIdentical: runs made two at once give the rows, in
// order, and the JSON of runs made one at a time, byte for byte.
func TestParallelRowsIdentical(t *testing.T) {
	tp := mustTopo(t, "leafspine:4x2x2,rate=100gbit,buffer=200k")
	w := mustWork(t, "alltoall:128k", tp.Hosts())
	run := func(par int) ([]byte, Result) {
		res, err := Run(Config{Topo: tp, Workload: w, Seed: 3, Parallel: par,
			Scenarios: []string{ScenarioLossless, ScenarioLoss01, ScenarioLinkFail}})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := WriteJSON(&b, res); err != nil {
			t.Fatal(err)
		}
		return b.Bytes(), res
	}
	one, r1 := run(1)
	two, r2 := run(2)
	if len(r1.Rows) != 6 || len(r2.Rows) != 6 {
		t.Fatalf("%d and %d rows, want 6", len(r1.Rows), len(r2.Rows))
	}
	if !bytes.Equal(one, two) {
		t.Fatalf("two runs at once changed the JSON:\n%s\n%s", one, two)
	}
	if a, b := rowDigest(r1.Rows), rowDigest(r2.Rows); a != b {
		t.Fatalf("two runs at once changed the rows: digest %s, one at a time %s", b, a)
	}
}

// TestParallelRunsBounded: Run makes no more runs at once than asked,
// than there are, or than the memory budget holds.
func TestParallelRunsBounded(t *testing.T) {
	fp := Footprint{Total: 1 << 30}
	for _, c := range []struct {
		par, runs int
		mem       int64
		want      int
	}{{0, 6, 8 << 30, 1}, {2, 6, 8 << 30, 2}, {8, 6, 8 << 30, 6}, {4, 6, 3 << 30, 3}, {4, 6, 1 << 29, 1}} {
		if got := parallelRuns(Config{Parallel: c.par, Memory: c.mem}, fp, c.runs); got != c.want {
			t.Errorf("parallel %d, %d runs, memory %d: %d at once, want %d", c.par, c.runs, c.mem, got, c.want)
		}
	}
}
