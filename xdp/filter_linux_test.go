package xdp_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sprayfabric/spray/telemetry"
	"github.com/sprayfabric/spray/transport"
	"github.com/sprayfabric/spray/xdp"
)

// TestLinkFilterStatsExported: a datagram to port 4791 whose UDP length
// exceeds its frame, sent through a forwarding namespace to an AF_XDP
// link, is dropped by the steering program, and the drop shows where
// users read counters: the endpoint's Snapshot (Filter.Malformed) and its
// Prometheus series spray_link_filter_drops_total{reason="malformed"}.
func TestLinkFilterStatsExported(t *testing.T) {
	x := newRouted(t, 1, 1500)
	l := x.openLink(t, xdp.LinkConfig{})
	ep, err := transport.NewEndpoint(l, transport.Config{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	prom, err := telemetry.NewPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	defer prom.Provider.Shutdown(context.Background())
	stop, err := telemetry.InstrumentWith(prom.Provider, ep, "b")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	srv := httptest.NewServer(prom.Handler)
	defer srv.Close()
	if n, ok := malformedSeries(t, srv.URL); !ok || n != 0 {
		t.Fatalf("before the frame: malformed series %v (present %v), want 0", n, ok)
	}

	// IPv4 header, UDP header claiming 200 bytes more than follow, 20
	// bytes of payload.
	pkt := make([]byte, 20+8+20)
	pkt[0], pkt[8], pkt[9] = 0x45, 64, unix.IPPROTO_UDP
	binary.BigEndian.PutUint16(pkt[2:], uint16(len(pkt)))
	copy(pkt[12:16], x.sIP.AsSlice())
	copy(pkt[16:20], x.bIP.AsSlice())
	binary.BigEndian.PutUint16(pkt[20:], 40000)
	binary.BigEndian.PutUint16(pkt[22:], 4791)
	binary.BigEndian.PutUint16(pkt[24:], uint16(len(pkt)-20+200))
	inNS(t, x.s, func() {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		if err := unix.Sendto(fd, pkt, 0, &unix.SockaddrInet4{Addr: x.bIP.As4()}); err != nil {
			t.Fatal(err)
		}
	})

	var n float64
	for deadline := time.Now().Add(10 * time.Second); n < 1 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		n, _ = malformedSeries(t, srv.URL)
	}
	if n != 1 {
		t.Fatalf("spray_link_filter_drops_total{reason=\"malformed\"} %v, want 1", n)
	}
	var snap transport.Snapshot
	if err := ep.Snapshot(context.Background(), &snap); err != nil {
		t.Fatal(err)
	}
	if snap.Filter.Malformed != 1 || snap.Engine.Malformed() != 0 {
		t.Fatalf("snapshot: filter %+v, engine malformed %d; want the filter's 1 and none in the engine", snap.Filter, snap.Engine.Malformed())
	}
}

// malformedSeries scrapes url for spray_link_filter_drops_total with
// reason="malformed".
func malformedSeries(t *testing.T, url string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "spray_link_filter_drops_total{") || !strings.Contains(line, `reason="malformed"`) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("series %q: %v", line, err)
		}
		return v, true
	}
	return 0, false
}
