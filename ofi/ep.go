package main

/*
#include "prov.h"
#define SP_TAGGED_FLAG (1ULL << 63)
#define SP_DATA_FLAG (1ULL << 62)
#define SP_INJ_FLAG (1ULL << 61)
#define SP_OPFLAGS_FLAG (1ULL << 60)
*/
import "C"

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sprayfabric/spray"
	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/transport"
)

// Flags the C glue adds to an operation's flags (FI_PROV_SPECIFIC bits).
const (
	flagTagged  = C.SP_TAGGED_FLAG
	flagData    = C.SP_DATA_FLAG
	flagInject  = C.SP_INJ_FLAG
	flagOpFlags = C.SP_OPFLAGS_FLAG
	provFlags   = flagTagged | flagData | flagInject | flagOpFlags
)

// Message header: kind, flags, 6 bytes zero, tag, remote CQ data (little
// endian). The first message on a connection is a hello carrying the
// sender's name, so that the receiver can report FI_SOURCE.
const (
	kindHello  = 1
	kindMsg    = 2
	kindTagged = 3
	hdrHasData = 1
	service    = "ofi"
)

// Counters an endpoint may bump, by the bind flag that names them.
const (
	cntSend = iota
	cntRecv
	cntRead
	cntWrite
	cntRemoteRead
	cntRemoteWrite
	nCnt
)

// recvOp is a posted receive buffer.
type recvOp struct {
	iov    []C.struct_iovec
	src    netip.AddrPort // directed: only from this name; invalid: any
	tag    uint64
	ignore uint64
	ctx    unsafe.Pointer
	comp   bool // write a completion on success
}

func (r *recvOp) size() int {
	n := 0
	for _, v := range r.iov {
		n += int(v.iov_len)
	}
	return n
}

// inMsg is a received message no receive matched yet (unexpected).
type inMsg struct {
	src    netip.AddrPort
	tagged bool
	tag    uint64
	data   uint64
	hasDat bool
	body   []byte // payload, inside m.Data
	m      transport.Message
}

// txOp is a send, write or read the transport has not completed.
type txOp struct {
	id     uint64
	ctx    unsafe.Pointer
	flags  C.uint64_t // completion flags
	n      int
	comp   bool // write a completion on success
	hello  bool
	wr     transport.WorkRequest
	cnt    int
	readTo []C.struct_iovec // a READ scatters from buf into these
	buf    []byte
	peer   *peer
}

// peer is the sending side towards one name: one connection, dialled on
// the first send, so that every operation to a peer keeps its order.
type peer struct {
	name  netip.AddrPort
	mu    sync.Mutex
	conn  *spray.Conn     // nil while dialling
	qp    *transport.Conn // on demand (peers.go): instead of conn
	err   error           // the dial failed
	queue []*txOp         // waiting for the connection or for send queue room
}

// endpoint is an FI_EP_RDM endpoint over one spray endpoint (its own
// link and connection manager). It is safe for concurrent use.
type endpoint struct {
	refs
	dom   *domain
	set   settings
	caps  C.uint64_t
	sp    *spray.Endpoint
	ln    *spray.Listener
	name  netip.AddrPort
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup
	txOut atomic.Int64
	// served are the on-demand Conns a serve goroutine reads (peers.go).
	served sync.Map

	mu      sync.Mutex
	enabled bool
	av      *addrVec
	txcq    *complQueue
	rxcq    *complQueue
	txSel   bool // FI_SELECTIVE_COMPLETION on the tx CQ
	rxSel   bool
	txFlags C.uint64_t
	rxFlags C.uint64_t
	cntr    [nCnt]*counter
	eq      *eventQueue
	peers   map[netip.AddrPort]*peer
	posted  [2][]*recvOp // untagged, tagged
	unexp   [2][]*inMsg
	ueBytes int64
	ueWaits int64 // deliveries that waited for room among unexpected messages
	room    *sync.Cond
	claimed map[unsafe.Pointer]*inMsg
	ops     map[uint64]*txOp
	nextID  uint64
	// stalled holds the peers whose queue waits for send queue room,
	// under stallMu, which flush takes while it holds a peer's lock: the
	// lock order is ep.mu, then a peer's mu, then stallMu.
	stallMu sync.Mutex
	stalled map[*peer]struct{}
	bound   []*atomic.Int64 // the bind counts this endpoint holds on CQs and counters
	cqs     []*complQueue   // the CQs bound, whose reads make this endpoint's progress
	cntrs   []*counter      // the counters bound, likewise
	poll    poller
}

