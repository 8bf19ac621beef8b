package main

/*
#include <string.h>
#include "prov.h"
*/
import "C"

import (
	"context"
	"errors"
	"net"
	"sync"
	"unsafe"

	"github.com/sprayfabric/spray"
	"github.com/sprayfabric/spray/transport"
)

// errTable maps the errors of spray and its transport to libfabric codes,
// the first match winning: the one place where a Go error becomes an
// FI_E* code (TestErrorCodes).
var errTable = []struct {
	err  error
	code C.int
}{
	{transport.ErrQueueFull, C.FI_EAGAIN},
	{transport.ErrRecvQueueFull, C.FI_EAGAIN},
	{transport.ErrRemoteAccess, C.FI_EACCES},
	{transport.ErrPeerUnreachable, C.FI_EHOSTUNREACH},
	{transport.ErrLocalLength, C.FI_ETRUNC},
	{transport.ErrInvalidRequest, C.FI_EINVAL},
	{transport.ErrFlushed, C.FI_ECANCELED},
	{transport.ErrQPFailed, C.FI_EIO},
	{transport.ErrConfig, C.FI_EINVAL},
	{spray.ErrRefused, C.FI_ECONNREFUSED},
	{spray.ErrUnknownService, C.FI_ECONNREFUSED},
	{spray.ErrIncompatible, C.FI_EADDRNOTAVAIL},
	{spray.ErrPeerAddr, C.FI_EADDRNOTAVAIL},
	{spray.ErrAuth, C.FI_EACCES},
	{spray.ErrOptions, C.FI_EINVAL},
	{spray.ErrPeerClosed, C.FI_ECONNRESET},
	{spray.ErrPeerGone, C.FI_ECONNRESET},
	{context.DeadlineExceeded, C.FI_ETIMEDOUT},
	{context.Canceled, C.FI_ECANCELED},
	{net.ErrClosed, C.FI_ESHUTDOWN},
}

// code returns the positive FI_E* code of err (FI_EIO for an error not in
// errTable, 0 for nil).
func code(err error) C.int {
	if err == nil {
		return 0
	}
	for _, e := range errTable {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	return C.FI_EIO
}

// Provider error numbers (prov_errno of an error completion) index
// provErrs, so that fi_cq_strerror can say what happened in spray's words.
var errMu sync.Mutex

var provErrs = struct {
	texts []string
	index map[string]int
}{index: map[string]int{}}

// provErrno records err's text and returns its number (1-based; 0 for nil).
// At most 256 distinct texts are kept; beyond that the number is 0.
func provErrno(err error) C.int {
	if err == nil {
		return 0
	}
	errMu.Lock()
	defer errMu.Unlock()
	s := err.Error()
	if i, ok := provErrs.index[s]; ok {
		return C.int(i)
	}
	if len(provErrs.texts) >= 256 {
		return 0
	}
	provErrs.texts = append(provErrs.texts, s)
	provErrs.index[s] = len(provErrs.texts)
	return C.int(len(provErrs.texts))
}

//export goStrerror
func goStrerror(provErr C.int, buf *C.char, n C.size_t) {
	if buf == nil || n == 0 {
		return
	}
	s := "spray: no provider error"
	errMu.Lock()
	if i := int(provErr); i > 0 && i <= len(provErrs.texts) {
		s = provErrs.texts[i-1]
	} else if provErr < 0 {
		s = "spray: " + C.GoString(C.strerror(-provErr))
	}
	errMu.Unlock()
	cstr(buf, int(n), s)
}

// cstr writes s into the n bytes at buf, truncated and NUL-terminated.
func cstr(buf *C.char, n int, s string) {
	b := unsafe.Slice((*byte)(unsafe.Pointer(buf)), n)
	k := copy(b[:n-1], s)
	b[k] = 0
}
