// The C side of the spray provider: fi_prov_ini and the ops tables of every
// object. Each function unpacks its arguments and calls one exported Go
// function with the object's handle; Go keeps all the state. Buffers named
// by single pointers become a one-element iovec, so that Go sees one shape
// per operation.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include "prov.h"
#include "_cgo_export.h"

#define SPRAY_VERSION FI_VERSION(0, 1)

static int sp_close(struct fid *fid);
static int sp_bind(struct fid *fid, struct fid *bfid, uint64_t flags);
static int sp_control(struct fid *fid, int command, void *arg);

static int sp_ops_open(struct fid *fid, const char *name, uint64_t flags, void **ops, void *context)
{
	return -FI_ENOSYS;
}

static struct fi_ops sp_fid_ops = {
	.size = sizeof(struct fi_ops),
	.close = sp_close,
	.bind = sp_bind,
	.control = sp_control,
	.ops_open = sp_ops_open,
};

uintptr_t sp_handle(struct fid *fid)
{
	if (!fid)
		return 0;
	switch (fid->fclass) {
	case FI_CLASS_FABRIC: return ((sp_fabric *)fid)->h;
	case FI_CLASS_DOMAIN: return ((sp_domain *)fid)->h;
	case FI_CLASS_EP: return ((sp_ep *)fid)->h;
	case FI_CLASS_AV: return ((sp_av *)fid)->h;
	case FI_CLASS_CQ: return ((sp_cq *)fid)->h;
	case FI_CLASS_CNTR: return ((sp_cntr *)fid)->h;
	case FI_CLASS_EQ: return ((sp_eq *)fid)->h;
	case FI_CLASS_MR: return ((sp_mr *)fid)->h;
	}
	return 0;
}

// sp_clear forgets a closed object's handle. The structure itself stays
// allocated (a few dozen bytes an object), so that a call on a closed
// object fails with -FI_EINVAL instead of reading freed memory.
static void sp_clear(struct fid *fid)
{
	switch (fid->fclass) {
	case FI_CLASS_FABRIC: ((sp_fabric *)fid)->h = 0; break;
	case FI_CLASS_DOMAIN: ((sp_domain *)fid)->h = 0; break;
	case FI_CLASS_EP: ((sp_ep *)fid)->h = 0; break;
	case FI_CLASS_AV: ((sp_av *)fid)->h = 0; break;
	case FI_CLASS_CQ: ((sp_cq *)fid)->h = 0; break;
	case FI_CLASS_CNTR: ((sp_cntr *)fid)->h = 0; break;
	case FI_CLASS_EQ: ((sp_eq *)fid)->h = 0; break;
	case FI_CLASS_MR: ((sp_mr *)fid)->h = 0; break;
	}
}

// A handle is set only once Go made the object: a closed or foreign fid
// has none.
static int sp_close(struct fid *fid)
{
	uintptr_t h = sp_handle(fid);
	int ret;

	if (!h)
		return -FI_EINVAL;
	ret = goClose(h);
	if (ret)
		return ret;
	sp_clear(fid);
	return 0;
}

static int sp_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	uintptr_t h = sp_handle(fid), bh = sp_handle(bfid);

	if (!h || !bh || bfid->ops != &sp_fid_ops)
		return -FI_EINVAL;
	return goBind(h, bh, (int)bfid->fclass, flags);
}

static int sp_control(struct fid *fid, int command, void *arg)
{
	uintptr_t h = sp_handle(fid);

	if (!h)
		return -FI_EINVAL;
	return goControl(h, command, arg);
}

/* Fabric */

static int sp_domain_open(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **dom, void *context);
static int sp_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr, struct fid_eq **eq, void *context);

static int sp_passive_ep(struct fid_fabric *fabric, struct fi_info *info, struct fid_pep **pep, void *context)
{
	return -FI_ENOSYS;
}

static int sp_wait_open(struct fid_fabric *fabric, struct fi_wait_attr *attr, struct fid_wait **waitset)
{
	return -FI_ENOSYS;
}

// trywait: the wait objects are always ready to be waited on when every
// CQ is empty; Go answers for each.
static int sp_trywait(struct fid_fabric *fabric, struct fid **fids, int count)
{
	int i;

	for (i = 0; i < count; i++) {
		if (!fids[i] || fids[i]->fclass != FI_CLASS_CQ)
			continue;
		if (__atomic_load_n(&((sp_cq *)fids[i])->ready, __ATOMIC_ACQUIRE) > 0)
			return -FI_EAGAIN;
	}
	return 0;
}

static int sp_domain2(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **dom, uint64_t flags, void *context)
{
	if (flags)
		return -FI_EINVAL;
	return sp_domain_open(fabric, info, dom, context);
}

static struct fi_ops_fabric sp_fabric_ops = {
	.size = sizeof(struct fi_ops_fabric),
	.domain = sp_domain_open,
	.passive_ep = sp_passive_ep,
	.eq_open = sp_eq_open,
	.wait_open = sp_wait_open,
	.trywait = sp_trywait,
	.domain2 = sp_domain2,
};