//export goEndpoint
func goEndpoint(dh C.uintptr_t, info *C.struct_fi_info, o *C.sp_ep) C.int {
	d, ok := object[*domain](dh)
	if !ok || d.closed.Load() {
		return -C.FI_EINVAL
	}
	if info.ep_attr != nil && info.ep_attr._type != C.FI_EP_RDM && info.ep_attr._type != C.FI_EP_UNSPEC {
		return -C.FI_EINVAL
	}
	set, r := envSettings()
	if r != 0 {
		return r
	}
	if info.src_addr != nil {
		a, ok := sockaddrIn(info.src_addr, int(info.src_addrlen))
		if !ok {
			return -C.FI_EINVAL
		}
		if a.Addr() != set.addr {
			set.more = nil // the hints chose an address of their own
		}
		set.addr, set.cmPort, set.iface = a.Addr(), a.Port(), ""
	}
	ep := &endpoint{dom: d, set: set, caps: info.caps, peers: map[netip.AddrPort]*peer{},
		claimed: map[unsafe.Pointer]*inMsg{}, ops: map[uint64]*txOp{}, stalled: map[*peer]struct{}{}}
	if ep.caps == 0 {
		ep.caps = allCaps
	}
	if info.tx_attr != nil {
		ep.txFlags = info.tx_attr.op_flags
	}
	if info.rx_attr != nil {
		ep.rxFlags = info.rx_attr.op_flags
	}
	ep.room = sync.NewCond(&ep.mu)
	if r := ep.open(); r != 0 {
		return r
	}
	d.hold()
	d.addEndpoint(ep)
	o.h = newHandle(ep)
	return 0
}

