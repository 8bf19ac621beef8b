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
	"sync"
	"time"

	"github.com/sprayfabric/spray/transport"
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
	// QPs is the number of QPs that carry the bulk data at once between
	// the two endpoints, each Total/QPs bytes; 0 means 1. The ping-pongs
	// run on the first QP once every bulk transfer ended.
	QPs int
	// PSK, when set, secures the spray QPs (of at least 16 bytes; spray.LoadPSK
	// reads one): every packet authenticated with AES-GCM, its payload
	// encrypted unless IntegrityOnly, with keys derived from the key,
	// a salt fresh for every run and both QPNs (HKDF-SHA256). A remote
	// run's server must hold the same key: each side proves it to the
	// other over the control connection before any packet. Kernel TCP
	// runs stay clear.
	PSK           []byte
	IntegrityOnly bool
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
	Link    string `json:"link"`
	Profile string `json:"profile,omitempty"`
	// Protection is ProtectionClear, ProtectionEncrypted or
	// ProtectionIntegrity: what protected the run's packets.
	Protection  string  `json:"protection,omitempty"`
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
	// Duplicates counts data packets the server received twice (a resend
	// whose first copy had arrived: spurious), Timeouts the client's
	// retransmission timeouts and LinkDrops the frames both ends' links
	// dropped (a full socket buffer or ring: real loss). Spray runs on a
	// testbed only.
	Duplicates uint64 `json:"duplicates,omitempty"`
	Timeouts   uint64 `json:"timeouts,omitempty"`
	LinkDrops  uint64 `json:"link_drops,omitempty"`
	// FramesPerGSO is the frames per UDP_SEGMENT message that the UDP
	// links sent (link/udp Counters.TxSegmented / TxSegmentMsgs), zero
	// for other links or without offload.
	FramesPerGSO float64 `json:"frames_per_gso,omitempty"`
	SHA256       string  `json:"sha256"`
	Integrity    bool    `json:"integrity_ok"`
	// CPUSeconds is the CPU time (user plus system) the whole process used
	// during the bulk phase, and CPUSecPerGB that over the gigabytes (1e9
	// bytes) moved: with client and server in one process (a testbed, or
	// link/mem), both ends' cost, the kernel's included; in client mode,
	// the client's alone. Zero where the platform does not say.
	CPUSeconds  float64 `json:"cpu_seconds,omitempty"`
	CPUSecPerGB float64 `json:"cpu_sec_per_gb,omitempty"`
	// CPUMicrosPerMsg is CPUSeconds over the messages of the bulk phase,
	// in microseconds: what a message costs, both ends together where
	// both run in the process.
	CPUMicrosPerMsg float64 `json:"cpu_us_per_msg,omitempty"`
	// QPs has one entry per QP of a run with PerfConfig.QPs > 1; the
	// fields above then sum them (Bytes, Messages, Retransmits) or cover
	// them all (Seconds from the first start to the last end, GoodputGbps
	// the bytes over that time).
	QPs []QPPerf `json:"qps,omitempty"`
}

// QPPerf is one QP's share of a multi-QP perf run.
type QPPerf struct {
	QPN         uint32  `json:"qpn"`
	Bytes       int64   `json:"bytes"`
	Seconds     float64 `json:"seconds"`
	GoodputGbps float64 `json:"goodput_gbps"`
	Retransmits uint64  `json:"retransmits"`
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
	bufs, _ := payloadsCtx(context.Background(), seed, k, n)
	return bufs
}

// payloadsCtx is payloads that gives up when ctx ends: hundreds of MiB
// take seconds to fill.
func payloadsCtx(ctx context.Context, seed uint64, k, n int) ([][]byte, error) {
	rng := rand.New(rand.NewPCG(seed, 0x7065726670))
	bufs := make([][]byte, k)
	for i := range bufs {
		b := make([]byte, n)
		for j := 0; j < n; j += 8 {
			if j%(1<<20) == 0 && ctx.Err() != nil {
				return nil, ctx.Err()
			}
			var w [8]byte
			binary.LittleEndian.PutUint64(w[:], rng.Uint64())
			copy(b[j:], w[:])
		}
		bufs[i] = b
	}
	return bufs, nil
}