void sp_init_fabric(sp_fabric *o, void *context)
{
	o->f.fid.fclass = FI_CLASS_FABRIC;
	o->f.fid.context = context;
	o->f.fid.ops = &sp_fid_ops;
	o->f.ops = &sp_fabric_ops;
}

static int sp_fabric_open(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
	sp_fabric *o = calloc(1, sizeof(*o));
	int ret;

	if (!o)
		return -FI_ENOMEM;
	sp_init_fabric(o, context);
	ret = goFabric(attr, o);
	if (ret) {
		free(o);
		return ret;
	}
	*fabric = &o->f;
	return 0;
}

/* Domain */

static int sp_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **av, void *context);
static int sp_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **cq, void *context);
static int sp_cntr_open(struct fid_domain *domain, struct fi_cntr_attr *attr, struct fid_cntr **cntr, void *context);
static int sp_endpoint(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep, void *context);

static int sp_scalable_ep(struct fid_domain *domain, struct fi_info *info, struct fid_ep **sep, void *context)
{
	return -FI_ENOSYS;
}

static int sp_poll_open(struct fid_domain *domain, struct fi_poll_attr *attr, struct fid_poll **pollset)
{
	return -FI_ENOSYS;
}

static int sp_stx_ctx(struct fid_domain *domain, struct fi_tx_attr *attr, struct fid_stx **stx, void *context)
{
	return -FI_ENOSYS;
}

static int sp_srx_ctx(struct fid_domain *domain, struct fi_rx_attr *attr, struct fid_ep **rx_ep, void *context)
{
	return -FI_ENOSYS;
}

static int sp_query_atomic(struct fid_domain *domain, enum fi_datatype datatype, enum fi_op op, struct fi_atomic_attr *attr, uint64_t flags)
{
	return -FI_EOPNOTSUPP;
}

static int sp_query_collective(struct fid_domain *domain, enum fi_collective_op coll, struct fi_collective_attr *attr, uint64_t flags)
{
	return -FI_EOPNOTSUPP;
}

static int sp_endpoint2(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep, uint64_t flags, void *context)
{
	if (flags)
		return -FI_EINVAL;
	return sp_endpoint(domain, info, ep, context);
}

static struct fi_ops_domain sp_domain_ops = {
	.size = sizeof(struct fi_ops_domain),
	.av_open = sp_av_open,
	.cq_open = sp_cq_open,
	.endpoint = sp_endpoint,
	.scalable_ep = sp_scalable_ep,
	.cntr_open = sp_cntr_open,
	.poll_open = sp_poll_open,
	.stx_ctx = sp_stx_ctx,
	.srx_ctx = sp_srx_ctx,
	.query_atomic = sp_query_atomic,
	.query_collective = sp_query_collective,
	.endpoint2 = sp_endpoint2,
};

static int sp_mr_open(struct fid *fid, const struct iovec *iov, size_t count, uint64_t access,
		      uint64_t offset, uint64_t requested_key, uint64_t flags, struct fid_mr **mr, void *context)
{
	uintptr_t h = sp_handle(fid);
	sp_mr *o;
	int ret;

	if (!h || fid->fclass != FI_CLASS_DOMAIN || !mr || (count && !iov))
		return -FI_EINVAL;
	o = calloc(1, sizeof(*o));
	if (!o)
		return -FI_ENOMEM;
	sp_init_mr(o, context);
	ret = goMRReg(h, (struct iovec *)iov, count, access, offset, requested_key, flags, o);
	if (ret) {
		free(o);
		return ret;
	}
	*mr = &o->f;
	return 0;
}

static int sp_mr_reg(struct fid *fid, const void *buf, size_t len, uint64_t access, uint64_t offset,
		     uint64_t requested_key, uint64_t flags, struct fid_mr **mr, void *context)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };

	return sp_mr_open(fid, &iov, 1, access, offset, requested_key, flags, mr, context);
}

static int sp_mr_regattr(struct fid *fid, const struct fi_mr_attr *attr, uint64_t flags, struct fid_mr **mr)
{
	if (!attr)
		return -FI_EINVAL;
	if (attr->iface != FI_HMEM_SYSTEM)
		return -FI_EOPNOTSUPP;
	return sp_mr_open(fid, attr->mr_iov, attr->iov_count, attr->access, attr->offset,
			  attr->requested_key, flags, mr, attr->context);
}

static struct fi_ops_mr sp_mr_ops = {
	.size = sizeof(struct fi_ops_mr),
	.reg = sp_mr_reg,
	.regv = sp_mr_open,
	.regattr = sp_mr_regattr,
};

void sp_init_domain(sp_domain *o, void *context)
{
	o->f.fid.fclass = FI_CLASS_DOMAIN;
	o->f.fid.context = context;
	o->f.fid.ops = &sp_fid_ops;
	o->f.ops = &sp_domain_ops;
	o->f.mr = &sp_mr_ops;
}

void sp_init_mr(sp_mr *o, void *context)
{
	o->f.fid.fclass = FI_CLASS_MR;
	o->f.fid.context = context;
	o->f.fid.ops = &sp_fid_ops;
}