// open starts the spray endpoint and its connection manager. An address
// already taken by another endpoint (an earlier rank on this host) moves
// to the next one FI_SPRAY_ADDR lists, or on a loopback interface to the
// next address, 127.0.0.1, .2, ..., so that several processes share a
// host with nothing set.
func (ep *endpoint) open() C.int {
	s := ep.set
	var lastErr error
	for try := 0; try < 250; try++ {
		ifc, err := spray.LookupInterface(s.iface, s.addr)
		if err != nil {
			logf("spray: %v", err)
			return -C.FI_EADDRNOTAVAIL
		}
		opts := spray.Options{Interface: ifc.Name, Addr: ifc.IP, Link: s.link, Port: s.port,
			CMAddr:       netip.AddrPortFrom(ifc.IP, s.cmPort).String(),
			CloseTimeout: 2 * time.Second, Logf: logf}
		opts.Transport.BusyPoll = s.busy
		opts.Transport.Peers.Accept = onDemand()
		opts.Transport.LineRate = s.rate
		if s.cc != "" {
			opts.Transport.CC, _ = cc.ByName(s.cc, cc.Params{LineRate: s.rate}) // checked in envSettings
		}
		sp, err := spray.Open(context.Background(), opts)
		if err == nil {
			ln, lerr := sp.Listen(service)
			if lerr == nil {
				ap, perr := netip.ParseAddrPort(ln.Addr())
				if perr != nil {
					sp.Close()
					return -C.FI_EIO
				}
				ep.sp, ep.ln, ep.name = sp, ln, netip.AddrPortFrom(ifc.IP, ap.Port())
				break
			}
			sp.Close()
			err = lerr
		}
		lastErr = err
		inUse := errors.Is(err, unix.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
		if inUse && len(s.more) > 0 {
			s.addr, s.more, s.iface = s.more[0], s.more[1:], ""
			continue
		}
		if !inUse || !ifc.Loopback || s.cmPort != 0 && try > 0 {
			logf("spray: opening an endpoint on %s: %v", ifc.IP, err)
			return -code(err)
		}
		next := ifc.IP.Next()
		if !next.IsLoopback() {
			break
		}
		s.addr, s.iface = next, ""
	}
	if ep.sp == nil {
		logf("spray: no free loopback address: %v", lastErr)
		return -C.FI_EADDRINUSE
	}
	ep.ctx, ep.stop = context.WithCancel(context.Background())
	ep.poll.init()
	ep.wg.Go(ep.acceptLoop)
	if onDemand() {
		ep.wg.Go(ep.acceptPeerLoop)
	}
	ep.wg.Go(ep.completionLoop)
	return 0
}

func (ep *endpoint) close() C.int {
	if r := ep.shut(); r != 0 {
		return r
	}
	ep.stop()
	ep.mu.Lock()
	ep.room.Broadcast()
	if ep.ueWaits > 0 {
		logf("spray: endpoint %s: %d deliveries waited for room among unexpected messages", ep.name, ep.ueWaits)
	}
	ep.mu.Unlock()
	ep.sp.Close()
	ep.wg.Wait()
	ep.mu.Lock()
	for k := range ep.unexp {
		for _, m := range ep.unexp[k] {
			m.m.Release()
		}
		ep.unexp[k] = nil
	}
	for _, m := range ep.claimed {
		m.m.Release()
	}
	clear(ep.claimed)
	if ep.av != nil {
		ep.av.release()
	}
	for _, b := range ep.bound {
		b.Add(-1)
	}
	ep.bound = nil
	for _, q := range ep.cqs {
		q.removeEndpoint(ep)
	}
	ep.cqs = nil
	for _, c := range ep.cntrs {
		c.removeEndpoint(ep)
	}
	ep.cntrs = nil
	ep.mu.Unlock()
	ep.dom.removeEndpoint(ep)
	ep.dom.release()
	return 0
}

func (ep *endpoint) bind(bh C.uintptr_t, flags C.uint64_t) C.int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.closed.Load() {
		return -C.FI_EINVAL
	}
	if ep.enabled {
		return -C.FI_EOPBADSTATE
	}
	if av, ok := object[*addrVec](bh); ok {
		if ep.av != nil || av.closed.Load() || av.dom != ep.dom {
			return -C.FI_EINVAL
		}
		av.hold()
		ep.av = av
		return 0
	}
	if q, ok := object[*complQueue](bh); ok {
		if q.closed.Load() || flags&^C.uint64_t(C.FI_TRANSMIT|C.FI_RECV|C.FI_SELECTIVE_COMPLETION) != 0 {
			return -C.FI_EINVAL
		}
		if flags&(C.FI_TRANSMIT|C.FI_RECV) == 0 {
			return -C.FI_EINVAL
		}
		if (flags&C.FI_TRANSMIT != 0 && ep.txcq != nil) || (flags&C.FI_RECV != 0 && ep.rxcq != nil) {
			return -C.FI_EINVAL
		}
		q.bound.Add(1)
		ep.bound = append(ep.bound, &q.bound)
		ep.cqs = append(ep.cqs, q)
		q.addEndpoint(ep)
		sel := flags&C.FI_SELECTIVE_COMPLETION != 0
		if flags&C.FI_TRANSMIT != 0 {
			ep.txcq, ep.txSel = q, sel
		}
		if flags&C.FI_RECV != 0 {
			ep.rxcq, ep.rxSel = q, sel
		}
		return 0
	}
	if c, ok := object[*counter](bh); ok {
		bits := []C.uint64_t{C.FI_SEND, C.FI_RECV, C.FI_READ, C.FI_WRITE, C.FI_REMOTE_READ, C.FI_REMOTE_WRITE}
		all := C.uint64_t(0)
		for _, b := range bits {
			all |= b
		}
		if flags&all == 0 || flags&^all != 0 || c.closed.Load() {
			return -C.FI_EINVAL
		}
		for i, b := range bits {
			if flags&b != 0 {
				ep.cntr[i] = c
			}
		}
		c.bound.Add(1)
		ep.bound = append(ep.bound, &c.bound)
		ep.cntrs = append(ep.cntrs, c)
		c.addEndpoint(ep)
		return 0
	}
	if q, ok := object[*eventQueue](bh); ok {
		ep.eq = q
		return 0
	}
	return -C.FI_EINVAL
}

func (ep *endpoint) control(cmd C.int, arg unsafe.Pointer) C.int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	switch cmd {
	case C.FI_ENABLE:
		if ep.txcq == nil && ep.caps&(C.FI_MSG|C.FI_TAGGED|C.FI_RMA) != 0 && ep.caps&(C.FI_SEND|C.FI_READ|C.FI_WRITE) != 0 {
			return -C.FI_ENOCQ
		}
		if ep.rxcq == nil && ep.caps&(C.FI_MSG|C.FI_TAGGED) != 0 && ep.caps&C.FI_RECV != 0 {
			return -C.FI_ENOCQ
		}
		if ep.av == nil {
			return -C.FI_ENOAV
		}
		ep.enabled = true
		return 0
	case C.FI_GETOPSFLAG, C.FI_SETOPSFLAG:
		if arg == nil {
			return -C.FI_EINVAL
		}
		p := (*C.uint64_t)(arg)
		dst := &ep.txFlags
		if *p&C.FI_RECV != 0 {
			dst = &ep.rxFlags
		}
		if cmd == C.FI_GETOPSFLAG {
			*p = *dst
		} else {
			*dst = *p &^ (C.FI_TRANSMIT | C.FI_RECV)
		}
		return 0
	}
	return -C.FI_ENOSYS
}

