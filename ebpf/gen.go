package ebpf

// The generated *_bpfel.go and *_bpfel.o files are committed so that `go
// build` needs no clang; regen.sh regenerates them in a temporary directory
// and fails on a diff, never writing the tree.
// fabric.c needs -mcpu=v3 for the fetching atomic add of its per-port
// transmit byte counter (BPF_ATOMIC with BPF_FETCH, Linux 5.12).

//go:generate go tool bpf2go -tags linux -target bpfel -type steer_counters -type steer_config -type steer_addr steer steer.c -- -I/usr/include/x86_64-linux-gnu -Wall -Werror
//go:generate go tool bpf2go -tags linux -target bpfel -type fabric_port -type fabric_counters -type vq_state fabric fabric.c -- -I/usr/include/x86_64-linux-gnu -Wall -Werror -mcpu=v3
