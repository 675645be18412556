package experiment

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/mlerl/mlerl/schemas"
)

// The report's plots: delta_r per arm with its 95% interval (held-out and
// held-in side by side), the valid-action rate per arm, and for the PPO
// arms: the mean reward per update, the learning curves against updates,
// wall and CPU time, the outcome and action shares per update (the
// reward-hacking watch) and the task-count curve, each over seeds.

var (
	heldOutColor = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	heldInColor  = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	lineColors   = []color.Color{
		color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
		color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}, color.RGBA{R: 0xe3, G: 0x77, B: 0xc2, A: 0xff},
	}
)

// writePlots writes the PNGs into dir and returns the names it wrote.
func writePlots(dir string, s summary) (map[string]bool, error) {
	made := map[string]bool{}
	save := func(p *plot.Plot, name string, w, h vg.Length) error {
		if err := p.Save(w, h, filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		made[name] = true
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

	for _, f := range []func(string, summary, map[string]bool) error{rewardPlot, learningCurvePlots, sharesPlot, durationSharesPlot, taskCountPlot} {
		if err := f(dir, s, made); err != nil {
			return nil, err
		}
	}
	return made, nil
}

// series is one arm's line with its 95% intervals: x, y and the
// interval's half-width per point (NaN: no interval).
type series struct {
	name string
	col  color.Color
	x, y []float64
	half []float64
}

// addSeries draws s as a line with points and, where it has them, error
// bars; it returns the line and its points for a legend.
func addSeries(p *plot.Plot, s series, dash bool) ([]plot.Thumbnailer, error) {
	pts := make(plotter.XYs, len(s.x))
	for i := range s.x {
		pts[i] = plotter.XY{X: s.x[i], Y: s.y[i]}
	}
	l, sc, err := plotter.NewLinePoints(pts)
	if err != nil {
		return nil, err
	}
	l.Color, sc.Color = s.col, s.col
	if dash {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
	}
	p.Add(l, sc)
	var epts plotter.XYs
	var errs plotter.YErrors
	for i := range s.x {
		if !math.IsNaN(s.half[i]) {
			epts = append(epts, pts[i])
			errs = append(errs, struct{ Low, High float64 }{s.half[i], s.half[i]})
		}
	}
	if len(epts) > 0 {
		eb, err := plotter.NewYErrorBars(struct {
			plotter.XYs
			plotter.YErrors
		}{epts, errs})
		if err != nil {
			return nil, err
		}
		eb.Color = s.col
		p.Add(eb)
	}
	return []plot.Thumbnailer{l, sc}, nil
}

// yRange fits the y axis to every series' points and intervals (and 0
// when zero is set), with a margin, spanning at least minSpan (so that
// flat curves do not show rounding noise).
func yRange(p *plot.Plot, ss []series, zero bool, minSpan float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	if zero {
		lo, hi = 0, 0
	}
	for _, s := range ss {
		for i, y := range s.y {
			h := s.half[i]
			if math.IsNaN(h) {
				h = 0
			}
			lo, hi = math.Min(lo, y-h), math.Max(hi, y+h)
		}
	}
	if math.IsInf(lo, 0) {
		return
	}
	if hi-lo < minSpan {
		mid := (hi + lo) / 2
		lo, hi = mid-minSpan/2, mid+minSpan/2
	}
	pad := 0.08 * (hi - lo)
	p.Y.Min, p.Y.Max = lo-pad, hi+pad
}

// xRange fits the x axis to the series' points, with a margin.
func xRange(p *plot.Plot, ss []series) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		for _, x := range s.x {
			lo, hi = math.Min(lo, x), math.Max(hi, x)
		}
	}
	if math.IsInf(lo, 0) {
		return
	}
	pad := 0.04 * math.Max(hi-lo, 1)
	p.X.Min, p.X.Max = lo-pad, hi+pad
}

// dodge is the x offset of the i-th of n series on a discrete axis, so
// that their intervals do not hide each other.
func dodge(i, n int) float64 { return 0.08 * (float64(i) - float64(n-1)/2) }