//export goGetname
func goGetname(h C.uintptr_t, addr unsafe.Pointer, n *C.size_t) C.int {
	ep, ok := object[*endpoint](h)
	if !ok || ep.closed.Load() {
		return -C.FI_EINVAL
	}
	if *n < nameLen || addr == nil {
		*n = nameLen
		return -C.FI_ETOOSMALL
	}
	putSockaddrIn(addr, ep.name)
	*n = nameLen
	return 0
}

//export goSizeLeft
func goSizeLeft(h C.uintptr_t, tx C.int) C.ssize_t {
	ep, ok := object[*endpoint](h)
	if !ok || ep.closed.Load() {
		return -C.FI_EINVAL
	}
	if tx != 0 {
		return C.ssize_t(max(0, queueSize-ep.txOut.Load()))
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return C.ssize_t(max(0, queueSize-len(ep.posted[0])-len(ep.posted[1])))
}

// iovs copies the application's iovec array and checks it.
func iovs(iov *C.struct_iovec, count C.size_t) ([]C.struct_iovec, int, bool) {
	if count > iovLimit || (count > 0 && iov == nil) {
		return nil, 0, false
	}
	v := append([]C.struct_iovec(nil), unsafe.Slice(iov, count)...)
	n := 0
	for _, x := range v {
		if x.iov_len > 0 && x.iov_base == nil {
			return nil, 0, false
		}
		n += int(x.iov_len)
	}
	return v, n, true
}

// gather copies the iovecs' bytes into b.
func gather(b []byte, v []C.struct_iovec) {
	for _, x := range v {
		b = b[copy(b, unsafe.Slice((*byte)(x.iov_base), x.iov_len)):]
	}
}

// scatter copies b into the iovecs and returns how many bytes fit.
func scatter(v []C.struct_iovec, b []byte) int {
	n := 0
	for _, x := range v {
		if len(b) == 0 {
			break
		}
		k := copy(unsafe.Slice((*byte)(x.iov_base), x.iov_len), b)
		b, n = b[k:], n+k
	}
	return n
}

//export goSend
func goSend(h C.uintptr_t, iov *C.struct_iovec, count C.size_t, dest, tag, data C.uint64_t, ctx unsafe.Pointer, flags C.uint64_t) C.ssize_t {
	ep, ok := object[*endpoint](h)
	if !ok || ep.closed.Load() {
		return -C.FI_EINVAL
	}
	tagged := flags&flagTagged != 0
	if tagged && ep.caps&C.FI_TAGGED == 0 || !tagged && ep.caps&C.FI_MSG == 0 {
		return -C.FI_EOPNOTSUPP
	}
	v, n, ok := iovs(iov, count)
	if !ok || n > maxMsgSize {
		return -C.FI_EINVAL
	}
	if flags&flagOpFlags != 0 {
		flags |= ep.txFlags
	}
	inject := flags&(flagInject|C.FI_INJECT) != 0
	if inject && n > injectSize {
		return -C.FI_EINVAL
	}
	buf := getBuf(hdrLen + n)
	clear(buf[:hdrLen])
	buf[0] = kindMsg
	cf := C.uint64_t(C.FI_SEND | C.FI_MSG)
	if tagged {
		buf[0], cf = kindTagged, C.FI_SEND|C.FI_TAGGED
	}
	if flags&flagData != 0 {
		buf[1] = hdrHasData
	}
	binary.LittleEndian.PutUint64(buf[8:], uint64(tag))
	binary.LittleEndian.PutUint64(buf[16:], uint64(data))
	gather(buf[hdrLen:], v)
	op := &txOp{ctx: ctx, flags: cf, n: n, cnt: cntSend, buf: buf,
		wr:   transport.WorkRequest{Op: transport.OpSend, Data: buf},
		comp: !(flags&flagInject != 0) && (!ep.txSel || flags&C.FI_COMPLETION != 0)}
	return ep.submit(dest, op)
}

// submit queues op for the peer at dest and posts what the connection
// takes now.
func (ep *endpoint) submit(dest C.uint64_t, op *txOp) C.ssize_t {
	ep.mu.Lock()
	if !ep.enabled {
		ep.mu.Unlock()
		return -C.FI_EOPBADSTATE
	}
	if ep.av == nil {
		ep.mu.Unlock()
		return -C.FI_ENOAV
	}
	name, ok := ep.av.lookup(dest)
	if !ok {
		ep.mu.Unlock()
		return -C.FI_EINVAL
	}
	if ep.txOut.Load() >= queueSize {
		ep.mu.Unlock()
		return -C.FI_EAGAIN
	}
	ep.nextID++
	op.id = ep.nextID
	op.wr.ID = op.id
	ep.ops[op.id] = op
	ep.txOut.Add(1)
	p := ep.peers[name]
	if p == nil || p.failed() {
		p = &peer{name: name}
		ep.peers[name] = p
		ep.wg.Go(func() { ep.dial(p) })
	}
	ep.mu.Unlock()
	op.peer = p
	p.mu.Lock()
	p.queue = append(p.queue, op)
	p.mu.Unlock()
	ep.flush(p)
	return 0
}

// drop forgets p after an operation on its connection failed (a refused
// WRITE or READ fails the QP, as in verbs): the next operation to that
// name dials a new connection.
func (ep *endpoint) drop(p *peer) {
	ep.mu.Lock()
	if ep.peers[p.name] == p {
		delete(ep.peers, p.name)
	}
	ep.mu.Unlock()
	p.mu.Lock()
	c, qp := p.conn, p.qp
	if p.err == nil {
		p.err = net.ErrClosed
	}
	p.mu.Unlock()
	if c != nil {
		ep.wg.Go(func() { c.Close() })
	}
	if qp != nil {
		ep.wg.Go(func() { peerConn{qp}.Close() })
	}
}

func (p *peer) failed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err != nil
}

