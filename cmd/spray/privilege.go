package main

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sprayfabric/spray/bench"
	"github.com/sprayfabric/spray/testbed"
)

// linkPrivilege returns an error naming the capabilities that a link of
// kind needs and the process lacks, before anything is opened: AF_XDP
// needs CAP_NET_ADMIN (attach), CAP_NET_RAW (the socket), CAP_BPF
// (load; CAP_SYS_ADMIN on kernels before 5.8) and CAP_IPC_LOCK (the UMEM,
// beyond RLIMIT_MEMLOCK), AF_PACKET CAP_NET_RAW; udp and tcp need
// nothing. Otherwise the first failing call ("operation not permitted",
// or a hint at RLIMIT_MEMLOCK) blames the wrong thing
// (TestLinkPrivilegeNamesCaps).
func linkPrivilege(cmd, kind string) error {
	var need []testbed.Cap
	switch kind {
	case bench.KindXDP:
		need = []testbed.Cap{{Num: unix.CAP_NET_ADMIN, Name: "CAP_NET_ADMIN"}, {Num: unix.CAP_NET_RAW, Name: "CAP_NET_RAW"},
			{Num: unix.CAP_IPC_LOCK, Name: "CAP_IPC_LOCK"}}
		if len(testbed.MissingCaps(testbed.Cap{Num: unix.CAP_SYS_ADMIN, Name: "CAP_SYS_ADMIN"})) > 0 {
			need = append(need, testbed.Cap{Num: unix.CAP_BPF, Name: "CAP_BPF"})
		}
	case bench.KindRaw:
		need = []testbed.Cap{{Num: unix.CAP_NET_RAW, Name: "CAP_NET_RAW"}}
	default:
		return nil
	}
	missing := testbed.MissingCaps(need...)
	if len(missing) == 0 {
		return nil
	}
	how := "run it as root (with sudo if you are not)"
	if os.Geteuid() == 0 {
		how = "give the container those capabilities (--cap-add)"
	}
	return fmt.Errorf("%s: --link %s needs %s, which this process (uid %d) lacks: %s, or use --link udp, which needs no privilege",
		cmd, kind, strings.Join(missing, ", "), os.Geteuid(), how)
}
