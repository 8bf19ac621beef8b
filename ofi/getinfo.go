package main

/*
#include <netinet/in.h>
#include <string.h>
#include "prov.h"
*/
import "C"

import (
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/sprayfabric/spray"
	"github.com/sprayfabric/spray/cc"
)

// What the provider offers. RMA capabilities are offered only where the
// application accepts provider-chosen keys (FI_MR_PROV_KEY).
const (
	msgCaps    = C.FI_MSG | C.FI_TAGGED | C.FI_SEND | C.FI_RECV | C.FI_SOURCE | C.FI_DIRECTED_RECV
	rmaCaps    = C.FI_RMA | C.FI_READ | C.FI_WRITE | C.FI_REMOTE_READ | C.FI_REMOTE_WRITE
	commCaps   = C.FI_LOCAL_COMM | C.FI_REMOTE_COMM
	allCaps    = msgCaps | rmaCaps | commCaps
	txCapsMask = C.FI_MSG | C.FI_TAGGED | C.FI_SEND | C.FI_RMA | C.FI_READ | C.FI_WRITE
	rxCapsMask = C.FI_MSG | C.FI_TAGGED | C.FI_RECV | C.FI_SOURCE | C.FI_DIRECTED_RECV |
		C.FI_RMA | C.FI_REMOTE_READ | C.FI_REMOTE_WRITE
	// msgOrder: every operation to one peer travels on one QP, which
	// delivers in posting order; a READ runs after what was posted before it.
	msgOrder = C.FI_ORDER_SAS | C.FI_ORDER_SAW | C.FI_ORDER_WAS | C.FI_ORDER_WAW | C.FI_ORDER_RAW | C.FI_ORDER_RAS

	hdrLen      = 24
	maxMsgSize  = 1<<30 - hdrLen // the transport's MaxMessageSize less the header
	injectSize  = 8192
	queueSize   = 1024 // tx and rx queue depth
	iovLimit    = 16
	mrKeySize   = 4 // the transport's remote keys
	nameLen     = C.sizeof_struct_sockaddr_in
	providerVer = 1 // FI_VERSION(0, 1)
)

// settings is what the environment (FI_SPRAY_*) and the hints choose for
// an endpoint.
type settings struct {
	iface  string       // FI_SPRAY_IFACE
	addr   netip.Addr   // FI_SPRAY_ADDR, or the hints' source address
	more   []netip.Addr // FI_SPRAY_ADDR's further addresses, tried in turn when addr is taken
	cmPort uint16       // the connection manager's TCP port; 0: the kernel picks
	port   uint16       // FI_SPRAY_PORT, the UDP port of every endpoint of a job
	link   spray.LinkKind
	maxUE  int           // FI_SPRAY_UNEXPECTED: unexpected messages held
	maxUEB int64         // FI_SPRAY_UNEXPECTED_BYTES: their bytes
	log    bool          // FI_SPRAY_LOG
	busy   time.Duration // FI_SPRAY_BUSY_POLL: transport.Config.BusyPoll
	rate   float64       // FI_SPRAY_LINE_RATE in bytes per second: transport.Config.LineRate
	cc     string        // FI_SPRAY_CC: a congestion controller by cc.ByName's names
}