// dial connects to p and sends the hello that names this endpoint.
func (ep *endpoint) dial(p *peer) {
	ctx, cancel := context.WithTimeout(ep.ctx, 30*time.Second)
	defer cancel()
	var c *spray.Conn
	var qp *transport.Conn
	var err error
	if onDemand() {
		qp, err = ep.reachOnDemand(ctx, p)
	} else {
		c, err = ep.sp.Dial(ctx, p.name.String(), service)
	}
	if err == nil {
		hello := make([]byte, hdrLen+nameLen)
		hello[0] = kindHello
		a := ep.name.Addr().As4()
		copy(hello[hdrLen:], a[:])
		binary.BigEndian.PutUint16(hello[hdrLen+4:], ep.name.Port())
		ep.mu.Lock()
		ep.nextID++
		op := &txOp{id: ep.nextID, hello: true, wr: transport.WorkRequest{ID: ep.nextID, Op: transport.OpSend, Data: hello}}
		ep.ops[op.id] = op
		ep.mu.Unlock()
		p.mu.Lock()
		p.queue = append([]*txOp{op}, p.queue...)
		p.conn, p.qp = c, qp
		p.mu.Unlock()
		ep.flush(p)
		return
	}
	logf("spray: connecting to %s: %v", p.name, err)
	p.mu.Lock()
	p.err = err
	q := p.queue
	p.queue = nil
	p.mu.Unlock()
	for _, op := range q {
		ep.finish(op, err)
	}
}

// flush posts p's queued operations while its send queue takes them.
// Operations the connection refused complete after p.mu is released
// (finish drops the peer, which takes p.mu).
func (ep *endpoint) flush(p *peer) {
	var failed []*txOp
	var errs []error
	p.mu.Lock()
	for (p.conn != nil || p.qp != nil) && len(p.queue) > 0 {
		op := p.queue[0]
		err := ep.post(p, op.wr)
		if errors.Is(err, transport.ErrQueueFull) {
			ep.stallMu.Lock()
			ep.stalled[p] = struct{}{}
			ep.stallMu.Unlock()
			break
		}
		p.queue = p.queue[1:]
		if err != nil {
			failed, errs = append(failed, op), append(errs, err)
		}
	}
	p.mu.Unlock()
	for i, op := range failed {
		ep.finish(op, errs[i])
	}
}

