package transport

import (
	"testing"

	"github.com/sprayfabric/spray/cc"
)

func TestProfileCC(t *testing.T) {
	if c, ok := ProfileCC(Spray, 1400)().(*cc.Auto); !ok || c.Using() != "swift" {
		t.Fatalf("spray: %T", c)
	}
	if c, ok := ProfileCC(RoCE, 1400)().(*cc.DCQCN); !ok {
		t.Fatalf("roce: %T", c)
	}
	a, b := ProfileCC(Spray, 0), ProfileCC(Spray, 0)
	if a() == b() {
		t.Fatal("controllers shared between QPs")
	}
}