// envSettings reads the FI_SPRAY_* variables; an invalid value is an
// error naming the variable.
func envSettings() (settings, C.int) {
	s := settings{port: 4791, maxUE: 4096, maxUEB: 256 << 20}
	s.iface = os.Getenv("FI_SPRAY_IFACE")
	if v := os.Getenv("FI_SPRAY_ADDR"); v != "" {
		for i, f := range strings.Split(v, ",") {
			a, err := netip.ParseAddr(strings.TrimSpace(f))
			if err != nil || !a.Is4() {
				logf("spray: FI_SPRAY_ADDR=%q: %q is not an IPv4 address", v, f)
				return s, -C.FI_EINVAL
			}
			if i == 0 {
				s.addr = a
			} else {
				s.more = append(s.more, a)
			}
		}
	}
	if s.iface == "" && !s.addr.IsValid() {
		s.addr = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	if v := os.Getenv("FI_SPRAY_LINK"); v != "" {
		k, err := spray.ParseLinkKind(v)
		if err != nil {
			logf("spray: FI_SPRAY_LINK: %v", err)
			return s, -C.FI_EINVAL
		}
		s.link = k
	}
	for _, e := range []struct {
		name string
		dst  *int64
		max  int64
	}{
		{"FI_SPRAY_PORT", nil, 65535},
		{"FI_SPRAY_CM_PORT", nil, 65535},
		{"FI_SPRAY_UNEXPECTED", nil, 1 << 20},
		{"FI_SPRAY_UNEXPECTED_BYTES", &s.maxUEB, 1 << 40},
	} {
		v := os.Getenv(e.name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 || n > e.max {
			logf("spray: %s=%q: want a number from 1 to %d", e.name, v, e.max)
			return s, -C.FI_EINVAL
		}
		switch e.name {
		case "FI_SPRAY_PORT":
			s.port = uint16(n)
		case "FI_SPRAY_CM_PORT":
			s.cmPort = uint16(n)
		case "FI_SPRAY_UNEXPECTED":
			s.maxUE = int(n)
		default:
			*e.dst = n
		}
	}
	s.log = os.Getenv("FI_SPRAY_LOG") != ""
	if v := os.Getenv("FI_SPRAY_BUSY_POLL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > time.Second {
			logf("spray: FI_SPRAY_BUSY_POLL=%q: want a duration from 0 to 1s, such as 50us", v)
			return s, -C.FI_EINVAL
		}
		s.busy = d
	}
	if v := os.Getenv("FI_SPRAY_CC"); v != "" {
		if _, err := cc.ByName(v, cc.Params{}); err != nil {
			logf("spray: FI_SPRAY_CC: %v", err)
			return s, -C.FI_EINVAL
		}
		s.cc = v
	}
	if v := os.Getenv("FI_SPRAY_LINE_RATE"); v != "" {
		r, ok := parseRate(v)
		if !ok {
			logf("spray: FI_SPRAY_LINE_RATE=%q: want bits per second such as 10g, 25000m or 1e9", v)
			return s, -C.FI_EINVAL
		}
		s.rate = r / 8
	}
	return s, 0
}

// parseRate reads a rate in bits per second with an optional k, m or g
// (powers of 1000) and an optional "bit" suffix.
func parseRate(v string) (float64, bool) {
	v = strings.TrimSuffix(strings.ToLower(v), "bit")
	mult := 1.0
	switch {
	case strings.HasSuffix(v, "k"):
		mult, v = 1e3, v[:len(v)-1]
	case strings.HasSuffix(v, "m"):
		mult, v = 1e6, v[:len(v)-1]
	case strings.HasSuffix(v, "g"):
		mult, v = 1e9, v[:len(v)-1]
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 || f*mult > 1e13 {
		return 0, false
	}
	return f * mult, true
}

func logf(format string, args ...any) {
	if os.Getenv("FI_SPRAY_LOG") == "" {
		return
	}
	os.Stderr.WriteString(sprintf(format, args...) + "\n")
}

// sockaddrIn reads a struct sockaddr_in of n bytes; ok is false for any
// other family or length.
func sockaddrIn(p unsafe.Pointer, n int) (netip.AddrPort, bool) {
	if p == nil || n < nameLen {
		return netip.AddrPort{}, false
	}
	b := unsafe.Slice((*byte)(p), nameLen)
	sa := (*C.struct_sockaddr_in)(p)
	if sa.sin_family != C.AF_INET {
		return netip.AddrPort{}, false
	}
	ip := netip.AddrFrom4([4]byte(b[4:8]))
	return netip.AddrPortFrom(ip, binary.BigEndian.Uint16(b[2:4])), true
}

// putSockaddrIn writes a as a struct sockaddr_in at p.
func putSockaddrIn(p unsafe.Pointer, a netip.AddrPort) {
	b := unsafe.Slice((*byte)(p), nameLen)
	clear(b)
	sa := (*C.struct_sockaddr_in)(p)
	sa.sin_family = C.AF_INET
	binary.BigEndian.PutUint16(b[2:4], a.Port())
	ip := a.Addr().As4()
	copy(b[4:8], ip[:])
}

// mallocSockaddr returns a malloc'd sockaddr_in holding a, for a fi_info
// that fi_freeinfo frees.
func mallocSockaddr(a netip.AddrPort) unsafe.Pointer {
	p := C.calloc(1, nameLen)
	putSockaddrIn(p, a)
	return p
}

// resolve turns a node and service (either may be NULL) into an IPv4
// address and port.
func resolve(node, service *C.char) (netip.AddrPort, bool) {
	var ip netip.Addr
	var port uint16
	if node != nil {
		n := C.GoString(node)
		a, err := netip.ParseAddr(n)
		if err != nil {
			ips, err := net.LookupIP(n)
			if err != nil {
				return netip.AddrPort{}, false
			}
			for _, x := range ips {
				if v4 := x.To4(); v4 != nil {
					a = netip.AddrFrom4([4]byte(v4))
					break
				}
			}
		}
		if !a.Unmap().Is4() {
			return netip.AddrPort{}, false
		}
		ip = a.Unmap()
	}
	if service != nil {
		n, err := strconv.ParseUint(C.GoString(service), 10, 16)
		if err != nil {
			return netip.AddrPort{}, false
		}
		port = uint16(n)
	}
	return netip.AddrPortFrom(ip, port), true
}

// localIface finds the interface of s: by name, by address, or loopback.
func localIface(s settings) (spray.Interface, bool) {
	ifc, err := spray.LookupInterface(s.iface, s.addr)
	if err != nil {
		logf("spray: %v", err)
		return spray.Interface{}, false
	}
	return ifc, true
}

// choice is the outcome of getinfo for one request.
type choice struct {
	set     settings
	ifc     spray.Interface
	caps    C.uint64_t
	dest    netip.AddrPort
	hasDest bool
}

//export goGetinfo
func goGetinfo(version C.uint32_t, node, service *C.char, flags C.uint64_t, hints *C.struct_fi_info, out **C.struct_fi_info) C.int {
	set, r := envSettings()
	if r != 0 {
		return r
	}
	var ch choice
	if hints != nil && hints.src_addr != nil {
		a, ok := sockaddrIn(hints.src_addr, int(hints.src_addrlen))
		if !ok {
			return -C.FI_ENODATA
		}
		set.addr, set.cmPort = a.Addr(), a.Port()
		if !a.Addr().IsUnspecified() {
			set.iface = ""
		}
	}
	if node != nil || service != nil {
		a, ok := resolve(node, service)
		if !ok {
			return -C.FI_ENODATA
		}
		if flags&C.FI_SOURCE != 0 {
			if a.Addr().IsValid() {
				set.addr, set.iface = a.Addr(), ""
			}
			set.cmPort = a.Port()
		} else {
			ch.dest, ch.hasDest = a, true
		}
	}
	if hints != nil && hints.dest_addr != nil {
		a, ok := sockaddrIn(hints.dest_addr, int(hints.dest_addrlen))
		if !ok {
			return -C.FI_ENODATA
		}
		ch.dest, ch.hasDest = a, true
	}
	ifc, ok := localIface(set)
	if !ok {
		return -C.FI_ENODATA
	}
	ch.set, ch.ifc = set, ifc
	if r := ch.match(version, hints); r != 0 {
		return r
	}
	info := C.sp_info_alloc()
	if info == nil {
		return -C.FI_ENOMEM
	}
	ch.fill(info, hints)
	*out = info
	return 0
}

// match checks hints against what the provider offers and sets ch.caps;
// -FI_ENODATA when it cannot serve them.
func (ch *choice) match(version C.uint32_t, h *C.struct_fi_info) C.int {
	ch.caps = allCaps
	if h == nil {
		return 0
	}
	nodata := func(why string) C.int {
		logf("spray: fi_getinfo: %s", why)
		return -C.FI_ENODATA
	}
	rma := true
	if d := h.domain_attr; d != nil {
		mr := d.mr_mode
		if version >= 1<<16|5 && mr != C.FI_MR_BASIC && mr&C.FI_MR_PROV_KEY == 0 {
			rma = false // keys would be the application's; spray's are the transport's
		}
		if d.mr_key_size != 0 && d.mr_key_size < mrKeySize {
			rma = false // the application cannot carry a 4-byte key
		}
		if d.name != nil && C.GoString(d.name) != ch.ifc.Name {
			return nodata("domain " + C.GoString(d.name) + " is not " + ch.ifc.Name)
		}
		if d.cq_data_size > 8 {
			return nodata("cq_data_size above 8")
		}
		if d.caps&^(allCaps) != 0 {
			return nodata("domain caps")
		}
		switch d.av_type {
		case C.FI_AV_UNSPEC, C.FI_AV_MAP, C.FI_AV_TABLE:
		default:
			return nodata("av_type")
		}
		if d.max_ep_tx_ctx > 1 || d.max_ep_rx_ctx > 1 || d.max_ep_stx_ctx > 0 || d.max_ep_srx_ctx > 0 {
			return nodata("scalable or shared contexts")
		}
	}
	offer := C.uint64_t(allCaps)
	if !rma {
		offer &^= rmaCaps
	}
	if h.caps&^offer != 0 {
		return nodata(sprintf("caps %#x not offered (offered %#x)", uint64(h.caps&^offer), uint64(offer)))
	}
	if h.caps != 0 {
		ch.caps = h.caps | commCaps
		if h.caps&(C.FI_MSG|C.FI_TAGGED|C.FI_RMA) != 0 && h.caps&(C.FI_SEND|C.FI_RECV|C.FI_READ|C.FI_WRITE|C.FI_REMOTE_READ|C.FI_REMOTE_WRITE) == 0 {
			// Primary capabilities without direction mean both.
			ch.caps |= offer & (C.FI_SEND | C.FI_RECV | C.FI_READ | C.FI_WRITE | C.FI_REMOTE_READ | C.FI_REMOTE_WRITE)
			if h.caps&C.FI_RMA == 0 {
				ch.caps &^= C.FI_READ | C.FI_WRITE | C.FI_REMOTE_READ | C.FI_REMOTE_WRITE
			}
		}
	} else {
		ch.caps = offer
	}
	switch h.addr_format {
	case C.FI_FORMAT_UNSPEC, C.FI_SOCKADDR, C.FI_SOCKADDR_IN:
	default:
		return nodata("addr_format")
	}
	if e := h.ep_attr; e != nil {
		if e._type != C.FI_EP_UNSPEC && e._type != C.FI_EP_RDM {
			return nodata("endpoint type (spray has FI_EP_RDM)")
		}
		if e.protocol != C.FI_PROTO_UNSPEC {
			return nodata("protocol")
		}
		if e.max_msg_size > maxMsgSize {
			return nodata("max_msg_size")
		}
		if e.tx_ctx_cnt > 1 || e.rx_ctx_cnt > 1 {
			return nodata("several contexts per endpoint")
		}
		if e.auth_key_size > 0 {
			return nodata("auth keys")
		}
	}
	if t := h.tx_attr; t != nil {
		if t.caps&^C.uint64_t(txCapsMask|commCaps) != 0 || t.caps&^(offer) != 0 {
			return nodata("tx caps")
		}
		if t.msg_order&^msgOrder != 0 {
			return nodata("tx msg_order")
		}
		if t.comp_order&^C.FI_ORDER_NONE != 0 {
			return nodata("tx comp_order")
		}
		if t.inject_size > injectSize || t.iov_limit > iovLimit || t.rma_iov_limit > 1 || t.size > queueSize {
			return nodata("tx sizes")
		}
	}
	if r := h.rx_attr; r != nil {
		if r.caps&^C.uint64_t(rxCapsMask|commCaps) != 0 || r.caps&^(offer) != 0 {
			return nodata("rx caps")
		}
		if r.msg_order&^msgOrder != 0 {
			return nodata("rx msg_order")
		}
		if r.comp_order&^C.FI_ORDER_NONE != 0 {
			return nodata("rx comp_order")
		}
		if r.iov_limit > iovLimit || r.size > queueSize {
			return nodata("rx sizes")
		}
	}
	if f := h.fabric_attr; f != nil && f.name != nil && C.GoString(f.name) != "spray" {
		return nodata("fabric name")
	}
	return 0
}

// fill writes the offer into info, echoing the hints' choices where the
// provider can honour either.
func (ch *choice) fill(info, h *C.struct_fi_info) {
	info.caps = ch.caps
	info.mode = 0
	info.addr_format = C.FI_SOCKADDR_IN
	info.src_addrlen = nameLen
	info.src_addr = mallocSockaddr(netip.AddrPortFrom(ch.ifc.IP, ch.set.cmPort))
	if ch.hasDest {
		info.dest_addrlen = nameLen
		info.dest_addr = mallocSockaddr(ch.dest)
	}
	t := info.tx_attr
	t.caps = ch.caps & (txCapsMask | commCaps)
	t.msg_order = msgOrder
	t.comp_order = C.FI_ORDER_NONE
	t.inject_size = injectSize
	t.size = queueSize
	t.iov_limit = iovLimit
	t.rma_iov_limit = 1
	r := info.rx_attr
	r.caps = ch.caps & (rxCapsMask | commCaps)
	r.msg_order = msgOrder
	r.comp_order = C.FI_ORDER_NONE
	r.total_buffered_recv = C.size_t(ch.set.maxUEB)
	r.size = queueSize
	r.iov_limit = iovLimit
	e := info.ep_attr
	e._type = C.FI_EP_RDM
	e.protocol = C.FI_PROTO_UNSPEC
	e.max_msg_size = maxMsgSize
	e.mem_tag_format = 0xaaaaaaaaaaaaaaaa // libfabric's generic format: every tag bit matches
	e.tx_ctx_cnt = 1
	e.rx_ctx_cnt = 1
	d := info.domain_attr
	d.name = C.CString(ch.ifc.Name)
	d.threading = C.FI_THREAD_SAFE
	d.control_progress = C.FI_PROGRESS_AUTO
	d.data_progress = C.FI_PROGRESS_AUTO
	d.resource_mgmt = C.FI_RM_ENABLED
	d.av_type = C.FI_AV_UNSPEC
	d.mr_mode = 0
	if ch.caps&rmaCaps != 0 {
		d.mr_mode = C.FI_MR_PROV_KEY
	}
	d.mr_key_size = mrKeySize
	d.cq_data_size = 8
	d.cq_cnt = 1024
	d.ep_cnt = 256
	d.tx_ctx_cnt = 256
	d.rx_ctx_cnt = 256
	d.max_ep_tx_ctx = 1
	d.max_ep_rx_ctx = 1
	d.cntr_cnt = 1024
	d.mr_iov_limit = 1
	d.mr_cnt = 65536
	d.caps = commCaps
	if h != nil && h.domain_attr != nil {
		hd := h.domain_attr
		if hd.threading != C.FI_THREAD_UNSPEC {
			d.threading = hd.threading
		}
		if hd.control_progress != C.FI_PROGRESS_UNSPEC {
			d.control_progress = hd.control_progress
		}
		if hd.data_progress != C.FI_PROGRESS_UNSPEC {
			d.data_progress = hd.data_progress
		}
		if hd.resource_mgmt != C.FI_RM_UNSPEC {
			d.resource_mgmt = hd.resource_mgmt
		}
		if hd.av_type != C.FI_AV_UNSPEC {
			d.av_type = hd.av_type
		}
	}
	if h != nil && h.tx_attr != nil {
		t.op_flags = h.tx_attr.op_flags
	}
	if h != nil && h.rx_attr != nil {
		r.op_flags = h.rx_attr.op_flags
	}
	f := info.fabric_attr
	f.name = C.CString("spray")
	f.prov_version = providerVer
}
