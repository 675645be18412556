package evaluate

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/mlerl/mlerl/internal/textutil"
	"github.com/mlerl/mlerl/schemas"
)

// The plots of the report, each rendered as PNG bytes. A plot with
// nothing to show returns nil bytes. Every plot follows the same rules:
// bars of one category are centred on its tick; a bar of 0 (or too short
// to see) is a flat mark (a method at zero is seen, not missing) and an
// undefined value says "n/a"; 95% intervals are drawn where the report computes
// them; axes are fitted to the data (intervals included) and end on a
// labelled tick; counts (updates) get integer ticks; legends sit beside
// the data, never on it; a method keeps its colour in every plot.

// plotDelta draws delta_r (in %) per task, one bar per method with its
// 95% interval (the tables' CI column), held-out tasks first.
func plotDelta(in ReportInput) ([]byte, error) {
	s := in.Summary
	var tasks []string
	taskIdx := map[string]int{}
	for _, split := range []string{schemas.HeldOut, schemas.HeldIn} {
		for _, c := range s.Cells {
			if c.Split != split {
				continue
			}
			if _, ok := taskIdx[c.TaskID]; !ok {
				taskIdx[c.TaskID] = len(tasks)
				label := c.TaskID
				if split == schemas.HeldIn {
					label += " (in)"
				}
				tasks = append(tasks, label)
			}
		}
	}
	if len(tasks) == 0 {
		return nil, nil
	}
	g := &groupedBars{cats: tasks}
	for _, m := range s.Methods {
		b := barSeries{name: m, color: methodColor(m, s.Methods), vals: nanValues(len(tasks)), errs: nanValues(len(tasks)), na: make([]bool, len(tasks))}
		for _, c := range s.Cells {
			if c.Method == m {
				i := taskIdx[c.TaskID]
				b.vals[i], b.errs[i], b.na[i] = 100*c.Delta, 100*c.DeltaCI, math.IsNaN(c.Delta)
			}
		}
		g.series = append(g.series, b)
	}
	p := plot.New()
	p.Title.Text = "delta_r per task and method (mean over trajectories, 95% interval)"
	p.Y.Label.Text = "delta_r"
	g.addTo(p, signedPct)
	rotateLabels(p)
	return render([]panel{{p, g.legend()}}, 1, 11*vg.Inch, 5.5*vg.Inch)
}

// plotSFT draws the SFT losses per update.
func plotSFT(in ReportInput) ([]byte, error) {
	c := in.Curves.SFT
	p := plot.New()
	p.Title.Text = "SFT"
	p.X.Label.Text = "update"
	p.Y.Label.Text = "loss (nats/token)"
	leg := newLegend()
	var all [2][]float64
	for i, key := range []string{"losses/sft", "losses/val"} {
		xs, ys := c.series(key)
		if len(xs) == 0 {
			continue
		}
		th, err := addLine(p, xs, ys, plotutil.Color(i))
		if err != nil {
			return nil, err
		}
		leg.Add(key, th...)
		all[0], all[1] = append(all[0], xs...), append(all[1], ys...)
	}
	if len(all[0]) == 0 {
		return nil, nil
	}
	fitLine(p, all[0], all[1], "")
	return render([]panel{{p, leg}}, 1, 8*vg.Inch, 4*vg.Inch)
}

// ppoPanels are the PPO metrics drawn, one panel each (those the run
// recorded: the learning-curve points when train ppo ran with
// --curve.every, the value loss with the critic baseline).
var ppoPanels = []string{"charts/reward_mean", "charts/groups_dropped_fraction", "losses/entropy", "losses/approx_kl", "losses/kl_ref", "losses/value",
	"curve/held-in/delta_r", "curve/held-out/delta_r", "charts/format_error_rate"}

// plotPPO draws the PPO reward and losses per update, one panel each.
//
// An update that trained nothing (skipped: every group flat) has no loss
// metrics; the loss panels break their line there and say how many.
func plotPPO(in ReportInput) ([]byte, error) {
	c := in.Curves.PPO
	skipped := skippedUpdates(c)
	var panels []panel
	for i, key := range ppoPanels {
		xs, ys := c.series(key)
		if len(xs) == 0 || key == "losses/value" && allZero(ys) {
			continue
		}
		p := plot.New()
		p.Title.Text = key
		p.X.Label.Text = "update"
		gaps := map[float64]bool{}
		if strings.HasPrefix(key, "losses/") && len(skipped) > 0 {
			gaps = skipped
			p.Title.Text += fmt.Sprintf(" (%d skipped updates left out)", len(skipped))
		}
		for _, seg := range segments(xs, ys, gaps) {
			if _, err := addLine(p, seg[0], seg[1], plotutil.Color(i)); err != nil {
				return nil, err
			}
		}
		fitLine(p, xs, ys, key)
		panels = append(panels, panel{p: p})
	}
	if len(panels) == 0 {
		return nil, nil
	}
	cols := min(3, len(panels))
	rows := (len(panels) + cols - 1) / cols
	return render(panels, cols, vg.Length(cols)*3.8*vg.Inch, vg.Length(rows)*3*vg.Inch)
}

