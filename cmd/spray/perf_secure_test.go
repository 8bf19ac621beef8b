package main

import (
	"bytes"
	"crypto/ed25519"
	crand "crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sprayfabric/spray/bench"
	"github.com/sprayfabric/spray/internal/testutil"
)

// runPerfJSON runs spray perf with args and --json, and returns the
// results it printed.
func runPerfJSON(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	out, err := os.CreateTemp(t.TempDir(), "perf")
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = out
	err = runPerf(append(args, "--json"))
	os.Stdout = stdout
	if err != nil {
		t.Fatalf("perf %v: %v", args, err)
	}
	b, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	var rs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		rs = append(rs, r)
	}
	return rs
}

// spray perf --psk FILE secures the QP of an in-process run: the report
// says so (and that kernel TCP ran in clear), the bytes arrive intact, and the capture of the client's link
// shows none of the payload; --integrity-only leaves it readable, as a
// clear run does. A key too short, and --integrity-only without a key,
// are refused before anything runs.
func TestPerfSecure(t *testing.T) {
	dir := t.TempDir()
	psk := filepath.Join(dir, "psk")
	if err := os.WriteFile(psk, []byte("00112233445566778899aabbccddeeff\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The payload's first 32 bytes: bench's payloads for --seed seed
	// (bench/perf.go's generator).
	seed := testutil.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 0x7065726670))
	var head []byte
	for range 4 {
		head = binary.LittleEndian.AppendUint64(head, rng.Uint64())
	}
	for _, tc := range []struct {
		args     []string
		want     string
		readable bool
	}{
		{nil, "clear", true},
		{[]string{"--psk", psk}, "encrypted", false},
		{[]string{"--psk", psk, "--integrity-only"}, "integrity", true},
	} {
		capture := filepath.Join(dir, tc.want+".pcap")
		args := append([]string{"--link", "mem,tcp", "--total", "1M", "--size", "64K", "--pings", "10", "--seed", fmt.Sprint(seed), "--pcap", capture}, tc.args...)
		rs := runPerfJSON(t, args...)
		if len(rs) != 2 || rs[0]["protection"] != tc.want || rs[0]["integrity_ok"] != true {
			t.Fatalf("perf %v: %v, want protection %s and the bytes intact", tc.args, rs, tc.want)
		}
		if rs[1]["link"] != "tcp" || rs[1]["protection"] != "clear" {
			t.Fatalf("perf %v: the kernel TCP run %v, want it reported clear", tc.args, rs[1])
		}
		pc, err := os.ReadFile(capture)
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Contains(pc, head); got != tc.readable {
			t.Fatalf("perf %v: the payload readable in the capture's %d bytes: %v, want %v", tc.args, len(pc), got, tc.readable)
		}
	}
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("too short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--psk", short},
		{"--psk", filepath.Join(dir, "missing")},
		{"--integrity-only"},
	} {
		if err := runPerf(append(args, "--link", "mem", "--total", "1M")); err == nil {
			t.Errorf("perf %v: no error", args)
		}
	}
}

// spray bench --psk FILE runs a collective over secured QPs, every rank
// with the key: the header says the protection and every result checks
// (#wrong 0); --integrity-only without a key, a key with kernel TCP, and
// a key too short are refused before anything runs.
func TestBenchSecure(t *testing.T) {
	dir := t.TempDir()
	psk := filepath.Join(dir, "psk")
	if err := os.WriteFile(psk, []byte("00112233445566778899aabbccddeeff\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--psk", psk}, "encrypted"},
		{[]string{"--psk", psk, "--integrity-only"}, "integrity"},
	} {
		out, _ := runBenchCLI(t, append([]string{"alltoall", "-b", "4K", "-e", "256K", "-f", "8", "-w", "1", "-n", "3", "--world", "3"}, tc.args...)...)
		if !strings.Contains(strings.SplitN(out, "\n", 2)[0], ", "+tc.want) {
			t.Fatalf("bench %v: the header does not say %s:\n%s", tc.args, tc.want, out)
		}
		rows := parseBenchTable(t, out)
		if len(rows) != 3 {
			t.Fatalf("bench %v: %d rows, want 3:\n%s", tc.args, len(rows), out)
		}
		for _, r := range rows {
			if r.wrong != "0" {
				t.Fatalf("bench %v: row %+v", tc.args, r)
			}
		}
	}
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"alltoall", "--integrity-only"},
		{"alltoall", "--psk", psk, "--transport", "tcp"},
		{"alltoall", "--psk", short},
	} {
		var stdout, stderr bytes.Buffer
		if err := benchMain(args, &stdout, &stderr, -1); err == nil {
			t.Errorf("spray bench %q: no error", args)
		}
	}
}

