package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// PerMinute returns count per minute of window, and whether window is
// long enough to give one (at least MinRateWindow); when it is not, the
// rate is 0 and the count, with its window, is what to report.
func PerMinute(count uint64, window time.Duration) (float64, bool) {
	if window < MinRateWindow {
		return 0, false
	}
	return float64(count) / window.Minutes(), true
}

// perMinString is a rate per minute of window for a table: the rate, or
// "-" when the window is shorter than MinRateWindow.
func perMinString(count uint64, window time.Duration) string {
	r, ok := PerMinute(count, window)
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.0f", r)
}

// WriteTable writes res as spray compare writes its table, one row per
// scenario and profile: flow completion time mean, p50, p99 and p99.9,
// algbw, the collectives' mean time beside their line-rate bound, retransmits and duplicates, timeouts, ECN marks, drops by cause,
// then the simulated time the row covers, PFC (PAUSE frames, and per
// minute of that time when it is at least MinRateWindow; paused time
// summed over ports and of the port paused longest) and switch buffer
// occupancy (the most any switch held, and the highest mean over the run,
// as shares of the buffer). A header states the fabric, and notes follow
// the table.
func WriteTable(w io.Writer, res Result) {
	fmt.Fprintf(w, "# simulator: %s, %d hosts, oversubscription %.2g:1, %s; base RTT %v, switch buffer %s; same transport code as the testbed, simulated clock\n",
		res.Topo, res.Hosts, res.Oversub, res.Workload, res.BaseRTT, byteString(res.BufferBytes))
	var fab []string
	if res.PodOversub > 1 {
		fab = append(fab, fmt.Sprintf("%d:1 oversubscribed above the pod", res.PodOversub))
	}
	if res.Planes > 1 {
		fab = append(fab, fmt.Sprintf("%d planes, every host a port into each", res.Planes))
	}
	if len(fab) > 0 {
		fmt.Fprintf(w, "# fabric: %s\n", strings.Join(fab, "; "))
	}
	if res.Faults != "" {
		fmt.Fprintf(w, "# faults: %s\n", res.Faults)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tprofile\tPFC\tflows\tmean\tp50\tp99\tp99.9\talgbw\tcollective/\tretx/dup/tlp\ttimeouts\tECN\tdrops\tsimulated\tpauses\tpauses\tpaused\tmax port\tbuffer\tbuffer\t")
	fmt.Fprintln(tw, "\t\t\tdone\t(ms)\t(ms)\t(ms)\t(ms)\t(GB/s)\tbound (ms)\t\t\t\tloss/bh/q/host\t(ms)\t\t(/min)\t(ms)\tpaused (ms)\tmax\tmean\t")
	ms := func(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/1e6) }
	var notes []string
	short := false
	for _, r := range res.Rows {
		mark := ""
		if r.Err != "" {
			notes = append(notes, fmt.Sprintf("%s/%s: %s", r.Scenario, r.Profile, r.Err))
			mark = fmt.Sprintf(" [%d]", len(notes))
		}
		pfc := "off"
		if r.PFC {
			pfc = "on"
		}
		short = short || r.Simulated < MinRateWindow
		fmt.Fprintf(tw, "%s\t%s%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\t%.2f\t%s/%s\t%d/%d/%d\t%d\t%d\t%d/%d/%d/%d\t%s\t%d\t%s\t%s\t%s\t%.1f%%\t%.1f%%\t\n",
			r.Scenario, r.Profile, mark, pfc, r.Done, r.Flows, ms(r.Mean), ms(r.P50), ms(r.P99), ms(r.P999), r.AlgBW,
			ms(r.Collective()), ms(r.Bound), r.Retransmits, r.Duplicates, r.TLPs, r.Timeouts, r.ECNMarks, r.Drops.Loss+r.Drops.Burst, r.Drops.Blackhole, r.Drops.Queue, r.Drops.Host,
			ms(r.Simulated), r.PauseFrames, perMinString(r.PauseFrames, r.Simulated), ms(r.PausedTime), ms(r.MaxPortPaused), 100*r.BufferMax, 100*r.BufferMean)
	}
	tw.Flush()
	for i, n := range notes {
		fmt.Fprintf(w, "[%d] %s\n", i+1, n)
	}
	for _, r := range res.Rows {
		if r.CreditGrants+r.CreditRequests+r.Unsolicited > 0 {
			fmt.Fprintf(w, "# %s/%s credits: %d grants, %d requests, %d packets unsolicited, %d waits, %d fallbacks; %d data packets, %.3f%% retransmitted\n",
				r.Scenario, r.Profile, r.CreditGrants, r.CreditRequests, r.Unsolicited, r.CreditWaits, r.CreditFallbacks,
				r.DataPackets, 100*float64(r.Retransmits)/float64(max(r.DataPackets, 1)))
		}
		if r.LinkFlaps > 0 {
			fmt.Fprintf(w, "# %s/%s: %d link flaps began\n", r.Scenario, r.Profile, r.LinkFlaps)
		}
		if r.Trimmed > 0 {
			fmt.Fprintf(w, "# %s/%s: %d data frames trimmed to their headers (trim) instead of dropped\n", r.Scenario, r.Profile, r.Trimmed)
		}
	}
	if short {
		fmt.Fprintf(w, "# pauses per minute: - where a row simulated less than %v, too short a window to scale to a minute (the count is the measure)\n", MinRateWindow)
	}
}

