package collective

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

func envOf(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestLaunchFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  func(string) string
		want Launch
	}{
		{"torchrun", envOf("RANK", "3", "WORLD_SIZE", "8", "MASTER_ADDR", "10.1.0.5", "MASTER_PORT", "29500", "LOCAL_RANK", "3"),
			Launch{Rank: 3, Size: 8, Addr: "10.1.0.5:29501", Launcher: "torchrun"}},
		{"torchrun under slurm", envOf("RANK", "5", "WORLD_SIZE", "16", "MASTER_ADDR", "node1", "MASTER_PORT", "29500", "SLURM_PROCID", "1", "SLURM_NTASKS", "2", "SLURM_JOB_NODELIST", "node[1-2]"),
			Launch{Rank: 5, Size: 16, Addr: "node1:29501", Launcher: "torchrun"}},
		{"srun", envOf("SLURM_PROCID", "2", "SLURM_NTASKS", "4", "SLURM_JOB_NODELIST", "gpu[07-09,12],cpu1", "SLURM_JOB_ID", "4242", "SLURM_STEP_ID", "1"),
			Launch{Rank: 2, Size: 4, Addr: "gpu07:" + strconv.Itoa(20000+(4242*64+1)%10000), Launcher: "srun"}},
		{"srun step list and reserved ports", envOf("SLURM_PROCID", "0", "SLURM_NPROCS", "2", "SLURM_STEP_NODELIST", "rack[2-3]-n[001-004]", "SLURM_JOB_NODELIST", "x[1-9]", "SLURM_STEP_RESV_PORTS", "12000-12003"),
			Launch{Rank: 0, Size: 2, Addr: "rack2-n001:12000", Launcher: "srun"}},
		{"mpirun one node", envOf("OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "4", "OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
			Launch{Rank: 1, Size: 4, Addr: "127.0.0.1:18517", Launcher: "mpirun"}},
		{"mpirun with SPRAY_BOOTSTRAP", envOf("OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "4", "OMPI_COMM_WORLD_LOCAL_SIZE", "2", "SPRAY_BOOTSTRAP", "hostA:7000"),
			Launch{Rank: 0, Size: 4, Addr: "hostA:7000", Launcher: "mpirun"}},
		{"SPRAY_BOOTSTRAP wins", envOf("RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "a", "MASTER_PORT", "1", "SPRAY_BOOTSTRAP", "b:2"),
			Launch{Rank: 0, Size: 2, Addr: "b:2", Launcher: "torchrun"}},
	} {
		got, ok, err := LaunchFromEnv(tc.env)
		if err != nil || !ok || got != tc.want {
			t.Errorf("%s: %+v, %v, %v; want %+v", tc.name, got, ok, err, tc.want)
		}
	}
	if _, ok, err := LaunchFromEnv(envOf("HOME", "/root")); ok || err != nil {
		t.Errorf("no launcher: ok %v, %v", ok, err)
	}
}

// TestLaunchHalfSet: a launcher environment set only in part, or with
// values that do not parse, is an error naming the variable.
func TestLaunchHalfSet(t *testing.T) {
	for _, tc := range []struct {
		env  func(string) string
		want string
	}{
		{envOf("RANK", "1"), "WORLD_SIZE"},
		{envOf("WORLD_SIZE", "4"), "RANK"},
		{envOf("RANK", "1", "WORLD_SIZE", "4"), "MASTER_ADDR"},
		{envOf("RANK", "1", "WORLD_SIZE", "4", "MASTER_ADDR", "a", "MASTER_PORT", "x"), "MASTER_PORT"},
		{envOf("RANK", "4", "WORLD_SIZE", "4", "MASTER_ADDR", "a", "MASTER_PORT", "1"), "RANK=4"},
		{envOf("RANK", "-1", "WORLD_SIZE", "4", "MASTER_ADDR", "a", "MASTER_PORT", "1"), "RANK=-1"},
		{envOf("OMPI_COMM_WORLD_RANK", "1"), "OMPI_COMM_WORLD_SIZE"},
		{envOf("OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "4", "OMPI_COMM_WORLD_LOCAL_SIZE", "2"), "SPRAY_BOOTSTRAP"},
		{envOf("OMPI_COMM_WORLD_RANK", "one", "OMPI_COMM_WORLD_SIZE", "4"), "not a number"},
		{envOf("SLURM_PROCID", "0"), "SLURM_NTASKS"},
		{envOf("SLURM_PROCID", "0", "SLURM_NTASKS", "2"), "NODELIST"},
		{envOf("SLURM_PROCID", "0", "SLURM_NTASKS", "2", "SLURM_JOB_NODELIST", "n[1-2"), "brackets"},
		{envOf("SLURM_PROCID", "0", "SLURM_NTASKS", "2", "SLURM_JOB_NODELIST", "n[a-b]"), "bad range"},
		{envOf("RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "a", "MASTER_PORT", "1", "SPRAY_BOOTSTRAP", "nohost"), "SPRAY_BOOTSTRAP"},
	} {
		_, ok, err := LaunchFromEnv(tc.env)
		if !ok || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("env %q: ok %v, %v; want ErrInvalid naming %s", tc.want, ok, err, tc.want)
		}
	}
}

func TestFirstHost(t *testing.T) {
	for in, want := range map[string]string{
		"node1":                  "node1",
		"node[01-04]":            "node01",
		"a[3,1-2],b[1-9]":        "a3",
		"rack[1-2]-node[08-10]x": "rack1-node08x",
		" gpu[007] , x":          "gpu007",
	} {
		if got, err := FirstHost(in); err != nil || got != want {
			t.Errorf("FirstHost(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "[", "a]", "a[[1]]", "a[]", "a[-2]", ",b"} {
		if got, err := FirstHost(in); err == nil {
			t.Errorf("FirstHost(%q) = %q, want an error", in, got)
		}
	}
}

// FuzzFirstHost: any input gives a host or an error, never a panic, and a
// host never holds brackets or commas.
func FuzzFirstHost(f *testing.F) {
	for _, s := range []string{"node[01-04]", "a[3,1-2],b[1-9]", "rack[1-2]-node[08-10]x", "a]["} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := FirstHost(s)
		if err == nil && (h == "" || strings.ContainsAny(h, "[],")) {
			t.Fatalf("FirstHost(%q) = %q", s, h)
		}
	})
}
