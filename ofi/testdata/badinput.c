// badinput checks the spray provider through libfabric's own API, as an
// application sees it: what it serves, what it refuses, and how it reports
// errors. Three endpoints in one process talk over loopback. Each check
// prints "ok NAME" or "FAIL NAME: why"; the exit status is the number of
// failures. An alarm ends a run that hangs.
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

static int failures;

#define CHECK(name, cond, ...)                                    \
	do {                                                      \
		if (cond) {                                       \
			printf("ok %s\n", name);                  \
		} else {                                          \
			printf("FAIL %s: ", name);                \
			printf(__VA_ARGS__);                      \
			printf("\n");                             \
			failures++;                               \
		}                                                 \
	} while (0)

#define VER FI_VERSION(1, 17)

static struct fi_info *hints(uint64_t caps)
{
	struct fi_info *h = fi_allocinfo();

	h->fabric_attr->prov_name = strdup("spray");
	h->ep_attr->type = FI_EP_RDM;
	h->caps = caps;
	h->domain_attr->mr_mode = FI_MR_PROV_KEY | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_LOCAL;
	return h;
}

static int getinfo_with(struct fi_info *h)
{
	struct fi_info *info = NULL;
	int ret = fi_getinfo(VER, NULL, NULL, 0, h, &info);

	if (info)
		fi_freeinfo(info);
	fi_freeinfo(h);
	return ret;
}

struct node {
	struct fid_ep *ep;
	struct fid_cq *cq;
	char name[64];
	size_t namelen;
};

static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_av *av;
static struct fi_info *info;

static int open_node(struct node *n)
{
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_UNSPEC };
	int ret;

	if ((ret = fi_cq_open(domain, &cq_attr, &n->cq, NULL)))
		return ret;
	if ((ret = fi_endpoint(domain, info, &n->ep, NULL)))
		return ret;
	if ((ret = fi_ep_bind(n->ep, &av->fid, 0)))
		return ret;
	if ((ret = fi_ep_bind(n->ep, &n->cq->fid, FI_TRANSMIT | FI_RECV)))
		return ret;
	if ((ret = fi_enable(n->ep)))
		return ret;
	n->namelen = sizeof(n->name);
	return fi_getname(&n->ep->fid, n->name, &n->namelen);
}

// wait_cq reads one completion (or error) from cq within 10 s: 1 for a
// completion, -FI_EAVAIL for an error, 0 on timeout.
static int wait_cq(struct fid_cq *cq, struct fi_cq_tagged_entry *e, fi_addr_t *src)
{
	int i;

	for (i = 0; i < 10000; i++) {
		ssize_t r = fi_cq_sreadfrom(cq, e, 1, src, NULL, 1);
		if (r == 1 || r == -FI_EAVAIL)
			return (int)r;
	}
	return 0;
}

