// Package transporttest is a test double for code built on package
// transport: two Engines, one QP each, connected over a link/mem fabric
// under a simulated clock (the quinn-proto Pair idea).
//
// Use it in tests that need a transfer between two engines without real
// sockets or wall-clock waits: NewPair builds the pair, the test posts work
// requests on QA and QB, and Pair.Run steps both engines, collects their
// completions in CA and CB and jumps the clock to the next thing that can
// happen (an engine deadline or a fabric delivery), so that simulated
// milliseconds take microseconds. Given equal seeds and configs, a run is
// deterministic. NewPairWith wraps A's or B's link (a capture, a fault
// injector) or gives B its own config.
//
// Caveats: a Pair is for tests only (it fails the test on setup errors),
// drives exactly one QP per engine, and is not safe for concurrent use.
// Package transport's own tests keep a package-internal copy of the same
// loop (transport/sim_test.go), since they cannot import this package.
package transporttest