// PerfClient runs the client half of a perf run over c: it sends the bulk
// data, checks the server's SHA-256 of it against its own, then times
// ping-pongs. The caller fills in Link, Profile and Retransmits.
func PerfClient(ctx context.Context, c Conn, cfg PerfConfig) (PerfResult, error) {
	cfg = cfg.withDefaults()
	hdr, _ := json.Marshal(perfHeader{MsgSize: cfg.MsgSize, Total: cfg.Total, Pings: max(cfg.Pings, 0), PingSize: cfg.PingSize})
	// No payload is longer than the whole transfer.
	bufs, err := payloadsCtx(ctx, cfg.Seed, 4, int(min(int64(cfg.MsgSize), cfg.Total)))
	if err != nil {
		return PerfResult{}, err
	}
	// The expected digest, computed before the clock starts.
	want := sha256.New()
	var msgs int64
	for sent := int64(0); sent < cfg.Total; msgs++ {
		n := int(min(int64(cfg.MsgSize), cfg.Total-sent))
		// A GiB takes seconds to hash: look at ctx every 64 messages or MiB.
		if (msgs%64 == 0 || n >= 1<<20) && ctx.Err() != nil {
			return PerfResult{}, ctx.Err()
		}
		want.Write(bufs[msgs%int64(len(bufs))][:n])
		sent += int64(n)
	}
	if err := c.Send(ctx, hdr); err != nil {
		return PerfResult{}, fmt.Errorf("bench: sending header: %w", err)
	}
	start, cpu0 := time.Now(), processCPU()
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
	elapsed, cpu := time.Since(start), processCPU()-cpu0
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
	res.setCPU(cpu)
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

// setCPU records cpu, the process's CPU time over the bulk phase.
func (r *PerfResult) setCPU(cpu time.Duration) {
	if cpu <= 0 || r.Bytes <= 0 {
		return
	}
	r.CPUSeconds = cpu.Seconds()
	r.CPUSecPerGB = cpu.Seconds() / (float64(r.Bytes) / 1e9)
	if r.Messages > 0 {
		r.CPUMicrosPerMsg = cpu.Seconds() * 1e6 / float64(r.Messages)
	}
}

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

// cqDemux routes the completions of an Endpoint's CQ to the QPs that posted
// them, for several qpConns on one endpoint.
type cqDemux struct {
	cq    *transport.CQ
	conns map[uint32]chan transport.Completion // fixed before run
}

func (d *cqDemux) run(ctx context.Context) {
	var buf [64]transport.Completion
	for d.cq.Wait(ctx) == nil {
		n := d.cq.Poll(buf[:])
		for _, c := range buf[:n] {
			if ch := d.conns[c.QPN]; ch != nil {
				ch <- c // never blocks: a qpConn has at most cap(ch) in flight
			}
		}
	}
}

// qpConn is SprayConn for one of several QPs of an endpoint: its
// completions come from a cqDemux.
type qpConn struct {
	c        *transport.Conn
	comps    chan transport.Completion
	inflight int
	next     uint64
	last     transport.Message // returned by the last Recv, released by the next
}

const qpConnDepth = 32

func (q *qpConn) reap(ctx context.Context, until int) error {
	for q.inflight > until {
		select {
		case c := <-q.comps:
			q.inflight--
			if c.Err != nil {
				return c.Err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (q *qpConn) Send(ctx context.Context, msg []byte) error {
	if err := q.reap(ctx, qpConnDepth-1); err != nil {
		return err
	}
	q.next++
	if err := q.c.Post(ctx, transport.WorkRequest{ID: q.next, Op: transport.OpSend, Data: msg}); err != nil {
		return err
	}
	q.inflight++
	return nil
}

func (q *qpConn) Flush(ctx context.Context) error { return q.reap(ctx, 0) }

// Recv returns the next message, valid until the next Recv (which gives
// it back to the transport's buffer pool).
func (q *qpConn) Recv(ctx context.Context) ([]byte, error) {
	q.last.Release()
	m, err := q.c.Recv(ctx)
	q.last = m
	return m.Data, err
}

// runSprayQPs is runSpray with pc.QPs QPs: each carries Total/QPs bytes
// at once, then the first times the ping-pongs alone.
func runSprayQPs(ctx context.Context, a, b *transport.Endpoint, hopAB, hopBA *[6]byte, pc PerfConfig, during func(context.Context)) (PairResult, error) {
	pc = pc.withDefaults()
	n := pc.QPs
	if int64(n) > pc.Total {
		return PairResult{}, fmt.Errorf("bench: %d QPs for %d bytes", n, pc.Total)
	}
	da := &cqDemux{cq: a.CQ(), conns: map[uint32]chan transport.Completion{}}
	db := &cqDemux{cq: b.CQ(), conns: map[uint32]chan transport.Completion{}}
	var ca, cb []*qpConn
	for range n {
		// The server's QP first, so that the client's can pick entropies
		// that the server's RSS delivers to the QP's engine, where known.
		y, err := b.CreateQP(ctx)
		if err != nil {
			return PairResult{}, err
		}
		var x *transport.Conn
		if st, ok := b.Steering(y); ok {
			x, err = a.CreateQPSteered(ctx, st)
		} else {
			x, err = a.CreateQP(ctx)
		}
		if err != nil {
			return PairResult{}, err
		}
		ix, iy := x.Info(), y.Info()
		if hopAB != nil {
			iy.MAC = *hopAB
		}
		if hopBA != nil {
			ix.MAC = *hopBA
		}
		if err := pc.securePair(ctx, x, y); err != nil {
			return PairResult{}, err
		}
		if err := x.Connect(ctx, iy); err != nil {
			return PairResult{}, err
		}
		if err := y.Connect(ctx, ix); err != nil {
			return PairResult{}, err
		}
		qa := &qpConn{c: x, comps: make(chan transport.Completion, qpConnDepth)}
		qb := &qpConn{c: y, comps: make(chan transport.Completion, qpConnDepth)}
		da.conns[ix.QPN], db.conns[iy.QPN] = qa.comps, qb.comps
		ca, cb = append(ca, qa), append(cb, qb)
	}
	wctx, cancel := context.WithCancelCause(ctx)
	var demux sync.WaitGroup
	demux.Add(2)
	go func() { defer demux.Done(); da.run(wctx) }()
	go func() { defer demux.Done(); db.run(wctx) }()
	defer func() { cancel(nil); demux.Wait() }()
	dctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); during(dctx) }()
	defer func() { stop(); <-done }()

	// serve runs the server half of a run on QP i, failing the client's
	// context when it fails.
	var servers sync.WaitGroup
	serve := func(i int) {
		servers.Add(1)
		go func() {
			defer servers.Done()
			if err := PerfServer(wctx, cb[i]); err != nil {
				cancel(fmt.Errorf("bench: server of QP %d: %w", i, err))
			}
		}()
	}
	bulk := pc
	bulk.Pings = -1
	bulk.Total = pc.Total / int64(n)
	res := PairResult{PerfResult: PerfResult{MsgSize: pc.MsgSize, Integrity: true}}
	per := make([]PerfResult, n)
	errs := make([]error, n)
	var clients sync.WaitGroup
	start, cpu0 := time.Now(), processCPU()
	for i := range n {
		serve(i)
		clients.Add(1)
		go func() {
			defer clients.Done()
			c := bulk
			c.Seed = pc.Seed + uint64(i)
			per[i], errs[i] = PerfClient(wctx, ca[i], c)
		}()
	}
	clients.Wait()
	servers.Wait()
	elapsed, cpu := time.Since(start), processCPU()-cpu0
	if cause := context.Cause(wctx); cause != nil {
		return res, cause
	}
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	for i, r := range per {
		st, err := ca[i].c.Stats(ctx)
		if err != nil {
			return res, err
		}
		res.QPs = append(res.QPs, QPPerf{
			QPN: ca[i].c.Info().QPN, Bytes: r.Bytes, Seconds: r.Seconds, GoodputGbps: r.GoodputGbps,
			Retransmits: st.Retransmits, Integrity: r.Integrity,
		})
		res.Bytes += r.Bytes
		res.Messages += r.Messages
		res.Retransmits += st.Retransmits
		res.Integrity = res.Integrity && r.Integrity
	}
	res.Seconds = elapsed.Seconds()
	res.GoodputGbps = float64(res.Bytes) * 8 / elapsed.Seconds() / 1e9
	res.MsgsPerSec = float64(res.Messages) / elapsed.Seconds()
	res.SHA256 = per[0].SHA256
	res.setCPU(cpu)
	if pc.Pings > 0 {
		serve(0)
		ping := pc
		ping.Total, ping.MsgSize = int64(pc.PingSize), pc.PingSize
		r, err := PerfClient(wctx, ca[0], ping)
		servers.Wait()
		if cause := context.Cause(wctx); cause != nil {
			return res, cause
		}
		if err != nil {
			return res, err
		}
		res.Pings, res.RTTp50us, res.RTTp99us, res.RTTp999us = r.Pings, r.RTTp50us, r.RTTp99us, r.RTTp999us
	}
	var err error
	if res.Client, err = a.Stats(ctx); err != nil {
		return res, err
	}
	if res.Server, err = b.Stats(ctx); err != nil {
		return res, err
	}
	if res.ClientQP, err = ca[0].c.Stats(ctx); err != nil {
		return res, err
	}
	if res.ServerQP, err = cb[0].c.Stats(ctx); err != nil {
		return res, err
	}
	return res, nil
}