// skippedUpdates are the updates that recorded skipped (nothing to train).
func skippedUpdates(c Curve) map[float64]bool {
	out := map[float64]bool{}
	xs, ys := c.series("skipped")
	for k, x := range xs {
		if ys[k] == 1 {
			out[x] = true
		}
	}
	return out
}

// segments splits a series where a gap x lies between two of its
// consecutive points, so that a line is not drawn across it.
func segments(xs, ys []float64, gaps map[float64]bool) [][2][]float64 {
	var out [][2][]float64
	start := 0
	for k := 1; k <= len(xs); k++ {
		split := k == len(xs)
		for g := range gaps {
			if !split && g > xs[k-1] && g < xs[k] {
				split = true
			}
		}
		if split {
			out = append(out, [2][]float64{xs[start:k], ys[start:k]})
			start = k
		}
	}
	return out
}

func allZero(xs []float64) bool {
	for _, x := range xs {
		if x != 0 {
			return false
		}
	}
	return true
}

// plotTime draws the mean time per trajectory of each method and, when
// any method paid for LLM tokens, the mean cost.
func plotTime(in ReportInput) ([]byte, error) {
	s := in.Summary
	if len(s.Methods) == 0 {
		return nil, nil
	}
	wall := make([]float64, len(s.Methods))
	cost := make([]float64, len(s.Methods))
	anyCost := false
	for j, m := range s.Methods {
		n := 0
		for _, c := range s.Cells {
			if c.Method == m {
				wall[j] += c.MeanWallS * float64(c.N)
				cost[j] += c.MeanCost * float64(c.N)
				n += c.N
			}
		}
		if n > 0 {
			wall[j] /= float64(n)
			cost[j] /= float64(n)
		}
		anyCost = anyCost || cost[j] != 0
	}
	panels := []struct {
		title string
		vals  []float64
		label func(float64) string
	}{{"time per trajectory", wall, func(v float64) string { return fmt.Sprintf("%.3g s", v) }}}
	if anyCost {
		panels = append(panels, struct {
			title string
			vals  []float64
			label func(float64) string
		}{"LLM cost per trajectory", cost, func(v float64) string { return fmt.Sprintf("$%.3g", v) }})
	} else {
		panels[0].title += " (no method paid for LLM tokens: cost $0)"
	}
	var out []panel
	for _, v := range panels {
		g := &groupedBars{cats: s.Methods, valueLabels: v.label}
		b := barSeries{vals: v.vals, errs: nanValues(len(v.vals)), colors: make([]color.Color, len(s.Methods))}
		for j, m := range s.Methods {
			b.colors[j] = methodColor(m, s.Methods)
		}
		g.series = []barSeries{b}
		p := plot.New()
		p.Title.Text = v.title
		g.addTo(p, v.label)
		out = append(out, panel{p: p})
	}
	return render(out, len(out), vg.Length(len(out))*5.5*vg.Inch, 4*vg.Inch)
}

func plotActions(in ReportInput) ([]byte, error) {
	return plotShares("actions per method (share of steps)", in.Summary.Methods, in.Summary.Actions)
}

func plotOutcomes(in ReportInput) ([]byte, error) {
	return plotShares("outcome classes per method (share of steps)", in.Summary.Methods, in.Summary.Outcomes)
}

// plotShares draws, per category, one bar per method: the category's
// share of that method's steps. Methods without steps (initial) are left
// out.
func plotShares(title string, methods []string, counts map[string]map[string]int) ([]byte, error) {
	total := map[string]int{}
	var used []string
	all := map[string]int{}
	for _, m := range methods {
		for k, n := range counts[m] {
			total[m] += n
			all[k] += n
		}
		if total[m] > 0 {
			used = append(used, m)
		}
	}
	if len(used) == 0 {
		return nil, nil
	}
	cats := textutil.ByCount(all)
	labels := make([]string, len(cats))
	for i, k := range cats {
		labels[i] = k
		if k == "" {
			labels[i] = "(unparsed)"
		}
	}
	g := &groupedBars{cats: labels}
	for _, m := range used {
		b := barSeries{name: fmt.Sprintf("%s (%d steps)", m, total[m]), color: methodColor(m, methods), vals: make([]float64, len(cats)), errs: nanValues(len(cats))}
		for i, k := range cats {
			b.vals[i] = 100 * float64(counts[m][k]) / float64(total[m])
		}
		g.series = append(g.series, b)
	}
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = "share of steps"
	g.addTo(p, func(v float64) string { return strconv.FormatFloat(math.Round(v*1e6)/1e6, 'f', -1, 64) + "%" })
	p.Y.Max = math.Min(p.Y.Max, 100)
	rotateLabels(p)
	return render([]panel{{p, g.legend()}}, 1, 11*vg.Inch, 5*vg.Inch)
}

