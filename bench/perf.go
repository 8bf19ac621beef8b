package bench

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"math/rand/v2"
	"time"
)

// Conn carries messages both ways between two endpoints: a spray QP
// (SprayConn) or a kernel TCP connection (TCPConn).
type Conn interface {
	// Send queues msg. It may return before the peer has it (pipelining);
	// msg must stay unchanged until Flush returns.
	Send(ctx context.Context, msg []byte) error
	// Flush waits until every message sent so far is acknowledged.
	Flush(ctx context.Context) error
	// Recv returns the next message. The slice is valid until the next Recv.
	Recv(ctx context.Context) ([]byte, error)
}

// PerfConfig describes a perf run. The zero value is usable: every field
// documents its default.
type PerfConfig struct {
	// MsgSize is the bulk message size; 0 means 1 MiB.
	MsgSize int
	// Total is the bulk bytes to send; 0 means 1 GiB.
	Total int64
	// Pings is the number of ping-pong round trips timed; 0 means 1000,
	// negative means none.
	Pings int
	// PingSize is the ping message size; 0 means 64 bytes.
	PingSize int
	// Seed seeds the payload bytes.
	Seed uint64
}

func (c PerfConfig) withDefaults() PerfConfig {
	if c.MsgSize <= 0 {
		c.MsgSize = 1 << 20
	}
	if c.Total <= 0 {
		c.Total = 1 << 30
	}
	if c.Pings == 0 {
		c.Pings = 1000
	}
	if c.PingSize <= 0 {
		c.PingSize = 64
	}
	return c
}

// PerfResult is what a perf run measured.
type PerfResult struct {
	Link        string  `json:"link"`
	Profile     string  `json:"profile,omitempty"`
	MsgSize     int     `json:"msg_size"`
	Bytes       int64   `json:"bytes"`
	Messages    int64   `json:"messages"`
	Seconds     float64 `json:"seconds"`
	GoodputGbps float64 `json:"goodput_gbps"`
	MsgsPerSec  float64 `json:"msgs_per_sec"`
	RTTp50us    float64 `json:"rtt_p50_us"`
	RTTp99us    float64 `json:"rtt_p99_us"`
	RTTp999us   float64 `json:"rtt_p999_us"`
	Pings       int     `json:"pings"`
	Retransmits uint64  `json:"retransmits"`
	SHA256      string  `json:"sha256"`
	Integrity   bool    `json:"integrity_ok"`
}

// perfHeader opens a run: the client tells the server what to expect.
type perfHeader struct {
	MsgSize  int   `json:"msg_size"`
	Total    int64 `json:"total"`
	Pings    int   `json:"pings"`
	PingSize int   `json:"ping_size"`
}

