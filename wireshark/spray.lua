-- spray.lua: a Wireshark dissector for spray's wire format.
--
-- spray frames are RoCEv2: Ethernet | IPv4 or IPv6 | UDP (destination 4791,
-- source = the entropy) | BTH | extension headers | payload | pad | ICRC.
-- This dissector takes UDP port 4791 and decodes the opcodes spray speaks
-- (transport/wire/doc.go has every byte layout; docs/design.md, "Wire
-- format", the summary):
--
--   00-11  the classic RC opcodes (SEND, RDMA WRITE, RDMA READ, Acknowledge)
--   81     the RoCEv2 CNP
--   E0     spray Data: data header, INT region, RETH, ImmDt, payload
--   E1     spray ACK: ACK header, SACK words, echoed INT hop records
--
-- the security header of secured QPs (BTH byte 8 bit 6: a security header
-- after the BTH, an authentication tag before the ICRC; the payload
-- encrypted unless the header says integrity only), and verifies the ICRC
-- (with spray's INT region masked, as the codec does).
-- Every other opcode (UD, UC, atomics, ...) goes to Wireshark's own
-- InfiniBand dissector. The protocol is "spraywire" ("spray" is Sun RPC's
-- SPRAY in Wireshark); every field is under it: filter on spraywire.psn,
-- spraywire.data.msgid, spraywire.ack.sack.psns, spraywire.hop.qlen, ...
-- README.md in this folder lists the fields and preferences.
--
-- Load it with
--   tshark -X lua_script:wireshark/spray.lua -r capture.pcap
--   wireshark -X lua_script:wireshark/spray.lua capture.pcap
-- or copy it into the personal Lua plugins folder
-- (~/.local/lib/wireshark/plugins/). Tested with Wireshark 4.0 (Lua 5.2);
-- on Lua 5.3 and later it uses the native bit operators.
--
-- Adding a header: a new opcode is one entry in `opcodes` (its name and a
-- function that dissects what follows the BTH); a new header after the
-- spray data header is one entry in `data_exts` (when it is present and
-- how to dissect it) and, if a flag announces it, one bit in
-- DATA_FLAGS_KNOWN; a new header after the spray ACK header is one entry in
-- `ack_exts`. A header that covers every opcode goes in spray.dissector,
-- as the security header does (dissect_sec, after the BTH); a trailer
-- moves ctx.limit (the end of payload and pad) back by its length, as the
-- tag does.
-- wireshark/dissector_test.go decodes the captures in wireshark/testdata
-- with tshark and compares every field with spray's own decoder.

local spray = Proto("spraywire", "spray RoCEv2 transport")

-- bit32 is Lua 5.2's; Lua 5.3 and later have operators instead (written in
-- a string so that Lua 5.2 parses this file).
local bit32 = bit32 or load([[return {
    band = function(a, b) return a & b end,
    bor = function(a, b) return a | b end,
    bxor = function(a, b) return (a ~ b) & 0xFFFFFFFF end,
    bnot = function(a) return ~a & 0xFFFFFFFF end,
    btest = function(a, b) return a & b ~= 0 end,
    lshift = function(a, n) return (a << n) & 0xFFFFFFFF end,
    rshift = function(a, n) return (a & 0xFFFFFFFF) >> n end,
}]])()

-- Constants: transport/wire (types.go, int.go).
local UDP_PORT = 4791
local BTH_LEN, RETH_LEN, AETH_LEN, IMM_LEN, ICRC_LEN = 12, 16, 4, 4, 4
local CNP_PAD_LEN = 16
local DATA_HDR_LEN, ACK_HDR_LEN = 24, 40
local INT_SHIM_LEN, HOP_LEN, MAX_INT_HOPS = 4, 24, 8
local INT_VERSION = 1
local MAX_SACK_WORDS = 4
local FLAG_INT = 0x01
-- Credits: the data header's credit byte, the ACK's flags, the credit
-- header of grants and requests (12 bytes).
local DATA_UNSOLICITED, DATA_CREDITED = 0x01, 0x02
local ACK_CREDIT = 0x01
-- The message limit (end-to-end flow control): ACK flags bit 1, in the
-- MsgID field of a plain ACK.
local ACK_MSG_LIMIT = 0x02
local CREDIT_RETRY = 0x01
local CREDIT_LEN = 12
-- The security header (transport/wire/sec.go).
local SEC_BIT, SEC_LEN, TAG_LEN, SEC_VERSION = 0x40, 16, 16, 1
-- Trimmed: BTH byte 4 bit 5 (reserved in IBA, variant like FECN and BECN): a
-- switch cut a spray data packet after its data header (and security
-- header), with no INT region, payload, pad or tag; the ICRC follows.
local TRIM_BIT = 0x20
local SEC_INTEGRITY_ONLY = 0x01
-- The connect header (transport/wire/conn.go): BTH byte 8 bit 5, 32 bytes
-- after every other extension header of a spray data or ACK packet, on the
-- first packets of a QP made on demand.
local CONN_BIT, CONN_LEN, CONN_VERSION = 0x20, 32, 1
local CONN_REPLY, CONN_CLOSE = 0x01, 0x02
-- DATA_FLAGS_KNOWN is every data header flag this dissector understands;
-- any other bit set is an error, as in wire.Decode.
local DATA_FLAGS_KNOWN = FLAG_INT

local op_names = {
    [0x00] = "SEND First", [0x01] = "SEND Middle", [0x02] = "SEND Last",
    [0x03] = "SEND Last with Immediate", [0x04] = "SEND Only",
    [0x05] = "SEND Only with Immediate", [0x06] = "RDMA WRITE First",
    [0x07] = "RDMA WRITE Middle", [0x08] = "RDMA WRITE Last",
    [0x09] = "RDMA WRITE Last with Immediate", [0x0A] = "RDMA WRITE Only",
    [0x0B] = "RDMA WRITE Only with Immediate", [0x0C] = "RDMA READ Request",
    [0x0D] = "RDMA READ Response First", [0x0E] = "RDMA READ Response Middle",
    [0x0F] = "RDMA READ Response Last", [0x10] = "RDMA READ Response Only",
    [0x11] = "Acknowledge", [0x81] = "CNP", [0xE0] = "spray Data", [0xE1] = "spray ACK",
    [0xE2] = "spray Credit Grant", [0xE3] = "spray Credit Request",
}

local kind_names = {
    [0] = "Send", [1] = "SendImm", [2] = "Write", [3] = "WriteImm",
    [4] = "ReadResp", [5] = "ReadReq",
}
-- Per kind: whether a RETH and an ImmDt follow the data header (and INT).
local kind_reth = { [2] = true, [3] = true, [5] = true }
local kind_imm = { [1] = true, [3] = true, [4] = true }
local kind_payload = { [0] = true, [1] = true, [2] = true, [3] = true, [4] = true, [5] = false }

local syndrome_types = { [0] = "ACK", [1] = "RNR NAK", [2] = "reserved", [3] = "NAK" }
local nak_names = {
    [0] = "PSN sequence error", [1] = "invalid request", [2] = "remote access error",
    [3] = "remote operational error", [4] = "invalid RD request",
}

local icrc_status_names = { [0] = "unverified", [1] = "good", [2] = "bad" }

-- Fields.
local F = {
    opcode = ProtoField.uint8("spraywire.opcode", "Opcode", base.HEX, op_names),
    se = ProtoField.bool("spraywire.se", "Solicited event", 8, nil, 0x80),
    m = ProtoField.bool("spraywire.m", "Migration request", 8, nil, 0x40),
    padcnt = ProtoField.uint8("spraywire.padcnt", "Pad count", base.DEC, nil, 0x30),
    tver = ProtoField.uint8("spraywire.tver", "Transport header version", base.DEC, nil, 0x0F),
    pkey = ProtoField.uint16("spraywire.pkey", "P_Key", base.HEX),
    fecn = ProtoField.bool("spraywire.fecn", "FECN", 8, nil, 0x80),
    becn = ProtoField.bool("spraywire.becn", "BECN", 8, nil, 0x40),
    trimmed = ProtoField.bool("spraywire.trimmed", "Trimmed (cut to its headers by a switch)", 8, nil, TRIM_BIT),
    resv6 = ProtoField.uint8("spraywire.resv6", "Reserved", base.HEX, nil, 0x1F),
    destqp = ProtoField.uint24("spraywire.destqp", "Destination QP", base.HEX),
    ackreq = ProtoField.bool("spraywire.ackreq", "Acknowledge request", 8, nil, 0x80),
    secured = ProtoField.bool("spraywire.secured", "Secured (security header and tag)", 8, nil, SEC_BIT),
    conn_bit = ProtoField.bool("spraywire.connbit", "Connect header (QP made on demand)", 8, nil, CONN_BIT),
    resv7 = ProtoField.uint8("spraywire.resv7", "Reserved", base.HEX, nil, 0x1F),
    psn = ProtoField.uint24("spraywire.psn", "PSN", base.DEC),
    entropy = ProtoField.uint16("spraywire.entropy", "Entropy (UDP source port)", base.DEC),
    ecn = ProtoField.uint8("spraywire.ecn", "ECN", base.DEC,
        { [0] = "Not-ECT", [1] = "ECT(1)", [2] = "ECT(0)", [3] = "CE" }),

    reth = ProtoField.none("spraywire.reth", "RETH"),
    reth_va = ProtoField.uint64("spraywire.reth.va", "Virtual address", base.HEX),
    reth_rkey = ProtoField.uint32("spraywire.reth.rkey", "R_Key", base.HEX),
    reth_len = ProtoField.uint32("spraywire.reth.len", "DMA length", base.DEC),

    aeth = ProtoField.none("spraywire.aeth", "AETH"),
    aeth_syndrome = ProtoField.uint8("spraywire.aeth.syndrome", "Syndrome", base.HEX),
    aeth_msn = ProtoField.uint24("spraywire.aeth.msn", "MSN", base.DEC),

    syn_type = ProtoField.uint8("spraywire.syndrome.type", "Type", base.DEC, syndrome_types, 0x60),
    syn_value = ProtoField.uint8("spraywire.syndrome.value", "Credit count, RNR timer or NAK code", base.DEC, nil, 0x1F),
    nak = ProtoField.string("spraywire.nak", "NAK"),

    immdt = ProtoField.uint32("spraywire.immdt", "Immediate data", base.HEX),
    cnp_reserved = ProtoField.bytes("spraywire.cnp.reserved", "CNP reserved"),

    data = ProtoField.none("spraywire.data", "spray data header"),
    data_msgid = ProtoField.uint32("spraywire.data.msgid", "MsgID", base.DEC),
    data_offset = ProtoField.uint32("spraywire.data.offset", "Offset", base.DEC),
    data_msglen = ProtoField.uint32("spraywire.data.msglen", "Message length", base.DEC),
    data_kind = ProtoField.uint8("spraywire.data.kind", "Kind", base.DEC, kind_names),
    data_flags = ProtoField.uint8("spraywire.data.flags", "Flags", base.HEX),
    data_flag_int = ProtoField.bool("spraywire.data.flags.int", "INT region follows", 8, nil, FLAG_INT),
    data_intmax = ProtoField.uint8("spraywire.data.intmax", "INT hop slots", base.DEC),
    data_credit = ProtoField.uint8("spraywire.data.credit", "Credit", base.HEX),
    data_credit_unsol = ProtoField.bool("spraywire.data.credit.unsolicited", "Sent unsolicited", 8, nil, DATA_UNSOLICITED),
    data_credit_credited = ProtoField.bool("spraywire.data.credit.credited", "Sent against credit", 8, nil, DATA_CREDITED),
    data_txtime = ProtoField.uint64("spraywire.data.txtime", "Transmit time (ns)", base.DEC),
    data_readreq = ProtoField.uint32("spraywire.data.readreq", "Answers the READ request of MsgID", base.DEC),

    int = ProtoField.none("spraywire.int", "INT region"),
    int_version = ProtoField.uint8("spraywire.int.version", "Version", base.DEC),
    int_count = ProtoField.uint8("spraywire.int.count", "Hop records filled", base.DEC),
    int_max = ProtoField.uint8("spraywire.int.max", "Hop slots", base.DEC),
    int_reserved = ProtoField.uint8("spraywire.int.reserved", "Reserved", base.HEX),
    int_empty = ProtoField.bytes("spraywire.int.empty", "Empty hop slots"),

    hop = ProtoField.none("spraywire.hop", "Hop record"),
    hop_switch = ProtoField.uint16("spraywire.hop.switch", "Switch", base.DEC),
    hop_port = ProtoField.uint16("spraywire.hop.port", "Egress port", base.DEC),
    hop_rate = ProtoField.uint32("spraywire.hop.rate", "Egress rate (Mbit/s)", base.DEC),
    hop_ts = ProtoField.uint64("spraywire.hop.ts", "Egress timestamp (ns)", base.DEC),
    hop_qlen = ProtoField.uint32("spraywire.hop.qlen", "Queue depth (bytes)", base.DEC),
    hop_txbytes = ProtoField.uint32("spraywire.hop.txbytes", "Transmitted bytes", base.DEC),

    ack = ProtoField.none("spraywire.ack", "spray ACK header"),
    ack_cumpsn = ProtoField.uint32("spraywire.ack.cumpsn", "Cumulative PSN (next expected)", base.DEC),
    ack_ackedpsn = ProtoField.uint32("spraywire.ack.ackedpsn", "Acknowledged PSN", base.DEC),
    ack_sackbase = ProtoField.uint32("spraywire.ack.sackbase", "SACK base PSN", base.DEC),
    ack_msgid = ProtoField.uint32("spraywire.ack.msgid", "MsgID (of a NAK; message limit with its flag)", base.DEC),
    ack_echotime = ProtoField.uint64("spraywire.ack.echotime", "Echoed transmit time (ns)", base.DEC),
    ack_hold = ProtoField.uint32("spraywire.ack.hold", "Hold", base.HEX),
    ack_hold_ns = ProtoField.uint32("spraywire.ack.hold.ns", "Hold time (ns)", base.DEC, nil, 0x7FFFFFFF),
    ack_hold_arrival = ProtoField.bool("spraywire.ack.hold.from_arrival", "Counted from host arrival", 32, nil, 0x80000000),
    ack_ecncount = ProtoField.uint16("spraywire.ack.ecncount", "CE-marked packets", base.DEC),
    ack_entropy = ProtoField.uint16("spraywire.ack.entropy", "Entropy of the acknowledged packet", base.DEC),
    ack_syndrome = ProtoField.uint8("spraywire.ack.syndrome", "Syndrome", base.HEX),
    ack_sackwords = ProtoField.uint8("spraywire.ack.sackwords", "SACK words", base.DEC),
    ack_inthops = ProtoField.uint8("spraywire.ack.inthops", "Echoed hop records", base.DEC),
    ack_flags = ProtoField.uint8("spraywire.ack.flags", "Flags", base.HEX),
    ack_flag_credit = ProtoField.bool("spraywire.ack.flags.credit", "Carries credit", 8, nil, ACK_CREDIT),
    ack_flag_msglimit = ProtoField.bool("spraywire.ack.flags.msglimit", "Carries the message limit", 8, nil, ACK_MSG_LIMIT),
    ack_credit = ProtoField.uint32("spraywire.ack.credit", "Credit (packets, cumulative)", base.DEC),

    conn = ProtoField.none("spraywire.conn", "spray connect header"),
    conn_version = ProtoField.uint8("spraywire.conn.version", "Version", base.DEC, nil, 0xF0),
    conn_flags = ProtoField.uint8("spraywire.conn.flags", "Flags", base.HEX, nil, 0x0F),
    conn_reply = ProtoField.bool("spraywire.conn.reply", "Reply (from the acceptor)", 8, nil, CONN_REPLY),
    conn_close = ProtoField.bool("spraywire.conn.close", "Close (the sender closed the idle QP)", 8, nil, CONN_CLOSE),
    conn_reserved = ProtoField.bytes("spraywire.conn.reserved", "Reserved"),
    conn_srcqp = ProtoField.uint24("spraywire.conn.srcqp", "Source QP", base.HEX),
    conn_psn = ProtoField.uint24("spraywire.conn.psn", "Initiator's first PSN", base.DEC),
    conn_peerpsn = ProtoField.uint24("spraywire.conn.peerpsn", "Acceptor's first PSN", base.DEC),
    conn_token = ProtoField.uint64("spraywire.conn.token", "Token", base.HEX),
    conn_ports = ProtoField.uint16("spraywire.conn.ports", "Entropy for the acceptor", base.DEC),
    credit = ProtoField.none("spraywire.credit", "spray credit header"),
    credit_count = ProtoField.uint32("spraywire.credit.count", "Count (packets, cumulative)", base.DEC),
    credit_used = ProtoField.uint32("spraywire.credit.used", "Used (packets sent against credit)", base.DEC),
    credit_flags = ProtoField.uint8("spraywire.credit.flags", "Flags", base.HEX),
    credit_flag_retry = ProtoField.bool("spraywire.credit.flags.retry", "Retry", 8, nil, CREDIT_RETRY),
    credit_reserved = ProtoField.bytes("spraywire.credit.reserved", "Reserved"),
    ack_sack_block = ProtoField.none("spraywire.ack.sacks", "SACK"),
    ack_sack = ProtoField.uint64("spraywire.ack.sack", "SACK word", base.HEX),
    ack_sack_psns = ProtoField.string("spraywire.ack.sack.psns", "SACKed PSNs"),

    sec = ProtoField.none("spraywire.sec", "Security header"),
    sec_version = ProtoField.uint8("spraywire.sec.version", "Version", base.DEC, nil, 0xF0),
    sec_flags = ProtoField.uint8("spraywire.sec.flags", "Flags", base.HEX, nil, 0x0F),
    sec_integrity = ProtoField.bool("spraywire.sec.integrity", "Integrity only (payload in clear)", 8, nil, SEC_INTEGRITY_ONLY),
    sec_reserved = ProtoField.bytes("spraywire.sec.reserved", "Reserved"),
    sec_epoch = ProtoField.uint32("spraywire.sec.epoch", "Key epoch", base.DEC),
    sec_counter = ProtoField.uint64("spraywire.sec.counter", "Packet counter", base.DEC),
    sec_ciphertext = ProtoField.bytes("spraywire.sec.ciphertext", "Encrypted payload and pad"),
    sec_tag = ProtoField.bytes("spraywire.sec.tag", "Authentication tag (AES-GCM)"),

    payload = ProtoField.bytes("spraywire.payload", "Payload"),
    payload_len = ProtoField.uint32("spraywire.payload.len", "Payload length", base.DEC),
    pad = ProtoField.bytes("spraywire.pad", "Pad"),
    icrc = ProtoField.uint32("spraywire.icrc", "ICRC", base.HEX),
    icrc_status = ProtoField.uint8("spraywire.icrc.status", "ICRC status", base.DEC, icrc_status_names),
    icrc_computed = ProtoField.uint32("spraywire.icrc.computed", "Computed ICRC", base.HEX),
}
local field_list = {}
for _, f in pairs(F) do field_list[#field_list + 1] = f end
spray.fields = field_list

local E = {
    malformed = ProtoExpert.new("spraywire.malformed", "Malformed spray packet", expert.group.MALFORMED, expert.severity.ERROR),
    icrc_bad = ProtoExpert.new("spraywire.icrc.bad", "Bad ICRC", expert.group.CHECKSUM, expert.severity.ERROR),
    nak = ProtoExpert.new("spraywire.nak.expert", "NAK", expert.group.SEQUENCE, expert.severity.NOTE),
}
spray.experts = { E.malformed, E.icrc_bad, E.nak }

spray.prefs.verify_icrc = Pref.bool("Verify the ICRC", true,
    "Recompute every ICRC (CRC-32 over the IP, UDP and transport headers and payload, variant fields and spray's INT region masked)")
spray.prefs.classic_to_infiniband = Pref.bool("Classic opcodes to the InfiniBand dissector", false,
    "Hand the classic RC opcodes and the CNP to Wireshark's InfiniBand dissector, keeping only spray's own opcodes (E0, E1) here")

-- Fields of the lower layers, for the entropy, ECN and the ICRC.
local fx_ip = Field.new("ip")
local fx_ipv6 = Field.new("ipv6")
local fx_ip_ecn = Field.new("ip.dsfield.ecn")
local fx_ipv6_ecn = Field.new("ipv6.tclass.ecn")

-- CRC-32 (IEEE 802.3, reflected), as hash/crc32.IEEE.
local crc_table = {}
for i = 0, 255 do
    local c = i
    for _ = 1, 8 do
        if bit32.band(c, 1) ~= 0 then
            c = bit32.bxor(0xEDB88320, bit32.rshift(c, 1))
        else
            c = bit32.rshift(c, 1)
        end
    end
    crc_table[i] = c
end

local function crc_bytes(crc, ba, from, to, mask_from, mask_to)
    local band, bxor, rshift = bit32.band, bit32.bxor, bit32.rshift
    for i = from, to do
        local b = ba:get_index(i)
        if mask_from and i >= mask_from and i < mask_to then b = 0xFF end
        crc = bxor(crc_table[band(bxor(crc, b), 0xFF)], rshift(crc, 8))
    end
    return crc
end

local function crc_byte(crc, b)
    return bit32.bxor(crc_table[bit32.band(bit32.bxor(crc, b), 0xFF)], bit32.rshift(crc, 8))
end

-- last_of returns the last occurrence of a field extractor's values.
local function last_of(fx)
    local all = { fx() }
    return all[#all]
end

-- compute_icrc returns the ICRC of the packet whose UDP payload is tvb, or
-- nil when the IP header is not at hand. int_off and int_len locate the INT
-- region in tvb (masked), or are nil.
local function compute_icrc(tvb, pinfo, int_off, int_len)
    local fi4, fi6 = last_of(fx_ip), last_of(fx_ipv6)
    local fi = fi4 or fi6
    if fi4 and fi6 then
        if fi6.offset > fi4.offset then fi = fi6 else fi = fi4 end
    end
    if not fi then return nil end
    local v6 = fi == fi6
    local ip = fi.range:bytes()
    local crc = 0xFFFFFFFF
    for _ = 1, 8 do crc = crc_byte(crc, 0xFF) end -- the absent LRH
    if v6 then
        if ip:len() < 40 then return nil end
        -- Traffic class and flow label: the low nibble of byte 0, bytes 1-3.
        crc = crc_byte(crc, bit32.bor(ip:get_index(0), 0x0F))
        for _ = 1, 3 do crc = crc_byte(crc, 0xFF) end
        crc = crc_bytes(crc, ip, 4, 6)
        crc = crc_byte(crc, 0xFF) -- hop limit
        crc = crc_bytes(crc, ip, 8, 39)
    else
        -- TOS (1), TTL (8) and header checksum (10, 11) as all ones.
        local n = ip:len()
        for i = 0, n - 1 do
            local b = ip:get_index(i)
            if i == 1 or i == 8 or i == 10 or i == 11 then b = 0xFF end
            crc = crc_byte(crc, b)
        end
    end
    local udp_len = tvb:reported_length_remaining() + 8
    for _, b in ipairs({
        bit32.rshift(pinfo.src_port, 8), bit32.band(pinfo.src_port, 0xFF),
        bit32.rshift(pinfo.dst_port, 8), bit32.band(pinfo.dst_port, 0xFF),
        bit32.rshift(udp_len, 8), bit32.band(udp_len, 0xFF), 0xFF, 0xFF,
    }) do
        crc = crc_byte(crc, b)
    end
    local t = tvb:bytes()
    local n = t:len() - ICRC_LEN
    crc = crc_bytes(crc, t, 0, 3)
    crc = crc_byte(crc, 0xFF) -- BTH byte 4: FECN, BECN, reserved
    if int_off then
        crc = crc_bytes(crc, t, 5, n - 1, int_off, int_off + int_len)
    else
        crc = crc_bytes(crc, t, 5, n - 1)
    end
    return bit32.bxor(crc, 0xFFFFFFFF)
end

-- A context carries what one packet's dissection has found so far.
-- ctx.err is set by the first problem; dissection stops there.
local function fail(ctx, item, msg)
    if not ctx.err then
        ctx.err = msg
        item:add_proto_expert_info(E.malformed, msg)
    end
    return nil
end

-- need checks that n bytes remain at off before the trailer.
local function need(ctx, tree, off, n, what)
    if off + n > ctx.limit then
        return fail(ctx, tree, string.format("%s needs %d bytes, %d left", what, n, ctx.limit - off))
    end
    return true
end

local function add_syndrome(ctx, tree, field, r)
    local s = r:uint()
    local it = tree:add(field, r)
    it:add(F.syn_type, r)
    it:add(F.syn_value, r)
    local ty, v = bit32.rshift(bit32.band(s, 0x60), 5), bit32.band(s, 0x1F)
    local text
    if bit32.band(s, 0xE0) == 0x60 then
        text = nak_names[v] or string.format("NAK code %d", v)
        local ni = it:add(F.nak, r, text)
        ni:set_generated()
        ni:add_proto_expert_info(E.nak, "NAK: " .. text)
    elseif ty == 0 then
        text = string.format("ACK, credits %d", v)
    elseif ty == 1 then
        text = string.format("RNR NAK, timer %d", v)
    else
        text = string.format("syndrome 0x%02x", s)
    end
    it:append_text(" (" .. text .. ")")
    ctx.info[#ctx.info + 1] = text
    return s
end

local function dissect_reth(tvb, off, tree, ctx)
    if not need(ctx, tree, off, RETH_LEN, "RETH") then return nil end
    local t = tree:add(F.reth, tvb(off, RETH_LEN))
    t:add(F.reth_va, tvb(off, 8))
    t:add(F.reth_rkey, tvb(off + 8, 4))
    t:add(F.reth_len, tvb(off + 12, 4))
    ctx.info[#ctx.info + 1] = string.format("rkey 0x%x len %d", tvb(off + 8, 4):uint(), tvb(off + 12, 4):uint())
    return off + RETH_LEN
end

local function dissect_imm(tvb, off, tree, ctx)
    if not need(ctx, tree, off, IMM_LEN, "ImmDt") then return nil end
    local it = tree:add(F.immdt, tvb(off, IMM_LEN))
    if ctx.kind == 4 then
        it:append_text(" (MsgID of the READ request answered)")
        tree:add(F.data_readreq, tvb(off, IMM_LEN)):set_generated()
        ctx.info[#ctx.info + 1] = string.format("answers MsgID %d", tvb(off, IMM_LEN):uint())
    elseif ctx.secured and (tvb(off, IMM_LEN):uint() == 0x53504305 or tvb(off, IMM_LEN):uint() == 0x53504306) then
        -- A secured connection's close over its QP: an empty SEND with
        -- this immediate is DREQ (…05) or DREP (…06) (docs/design.md).
        local what = tvb(off, IMM_LEN):uint() == 0x53504305 and "DREQ" or "DREP"
        it:append_text(" (close marker " .. what .. " when the message is empty)")
        ctx.info[#ctx.info + 1] = "close marker " .. what
    end
    return off + IMM_LEN
end

local function dissect_aeth(tvb, off, tree, ctx)
    if not need(ctx, tree, off, AETH_LEN, "AETH") then return nil end
    local t = tree:add(F.aeth, tvb(off, AETH_LEN))
    add_syndrome(ctx, t, F.aeth_syndrome, tvb(off, 1))
    t:add(F.aeth_msn, tvb(off + 1, 3))
    ctx.info[#ctx.info + 1] = string.format("MSN %d", tvb(off + 1, 3):uint())
    return off + AETH_LEN
end

local function dissect_cnp(tvb, off, tree, ctx)
    if not need(ctx, tree, off, CNP_PAD_LEN, "CNP") then return nil end
    tree:add(F.cnp_reserved, tvb(off, CNP_PAD_LEN))
    return off + CNP_PAD_LEN
end

-- dissect_hops adds n hop records at off under tree.
local function dissect_hops(tvb, off, n, tree)
    for i = 0, n - 1 do
        local o = off + i * HOP_LEN
        local h = tree:add(F.hop, tvb(o, HOP_LEN))
        h:append_text(string.format(" %d: switch %d port %d, queue %d bytes",
            i, tvb(o, 2):uint(), tvb(o + 2, 2):uint(), tvb(o + 16, 4):uint()))
        h:add(F.hop_switch, tvb(o, 2))
        h:add(F.hop_port, tvb(o + 2, 2))
        h:add(F.hop_rate, tvb(o + 4, 4))
        h:add(F.hop_ts, tvb(o + 8, 8))
        h:add(F.hop_qlen, tvb(o + 16, 4))
        h:add(F.hop_txbytes, tvb(o + 20, 4))
    end
end

-- dissect_int: the INT region after the spray data header. The whole
-- region is variant (masked in the ICRC): switches fill it in place.
local function dissect_int(tvb, off, tree, ctx)
    local max = ctx.intmax
    if max > MAX_INT_HOPS then
        return fail(ctx, tree, string.format("INT hop slots %d, at most %d", max, MAX_INT_HOPS))
    end
    local n = INT_SHIM_LEN + max * HOP_LEN
    if not need(ctx, tree, off, n, "INT region") then return nil end
    local t = tree:add(F.int, tvb(off, n))
    local vi = t:add(F.int_version, tvb(off, 1))
    local ci = t:add(F.int_count, tvb(off + 1, 1))
    local mi = t:add(F.int_max, tvb(off + 2, 1))
    t:add(F.int_reserved, tvb(off + 3, 1))
    local cnt = tvb(off + 1, 1):uint()
    if tvb(off, 1):uint() ~= INT_VERSION then
        return fail(ctx, vi, string.format("INT version %d, want %d", tvb(off, 1):uint(), INT_VERSION))
    end
    if tvb(off + 2, 1):uint() ~= max then
        return fail(ctx, mi, string.format("INT shim max %d, data header says %d", tvb(off + 2, 1):uint(), max))
    end
    if cnt > max then
        return fail(ctx, ci, string.format("INT hop count %d above its %d slots", cnt, max))
    end
    t:append_text(string.format(", %d of %d hop records", cnt, max))
    dissect_hops(tvb, off + INT_SHIM_LEN, cnt, t)
    if cnt < max then
        t:add(F.int_empty, tvb(off + INT_SHIM_LEN + cnt * HOP_LEN, (max - cnt) * HOP_LEN))
    end
    ctx.int_off, ctx.int_len = off, n
    ctx.info[#ctx.info + 1] = string.format("INT %d/%d", cnt, max)
    return off + n
end

-- dissect_sec: the security header of a secured packet, after the BTH.
-- The tag before the ICRC moves the end of payload and pad (ctx.limit)
-- back; ctx.encrypted says the payload and pad are ciphertext.
local function dissect_sec(tvb, off, tree, ctx)
    if ctx.trimmed then
        -- A trimmed packet lost its tag with its payload.
        if not need(ctx, tree, off, SEC_LEN, "security header") then return nil end
    elseif not need(ctx, tree, off, SEC_LEN + TAG_LEN, "security header and tag") then
        return nil
    end
    local t = tree:add(F.sec, tvb(off, SEC_LEN))
    local vi = t:add(F.sec_version, tvb(off, 1))
    local fi = t:add(F.sec_flags, tvb(off, 1))
    fi:add(F.sec_integrity, tvb(off, 1))
    local ri = t:add(F.sec_reserved, tvb(off + 1, 3))
    t:add(F.sec_epoch, tvb(off + 4, 4))
    t:add(F.sec_counter, tvb(off + 8, 8))
    local b0 = tvb(off, 1):uint()
    local flags = bit32.band(b0, 0x0F)
    if not ctx.trimmed then
        ctx.limit = ctx.limit - TAG_LEN
        ctx.tag_off = ctx.limit
    end
    ctx.encrypted = bit32.band(flags, SEC_INTEGRITY_ONLY) == 0
    local mode = "encrypted"
    if not ctx.encrypted then mode = "integrity only" end
    t:append_text(string.format(", epoch %d, counter %s, %s", tvb(off + 4, 4):uint(), tvb(off + 8, 8):uint64(), mode))
    ctx.info[#ctx.info + 1] = string.format("secured (%s) epoch %d ctr %s", mode, tvb(off + 4, 4):uint(), tvb(off + 8, 8):uint64())
    if bit32.rshift(b0, 4) ~= SEC_VERSION then
        return fail(ctx, vi, string.format("security header version %d, want %d", bit32.rshift(b0, 4), SEC_VERSION))
    end
    if bit32.band(flags, bit32.bnot(SEC_INTEGRITY_ONLY)) ~= 0 then
        return fail(ctx, fi, string.format("unknown security flags 0x%x", flags))
    end
    if tvb(off + 1, 3):uint() ~= 0 then
        return fail(ctx, ri, "reserved bytes of the security header are not 0")
    end
    return off + SEC_LEN
end

-- Headers after the spray data header, in wire order: present(ctx) says
-- whether the packet has it (from the data header's fields, in ctx),
-- dissect(tvb, off, tree, ctx) adds it and returns the offset after it, or
-- nil after reporting a problem.
local data_exts = {
    { present = function(ctx) return bit32.band(ctx.flags, FLAG_INT) ~= 0 end, dissect = dissect_int },
    { present = function(ctx) return kind_reth[ctx.kind] end, dissect = dissect_reth },
    { present = function(ctx) return kind_imm[ctx.kind] end, dissect = dissect_imm },
}

local function dissect_data(tvb, off, tree, ctx)
    if not need(ctx, tree, off, DATA_HDR_LEN, "spray data header") then return nil end
    local t = tree:add(F.data, tvb(off, DATA_HDR_LEN))
    t:add(F.data_msgid, tvb(off, 4))
    t:add(F.data_offset, tvb(off + 4, 4))
    t:add(F.data_msglen, tvb(off + 8, 4))
    local ki = t:add(F.data_kind, tvb(off + 12, 1))
    local fi = t:add(F.data_flags, tvb(off + 13, 1))
    fi:add(F.data_flag_int, tvb(off + 13, 1))
    local xi = t:add(F.data_intmax, tvb(off + 14, 1))
    local ci = t:add(F.data_credit, tvb(off + 15, 1))
    ci:add(F.data_credit_unsol, tvb(off + 15, 1))
    ci:add(F.data_credit_credited, tvb(off + 15, 1))
    t:add(F.data_txtime, tvb(off + 16, 8))
    local credit = tvb(off + 15, 1):uint()
    ctx.kind, ctx.flags, ctx.intmax = tvb(off + 12, 1):uint(), tvb(off + 13, 1):uint(), tvb(off + 14, 1):uint()
    ctx.info[#ctx.info + 1] = string.format("%s MsgID %d off %d/%d", kind_names[ctx.kind] or "?",
        tvb(off, 4):uint(), tvb(off + 4, 4):uint(), tvb(off + 8, 4):uint())
    if not kind_names[ctx.kind] then
        return fail(ctx, ki, string.format("unknown kind %d", ctx.kind))
    end
    if bit32.band(ctx.flags, bit32.bnot(DATA_FLAGS_KNOWN)) ~= 0 then
        return fail(ctx, fi, string.format("unknown flags 0x%02x", bit32.band(ctx.flags, bit32.bnot(DATA_FLAGS_KNOWN))))
    end
    if credit ~= 0 and credit ~= DATA_UNSOLICITED and credit ~= DATA_CREDITED then
        return fail(ctx, ci, string.format("credit byte 0x%02x, want 0, 0x01 or 0x02", credit))
    end
    if bit32.band(ctx.flags, FLAG_INT) == 0 and ctx.intmax ~= 0 then
        return fail(ctx, xi, string.format("%d INT hop slots without the INT flag", ctx.intmax))
    end
    ctx.payload = kind_payload[ctx.kind]
    off = off + DATA_HDR_LEN
    if ctx.trimmed then
        -- The switch cut everything after the data header and cleared the
        -- INT flag and slot count (wire.Trim).
        ctx.payload = false
        ctx.encrypted = false
        ctx.info[#ctx.info + 1] = "TRIMMED"
        if ctx.flags ~= 0 then
            return fail(ctx, fi, "flags set on a trimmed packet")
        end
        return off
    end
    for _, x in ipairs(data_exts) do
        if x.present(ctx) then
            off = x.dissect(tvb, off, tree, ctx)
            if not off then return nil end
        end
    end
    return off
end

-- sack_psns lists the PSNs that the SACK words at off mark received, as
-- ranges: bit i of word w is PSN base+64w+i (24-bit wraparound).
local function sack_psns(tvb, off, words, base)
    local out, first, last = {}, nil, nil
    local function flush()
        if first then
            if first == last then
                out[#out + 1] = string.format("%d", first)
            else
                out[#out + 1] = string.format("%d-%d", first, last)
            end
        end
    end
    local idx = 0
    for w = 0, words - 1 do
        -- A word is big-endian: its least significant bit is the last byte's.
        local hi, lo = tvb(off + 8 * w, 4):uint(), tvb(off + 8 * w + 4, 4):uint()
        for i = 0, 63 do
            local set
            if i < 32 then set = bit32.btest(lo, bit32.lshift(1, i)) else set = bit32.btest(hi, bit32.lshift(1, i - 32)) end
            local psn = (base + idx) % 0x1000000
            if set then
                if first and psn == (last + 1) % 0x1000000 then
                    last = psn
                else
                    flush()
                    first, last = psn, psn
                end
            end
            idx = idx + 1
        end
    end
    flush()
    return table.concat(out, ",")
end

local function dissect_sack(tvb, off, tree, ctx)
    local n = ctx.sackwords * 8
    if not need(ctx, tree, off, n, "SACK words") then return nil end
    local t = tree:add(F.ack_sack_block, tvb(off, n))
    for w = 0, ctx.sackwords - 1 do
        t:add(F.ack_sack, tvb(off + 8 * w, 8))
    end
    local s = sack_psns(tvb, off, ctx.sackwords, ctx.sackbase)
    if s == "" then s = "none" end
    t:append_text(string.format(" from PSN %d: %s", ctx.sackbase, s))
    t:add(F.ack_sack_psns, tvb(off, n), s):set_generated()
    return off + n
end

local function dissect_ack_hops(tvb, off, tree, ctx)
    local n = ctx.inthops * HOP_LEN
    if not need(ctx, tree, off, n, "echoed hop records") then return nil end
    if ctx.inthops > 0 then
        local t = tree:add(F.int, tvb(off, n))
        t:append_text(string.format(": %d hop records echoed", ctx.inthops))
        dissect_hops(tvb, off, ctx.inthops, t)
    end
    return off + n
end

-- Headers after the spray ACK header, in wire order (as data_exts).
local ack_exts = {
    { present = function() return true end, dissect = dissect_sack },
    { present = function() return true end, dissect = dissect_ack_hops },
}

local function dissect_ack(tvb, off, tree, ctx)
    if not need(ctx, tree, off, ACK_HDR_LEN, "spray ACK header") then return nil end
    local t = tree:add(F.ack, tvb(off, ACK_HDR_LEN))
    local pi = {}
    pi[1] = t:add(F.ack_cumpsn, tvb(off, 4))
    pi[2] = t:add(F.ack_ackedpsn, tvb(off + 4, 4))
    pi[3] = t:add(F.ack_sackbase, tvb(off + 8, 4))
    t:add(F.ack_msgid, tvb(off + 12, 4))
    t:add(F.ack_echotime, tvb(off + 16, 8))
    local hi = t:add(F.ack_hold, tvb(off + 24, 4))
    hi:add(F.ack_hold_ns, tvb(off + 24, 4))
    hi:add(F.ack_hold_arrival, tvb(off + 24, 4))
    t:add(F.ack_ecncount, tvb(off + 28, 2))
    t:add(F.ack_entropy, tvb(off + 30, 2))
    local syn = add_syndrome(ctx, t, F.ack_syndrome, tvb(off + 32, 1))
    local si = t:add(F.ack_sackwords, tvb(off + 33, 1))
    local ii = t:add(F.ack_inthops, tvb(off + 34, 1))
    local fi = t:add(F.ack_flags, tvb(off + 35, 1))
    fi:add(F.ack_flag_credit, tvb(off + 35, 1))
    fi:add(F.ack_flag_msglimit, tvb(off + 35, 1))
    local ci = t:add(F.ack_credit, tvb(off + 36, 4))
    local aflags, acredit = tvb(off + 35, 1):uint(), tvb(off + 36, 4):uint()
    ctx.sackbase, ctx.sackwords, ctx.inthops = tvb(off + 8, 4):uint(), tvb(off + 33, 1):uint(), tvb(off + 34, 1):uint()
    table.insert(ctx.info, #ctx.info, string.format("cum %d acked %d", tvb(off, 4):uint(), tvb(off + 4, 4):uint()))
    if bit32.band(syn, 0xE0) == 0x60 then
        ctx.info[#ctx.info + 1] = string.format("MsgID %d", tvb(off + 12, 4):uint())
    end
    for i = 1, 3 do
        if tvb(off + 4 * (i - 1), 1):uint() ~= 0 then
            return fail(ctx, pi[i], "PSN wider than 24 bits")
        end
    end
    if ctx.sackwords == 0 or ctx.sackwords > MAX_SACK_WORDS then
        return fail(ctx, si, string.format("%d SACK words, want 1-%d", ctx.sackwords, MAX_SACK_WORDS))
    end
    if ctx.inthops > MAX_INT_HOPS then
        return fail(ctx, ii, string.format("%d echoed hop records, at most %d", ctx.inthops, MAX_INT_HOPS))
    end
    if bit32.band(aflags, bit32.bnot(bit32.bor(ACK_CREDIT, ACK_MSG_LIMIT))) ~= 0 then
        return fail(ctx, fi, string.format("unknown ACK flags 0x%02x", aflags))
    end
    if bit32.band(aflags, ACK_CREDIT) == 0 and acredit ~= 0 then
        return fail(ctx, ci, "credit without the credit flag")
    end
    if bit32.band(aflags, ACK_MSG_LIMIT) ~= 0 and bit32.band(syn, 0xE0) ~= 0 then
        return fail(ctx, fi, "message limit in a NAK")
    end
    if bit32.band(aflags, ACK_CREDIT) ~= 0 then
        ctx.info[#ctx.info + 1] = string.format("credit %d", acredit)
    end
    if bit32.band(aflags, ACK_MSG_LIMIT) ~= 0 then
        ctx.info[#ctx.info + 1] = string.format("msg limit %d", tvb(off + 12, 4):uint())
    end
    ctx.payload = false
    off = off + ACK_HDR_LEN
    for _, x in ipairs(ack_exts) do
        if x.present(ctx) then
            off = x.dissect(tvb, off, tree, ctx)
            if not off then return nil end
        end
    end
    return off
end

-- dissect_credit dissects the header of a credit grant or request.
local function dissect_credit(tvb, off, tree, ctx)
    if not need(ctx, tree, off, CREDIT_LEN, "spray credit header") then return nil end
    local t = tree:add(F.credit, tvb(off, CREDIT_LEN))
    t:add(F.credit_count, tvb(off, 4))
    t:add(F.credit_used, tvb(off + 4, 4))
    local fi = t:add(F.credit_flags, tvb(off + 8, 1))
    fi:add(F.credit_flag_retry, tvb(off + 8, 1))
    local ri = t:add(F.credit_reserved, tvb(off + 9, 3))
    local flags = tvb(off + 8, 1):uint()
    ctx.info[#ctx.info + 1] = string.format("count %d used %d", tvb(off, 4):uint(), tvb(off + 4, 4):uint())
    if bit32.band(flags, CREDIT_RETRY) ~= 0 then ctx.info[#ctx.info + 1] = "retry" end
    if bit32.band(flags, bit32.bnot(CREDIT_RETRY)) ~= 0 then
        return fail(ctx, fi, string.format("unknown credit flags 0x%02x", flags))
    end
    if tvb(off + 9, 3):uint() ~= 0 then
        return fail(ctx, ri, "reserved bytes of the credit header are not 0")
    end
    ctx.payload = false
    return off + CREDIT_LEN
end

-- dissect_conn dissects the connect header, after the opcode's extension
-- headers.
local function dissect_conn(tvb, off, tree, ctx)
    if not need(ctx, tree, off, CONN_LEN, "connect header") then return nil end
    local t = tree:add(F.conn, tvb(off, CONN_LEN))
    local vi = t:add(F.conn_version, tvb(off, 1))
    local fi = t:add(F.conn_flags, tvb(off, 1))
    fi:add(F.conn_reply, tvb(off, 1))
    fi:add(F.conn_close, tvb(off, 1))
    local ri = t:add(F.conn_reserved, tvb(off + 1, 3))
    t:add(F.conn_srcqp, tvb(off + 5, 3))
    t:add(F.conn_psn, tvb(off + 9, 3))
    t:add(F.conn_peerpsn, tvb(off + 13, 3))
    t:add(F.conn_token, tvb(off + 16, 8))
    for i = 0, 3 do t:add(F.conn_ports, tvb(off + 24 + 2 * i, 2)) end
    local b0 = tvb(off, 1):uint()
    local flags = bit32.band(b0, 0x0F)
    local role = "first packet"
    if bit32.band(flags, CONN_REPLY) ~= 0 then role = "reply" end
    if bit32.band(flags, CONN_CLOSE) ~= 0 then role = role .. ", close" end
    t:append_text(string.format(", %s, source QP 0x%06x, token 0x%s", role, tvb(off + 5, 3):uint(), tvb(off + 16, 8):uint64():tohex()))
    ctx.info[#ctx.info + 1] = string.format("connect (%s) src QP 0x%06x", role, tvb(off + 5, 3):uint())
    if bit32.rshift(b0, 4) ~= CONN_VERSION then
        return fail(ctx, vi, string.format("connect header version %d, want %d", bit32.rshift(b0, 4), CONN_VERSION))
    end
    if bit32.band(flags, bit32.bnot(bit32.bor(CONN_REPLY, CONN_CLOSE))) ~= 0 then
        return fail(ctx, fi, string.format("unknown connect flags 0x%x", flags))
    end
    if tvb(off + 1, 3):uint() ~= 0 or tvb(off + 4, 1):uint() ~= 0 or tvb(off + 8, 1):uint() ~= 0 or tvb(off + 12, 1):uint() ~= 0 then
        return fail(ctx, ri, "reserved bits of the connect header are not 0")
    end
    return off + CONN_LEN
end

-- classic returns the dissect function of a classic opcode: its extension
-- headers (IBA table 38, RoCEv2 CNP) and whether a payload follows.
local function classic(hdrs, payload)
    return function(tvb, off, tree, ctx)
        ctx.payload = payload
        for _, h in ipairs(hdrs) do
            off = h(tvb, off, tree, ctx)
            if not off then return nil end
        end
        return off
    end
end

local R, I, A, C = dissect_reth, dissect_imm, dissect_aeth, dissect_cnp

-- Every opcode spray speaks: the function that dissects what follows the
-- BTH (it sets ctx.payload to whether a payload may follow). Others go to
-- Wireshark's InfiniBand dissector.
local opcodes = {
    [0x00] = classic({}, true), [0x01] = classic({}, true), [0x02] = classic({}, true),
    [0x03] = classic({ I }, true), [0x04] = classic({}, true), [0x05] = classic({ I }, true),
    [0x06] = classic({ R }, true), [0x07] = classic({}, true), [0x08] = classic({}, true),
    [0x09] = classic({ I }, true), [0x0A] = classic({ R }, true), [0x0B] = classic({ R, I }, true),
    [0x0C] = classic({ R }, false),
    [0x0D] = classic({ A }, true), [0x0E] = classic({}, true), [0x0F] = classic({ A }, true),
    [0x10] = classic({ A }, true), [0x11] = classic({ A }, false),
    [0x81] = classic({ C }, false),
    [0xE0] = dissect_data,
    [0xE1] = dissect_ack,
    [0xE2] = dissect_credit,
    [0xE3] = dissect_credit,
}

local infiniband = Dissector.get("infiniband")

local function ecn()
    local v = last_of(fx_ip_ecn) or last_of(fx_ipv6_ecn)
    if v then return v.value end
    return nil
end

function spray.dissector(tvb, pinfo, root)
    local len = tvb:reported_length_remaining()
    if len < BTH_LEN + ICRC_LEN then return 0 end
    local op = tvb(0, 1):uint()
    local d = opcodes[op]
    if not d or (op < 0xE0 and spray.prefs.classic_to_infiniband) then
        if infiniband then return infiniband:call(tvb, pinfo, root) end
        return 0
    end
    pinfo.cols.protocol = "spraywire"
    local tree = root:add(spray, tvb())
    local ctx = { info = {}, limit = len - ICRC_LEN, payload = false }

    local bth = tree:add(tvb(0, BTH_LEN), "Base transport header")
    bth:add(F.opcode, tvb(0, 1))
    bth:add(F.se, tvb(1, 1))
    bth:add(F.m, tvb(1, 1))
    local pi = bth:add(F.padcnt, tvb(1, 1))
    local ti = bth:add(F.tver, tvb(1, 1))
    bth:add(F.pkey, tvb(2, 2))
    bth:add(F.fecn, tvb(4, 1))
    bth:add(F.becn, tvb(4, 1))
    local tri = bth:add(F.trimmed, tvb(4, 1))
    bth:add(F.resv6, tvb(4, 1))
    bth:add(F.destqp, tvb(5, 3))
    bth:add(F.ackreq, tvb(8, 1))
    bth:add(F.secured, tvb(8, 1))
    local ci = bth:add(F.conn_bit, tvb(8, 1))
    bth:add(F.resv7, tvb(8, 1))
    bth:add(F.psn, tvb(9, 3))
    tree:add(F.entropy, pinfo.src_port):set_generated()
    local e = ecn()
    if e then tree:add(F.ecn, e):set_generated() end
    local qp, psn = tvb(5, 3):uint(), tvb(9, 3):uint()
    local pad = bit32.rshift(bit32.band(tvb(1, 1):uint(), 0x30), 4)
    ctx.info[1] = string.format("%s QP 0x%06x PSN %d", op_names[op], qp, psn)
    tree:append_text(string.format(", %s, QP 0x%06x, PSN %d", op_names[op], qp, psn))

    if bit32.band(tvb(1, 1):uint(), 0x0F) ~= 0 then
        fail(ctx, ti, string.format("transport header version %d, want 0", bit32.band(tvb(1, 1):uint(), 0x0F)))
    end

    ctx.trimmed = bit32.band(tvb(4, 1):uint(), TRIM_BIT) ~= 0
    if ctx.trimmed and op ~= 0xE0 then
        fail(ctx, tri, "trimmed bit on a packet that is not spray data")
    end

    local off = BTH_LEN
    if not ctx.err and bit32.band(tvb(8, 1):uint(), SEC_BIT) ~= 0 then
        ctx.secured = true
        off = dissect_sec(tvb, off, tree, ctx)
    end
    if off and not ctx.err then off = d(tvb, off, tree, ctx) end
    if off and not ctx.err and bit32.band(tvb(8, 1):uint(), CONN_BIT) ~= 0 then
        if op ~= 0xE0 and op ~= 0xE1 then
            off = fail(ctx, ci, "connect header on an opcode other than spray data or ACK")
        elseif not ctx.trimmed then
            -- A trimmed packet lost its connect header with its payload.
            off = dissect_conn(tvb, off, tree, ctx)
        end
    end

    if off then
        -- Payload and pad, up to the trailer (the ICRC).
        local rest = ctx.limit - off
        if not ctx.payload then
            if rest ~= 0 then
                fail(ctx, tree, string.format("%d bytes after the headers of an opcode without payload", rest))
            elseif pad ~= 0 then
                fail(ctx, pi, string.format("pad count %d without payload", pad))
            end
        elseif rest % 4 ~= 0 then
            fail(ctx, tree, string.format("payload and pad of %d bytes, not a multiple of 4", rest))
        elseif pad > rest then
            fail(ctx, pi, string.format("pad count %d, %d bytes after the headers", pad, rest))
        else
            local n = rest - pad
            if ctx.encrypted then
                if rest > 0 then tree:add(F.sec_ciphertext, tvb(off, rest)) end
            else
                if n > 0 then
                    tree:add(F.payload, tvb(off, n))
                end
                if pad > 0 then tree:add(F.pad, tvb(off + n, pad)) end
            end
            tree:add(F.payload_len, n):set_generated()
            ctx.info[#ctx.info + 1] = string.format("len %d", n)
        end
    end

    if ctx.tag_off then tree:add(F.sec_tag, tvb(ctx.tag_off, TAG_LEN)) end

    -- ICRC, stored little-endian.
    local ir = tvb(len - ICRC_LEN, ICRC_LEN)
    local ii = tree:add_le(F.icrc, ir)
    if spray.prefs.verify_icrc and tvb:len() == len then
        local want = compute_icrc(tvb, pinfo, ctx.int_off, ctx.int_len)
        if want then
            tree:add(F.icrc_computed, ir, want):set_generated()
            if want == ir:le_uint() then
                ii:append_text(" [correct]")
                tree:add(F.icrc_status, ir, 1):set_generated()
            else
                ii:append_text(string.format(" [incorrect, should be 0x%08x]", want))
                tree:add(F.icrc_status, ir, 2):set_generated()
                ii:add_proto_expert_info(E.icrc_bad, string.format("Bad ICRC: 0x%08x, computed 0x%08x", ir:le_uint(), want))
            end
        end
    else
        tree:add(F.icrc_status, ir, 0):set_generated()
    end

    pinfo.cols.info = table.concat(ctx.info, ", ")
    if ctx.err then pinfo.cols.info:append(" [malformed: " .. ctx.err .. "]") end
    return len
end

DissectorTable.get("udp.port"):add(UDP_PORT, spray)