static int sp_domain_open(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **dom, void *context)
{
	uintptr_t h = sp_handle(&fabric->fid);
	sp_domain *o;
	int ret;

	if (!h || !info || !dom)
		return -FI_EINVAL;
	o = calloc(1, sizeof(*o));
	if (!o)
		return -FI_ENOMEM;
	sp_init_domain(o, context);
	ret = goDomain(h, info, o);
	if (ret) {
		free(o);
		return ret;
	}
	*dom = &o->f;
	return 0;
}

/* Event queue: fi_pingpong and MPI open one on the fabric; RDM endpoints
   report nothing on it but what the application writes. */

static ssize_t sp_eq_read(struct fid_eq *eq, uint32_t *event, void *buf, size_t len, uint64_t flags)
{
	return goEQRead(((sp_eq *)eq)->h, event, buf, len, flags, 0, 0);
}

static ssize_t sp_eq_readerr(struct fid_eq *eq, struct fi_eq_err_entry *buf, uint64_t flags)
{
	return goEQReadErr(((sp_eq *)eq)->h, buf, flags);
}

static ssize_t sp_eq_write(struct fid_eq *eq, uint32_t event, const void *buf, size_t len, uint64_t flags)
{
	return goEQWrite(((sp_eq *)eq)->h, event, (void *)buf, len, flags);
}

static ssize_t sp_eq_sread(struct fid_eq *eq, uint32_t *event, void *buf, size_t len, int timeout, uint64_t flags)
{
	return goEQRead(((sp_eq *)eq)->h, event, buf, len, flags, timeout, 1);
}

static const char *sp_eq_strerror(struct fid_eq *eq, int prov_errno, const void *err_data, char *buf, size_t len)
{
	static __thread char own[128];

	if (!buf || !len) {
		buf = own;
		len = sizeof(own);
	}
	goStrerror(prov_errno, buf, len);
	return buf;
}

static struct fi_ops_eq sp_eq_ops = {
	.size = sizeof(struct fi_ops_eq),
	.read = sp_eq_read,
	.readerr = sp_eq_readerr,
	.write = sp_eq_write,
	.sread = sp_eq_sread,
	.strerror = sp_eq_strerror,
};

void sp_init_eq(sp_eq *o, void *context)
{
	o->f.fid.fclass = FI_CLASS_EQ;
	o->f.fid.context = context;
	o->f.fid.ops = &sp_fid_ops;
	o->f.ops = &sp_eq_ops;
}

static int sp_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr, struct fid_eq **eq, void *context)
{
	uintptr_t h = sp_handle(&fabric->fid);
	sp_eq *o;
	int ret;

	if (!h || !attr || !eq)
		return -FI_EINVAL;
	o = calloc(1, sizeof(*o));
	if (!o)
		return -FI_ENOMEM;
	sp_init_eq(o, context);
	ret = goEQOpen(h, attr, o);
	if (ret) {
		free(o);
		return ret;
	}
	*eq = &o->f;
	return 0;
}

/* Address vector */

static int sp_av_insert(struct fid_av *av, const void *addr, size_t count, fi_addr_t *fi_addr, uint64_t flags, void *context)
{
	return goAVInsert(((sp_av *)av)->h, (void *)addr, count, (uint64_t *)fi_addr, flags);
}

static int sp_av_insertsvc(struct fid_av *av, const char *node, const char *service, fi_addr_t *fi_addr, uint64_t flags, void *context)
{
	return goAVInsertSvc(((sp_av *)av)->h, (char *)node, (char *)service, (uint64_t *)fi_addr, flags);
}

static int sp_av_insertsym(struct fid_av *av, const char *node, size_t nodecnt, const char *service, size_t svccnt,
			   fi_addr_t *fi_addr, uint64_t flags, void *context)
{
	return -FI_ENOSYS;
}

static int sp_av_remove(struct fid_av *av, fi_addr_t *fi_addr, size_t count, uint64_t flags)
{
	return goAVRemove(((sp_av *)av)->h, (uint64_t *)fi_addr, count, flags);
}

static int sp_av_lookup(struct fid_av *av, fi_addr_t fi_addr, void *addr, size_t *addrlen)
{
	return goAVLookup(((sp_av *)av)->h, fi_addr, addr, addrlen);
}

// straddr prints a name as "spray://A.B.C.D:PORT", the endpoint's IPv4
// address and connection manager port, truncated to *len; *len becomes
// the length it needs.
static const char *sp_av_straddr(struct fid_av *av, const void *addr, char *buf, size_t *len)
{
	const struct sockaddr_in *sin = addr;
	const uint8_t *ip;
	char s[64];
	int n;

	if (!addr || !len)
		return NULL;
	ip = (const uint8_t *)&sin->sin_addr;
	n = snprintf(s, sizeof(s), "spray://%u.%u.%u.%u:%u", ip[0], ip[1], ip[2], ip[3], ntohs(sin->sin_port));
	if (buf && *len)
		snprintf(buf, *len, "%s", s);
	*len = (size_t)n + 1;
	return buf;
}