// completionLoop turns the transport's completions into libfabric ones
// and posts what waited for send queue room, while the application does
// not poll (progress.go).
func (ep *endpoint) completionLoop() {
	cq := ep.sp.CQ()
	for {
		if !ep.poll.pause(ep.ctx) {
			return
		}
		if err := cq.Wait(ep.ctx); err != nil {
			return
		}
		ep.reap()
	}
}

// finish completes op with err (nil: success).
func (ep *endpoint) finish(op *txOp, err error) {
	ep.mu.Lock()
	delete(ep.ops, op.id)
	q, c := ep.txcq, ep.cntr[op.cnt]
	ep.mu.Unlock()
	if err != nil && op.peer != nil {
		ep.drop(op.peer)
	}
	if op.hello {
		return
	}
	ep.txOut.Add(-1)
	if err == nil && op.readTo != nil {
		scatter(op.readTo, op.buf)
	}
	if op.buf != nil {
		putBuf(op.buf) // the transport is done with it
		op.buf = nil
	}
	if c != nil {
		c.add(err == nil)
	}
	if q == nil || err == nil && !op.comp {
		return
	}
	e := entry{ctx: op.ctx, flags: op.flags, src: C.FI_ADDR_NOTAVAIL}
	if err != nil {
		e.err, e.prov = code(err), provErrno(err)
	} else {
		e.len = C.size_t(op.n)
	}
	q.push(e)
}

// acceptLoop takes the connections peers dial to send to this endpoint.
func (ep *endpoint) acceptLoop() {
	for {
		c, err := ep.ln.Accept(ep.ctx)
		if err != nil {
			return
		}
		ep.wg.Go(func() { ep.serve(c, c.Protection() == spray.ProtectionClear) })
	}
}

// serve receives a peer's messages, while the application does not poll
// (progress.go): its hello, then messages to match.
func (ep *endpoint) serve(c recvConn, clear bool) {
	rc := &rxConn{c: c, clear: clear}
	ep.poll.addConn(rc)
	defer ep.poll.removeConn(rc)
	for {
		if !ep.poll.pause(ep.ctx) {
			return
		}
		rc.mu.Lock()
		m, err := c.Recv(ep.ctx)
		if err != nil {
			rc.mu.Unlock()
			return
		}
		ok := ep.handle(rc, m, true)
		rc.mu.Unlock()
		if !ok {
			return
		}
	}
}

// handle takes one message of rc, with rc.mu held. wait: a delivery may
// wait for room among the unexpected messages (serve goroutines only).
// false: the connection is closed or the endpoint closing.
func (ep *endpoint) handle(rc *rxConn, m transport.Message, wait bool) bool {
	if m.HasImm && m.Data == nil {
		ep.remoteWrite(m)
		return true
	}
	b := m.Data
	if len(b) < hdrLen {
		m.Release()
		return true
	}
	switch b[0] {
	case kindHello:
		// The name's address must be the one the connection manager
		// checked (its QP's), so that a peer cannot pose as another
		// host in FI_SOURCE; only its port is taken on trust.
		if len(b) < hdrLen+6 {
			m.Release()
			rc.c.Close()
			return false
		}
		src := netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[hdrLen:hdrLen+4])), binary.BigEndian.Uint16(b[hdrLen+4:]))
		m.Release()
		if src.Addr() != rc.c.Remote().IP.Unmap() {
			logf("spray: %s named itself %s: connection closed", rc.c.Remote().IP, src)
			rc.c.Close()
			return false
		}
		rc.src = src
	case kindMsg, kindTagged:
		in := &inMsg{src: rc.src, tagged: b[0] == kindTagged, tag: binary.LittleEndian.Uint64(b[8:]),
			data: binary.LittleEndian.Uint64(b[16:]), hasDat: b[1]&hdrHasData != 0, body: b[hdrLen:], m: m}
		return ep.deliver(in, wait)
	default:
		m.Release()
	}
	return true
}

func kindIndex(tagged bool) int {
	if tagged {
		return 1
	}
	return 0
}

// matches says whether the posted receive r takes message in.
func (r *recvOp) matches(in *inMsg) bool {
	if r.src.IsValid() && r.src != in.src {
		return false
	}
	return !in.tagged || (r.tag^in.tag)&^r.ignore == 0
}

