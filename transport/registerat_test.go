package transport

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sprayfabric/spray/link/mem"
)

// TestRegisterAt: a region registered under a chosen key and address 0 is
// written and read by offset, and a taken or zero key is refused.
func TestRegisterAt(t *testing.T) {
	_, _, eb, ca, _ := endpointPair(t, mem.Config{}, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	buf := make([]byte, 4096)
	mr, err := eb.RegisterAt(ctx, buf, AccessRemoteWrite|AccessRemoteRead, 0x1234, 0)
	if err != nil {
		t.Fatal(err)
	}
	if mr.RKey != 0x1234 || mr.Addr != 0 {
		t.Fatalf("region key %#x address %#x, want 0x1234 and 0", mr.RKey, mr.Addr)
	}
	if err := ca.Write(ctx, []byte("at offset 100"), Remote{Addr: 100, RKey: 0x1234}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[100:113], []byte("at offset 100")) {
		t.Fatalf("region holds %q", buf[100:113])
	}
	got := make([]byte, 13)
	if err := ca.Read(ctx, got, Remote{Addr: 100, RKey: 0x1234}); err != nil || string(got) != "at offset 100" {
		t.Fatalf("read %q, %v", got, err)
	}
	for _, key := range []uint32{0, 0x1234} {
		if _, err := eb.RegisterAt(ctx, buf, AccessRemoteWrite, key, 0); !errors.Is(err, ErrConfig) {
			t.Errorf("key %#x: %v, want ErrConfig", key, err)
		}
	}
}
