// Command ofi is spray's libfabric provider, named "spray": a shared
// library that libfabric 1.17 or later loads from FI_PROVIDER_PATH.
//
//	go build -buildmode=c-shared -o libspray-fi.so ./ofi
//	FI_PROVIDER_PATH=. fi_info -p spray
//
// It offers FI_EP_RDM endpoints with FI_MSG, FI_TAGGED and FI_RMA over
// spray's transport. docs/libfabric.md lists the capabilities and the
// environment (FI_SPRAY_*); docs/design.md, "The libfabric provider",
// says how it works.
//
// # Shape
//
// The C side (prov.c) is libfabric's ops tables: each function unpacks
// its arguments and calls one exported Go function with the object's
// runtime/cgo.Handle. Go keeps every object's state; C holds handles
// only, and Go holds the application's buffers and contexts only as C
// pointers. Errors cross as negative FI_E* codes from one table
// (errors.go). Every object is safe for concurrent use (FI_THREAD_SAFE).
//
// # Choices
//
// Where libfabric leaves a choice to the provider:
//
//   - Names are FI_SOCKADDR_IN: the endpoint's IPv4 address and the TCP
//     port of its connection manager, which the first operation to a
//     peer dials; fi_av_straddr prints them as spray://A.B.C.D:PORT.
//   - FI_AV_MAP and FI_AV_TABLE both hand out the entry's index.
//   - Memory regions are named by offset with 4-byte provider keys
//     (FI_MR_PROV_KEY without FI_MR_VIRT_ADDR); FI_RMA is offered only
//     to callers that accept such keys.
//   - Progress is automatic and nothing needs FI_CONTEXT: mode is 0.
//     fi_cq_read and fi_cntr_read make progress on the caller's thread
//     too (progress.go); a read that found nothing to do yields the CPU.
//   - A send completes when the peer acknowledged all of it
//     (FI_TRANSMIT_COMPLETE, libfabric's default for reliable
//     endpoints); its last packet asks for the ACK at once.
//   - Completions of one CQ keep their order, errors included: a read
//     stops at the first error (-FI_EAVAIL).
//   - Unexpected messages are bounded (FI_SPRAY_UNEXPECTED, _BYTES);
//     beyond the bound the sender is held back, nothing is dropped.
//   - FI_PEEK that finds nothing completes with FI_ENOMSG; FI_CLAIM
//     keys the claimed message by the operation's context.
//   - A closed object's C structure is kept (its handle cleared) so that
//     later calls on it fail with -FI_EINVAL instead of reading freed
//     memory: a few dozen bytes per closed object.
//   - An operation that fails on a connection drops the connection; the
//     next operation to that peer dials again.
package main

// main is never called: the package is built with -buildmode=c-shared and
// libfabric enters it through fi_prov_ini. It lives in a file without cgo
// so that the package still builds where cgo is off.
func main() {}