// deliver hands in to the first posted receive that matches it, or holds
// it as unexpected. When the unexpected messages are at their bound it
// waits for room: the connection stops taking messages and the transport
// holds the sender back (receiver not ready). Without wait (a polling
// reader, which checked for room before it took the message) it never
// waits. false: the endpoint closed.
func (ep *endpoint) deliver(in *inMsg, wait bool) bool {
	k := kindIndex(in.tagged)
	ep.mu.Lock()
	for i, r := range ep.posted[k] {
		if r.matches(in) {
			ep.posted[k] = append(ep.posted[k][:i], ep.posted[k][i+1:]...)
			ep.mu.Unlock()
			ep.complete(r, in)
			return true
		}
	}
	waited := false
	// Claimed messages count against the bound until they are received.
	for wait && (len(ep.unexp[0])+len(ep.unexp[1])+len(ep.claimed) >= ep.set.maxUE || ep.ueBytes+int64(len(in.body)) > ep.set.maxUEB && ep.ueBytes > 0) {
		if ep.closed.Load() {
			ep.mu.Unlock()
			in.m.Release()
			return false
		}
		if !waited {
			ep.ueWaits++
			waited = true
		}
		ep.room.Wait()
		// A receive posted meanwhile may take it now.
		for i, r := range ep.posted[k] {
			if r.matches(in) {
				ep.posted[k] = append(ep.posted[k][:i], ep.posted[k][i+1:]...)
				ep.mu.Unlock()
				ep.complete(r, in)
				return true
			}
		}
	}
	ep.unexp[k] = append(ep.unexp[k], in)
	ep.ueBytes += int64(len(in.body))
	ep.mu.Unlock()
	return true
}

// complete copies in into r's buffers and writes r's completion:
// FI_ETRUNC with the bytes that did not fit when r is too short.
func (ep *endpoint) complete(r *recvOp, in *inMsg) {
	n := scatter(r.iov, in.body)
	total := len(in.body)
	in.m.Release()
	ep.mu.Lock()
	q, c, av := ep.rxcq, ep.cntr[cntRecv], ep.av
	ep.mu.Unlock()
	e := entry{ctx: r.ctx, flags: C.FI_RECV | C.FI_MSG, len: C.size_t(n), tag: C.uint64_t(in.tag), src: av.reverse(in.src)}
	if in.tagged {
		e.flags = C.FI_RECV | C.FI_TAGGED
	}
	if len(r.iov) > 0 {
		e.buf = r.iov[0].iov_base
	}
	if in.hasDat {
		e.flags |= C.FI_REMOTE_CQ_DATA
		e.data = C.uint64_t(in.data)
	}
	if n < total {
		e.err, e.olen = C.FI_ETRUNC, C.size_t(total-n)
	}
	if c != nil {
		c.add(e.err == 0)
	}
	if q != nil && (e.err != 0 || r.comp) {
		q.push(e)
	}
}

//export goRecv
func goRecv(h C.uintptr_t, iov *C.struct_iovec, count C.size_t, src, tag, ignore C.uint64_t, ctx unsafe.Pointer, flags C.uint64_t) C.ssize_t {
	ep, ok := object[*endpoint](h)
	if !ok || ep.closed.Load() {
		return -C.FI_EINVAL
	}
	tagged := flags&flagTagged != 0
	if tagged && ep.caps&C.FI_TAGGED == 0 || !tagged && ep.caps&C.FI_MSG == 0 {
		return -C.FI_EOPNOTSUPP
	}
	v, _, ok := iovs(iov, count)
	if !ok {
		return -C.FI_EINVAL
	}
	if flags&flagOpFlags != 0 {
		flags |= ep.rxFlags
	}
	if flags&C.FI_MULTI_RECV != 0 {
		return -C.FI_EOPNOTSUPP
	}
	r := &recvOp{iov: v, tag: uint64(tag), ignore: uint64(ignore), ctx: ctx,
		comp: !ep.rxSel || flags&C.FI_COMPLETION != 0}
	ep.mu.Lock()
	if !ep.enabled {
		ep.mu.Unlock()
		return -C.FI_EOPBADSTATE
	}
	if src != C.FI_ADDR_UNSPEC && ep.caps&C.FI_DIRECTED_RECV != 0 {
		name, ok := ep.av.lookup(src)
		if !ok {
			ep.mu.Unlock()
			return -C.FI_EINVAL
		}
		r.src = name
	}
	k := kindIndex(tagged)
	if tagged && flags&(C.FI_PEEK|C.FI_CLAIM) != 0 {
		return ep.peekClaim(r, flags) // unlocks
	}
	for i, in := range ep.unexp[k] {
		if r.matches(in) {
			ep.takeUnexpected(k, i)
			ep.mu.Unlock()
			ep.complete(r, in)
			return 0
		}
	}
	if len(ep.posted[0])+len(ep.posted[1]) >= queueSize {
		ep.mu.Unlock()
		return -C.FI_EAGAIN
	}
	ep.posted[k] = append(ep.posted[k], r)
	ep.mu.Unlock()
	return 0
}

