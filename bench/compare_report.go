package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/sprayfabric/spray/transport"
)

// WriteCompareTable writes res as a table, one row per profile and
// scenario: all-to-all mean, p50, p99 and p99.9 time (ms), algbw and
// busbw (GB/s), wrong elements, retransmits and the duplicates that
// receivers got (spurious retransmits), ECN marks, drops by cause
// (fault loss + burst / blackhole / full queue / host receive), max and
// mean queue delay
// (µs), per-spine byte imbalance (max/mean), and notes; a line after the
// table for each row whose fabric trimmed packets. A header line states the
// fabric and its limits.
func WriteCompareTable(w io.Writer, res CompareResult) {
	switch res.Mode {
	case "loopback":
		fmt.Fprintf(w, "# loopback: ranks in one process (spray/roce over link/%s, tcp over loopback TCP); no fabric, no root; %s all-to-all\n", res.Link, res.AllToAll)
	default:
		fmt.Fprintf(w, "# testbed %s, link %s, %s all-to-all: bisection %.3f Gbit/s each way, all-to-all algbw limit %.4f GB/s\n",
			res.Testbed, res.Link, res.AllToAll, res.BisectionGbps, res.AllToAllLimit)
	}
	if res.Protection != "" && res.Protection != ProtectionClear {
		fmt.Fprintf(w, "# spray and roce QPs secured with a pre-shared key: %s (tcp in clear)\n", res.Protection)
	}
	if res.RoCEAckTimeout > 0 {
		fmt.Fprintf(w, "# roce: retransmission timer fixed at the Local ACK Timeout, 4.096us x 2^%d = %v, as RoCE NICs run it\n",
			res.RoCEAckTimeout, transport.AckTimeout(res.RoCEAckTimeout).Round(100*time.Microsecond))
	} else if res.RoCEAckTimeout < 0 {
		fmt.Fprintf(w, "# roce: adaptive retransmission timer (RFC 6298, doubling), not a RoCE NIC's fixed Local ACK Timeout\n")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tprofile\tsize\titers\tmean\tp50\tp99\tp99.9\talgbw\tbusbw\t#wrong\tretx/dup\tECN\tdrops\tmax qdelay\tmean qdelay\timbalance\t")
	fmt.Fprintln(tw, "\t\t(B)\t\t(ms)\t(ms)\t(ms)\t(ms)\t(GB/s)\t(GB/s)\t\t\t\tloss/bh/q/host\t(us)\t(us)\tmax/mean\t")
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/1e6) }
	us := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/1e3) }
	var notes []string
	for _, r := range res.Rows {
		mark := ""
		if r.Err != "" || r.Note != "" {
			notes = append(notes, fmt.Sprintf("%s/%s: %s", r.Scenario, r.Profile, joinNonEmpty(r.Err, r.Note)))
			mark = fmt.Sprintf(" [%d]", len(notes))
		}
		imb := "-"
		if r.Imbalance > 0 {
			imb = fmt.Sprintf("%.2f", r.Imbalance)
		}
		fmt.Fprintf(tw, "%s\t%s%s\t%d\t%d\t%s\t%s\t%s\t%s\t%.4f\t%.4f\t%d\t%d/%d\t%d\t%d/%d/%d/%d\t%s\t%s\t%s\t\n",
			r.Scenario, r.Profile, mark, r.Bytes, r.Iters, ms(r.Mean), ms(r.P50), ms(r.P99), ms(r.P999), r.AlgBW, r.BusBW,
			r.Wrong, r.Retransmits, r.Duplicates, r.ECNMarks, r.Drops.Loss+r.Drops.Burst, r.Drops.Blackhole, r.Drops.Queue, r.Drops.Host,
			us(r.MaxQueueDelay), us(r.MeanQueueDelay), imb)
	}
	tw.Flush()
	for i, n := range notes {
		fmt.Fprintf(w, "[%d] %s\n", i+1, n)
	}
	for _, r := range res.Rows {
		if r.Trimmed > 0 {
			fmt.Fprintf(w, "# %s/%s: %d data packets trimmed to their headers instead of dropped\n", r.Scenario, r.Profile, r.Trimmed)
		}
	}
}

func joinNonEmpty(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// WriteCompareJSON writes res as indented JSON (durations in nanoseconds).
func WriteCompareJSON(w io.Writer, res CompareResult) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}
