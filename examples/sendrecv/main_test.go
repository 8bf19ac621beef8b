package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
)

// TestMainSendRecv runs the example on loopback addresses of its own and
// reads what it printed: the message and the written bytes arrive intact.
func TestMainSendRecv(t *testing.T) {
	pid := os.Getpid()
	net := fmt.Sprintf("127.%d.%d.", 100+pid%100, pid/100%250)
	args := os.Args
	os.Args = []string{"example", "-a", net + "1", "-b", net + "2"}
	defer func() { os.Args = args }()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	out := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); out <- b }()
	main()
	os.Stdout = stdout
	w.Close()
	got := string(<-out)
	t.Log(got)
	for _, want := range []string{`b received "hello from a"`, `b's region holds "written by a"`} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %s:\n%s", want, got)
		}
	}
}