// takeUnexpected removes unexpected message i of kind k and wakes a
// delivery waiting for room; called with mu held.
func (ep *endpoint) takeUnexpected(k, i int) *inMsg {
	in := ep.unexp[k][i]
	ep.unexp[k] = append(ep.unexp[k][:i], ep.unexp[k][i+1:]...)
	ep.ueBytes -= int64(len(in.body))
	ep.room.Broadcast()
	return in
}

// peekClaim serves FI_PEEK (is a matching message there? FI_CLAIM keeps
// it for a later FI_CLAIM receive with the same context, FI_DISCARD drops
// it) and FI_CLAIM (receive the message claimed with this context).
// Called with mu held; unlocks it.
func (ep *endpoint) peekClaim(r *recvOp, flags C.uint64_t) C.ssize_t {
	q, av := ep.rxcq, ep.av
	if flags&C.FI_PEEK == 0 {
		in, ok := ep.claimed[r.ctx]
		if !ok {
			ep.mu.Unlock()
			return -C.FI_EINVAL
		}
		delete(ep.claimed, r.ctx)
		ep.ueBytes -= int64(len(in.body))
		ep.room.Broadcast()
		ep.mu.Unlock()
		if flags&C.FI_DISCARD != 0 {
			in.m.Release()
			if q != nil {
				q.push(entry{ctx: r.ctx, flags: C.FI_RECV | C.FI_TAGGED, tag: C.uint64_t(in.tag), src: av.reverse(in.src)})
			}
			return 0
		}
		ep.complete(r, in)
		return 0
	}
	for i, in := range ep.unexp[1] {
		if !r.matches(in) {
			continue
		}
		if flags&(C.FI_CLAIM|C.FI_DISCARD) != 0 {
			ep.takeUnexpected(1, i)
			if flags&C.FI_CLAIM != 0 {
				if old, ok := ep.claimed[r.ctx]; ok {
					// A context names one claim: the earlier one is dropped.
					ep.ueBytes -= int64(len(old.body))
					old.m.Release()
				}
				ep.claimed[r.ctx] = in
				ep.ueBytes += int64(len(in.body))
			}
		}
		ep.mu.Unlock()
		e := entry{ctx: r.ctx, flags: C.FI_RECV | C.FI_TAGGED, len: C.size_t(len(in.body)), tag: C.uint64_t(in.tag), src: av.reverse(in.src)}
		if in.hasDat {
			e.flags |= C.FI_REMOTE_CQ_DATA
			e.data = C.uint64_t(in.data)
		}
		if flags&C.FI_DISCARD != 0 && flags&C.FI_CLAIM == 0 {
			in.m.Release()
		}
		if q != nil {
			q.push(e)
		}
		return 0
	}
	ep.mu.Unlock()
	if q != nil {
		q.push(entry{ctx: r.ctx, flags: C.FI_RECV | C.FI_TAGGED, tag: C.uint64_t(r.tag), err: C.FI_ENOMSG, src: C.FI_ADDR_NOTAVAIL})
	}
	return 0
}

//export goCancel
func goCancel(h C.uintptr_t, ctx unsafe.Pointer) C.ssize_t {
	ep, ok := object[*endpoint](h)
	if !ok || ep.closed.Load() {
		return -C.FI_EINVAL
	}
	ep.mu.Lock()
	for k := range ep.posted {
		for i, r := range ep.posted[k] {
			if r.ctx != ctx {
				continue
			}
			ep.posted[k] = append(ep.posted[k][:i], ep.posted[k][i+1:]...)
			q := ep.rxcq
			ep.mu.Unlock()
			f := C.uint64_t(C.FI_RECV | C.FI_MSG)
			if k == 1 {
				f = C.FI_RECV | C.FI_TAGGED
			}
			if q != nil {
				q.push(entry{ctx: ctx, flags: f, tag: C.uint64_t(r.tag), err: C.FI_ECANCELED, src: C.FI_ADDR_NOTAVAIL})
			}
			return 0
		}
	}
	ep.mu.Unlock()
	return -C.FI_ENOENT
}
