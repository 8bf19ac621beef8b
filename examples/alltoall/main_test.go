package main

import (
	"io"
	"os"
	"strings"
	"testing"
)

// TestMainAllToAll runs the example, smaller, and reads what it printed.
func TestMainAllToAll(t *testing.T) {
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
	if n := strings.Count(got, ", 0 wrong") + strings.Count(got, ", 0 elements wrong"); n != 3 {
		t.Errorf("want 3 results with nothing wrong, got:\n%s", got)
	}
}