static int sp_av_set(struct fid_av *av, struct fi_av_set_attr *attr, struct fid_av_set **av_set, void *context)
{
	return -FI_ENOSYS;
}

static struct fi_ops_av sp_av_ops = {
	.size = sizeof(struct fi_ops_av),
	.insert = sp_av_insert,
	.insertsvc = sp_av_insertsvc,
	.insertsym = sp_av_insertsym,
	.remove = sp_av_remove,
	.lookup = sp_av_lookup,
	.straddr = sp_av_straddr,
	.av_set = sp_av_set,
};

void sp_init_av(sp_av *o, void *context)
{
	o->f.fid.fclass = FI_CLASS_AV;
	o->f.fid.context = context;
	o->f.fid.ops = &sp_fid_ops;
	o->f.ops = &sp_av_ops;
}

static int sp_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **av, void *context)
{
	uintptr_t h = sp_handle(&domain->fid);
	sp_av *o;
	int ret;

	if (!h || !attr || !av)
		return -FI_EINVAL;
	o = calloc(1, sizeof(*o));
	if (!o)
		return -FI_ENOMEM;
	sp_init_av(o, context);
	ret = goAVOpen(h, attr, o);
	if (ret) {
		free(o);
		return ret;
	}
	*av = &o->f;
	return 0;
}

/* Completion queue */

static ssize_t sp_cq_readfrom(struct fid_cq *cq, void *buf, size_t count, fi_addr_t *src_addr)
{
	sp_cq *o = (sp_cq *)cq;
	int idle = 0;
	ssize_t ret;

	// goCQRead makes progress on the caller's thread. A read that found
	// nothing to do gives the CPU away before the caller polls again: on
	// a host with fewer cores than busy threads, the peer or another
	// process may need it to answer.
	ret = goCQRead(o->h, buf, count, (uint64_t *)src_addr, 0, 0, &idle);
	if (idle)
		sched_yield();
	return ret;
}

static ssize_t sp_cq_read(struct fid_cq *cq, void *buf, size_t count)
{
	return sp_cq_readfrom(cq, buf, count, NULL);
}

static ssize_t sp_cq_readerr(struct fid_cq *cq, struct fi_cq_err_entry *buf, uint64_t flags)
{
	return goCQReadErr(((sp_cq *)cq)->h, buf, flags);
}

static ssize_t sp_cq_sreadfrom(struct fid_cq *cq, void *buf, size_t count, fi_addr_t *src_addr, const void *cond, int timeout)
{
	return goCQRead(((sp_cq *)cq)->h, buf, count, (uint64_t *)src_addr, timeout, 1, NULL);
}

static ssize_t sp_cq_sread(struct fid_cq *cq, void *buf, size_t count, const void *cond, int timeout)
{
	return sp_cq_sreadfrom(cq, buf, count, NULL, cond, timeout);
}

static int sp_cq_signal(struct fid_cq *cq)
{
	return goCQSignal(((sp_cq *)cq)->h);
}

static const char *sp_cq_strerror(struct fid_cq *cq, int prov_errno, const void *err_data, char *buf, size_t len)
{
	static __thread char own[128];

	if (!buf || !len) {
		buf = own;
		len = sizeof(own);
	}
	goStrerror(prov_errno, buf, len);
	return buf;
}

static struct fi_ops_cq sp_cq_ops = {
	.size = sizeof(struct fi_ops_cq),
	.read = sp_cq_read,
	.readfrom = sp_cq_readfrom,
	.readerr = sp_cq_readerr,
	.sread = sp_cq_sread,
	.sreadfrom = sp_cq_sreadfrom,
	.signal = sp_cq_signal,
	.strerror = sp_cq_strerror,
};

void sp_init_cq(sp_cq *o, void *context)
{
	o->f.fid.fclass = FI_CLASS_CQ;
	o->f.fid.context = context;
	o->f.fid.ops = &sp_fid_ops;
	o->f.ops = &sp_cq_ops;
}

static int sp_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **cq, void *context)
{
	uintptr_t h = sp_handle(&domain->fid);
	sp_cq *o;
	int ret;

	if (!h || !attr || !cq)
		return -FI_EINVAL;
	o = calloc(1, sizeof(*o));
	if (!o)
		return -FI_ENOMEM;
	sp_init_cq(o, context);
	ret = goCQOpen(h, attr, o);
	if (ret) {
		free(o);
		return ret;
	}
	*cq = &o->f;
	return 0;
}

/* Counter */

static uint64_t sp_cntr_read(struct fid_cntr *c) { return goCntrRead(((sp_cntr *)c)->h, 0); }
static uint64_t sp_cntr_readerr(struct fid_cntr *c) { return goCntrRead(((sp_cntr *)c)->h, 1); }
static int sp_cntr_add(struct fid_cntr *c, uint64_t v) { return goCntrSet(((sp_cntr *)c)->h, 0, 1, v); }
static int sp_cntr_set(struct fid_cntr *c, uint64_t v) { return goCntrSet(((sp_cntr *)c)->h, 0, 0, v); }
static int sp_cntr_adderr(struct fid_cntr *c, uint64_t v) { return goCntrSet(((sp_cntr *)c)->h, 1, 1, v); }
static int sp_cntr_seterr(struct fid_cntr *c, uint64_t v) { return goCntrSet(((sp_cntr *)c)->h, 1, 0, v); }
static int sp_cntr_wait(struct fid_cntr *c, uint64_t threshold, int timeout)
{
	return goCntrWait(((sp_cntr *)c)->h, threshold, timeout);
}

