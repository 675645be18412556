package evaluate

import (
	"bytes"
	"fmt"
	"image"
	_ "image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"gonum.org/v1/plot"

	"github.com/mlerl/mlerl/schemas"
)

// heldOutTasks are the built-in suite's held-out tasks (metric direction
// and m_init as in README.md).
var heldOutTasks = []struct {
	id, dir string
	mInit   float64
}{
	{"election-vote", schemas.HigherIsBetter, 0.6866},
	{"review-sentiment", schemas.HigherIsBetter, 0.5836},
	{"shapes-10x10", schemas.HigherIsBetter, 0.3889},
	{"social-communities-graph", schemas.HigherIsBetter, 0.3476},
	{"sunspots-yearly", schemas.LowerIsBetter, 55.922},
}

// evalRows makes n rows of method on every held-out task whose delta_r
// are gain(task) plus noise of the given spread (both as fractions).
func evalRows(r *rand.Rand, method string, n int, wallS, cost float64, gain func(task int) float64, spread float64, actions, outcomes []string) []schemas.EvalResult {
	var out []schemas.EvalResult
	for ti, t := range heldOutTasks {
		for i := range n {
			d := gain(ti) + spread*r.NormFloat64()
			f := t.mInit * (1 + d)
			if t.dir == schemas.LowerIsBetter {
				f = t.mInit * (1 - d)
			}
			out = append(out, schemas.EvalResult{Method: method, TaskID: t.id, Split: schemas.HeldOut, Metric: "m", Direction: t.dir,
				Trajectory: int32(i), MInit: t.mInit, FinalScore: f, Steps: int32(len(actions)), WallS: wallS * (0.8 + 0.4*r.Float64()), CostUSD: cost,
				Actions: actions, Outcomes: outcomes})
		}
	}
	return out
}

func metricsJSONL(records []map[string]float64) []byte {
	var b bytes.Buffer
	for _, r := range records {
		b.WriteString("{")
		first := true
		for k, v := range r {
			if !first {
				b.WriteString(",")
			}
			first = false
			fmt.Fprintf(&b, "%q:%g", k, v)
		}
		b.WriteString("}\n")
	}
	return b.Bytes()
}

// demoReport is shaped like `make demo`'s: the expert gains ~10%, the
// random agent a little less than nothing, the policies exactly 0 (they
// never produce a valid action), no LLM costs; 24 SFT updates with a
// validation loss at the end, 4 PPO updates with every answer a format
// error.
func demoReport() ReportInput {
	r := rand.New(rand.NewPCG(1, 2))
	zero := func(int) float64 { return 0 }
	var rows []schemas.EvalResult
	rows = append(rows, evalRows(r, MethodInitial, 1, 0, 0, zero, 0, nil, nil)...)
	rows = append(rows, evalRows(r, MethodRandom, 8, 9, 0, func(int) float64 { return -0.01 }, 0.03,
		[]string{"List Files", "Inspect Script Lines", "Edit Script Segment", "Execute Script", "Undo Edit Script", "Copy File", "Final Answer"},
		[]string{"success", "invalid_action", "invalid_edit", "script_error", "success", "success", "success"})...)
	rows = append(rows, evalRows(r, MethodExpert, 8, 31, 0, func(t int) float64 { return []float64{0.2, 0.3, 0.9, 1.1, 0.25}[t] / 5 }, 0.04,
		[]string{"Inspect Script Lines", "Edit Script (AI)", "Execute Script", "Edit Script (AI)", "Execute Script", "Final Answer"},
		[]string{"success", "success", "success", "success", "script_error", "success"})...)
	for _, m := range []string{MethodSFT, MethodPPO} {
		rows = append(rows, evalRows(r, m, 3, 64, 0, zero, 0,
			[]string{"", "", "", "", "", "", "", ""},
			[]string{"format_error", "format_error", "format_error", "format_error", "format_error", "format_error", "format_error", "format_error"})...)
	}
	var sft, ppo []map[string]float64
	for s := 1; s <= 24; s++ {
		sft = append(sft, map[string]float64{"step": float64(s), "losses/sft": 6 - 3.5*float64(s)/24 + 0.2*r.NormFloat64()})
	}
	sft = append(sft, map[string]float64{"step": 24, "losses/val": 3.1})
	for u := 1; u <= 4; u++ {
		ppo = append(ppo, map[string]float64{"step": float64(u), "charts/reward_mean": -0.05 - 0.01*float64(u),
			"losses/policy": 0.01 * r.NormFloat64(), "losses/value": 0.3 / float64(u), "losses/approx_kl": 0.002 * float64(u),
			"charts/format_error_rate": 1, "losses/kl_ref": 0.001 * float64(u)})
	}
	return ReportInput{Summary: Summarize(rows), PerTask: 8, MaxSteps: 8,
		Curves: Curves{SFT: Curve{Records: ParseMetrics(metricsJSONL(sft))}, PPO: Curve{Records: ParseMetrics(metricsJSONL(ppo))}}}
}

