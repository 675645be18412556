package experiment

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// The report's plots: delta_r per arm with its 95% interval (held-out and
// held-in side by side), the valid-action rate per arm, and each PPO arm's
// mean reward per update over the seeds.

var (
	heldOutColor = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	heldInColor  = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	lineColors   = []color.Color{
		color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
		color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}, color.RGBA{R: 0xe3, G: 0x77, B: 0xc2, A: 0xff},
	}
)

// writePlots writes the PNGs into dir and returns their file names.
func writePlots(dir string, s summary) ([]string, error) {
	var names []string
	save := func(p *plot.Plot, name string, w, h vg.Length) error {
		if err := p.Save(w, h, filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		names = append(names, name)
		return nil
	}
	labels := make([]string, len(s.arms))
	for i, a := range s.arms {
		labels[i] = a.arm.Name
	}
	width := vg.Length(max(6, 1.1*float64(len(s.arms)))) * vg.Inch

	p := plot.New()
	var out, in []estimate
	hasIn := false
	for _, a := range s.arms {
		out, in = append(out, a.heldOut), append(in, a.heldIn)
		hasIn = hasIn || a.heldIn.n > 0
	}
	p.Title.Text = "held-out delta_r per arm (mean over seeds x tasks, 95% interval)"
	p.Y.Label.Text = "delta_r (%)"
	shift := 0.0
	if hasIn {
		p.Title.Text = "delta_r per arm (mean over seeds x tasks, 95% interval): held-out left, held-in right"
		shift = 0.18
	}
	if err := addBars(p, out, 0, -shift, heldOutColor, "", 100); err != nil {
		return nil, err
	}
	if hasIn {
		if err := addBars(p, in, 0, shift, heldInColor, "", 100); err != nil {
			return nil, err
		}
	}
	finish(p, labels, true)
	fitRange(p, append(out, in...), 100)
	addNA(p, out, -shift, "n/a")
	if err := save(p, "delta_r.png", width, 4.5*vg.Inch); err != nil {
		return nil, err
	}

	p = plot.New()
	p.Title.Text = "valid actions per arm (steps the environment accepted, 95% interval)"
	p.Y.Label.Text = "valid actions (%)"
	var valid []estimate
	for _, a := range s.arms {
		valid = append(valid, a.valid)
	}
	if err := addBars(p, valid, 0, 0, heldOutColor, "", 100); err != nil {
		return nil, err
	}
	finish(p, labels, false)
	p.Y.Min, p.Y.Max = 0, 105
	addNA(p, valid, 0, "n/a (no steps)")
	if err := save(p, "valid_actions.png", width, 4*vg.Inch); err != nil {
		return nil, err
	}

	p = plot.New()
	p.Title.Text = "PPO: mean reward per update (mean over seeds)"
	p.X.Label.Text = "update"
	p.Y.Label.Text = "mean reward"
	curves := 0
	for _, a := range s.arms {
		if len(a.rewardCurve) == 0 {
			continue
		}
		n := 0
		for _, c := range a.rewardCurve {
			n = max(n, len(c))
		}
		pts := make(plotter.XYs, 0, n)
		for u := range n {
			sum, k := 0.0, 0
			for _, c := range a.rewardCurve {
				if u < len(c) {
					sum, k = sum+c[u], k+1
				}
			}
			pts = append(pts, plotter.XY{X: float64(u + 1), Y: sum / float64(k)})
		}
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, err
		}
		col := lineColors[curves%len(lineColors)]
		l.Color, sc.Color = col, col
		p.Add(l, sc)
		p.Legend.Add(a.arm.Name, l, sc)
		curves++
	}
	if curves > 0 {
		p.Add(plotter.NewGrid())
		p.X.Tick.Marker = integerTicks{last: maxLen(s)}
		// The legend sits in room made right of the last update, off the lines.
		p.X.Min, p.X.Max = 0.8, float64(maxLen(s))+0.2+0.35*float64(maxLen(s))
		p.Legend.Top, p.Legend.Left = true, false
		if err := save(p, "reward_curves.png", 7*vg.Inch, 4*vg.Inch); err != nil {
			return nil, err
		}
	}
	return names, nil
}