static struct fi_ops_cntr sp_cntr_ops = {
	.size = sizeof(struct fi_ops_cntr),
	.read = sp_cntr_read,
	.readerr = sp_cntr_readerr,
	.add = sp_cntr_add,
	.set = sp_cntr_set,
	.wait = sp_cntr_wait,
	.adderr = sp_cntr_adderr,
	.seterr = sp_cntr_seterr,
};

void sp_init_cntr(sp_cntr *o, void *context)
{
	o->f.fid.fclass = FI_CLASS_CNTR;
	o->f.fid.context = context;
	o->f.fid.ops = &sp_fid_ops;
	o->f.ops = &sp_cntr_ops;
}

static int sp_cntr_open(struct fid_domain *domain, struct fi_cntr_attr *attr, struct fid_cntr **cntr, void *context)
{
	uintptr_t h = sp_handle(&domain->fid);
	sp_cntr *o;
	int ret;

	if (!h || !cntr)
		return -FI_EINVAL;
	o = calloc(1, sizeof(*o));
	if (!o)
		return -FI_ENOMEM;
	sp_init_cntr(o, context);
	ret = goCntrOpen(h, attr, o);
	if (ret) {
		free(o);
		return ret;
	}
	*cntr = &o->f;
	return 0;
}

/* Endpoint */

#define EPH(ep) (((sp_ep *)(ep))->h)
#define ONE(b, l) struct iovec one = { .iov_base = (void *)(b), .iov_len = (l) }

static ssize_t sp_cancel(fid_t fid, void *context)
{
	uintptr_t h = sp_handle(fid);

	if (!h || fid->fclass != FI_CLASS_EP)
		return -FI_EINVAL;
	return goCancel(h, context);
}

static int sp_getopt(fid_t fid, int level, int optname, void *optval, size_t *optlen)
{
	return -FI_ENOPROTOOPT;
}

static int sp_setopt(fid_t fid, int level, int optname, const void *optval, size_t optlen)
{
	return -FI_ENOPROTOOPT;
}

static int sp_tx_ctx(struct fid_ep *sep, int index, struct fi_tx_attr *attr, struct fid_ep **tx_ep, void *context)
{
	return -FI_ENOSYS;
}

static int sp_rx_ctx(struct fid_ep *sep, int index, struct fi_rx_attr *attr, struct fid_ep **rx_ep, void *context)
{
	return -FI_ENOSYS;
}

static ssize_t sp_rx_size_left(struct fid_ep *ep) { return goSizeLeft(EPH(ep), 0); }
static ssize_t sp_tx_size_left(struct fid_ep *ep) { return goSizeLeft(EPH(ep), 1); }

static struct fi_ops_ep sp_ep_ops = {
	.size = sizeof(struct fi_ops_ep),
	.cancel = sp_cancel,
	.getopt = sp_getopt,
	.setopt = sp_setopt,
	.tx_ctx = sp_tx_ctx,
	.rx_ctx = sp_rx_ctx,
	.rx_size_left = sp_rx_size_left,
	.tx_size_left = sp_tx_size_left,
};

static int sp_setname(fid_t fid, void *addr, size_t addrlen)
{
	return -FI_ENOSYS;
}

static int sp_getname(fid_t fid, void *addr, size_t *addrlen)
{
	uintptr_t h = sp_handle(fid);

	if (!h || fid->fclass != FI_CLASS_EP || !addrlen)
		return -FI_EINVAL;
	return goGetname(h, addr, addrlen);
}

static int sp_getpeer(struct fid_ep *ep, void *addr, size_t *addrlen) { return -FI_ENOSYS; }
static int sp_connect(struct fid_ep *ep, const void *addr, const void *param, size_t paramlen) { return -FI_ENOSYS; }
static int sp_listen(struct fid_pep *pep) { return -FI_ENOSYS; }
static int sp_accept(struct fid_ep *ep, const void *param, size_t paramlen) { return -FI_ENOSYS; }
static int sp_reject(struct fid_pep *pep, fid_t handle, const void *param, size_t paramlen) { return -FI_ENOSYS; }
static int sp_shutdown(struct fid_ep *ep, uint64_t flags) { return -FI_ENOSYS; }
static int sp_join(struct fid_ep *ep, const void *addr, uint64_t flags, struct fid_mc **mc, void *context) { return -FI_ENOSYS; }

static struct fi_ops_cm sp_cm_ops = {
	.size = sizeof(struct fi_ops_cm),
	.setname = sp_setname,
	.getname = sp_getname,
	.getpeer = sp_getpeer,
	.connect = sp_connect,
	.listen = sp_listen,
	.accept = sp_accept,
	.reject = sp_reject,
	.shutdown = sp_shutdown,
	.join = sp_join,
};

