package collective

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// DefaultBootstrapPort is rank 0's bootstrap port when a launcher gives a
// host and no port (Open MPI on one node); spray perf's control port is
// 18515 and a testbed's bootstrap 18516.
const DefaultBootstrapPort = 18517

// Launch is what a launcher told this process: its place in the world and
// where rank 0's bootstrap listens (BootstrapConfig's fields).
type Launch struct {
	Rank, Size int
	// Addr is rank 0's bootstrap address, host:port.
	Addr string
	// Launcher names the source: "mpirun", "srun" or "torchrun".
	Launcher string
}

// Config returns the BootstrapConfig of l.
func (l Launch) Config() BootstrapConfig {
	return BootstrapConfig{Rank: l.Rank, Size: l.Size, Addr: l.Addr}
}

// LaunchFromEnv reads rank, world size and rank 0's bootstrap address from
// the environment the common launchers give their processes; getenv is
// os.Getenv or a test's map. It returns ok false when no launcher's
// variables are set, and an error wrapping ErrInvalid when they are set
// only in part or do not parse. The first launcher whose variables are
// present wins, innermost first:
//
//   - torchrun: RANK, WORLD_SIZE; the bootstrap at MASTER_ADDR, port
//     MASTER_PORT+1 (torchrun's own store holds MASTER_PORT).
//   - Open MPI's mpirun: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE. mpirun
//     gives no rendezvous address: SPRAY_BOOTSTRAP (pass it with
//     mpirun -x SPRAY_BOOTSTRAP=HOST:PORT, HOST being rank 0's host) or,
//     when every rank runs on one node (OMPI_COMM_WORLD_LOCAL_SIZE equals
//     the world size), 127.0.0.1:DefaultBootstrapPort.
//   - Slurm's srun: SLURM_PROCID, SLURM_NTASKS (or SLURM_NPROCS); the
//     bootstrap on the first host of SLURM_STEP_NODELIST (else
//     SLURM_JOB_NODELIST, SLURM_NODELIST), where task 0 runs, its bracket
//     ranges expanded ("gpu[07-09,12]" starts with gpu07), at the first
//     port of SLURM_STEP_RESV_PORTS (srun --resv-ports) or else port
//     20000 + (SLURM_JOB_ID*64 + SLURM_STEP_ID) mod 10000, so that jobs
//     sharing a node do not collide.
//
// SPRAY_BOOTSTRAP=HOST:PORT, when set, replaces the address of any of them.
func LaunchFromEnv(getenv func(string) string) (Launch, bool, error) {
	set := func(k string) bool { return getenv(k) != "" }
	var l Launch
	var err error
	switch {
	case set("RANK") || set("WORLD_SIZE"):
		l, err = torchrun(getenv)
	case set("OMPI_COMM_WORLD_RANK") || set("OMPI_COMM_WORLD_SIZE"):
		l, err = mpirun(getenv)
	case set("SLURM_PROCID"):
		l, err = srun(getenv)
	default:
		return Launch{}, false, nil
	}
	if err != nil {
		return Launch{}, true, err
	}
	if a := getenv("SPRAY_BOOTSTRAP"); a != "" {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return Launch{}, true, fmt.Errorf("%w: SPRAY_BOOTSTRAP %q: want HOST:PORT", ErrInvalid, a)
		}
		l.Addr = a
	}
	return l, true, nil
}

// rankSize parses a rank and a world size from two variables, both
// required once either is set.
func rankSize(getenv func(string) string, rankVar, sizeVar string) (int, int, error) {
	rs, ss := getenv(rankVar), getenv(sizeVar)
	switch {
	case rs == "":
		return 0, 0, fmt.Errorf("%w: %s is set but %s is not", ErrInvalid, sizeVar, rankVar)
	case ss == "":
		return 0, 0, fmt.Errorf("%w: %s is set but %s is not", ErrInvalid, rankVar, sizeVar)
	}
	rank, err := strconv.Atoi(rs)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %s=%q is not a number", ErrInvalid, rankVar, rs)
	}
	size, err := strconv.Atoi(ss)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %s=%q is not a number", ErrInvalid, sizeVar, ss)
	}
	if size < 1 || size > MaxWorld || rank < 0 || rank >= size {
		return 0, 0, fmt.Errorf("%w: %s=%d of %s=%d (want 0 <= rank < size <= %d)", ErrInvalid, rankVar, rank, sizeVar, size, MaxWorld)
	}
	return rank, size, nil
}

