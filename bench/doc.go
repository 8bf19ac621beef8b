// Package bench holds spray's workloads and their measurement: the
// point-to-point perf workload (goodput, message rate, ping-pong latency,
// integrity by SHA-256), statistics (percentiles) and reports (text tables
// and JSON). The spray CLI is a thin shell over it.
//
// Workloads run over a Pipe, so that the same workload measures a spray QP
// and a kernel TCP connection between the same two endpoints.
package bench