// spray compare --psk FILE --loopback runs the spray and roce rows over
// secured QPs, every element right, and its JSON says the protection; a
// key in the simulator, and --integrity-only without one, are refused.
func TestCompareSecure(t *testing.T) {
	dir := t.TempDir()
	psk := filepath.Join(dir, "psk")
	if err := os.WriteFile(psk, []byte("00112233445566778899aabbccddeeff\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if err := runCompare([]string{"--loopback", "--scenarios", "lossless", "--size", "64K", "--iters", "3",
		"--psk", psk, "--integrity-only", "--png", "", "--out", out}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "compare.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res bench.CompareResult
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if res.Protection != bench.ProtectionIntegrity || len(res.Rows) != 3 {
		t.Fatalf("protection %q, %d rows, want integrity and 3", res.Protection, len(res.Rows))
	}
	for _, r := range res.Rows {
		if r.Err != "" || r.Wrong != 0 || r.Iters != 3 {
			t.Errorf("%s: %d iterations, %d wrong, error %q", r.Profile, r.Iters, r.Wrong, r.Err)
		}
	}
	for _, args := range [][]string{
		{"--sim", "--psk", psk},
		{"--loopback", "--integrity-only"},
	} {
		if err := runCompare(args); err == nil {
			t.Errorf("compare %v: no error", args)
		}
	}
}

// writePKI writes a CA and a certificate it signed for 127.0.0.1, with its
// key, as PEM files in dir, and returns their paths.
func writePKI(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caPub, caKey, err := ed25519.GenerateKey(crand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "perf CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(crand.Reader, caTmpl, caTmpl, caPub, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	pub, priv, err := ed25519.GenerateKey(crand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(crand.Reader, tmpl, caCert, pub, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	ca, cert, key = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for f, b := range map[string]*pem.Block{ca: {Type: "CERTIFICATE", Bytes: caDER}, cert: {Type: "CERTIFICATE", Bytes: der}, key: {Type: "PRIVATE KEY", Bytes: pk}} {
		if err := os.WriteFile(f, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return ca, cert, key
}

// spray perf server --cert --key --ca and client --ca --cert --key run
// their control connection in TLS, both sides verified: a kernel TCP run
// inside it moves its bytes intact and reports tls. Certificate flags
// where they cannot apply, or half given, are refused before anything
// runs.
func TestPerfTLS(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := writePKI(t, dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	served := make(chan error, 1)
	go func() {
		served <- runPerf([]string{"server", "--listen", addr, "--cert", cert, "--key", key, "--ca", ca, "--timeout", "3s"})
	}()
	var rs []map[string]any
	for range 50 { // until the server listens
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	rs = runPerfJSON(t, "client", "--peer", addr, "--link", "tcp", "--total", "4M", "--pings", "10",
		"--ca", ca, "--cert", cert, "--key", key)
	if len(rs) != 1 || rs[0]["protection"] != "tls" || rs[0]["integrity_ok"] != true {
		t.Fatalf("client: %v, want one tcp run inside TLS, intact", rs)
	}
	<-served
	for _, args := range [][]string{
		{"--ca", ca}, // one process: --psk
		{"client", "--peer", "h", "--cert", cert}, // no --key
		{"server", "--ca", ca},                    // a server needs a certificate
		{"client", "--peer", "h", "--ca", ca, "--psk", filepath.Join(dir, "psk")},
		{"client", "--peer", "h", "--ca", filepath.Join(dir, "key.pem")}, // no certificate in it
	} {
		if err := runPerf(args); err == nil {
			t.Errorf("perf %v: no error", args)
		}
	}
}