// methodColor is a method's colour in every plot: its place among
// AllMethods; methods unknown to this package get the colours after
// those, in their order in all (the report's methods).
func methodColor(m string, all []string) color.Color {
	if i := slices.Index(AllMethods, m); i >= 0 {
		return plotutil.Color(i)
	}
	k := 0
	for _, o := range all {
		if o == m {
			break
		}
		if !slices.Contains(AllMethods, o) {
			k++
		}
	}
	// The soft palette's one colour left (pink), then the dark palette
	// from its pink on: the other dark colours resemble the soft ones.
	if k == 0 {
		return plotutil.Color(len(AllMethods))
	}
	return plotutil.DarkColors[(len(AllMethods)+k-1)%len(plotutil.DarkColors)]
}

func nanValues(n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = math.NaN()
	}
	return v
}

// signedPct labels a tick of percentages: "-5%", "0%", "+2.5%".
func signedPct(v float64) string {
	v = math.Round(v*1e6) / 1e6
	if v == 0 {
		return "0%"
	}
	s := strconv.FormatFloat(v, 'f', -1, 64) + "%"
	if v > 0 {
		s = "+" + s
	}
	return s
}

func rotateLabels(p *plot.Plot) {
	p.X.Tick.Label.Rotation = 0.4
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Tick.Label.YAlign = draw.YCenter
}

// barSeries is one series of a grouped bar chart: a value per category
// (NaN: no bar) and the half-width of its 95% interval (NaN or 0: none).
type barSeries struct {
	name       string
	color      color.Color
	colors     []color.Color // per category, overriding color
	vals, errs []float64
	na         []bool // per category: the value exists but is undefined ("n/a")
}

// groupedBars draws, for each category of a nominal X axis, one bar per
// series side by side, the group centred on the category's tick.
type groupedBars struct {
	cats   []string
	series []barSeries
	// valueLabels, when set, writes each bar's value at its end.
	valueLabels func(float64) string
}

// groupWidth is the share of a category's room its bars take.
const groupWidth = 0.8

// slot returns the centre and width, in category units, of series j's bar
// in category i.
func (g *groupedBars) slot(i, j int) (x, w float64) {
	n := len(g.series)
	w = groupWidth / float64(n)
	return float64(i) + (float64(j)-float64(n-1)/2)*w, w
}

// valueRange is the range of the bars and their intervals, with 0 in it.
func (g *groupedBars) valueRange() (lo, hi float64) {
	for _, s := range g.series {
		for i, v := range s.vals {
			if math.IsNaN(v) {
				continue
			}
			e := s.errs[i]
			if math.IsNaN(e) {
				e = 0
			}
			lo, hi = math.Min(lo, v-e), math.Max(hi, v+e)
		}
	}
	return lo, hi
}

// DataRange implements plot.DataRanger.
func (g *groupedBars) DataRange() (xmin, xmax, ymin, ymax float64) {
	lo, hi := g.valueRange()
	return -0.5, float64(len(g.cats)) - 0.5, lo, hi
}