// edgeReport holds the cases plots get wrong: a lone +3% bar, methods
// at exactly 0 on every task, seven methods, a task whose m_init is 0
// (delta_r undefined), LLM costs, a long PPO run with a format-error
// rate that falls, and rewards that are all negative.
func edgeReport() ReportInput {
	r := rand.New(rand.NewPCG(3, 4))
	zero := func(int) float64 { return 0 }
	acts := []string{"Execute Script", "Final Answer"}
	outs := []string{"success", "success"}
	var rows []schemas.EvalResult
	rows = append(rows, evalRows(r, MethodInitial, 1, 0, 0, zero, 0, nil, nil)...)
	rows = append(rows, evalRows(r, MethodRandom, 4, 3, 0, zero, 0, acts, outs)...)
	rows = append(rows, evalRows(r, MethodExpert, 4, 20, 0, func(t int) float64 {
		if t == 0 {
			return 0.03
		}
		return 0
	}, 0.005, acts, outs)...)
	rows = append(rows, evalRows(r, MethodSFT, 4, 40, 0, zero, 0, acts, outs)...)
	rows = append(rows, evalRows(r, MethodPPO, 4, 40, 0, func(int) float64 { return -0.02 }, 0.01, acts, outs)...)
	rows = append(rows, evalRows(r, MethodLLM, 4, 120, 0.031, func(int) float64 { return 0.12 }, 0.05, acts, outs)...)
	rows = append(rows, evalRows(r, "llm-large", 2, 300, 0.42, func(int) float64 { return 0.18 }, 0.02, acts, outs)...)
	for i := range 2 { // a task whose m_init is 0: delta_r is undefined
		rows = append(rows, schemas.EvalResult{Method: MethodExpert, TaskID: "zero-init", Split: schemas.HeldOut, Direction: schemas.HigherIsBetter,
			Trajectory: int32(i), MInit: 0, FinalScore: 0.1, Steps: 2, WallS: 10, Actions: acts, Outcomes: outs})
	}
	var ppo []map[string]float64
	for u := 1; u <= 300; u++ {
		ppo = append(ppo, map[string]float64{"step": float64(u), "charts/reward_mean": -0.5 + 0.4*float64(u)/300 + 0.05*r.NormFloat64(),
			"losses/policy": 0.02 * r.NormFloat64(), "losses/value": 1 / float64(u), "losses/approx_kl": 0.01 * r.Float64(),
			"charts/format_error_rate": max(0, 1-float64(u)/200), "losses/kl_ref": 0.0001 * float64(u)})
	}
	return ReportInput{Summary: Summarize(rows), PerTask: 4, MaxSteps: 15,
		Curves: Curves{PPO: Curve{Records: ParseMetrics(metricsJSONL(ppo))}}}
}

