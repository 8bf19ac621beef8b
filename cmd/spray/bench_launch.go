package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sprayfabric/spray/collective"
)

// fromLauncher fills --rank, --world and --bootstrap from the environment
// of mpirun, srun or torchrun (collective.LaunchFromEnv) where the flags
// were not given: flags win over the environment.
func (f *benchFlags) fromLauncher(fs *flag.FlagSet, getenv func(string) string) error {
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	if f.testbed != "" || given["rank"] && given["world"] && given["bootstrap"] {
		return nil
	}
	l, ok, err := collective.LaunchFromEnv(getenv)
	if !ok {
		return nil
	}
	if err != nil {
		return fmt.Errorf("bench: launcher environment: %w (or pass --rank, --world and --bootstrap)", err)
	}
	f.launched = true
	if !given["rank"] {
		f.rank = l.Rank
	}
	if !given["world"] {
		f.world = l.Size
	}
	if !given["bootstrap"] {
		f.bootstrap = l.Addr
	}
	return nil
}

// loopbackRank is the address of rank on a loopback bootstrap: the
// bootstrap address plus the rank (127.0.0.1, 127.0.0.2, ... for a
// bootstrap at 127.0.0.1), so that ranks on one host get links of their
// own. ok is false beyond 127.255.255.254.
func loopbackRank(boot netip.Addr, rank int) (netip.Addr, bool) {
	a := boot.As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v += uint32(rank)
	ip := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	return ip, ip.IsLoopback() && byte(v) != 255 && rank >= 0
}

// bootstrapByFile sets cfg.Addr, and on rank 0 cfg.Listener, from
// --bootstrap-file. Rank 0 listens at the bootstrap host on a port the
// kernel picks, so that no other process can take it between a choice and
// the listen, and publishes HOST:PORT whole (a link of a finished file,
// which fails if the file exists: a stale address is never read); the
// other ranks wait for the file within ctx. done, on rank 0, removes the
// file. TestBenchMpirun and TestBenchBootstrapFileExists guard it.
func (f *benchFlags) bootstrapByFile(ctx context.Context, cfg *collective.BootstrapConfig) (done func(), err error) {
	path := f.bootstrapFile
	if f.rank != 0 {
		addr, err := waitBootstrapFile(ctx, path)
		if err != nil {
			return nil, err
		}
		cfg.Addr = addr
		return func() {}, nil
	}
	host, _, err := net.SplitHostPort(f.bootstrap)
	if err != nil {
		return nil, fmt.Errorf("bench: --bootstrap %q: %w", f.bootstrap, err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("bench: bootstrap listen: %w", err)
	}
	addr := ln.Addr().String()
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err == nil {
		_, err = tmp.WriteString(addr + "\n")
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Link(tmp.Name(), path)
		}
		os.Remove(tmp.Name())
	}
	if err != nil {
		ln.Close()
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("bench: --bootstrap-file %s exists (from an earlier run?): remove it, rank 0 writes it", path)
		}
		return nil, fmt.Errorf("bench: --bootstrap-file: %w", err)
	}
	cfg.Addr, cfg.Listener = addr, ln
	return func() { os.Remove(path) }, nil
}

// waitBootstrapFile polls path until it holds rank 0's HOST:PORT, or ctx
// ends.
func waitBootstrapFile(ctx context.Context, path string) (string, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			addr := strings.TrimSpace(string(b))
			if _, _, err := net.SplitHostPort(addr); err != nil {
				return "", fmt.Errorf("bench: --bootstrap-file %s: %q: want HOST:PORT", path, addr)
			}
			return addr, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("bench: --bootstrap-file: %w", err)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("bench: rank 0 never wrote --bootstrap-file %s: %w", path, ctx.Err())
		case <-tick.C:
		}
	}
}
