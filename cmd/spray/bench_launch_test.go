package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
)

// buildSpray builds the spray binary into a temporary directory.
func buildSpray(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "spray")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

var launchArgs = []string{"bench", "alltoall", "-b", "8", "-e", "8K", "-f", "32", "-w", "1", "-n", "3", "--timeout", "2m"}

// runRanks starts n processes of bin with launchArgs and the environment
// env(rank) added, and returns rank 0's output.
func runRanks(t *testing.T, bin string, n int, env func(rank int) []string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	outs := make([]bytes.Buffer, n)
	errs := make([]bytes.Buffer, n)
	fails := make([]error, n)
	for r := range n {
		cmd := exec.CommandContext(ctx, bin, launchArgs...)
		cmd.Env = append(os.Environ(), env(r)...)
		cmd.Stdout, cmd.Stderr = &outs[r], &errs[r]
		wg.Go(func() { fails[r] = cmd.Run() })
	}
	wg.Wait()
	for r, err := range fails {
		if err != nil {
			t.Fatalf("rank %d: %v\n%s", r, err, errs[r].String())
		}
	}
	for r := 1; r < n; r++ {
		if outs[r].Len() != 0 {
			t.Fatalf("rank %d printed %q; only rank 0 should", r, outs[r].String())
		}
	}
	return outs[0].String()
}

// checkTable checks the sweep of launchArgs: 8, 256 and 8K bytes.
func checkTable(t *testing.T, out string, world int) {
	t.Helper()
	rows := parseBenchTable(t, out)
	// Sizes are rounded to a whole number of elements per rank.
	if len(rows) != 3 || rows[0].bytes > 8*int64(world) || rows[2].bytes > 8<<10 || rows[2].bytes < 8<<10-4*int64(world) {
		t.Fatalf("rows %+v\n%s", rows, out)
	}
	for _, r := range rows {
		if r.wrong != "0" {
			t.Fatalf("row %+v: wrong results\n%s", r, out)
		}
	}
}

// TestBenchLauncherEnv runs three ranks of spray bench with nothing but
// the variables srun and torchrun set: each finds its rank, the world size
// and rank 0's address, and rank 0 prints a table with no wrong result.
func TestBenchLauncherEnv(t *testing.T) {
	testutil.SkipIfShort(t, "builds the binary")
	bin := buildSpray(t)
	const n = 3
	// Rank 0 at 127.b.c.1 and rank r at 127.b.c.1+r, a loopback network
	// moved by the process ID: another run at once binds elsewhere, so
	// any port serves, with no look for a free one that another process
	// could take before rank 0 listens.
	b, c := testutil.LoopbackNet(testutil.Rand(t))
	host := fmt.Sprintf("127.%d.%d.1", b, c)
	const port = 18516
	t.Run("srun", func(t *testing.T) {
		out := runRanks(t, bin, n, func(r int) []string {
			return []string{"SLURM_PROCID=" + strconv.Itoa(r), "SLURM_NTASKS=" + strconv.Itoa(n),
				"SLURM_JOB_NODELIST=" + host, "SLURM_STEP_RESV_PORTS=" + strconv.Itoa(port) + "-" + strconv.Itoa(port+3)}
		})
		checkTable(t, out, n)
	})
	t.Run("torchrun", func(t *testing.T) {
		out := runRanks(t, bin, n, func(r int) []string {
			return []string{"RANK=" + strconv.Itoa(r), "WORLD_SIZE=" + strconv.Itoa(n),
				"MASTER_ADDR=" + host, "MASTER_PORT=" + strconv.Itoa(port-1), "LOCAL_RANK=" + strconv.Itoa(r)}
		})
		checkTable(t, out, n)
	})
}

// TestBenchLauncherErrors: a half-set launcher environment is an error
// that names the missing variable, unless the flags say everything.
func TestBenchLauncherErrors(t *testing.T) {
	t.Setenv("SLURM_PROCID", "1")
	var stdout, stderr bytes.Buffer
	err := benchMain([]string{"alltoall", "-b", "8", "-e", "8"}, &stdout, &stderr, -1)
	if err == nil || !strings.Contains(err.Error(), "SLURM_NTASKS") {
		t.Fatalf("rank without world size: %v, want an error naming SLURM_NTASKS", err)
	}
	// The flags win: the environment is not read.
	boot := "127.0.0.1:0" // a world of one: the kernel picks the port, nobody dials it
	out, _ := runBenchCLI(t, "alltoall", "-b", "8", "-e", "8", "-w", "0", "-n", "1", "--transport", "tcp",
		"--rank", "0", "--world", "1", "--bootstrap", boot)
	if len(parseBenchTable(t, out)) != 1 {
		t.Fatalf("output:\n%s", out)
	}
}

// TestBenchMpirun runs spray bench alltoall under Open MPI's mpirun with
// four ranks over UDP on loopback. It needs openmpi-bin. The ranks take
// rank, world and rank 0's host (127.0.0.1 on one node) from mpirun's
// environment, as a user's mpirun does; the port is the kernel's choice,
// handed on through --bootstrap-file, so that no run at once can take it
// between a look and rank 0's listen. Rank 0 removes the file once the
// world has joined.
func TestBenchMpirun(t *testing.T) {
	testutil.SkipIfShort(t, "builds the binary")
	mpirun := testutil.SkipIfMissingTool(t, "mpirun", "openmpi-bin")
	bin := buildSpray(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	boot := filepath.Join(t.TempDir(), "bootstrap")
	args := []string{"--oversubscribe", "-np", "4", bin}
	if os.Geteuid() == 0 {
		args = append([]string{"--allow-run-as-root"}, args...)
	}
	args = append(append(args, launchArgs[:len(launchArgs)-2]...), "--bootstrap-file", boot)
	cmd := exec.CommandContext(ctx, mpirun, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("mpirun: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	t.Logf("%s", stdout.String())
	checkTable(t, stdout.String(), 4)
	if _, err := os.Stat(boot); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("--bootstrap-file %s left behind (stat: %v)", boot, err)
	}
}

// TestBenchBootstrapFileExists: rank 0 refuses a --bootstrap-file that
// exists, whose address could be a dead earlier run's, with an error that
// names it, at once rather than after --join-timeout.
func TestBenchBootstrapFileExists(t *testing.T) {
	boot := filepath.Join(t.TempDir(), "bootstrap")
	if err := os.WriteFile(boot, []byte("127.0.0.1:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err := benchMain([]string{"alltoall", "-b", "8", "-e", "8", "--transport", "tcp", "--rank", "0", "--world", "2",
		"--bootstrap", "127.0.0.1:0", "--bootstrap-file", boot, "--join-timeout", "2m"}, &stdout, &stderr, -1)
	if err == nil || !strings.Contains(err.Error(), boot) || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("err %v: want one saying that %s exists", err, boot)
	}
}
