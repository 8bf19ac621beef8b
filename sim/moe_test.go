package sim

import (
	"errors"
	"math/big"
	"slices"
	"strings"
	"testing"
)

// peers returns, for the first collective of w, the hosts each host
// sends to, sorted.
func peers(w Workload, phase int) map[int][]int {
	c := w.Collectives()[phase]
	m := map[int][]int{}
	for _, f := range w.Flows[c[0]:c[1]] {
		m[f.Src] = append(m[f.Src], f.Dst)
	}
	for k := range m {
		slices.Sort(m[k])
	}
	return m
}

// TestMoEPlacement: on fattree:4 (2 hosts an edge switch, 4 a pod) EP
// groups of 4 take consecutive hosts (leaf), one host of each of four
// edge switches (spread), or one host of each pod (pod).
func TestMoEPlacement(t *testing.T) {
	tp := mustTopo(t, "fattree:4")
	for _, c := range []struct {
		place string
		want  []int // host 0's dispatch peers
	}{
		{"leaf", []int{1, 2, 3}},
		{"spread", []int{2, 4, 6}},
		{"pod", []int{4, 8, 12}},
	} {
		w, err := ParseWorkloadOn("moe:ep=4,tokens=16,iters=1,place="+c.place, tp, 1)
		if err != nil {
			t.Fatal(err)
		}
		got := peers(w, 0)
		if !slices.Equal(got[0], c.want) {
			t.Errorf("place=%s: host 0 dispatches to %v, want %v", c.place, got[0], c.want)
		}
		if len(got) != 16 {
			t.Errorf("place=%s: %d hosts dispatch, want all 16", c.place, len(got))
		}
		for h, ps := range got {
			if len(ps) != 3 {
				t.Errorf("place=%s: host %d dispatches to %v, want 3 peers", c.place, h, ps)
			}
		}
	}
}

