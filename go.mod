module github.com/sprayfabric/spray

go 1.26.0

require (
	github.com/BurntSushi/toml v1.6.0 // indirect
	github.com/cilium/ebpf v0.22.0 // indirect
	github.com/gopacket/gopacket v1.7.7 // indirect
	github.com/vishvananda/netlink v1.3.1 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	golang.org/x/exp/typeparams v0.0.0-20260209203927-2842357ff358 // indirect
	golang.org/x/mod v0.41.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/tools v0.51.0 // indirect
	honnef.co/go/tools v0.8.2 // indirect
)

tool (
	github.com/cilium/ebpf/cmd/bpf2go
	honnef.co/go/tools/cmd/staticcheck
)