// Plot implements plot.Plotter.
func (g *groupedBars) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	zero := trY(0)
	// The zero line, under the bars.
	c.StrokeLine2(draw.LineStyle{Color: color.Gray{Y: 90}, Width: vg.Points(0.75)}, c.Min.X, zero, c.Max.X, zero)
	whisker := draw.LineStyle{Color: color.Gray{Y: 40}, Width: vg.Points(1.2)}
	small := text.Style{Color: color.Gray{Y: 60}, Font: font.From(plot.DefaultFont, 9), Handler: plot.DefaultTextHandler, XAlign: draw.XCenter}
	vertical := small // "n/a" upwards from the zero line: it fits a narrow bar
	vertical.Rotation, vertical.XAlign, vertical.YAlign = math.Pi/2, draw.XLeft, draw.YCenter
	for j, s := range g.series {
		for i, v := range s.vals {
			x, w := g.slot(i, j)
			x0, x1 := trX(x-w/2), trX(x+w/2)
			col := s.color
			if s.colors != nil {
				col = s.colors[i]
			}
			if math.IsNaN(v) {
				if s.na != nil && s.na[i] {
					c.FillText(vertical, vg.Point{X: trX(x), Y: zero + vg.Points(3)}, "n/a")
				}
				continue
			}
			y := trY(v)
			if v == 0 || math.Abs(float64(y-zero)) < 2 {
				// A flat mark: the method is at zero, not missing.
				y = zero + vg.Points(1.5)
				c.FillPolygon(col, []vg.Point{{X: x0, Y: zero - vg.Points(1.5)}, {X: x1, Y: zero - vg.Points(1.5)}, {X: x1, Y: y}, {X: x0, Y: y}})
			} else {
				c.FillPolygon(col, []vg.Point{{X: x0, Y: zero}, {X: x1, Y: zero}, {X: x1, Y: y}, {X: x0, Y: y}})
			}
			end := y
			// An interval under 2 points tall (rounding noise around an
			// exact value) is not drawn.
			if e := s.errs[i]; !math.IsNaN(e) && trY(v+e)-trY(v-e) >= vg.Points(2) {
				xc, cap := trX(x), (x1-x0)/4
				lo, hi := trY(v-e), trY(v+e)
				c.StrokeLine2(whisker, xc, lo, xc, hi)
				c.StrokeLine2(whisker, xc-cap, lo, xc+cap, lo)
				c.StrokeLine2(whisker, xc-cap, hi, xc+cap, hi)
				if v >= 0 {
					end = hi
				} else {
					end = lo
				}
			}
			if g.valueLabels != nil {
				sty := small
				sty.Color = color.Black
				sty.Font.Size = 10
				if v >= 0 {
					c.FillText(sty, vg.Point{X: trX(x), Y: end + vg.Points(3)}, g.valueLabels(v))
				} else {
					sty.YAlign = draw.YTop
					c.FillText(sty, vg.Point{X: trX(x), Y: end - vg.Points(3)}, g.valueLabels(v))
				}
			}
		}
	}
}

// addTo puts the bars on p: the categories on X, the value axis fitted
// to the bars and intervals (0 included), ticks labelled by format.
func (g *groupedBars) addTo(p *plot.Plot, format func(float64) string) {
	grid := plotter.NewGrid()
	grid.Vertical.Color = nil // a line through the middle bar of each group hides it
	p.Add(grid)
	p.Add(g)
	p.NominalX(g.cats...)
	lo, hi := g.valueRange()
	// Room beyond the longest bars, so that none ends on the frame (and,
	// with value labels, for the labels).
	room := 0.05
	if g.valueLabels != nil {
		room = 0.1
	}
	span := hi - lo
	if hi > 0 {
		hi += room * span
	}
	if lo < 0 {
		lo -= room * span
	}
	fitAxis(&p.Y, lo, hi, false, format)
	p.X.Min, p.X.Max = -0.5, float64(len(g.cats))-0.5
}

// legend is one entry per named series, in order.
func (g *groupedBars) legend() plot.Legend {
	l := newLegend()
	for _, s := range g.series {
		if s.name != "" {
			l.Add(s.name, swatch{s.color})
		}
	}
	return l
}

// swatch is a legend thumbnail: a filled square.
type swatch struct{ color color.Color }

func (s swatch) Thumbnail(c *draw.Canvas) {
	h := c.Max.Y - c.Min.Y
	c.FillPolygon(s.color, []vg.Point{{X: c.Min.X, Y: c.Min.Y}, {X: c.Min.X + h, Y: c.Min.Y}, {X: c.Min.X + h, Y: c.Max.Y}, {X: c.Min.X, Y: c.Max.Y}})
}

func newLegend() plot.Legend {
	l := plot.NewLegend()
	l.Left, l.Top = true, true
	l.ThumbnailWidth = vg.Points(12)
	l.Padding = vg.Points(3)
	return l
}

// niceStep is the tick step for [lo, hi]: of the steps 1, 2, 2.5 and 5
// times a power of ten (whole ones when integer is set) that give 4 to 8
// ticks, the one whose tick-aligned range wastes the least room (the
// larger step on a tie).
func niceStep(lo, hi float64, integer bool) float64 {
	span := hi - lo
	if span <= 0 || math.IsNaN(span) || math.IsInf(span, 0) {
		return 1
	}
	best, bestRange := 0.0, math.Inf(1)
	mag := math.Pow(10, math.Floor(math.Log10(span/8)))
	for _, m := range []float64{mag, 10 * mag} {
		for _, f := range []float64{1, 2, 2.5, 5} {
			step := f * m
			if integer && step != math.Round(step) {
				continue
			}
			r := (math.Ceil(hi/step-1e-9) - math.Floor(lo/step+1e-9)) * step
			if n := r/step + 1; n < 4 || n > 8 {
				continue
			}
			if r <= bestRange*(1+1e-9) {
				best, bestRange = step, r
			}
		}
	}
	if best == 0 { // no whole step gives 4 ticks (a span under 3)
		return 1
	}
	return best
}

