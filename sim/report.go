package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// WriteTable writes res as spray compare writes its table, one row per
// scenario and profile: flow completion time mean, p50, p99 and p99.9,
// algbw, retransmits and duplicates, timeouts, ECN marks, drops by cause,
// then PFC (PAUSE frames per minute of simulated time, paused time summed
// over ports and of the port paused longest) and switch buffer occupancy
// (the most any switch held, and the highest mean over the run, as shares
// of the buffer). A header states the fabric, and notes follow the table.
func WriteTable(w io.Writer, res Result) {
	fmt.Fprintf(w, "# simulator: %s, %d hosts, oversubscription %.2g:1, %s; base RTT %v, switch buffer %s; same transport code as the testbed, simulated clock\n",
		res.Topo, res.Hosts, res.Oversub, res.Workload, res.BaseRTT, byteString(res.BufferBytes))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tprofile\tPFC\tflows\tmean\tp50\tp99\tp99.9\talgbw\tretx/dup/tlp\ttimeouts\tECN\tdrops\tpauses\tpaused\tmax port\tbuffer\tbuffer\t")
	fmt.Fprintln(tw, "\t\t\tdone\t(ms)\t(ms)\t(ms)\t(ms)\t(GB/s)\t\t\t\tloss/bh/q/host\t(/min)\t(ms)\tpaused (ms)\tmax\tmean\t")
	ms := func(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/1e6) }
	var notes []string
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
		fmt.Fprintf(tw, "%s\t%s%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\t%.2f\t%d/%d/%d\t%d\t%d\t%d/%d/%d/%d\t%.0f\t%s\t%s\t%.1f%%\t%.1f%%\t\n",
			r.Scenario, r.Profile, mark, pfc, r.Done, r.Flows, ms(r.Mean), ms(r.P50), ms(r.P99), ms(r.P999), r.AlgBW,
			r.Retransmits, r.Duplicates, r.TLPs, r.Timeouts, r.ECNMarks, r.Drops.Loss+r.Drops.Burst, r.Drops.Blackhole, r.Drops.Queue, r.Drops.Host,
			r.PausesPerMin, ms(r.PausedTime), ms(r.MaxPortPaused), 100*r.BufferMax, 100*r.BufferMean)
	}
	tw.Flush()
	for i, n := range notes {
		fmt.Fprintf(w, "[%d] %s\n", i+1, n)
	}
}

// WriteWall writes the wall time and event rate of each row: what the
// simulation cost, which JSON leaves out so that it stays a function of
// the seed.
func WriteWall(w io.Writer, res Result) {
	for _, r := range res.Rows {
		rate := 0.0
		if r.Wall > 0 {
			rate = float64(r.Events) / r.Wall.Seconds()
		}
		fmt.Fprintf(w, "# %s/%s: %v simulated in %v wall, %d events (%.2fM/s), %d packet buffers\n",
			r.Scenario, r.Profile, r.Makespan.Round(time.Microsecond), r.Wall.Round(time.Millisecond), r.Events, rate/1e6, r.PacketBuffers)
	}
}

func byteString(b int) string {
	switch {
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
	ProfileRoCE:      color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	ProfileSpray:     color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	ProfileSprayECMP: color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
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
