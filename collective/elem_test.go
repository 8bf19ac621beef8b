package collective_test

import (
	"math"
	"testing"

	. "github.com/sprayfabric/spray/collective"

	"github.com/sprayfabric/spray/internal/testutil"
)

// TestElemsOfMisaligned views received bytes as elements whether or not
// they are aligned, and reduces them like the serial model.
func TestElemsOfMisaligned(t *testing.T) {
	rng := testutil.Rand(t)
	x := values[float64](rng, 33)
	raw := make([]byte, len(x)*8+1)
	for shift := range 2 {
		b := raw[shift : shift+len(x)*8]
		copy(b, BytesOf(x))
		var scratch []float64
		got := ElemsOf(b, &scratch)
		equal(t, "view", got, x)
		dst := values[float64](rng, len(x))
		want := refReduce([][]float64{dst, x}, Max)
		Reduce(dst, got, Max)
		equal(t, "reduced", dst, want)
	}
	if got := ElemsOf[int32](nil, new([]int32)); len(got) != 0 {
		t.Fatalf("ElemsOf(nil) = %v", got)
	}
}

func TestReduceNaNAndZeros(t *testing.T) {
	nan := float32(math.NaN())
	negz := float32(math.Copysign(0, -1))
	a := []float32{1, nan, 0, negz}
	b := []float32{nan, 1, negz, 0}
	Reduce(a, b, Min)
	if !math.IsNaN(float64(a[0])) || !math.IsNaN(float64(a[1])) || !math.Signbit(float64(a[2])) || !math.Signbit(float64(a[3])) {
		t.Fatalf("min: %v", a)
	}
	for _, op := range []Op{Sum, Min, Max, Op(3)} {
		if got := op.String(); got == "" {
			t.Fatalf("empty name for op %d", op)
		}
	}
}