// Flags Go adds to an operation's own to say which call it came from.
#define SP_TAGGED (1ULL << 63)
#define SP_DATA (1ULL << 62)
#define SP_INJ (1ULL << 61)
#define SP_OPFLAGS (1ULL << 60) /* the endpoint's op_flags apply */

/* Messages */

static ssize_t sp_recv(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src, void *context)
{
	ONE(buf, len);
	return goRecv(EPH(ep), &one, 1, src, 0, 0, context, SP_OPFLAGS);
}

static ssize_t sp_recvv(struct fid_ep *ep, const struct iovec *iov, void **desc, size_t count, fi_addr_t src, void *context)
{
	return goRecv(EPH(ep), (struct iovec *)iov, count, src, 0, 0, context, SP_OPFLAGS);
}

static ssize_t sp_recvmsg(struct fid_ep *ep, const struct fi_msg *msg, uint64_t flags)
{
	if (!msg)
		return -FI_EINVAL;
	return goRecv(EPH(ep), (struct iovec *)msg->msg_iov, msg->iov_count, msg->addr, 0, 0, msg->context, flags);
}

static ssize_t sp_send(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest, void *context)
{
	ONE(buf, len);
	return goSend(EPH(ep), &one, 1, dest, 0, 0, context, SP_OPFLAGS);
}

static ssize_t sp_sendv(struct fid_ep *ep, const struct iovec *iov, void **desc, size_t count, fi_addr_t dest, void *context)
{
	return goSend(EPH(ep), (struct iovec *)iov, count, dest, 0, 0, context, SP_OPFLAGS);
}

static ssize_t sp_sendmsg(struct fid_ep *ep, const struct fi_msg *msg, uint64_t flags)
{
	if (!msg)
		return -FI_EINVAL;
	return goSend(EPH(ep), (struct iovec *)msg->msg_iov, msg->iov_count, msg->addr, 0, msg->data, msg->context,
		      flags & FI_REMOTE_CQ_DATA ? flags | SP_DATA : flags);
}

static ssize_t sp_inject(struct fid_ep *ep, const void *buf, size_t len, fi_addr_t dest)
{
	ONE(buf, len);
	return goSend(EPH(ep), &one, 1, dest, 0, 0, NULL, SP_INJ);
}

static ssize_t sp_senddata(struct fid_ep *ep, const void *buf, size_t len, void *desc, uint64_t data, fi_addr_t dest, void *context)
{
	ONE(buf, len);
	return goSend(EPH(ep), &one, 1, dest, 0, data, context, SP_OPFLAGS | SP_DATA);
}

static ssize_t sp_injectdata(struct fid_ep *ep, const void *buf, size_t len, uint64_t data, fi_addr_t dest)
{
	ONE(buf, len);
	return goSend(EPH(ep), &one, 1, dest, 0, data, NULL, SP_INJ | SP_DATA);
}

static struct fi_ops_msg sp_msg_ops = {
	.size = sizeof(struct fi_ops_msg),
	.recv = sp_recv,
	.recvv = sp_recvv,
	.recvmsg = sp_recvmsg,
	.send = sp_send,
	.sendv = sp_sendv,
	.sendmsg = sp_sendmsg,
	.inject = sp_inject,
	.senddata = sp_senddata,
	.injectdata = sp_injectdata,
};

/* Tagged messages */

static ssize_t sp_trecv(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src, uint64_t tag, uint64_t ignore, void *context)
{
	ONE(buf, len);
	return goRecv(EPH(ep), &one, 1, src, tag, ignore, context, SP_OPFLAGS | SP_TAGGED);
}

static ssize_t sp_trecvv(struct fid_ep *ep, const struct iovec *iov, void **desc, size_t count, fi_addr_t src,
			 uint64_t tag, uint64_t ignore, void *context)
{
	return goRecv(EPH(ep), (struct iovec *)iov, count, src, tag, ignore, context, SP_OPFLAGS | SP_TAGGED);
}

static ssize_t sp_trecvmsg(struct fid_ep *ep, const struct fi_msg_tagged *msg, uint64_t flags)
{
	if (!msg)
		return -FI_EINVAL;
	return goRecv(EPH(ep), (struct iovec *)msg->msg_iov, msg->iov_count, msg->addr, msg->tag, msg->ignore,
		      msg->context, flags | SP_TAGGED);
}

static ssize_t sp_tsend(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest, uint64_t tag, void *context)
{
	ONE(buf, len);
	return goSend(EPH(ep), &one, 1, dest, tag, 0, context, SP_OPFLAGS | SP_TAGGED);
}

static ssize_t sp_tsendv(struct fid_ep *ep, const struct iovec *iov, void **desc, size_t count, fi_addr_t dest,
			 uint64_t tag, void *context)
{
	return goSend(EPH(ep), (struct iovec *)iov, count, dest, tag, 0, context, SP_OPFLAGS | SP_TAGGED);
}

