package main

import (
	"flag"
	"fmt"
	"net/netip"

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
