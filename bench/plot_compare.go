package bench

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"slices"
	"time"

	"gonum.org/v1/plot"
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
// side by side in rows of three) and writes it to w as a
// PNG.
func WriteCompareCDF(w io.Writer, res CompareResult) error {
	var scenarios []string
	for _, r := range res.Rows {
		if len(r.Samples) > 0 && !slices.Contains(scenarios, r.Scenario) {
			scenarios = append(scenarios, r.Scenario)
		}
	}
	if len(scenarios) == 0 {
		return ErrNoSamples
	}
	cols := min(len(scenarios), 3)
	rows := (len(scenarios) + cols - 1) / cols
	plots := make([][]*plot.Plot, rows)
	for i := range plots {
		plots[i] = make([]*plot.Plot, cols)
	}
	for k, sc := range scenarios {
		p := plot.New()
		p.Title.Text = sc
		p.X.Label.Text = "all-to-all completion time (ms)"
		p.Y.Label.Text = "fraction of iterations"
		p.X.Min, p.Y.Min, p.Y.Max = 0, 0, 1
		p.Legend.Top = false
		p.Legend.Left = false
		p.Add(plotter.NewGrid())
		for _, r := range res.Rows {
			if r.Scenario != sc || len(r.Samples) == 0 {
				continue
			}
			xys := cdfPoints(r.Samples)
			l, err := plotter.NewLine(xys)
			if err != nil {
				return err
			}
			l.StepStyle = plotter.PostStep
			l.Width = vg.Points(1.5)
			if c, ok := profileColors[r.Profile]; ok {
				l.Color = c
			}
			p.Add(l)
			p.Legend.Add(r.Profile, l)
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
	img := vgimg.New(vg.Length(cols)*11*vg.Centimeter, vg.Length(rows)*9*vg.Centimeter)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Centimeter, PadY: vg.Centimeter,
		PadTop: vg.Millimeter * 3, PadBottom: vg.Millimeter * 3, PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 3}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		for j := range plots[i] {
			plots[i][j].Draw(canvases[i][j])
		}
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w); err != nil {
		return fmt.Errorf("bench: writing PNG: %w", err)
	}
	return nil
}

// cdfPoints returns the empirical CDF of samples in milliseconds, starting
// at 0 just left of the smallest sample.
func cdfPoints(samples []time.Duration) plotter.XYs {
	s := slices.Clone(samples)
	slices.Sort(s)
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	xys := make(plotter.XYs, 0, len(s)+1)
	xys = append(xys, plotter.XY{X: ms(s[0]), Y: 0})
	for i, d := range s {
		xys = append(xys, plotter.XY{X: ms(d), Y: float64(i+1) / float64(len(s))})
	}
	return xys
}