// stepTicks labels every multiple of step in range.
type stepTicks struct {
	step   float64
	format func(float64) string
}

func (t stepTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for k := math.Ceil(lo/t.step - 1e-9); k*t.step <= hi+1e-9*t.step; k++ {
		v := k * t.step
		if math.Abs(v) < 1e-9*t.step {
			v = 0
		}
		out = append(out, plot.Tick{Value: v, Label: t.format(v)})
	}
	return out
}

// fitAxis sets a to [lo, hi] widened to whole tick steps, with 4 to 8
// labelled ticks. A flat range (every value equal) is widened around its
// value. integer keeps the steps whole (counts); format labels the ticks
// (nil: %g).
func fitAxis(a *plot.Axis, lo, hi float64, integer bool, format func(float64) string) {
	if format == nil {
		format = func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	}
	if hi-lo <= 1e-12*math.Max(math.Abs(lo), math.Abs(hi)) {
		d := math.Max(math.Abs(hi)*0.1, 1e-3)
		if integer {
			d = 1
		}
		lo, hi = lo-d, hi+d
	}
	step := niceStep(lo, hi, integer)
	a.Min, a.Max = math.Floor(lo/step+1e-9)*step, math.Ceil(hi/step-1e-9)*step
	a.Tick.Marker = stepTicks{step: step, format: format}
}

// fitLine fits a line plot's axes: integer update ticks on X; on Y the
// data's range, or [0, 1] for a rate.
func fitLine(p *plot.Plot, xs, ys []float64, key string) {
	p.Add(plotter.NewGrid())
	fitAxis(&p.X, slices.Min(xs), slices.Max(xs), true, nil)
	lo, hi := slices.Min(ys), slices.Max(ys)
	if strings.HasSuffix(key, "_rate") && lo >= 0 && hi <= 1 {
		fitAxis(&p.Y, 0, 1, false, nil)
		return
	}
	fitAxis(&p.Y, lo, hi, false, nil)
}

// addLine draws ys over xs in col, with the points marked when they are
// few, and returns the legend thumbnails.
func addLine(p *plot.Plot, xs, ys []float64, col color.Color) ([]plot.Thumbnailer, error) {
	pts := make(plotter.XYs, len(xs))
	for k := range xs {
		pts[k].X, pts[k].Y = xs[k], ys[k]
	}
	l, err := plotter.NewLine(pts)
	if err != nil {
		return nil, err
	}
	l.Color = col
	l.Width = vg.Points(1.5)
	p.Add(l)
	th := []plot.Thumbnailer{l}
	if len(pts) < 30 { // few points: show them
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return nil, err
		}
		sc.Color = col
		sc.GlyphStyle.Shape = draw.CircleGlyph{}
		sc.Radius = vg.Points(2.5)
		p.Add(sc)
		th = append(th, sc)
	}
	return th, nil
}

// panel is one plot of a figure and its legend (drawn beside the data).
type panel struct {
	p      *plot.Plot
	legend plot.Legend
}

// render lays the panels out in a grid of cols columns on a white PNG,
// each panel's legend in a column at its right.
func render(panels []panel, cols int, w, h vg.Length) ([]byte, error) {
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(96), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	rows := (len(panels) + cols - 1) / cols
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 3}
	for i, pn := range panels {
		c := tiles.At(dc, i%cols, i/cols)
		lw := pn.legend.Rectangle(c).Size().X
		if lw > 0 {
			lw += vg.Millimeter * 3
			top := c.Max.Y - pn.p.Title.TextStyle.Rectangle(pn.p.Title.Text).Size().Y - pn.p.Title.Padding - vg.Millimeter*2
			lc := draw.Canvas{Canvas: c.Canvas, Rectangle: vg.Rectangle{Min: vg.Point{X: c.Max.X - lw + vg.Millimeter*3, Y: c.Min.Y}, Max: vg.Point{X: c.Max.X, Y: top}}}
			pn.legend.Draw(lc)
			c = draw.Crop(c, 0, -lw, 0, 0)
		}
		pn.p.Draw(c)
	}
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
