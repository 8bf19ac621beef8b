package cc

import (
	"github.com/sprayfabric/spray/clock"
)

// AutoConfig configures an Auto controller: the configs of the two
// controllers it runs. The zero value is usable (both controllers'
// defaults).
type AutoConfig struct {
	HPCC  HPCCConfig
	Swift SwiftConfig
}

// Auto is the spray profile's controller: Swift until the first
// acknowledgement that echoes an INT record with a link rate, HPCC from
// then on. At the switch HPCC takes over Swift's window (within HPCC's
// bounds), so that the rate does not jump; it then needs a second record of
// each egress port before it measures utilization. The switch is for good:
// a path that stops echoing INT leaves HPCC's window where it was (HPCC
// ignores ACKs without INT), so a fabric should stamp INT on every path or
// on none.
//
// Both controllers see every OnSend and OnLoss from the start (HPCC tells
// its RTTs apart by byte counts); Swift stops getting events at the switch.
//
// Its zero value is not usable: use NewAuto. It is not safe for concurrent
// use.
type Auto struct {
	swift    *Swift
	hpcc     *HPCC
	switched bool
}

var _ Controller = (*Auto)(nil)

// NewAuto returns an Auto controller running Swift.
func NewAuto(cfg AutoConfig) *Auto {
	return &Auto{swift: NewSwift(cfg.Swift), hpcc: NewHPCC(cfg.HPCC)}
}

// Using returns the name of the controller in charge: "swift" or "hpcc".
func (a *Auto) Using() string {
	if a.switched {
		return "hpcc"
	}
	return "swift"
}

// Swift returns the Swift controller (in charge until the switch).
func (a *Auto) Swift() *Swift { return a.swift }

// HPCC returns the HPCC controller (in charge after the switch).
func (a *Auto) HPCC() *HPCC { return a.hpcc }

func (a *Auto) cur() Controller {
	if a.switched {
		return a.hpcc
	}
	return a.swift
}

// hasRate reports whether records hold a hop record with a link rate,
// which HPCC needs.
func hasRate(records []Hop) bool {
	for _, h := range records {
		if h.RateMbps != 0 {
			return true
		}
	}
	return false
}

// OnSend reports bytes sent to both controllers.
func (a *Auto) OnSend(now clock.Time, bytes int) {
	a.hpcc.OnSend(now, bytes)
	if !a.switched {
		a.swift.OnSend(now, bytes)
	}
}

// OnAck switches to HPCC on the first sample with a usable INT record, and
// passes the sample on.
func (a *Auto) OnAck(s Sample) {
	if !a.switched && hasRate(s.INT) {
		a.switched = true
		a.hpcc.setWindow(float64(a.swift.Window()))
	}
	a.hpcc.OnAck(s) // counts the bytes even before the switch
	if !a.switched {
		a.swift.OnAck(s)
	}
}

// OnLoss reports lost bytes to both controllers (until the switch).
func (a *Auto) OnLoss(now clock.Time, bytes int) {
	a.hpcc.OnLoss(now, bytes)
	if !a.switched {
		a.swift.OnLoss(now, bytes)
	}
}

// OnTimeout passes the timeout to the controller in charge.
func (a *Auto) OnTimeout(now clock.Time) { a.cur().OnTimeout(now) }

// OnCNP passes the CNP to the controller in charge (both ignore it).
func (a *Auto) OnCNP(now clock.Time) { a.cur().OnCNP(now) }

// NextTimer returns clock.Never: neither controller has timers.
func (a *Auto) NextTimer() clock.Time { return a.cur().NextTimer() }

// OnTimer does nothing.
func (a *Auto) OnTimer(now clock.Time) { a.cur().OnTimer(now) }

// Window returns the window of the controller in charge.
func (a *Auto) Window() int { return a.cur().Window() }

// Rate returns the pacing rate of the controller in charge.
func (a *Auto) Rate() float64 { return a.cur().Rate() }
