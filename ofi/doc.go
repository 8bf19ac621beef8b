// Command ofi is spray's libfabric provider, named "spray": a shared
// library that libfabric 1.17 or later loads from FI_PROVIDER_PATH.
//
//	go build -buildmode=c-shared -o libspray-fi.so ./ofi
//	FI_PROVIDER_PATH=. fi_info -p spray
//
// It offers FI_EP_RDM endpoints with FI_MSG, FI_TAGGED and FI_RMA over
// spray's transport; see docs/libfabric.md for the environment
// (FI_SPRAY_*) and docs/design.md, "The libfabric provider", for how it
// works.
//
// # Shape
//
// The C side (prov.c) is libfabric's ops tables: each function unpacks
// its arguments and calls one exported Go function with the object's
// runtime/cgo.Handle. Go keeps every object's state; C holds handles
// only, and Go holds the application's buffers and contexts only as C
// pointers. Errors cross as negative FI_E* codes from one table
// (errors.go).
package main

// main is never called: the package is built with -buildmode=c-shared and
// libfabric enters it through fi_prov_ini. It lives in a file without cgo
// so that the package still builds where cgo is off.
func main() {}
