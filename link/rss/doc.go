// Package rss computes the receive-side scaling (RSS) hash that NICs use to
// spread received frames over their queues: the Toeplitz hash of a frame's
// addresses and ports under a secret key, and an indirection table that maps
// the hash's low bits to a queue.
//
// Use it to predict on which queue a receiver's NIC will deliver a frame, so
// that a sender can choose UDP source ports (spray's entropies) that land on
// a given queue, and in link/mem, whose multi-queue ports spread frames the
// way a NIC does. Hash follows Microsoft's "Verifying the RSS Hash
// Calculation" (the tests check its published vectors); Table.Queue applies
// an indirection table as Linux drivers do (hash modulo the table size).
//
// Device reads the key and table of a Linux network device (ETHTOOL_GRSSH);
// it needs CAP_NET_ADMIN for some drivers, and virtual devices (veth) often
// have no RSS at all, in which case it returns an error wrapping
// ErrNoRSS.
//
// Table.AppendBinary and ParseTable give a table a compact, bounded wire
// encoding (a key of at most MaxKeyLen bytes, at most MaxEntries entries
// of one or two bytes each), in which a receiver sends its configuration
// to its peers: spray's connection manager and perf's hellos carry it.
package rss