// rewardPlot is each PPO arm's mean reward per update, mean over seeds
// with a 95% interval over seeds.
func rewardPlot(dir string, s summary, made map[string]bool) error {
	var arms []*armStats
	for _, a := range s.arms {
		if len(a.rewardCurve) > 0 {
			arms = append(arms, a)
		}
	}
	if len(arms) == 0 {
		return nil
	}
	p := plot.New()
	p.Title.Text = "PPO: mean reward of each update's samples (mean over seeds, 95% interval over seeds)"
	p.X.Label.Text = "update"
	p.Y.Label.Text = "mean reward"
	leg := plot.NewLegend()
	var ss []series
	for i, a := range arms {
		n := 0
		for _, c := range a.rewardCurve {
			n = max(n, len(c))
		}
		sr := series{name: fmt.Sprintf("%s (%s)", a.arm.Name, plural(len(a.rewardCurve), "seed")), col: lineColors[i%len(lineColors)]}
		for u := range n {
			var xs []float64
			for _, c := range a.rewardCurve {
				if u < len(c) {
					xs = append(xs, c[u])
				}
			}
			e := interval(xs)
			sr.x, sr.y, sr.half = append(sr.x, float64(u+1)+dodge(i, len(arms))), append(sr.y, e.mean), append(sr.half, halfOrNaN(e))
		}
		th, err := addSeries(p, sr, false)
		if err != nil {
			return err
		}
		leg.Add(sr.name, th...)
		ss = append(ss, sr)
	}
	p.Add(plotter.NewGrid())
	p.X.Tick.Marker = integerTicks{last: maxLen(s)}
	p.X.Min, p.X.Max = 0.6, float64(maxLen(s))+0.4
	yRange(p, ss, false, 0.1)
	return savePanels(filepath.Join(dir, "reward_curves.png"), [][]*plot.Plot{{p}}, leg, 7*vg.Inch, 4*vg.Inch, made)
}

func halfOrNaN(e estimate) float64 {
	if e.n < 2 {
		return math.NaN()
	}
	return e.half
}

// learningCurvePlots are the learning curves of every PPO arm that
// recorded one: held-in and held-out delta_r against updates, wall time
// and CPU time, mean over seeds with a 95% interval over seeds.
func learningCurvePlots(dir string, s summary, made map[string]bool) error {
	type armCurve struct {
		a  *armStats
		cs []curveStat
	}
	var arms []armCurve
	for _, a := range s.arms {
		if cs := curveStats(a.runs); len(cs) > 0 {
			arms = append(arms, armCurve{a, cs})
		}
	}
	if len(arms) == 0 {
		return nil
	}
	axes := []struct {
		file, label string
		x           func(curveStat) float64
		discrete    bool
	}{
		{"learning_curves_updates.png", "PPO updates", func(c curveStat) float64 { return float64(c.update) }, true},
		{"learning_curves_wall.png", "wall seconds of the updates (mean over seeds)", func(c curveStat) float64 { return c.wall.mean }, false},
		{"learning_curves_cpu.png", "CPU seconds of the updates (mean over seeds)", func(c curveStat) float64 { return c.cpu.mean }, false},
	}
	lastUpdate := 0
	for _, ac := range arms {
		lastUpdate = max(lastUpdate, ac.cs[len(ac.cs)-1].update)
	}
	for _, ax := range axes {
		var panels []*plot.Plot
		leg := plot.NewLegend()
		inLegend := map[int]bool{}
		for _, split := range []string{schemas.HeldIn, schemas.HeldOut} {
			p := plot.New()
			p.Title.Text = split + " tasks: delta_r (mean over seeds, 95% interval over seeds)"
			p.X.Label.Text = ax.label
			p.Y.Label.Text = "delta_r (%)"
			var ss []series
			for i, ac := range arms {
				sr := series{col: lineColors[i%len(lineColors)]}
				for _, c := range ac.cs {
					e := c.heldIn
					if split == schemas.HeldOut {
						e = c.heldOut
					}
					if e.n == 0 {
						continue
					}
					x := ax.x(c)
					if ax.discrete {
						x += dodge(i, len(arms)) * math.Max(1, float64(lastUpdate)/10)
					}
					sr.x, sr.y, sr.half = append(sr.x, x), append(sr.y, 100*e.mean), append(sr.half, 100*halfOrNaN(e))
				}
				if len(sr.x) == 0 {
					continue
				}
				th, err := addSeries(p, sr, ac.a.arm.EqualWall || slices.Contains(ac.a.arm.Flags, "--mode=episode"))
				if err != nil {
					return err
				}
				if !inLegend[i] {
					inLegend[i] = true
					leg.Add(fmt.Sprintf("%s (%s)", ac.a.arm.Name, plural(len(ac.a.runs), "seed")), th...)
				}
				ss = append(ss, sr)
			}
			p.Add(plotter.NewGrid())
			z := plotter.NewFunction(func(float64) float64 { return 0 })
			z.Color = color.Gray{Y: 120}
			p.Add(z)
			if len(ss) == 0 {
				continue // the split was not evaluated
			}
			xRange(p, ss)
			yRange(p, ss, true, 1)
			p.X.Tick.Marker = plainTicks{}
			if ax.discrete {
				p.X.Tick.Marker = integerTicks{last: lastUpdate}
			}
			panels = append(panels, p)
		}
		if len(panels) == 0 {
			return nil
		}
		if err := savePanels(filepath.Join(dir, ax.file), [][]*plot.Plot{panels}, leg, 5.2*vg.Inch, 4*vg.Inch, made); err != nil {
			return err
		}
	}
	return nil
}

