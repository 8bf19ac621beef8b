package spray

import (
	"testing"

	"github.com/sprayfabric/spray/internal/cm"
)

// The front door's constants and enumerations are the connection
// manager's: a value that drifted would be sent on the wire or compared
// against the other's (a link kind in the link block, a Protection).
func TestFrontDoorMirrorsCM(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"Backlog", Backlog, cm.Backlog},
		{"CMPort", CMPort, cm.Port},
		{"DefaultMaxHandshakes", DefaultMaxHandshakes, cm.DefaultMaxHandshakes},
		{"MaxService", MaxService, cm.MaxService},
		{"MinPSK", MinPSK, cm.MinPSK},
		{"LinkXDP", int(LinkXDP), int(cm.LinkXDP)},
		{"LinkUDP", int(LinkUDP), int(cm.LinkUDP)},
		{"LinkRaw", int(LinkRaw), int(cm.LinkRaw)},
		{"ProtectionIntegrity", int(ProtectionIntegrity), int(cm.ProtectionIntegrity)},
		{"ProtectionEncrypted", int(ProtectionEncrypted), int(cm.ProtectionEncrypted)},
	} {
		if c.got != c.want {
			t.Errorf("%s is %d here, %d in the connection manager", c.name, c.got, c.want)
		}
	}
}
