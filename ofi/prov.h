// The C side of the spray provider: the fid structures libfabric hands to
// applications, each holding the runtime/cgo.Handle of its Go state.
#ifndef SPRAY_PROV_H
#define SPRAY_PROV_H

#include <stdint.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_atomic.h>
#include <rdma/providers/fi_prov.h>

// Every object is its libfabric fid structure followed by the handle of
// its Go state; sp_handle finds the handle from a struct fid by its class.
typedef struct { struct fid_fabric f; uintptr_t h; } sp_fabric;
typedef struct { struct fid_domain f; uintptr_t h; } sp_domain;
typedef struct { struct fid_ep f; uintptr_t h; } sp_ep;
typedef struct { struct fid_av f; uintptr_t h; } sp_av;
// ready counts the completions (and errors) queued, kept by Go, so that
// a polling fi_cq_read returns -FI_EAGAIN without entering Go.
typedef struct { struct fid_cq f; uintptr_t h; int64_t ready; } sp_cq;
typedef struct { struct fid_cntr f; uintptr_t h; } sp_cntr;
typedef struct { struct fid_eq f; uintptr_t h; } sp_eq;
typedef struct { struct fid_mr f; uintptr_t h; } sp_mr;

uintptr_t sp_handle(struct fid *fid);
void sp_init_fabric(sp_fabric *o, void *context);
void sp_init_domain(sp_domain *o, void *context);
void sp_init_ep(sp_ep *o, void *context);
void sp_init_av(sp_av *o, void *context);
void sp_init_cq(sp_cq *o, void *context);
void sp_init_cntr(sp_cntr *o, void *context);
void sp_init_eq(sp_eq *o, void *context);
void sp_init_mr(sp_mr *o, void *context);

struct fi_info *sp_info_alloc(void);
void sp_info_free(struct fi_info *info);

#endif
