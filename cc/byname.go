package cc

import (
	"fmt"
	"time"
)

// Params are what a controller needs to know of the path it runs on, for
// ByName to pick defaults. Zero fields take the controllers' own defaults.
type Params struct {
	LineRate    float64       // bytes per second the sender's link carries
	BaseRTT     time.Duration // unloaded round trip of the fabric
	PacketBytes int           // payload of a full packet
}

// Names lists the controllers ByName knows.
var Names = []string{"fixed", "hpcc", "swift", "dcqcn"}

// ByName returns a constructor of the named controller ("fixed", "hpcc",
// "swift" or "dcqcn"), configured from p; each QP calls it for its own
// controller.
func ByName(name string, p Params) (func() Controller, error) {
	switch name {
	case "", "fixed":
		return func() Controller { return Fixed{} }, nil
	case "hpcc":
		return func() Controller { return NewHPCC(HPCCConfig{LineRate: p.LineRate, BaseRTT: p.BaseRTT}) }, nil
	case "swift":
		return func() Controller { return NewSwift(SwiftConfig{PacketBytes: p.PacketBytes}) }, nil
	case "dcqcn":
		return func() Controller { return NewDCQCN(DCQCNConfig{LineRate: p.LineRate}) }, nil
	}
	return nil, fmt.Errorf("cc: unknown controller %q (want one of %v)", name, Names)
}
