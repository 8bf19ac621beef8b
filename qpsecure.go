package spray

import (
	"context"

	"github.com/sprayfabric/spray/transport"
)

// secureQP installs the packet secrets of a QP that is not yet connected.
func secureQP(ctx context.Context, qc *transport.Conn, send, recv [32]byte, integrityOnly bool) error {
	return qc.Secure(ctx, transport.Security{Send: send, Recv: recv, IntegrityOnly: integrityOnly})
}