// addBars adds one bar per arm with its 95% interval as an error bar,
// shifted by offset (in bar slots) so that two series sit side by side.
// Arms without a value are left out.
func addBars(p *plot.Plot, es []estimate, _ int, offset float64, col color.Color, legend string, scale float64) error {
	vals := make(plotter.Values, len(es))
	for i, e := range es {
		vals[i] = scale * e.mean
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(18))
	if err != nil {
		return err
	}
	bars.Color, bars.LineStyle.Width = col, 0
	bars.XMin = offset
	p.Add(bars)
	if legend != "" {
		p.Legend.Add(legend, bars)
	}
	pts := make(plotter.XYs, 0, len(es))
	errs := make(plotter.YErrors, 0, len(es))
	for i, e := range es {
		if e.n < 2 || math.IsNaN(e.half) {
			continue
		}
		pts = append(pts, plotter.XY{X: float64(i) + offset, Y: scale * e.mean})
		errs = append(errs, struct{ Low, High float64 }{scale * e.half, scale * e.half})
	}
	if len(pts) == 0 {
		return nil
	}
	eb, err := plotter.NewYErrorBars(struct {
		plotter.XYs
		plotter.YErrors
	}{pts, errs})
	if err != nil {
		return err
	}
	eb.LineStyle.Width = vg.Points(1.2)
	p.Add(eb)
	return nil
}

// finish names the arms on the x axis, draws the zero line and a grid,
// and puts the legend outside the bars.
func finish(p *plot.Plot, labels []string, zero bool) {
	p.NominalX(labels...)
	p.X.Min, p.X.Max = -0.6, float64(len(labels))-0.4
	p.Add(plotter.NewGrid())
	if zero {
		z := plotter.NewFunction(func(float64) float64 { return 0 })
		z.Color = color.Gray{Y: 90}
		p.Add(z)
	}
	p.Legend.Top = true
	p.Legend.XOffs = vg.Points(0)
	p.Legend.YOffs = vg.Points(14) // above the plotting area
}

// integerTicks labels whole numbers only (updates are counts), up to
// last when it is set.
type integerTicks struct{ last int }

func (t integerTicks) Ticks(min, max float64) []plot.Tick {
	if t.last > 0 {
		max = math.Min(max, float64(t.last))
	}
	step := math.Max(1, math.Ceil((max-min)/8))
	var ts []plot.Tick
	for v := math.Ceil(min); v <= max; v += step {
		ts = append(ts, plot.Tick{Value: v, Label: fmt.Sprint(int(v))})
	}
	return ts
}

// fitRange sets the y axis to hold every bar, every interval and 0, with
// a margin.
func fitRange(p *plot.Plot, es []estimate, scale float64) {
	lo, hi := 0.0, 0.0
	for _, e := range es {
		if e.n == 0 {
			continue
		}
		half := 0.0
		if e.n >= 2 && !math.IsNaN(e.half) {
			half = e.half
		}
		lo, hi = math.Min(lo, scale*(e.mean-half)), math.Max(hi, scale*(e.mean+half))
	}
	pad := 0.08 * math.Max(hi-lo, 1)
	p.Y.Min, p.Y.Max = lo-pad, hi+pad
}

// addNA writes label above the slot of each arm that has no value.
func addNA(p *plot.Plot, es []estimate, offset float64, label string) {
	var xys plotter.XYs
	var texts []string
	for i, e := range es {
		if e.n == 0 {
			xys = append(xys, plotter.XY{X: float64(i) + offset, Y: 0})
			texts = append(texts, label)
		}
	}
	if len(xys) == 0 {
		return
	}
	l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: texts})
	if err != nil {
		return
	}
	for i := range l.TextStyle {
		l.TextStyle[i].XAlign = -0.5
		l.Offset = vg.Point{Y: vg.Points(3)}
	}
	p.Add(l)
}

// maxLen is the longest PPO reward curve of the grid, in updates.
func maxLen(s summary) int {
	n := 1
	for _, a := range s.arms {
		for _, c := range a.rewardCurve {
			n = max(n, len(c))
		}
	}
	return n
}
