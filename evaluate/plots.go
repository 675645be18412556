package evaluate

import (
	"bytes"
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/mlerl/mlerl/schemas"
)

// The plots of the report, each rendered as PNG bytes. A plot with
// nothing to show returns nil bytes.

// plotDelta draws delta_r (in %) per task, one bar per method, held-out
// tasks first.
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
	p := plot.New()
	p.Title.Text = "delta_r per task and method (final scores, avg over trajectories)"
	p.Y.Label.Text = "delta_r (%)"
	n := len(s.Methods)
	width := vg.Points(math.Max(4, math.Min(40, 560/float64(n*len(tasks)))))
	for j, m := range s.Methods {
		vals := make(plotter.Values, len(tasks))
		for _, c := range s.Cells {
			if c.Method == m && !math.IsNaN(c.Delta) {
				vals[taskIdx[c.TaskID]] = 100 * c.Delta
			}
		}
		bc, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return nil, err
		}
		bc.Color = plotutil.Color(j)
		bc.LineStyle.Width = 0
		bc.Offset = vg.Length(float64(j)-float64(n-1)/2) * width
		p.Add(bc)
		p.Legend.Add(m, bc)
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.NominalX(tasks...)
	p.X.Tick.Label.Rotation = 0.4
	p.X.Tick.Label.XAlign = draw.XRight
	return render([]*plot.Plot{p}, 1, 11*vg.Inch, 5.5*vg.Inch)
}

// plotSFT draws the SFT losses per update.
func plotSFT(in ReportInput) ([]byte, error) {
	c := in.Curves.SFT
	p := plot.New()
	p.Title.Text = "SFT"
	p.X.Label.Text = "update"
	p.Y.Label.Text = "loss (nats/token)"
	n := 0
	for i, key := range []string{"losses/sft", "losses/val"} {
		xs, ys := c.series(key)
		if len(xs) == 0 {
			continue
		}
		n++
		if err := addLine(p, key, xs, ys, i); err != nil {
			return nil, err
		}
	}
	if n == 0 {
		return nil, nil
	}
	p.Add(plotter.NewGrid())
	return render([]*plot.Plot{p}, 1, 7*vg.Inch, 4*vg.Inch)
}

// plotPPO draws the PPO reward and losses per update, one panel each.
func plotPPO(in ReportInput) ([]byte, error) {
	c := in.Curves.PPO
	var plots []*plot.Plot
	for i, key := range []string{"charts/reward_mean", "losses/policy", "losses/value", "losses/approx_kl", "charts/format_error_rate", "losses/kl_ref"} {
		xs, ys := c.series(key)
		if len(xs) == 0 {
			continue
		}
		p := plot.New()
		p.Title.Text = key
		p.X.Label.Text = "update"
		if err := addLine(p, "", xs, ys, i); err != nil {
			return nil, err
		}
		p.Add(plotter.NewGrid())
		plots = append(plots, p)
	}
	if len(plots) == 0 {
		return nil, nil
	}
	cols := min(3, len(plots))
	rows := (len(plots) + cols - 1) / cols
	return render(plots, cols, vg.Length(cols)*3.8*vg.Inch, vg.Length(rows)*3*vg.Inch)
}

// plotTime draws the mean time and cost per trajectory of each method.
func plotTime(in ReportInput) ([]byte, error) {
	s := in.Summary
	if len(s.Methods) == 0 {
		return nil, nil
	}
	wall := make(plotter.Values, len(s.Methods))
	cost := make(plotter.Values, len(s.Methods))
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
	}
	var plots []*plot.Plot
	for i, v := range []struct {
		title, y string
		vals     plotter.Values
	}{{"time per trajectory", "seconds", wall}, {"cost per trajectory (LLM tokens)", "USD", cost}} {
		p := plot.New()
		p.Title.Text = v.title
		p.Y.Label.Text = v.y
		bc, err := plotter.NewBarChart(v.vals, 0.5*vg.Inch)
		if err != nil {
			return nil, err
		}
		bc.Color = plotutil.Color(i)
		bc.LineStyle.Width = 0
		p.Add(bc, plotter.NewGrid())
		p.NominalX(s.Methods...)
		plots = append(plots, p)
	}
	return render(plots, 2, 10*vg.Inch, 4*vg.Inch)
}

func plotActions(in ReportInput) ([]byte, error) {
	return plotShares("actions per method (share of steps)", in.Summary.Methods, in.Summary.Actions)
}

func plotOutcomes(in ReportInput) ([]byte, error) {
	return plotShares("outcome classes per method (share of steps)", in.Summary.Methods, in.Summary.Outcomes)
}

// plotShares draws, per category, one bar per method: the category's
// share of that method's steps.
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
	cats := sortedKeys(all)
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = "share of steps (%)"
	width := vg.Points(math.Max(4, math.Min(40, 560/float64(len(used)*len(cats)))))
	for j, m := range used {
		vals := make(plotter.Values, len(cats))
		for i, k := range cats {
			vals[i] = 100 * float64(counts[m][k]) / float64(total[m])
		}
		bc, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return nil, err
		}
		bc.Color = plotutil.Color(j + 1) // methods without steps (initial) are left out
		bc.LineStyle.Width = 0
		bc.Offset = vg.Length(float64(j)-float64(len(used)-1)/2) * width
		p.Add(bc)
		p.Legend.Add(fmt.Sprintf("%s (%d steps)", m, total[m]), bc)
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.NominalX(cats...)
	p.X.Tick.Label.Rotation = 0.4
	p.X.Tick.Label.XAlign = draw.XRight
	return render([]*plot.Plot{p}, 1, 11*vg.Inch, 5*vg.Inch)
}

func addLine(p *plot.Plot, name string, xs, ys []float64, i int) error {
	pts := make(plotter.XYs, len(xs))
	for k := range xs {
		pts[k].X, pts[k].Y = xs[k], ys[k]
	}
	l, err := plotter.NewLine(pts)
	if err != nil {
		return err
	}
	l.Color = plotutil.Color(i)
	l.Width = vg.Points(1.5)
	p.Add(l)
	if len(pts) < 30 { // few points: show them
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		sc.Color = l.Color
		sc.Radius = vg.Points(2)
		p.Add(sc)
	}
	if name != "" {
		p.Legend.Add(name, l)
	}
	return nil
}

// render lays the plots out in a grid of cols columns on a white PNG.
func render(plots []*plot.Plot, cols int, w, h vg.Length) ([]byte, error) {
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(96), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	rows := (len(plots) + cols - 1) / cols
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	for i, p := range plots {
		p.Draw(tiles.At(dc, i%cols, i/cols))
	}
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
