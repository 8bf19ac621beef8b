// Package socktest holds the test helpers that the socket links' tests
// (link/udp, link/raw) share: payloads that check themselves, and the
// send-then-drain loop of their allocation tests and benchmarks. Import it
// from tests only. Its functions are safe for concurrent use on different
// links; a link is used as link.Link says.
package socktest