// sharesPlot is the reward-hacking watch: each outcome's and action's
// share of the update's samples, per PPO arm, mean over seeds.
func sharesPlot(dir string, s summary, made map[string]bool) error {
	shares := []struct {
		name string
		get  func(schemas.UpdateShares) float64
	}{
		{"success", func(u schemas.UpdateShares) float64 { return u.Success }},
		{"error (script failed)", func(u schemas.UpdateShares) float64 { return u.Error }},
		{"timeout + OOM (corner)", func(u schemas.UpdateShares) float64 { return u.Corner }},
		{"refused (format/action/edit)", func(u schemas.UpdateShares) float64 { return u.Refused }},
		{"undo (action)", func(u schemas.UpdateShares) float64 { return u.Undo }},
		{"final answer (action)", func(u schemas.UpdateShares) float64 { return u.FinalAnswer }},
	}
	var panels []*plot.Plot
	leg := plot.NewLegend()
	for _, a := range s.ppoArms() {
		n, seeds := longest(a.runs, func(r *seedRun) int { return len(r.updates) })
		if n == 0 {
			continue
		}
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s: share of each update's samples (mean over %s)", a.arm.Name, plural(seeds, "seed"))
		p.X.Label.Text = "update"
		p.Y.Label.Text = "share (%)"
		top := 0.0
		for i, sh := range shares {
			sr := series{col: lineColors[i%len(lineColors)]}
			for u := range n {
				sum, k := 0.0, 0
				for _, r := range a.runs {
					if u < len(r.updates) {
						sum, k = sum+sh.get(r.updates[u]), k+1
					}
				}
				sr.x, sr.y, sr.half = append(sr.x, float64(u+1)), append(sr.y, 100*sum/float64(k)), append(sr.half, math.NaN())
				top = math.Max(top, 100*sum/float64(k))
			}
			th, err := addSeries(p, sr, i >= 4)
			if err != nil {
				return err
			}
			if len(panels) == 0 {
				leg.Add(sh.name, th...)
			}
		}
		p.Add(plotter.NewGrid())
		p.X.Tick.Marker = integerTicks{last: n}
		p.X.Min, p.X.Max = 0.8, float64(n)+0.2
		p.Y.Min, p.Y.Max = -1.5, math.Min(101.5, 5*math.Ceil((top+3)/5))
		panels = append(panels, p)
	}
	if len(panels) == 0 {
		return nil
	}
	cols := min(2, len(panels))
	var grid [][]*plot.Plot
	for i := 0; i < len(panels); i += cols {
		row := make([]*plot.Plot, cols)
		copy(row, panels[i:min(i+cols, len(panels))])
		grid = append(grid, row)
	}
	return savePanels(filepath.Join(dir, "outcome_shares.png"), grid, leg, 5.2*vg.Inch, 3.4*vg.Inch, made)
}

// longest is the largest size among an arm's seed runs, and how many of
// them have any (size: how many updates a run recorded of a kind).
func longest(runs map[int64]*seedRun, size func(*seedRun) int) (n, seeds int) {
	for _, r := range runs {
		n = max(n, size(r))
		if size(r) > 0 {
			seeds++
		}
	}
	return n, seeds
}

