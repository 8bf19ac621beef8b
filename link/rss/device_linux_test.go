package rss

import (
	"errors"
	"net"
	"testing"
)

// Loopback has no RSS: Device says so with ErrNoRSS. A device that does
// not exist is an error too, not a panic. Where a device with RSS exists,
// its table names queues and its key is long enough to hash an IPv6 tuple.
func TestDevice(t *testing.T) {
	if _, err := Device("lo"); !errors.Is(err, ErrNoRSS) {
		t.Errorf("lo: %v, want ErrNoRSS", err)
	}
	if _, err := Device("nosuchdev0"); err == nil {
		t.Error("a missing device read without error")
	}
	if _, err := Device("a-name-far-too-long-for-linux"); err == nil {
		t.Error("an overlong name read without error")
	}
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		tab, err := Device(ifc.Name)
		if err != nil {
			continue
		}
		if len(tab.Key) < 40 || len(tab.Indir) == 0 {
			t.Errorf("%s: %d-byte key, %d-entry table", ifc.Name, len(tab.Key), len(tab.Indir))
		}
		t.Logf("%s: %d-byte key, %d-entry table", ifc.Name, len(tab.Key), len(tab.Indir))
	}
}
