package main

import (
	"io"
	"os"
	"strings"
	"testing"
)

// TestMainAllReduce runs the example, smaller, and reads what it printed.
func TestMainAllReduce(t *testing.T) {
	args := os.Args
	os.Args = []string{"example", "-ranks", "3", "-elems", "3000"}
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
	if n := strings.Count(got, ", 0 wrong") + strings.Count(got, ", 0 elements wrong"); n != 2 {
		t.Errorf("want 2 results with nothing wrong, got:\n%s", got)
	}
}