// smallReport is the case: the expert gains +3% on one task and
// nothing elsewhere; every other method is at exactly 0.
func smallReport() ReportInput {
	r := rand.New(rand.NewPCG(5, 6))
	zero := func(int) float64 { return 0 }
	acts := []string{"Execute Script", "Final Answer"}
	outs := []string{"success", "success"}
	var rows []schemas.EvalResult
	rows = append(rows, evalRows(r, MethodInitial, 1, 0, 0, zero, 0, nil, nil)...)
	for _, m := range []string{MethodRandom, MethodSFT, MethodPPO} {
		rows = append(rows, evalRows(r, m, 3, 5, 0, zero, 0, acts, outs)...)
	}
	rows = append(rows, evalRows(r, MethodExpert, 8, 20, 0, func(t int) float64 {
		if t == 2 {
			return 0.03
		}
		return 0
	}, 0, acts, outs)...)
	var ppo []map[string]float64
	for u := 1; u <= 2; u++ {
		ppo = append(ppo, map[string]float64{"step": float64(u), "charts/reward_mean": 0, "charts/format_error_rate": 1})
	}
	return ReportInput{Summary: Summarize(rows), PerTask: 8, MaxSteps: 8, Curves: Curves{PPO: Curve{Records: ParseMetrics(metricsJSONL(ppo))}}}
}

// TestPlotGallery renders every plot of three reports: one shaped like
// `make demo`'s and two of edge cases. Set MLERL_PLOT_DIR to keep the
// PNGs and look at them.
func TestPlotGallery(t *testing.T) {
	root := os.Getenv("MLERL_PLOT_DIR")
	if root == "" {
		root = t.TempDir()
	}
	for name, in := range map[string]ReportInput{"demo": demoReport(), "edge": edgeReport(), "small": smallReport()} {
		dir := filepath.Join(root, name)
		if _, err := WriteReport(t.Context(), nil, dir, "", in); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, p := range []string{DeltaPlot, PPOPlot, TimePlot, ActionsPlot, OutcomesPlot} {
			b, err := os.ReadFile(filepath.Join(dir, p))
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			if _, _, err := image.Decode(bytes.NewReader(b)); err != nil {
				t.Errorf("%s/%s: %v", name, p, err)
			}
		}
	}
}

// TestFitAxis: axes end on labelled ticks, 4 to 8 of them, with the least
// room wasted; counts get whole steps; a flat series gets a range
// around its value.
func TestFitAxis(t *testing.T) {
	tests := []struct {
		name             string
		lo, hi           float64
		integer          bool
		wantMin, wantMax float64
		wantTicks        []float64
	}{
		{"a lone +3% bar with headroom", 0, 3.15, false, 0, 3.5, []float64{0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5}},
		{"bars both sides of 0", -6.1, 27.3, false, -10, 30, []float64{-10, 0, 10, 20, 30}},
		{"4 updates", 1, 4, true, 1, 4, []float64{1, 2, 3, 4}},
		{"2 updates", 1, 2, true, 1, 2, []float64{1, 2}},
		{"300 updates", 1, 300, true, 0, 300, []float64{0, 100, 200, 300}}, // as little room as steps of 50, fewer labels
		{"a flat rate of 1", 1, 1, false, 0.9, 1.1, []float64{0.9, 0.95, 1, 1.05, 1.1}},
		{"all zero", 0, 0, false, -0.001, 0.001, []float64{-0.001, -0.0005, 0, 0.0005, 0.001}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a plot.Axis
			fitAxis(&a, tt.lo, tt.hi, tt.integer, nil)
			var ticks []float64
			for _, tk := range a.Tick.Marker.Ticks(a.Min, a.Max) {
				if tk.Label == "" {
					t.Errorf("unlabelled tick at %g", tk.Value)
				}
				ticks = append(ticks, tk.Value)
			}
			near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
			ok := near(a.Min, tt.wantMin) && near(a.Max, tt.wantMax) && len(ticks) == len(tt.wantTicks)
			for i := range ticks {
				ok = ok && near(ticks[i], tt.wantTicks[i])
			}
			if !ok {
				t.Errorf("got [%g, %g] ticks %v, want [%g, %g] ticks %v", a.Min, a.Max, ticks, tt.wantMin, tt.wantMax, tt.wantTicks)
			}
		})
	}
}