// Collective returns the mean time of r's collectives (Iterations), or
// its makespan when the workload is not collectives: the time to set
// beside Bound.
func (r Row) Collective() time.Duration {
	if len(r.Iterations) == 0 {
		return r.Makespan
	}
	var sum time.Duration
	for _, d := range r.Iterations {
		sum += d
	}
	return sum / time.Duration(len(r.Iterations))
}

// StepStats are the figures of a training-step workload (moe) in one
// row: what an MoE layer's all-to-alls cost a step.
type StepStats struct {
	// Steps is the steps completed; Step their mean time (the makespan
	// over the steps: every rank's steps run back to back).
	Steps int
	Step  time.Duration
	// Collectives are the times of the dispatch and combine all-to-alls
	// (each from its first rank's first send to its last rank's last
	// receive); CollectiveMean their mean, CollectiveMax the longest.
	Collectives                   int
	CollectiveMean, CollectiveMax time.Duration
	// ComputeShare is the compute time over the step time (the MFU-style
	// figure: the share of a step the accelerators compute);
	// NetworkShare the rest, the share spent waiting on the network.
	ComputeShare, NetworkShare float64
}

// ErrNotSteps is returned by RowSteps for a workload that is not
// training steps (Steps or Compute unset).
var ErrNotSteps = errors.New("sim: not a training-step workload")

// RowSteps returns the step figures of row r, which ran workload w. A
// row whose steps did not all complete has none (an error).
func RowSteps(r Row, w Workload) (StepStats, error) {
	if w.Steps < 1 || w.Compute <= 0 || w.Iters%w.Steps != 0 {
		return StepStats{}, ErrNotSteps
	}
	if r.Done != r.Flows || len(r.Iterations) != w.Iters || r.Makespan <= 0 {
		return StepStats{}, fmt.Errorf("sim: %s/%s: %d of %d flows done, %d of %d collectives: no step figures", r.Scenario, r.Profile, r.Done, r.Flows, len(r.Iterations), w.Iters)
	}
	st := StepStats{Steps: w.Steps, Step: r.Makespan / time.Duration(w.Steps), Collectives: len(r.Iterations)}
	var sum time.Duration
	for _, d := range r.Iterations {
		sum += d
		st.CollectiveMax = max(st.CollectiveMax, d)
	}
	st.CollectiveMean = sum / time.Duration(len(r.Iterations))
	st.ComputeShare = min(float64(w.Compute)/float64(st.Step), 1)
	st.NetworkShare = 1 - st.ComputeShare
	return st, nil
}

