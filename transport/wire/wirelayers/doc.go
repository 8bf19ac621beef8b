// Package wirelayers is spray's RoCEv2 headers as gopacket layers: importing
// it registers a decoder for UDP port 4791, so that gopacket.NewPacket(frame,
// layers.LayerTypeEthernet, gopacket.Default) shows the BTH, the extension
// headers (RETH, AETH, ImmDt, CNP, spray Data, INT, spray Ack) and the
// payload of spray's frames, with their fields.
//
// Use it in tools, tests and debugging (pcap dumps, packet printing), not on
// the data path: package wire decodes the same frames in place without
// allocating, and also checks what gopacket layers cannot (the ICRC needs the
// IP header; lengths against the IP header). The byte layouts are in the wire
// package doc.
//
// Caveats: importing the package changes gopacket's global decoding of UDP
// port 4791 (gopacket itself decodes it as a plain payload). Each layer type
// also works in a gopacket.DecodingLayerParser, but there a RETH or INT layer
// cannot know the opcode that it belongs to, so it names the payload as the
// next layer even where ImmDt (RDMA WRITE Only with Immediate, spray
// KindWriteImm) or RETH/ImmDt (after the INT region of spray data) follow;
// gopacket.NewPacket, whose decoder follows the opcode, gets these right.
// Layer values are not safe for concurrent use.
package wirelayers