func torchrun(getenv func(string) string) (Launch, error) {
	rank, size, err := rankSize(getenv, "RANK", "WORLD_SIZE")
	if err != nil {
		return Launch{}, err
	}
	host, ps := getenv("MASTER_ADDR"), getenv("MASTER_PORT")
	if host == "" || ps == "" {
		return Launch{}, fmt.Errorf("%w: RANK and WORLD_SIZE are set but MASTER_ADDR or MASTER_PORT is not", ErrInvalid)
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || port == 0 || port == 65535 {
		return Launch{}, fmt.Errorf("%w: MASTER_PORT=%q (want 1..65534)", ErrInvalid, ps)
	}
	return Launch{Rank: rank, Size: size, Addr: net.JoinHostPort(host, strconv.Itoa(int(port)+1)), Launcher: "torchrun"}, nil
}

func mpirun(getenv func(string) string) (Launch, error) {
	rank, size, err := rankSize(getenv, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")
	if err != nil {
		return Launch{}, err
	}
	l := Launch{Rank: rank, Size: size, Launcher: "mpirun"}
	if getenv("SPRAY_BOOTSTRAP") != "" {
		return l, nil // the caller fills Addr
	}
	if ls := getenv("OMPI_COMM_WORLD_LOCAL_SIZE"); ls == strconv.Itoa(size) {
		l.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(DefaultBootstrapPort))
		return l, nil
	}
	return Launch{}, fmt.Errorf("%w: mpirun gives no rendezvous address for ranks on several hosts: "+
		"pass -x SPRAY_BOOTSTRAP=HOST:PORT with rank 0's host", ErrInvalid)
}

func srun(getenv func(string) string) (Launch, error) {
	sizeVar := "SLURM_NTASKS"
	if getenv(sizeVar) == "" && getenv("SLURM_NPROCS") != "" {
		sizeVar = "SLURM_NPROCS"
	}
	rank, size, err := rankSize(getenv, "SLURM_PROCID", sizeVar)
	if err != nil {
		return Launch{}, err
	}
	l := Launch{Rank: rank, Size: size, Launcher: "srun"}
	if getenv("SPRAY_BOOTSTRAP") != "" {
		return l, nil
	}
	var list, listVar string
	for _, v := range []string{"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"} {
		if list = getenv(v); list != "" {
			listVar = v
			break
		}
	}
	if list == "" {
		return Launch{}, fmt.Errorf("%w: SLURM_PROCID is set but no SLURM_JOB_NODELIST", ErrInvalid)
	}
	host, err := FirstHost(list)
	if err != nil {
		return Launch{}, fmt.Errorf("%w: %s: %w", ErrInvalid, listVar, err)
	}
	port := 0
	if rp := getenv("SLURM_STEP_RESV_PORTS"); rp != "" {
		first, _, _ := strings.Cut(strings.Split(rp, ",")[0], "-")
		p, err := strconv.ParseUint(first, 10, 16)
		if err != nil || p == 0 {
			return Launch{}, fmt.Errorf("%w: SLURM_STEP_RESV_PORTS=%q", ErrInvalid, rp)
		}
		port = int(p)
	} else {
		job, err1 := strconv.ParseUint(getenv("SLURM_JOB_ID"), 10, 64)
		step, err2 := strconv.ParseUint(getenv("SLURM_STEP_ID"), 10, 64)
		if err1 != nil {
			job = 0
		}
		if err2 != nil {
			step = 0
		}
		port = 20000 + int((job*64+step)%10000)
	}
	l.Addr = net.JoinHostPort(host, strconv.Itoa(port))
	return l, nil
}

// FirstHost returns the first host of a Slurm host list such as
// "gpu[07-09,12],cpu1" or "rack[1-2]-node[01-04]" (rack1-node01): the
// list's first entry with every bracket replaced by its first number, zero
// padding kept.
func FirstHost(list string) (string, error) {
	// The first entry ends at the first comma outside brackets.
	depth, end := 0, len(list)
	for i, c := range list {
		switch c {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 && end == len(list) {
				end = i
			}
		}
		if depth < 0 || depth > 1 {
			return "", fmt.Errorf("unbalanced brackets in host list %q", list)
		}
	}
	if depth != 0 {
		return "", fmt.Errorf("unbalanced brackets in host list %q", list)
	}
	entry := strings.TrimSpace(list[:end])
	var b strings.Builder
	for entry != "" {
		open := strings.IndexByte(entry, '[')
		if open < 0 {
			b.WriteString(entry)
			break
		}
		b.WriteString(entry[:open])
		shut := strings.IndexByte(entry, ']')
		rng := entry[open+1 : shut]
		first, _, _ := strings.Cut(strings.Split(rng, ",")[0], "-")
		if first == "" || strings.Trim(first, "0123456789") != "" {
			return "", fmt.Errorf("bad range [%s] in host list %q", rng, list)
		}
		b.WriteString(first)
		entry = entry[shut+1:]
	}
	if b.Len() == 0 {
		return "", fmt.Errorf("empty host list %q", list)
	}
	return b.String(), nil
}