// WriteSteps writes, for a training-step workload w, one line per row of
// res: the steps, the mean step, each kind of collective's mean and
// p99.9 over its instances (Row.Collectives), the simulated time, PAUSE
// frames (and per minute, over at least MinRateWindow), switch buffer
// mean and max, and the shares of the step spent computing (MFU-style)
// and waiting on the network. It writes nothing for another workload.
func WriteSteps(out io.Writer, res Result, w Workload) {
	if w.Steps < 1 || w.Compute <= 0 {
		return
	}
	if m := w.Model; m != nil {
		routing := "the expected copies for every pair"
		if m.Random {
			routing = "each token's experts drawn at random"
		}
		fmt.Fprintf(out, "# training steps: %d x (%s) with %v compute after dispatch; %d job(s) of %d EP groups of %d ranks placed by %s; %d tokens a rank, top-%d of %d experts, %d B a token copy out and %d B back (%s)",
			w.Steps, strings.Join(w.Phases, ", "), w.Compute, max(m.Jobs, 1), m.groups(res.Hosts), m.EP, m.Place, m.Tokens, m.TopK, m.Experts, m.Dispatch, m.Combine, routing)
		if m.Grad > 0 {
			fmt.Fprintf(out, "; %s of gradients a rank reduced in its data parallel ring", byteString(int(m.Grad)))
		}
		fmt.Fprintln(out)
	} else {
		fmt.Fprintf(out, "# training steps: %d x (dispatch all-to-all, %v compute, combine all-to-all), %s per rank pair\n",
			w.Steps, w.Compute, byteString(int(w.PerRank/int64(res.Hosts))))
	}
	kinds := w.kinds()
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	head1, head2 := "scenario\tprofile\tsteps\tstep\t", "\t\t\tmean (ms)\t"
	for _, k := range kinds {
		head1 += k + "\t" + k + "\t"
		head2 += "mean (ms)\tp99.9 (ms)\t"
	}
	fmt.Fprintln(tw, head1+"simulated\tpauses\tpauses\tbuffer\tbuffer\tcompute\tnetwork\t")
	fmt.Fprintln(tw, head2+"(ms)\t\t(/min)\tmean\tmax\t(MFU)\twait\t")
	var notes []string
	for _, r := range res.Rows {
		st, err := RowSteps(r, w)
		if err != nil {
			notes = append(notes, err.Error())
			continue
		}
		line := fmt.Sprintf("%s\t%s\t%d\t%s\t", r.Scenario, r.Profile, st.Steps, msString(st.Step))
		for _, k := range kinds {
			c, ok := r.collective(k)
			if !ok || c.Count == 0 {
				line += "-\t-\t"
				continue
			}
			line += msString(c.Mean) + "\t" + msString(c.P999) + "\t"
		}
		fmt.Fprintf(tw, "%s%s\t%d\t%s\t%.1f%%\t%.1f%%\t%.1f%%\t%.1f%%\t\n", line,
			msString(r.Simulated), r.PauseFrames, perMinString(r.PauseFrames, r.Simulated), 100*r.BufferMean, 100*r.BufferMax,
			100*st.ComputeShare, 100*st.NetworkShare)
	}
	tw.Flush()
	for _, n := range notes {
		fmt.Fprintf(out, "# %s\n", n)
	}
	fmt.Fprintf(out, "# step: the makespan over the steps; compute (MFU): %v of compute a step over the mean step; buffer mean: the time-averaged occupancy of the switch whose average is highest, max: the most any switch held\n", w.Compute)
}

// collective returns r's figures for the collectives of kind name.
func (r Row) collective(name string) (CollectiveStats, bool) {
	for _, c := range r.Collectives {
		if c.Name == name {
			return c, true
		}
	}
	return CollectiveStats{}, false
}

