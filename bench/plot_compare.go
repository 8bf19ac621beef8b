package bench

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// profileColors keeps one color per profile across panels.
var profileColors = map[string]color.Color{
	ProfileRoCE:  color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	ProfileSpray: color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	ProfileTCP:   color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
}

// ErrNoSamples is returned by WriteCompareCDF when no row has samples.
var ErrNoSamples = errors.New("bench: no completion times to plot")

// WriteCompareCDF draws, for every scenario of res, the CDF of the
// all-to-all completion times of each profile (one panel per scenario,
// side by side in rows of three) and writes it to w as a PNG. A title
// names the testbed, size, link and iterations; every panel shares one
// logarithmic time axis, so that curves decades apart stay readable; a row
// that stopped before res.Iterations says so in the legend, and its curve
// ends below 1 (the fraction is of the iterations asked for).
func WriteCompareCDF(w io.Writer, res CompareResult) error {
	var scenarios []string
	lo, hi := math.Inf(1), 0.0
	for _, r := range res.Rows {
		if len(r.Samples) == 0 {
			continue
		}
		if !slices.Contains(scenarios, r.Scenario) {
			scenarios = append(scenarios, r.Scenario)
		}
		for _, d := range r.Samples {
			lo, hi = min(lo, ms(d)), max(hi, ms(d))
		}
	}
	if len(scenarios) == 0 {
		return ErrNoSamples
	}
	lo, hi = xRange(lo, hi)
	cols := min(len(scenarios), 3)
	rows := (len(scenarios) + cols - 1) / cols
	plots := make([][]*plot.Plot, rows)
	for i := range plots {
		plots[i] = make([]*plot.Plot, cols)
	}
	for k, sc := range scenarios {
		p := plot.New()
		p.Title.Text = sc
		// gonum centres an axis label on the linear midpoint of the range,
		// which a log axis puts near its right end, narrowing the panel:
		// reserve the label's line with a space and draw the label after.
		p.X.Label.Text = " "
		p.Y.Label.Text = "fraction of iterations"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.TickerFunc(logTicks)
		p.X.Min, p.X.Max = lo, hi
		// The axis runs past 1 to leave the legend a strip of its own
		// above the curves.
		p.Y.Min, p.Y.Max = 0, 1.3
		p.Y.Tick.Marker = plot.ConstantTicks(fractionTicks())
		p.Legend.Top, p.Legend.Left = true, true
		p.Legend.XOffs = vg.Millimeter * 2
		p.Add(plotter.NewGrid())
		for _, r := range res.Rows {
			if r.Scenario != sc || len(r.Samples) == 0 {
				continue
			}
			l, err := plotter.NewLine(cdfPoints(r.Samples, max(res.Iterations, len(r.Samples)), lo))
			if err != nil {
				return err
			}
			l.StepStyle = plotter.PostStep
			l.Width = vg.Points(1.5)
			if c, ok := profileColors[r.Profile]; ok {
				l.Color = c
			}
			p.Add(l)
			p.Legend.Add(legendLabel(r, res.Iterations), l)
		}
		plots[k/cols][k%cols] = p
	}
	// Empty tiles of the last row get an empty plot, which Align needs.
	for i := range plots {
		for j := range plots[i] {
			if plots[i][j] == nil {
				plots[i][j] = plot.New()
				plots[i][j].HideAxes()
			}
		}
	}
	title := draw.TextStyle{Color: color.Black, Font: font.From(plot.DefaultFont, 13), Handler: plot.DefaultTextHandler,
		XAlign: draw.XCenter, YAlign: draw.YTop}
	width := vg.Length(cols) * 11 * vg.Centimeter
	head := wrapTitle(compareTitle(res), func(s string) bool { return title.Width(s) <= width-vg.Centimeter })
	titleH := title.Height(head) + 6*vg.Millimeter
	height := vg.Length(rows)*9*vg.Centimeter + titleH
	img := vgimg.New(width, height)
	dc := draw.New(img)
	dc.FillText(title, vg.Point{X: width / 2, Y: height - 3*vg.Millimeter}, head)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Centimeter, PadY: vg.Centimeter,
		PadTop: vg.Millimeter * 3, PadBottom: vg.Millimeter * 3, PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 3}
	canvases := plot.Align(plots, tiles, draw.Crop(dc, 0, 0, 0, -titleH))
	for i := range plots {
		for j := range plots[i] {
			p, c := plots[i][j], canvases[i][j]
			p.Draw(c)
			if p.X.Label.Text != "" {
				sty := p.X.Label.TextStyle
				sty.XAlign, sty.YAlign = draw.XCenter, draw.YBottom
				data := p.DataCanvas(c)
				c.FillText(sty, vg.Point{X: (data.Min.X + data.Max.X) / 2, Y: c.Min.Y}, xLabel)
			}
		}
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w); err != nil {
		return fmt.Errorf("bench: writing PNG: %w", err)
	}
	return nil
}

