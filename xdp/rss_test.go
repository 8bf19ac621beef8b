package xdp

import (
	"slices"
	"testing"

	"github.com/sprayfabric/spray/link/rss"
)

// TestServedTable: a device's indirection table names device queues; the
// link's names the index of the socket serving each, and one past the last
// socket for a queue left to the kernel, so that steering never picks it.
func TestServedTable(t *testing.T) {
	dev := rss.Table{Key: []byte{1, 2, 3}, Indir: []uint32{0, 1, 2, 3, 2, 0}}
	got := servedTable(dev, []int{0, 2})
	if want := []uint32{0, 2, 1, 2, 1, 0}; !slices.Equal(got.Indir, want) {
		t.Errorf("Indir %v, want %v", got.Indir, want)
	}
	if !slices.Equal(got.Key, dev.Key) {
		t.Errorf("Key %v, want %v", got.Key, dev.Key)
	}
	got.Key[0] = 9
	if dev.Key[0] != 1 {
		t.Errorf("the translated table shares the device's key")
	}
	all := servedTable(dev, []int{0, 1, 2, 3})
	if !slices.Equal(all.Indir, dev.Indir) {
		t.Errorf("every queue served: Indir %v, want %v", all.Indir, dev.Indir)
	}
}
