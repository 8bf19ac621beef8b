// Package wireshark holds spray's Wireshark dissector, spray.lua, and the
// tests that keep it in step with the wire codec (package transport/wire);
// it has no Go API.
//
// Load the dissector with tshark or Wireshark's -X option:
//
//	tshark -X lua_script:wireshark/spray.lua -r capture.pcap
//
// It takes UDP port 4791 and decodes every opcode spray speaks (the classic
// RC opcodes, the CNP, spray Data and spray ACK with their SACK words, INT
// regions and echoed hop records), verifies the ICRC, and hands other
// opcodes to Wireshark's InfiniBand dissector. Its fields are named
// spray.*; README.md in this folder lists them.
//
// The tests decode the golden captures in testdata with tshark and compare
// every field with what wire.Decode reads from the same frame; they skip
// when tshark is not installed (Debian package tshark) or was built without
// Lua. go test ./wireshark -run TestGoldenCaptures -update rewrites the
// captures.
package wireshark