int main(void)
{
	struct fi_info *h;
	struct node a, b, c;
	fi_addr_t fa, fb, fc, bad = 999;
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
	fi_addr_t src;
	char sbuf[256], rbuf[256];
	int ret, r;

	alarm(120);
	setvbuf(stdout, NULL, _IONBF, 0);

	// Hints the provider cannot serve.
	r = getinfo_with(hints(FI_ATOMIC));
	CHECK("getinfo-atomic-enodata", r == -FI_ENODATA, "got %d", r);
	h = hints(FI_TAGGED);
	h->ep_attr->type = FI_EP_MSG;
	r = getinfo_with(h);
	CHECK("getinfo-msg-ep-enodata", r == -FI_ENODATA, "got %d", r);
	h = hints(FI_TAGGED);
	h->addr_format = FI_SOCKADDR_IN6;
	r = getinfo_with(h);
	CHECK("getinfo-ipv6-enodata", r == -FI_ENODATA, "got %d", r);
	h = hints(FI_TAGGED);
	h->domain_attr->cq_data_size = 16;
	r = getinfo_with(h);
	CHECK("getinfo-cqdata-enodata", r == -FI_ENODATA, "got %d", r);
	h = hints(FI_RMA);
	h->domain_attr->mr_mode = FI_MR_LOCAL;
	r = getinfo_with(h);
	CHECK("getinfo-rma-without-prov-key-enodata", r == -FI_ENODATA, "got %d", r);

	h = hints(FI_MSG | FI_TAGGED | FI_SOURCE | FI_DIRECTED_RECV | FI_RMA);
	ret = fi_getinfo(VER, NULL, NULL, 0, h, &info);
	CHECK("getinfo", ret == 0 && info && (info->caps & FI_DIRECTED_RECV), "got %d", ret);
	fi_freeinfo(h);
	if (ret)
		return 1;
	ret = fi_fabric(info->fabric_attr, &fabric, NULL);
	CHECK("fabric", ret == 0, "got %d", ret);
	ret = fi_domain(fabric, info, &domain, NULL);
	CHECK("domain", ret == 0, "got %d", ret);
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };
	ret = fi_av_open(domain, &av_attr, &av, NULL);
	CHECK("av", ret == 0, "got %d", ret);
	ret = open_node(&a);
	CHECK("endpoint-a", ret == 0, "got %d", ret);
	ret = open_node(&b);
	CHECK("endpoint-b", ret == 0, "got %d", ret);
	ret = open_node(&c);
	CHECK("endpoint-c", ret == 0, "got %d", ret);
	if (failures)
		return failures;
	CHECK("names-differ", memcmp(a.name, b.name, a.namelen) && memcmp(b.name, c.name, b.namelen), "same names");
	r = fi_av_insert(av, a.name, 1, &fa, 0, NULL);
	r += fi_av_insert(av, b.name, 1, &fb, 0, NULL);
	r += fi_av_insert(av, c.name, 1, &fc, 0, NULL);
	CHECK("av-insert", r == 3, "inserted %d", r);

	// Tagged matching with ignore bits, remote CQ data, FI_SOURCE.
	ret = fi_trecv(b.ep, rbuf, sizeof(rbuf), NULL, FI_ADDR_UNSPEC, 0x1200, 0xff, rbuf);
	CHECK("trecv", ret == 0, "got %d", ret);
	strcpy(sbuf, "hello tagged");
	ret = fi_tsenddata(a.ep, sbuf, 13, NULL, 0xabcd, fb, 0x1234, sbuf);
	CHECK("tsenddata", ret == 0, "got %d", ret);
	r = wait_cq(b.cq, &e, &src);
	CHECK("trecv-completes", r == 1 && e.len == 13 && e.tag == 0x1234 && (e.flags & FI_REMOTE_CQ_DATA) &&
	      e.data == 0xabcd && !strcmp(rbuf, "hello tagged") && e.op_context == rbuf,
	      "r=%d len=%zu tag=%#lx data=%#lx", r, e.len, (unsigned long)e.tag, (unsigned long)e.data);
	CHECK("trecv-source", r == 1 && src == fa, "src=%lu, want %lu", (unsigned long)src, (unsigned long)fa);
	r = wait_cq(a.cq, &e, NULL);
	CHECK("tsend-completes", r == 1 && e.op_context == sbuf && (e.flags & FI_SEND), "r=%d", r);

	// Unexpected message, then the receive; iovecs on both sides.
	struct iovec siov[3] = { { sbuf, 4 }, { sbuf + 4, 4 }, { sbuf + 8, 8 } };
	memcpy(sbuf, "0123456789abcdef", 16);
	ret = fi_sendv(a.ep, siov, NULL, 3, fb, NULL);
	CHECK("sendv", ret == 0, "got %d", ret);
	r = wait_cq(a.cq, &e, NULL);
	CHECK("sendv-completes", r == 1, "r=%d", r);
	memset(rbuf, 0, sizeof(rbuf));
	struct iovec riov[2] = { { rbuf, 10 }, { rbuf + 100, 20 } };
	ret = fi_recvv(b.ep, riov, NULL, 2, FI_ADDR_UNSPEC, NULL);
	r = wait_cq(b.cq, &e, NULL);
	CHECK("unexpected-recvv", ret == 0 && r == 1 && e.len == 16 && !memcmp(rbuf, "0123456789", 10) &&
	      !memcmp(rbuf + 100, "abcdef", 6), "ret=%d r=%d len=%zu", ret, r, e.len);

	// Directed receive: only c's message matches.
	ret = fi_trecv(b.ep, rbuf, sizeof(rbuf), NULL, fc, 7, 0, NULL);
	fi_tsend(a.ep, "from-a", 7, NULL, fb, 7, NULL);
	wait_cq(a.cq, &e, NULL);
	fi_tsend(c.ep, "from-c", 7, NULL, fb, 7, NULL);
	wait_cq(c.cq, &e, NULL);
	r = wait_cq(b.cq, &e, &src);
	CHECK("directed-recv", ret == 0 && r == 1 && !strcmp(rbuf, "from-c") && src == fc, "r=%d buf=%s", r, rbuf);
	ret = fi_trecv(b.ep, rbuf, sizeof(rbuf), NULL, FI_ADDR_UNSPEC, 7, 0, NULL);
	r = wait_cq(b.cq, &e, &src);
	CHECK("directed-left-a", ret == 0 && r == 1 && !strcmp(rbuf, "from-a") && src == fa, "r=%d buf=%s", r, rbuf);

	// FI_PEEK, FI_CLAIM.
	fi_tsend(a.ep, "claim-me", 9, NULL, fb, 0x55, NULL);
	wait_cq(a.cq, &e, NULL);
	struct fi_context pctx;
	struct iovec piov = { rbuf, sizeof(rbuf) };
	struct fi_msg_tagged pm = { .msg_iov = &piov, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .tag = 0x55, .context = &pctx };
	r = 0;
	for (int i = 0; i < 1000 && r != 1; i++) {
		fi_trecvmsg(b.ep, &pm, FI_PEEK);
		r = wait_cq(b.cq, &e, NULL);
		if (r == -FI_EAVAIL) {
			fi_cq_readerr(b.cq, &err, 0);
			usleep(1000);
		}
	}
	CHECK("peek", r == 1 && e.len == 9 && e.tag == 0x55, "r=%d len=%zu", r, e.len);
	ret = fi_trecvmsg(b.ep, &pm, FI_PEEK | FI_CLAIM);
	r = wait_cq(b.cq, &e, NULL);
	CHECK("peek-claim", ret == 0 && r == 1 && e.len == 9, "ret=%d r=%d", ret, r);
	memset(rbuf, 0, sizeof(rbuf));
	ret = fi_trecvmsg(b.ep, &pm, FI_CLAIM);
	r = wait_cq(b.cq, &e, NULL);
	CHECK("claim", ret == 0 && r == 1 && !strcmp(rbuf, "claim-me"), "ret=%d r=%d buf=%s", ret, r, rbuf);
	ret = fi_trecvmsg(b.ep, &pm, FI_PEEK);
	r = wait_cq(b.cq, &e, NULL);
	memset(&err, 0, sizeof(err));
	if (r == -FI_EAVAIL)
		fi_cq_readerr(b.cq, &err, 0);
	CHECK("peek-nothing-enomsg", r == -FI_EAVAIL && err.err == FI_ENOMSG, "r=%d err=%d", r, err.err);

	// A receive buffer shorter than the message: FI_ETRUNC with olen,
	// and the endpoint still works.
	ret = fi_recv(b.ep, rbuf, 10, NULL, FI_ADDR_UNSPEC, rbuf);
	memset(sbuf, 'x', 100);
	fi_send(a.ep, sbuf, 100, NULL, fb, NULL);
	r = wait_cq(b.cq, &e, NULL);
	memset(&err, 0, sizeof(err));
	ssize_t er = fi_cq_readerr(b.cq, &err, 0);
	CHECK("etrunc", ret == 0 && r == -FI_EAVAIL && er == 1 && err.err == FI_ETRUNC && err.olen == 90 &&
	      err.len == 10 && err.op_context == rbuf, "r=%d er=%zd err=%d olen=%zu", r, er, err.err, err.olen);
	const char *s = fi_cq_strerror(b.cq, err.prov_errno, err.err_data, NULL, 0);
	CHECK("cq-strerror", s != NULL, "null");
	wait_cq(a.cq, &e, NULL);
	ret = fi_recv(b.ep, rbuf, sizeof(rbuf), NULL, FI_ADDR_UNSPEC, NULL);
	fi_send(a.ep, "after", 6, NULL, fb, NULL);
	r = wait_cq(b.cq, &e, NULL);
	CHECK("after-etrunc", ret == 0 && r == 1 && !strcmp(rbuf, "after"), "r=%d", r);
	wait_cq(a.cq, &e, NULL);

	// More unexpected messages than the bound (TestBadInput runs this
	// with FI_SPRAY_UNEXPECTED=8): the sender is held back, nothing is
	// lost, and they arrive in order once receives are posted.
	int held = 0;
	for (int i = 0; i < 40; i++) {
		int v = 1000 + i;
		if (fi_send(a.ep, &v, sizeof(v), NULL, fb, NULL) == 0)
			held++;
	}
	usleep(200000);
	int inorder = 0;
	for (int i = 0; i < 40; i++) {
		int v = -1;
		fi_recv(b.ep, &v, sizeof(v), NULL, FI_ADDR_UNSPEC, NULL);
		if (wait_cq(b.cq, &e, NULL) == 1 && v == 1000 + i)
			inorder++;
	}
	for (int i = 0; i < held; i++)
		wait_cq(a.cq, &e, NULL);
	CHECK("unexpected-bound", held == 40 && inorder == 40, "posted %d, %d arrived in order", held, inorder);

	// Cancel of a posted receive.
	ret = fi_recv(b.ep, rbuf, sizeof(rbuf), NULL, FI_ADDR_UNSPEC, &pctx);
	r = (int)fi_cancel(&b.ep->fid, &pctx);
	int w = wait_cq(b.cq, &e, NULL);
	memset(&err, 0, sizeof(err));
	fi_cq_readerr(b.cq, &err, 0);
	CHECK("cancel", ret == 0 && r == 0 && w == -FI_EAVAIL && err.err == FI_ECANCELED && err.op_context == &pctx,
	      "ret=%d r=%d w=%d err=%d", ret, r, w, err.err);
	r = (int)fi_cancel(&b.ep->fid, &pctx);
	CHECK("cancel-nothing", r == -FI_ENOENT, "got %d", r);

	// Inject: no completion, the bytes arrive.
	ret = fi_recv(b.ep, rbuf, sizeof(rbuf), NULL, FI_ADDR_UNSPEC, NULL);
	strcpy(sbuf, "injected");
	r = (int)fi_inject(a.ep, sbuf, 9, fb);
	memset(sbuf, 0, 9);
	w = wait_cq(b.cq, &e, NULL);
	CHECK("inject", ret == 0 && r == 0 && w == 1 && !strcmp(rbuf, "injected"), "r=%d w=%d", r, w);
	r = (int)fi_cq_read(a.cq, &e, 1);
	CHECK("inject-no-completion", r == -FI_EAGAIN, "got %d", r);

	// Invalid and removed AV entries.
	r = (int)fi_send(a.ep, sbuf, 4, NULL, bad, NULL);
	CHECK("send-invalid-addr", r < 0, "got %d", r);
	r = fi_av_remove(av, &fc, 1, 0);
	CHECK("av-remove", r == 0, "got %d", r);
	r = (int)fi_send(a.ep, sbuf, 4, NULL, fc, NULL);
	CHECK("send-removed-addr", r < 0, "got %d", r);
	r = fi_av_remove(av, &fc, 1, 0);
	CHECK("av-remove-twice", r < 0, "got %d", r);
	size_t alen = sizeof(sbuf);
	r = fi_av_lookup(av, fc, sbuf, &alen);
	CHECK("av-lookup-removed", r < 0, "got %d", r);

	// An empty CQ: sread times out with -FI_EAGAIN.
	r = (int)fi_cq_sread(a.cq, &e, 1, NULL, 50);
	CHECK("sread-timeout", r == -FI_EAGAIN, "got %d", r);

	// A CQ with a file descriptor to wait on.
	struct fi_cq_attr fd_attr = { .format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_FD };
	struct fid_cq *fdcq;
	int fd = -1;
	ret = fi_cq_open(domain, &fd_attr, &fdcq, NULL);
	if (ret == 0)
		ret = fi_control(&fdcq->fid, FI_GETWAIT, &fd);
	CHECK("cq-wait-fd", ret == 0 && fd >= 0, "ret=%d fd=%d", ret, fd);
	if (ret == 0)
		fi_close(&fdcq->fid);

	// RMA: a region registered on the domain is written and read by
	// offset; a WRITE with data completes on the target's CQ; a wrong
	// key fails the operation, and the next one to that peer works.
	static char region[4096];
	struct fid_mr *mr;
	ret = fi_mr_reg(domain, region, sizeof(region), FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL);
	CHECK("mr-reg", ret == 0 && fi_mr_key(mr) != 0, "ret=%d", ret);
	uint64_t key = fi_mr_key(mr);
	strcpy(sbuf, "written remotely");
	ret = (int)fi_write(a.ep, sbuf, 17, NULL, fb, 100, key, sbuf);
	r = wait_cq(a.cq, &e, NULL);
	CHECK("rma-write", ret == 0 && r == 1 && (e.flags & FI_WRITE) && !strcmp(region + 100, "written remotely"),
	      "ret=%d r=%d region=%.17s", ret, r, region + 100);
	memset(rbuf, 0, sizeof(rbuf));
	strcpy(region + 2000, "read me");
	ret = (int)fi_read(a.ep, rbuf, 8, NULL, fb, 2000, key, rbuf);
	r = wait_cq(a.cq, &e, NULL);
	CHECK("rma-read", ret == 0 && r == 1 && (e.flags & FI_READ) && !strcmp(rbuf, "read me"), "ret=%d r=%d buf=%s", ret, r, rbuf);
	ret = (int)fi_writedata(a.ep, "imm", 4, NULL, 0xfeed, fb, 300, key, NULL);
	r = wait_cq(a.cq, &e, NULL);
	w = wait_cq(b.cq, &e, NULL);
	CHECK("rma-writedata", ret == 0 && r == 1 && w == 1 && (e.flags & FI_REMOTE_CQ_DATA) && e.data == 0xfeed &&
	      !strcmp(region + 300, "imm"), "ret=%d r=%d w=%d data=%#lx", ret, r, w, (unsigned long)e.data);
	ret = (int)fi_write(a.ep, sbuf, 17, NULL, fb, 100, key ^ 1, NULL);
	r = wait_cq(a.cq, &e, NULL);
	memset(&err, 0, sizeof(err));
	fi_cq_readerr(a.cq, &err, 0);
	CHECK("rma-bad-key", ret == 0 && r == -FI_EAVAIL && err.err == FI_EACCES, "ret=%d r=%d err=%d", ret, r, err.err);
	ret = (int)fi_write(a.ep, sbuf, 17, NULL, fb, 4090, key, NULL);
	r = wait_cq(a.cq, &e, NULL);
	memset(&err, 0, sizeof(err));
	fi_cq_readerr(a.cq, &err, 0);
	CHECK("rma-out-of-bounds", ret == 0 && r == -FI_EAVAIL && err.err == FI_EACCES, "ret=%d r=%d err=%d", ret, r, err.err);
	// Operations queued behind a refused one all complete, with errors
	// or not, and none hangs.
	int posted = 0, done = 0;
	if (fi_write(a.ep, sbuf, 17, NULL, fb, 100, key ^ 1, NULL) == 0)
		posted++;
	for (int i = 0; i < 20; i++)
		if (fi_write(a.ep, sbuf, 17, NULL, fb, 100, key, NULL) == 0)
			posted++;
	for (int i = 0; i < posted; i++) {
		r = wait_cq(a.cq, &e, NULL);
		if (r == -FI_EAVAIL)
			fi_cq_readerr(a.cq, &err, 0);
		if (r != 0)
			done++;
	}
	CHECK("ops-behind-refused-complete", posted == 21 && done == 21, "posted %d, completed %d", posted, done);
	ret = fi_recv(b.ep, rbuf, sizeof(rbuf), NULL, FI_ADDR_UNSPEC, NULL);
	fi_send(a.ep, "again", 6, NULL, fb, NULL);
	r = wait_cq(b.cq, &e, NULL);
	CHECK("send-after-rma-error", ret == 0 && r == 1 && !strcmp(rbuf, "again"), "r=%d", r);
	wait_cq(a.cq, &e, NULL);
	r = fi_close(&mr->fid);
	CHECK("mr-close", r == 0, "got %d", r);

	// A counter bound for sends and receives counts completions, and
	// fi_cntr_wait returns once it reaches the threshold.
	struct fi_cntr_attr cattr = { .events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC };
	struct fid_cntr *cntr;
	struct node d;
	ret = fi_cntr_open(domain, &cattr, &cntr, NULL);
	CHECK("cntr-open", ret == 0, "got %d", ret);
	{
		struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_FD };
		fi_cq_open(domain, &cq_attr, &d.cq, NULL);
		fi_endpoint(domain, info, &d.ep, NULL);
		fi_ep_bind(d.ep, &av->fid, 0);
		fi_ep_bind(d.ep, &d.cq->fid, FI_TRANSMIT | FI_RECV);
		r = fi_ep_bind(d.ep, &cntr->fid, FI_SEND | FI_RECV);
		ret = fi_enable(d.ep);
		d.namelen = sizeof(d.name);
		fi_getname(&d.ep->fid, d.name, &d.namelen);
	}
	fi_addr_t fd_addr;
	fi_av_insert(av, d.name, 1, &fd_addr, 0, NULL);
	CHECK("cntr-bind", r == 0 && ret == 0, "bind=%d enable=%d", r, ret);
	fi_send(d.ep, "count", 6, NULL, fb, NULL);
	fi_recv(d.ep, rbuf, sizeof(rbuf), NULL, FI_ADDR_UNSPEC, NULL);
	fi_recv(b.ep, rbuf + 100, 100, NULL, FI_ADDR_UNSPEC, NULL);
	fi_send(b.ep, "back", 5, NULL, fd_addr, NULL);
	r = fi_cntr_wait(cntr, 2, 10000);
	CHECK("cntr-wait", r == 0 && fi_cntr_read(cntr) == 2 && fi_cntr_readerr(cntr) == 0, "r=%d value=%lu",
	      r, (unsigned long)fi_cntr_read(cntr));
	r = fi_cntr_wait(cntr, 3, 50);
	CHECK("cntr-wait-timeout", r == -FI_ETIMEDOUT, "got %d", r);
	fi_cntr_add(cntr, 10);
	CHECK("cntr-add", fi_cntr_read(cntr) == 12, "value %lu", (unsigned long)fi_cntr_read(cntr));
	int dfd = -1;
	fi_control(&d.cq->fid, FI_GETWAIT, &dfd);
	struct pollfd pfd = { .fd = dfd, .events = POLLIN };
	r = poll(&pfd, 1, 10000);
	CHECK("cq-fd-readable", dfd >= 0 && r == 1, "fd=%d poll=%d", dfd, r);
	while (fi_cq_read(d.cq, &e, 1) == 1)
		;
	wait_cq(b.cq, &e, NULL);
	wait_cq(b.cq, &e, NULL);
	// A loop of fi_cntr_read alone sees a send complete: reads of a
	// counter make progress like reads of a CQ.
	fi_recv(b.ep, rbuf + 200, 100, NULL, FI_ADDR_UNSPEC, NULL);
	fi_send(d.ep, "poll", 5, NULL, fb, NULL);
	uint64_t cv = 0;
	for (long i = 0; i < 100000000 && (cv = fi_cntr_read(cntr)) < 13; i++)
		;
	CHECK("cntr-read-polled", cv == 13, "value %lu", (unsigned long)cv);
	wait_cq(b.cq, &e, NULL);
	while (fi_cq_read(d.cq, &e, 1) == 1)
		;
	r = fi_close(&cntr->fid);
	CHECK("close-bound-cntr-busy", r == -FI_EBUSY, "got %d", r);
	r = fi_close(&d.ep->fid) + fi_close(&cntr->fid) + fi_close(&d.cq->fid);
	CHECK("close-cntr-ep", r == 0, "got %d", r);

	// Closing out of order is refused, in order it works; a closed
	// endpoint refuses work.
	r = fi_close(&domain->fid);
	CHECK("close-domain-busy", r == -FI_EBUSY, "got %d", r);
	r = fi_close(&a.cq->fid);
	CHECK("close-bound-cq-busy", r == -FI_EBUSY, "got %d", r);
	r = fi_close(&c.ep->fid);
	CHECK("close-ep", r == 0, "got %d", r);
	r = (int)fi_send(c.ep, sbuf, 4, NULL, fa, NULL);
	CHECK("send-closed-ep", r == -FI_EINVAL, "got %d", r);
	r = (int)fi_recv(c.ep, rbuf, 4, NULL, FI_ADDR_UNSPEC, NULL);
	CHECK("recv-closed-ep", r == -FI_EINVAL, "got %d", r);
	r = fi_close(&c.ep->fid);
	CHECK("close-ep-twice", r == -FI_EINVAL, "got %d", r);

	// A peer that went away: the send completes with an error.
	fi_addr_t gone;
	r = fi_av_insert(av, c.name, 1, &gone, 0, NULL);
	ret = (int)fi_send(a.ep, sbuf, 4, NULL, gone, sbuf);
	w = wait_cq(a.cq, &e, NULL);
	memset(&err, 0, sizeof(err));
	fi_cq_readerr(a.cq, &err, 0);
	CHECK("send-to-closed-peer", r == 1 && ret == 0 && w == -FI_EAVAIL && err.err != 0 && err.op_context == sbuf,
	      "r=%d ret=%d w=%d err=%d", r, ret, w, err.err);
	r = fi_close(&a.ep->fid) + fi_close(&b.ep->fid);
	r += fi_close(&a.cq->fid) + fi_close(&b.cq->fid) + fi_close(&c.cq->fid);
	r += fi_close(&av->fid);
	r += fi_close(&domain->fid);
	r += fi_close(&fabric->fid);
	CHECK("close-all", r == 0, "got %d", r);
	fi_freeinfo(info);
	printf("%d failures\n", failures);
	return failures;
}
