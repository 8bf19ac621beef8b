package testbed

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sprayfabric/spray/ebpf"
)

// PortStatus is what Fabric.Status reports for one switch port: its
// utilization over the interval and its counters since the fabric programs
// were attached (kernel link counters since the port was made).
type PortStatus struct {
	// Switch and Peer are node names without the fabric's prefix
	// ("leaf0", "spine1", "host0-1"), Port the interface's name, ID the
	// fabric programs' switch/port numbers.
	Switch, Port, Peer string
	ID                 ebpf.PortID
	// RateBps is the port's egress shaping rate; Down whether the link is
	// down (SetLinkDown).
	RateBps uint64
	Down    bool
	// Utilization is the bytes the interface sent during the interval, in
	// percent of RateBps (TxBytes delta x 8 / interval / RateBps x 100);
	// 0 when Status was called without an interval.
	Utilization float64
	// TxBytes and TxPackets are what the interface sent (after its queue),
	// from the kernel's link counters.
	TxBytes, TxPackets uint64
	// Packets and Bytes are what the egress program passed on to the
	// queue (fault drops excluded).
	Packets, Bytes uint64
	// Drops by cause: DropQueue, the egress queue was full (tc's count,
	// and the packets a trimming port failed to cut);
	// DropLoss, DropBurst and DropBlackhole, injected faults; DropDown,
	// the veth dropped because the link is down.
	DropQueue, DropLoss, DropBurst, DropBlackhole, DropDown uint64
	// ECNMarked counts CE marks for this port's queue delay.
	ECNMarked uint64
	// Trimmed counts spray data packets the port cut to their headers
	// (LeafSpineConfig.Trim, or a loss fault with Faults.Trim).
	Trimmed uint64
	// MaxQueueDelay is the largest queue delay measured for the port.
	MaxQueueDelay time.Duration
	// Faults are the faults set on the port now.
	Faults ebpf.Faults
	// Programs tells whether the fabric programs run on the port; without
	// them the program counters and Faults are zero.
	Programs bool
}

// Status returns the status of every switch port, in the order of
// PortStats. With interval > 0 it samples the counters twice, interval
// apart (ctx cancels the wait), and reports utilization over it; the
// counters are those of the second sample. Errors wrap ErrClosed after
// Close.
func (f *Fabric) Status(ctx context.Context, interval time.Duration) ([]PortStatus, error) {
	first, err := f.PortStats()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if interval > 0 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(interval):
		}
	}
	stats, err := f.PortStats()
	if err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	prog := f.Programs()
	out := make([]PortStatus, 0, len(stats))
	i := 0
	for _, sw := range append(append([]*Switch(nil), f.Leaves...), f.Spines...) {
		for pi, p := range sw.Ports {
			ks := stats[i]
			st := PortStatus{
				Switch: strings.TrimPrefix(sw.Name, f.Prefix), Port: p.Name,
				Peer: strings.TrimPrefix(p.Peer, f.Prefix), ID: f.PortID(sw, pi),
				RateBps: p.RateBps, TxBytes: ks.TxBytes, TxPackets: ks.TxPackets,
				DropQueue: ks.QueueDrops, DropDown: ks.TxDropped,
			}
			if n := f.nodeByName(sw.Name); n != nil {
				f.mu.Lock()
				st.Down = n.ports[pi].link.down
				f.mu.Unlock()
			}
			if interval > 0 && p.RateBps > 0 && elapsed > 0 {
				d := float64(ks.TxBytes - first[i].TxBytes)
				st.Utilization = d * 8 / elapsed.Seconds() / float64(p.RateBps) * 100
			}
			if prog != nil {
				if c, err := prog.PortCounters(st.ID); err == nil {
					st.Programs = true
					st.Packets, st.Bytes = c.Packets, c.Bytes
					st.DropLoss, st.DropBurst, st.DropBlackhole = c.DropLoss, c.DropBurst, c.DropBlackhole
					st.ECNMarked, st.MaxQueueDelay = c.ECNMarked, c.MaxQueueDelay
					st.Trimmed, st.DropQueue = c.Trimmed, st.DropQueue+c.DropQueue
				}
				if pc, err := prog.PortConfig(st.ID); err == nil {
					st.Faults = pc.Faults
				}
			}
			out = append(out, st)
			i++
		}
	}
	return out, nil
}

// LookupPort finds the switch port that spec names: "<switch>:<port>",
// where switch is a leaf or spine ("leaf0", "spine1", or the namespace
// name) and port the port's index in Switch.Ports, its interface name
// ("up1", "down0") or the node at its other end ("spine1", "host0-1",
// "leaf0"). Errors wrap ErrConfig and list what exists.
func (f *Fabric) LookupPort(spec string) (*Switch, int, error) {
	swName, portName, ok := strings.Cut(spec, ":")
	if !ok || swName == "" || portName == "" {
		return nil, 0, fmt.Errorf("%w: port %q: want <switch>:<port|peer>, such as spine0:leaf1 or leaf0:up1", ErrConfig, spec)
	}
	var names []string
	for _, sw := range append(append([]*Switch(nil), f.Leaves...), f.Spines...) {
		short := strings.TrimPrefix(sw.Name, f.Prefix)
		names = append(names, short)
		if swName != short && swName != sw.Name {
			continue
		}
		var ports []string
		for i, p := range sw.Ports {
			peer := strings.TrimPrefix(p.Peer, f.Prefix)
			ports = append(ports, p.Name+"("+peer+")")
			if portName == p.Name || portName == peer || portName == p.Peer || portName == strconv.Itoa(i) {
				return sw, i, nil
			}
		}
		return nil, 0, fmt.Errorf("%w: port %q: %s has no port %q; its ports: %s", ErrConfig, spec, short, portName, strings.Join(ports, " "))
	}
	return nil, 0, fmt.Errorf("%w: port %q: no switch %q; switches: %s", ErrConfig, spec, swName, strings.Join(names, " "))
}