// TestMoESizes: every rank pair of a group exchanges the expected token
// copies of the model: 100 tokens, top-8 of 256 experts, 64 a rank (EP
// 4), hit with chance 1 - C(192,8)/C(256,8); dispatch at FP8 (7,392
// bytes a copy of hidden 7168) and combine at BF16 (14,336).
func TestMoESizes(t *testing.T) {
	w, err := ParseWorkload("moe:ep=4,tokens=100,iters=1", 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	miss, _ := new(big.Rat).SetFrac(new(big.Int).Binomial(192, 8), new(big.Int).Binomial(256, 8)).Float64()
	copies := int64(100*(1-miss) + 0.5)
	if copies < 50 || copies > 99 {
		t.Fatalf("hand count %d copies", copies)
	}
	cs := w.Collectives()
	if len(cs) != 2 || len(w.Phases) != 2 || w.Phases[0] != "dispatch" || w.Phases[1] != "combine" {
		t.Fatalf("collectives %v, phases %v", cs, w.Phases)
	}
	for i, f := range w.Flows {
		want := copies * 7392
		if i >= cs[0][1] {
			want = copies * 14336
		}
		if f.Size != want || f.Src/4 != f.Dst/4 {
			t.Fatalf("flow %d: %d->%d of %d bytes, want %d inside a group of 4", i, f.Src, f.Dst, f.Size, want)
		}
	}
	if len(w.Flows) != 2*2*4*3 {
		t.Errorf("%d flows, want 2 groups x 12 pairs, dispatch and combine", len(w.Flows))
	}
	w2, err := ParseWorkload("moe:ep=4,tokens=100,iters=1,hidden=1024,dispatch=1k,combine=3k", 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	if w2.Flows[0].Size != copies*1024 || w2.Flows[len(w2.Flows)-1].Size != copies*3072 {
		t.Errorf("dispatch=1k,combine=3k: sizes %d and %d, want %d and %d", w2.Flows[0].Size, w2.Flows[len(w2.Flows)-1].Size, copies*1024, copies*3072)
	}
}

// TestMoERandomRouting: drawn routing gives each pair at most its
// tokens, every rank at most tokens x min(topk, EP-1) copies out, the
// combine the transpose of the dispatch, the same flows for a seed and
// others for another seed.
func TestMoERandomRouting(t *testing.T) {
	spec := "moe:ep=8,tokens=50,topk=4,experts=32,iters=1,routing=random"
	w, err := ParseWorkload(spec, 8, 3)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]int64{}
	disp := map[[2]int]int64{}
	cs := w.Collectives()
	for _, f := range w.Flows[:cs[0][1]] {
		c := f.Size / 7392
		if c < 1 || c > 50 || f.Size%7392 != 0 {
			t.Fatalf("%d->%d: %d bytes", f.Src, f.Dst, f.Size)
		}
		out[f.Src] += c
		disp[[2]int{f.Src, f.Dst}] = c
	}
	sizes := map[int64]bool{}
	for h, c := range out {
		if c > 50*4 {
			t.Errorf("host %d sends %d copies, over 50 tokens x top-4", h, c)
		}
		sizes[c] = true
	}
	if len(sizes) < 2 {
		t.Errorf("every host sends %v copies: routing not drawn", sizes)
	}
	for _, f := range w.Flows[cs[1][0]:] {
		if got, want := f.Size, disp[[2]int{f.Dst, f.Src}]*14336; got != want {
			t.Errorf("combine %d->%d: %d bytes, want the %d of its dispatch back", f.Src, f.Dst, got, want)
		}
	}
	again, _ := ParseWorkload(spec, 8, 3)
	other, _ := ParseWorkload(spec, 8, 4)
	if !slices.Equal(w.Flows, again.Flows) {
		t.Error("the same seed drew other flows")
	}
	if slices.Equal(w.Flows, other.Flows) {
		t.Error("another seed drew the same flows")
	}
}

// TestMoEDataParallel: with grad, the ranks that hold the same experts
// in the job's groups (EP 2 on 8 hosts: hosts 0, 2, 4, 6 and 1, 3, 5,
// 7) reduce-scatter then all-gather grad/4 bytes around their ring, in
// three rounds each; jobs=2 keeps each job's flows in its own half.
func TestMoEDataParallel(t *testing.T) {
	w, err := ParseWorkload("moe:ep=2,tokens=10,grad=8k,iters=2", 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(w.Phases, []string{"dispatch", "combine", "reduce-scatter", "all-gather"}) || w.Iters != 8 {
		t.Fatalf("phases %v, %d collectives", w.Phases, w.Iters)
	}
	cs := w.Collectives()
	for _, ph := range []int{2, 3, 6, 7} {
		n := 0
		for _, f := range w.Flows[cs[ph][0]:cs[ph][1]] {
			n++
			if f.Size != 2048 || f.Dst != (f.Src+2)%8 {
				t.Errorf("collective %d: %d->%d of %d bytes, want 2048 to the next rank of the ring", ph, f.Src, f.Dst, f.Size)
			}
		}
		if n != 3*8 {
			t.Errorf("collective %d: %d flows, want 3 rounds of 8", ph, n)
		}
	}
	w2, err := ParseWorkload("moe:ep=2,tokens=10,grad=8k,iters=1,jobs=2", 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range w2.Flows {
		if f.Src/4 != f.Dst/4 {
			t.Errorf("jobs=2: flow %d->%d leaves its job", f.Src, f.Dst)
		}
	}
	if s, err := WorkloadShape("moe:ep=2,tokens=10,grad=8k,iters=2", 8); err != nil || s.Flows != int64(len(w.Flows)) {
		t.Errorf("shape %+v (%v), want %d flows", s, err, len(w.Flows))
	}
}

// TestMoEStepsRun: EP groups spread over the leaves with a data
// parallel reduction complete every step with their bytes intact, and
// each rank's compute lies in its step.
func TestMoEStepsRun(t *testing.T) {
	tp := mustTopo(t, "leafspine:2x4x2,rate=10gbit")
	w, err := ParseWorkloadOn("moe:ep=4,tokens=8,experts=16,grad=16k,place=spread,compute=20us,iters=2", tp, 1)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(Config{Topo: tp, Workload: w, Seed: 1, Verify: true, Profiles: []string{ProfileSpray}, Scenarios: []string{ScenarioLossless}})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Rows[0]
	if r.Err != "" || r.Done != r.Flows || len(r.Iterations) != 8 || len(r.Bounds) != 8 {
		t.Fatalf("%d of %d flows, %d collectives, %d bounds: %s", r.Done, r.Flows, len(r.Iterations), len(r.Bounds), r.Err)
	}
	st, err := RowSteps(r, w)
	if err != nil {
		t.Fatal(err)
	}
	if st.Step < 20000 || st.ComputeShare <= 0 || st.ComputeShare >= 1 {
		t.Errorf("step %v, compute share %v", st.Step, st.ComputeShare)
	}
}

// TestMoEModelErrors: the model's options are checked, and come without
// SIZE.
func TestMoEModelErrors(t *testing.T) {
	for _, bad := range []string{
		"moe:1M,ep=4",           // SIZE and the model
		"moe:ep=1",              // no group
		"moe:ep=3",              // 256 experts do not split over 3
		"moe:ep=4,topk=300",     // more than the experts
		"moe:ep=16,jobs=2",      // 32 ranks on 16 hosts
		"moe:ep=4,place=row",    // no such placement
		"moe:ep=4,routing=some", // no such routing
		"moe:ep=4,tokens=0",
		"moe:ep=4,grad=2", // under a byte per ring member
		"moe:ep=4,tokens=1000000,hidden=100000",
	} {
		_, err := ParseWorkload(bad, 16, 1)
		_, serr := WorkloadShape(bad, 16)
		if !errors.Is(err, ErrConfig) || serr == nil || err.Error() != serr.Error() {
			t.Errorf("%s: %v (shape: %v), want ErrConfig", bad, err, serr)
		}
		if err != nil && !strings.Contains(err.Error(), bad) {
			t.Errorf("%s: %v does not name the spec", bad, err)
		}
	}
}
