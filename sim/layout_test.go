package sim

import (
	"reflect"
	"testing"
)

// TestPortLayout: the fields of a port that a frame's hop reads sit on
// the cache lines the layout gives them, none across two: a field added
// in the wrong place moves a hop's misses back. New fields go after the
// counters, with the cold ones.
func TestPortLayout(t *testing.T) {
	lines := map[string]uintptr{
		"node": 0, "peer": 0, "host": 0, "busy": 0, "shaper": 0, "instant": 0, "paused": 0, "down": 0,
		"xoff": 0, "withdrawn": 0, "txCount": 0, "freePs": 0, "qBytes": 0, "q": 0,
		"qh": 1, "cur": 1, "rate": 1, "delay": 1, "loss": 1, "geP": 1,
		"ecn": 2, "pq": 2, "pqh": 2,
		"inBytes": 3,
	}
	ty := reflect.TypeFor[port]()
	for name, line := range lines {
		f, ok := ty.FieldByName(name)
		if !ok {
			t.Errorf("port has no field %s", name)
			continue
		}
		first, last := f.Offset/64, (f.Offset+f.Type.Size()-1)/64
		if first != line || last != line {
			t.Errorf("port.%s at bytes %d to %d: lines %d to %d, want line %d", name, f.Offset, f.Offset+f.Type.Size(), first, last, line)
		}
	}
	// The counters a hop moves: TxFrames, TxBytes, ECNMarked, INTStamped
	// and MaxQueue, on line 3 with inBytes.
	st, _ := ty.FieldByName("stats")
	for _, name := range []string{"TxFrames", "TxBytes", "ECNMarked", "INTStamped", "MaxQueue"} {
		f, _ := reflect.TypeFor[PortStats]().FieldByName(name)
		if off := st.Offset + f.Offset; off/64 != 3 || (off+f.Type.Size()-1)/64 != 3 {
			t.Errorf("port.stats.%s at byte %d: want line 3", name, off)
		}
	}
}

// TestSwitchLayout: a switch's routes and buffer accounts, which every
// frame's arrival reads, sit on its first two cache lines, and a
// switch is three.
func TestSwitchLayout(t *testing.T) {
	ty := reflect.TypeFor[swtch]()
	for name, line := range map[string]uintptr{
		"id": 0, "lo": 0, "hi": 0, "div": 0, "up": 0, "down": 0,
		"seed": 1, "buf": 1, "shared": 1, "used": 1, "maxUsed": 1, "integral": 1, "lastT": 1,
	} {
		f, ok := ty.FieldByName(name)
		if !ok {
			t.Errorf("swtch has no field %s", name)
			continue
		}
		if first, last := f.Offset/64, (f.Offset+f.Type.Size()-1)/64; first != line || last != line {
			t.Errorf("swtch.%s at bytes %d to %d: lines %d to %d, want line %d", name, f.Offset, f.Offset+f.Type.Size(), first, last, line)
		}
	}
	if ty.Size() != 3*64 {
		t.Errorf("swtch is %d bytes, want %d", ty.Size(), 3*64)
	}
}