static ssize_t sp_tsendmsg(struct fid_ep *ep, const struct fi_msg_tagged *msg, uint64_t flags)
{
	if (!msg)
		return -FI_EINVAL;
	return goSend(EPH(ep), (struct iovec *)msg->msg_iov, msg->iov_count, msg->addr, msg->tag, msg->data, msg->context,
		      (flags & FI_REMOTE_CQ_DATA ? flags | SP_DATA : flags) | SP_TAGGED);
}

static ssize_t sp_tinject(struct fid_ep *ep, const void *buf, size_t len, fi_addr_t dest, uint64_t tag)
{
	ONE(buf, len);
	return goSend(EPH(ep), &one, 1, dest, tag, 0, NULL, SP_INJ | SP_TAGGED);
}

static ssize_t sp_tsenddata(struct fid_ep *ep, const void *buf, size_t len, void *desc, uint64_t data, fi_addr_t dest,
			    uint64_t tag, void *context)
{
	ONE(buf, len);
	return goSend(EPH(ep), &one, 1, dest, tag, data, context, SP_OPFLAGS | SP_DATA | SP_TAGGED);
}

static ssize_t sp_tinjectdata(struct fid_ep *ep, const void *buf, size_t len, uint64_t data, fi_addr_t dest, uint64_t tag)
{
	ONE(buf, len);
	return goSend(EPH(ep), &one, 1, dest, tag, data, NULL, SP_INJ | SP_DATA | SP_TAGGED);
}

static struct fi_ops_tagged sp_tagged_ops = {
	.size = sizeof(struct fi_ops_tagged),
	.recv = sp_trecv,
	.recvv = sp_trecvv,
	.recvmsg = sp_trecvmsg,
	.send = sp_tsend,
	.sendv = sp_tsendv,
	.sendmsg = sp_tsendmsg,
	.inject = sp_tinject,
	.senddata = sp_tsenddata,
	.injectdata = sp_tinjectdata,
};

/* RMA */

static ssize_t sp_read(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src, uint64_t addr, uint64_t key, void *context)
{
	ONE(buf, len);
	return goRMA(EPH(ep), 0, &one, 1, src, addr, key, 0, context, SP_OPFLAGS);
}

static ssize_t sp_readv(struct fid_ep *ep, const struct iovec *iov, void **desc, size_t count, fi_addr_t src,
			uint64_t addr, uint64_t key, void *context)
{
	return goRMA(EPH(ep), 0, (struct iovec *)iov, count, src, addr, key, 0, context, SP_OPFLAGS);
}

static ssize_t sp_rma_msg(struct fid_ep *ep, int write, const struct fi_msg_rma *msg, uint64_t flags)
{
	if (!msg || msg->rma_iov_count != 1 || !msg->rma_iov)
		return -FI_EINVAL;
	return goRMA(EPH(ep), write, (struct iovec *)msg->msg_iov, msg->iov_count, msg->addr, msg->rma_iov[0].addr,
		     msg->rma_iov[0].key, msg->data, msg->context, flags & FI_REMOTE_CQ_DATA ? flags | SP_DATA : flags);
}

static ssize_t sp_readmsg(struct fid_ep *ep, const struct fi_msg_rma *msg, uint64_t flags)
{
	return sp_rma_msg(ep, 0, msg, flags);
}

static ssize_t sp_write(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest, uint64_t addr, uint64_t key, void *context)
{
	ONE(buf, len);
	return goRMA(EPH(ep), 1, &one, 1, dest, addr, key, 0, context, SP_OPFLAGS);
}

static ssize_t sp_writev(struct fid_ep *ep, const struct iovec *iov, void **desc, size_t count, fi_addr_t dest,
			 uint64_t addr, uint64_t key, void *context)
{
	return goRMA(EPH(ep), 1, (struct iovec *)iov, count, dest, addr, key, 0, context, SP_OPFLAGS);
}

static ssize_t sp_writemsg(struct fid_ep *ep, const struct fi_msg_rma *msg, uint64_t flags)
{
	return sp_rma_msg(ep, 1, msg, flags);
}

static ssize_t sp_rma_inject(struct fid_ep *ep, const void *buf, size_t len, fi_addr_t dest, uint64_t addr, uint64_t key)
{
	ONE(buf, len);
	return goRMA(EPH(ep), 1, &one, 1, dest, addr, key, 0, NULL, SP_INJ);
}

static ssize_t sp_writedata(struct fid_ep *ep, const void *buf, size_t len, void *desc, uint64_t data, fi_addr_t dest,
			    uint64_t addr, uint64_t key, void *context)
{
	ONE(buf, len);
	return goRMA(EPH(ep), 1, &one, 1, dest, addr, key, data, context, SP_OPFLAGS | SP_DATA);
}

static ssize_t sp_rma_injectdata(struct fid_ep *ep, const void *buf, size_t len, uint64_t data, fi_addr_t dest,
				 uint64_t addr, uint64_t key)
{
	ONE(buf, len);
	return goRMA(EPH(ep), 1, &one, 1, dest, addr, key, data, NULL, SP_INJ | SP_DATA);
}

