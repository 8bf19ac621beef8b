package collective

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestBootstrapRounds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	got := make([][][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			cfg := BootstrapConfig{Rank: r, Size: n, Addr: ln.Addr().String()}
			if r == 0 {
				cfg.Listener = ln
			} else {
				time.Sleep(time.Duration(r) * 10 * time.Millisecond) // ranks join in any order
			}
			b, err := NewBootstrap(ctx, cfg)
			if err != nil {
				errs[r] = err
				return
			}
			defer b.Close()
			if got[r], errs[r] = b.AllGather(ctx, bytes.Repeat([]byte{byte(r)}, r)); errs[r] != nil {
				return
			}
			errs[r] = b.Barrier(ctx)
		})
	}
	wg.Wait()
	for r := range n {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		for k := range n {
			if !bytes.Equal(got[r][k], bytes.Repeat([]byte{byte(k)}, k)) {
				t.Fatalf("rank %d got %v from rank %d", r, got[r][k], k)
			}
		}
	}
}

// rank0 starts rank 0 of a world of size n on a loopback listener and
// returns its address and a channel with NewBootstrap's error.
func rank0(t *testing.T, ctx context.Context, n int) (string, <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		b, err := NewBootstrap(ctx, BootstrapConfig{Rank: 0, Size: n, Listener: ln})
		if err == nil {
			b.Close()
		}
		errc <- err
	}()
	return ln.Addr().String(), errc
}

func hello(rank, size uint32) []byte {
	h := make([]byte, 16)
	binary.BigEndian.PutUint32(h[0:], bootMagic)
	binary.BigEndian.PutUint32(h[4:], bootVersion)
	binary.BigEndian.PutUint32(h[8:], rank)
	binary.BigEndian.PutUint32(h[12:], size)
	return h
}

func TestBootstrapBadHello(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hello [][]byte
	}{
		{"garbage", [][]byte{[]byte("GET / HTTP/1.1\r\n\r\n")}},
		{"short", [][]byte{hello(1, 3)[:10]}},
		{"wrong size", [][]byte{hello(1, 4)}},
		{"rank 0", [][]byte{hello(0, 3)}},
		{"rank out of range", [][]byte{hello(3, 3)}},
		{"duplicate rank", [][]byte{hello(2, 3), hello(2, 3)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			addr, errc := rank0(t, ctx, 3)
			for _, h := range tc.hello {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				c.Write(h)
				if len(h) < 16 {
					c.(*net.TCPConn).CloseWrite()
				}
			}
			if err := <-errc; !errors.Is(err, ErrBootstrap) {
				t.Fatalf("rank 0 returned %v, want ErrBootstrap", err)
			}
		})
	}
}

func TestBootstrapTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nobody listens: rank 1 retries until its context ends
	_, err = NewBootstrap(ctx, BootstrapConfig{Rank: 1, Size: 2, Addr: addr})
	if !errors.Is(err, ErrBootstrap) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrBootstrap and DeadlineExceeded", err)
	}
	addr, errc := rank0(t, ctx, 2) // rank 1 never comes
	_ = addr
	if err := <-errc; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("rank 0 got %v, want DeadlineExceeded", err)
	}
	for _, cfg := range []BootstrapConfig{{Rank: 2, Size: 2}, {Rank: -1, Size: 2}, {Size: 0}, {Size: MaxWorld + 1}, {Size: 1, MaxBlob: -1}} {
		if _, err := NewBootstrap(context.Background(), cfg); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: got %v, want ErrInvalid", cfg, err)
		}
	}
}

// TestBootstrapWaiting: rank 0 of a world of 4 whose rank 2 never comes
// says, while it waits, that it waits for rank 2 alone, and its error at
// the deadline names rank 2; rank 1 waiting for a rank 0 that is not
// there says it waits for rank 0.
func TestBootstrapWaiting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	reports := make(chan []int, 100)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := NewBootstrap(ctx, BootstrapConfig{Rank: 0, Size: 4, Addr: addr, Listener: ln,
			Waiting: func(m []int) { reports <- m }, WaitEvery: 20 * time.Millisecond})
		errc <- err
	}()
	for _, r := range []int{1, 3} {
		go func() {
			b, err := NewBootstrap(ctx, BootstrapConfig{Rank: r, Size: 4, Addr: addr})
			if err == nil {
				defer b.Close()
				<-ctx.Done()
			}
		}()
	}
	// Ranks 1 and 3 join within the 2 s; every report until the end
	// names the ranks not yet there, the last rank 2 alone.
	var last []int
	for err == nil {
		select {
		case m := <-reports:
			if !slices.Contains(m, 2) {
				t.Errorf("rank 0 reports %v, without rank 2", m)
			}
			last = m
		case err = <-errc:
		}
	}
	if !slices.Equal(last, []int{2}) {
		t.Errorf("rank 0 last waited for %v, want [2]", last)
	}
	if !errors.Is(err, ErrBootstrap) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "rank(s) 2 never joined") {
		t.Errorf("rank 0: %v, want ErrBootstrap and DeadlineExceeded naming rank 2", err)
	}

	// Rank 1, nobody at rank 0's address.
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln2.Addr().String()
	ln2.Close()
	got := make(chan []int, 1)
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go func() {
		_, _ = NewBootstrap(ctx2, BootstrapConfig{Rank: 1, Size: 2, Addr: gone, WaitEvery: 20 * time.Millisecond,
			Waiting: func(m []int) {
				select {
				case got <- m:
				default:
				}
			}})
	}()
	if m := <-got; !slices.Equal(m, []int{0}) {
		t.Errorf("rank 1 waits for %v, want [0]", m)
	}
	cancel2()
}