// compareTitle names what the figure shows: where it ran, how much each
// rank sent, over which link, and how many iterations each row asked for.
func compareTitle(res CompareResult) string {
	where := "testbed " + res.Testbed
	if res.Mode == "loopback" || res.Testbed == "" {
		where = "loopback, ranks in one process"
	}
	var size int64
	for _, r := range res.Rows {
		size = max(size, r.Bytes)
	}
	t := fmt.Sprintf("spray compare: %s; %s per rank per all-to-all (%s); link %s", where, byteSize(size), res.AllToAll, res.Link)
	if res.Iterations > 0 {
		t += fmt.Sprintf("; %d iterations", res.Iterations)
	}
	return t
}

// wrapTitle breaks a title at its "; " separators into lines that fit.
func wrapTitle(t string, fits func(string) bool) string {
	parts := strings.Split(t, "; ")
	lines := []string{parts[0]}
	for _, p := range parts[1:] {
		if last := lines[len(lines)-1] + "; " + p; fits(last) {
			lines[len(lines)-1] = last
		} else {
			lines = append(lines, p)
		}
	}
	return strings.Join(lines, "\n")
}

// legendLabel is the row's profile, with the iterations it completed when
// it stopped before the iterations asked for.
func legendLabel(r CompareRow, iterations int) string {
	if iterations > 0 && r.Iters < iterations {
		return fmt.Sprintf("%s (stopped: %d/%d iterations)", r.Profile, r.Iters, iterations)
	}
	return r.Profile
}

// byteSize formats n with a binary unit when it is a whole number of them.
func byteSize(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", n>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%d B", n)
}

// xLabel names the time axis of every panel.
const xLabel = "all-to-all completion time (ms, log scale)"

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// xRange widens [lo, hi] (ms, lo > 0) to the 1-2-5 steps around it.
func xRange(lo, hi float64) (float64, float64) {
	steps := steps125(1e-4, 1e7)
	a, b := steps[0], steps[len(steps)-1]
	for _, v := range steps {
		if v <= lo*0.999 {
			a = v
		}
		if v >= hi*1.001 && b == steps[len(steps)-1] {
			b = v
		}
	}
	if b <= a {
		b = a * 10
	}
	return a, b
}

// steps125 returns the values 1, 2 and 5 times a power of ten in [lo, hi].
func steps125(lo, hi float64) []float64 {
	var s []float64
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for _, m := range []float64{1, 2, 5} {
			if v := m * math.Pow(10, e); v >= lo*0.999 && v <= hi*1.001 {
				s = append(s, v)
			}
		}
	}
	return s
}

// logTicks labels a logarithmic ms axis, every label in the same plain
// format, at steps that stay readable in a narrow panel: 1-2-5 over up to
// two decades, 1-3 over up to four, powers of ten beyond; the other
// integers times a power of ten get unlabelled minor ticks.
func logTicks(lo, hi float64) []plot.Tick {
	mants := []float64{1}
	switch decades := math.Log10(hi / lo); {
	case decades <= 2.01:
		mants = []float64{1, 2, 5}
	case decades <= 4.01:
		mants = []float64{1, 3}
	}
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for m := 1.0; m < 10; m++ {
			v := m * math.Pow(10, e)
			if v < lo*0.999 || v > hi*1.001 {
				continue
			}
			t := plot.Tick{Value: v}
			if slices.Contains(mants, m) {
				t.Label = strconv.FormatFloat(v, 'f', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// fractionTicks labels the CDF's axis 0, 0.25, ... 1 with two decimals.
func fractionTicks() []plot.Tick {
	var t []plot.Tick
	for i := range 5 {
		v := float64(i) / 4
		t = append(t, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', 2, 64)})
	}
	return t
}

// cdfPoints returns the empirical CDF of samples in milliseconds as a
// fraction of n iterations (n >= len(samples): a run that stopped early
// ends below 1), starting at 0 at x0, the axis's left end.
func cdfPoints(samples []time.Duration, n int, x0 float64) plotter.XYs {
	s := slices.Clone(samples)
	slices.Sort(s)
	xys := make(plotter.XYs, 0, len(s)+1)
	xys = append(xys, plotter.XY{X: min(x0, ms(s[0])), Y: 0})
	for i, d := range s {
		xys = append(xys, plotter.XY{X: ms(d), Y: float64(i+1) / float64(n)})
	}
	return xys
}