// durationSharesPlot shows the frequency bias of a collector: per PPO
// arm, each update's trained samples by duration quarter of the cell's
// samples (the samples it dropped dashed) and their mean staleness, mean
// over seeds. A collector without the bias stays at 25% per quarter.
func durationSharesPlot(dir string, s summary, made map[string]bool) error {
	lines := []struct {
		name string
		get  func(schemas.UpdateDurations) float64
	}{
		{"fastest quarter (Q1)", func(u schemas.UpdateDurations) float64 { return u.Q1 }},
		{"Q2", func(u schemas.UpdateDurations) float64 { return u.Q2 }},
		{"Q3", func(u schemas.UpdateDurations) float64 { return u.Q3 }},
		{"slowest quarter (Q4)", func(u schemas.UpdateDurations) float64 { return u.Q4 }},
		{"dropped share", func(u schemas.UpdateDurations) float64 {
			return float64(u.Dropped) / math.Max(1, float64(u.Trained+u.Dropped))
		}},
	}
	// meanAt is the mean over seeds of get at update index u (NaN: none).
	meanAt := func(a *armStats, u int, get func(schemas.UpdateDurations) float64) float64 {
		var xs []float64
		for _, r := range a.runs {
			if u < len(r.durations) && !math.IsNaN(get(r.durations[u])) {
				xs = append(xs, get(r.durations[u]))
			}
		}
		if len(xs) == 0 {
			return math.NaN()
		}
		return mean(xs)
	}
	var grid [][]*plot.Plot
	leg := plot.NewLegend()
	for _, a := range s.ppoArms() {
		n, seeds := longest(a.runs, func(r *seedRun) int { return len(r.durations) })
		if n == 0 {
			continue
		}
		shares, stale := plot.New(), plot.New()
		shares.Title.Text = fmt.Sprintf("%s: trained samples per duration quarter (mean over %s)", a.arm.Name, plural(seeds, "seed"))
		shares.Y.Label.Text = "share of the update's trained samples (%)"
		stale.Title.Text = fmt.Sprintf("%s: staleness of the trained samples", a.arm.Name)
		stale.Y.Label.Text = "policy versions"
		top := 30.0
		for i, ln := range lines {
			sr := series{col: lineColors[i%len(lineColors)]}
			for u := range n {
				if v := meanAt(a, u, ln.get); !math.IsNaN(v) {
					sr.x, sr.y, sr.half = append(sr.x, float64(u+1)), append(sr.y, 100*v), append(sr.half, math.NaN())
					top = math.Max(top, 100*v)
				}
			}
			if len(sr.x) == 0 {
				continue
			}
			th, err := addSeries(shares, sr, i == 4)
			if err != nil {
				return err
			}
			if len(grid) == 0 {
				leg.Add(ln.name, th...)
			}
		}
		quarter := plotter.NewFunction(func(float64) float64 { return 25 })
		quarter.Color, quarter.Dashes = color.Gray{Y: 120}, []vg.Length{vg.Points(2), vg.Points(2)}
		shares.Add(quarter, plotter.NewGrid())
		shares.Y.Min, shares.Y.Max = -1.5, math.Min(101.5, 5*math.Ceil((top+3)/5))
		sr := series{col: lineColors[0]}
		for u := range n {
			if v := meanAt(a, u, func(d schemas.UpdateDurations) float64 { return d.Staleness }); !math.IsNaN(v) {
				sr.x, sr.y, sr.half = append(sr.x, float64(u+1)), append(sr.y, v), append(sr.half, math.NaN())
			}
		}
		if len(sr.x) > 0 {
			if _, err := addSeries(stale, sr, false); err != nil {
				return err
			}
			yRange(stale, []series{sr}, true, 1)
		}
		stale.Add(plotter.NewGrid())
		for _, p := range []*plot.Plot{shares, stale} {
			p.X.Label.Text = "update"
			p.X.Tick.Marker = integerTicks{last: n}
			p.X.Min, p.X.Max = 0.8, float64(n)+0.2
		}
		grid = append(grid, []*plot.Plot{shares, stale})
	}
	if len(grid) == 0 {
		return nil
	}
	return savePanels(filepath.Join(dir, "duration_shares.png"), grid, leg, 5.2*vg.Inch, 3.4*vg.Inch, made)
}