static struct fi_ops_rma sp_rma_ops = {
	.size = sizeof(struct fi_ops_rma),
	.read = sp_read,
	.readv = sp_readv,
	.readmsg = sp_readmsg,
	.write = sp_write,
	.writev = sp_writev,
	.writemsg = sp_writemsg,
	.inject = sp_rma_inject,
	.writedata = sp_writedata,
	.injectdata = sp_rma_injectdata,
};

/* Atomics are not offered (no FI_ATOMIC); each entry fails cleanly for a
   caller that tries anyway. The table's functions take different
   arguments; one unprototyped function returning -FI_ENOSYS serves them
   all, as every argument is passed in registers or on the stack the
   callee does not touch. */
static ssize_t sp_no_atomic() { return -FI_ENOSYS; }
static int sp_no_atomic_valid() { return -FI_ENOSYS; }

static struct fi_ops_atomic sp_atomic_ops = {
	.size = sizeof(struct fi_ops_atomic),
	.write = (void *)sp_no_atomic,
	.writev = (void *)sp_no_atomic,
	.writemsg = (void *)sp_no_atomic,
	.inject = (void *)sp_no_atomic,
	.readwrite = (void *)sp_no_atomic,
	.readwritev = (void *)sp_no_atomic,
	.readwritemsg = (void *)sp_no_atomic,
	.compwrite = (void *)sp_no_atomic,
	.compwritev = (void *)sp_no_atomic,
	.compwritemsg = (void *)sp_no_atomic,
	.writevalid = (void *)sp_no_atomic_valid,
	.readwritevalid = (void *)sp_no_atomic_valid,
	.compwritevalid = (void *)sp_no_atomic_valid,
};

void sp_init_ep(sp_ep *o, void *context)
{
	o->f.fid.fclass = FI_CLASS_EP;
	o->f.fid.context = context;
	o->f.fid.ops = &sp_fid_ops;
	o->f.ops = &sp_ep_ops;
	o->f.cm = &sp_cm_ops;
	o->f.msg = &sp_msg_ops;
	o->f.tagged = &sp_tagged_ops;
	o->f.rma = &sp_rma_ops;
	o->f.atomic = &sp_atomic_ops;
}

static int sp_endpoint(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep, void *context)
{
	uintptr_t h = sp_handle(&domain->fid);
	sp_ep *o;
	int ret;

	if (!h || !info || !ep)
		return -FI_EINVAL;
	o = calloc(1, sizeof(*o));
	if (!o)
		return -FI_ENOMEM;
	sp_init_ep(o, context);
	ret = goEndpoint(h, info, o);
	if (ret) {
		free(o);
		return ret;
	}
	*ep = &o->f;
	return 0;
}

/* fi_info allocation: libfabric frees what getinfo returns with
   fi_freeinfo, which calls free() on each part. */

struct fi_info *sp_info_alloc(void)
{
	struct fi_info *info = calloc(1, sizeof(*info));

	if (!info)
		return NULL;
	info->tx_attr = calloc(1, sizeof(*info->tx_attr));
	info->rx_attr = calloc(1, sizeof(*info->rx_attr));
	info->ep_attr = calloc(1, sizeof(*info->ep_attr));
	info->domain_attr = calloc(1, sizeof(*info->domain_attr));
	info->fabric_attr = calloc(1, sizeof(*info->fabric_attr));
	if (!info->tx_attr || !info->rx_attr || !info->ep_attr || !info->domain_attr || !info->fabric_attr) {
		sp_info_free(info);
		return NULL;
	}
	return info;
}

void sp_info_free(struct fi_info *info)
{
	struct fi_info *next;

	for (; info; info = next) {
		next = info->next;
		free(info->src_addr);
		free(info->dest_addr);
		free(info->tx_attr);
		free(info->rx_attr);
		free(info->ep_attr);
		if (info->domain_attr)
			free(info->domain_attr->name);
		free(info->domain_attr);
		if (info->fabric_attr) {
			free(info->fabric_attr->name);
			free(info->fabric_attr->prov_name);
		}
		free(info->fabric_attr);
		free(info);
	}
}

static int sp_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
		      const struct fi_info *hints, struct fi_info **info)
{
	if (!info)
		return -FI_EINVAL;
	*info = NULL;
	return goGetinfo(version, (char *)node, (char *)service, flags, (struct fi_info *)hints, info);
}

static void sp_cleanup(void)
{
}

static struct fi_provider sp_provider = {
	.name = "spray",
	.version = SPRAY_VERSION,
	.fi_version = FI_VERSION(1, 17),
	.getinfo = sp_getinfo,
	.fabric = sp_fabric_open,
	.cleanup = sp_cleanup,
};

// fi_prov_ini pins the library in memory before it hands out the
// provider: libfabric dlcloses providers it does not use, and a Go
// runtime cannot be unloaded (its threads keep running its code). A
// dlopen of the library itself with RTLD_NOLOAD | RTLD_NODELETE marks it
// never to be unmapped, what linking with -z nodelete would do (a flag
// cgo does not accept).
FI_EXT_INI
{
	Dl_info self;

	if (!dladdr((void *)&sp_provider, &self) || !self.dli_fname ||
	    !dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE))
		return NULL;
	return &sp_provider;
}