// perfReport closes the bulk phase: the server's view of it.
type perfReport struct {
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// ErrIntegrity is returned when the bytes the server received hash
// differently from those the client sent.
var ErrIntegrity = errors.New("bench: integrity check failed: SHA-256 of received bytes differs from sent")

// payloads returns k distinct seeded buffers of size n.
func payloads(seed uint64, k, n int) [][]byte {
	rng := rand.New(rand.NewPCG(seed, 0x7065726670))
	bufs := make([][]byte, k)
	for i := range bufs {
		b := make([]byte, n)
		for j := 0; j < n; j += 8 {
			var w [8]byte
			binary.LittleEndian.PutUint64(w[:], rng.Uint64())
			copy(b[j:], w[:])
		}
		bufs[i] = b
	}
	return bufs
}

// PerfClient runs the client half of a perf run over c: it sends the bulk
// data, checks the server's SHA-256 of it against its own, then times
// ping-pongs. The caller fills in Link, Profile and Retransmits.
func PerfClient(ctx context.Context, c Conn, cfg PerfConfig) (PerfResult, error) {
	cfg = cfg.withDefaults()
	hdr, _ := json.Marshal(perfHeader{MsgSize: cfg.MsgSize, Total: cfg.Total, Pings: max(cfg.Pings, 0), PingSize: cfg.PingSize})
	bufs := payloads(cfg.Seed, 4, cfg.MsgSize)
	// The expected digest, computed before the clock starts.
	want := sha256.New()
	var msgs int64
	for sent := int64(0); sent < cfg.Total; msgs++ {
		if msgs%64 == 0 && ctx.Err() != nil { // a GiB takes seconds
			return PerfResult{}, ctx.Err()
		}
		n := int(min(int64(cfg.MsgSize), cfg.Total-sent))
		want.Write(bufs[msgs%int64(len(bufs))][:n])
		sent += int64(n)
	}
	if err := c.Send(ctx, hdr); err != nil {
		return PerfResult{}, fmt.Errorf("bench: sending header: %w", err)
	}
	start := time.Now()
	var sent int64
	for i := int64(0); sent < cfg.Total; i++ {
		n := int(min(int64(cfg.MsgSize), cfg.Total-sent))
		if err := c.Send(ctx, bufs[i%int64(len(bufs))][:n]); err != nil {
			return PerfResult{}, fmt.Errorf("bench: sending message %d: %w", i, err)
		}
		sent += int64(n)
	}
	if err := c.Flush(ctx); err != nil {
		return PerfResult{}, err
	}
	raw, err := c.Recv(ctx)
	if err != nil {
		return PerfResult{}, fmt.Errorf("bench: waiting for the server's report: %w", err)
	}
	elapsed := time.Since(start)
	var rep perfReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		return PerfResult{}, fmt.Errorf("bench: bad report from server: %w", err)
	}
	res := PerfResult{
		MsgSize: cfg.MsgSize, Bytes: rep.Bytes, Messages: msgs, Seconds: elapsed.Seconds(),
		GoodputGbps: float64(rep.Bytes) * 8 / elapsed.Seconds() / 1e9,
		MsgsPerSec:  float64(msgs) / elapsed.Seconds(),
		SHA256:      rep.SHA256,
	}
	res.Integrity = rep.Bytes == cfg.Total && rep.SHA256 == hex.EncodeToString(want.Sum(nil))
	if !res.Integrity {
		return res, ErrIntegrity
	}
	if cfg.Pings > 0 {
		ping := bufs[0][:min(cfg.PingSize, len(bufs[0]))]
		rtts := make([]time.Duration, 0, cfg.Pings)
		for i := 0; i < cfg.Pings; i++ {
			t0 := time.Now()
			if err := c.Send(ctx, ping); err != nil {
				return res, fmt.Errorf("bench: ping %d: %w", i, err)
			}
			if _, err := c.Recv(ctx); err != nil {
				return res, fmt.Errorf("bench: pong %d: %w", i, err)
			}
			rtts = append(rtts, time.Since(t0))
		}
		s := Summarize(rtts)
		res.Pings = s.N
		res.RTTp50us, res.RTTp99us, res.RTTp999us = us(s.P50), us(s.P99), us(s.P999)
	}
	return res, c.Flush(ctx)
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

// PerfServer runs the server half of one perf run over c: it receives and
// hashes the bulk data, reports, then echoes the pings.
func PerfServer(ctx context.Context, c Conn) error {
	raw, err := c.Recv(ctx)
	if err != nil {
		return err
	}
	var hdr perfHeader
	if err := json.Unmarshal(raw, &hdr); err != nil || hdr.Total < 0 || hdr.Pings < 0 {
		return fmt.Errorf("bench: bad perf header %q: %v", raw, err)
	}
	var h hash.Hash = sha256.New()
	var got int64
	for got < hdr.Total {
		m, err := c.Recv(ctx)
		if err != nil {
			return fmt.Errorf("bench: after %d of %d bytes: %w", got, hdr.Total, err)
		}
		h.Write(m)
		got += int64(len(m))
	}
	rep, _ := json.Marshal(perfReport{Bytes: got, SHA256: hex.EncodeToString(h.Sum(nil))})
	if err := c.Send(ctx, rep); err != nil {
		return err
	}
	for i := 0; i < hdr.Pings; i++ {
		m, err := c.Recv(ctx)
		if err != nil {
			return fmt.Errorf("bench: ping %d: %w", i, err)
		}
		if err := c.Send(ctx, m); err != nil {
			return err
		}
		if err := c.Flush(ctx); err != nil {
			return err
		}
	}
	return c.Flush(ctx)
}