// taskCountPlot is ML-Agent's Fig. 5: held-out delta_r against the
// number of held-in tasks RL trained on, mean over seeds with a 95%
// interval over seeds.
func taskCountPlot(dir string, s summary, made map[string]bool) error {
	pts := s.taskCount()
	if len(pts) < 2 {
		return nil
	}
	p := plot.New()
	seeds := 0
	for _, pt := range pts {
		seeds = max(seeds, pt.e.n)
	}
	p.Title.Text = fmt.Sprintf("held-out delta_r against training tasks (mean over %s, 95%% interval over seeds)", plural(seeds, "seed"))
	p.X.Label.Text = "held-in tasks whose states PPO trained on (0: SFT only)"
	p.Y.Label.Text = "held-out delta_r (%)"
	sr := series{col: lineColors[0]}
	var ticks []plot.Tick
	for _, pt := range pts {
		sr.x, sr.y, sr.half = append(sr.x, float64(pt.tasks)), append(sr.y, 100*pt.e.mean), append(sr.half, 100*halfOrNaN(pt.e))
		ticks = append(ticks, plot.Tick{Value: float64(pt.tasks), Label: fmt.Sprint(pt.tasks)})
	}
	if _, err := addSeries(p, sr, false); err != nil {
		return err
	}
	p.Add(plotter.NewGrid())
	z := plotter.NewFunction(func(float64) float64 { return 0 })
	z.Color = color.Gray{Y: 120}
	p.Add(z)
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.X.Min, p.X.Max = sr.x[0]-0.5, sr.x[len(sr.x)-1]+0.5
	yRange(p, []series{sr}, true, 1)
	if err := p.Save(6*vg.Inch, 4*vg.Inch, filepath.Join(dir, "task_count.png")); err != nil {
		return fmt.Errorf("task_count.png: %w", err)
	}
	made["task_count.png"] = true
	return nil
}

// savePanels draws a grid of panels with one legend in a strip on their
// right, off every line, and writes the PNG.
func savePanels(path string, grid [][]*plot.Plot, leg plot.Legend, pw, ph vg.Length, made map[string]bool) error {
	legendW := 2.5 * vg.Inch
	cols := len(grid[0])
	w, h := pw*vg.Length(cols)+legendW, ph*vg.Length(len(grid))
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(grid), Cols: cols, PadX: vg.Points(18), PadY: vg.Points(18),
		PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(6)}
	canvases := plot.Align(grid, tiles, draw.Crop(dc, 0, -legendW, 0, 0))
	for i, row := range grid {
		for j, p := range row {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
	}
	leg.Top, leg.Left = true, true
	leg.YOffs = -vg.Points(28)
	leg.Draw(draw.Crop(dc, w-legendW+vg.Points(6), 0, 0, 0))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	made[filepath.Base(path)] = true
	return nil
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
// last when it is set: multiples of a step of 1, 2 or 5 x 10^k (at most
// about 8 ticks), never below 0, and the first whole number of the axis
// when it is well before the first multiple (update 1).
type integerTicks struct{ last int }

func (t integerTicks) Ticks(min, max float64) []plot.Tick {
	if t.last > 0 {
		max = math.Min(max, float64(t.last))
	}
	step := 1.0
	for i := 0; (max-min)/step > 8; i++ {
		step *= []float64{2, 2.5, 2}[i%3] // 1, 2, 5, 10, 20, 50...
	}
	var ts []plot.Tick
	first := math.Max(math.Ceil(min), 0)
	start := math.Max(math.Ceil(min/step)*step, 0)
	if first < start-step/2 {
		ts = append(ts, plot.Tick{Value: first, Label: fmt.Sprint(int(first))})
	}
	for v := start; v <= max; v += step {
		ts = append(ts, plot.Tick{Value: v, Label: fmt.Sprint(int(v))})
	}
	return ts
}

// plainTicks are gonum's default ticks labelled without trailing zeros
// (seconds: 250, not 250.00).
type plainTicks struct{}

func (plainTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', -1, 64)
		}
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

// plural is "1 seed", "2 seeds".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
