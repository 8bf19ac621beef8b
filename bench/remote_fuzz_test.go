package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/sprayfabric/spray/transport"
)

// FuzzPerfControl plays a perf client's control connection from the fuzz
// bytes against the server's side (serveOne): hellos of every kind, bad
// JSON, kernel TCP runs whose perf header and length-prefixed messages
// come from the bytes. The server must not panic, must answer only with
// well-formed control messages, must end when the bytes end (the client
// hung up) without waiting for its deadline, and must leave no goroutine.
// Spray links are not opened: a server here has no interface to put them
// on, and a hello that gets that far is refused (a clean error). The
// steering that hellos carry is decoded on its own: a malformed one is an
// error, and one accepted encodes back to the same table bytes.
func FuzzPerfControl(f *testing.F) {
	f.Add([]byte(`{"kind":"tcp","profile":"spray"}` + "\n" + "\x00\x00\x00\x00\x00\x00\x00\x20" + `{"msg_size":4,"total":8,"pings":1}` + "\x00\x00\x00\x00\x00\x00\x00\x04abcd\x00\x00\x00\x00\x00\x00\x00\x04efgh"))
	f.Add([]byte(`{"kind":"udp","profile":"spray","mtu":1514,"seed":1,"client_port":4792}` + "\n"))
	f.Add([]byte(`{"kind":"xdp","profile":"roce"}` + "\n" + `{"qp":{"QPN":5,"PSN":9}}` + "\n"))
	f.Add([]byte(`{"kind":"tcp"}` + "\n" + "\x00\x00\x00\x00\x40\x00\x00\x00"))
	f.Add([]byte(`{"kind":"carrier pigeon","profile":"spray"}`))
	f.Add([]byte(`{"error":"no"}`))
	f.Add([]byte(`{"kind":"xdp","profile":"spray"}` + "\n" + `{"qp":{"QPN":5,"PSN":9,"IP":"10.0.0.1"},"steer":{"queue":1,"rss":"A6q7zAAEAQABAgE="}}` + "\n"))
	f.Add([]byte(`{"qp":{"QPN":5,"IP":"10.0.0.1"},"steer":{"queue":-1,"rss":"AQ=="}}`))
	f.Add([]byte(`{"steer":{"queue":70000,"rss":null}}`))
	f.Add([]byte("\xff\xfe{{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dec := json.NewDecoder(bytes.NewReader(data))
		for range 4 {
			var h hello
			if dec.Decode(&h) != nil {
				break
			}
			qp := transport.QPInfo{IP: netip.MustParseAddr("10.0.0.1")}
			if h.QP != nil {
				qp = *h.QP
			}
			st, err := h.Steer.steering(qp)
			if err != nil || st == nil {
				continue
			}
			if b, err := st.Table.MarshalBinary(); err != nil || !bytes.Equal(b, h.Steer.RSS) || st.Queue != h.Steer.Queue {
				t.Fatalf("steering %+v decodes to %+v, which encodes to %x, %v", h.Steer, st, b, err)
			}
		}
		before := runtime.NumGoroutine()
		srv, cli := net.Pipe()
		s := &perfServer{busy: map[string]chan struct{}{}, ports: map[uint16]bool{}}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- s.serveOne(ctx, srv); srv.Close() }()
		replies := make(chan error, 1)
		go func() {
			// What the server says must decode as control messages (a
			// TCP run's data after the first answer is not JSON).
			dec := json.NewDecoder(cli)
			var h hello
			err := dec.Decode(&h)
			if err == io.EOF || err == io.ErrClosedPipe {
				err = nil
			}
			replies <- err
			io.Copy(io.Discard, cli)
		}()
		go func() { cli.Write(data); cli.Close() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the server did not end after the client hung up")
		}
		if err := <-replies; err != nil {
			if _, ok := err.(*json.SyntaxError); ok {
				t.Fatalf("the server's answer is not a control message: %v", err)
			}
		}
		cancel()
		for end := time.Now().Add(2 * time.Second); runtime.NumGoroutine() > before && time.Now().Before(end); {
			time.Sleep(time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			t.Fatalf("%d goroutines left, %d before", n, before)
		}
	})
}
