// Package pcap writes the frames a link carries to a classic libpcap file
// that Wireshark, tshark, tcpdump and scapy read: a Writer for the file and
// Wrap, a link.Link that records every frame sent and received on another.
//
// Use it to debug or audit the transport on any link (AF_XDP, raw, UDP, the
// in-memory fabric): wrap the link before handing it to the engine, and
// close the Writer after the engine stops. ReadFile reads such a file back.
// Spray's own tests hand captures to tshark and scapy to cross-check the
// codec (internal/wirecheck).
//
// The file format is the classic one (not pcapng): little-endian, version
// 2.4, nanosecond timestamps (magic 0xa1b23c4d), snapshot length 65535,
// LINKTYPE_ETHERNET. Frames longer than 65535 bytes are cut to that length
// (their original length is recorded).
//
// Caveats: capturing is not free. Every frame is copied into the Writer's
// buffer (and from there to the file) on the caller's goroutine, under the
// Writer's lock, so a wrapped link moves fewer frames per second than a bare
// one, and links that share a Writer contend on its lock. Frames are recorded
// as the link exchanges them with the transport: a link whose kernel owns the
// lower headers (link/udp) shows the headers it rebuilds, not the bytes on
// the wire, and frames that a link drops inside Send are recorded anyway.
package pcap
