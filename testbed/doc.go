// Package testbed builds throw-away network topologies out of Linux network
// namespaces and veth pairs, for tests and benchmarks that need real kernel
// networking on one machine. NewPair makes the simplest: two hosts joined by
// one veth pair. NewLeafSpine makes a leaf-spine fabric (ParseLeafSpine
// reads "leafspine:HxLxS"): hosts, leaves and spines in namespaces of their
// own, Linux forwarding with multipath routes hashed on L4 (the UDP source
// port picks the spine), TBF egress shaping on every switch port so that the
// fabric is the bottleneck, per-port counters (Fabric.PortStats) and link
// failures (Fabric.SetLinkDown).
//
// Every testbed has a unique name prefix ("spt<pid%1000>-<n>-"), which names
// its namespaces (bind mounts under /run/netns, so `ip netns exec` works on
// them) and its interfaces. Its addresses live only inside its namespaces:
// nothing is added to the calling process's namespace, so nothing is ever
// routed outside. Close removes everything; a package-level registry also
// closes every open testbed when the process gets SIGINT or SIGTERM (then
// the signal is raised again, so the process still ends), and CloseAll does
// the same for a program or TestMain that is about to exit. What a killed
// or crashed process left behind is found through an owner file per testbed
// (/run/spray-testbed/<prefix>), which the process that made the testbed
// holds locked (flock) for the testbed's life: the kernel frees the lock
// when the process ends, however it ends and in whatever PID namespace it
// ran, so a free lock proves the testbed abandoned where a PID cannot.
// CleanupStale, which NewPair and NewLeafSpine run once per process,
// removes only those; Cleanup removes everything under a prefix, owner
// alive or not. Throwaways lists every throw-away testbed by its prefix,
// owner file or not, with whether its owner holds it and whose it is (the
// login user) (spray testbed list), and RemoveThrowaway removes one whose
// owner is gone (spray testbed down; --all only the caller's). A teardown
// that cannot remove something says so and keeps the owner file, including
// a namespace hidden by a mount over /run/netns made after it, or under a
// later bind of /run/netns onto itself, with the commands that remove it. Building anything first checks the capabilities it needs
// (CheckPrivilege), naming those missing.
//
// Persistent fabrics outlive the process that built them, for building,
// inspecting and breaking a fabric by hand (spray testbed up|status|fault|
// down). UpLeafSpine builds one by name, attaches the fabric programs and
// pins their maps and tcx links on a bpffs (PinRoot/<prefix>, mounting a
// bpffs on /sys/fs/bpf if none is there), and writes a state file
// (StateDir/<name>.json: config, namespaces, hosts, ports and their
// program port ids). OpenLeafSpine reopens it in another process, with
// its programs (Fabric.Programs) for faults, ECN and counters;
// Fabric.Status reports per-port utilization and counters,
// Fabric.LookupPort resolves "spine0:leaf1". Closing such a Fabric only
// releases handles; DownLeafSpine removes pins, links, namespaces and,
// only once none of them is left, the state file (so that a fabric it could
// not remove stays listed). It removes a namespace as `ip netns delete`
// does, a lazy unmount (MNT_DETACH) then an unlink, repeating the unmount
// while the path is still a mount point, whatever the propagation of
// /run/netns. LeftoverNames finds fabrics by their name prefix in
// /run/netns, the links and the pins, state file or not (spray testbed
// down --all). Their prefix is "spf-<name>-" and their owner file says
// "persistent", so CleanupStale never removes them. Concurrent changes
// from several processes to one persistent fabric are not coordinated
// (each SetLinkDown, SetFaults is atomic on its own; the state file keeps
// only what Reconverge knew).
//
// Caveats: everything needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN). Host.Do
// runs a function in a host's namespace on the calling goroutine's locked
// OS thread; goroutines that the function starts do not inherit the
// namespace, but sockets it opens stay in it. Processes started with
// Host.Command keep a namespace alive after Close until they exit, so stop
// them first.
//
// Leaf-spine caveats: IPv4 only (IPv6 is disabled in a fabric's
// namespaces); the host->leaf direction is not shaped; a link taken down is
// seen only by its two ends until Fabric.Reconverge (no routing protocol
// runs), so the rest of the fabric blackholes some traffic; the fabric
// programs for INT, ECN and loss (package ebpf) are not attached by
// NewLeafSpine but by Fabric.AttachPrograms, and Fabric.Close detaches
// them.
//
// Pair, Fabric, Switch and Host methods are safe for concurrent use.
package testbed
