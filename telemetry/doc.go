// Package telemetry exports the counters of spray Endpoints as
// OpenTelemetry metrics and serves them to Prometheus over HTTP.
//
// Use Serve to listen on an address and serve /metrics (it installs its
// meter provider as the global one), then Instrument each Endpoint under a
// name:
//
//	srv, err := telemetry.Serve(":9464")
//	...
//	defer srv.Close()
//	stop, err := telemetry.Instrument(ep, "rank0")
//	...
//	defer stop()
//
// Library code that keeps its own OpenTelemetry SDK, or its own HTTP mux,
// calls InstrumentWith with its meter provider; NewPrometheus builds one
// that exports to a fresh Prometheus registry with the handler to mount.
//
// Every instrument is observable: a collection (a scrape) takes a
// transport.Snapshot of the Endpoint, a round trip through its engine
// goroutine, and nothing is added to the data path beyond the plain
// counters and bucket counts the transport keeps anyway. Counters are
// cumulative since the Endpoint started; gauges are values at the scrape.
// The two delay histograms come already bucketed from the transport, which
// the OpenTelemetry API cannot take from a callback: they reach the
// exporter through a metric producer that NewPrometheus installs, so they
// appear with Serve and NewPrometheus, not on a meter provider of the
// caller's.
//
// # Series
//
// Prometheus names, as the OpenTelemetry exporter writes them (dots become
// underscores, the unit and _total are appended). Every series has the
// label endpoint (the name given to Instrument); QP series add qp (the QP
// number, decimal), path series add entropy (the UDP source port that
// picks the path). The exporter adds target_info (the OpenTelemetry
// resource); NewPrometheus's registry adds the go_* and process_* series.
//
// Engine (frames that reach an engine, whatever their QP), with the label
// engine: the engine's index, which is its queue's on a multi-queue link
// with one engine per queue (transport.Config.Engines), 0 otherwise; sum
// over it for the endpoint's totals:
//
//	spray_engine_rx_frames_total, spray_engine_tx_frames_total
//	spray_engine_rx_bytes_total, spray_engine_tx_bytes_total   whole frames
//	spray_engine_drops_total{reason}          truncated, not_roce, bad_icrc,
//	                                          bad_header, bad_opcode, other, unknown_qp
//	spray_engine_tx_no_buffer_total           the link had no transmit buffer
//	spray_engine_handovers_total{direction}   frames passed between engines:
//	                                          sent (arrived on this engine's queue
//	                                          for another's QP), received
//	spray_engine_handover_drops_total         dropped on a full hand-over ring
//
// Link filter (an AF_XDP link's steering program in the kernel: frames it
// dropped before any engine saw them; only for links with one,
// link.FilterStatsReader):
//
//	spray_link_filter_drops_total{reason}     malformed (IP or UDP header
//	                                          truncated or inconsistent, a UDP
//	                                          length beyond the frame), refused
//	                                          (source not allowed), no_room
//
// QP:
//
//	spray_qp_tx_packets_total, spray_qp_tx_bytes_total   data packets (frames), resends included
//	spray_qp_rx_packets_total, spray_qp_rx_bytes_total   data accepted (payload bytes)
//	spray_qp_retransmits_total        data packets sent again
//	spray_qp_losses_total             loss declarations (SACK/RACK, NAK, timeout)
//	spray_qp_timeouts_total           retransmission timeouts
//	spray_qp_acks_total{direction}    sent, received; also spray_qp_naks_total,
//	                                  spray_qp_rnr_naks_total (receiver not ready),
//	                                  spray_qp_cnps_total, spray_qp_messages_total
//	spray_qp_drops_total{reason}      duplicate, out_of_window, out_of_order,
//	                                  no_buffer, remote_access, bad
//	spray_qp_ecn_marked_total         CE-marked data packets received
//	spray_qp_rtt_smoothed_seconds     smoothed RTT (EWMA 1/8), spray_qp_rtt_min_seconds
//	spray_qp_int_acks_total           ACKs that carried INT records
//	spray_qp_int_queue_delay_seconds  smoothed INT queue delay summed over the hops,
//	                                  spray_qp_int_queue_delay_max_seconds the largest
//	spray_qp_microbursts_total        microburst events: on a path, an ACK whose INT queue
//	                                  delay exceeds transport.Config.MicroburstThreshold
//	                                  (default 50µs) after one that did not
//	spray_qp_microburst_acks_total    every ACK above that threshold
//	spray_qp_reorder_held             packets held ahead of a hole now,
//	                                  spray_qp_reorder_held_max the most at once
//	spray_qp_credit_requests_total{direction}, spray_qp_credit_grants_total{direction}
//	                                  receiver-paced credits (transport.Config.Credits):
//	                                  requests and grants sent and received
//	spray_qp_credit_unsolicited_total packets sent before any credit
//	spray_qp_credit_waits_total       times only credit held data back;
//	                                  spray_qp_credit_fallbacks_total (gave up on the
//	                                  peer's credit), spray_qp_credit_rejected_total
//	spray_qp_trims_total              trimmed data packets received (cut to their
//	                                  headers by a switch), spray_qp_trim_naks_total{direction}
//	                                  the NAKs for exactly those packets
//	spray_qp_security_drops_total{reason}   a secured QP's drops: bad_tag, replayed,
//	                                  too_old, bad_epoch, unsecured, trimmed
//	spray_qp_security_rotations_total{direction}, spray_qp_security_epoch{direction}
//	                                  key rotations and the current key epochs
//	spray_qp_rtt_histogram_seconds    histograms (_bucket, _sum, _count) of the RTT
//	spray_qp_int_queue_delay_histogram_seconds   samples and of the INT queue delays;
//	                                  buckets at powers of two from 1µs to 4.2 s
//
// Path (one per entropy of a QP's sender):
//
//	spray_path_tx_packets_total, spray_path_tx_bytes_total, spray_path_retransmits_total
//	spray_path_losses_total, spray_path_acks_total, spray_path_ecn_total
//	spray_path_rtt_smoothed_seconds              fabric RTT (receiver's hold time excluded)
//	spray_path_int_queue_delay_seconds, spray_path_int_queue_delay_max_seconds
//	spray_path_microbursts_total, spray_path_microburst_acks_total
//	spray_path_weight_ratio                      adaptive spraying's weight (1 for other policies)
//	spray_path_down_ratio                        1 while adaptive spraying has the path out
//
// # Caveats
//
// The RTT is timed from the echoed send timestamp less the receiver's
// hold time (Spray: the round trip through the fabric and both hosts'
// queues) or by the retransmit scoreboard (RoCE: the receiver's
// acknowledgement delay included, and no sample from a resent packet, so a
// QP that resends everything shows none). INT series stay at 0 without a
// fabric that fills INT records (transport.Config.INTHops and the
// testbed's fabric programs). A scrape waits up to SnapshotTimeout for
// each engine; an Endpoint that is closed reports no series. Series of QPs
// accumulate for the Endpoint's life (the Endpoint API destroys no QP).
// Serve replaces the global meter provider, and Instrument takes the
// histograms of the latest Server still open. Each instrumented Endpoint
// has a goroutine that waits for it to close.
package telemetry