// WriteCollectives writes, for the rows of res that ran collectives
// (Row.Collectives), one line per row and kind of collective: its
// instances completed (and not), their mean, p99.9 and max, and the
// whole collective's mean (from its first rank's first send to its last
// rank's last receive, every instance together) beside its line-rate
// bound. It writes nothing when no row has more than one instance of a
// collective: the main table holds that one's time.
func WriteCollectives(out io.Writer, res Result) {
	many := false
	for _, r := range res.Rows {
		for _, c := range r.Collectives {
			many = many || c.Count+c.Incomplete > 1
		}
	}
	if !many {
		return
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tprofile\tcollective\tinstances\tnot\tmean\tp99.9\tmax\twhole\tbound\t")
	fmt.Fprintln(tw, "\t\t\tdone\tdone\t(ms)\t(ms)\t(ms)\tmean (ms)\tmean (ms)\t")
	for _, r := range res.Rows {
		np := len(r.Collectives)
		for p, c := range r.Collectives {
			whole, bound := "-", "-"
			var t, b time.Duration
			n := 0
			for k := p; k < len(r.Iterations); k += np {
				t += r.Iterations[k]
				if len(r.Bounds) == len(r.Iterations) {
					b += r.Bounds[k]
				}
				n++
			}
			if n > 0 {
				whole = msString(t / time.Duration(n))
				if len(r.Bounds) == len(r.Iterations) {
					bound = msString(b / time.Duration(n))
				}
			}
			if len(r.Bounds) == 0 && r.Bound > 0 {
				bound = msString(r.Bound)
			}
			mean, p999, mx := "-", "-", "-"
			if c.Count > 0 {
				mean, p999, mx = msString(c.Mean), msString(c.P999), msString(c.Max)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t\n", r.Scenario, r.Profile, c.Name, c.Count, c.Incomplete, mean, p999, mx, whole, bound)
		}
	}
	tw.Flush()
	fmt.Fprintln(out, "# an instance is one EP group's dispatch or combine, one data parallel ring's reduce-scatter or all-gather, or a whole collective without groups, in one step; p99.9 by nearest rank (the max under 1,000 instances)")
}

// WriteHeadline writes the rows of res as a Markdown table: per row its
// scenario and profile, each kind of collective's mean and p99.9 over
// its instances, PAUSE frames per minute over the simulated time, switch
// buffer mean and max, the compute share of the step for a training-step
// workload w, and the CPU time and peak RSS the row cost when they were
// measured (Row.CPU, Row.RSS).
func WriteHeadline(out io.Writer, res Result, w Workload) {
	kinds := w.kinds()
	head := "| scenario | profile | PFC |"
	rule := "|---|---|---|"
	for _, k := range kinds {
		head += " " + k + " mean / p99.9 (ms) |"
		rule += "--:|"
	}
	head += " PFC pauses /min | simulated (ms) | buffer mean / max | compute share | CPU | RSS |"
	rule += "--:|--:|--:|--:|--:|--:|"
	fmt.Fprintln(out, head)
	fmt.Fprintln(out, rule)
	short := false
	for _, r := range res.Rows {
		short = short || r.Simulated < MinRateWindow
		pfc := "off"
		if r.PFC {
			pfc = "on"
		}
		line := fmt.Sprintf("| %s | %s | %s |", r.Scenario, r.Profile, pfc)
		for _, k := range kinds {
			c, ok := r.collective(k)
			if !ok || c.Count == 0 {
				line += " - |"
				continue
			}
			mark := ""
			if c.Incomplete > 0 {
				mark = fmt.Sprintf(" (%d not done)", c.Incomplete)
			}
			line += fmt.Sprintf(" %s / %s%s |", msString(c.Mean), msString(c.P999), mark)
		}
		share := "-"
		if st, err := RowSteps(r, w); err == nil {
			share = fmt.Sprintf("%.1f%%", 100*st.ComputeShare)
		}
		cpu, rss := "-", "-"
		if r.CPU > 0 {
			cpu = r.CPU.Round(time.Second).String()
		}
		if r.RSS > 0 {
			rss = byteString(int(r.RSS))
		}
		fmt.Fprintf(out, "%s %s | %s | %.1f%% / %.1f%% | %s | %s | %s |\n", line, perMinString(r.PauseFrames, r.Simulated), msString(r.Simulated),
			100*r.BufferMean, 100*r.BufferMax, share, cpu, rss)
	}
	if short {
		fmt.Fprintf(out, "\nPauses per minute: - where a row simulated less than %v.\n", MinRateWindow)
	}
}

func msString(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/1e6) }

// WriteWall writes the wall time and event rate of each row, and its CPU
// time and peak RSS when measured: what the simulation cost, which JSON
// leaves out so that it stays a function of the seed.
func WriteWall(w io.Writer, res Result) {
	for _, r := range res.Rows {
		rate := 0.0
		if r.Wall > 0 {
			rate = float64(r.Events) / r.Wall.Seconds()
		}
		cost := ""
		if r.CPU > 0 {
			cost += fmt.Sprintf(", %v CPU", r.CPU.Round(time.Millisecond))
		}
		if r.RSS > 0 {
			cost += fmt.Sprintf(", %s peak RSS", byteString(int(r.RSS)))
		}
		fmt.Fprintf(w, "# %s/%s: %v simulated in %v wall%s, %d events (%.2fM/s), %d packet buffers\n",
			r.Scenario, r.Profile, r.Makespan.Round(time.Microsecond), r.Wall.Round(time.Millisecond), cost, r.Events, rate/1e6, r.PacketBuffers)
	}
}

func byteString(b int) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", b>>20)
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

// WriteJSON writes res as indented JSON (durations in nanoseconds). It
// holds nothing that depends on the machine: the same seed gives the same
// bytes.
func WriteJSON(w io.Writer, res Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

var profileColors = map[string]color.Color{
	ProfileRoCE:         color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	ProfileSpray:        color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	ProfileSprayECMP:    color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	ProfileSprayCredits: color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

// ErrNoSamples is returned by WritePNG when no row completed a flow.
var ErrNoSamples = errors.New("sim: no completion times to plot")

// WritePNG draws, per scenario, the CDF of the flow completion times of
// each profile, and below it the buffer occupancy of the fullest switch
// over time, and writes the figure to w as a PNG.
func WritePNG(w io.Writer, res Result) error {
	var scenarios []string
	for _, r := range res.Rows {
		if len(r.Samples) > 0 && !slices.Contains(scenarios, r.Scenario) {
			scenarios = append(scenarios, r.Scenario)
		}
	}
	if len(scenarios) == 0 {
		return ErrNoSamples
	}
	cols := len(scenarios)
	const cell = 4 * vg.Inch
	img := vgimg.New(vg.Length(cols)*cell, 2*cell*3/4)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	for i, sc := range scenarios {
		cdf := plot.New()
		cdf.Title.Text = sc + ": flow completion time CDF"
		cdf.X.Label.Text = "ms"
		cdf.Y.Label.Text = "fraction of flows"
		occ := plot.New()
		occ.Title.Text = sc + ": fullest switch's buffer"
		occ.X.Label.Text = "simulated ms"
		occ.Y.Label.Text = "share of the buffer"
		occ.Y.Min, occ.Y.Max = 0, 1
		for _, r := range res.Rows {
			if r.Scenario != sc {
				continue
			}
			col := profileColors[r.Profile]
			if len(r.Samples) > 0 {
				s := slices.Clone(r.Samples)
				slices.Sort(s)
				pts := make(plotter.XYs, len(s))
				for j, d := range s {
					pts[j] = plotter.XY{X: float64(d) / 1e6, Y: float64(j+1) / float64(len(s))}
				}
				l, err := plotter.NewLine(pts)
				if err != nil {
					return err
				}
				l.Color = col
				l.Width = vg.Points(1.5)
				cdf.Add(l)
				cdf.Legend.Add(r.Profile, l)
			}
			if len(r.Occupancy) > 0 {
				pts := make(plotter.XYs, len(r.Occupancy))
				for j, v := range r.Occupancy {
					pts[j] = plotter.XY{X: float64(time.Duration(j)*r.OccupancyEvery) / 1e6, Y: v}
				}
				l, err := plotter.NewLine(pts)
				if err != nil {
					return err
				}
				l.Color = col
				occ.Add(l)
				occ.Legend.Add(r.Profile, l)
			}
		}
		cdf.Legend.Top = false
		cdf.Legend.Left = false
		occ.Legend.Top = true
		cdf.Draw(tiles.At(dc, i, 0))
		occ.Draw(tiles.At(dc, i, 1))
	}
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}
