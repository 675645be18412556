package experiment

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// Student-t quantiles t(0.975; df) for the hand computations.
const (
	t975df1 = 12.706204736174707
	t975df2 = 4.302652729749464
)

func TestWindowsAndGain(t *testing.T) {
	cases := []struct{ n, first, last int }{{2, 1, 1}, {3, 1, 1}, {4, 1, 1}, {5, 1, 2}, {6, 1, 2}, {10, 1, 3}, {11, 2, 3}, {60, 6, 15}, {200, 20, 50}}
	for _, c := range cases {
		f, l, ok := windows(c.n)
		if !ok || f != c.first || l != c.last {
			t.Errorf("windows(%d): got %d, %d, %v want %d, %d", c.n, f, l, ok, c.first, c.last)
		}
	}
	for _, n := range []int{0, 1} {
		if _, _, ok := windows(n); ok {
			t.Errorf("windows(%d): a first tenth and a last quarter of %d updates overlap", n, n)
		}
	}
	// 10 updates: the first (0.0) against the last 3 (0.7, 0.8, 0.9).
	if g, ok := gain([]float64{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9}); !ok || !near(g, 0.8) {
		t.Errorf("gain: got %v, %v want 0.8", g, ok)
	}
}

func TestPearsonFisher(t *testing.T) {
	// x 1..5, y 2 1 4 3 5: r = 8 / sqrt(10 * 10) = 0.8; Fisher's z interval
	// tanh(atanh(0.8) ± 1.959964 / sqrt(2)).
	var m schemas.Moments
	for i, y := range []float64{2, 1, 4, 3, 5} {
		addMoments(&m, float64(i+1), y)
	}
	c := pearson(m)
	if !near(c.r, 0.8) || math.Abs(c.lo-(-0.279640042)) > 1e-6 || math.Abs(c.hi-0.986196193) > 1e-6 || c.n != 5 {
		t.Errorf("pearson: got %+v, want r 0.8 in [-0.27964, 0.98620]", c)
	}
	if got, want := c.String(), "+0.800 [-0.280, +0.986] (n = 5)"; got != want {
		t.Errorf("String: got %q want %q", got, want)
	}
	three := schemas.Moments{N: 3, SumX: 6, SumY: 6, SumXX: 14, SumYY: 14, SumXY: 14}
	if c := pearson(three); !near(c.r, 1) || !math.IsNaN(c.lo) {
		t.Errorf("n = 3: got %+v, want r 1 without an interval", c)
	}
	flat := schemas.Moments{N: 4, SumX: 8, SumY: 3, SumXX: 16, SumYY: 5, SumXY: 6} // x is 2 every time
	if c := pearson(flat); !math.IsNaN(c.r) || !strings.Contains(c.String(), "no variation") {
		t.Errorf("constant x: got %+v %q, want NaN, no variation", c, c)
	}
}

// unitMoments are the moments of n standardised pairs with correlation r.
func unitMoments(subset string, n int64, r float64) schemas.Moments {
	return schemas.Moments{Subset: subset, N: n, SumXX: float64(n), SumYY: float64(n), SumXY: r * float64(n)}
}

// sums builds pooled samples: samples, script runs, failed runs, format
// errors and refusals, and the correlation over all samples.
func sums(samples, runs, failed, formatErrors, refused int64, r float64) sampleSums {
	s := newSampleSums()
	s.add(schemas.ExperimentRow{
		DurationReward: []schemas.Moments{unitMoments("executed", runs, r), unitMoments("all", samples, r)},
		SampleClasses:  []schemas.Count{{Name: "format_error", N: formatErrors}, {Name: "invalid_edit", N: refused}, {Name: "success", N: samples - formatErrors - refused}},
		FailedMarkers:  []schemas.Count{{Name: "data", N: failed}},
	})
	return s
}

// TestPhenomenonThresholds: each phenomenon just below and at or above
// its threshold.
func TestPhenomenonThresholds(t *testing.T) {
	cases := []struct {
		name, phenomenon string
		s                sampleSums
		testable         bool
		figure           string
	}{
		{"failed runs 4%", PhenomenonInstrumentation, sums(200, 100, 4, 0, 0, 0), false, "4 of 100 script runs failed (4.0%); last marker reached: data 4"},
		{"failed runs 5%", PhenomenonInstrumentation, sums(200, 100, 5, 0, 0, 0), true, "5 of 100 script runs failed (5.0%)"},
		{"no script ran", PhenomenonInstrumentation, sums(200, 0, 0, 0, 0, 0), false, "no script ran in 200 samples"},
		{"refused 1.5%", PhenomenonFormat, sums(200, 100, 0, 2, 1, 0), false, "3 of 200 samples format errors or refused (1.5%)"},
		{"refused 2%", PhenomenonFormat, sums(200, 100, 0, 2, 2, 0), true, "4 of 200 samples format errors or refused (2.0%)"},
		{"r 0.05 holding 0", PhenomenonDuration, sums(100, 50, 0, 0, 0, 0.05), false, "r(duration, reward) +0.050 [-0.148, +0.244] (n = 100) over all samples"},
		{"r 0.05 on 100,000 samples", PhenomenonDuration, sums(100000, 50, 0, 0, 0, 0.05), true, "+0.050 [+0.044, +0.056] (n = 100000)"},
		{"r 0.3 on 30 samples", PhenomenonDuration, sums(30, 30, 0, 0, 0, 0.3), true, "+0.300 [-0.068, +0.596] (n = 30)"},
		{"no samples", PhenomenonDuration, newSampleSums(), false, "no samples recorded"},
	}
	for _, c := range cases {
		got := check(c.phenomenon, c.s)
		if got.testable != c.testable || !strings.Contains(got.figure, c.figure) {
			t.Errorf("%s: testable %v, figure %q; want %v, %q", c.name, got.testable, got.figure, c.testable, c.figure)
		}
		if c.name == "no samples" && got.known {
			t.Errorf("no samples: a phenomenon without a measurement cannot make a claim not testable")
		}
	}
}

// ppoRows gives every row of the PPO arms of gridRows their cells'
// training record: 4 updates of rewards from start, and samples with
// failed of 50 script runs failing.
func ppoRows(rows []schemas.ExperimentRow, failed int64, start map[string]float64) []schemas.ExperimentRow {
	for i := range rows {
		r := &rows[i]
		s, ok := start[r.Arm]
		if !ok {
			continue
		}
		s += 0.1 * float64(r.Seed)
		r.RewardCurve = []float64{s, s + 0.1, s + 0.2, s + 0.5}
		r.DurationReward = []schemas.Moments{unitMoments("executed", 50, 0), unitMoments("all", 60, 0)}
		r.FailedMarkers = []schemas.Count{{Name: "model", N: failed}}
		r.SampleClasses = []schemas.Count{{Name: "success", N: 60 - failed}, {Name: "script_error", N: failed}}
	}
	return rows
}

// TestAblationNotTestable: the same paired difference is "reproduces"
// when the phenomenon is there and "not testable here" when it is not.
func TestAblationNotTestable(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Arms = []string{"sft", "sft+ppo", "sparse"}
	arms, err := cfg.arms()
	if err != nil {
		t.Fatal(err)
	}
	base := map[string]float64{"sft": 0.1, "sft+ppo": 0.15, "sparse": 0.1}
	start := map[string]float64{"sft+ppo": 0, "sparse": 0}
	for _, c := range []struct {
		failed int64 // of 50 script runs per cell, 4 cells
		want   string
	}{{1, notTestable}, {3, reproduces}} {
		s := summarise(cfg, arms, ppoRows(gridRows(base), c.failed, start))
		var got *claim
		for _, cl := range s.claims() {
			if cl.claim == "sft+ppo beats its ablation sparse on held-out tasks" {
				got = &cl
			}
		}
		if got == nil {
			t.Fatalf("no claim for sparse in %+v", s.claims())
		}
		share := float64(4*c.failed) / 200
		if got.verdict != c.want || !strings.Contains(got.phenomenon, "of 200 script runs failed") || !strings.Contains(got.evidence, "+5.00% ± 0.00 over 6 (seed, task) units") {
			t.Errorf("failed share %.0f%%: got %+v, want %s", 100*share, got, c.want)
		}
	}
}

func TestPPOClaims(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Preset, cfg.Seeds = PresetRL, []int{1, 2, 3}
	arms, _ := cfg.arms()
	// Three seeds, one held-in task h and one held-out task o: SFT+PPO
	// beats SFT on h by 0.02, 0.03, 0.04 (mean 0.03, sd 0.01) and gains
	// 0.5, 0.6, 0.7 in training reward (mean 0.6, sd 0.1).
	var rows []schemas.ExperimentRow
	for seed := int64(1); seed <= 3; seed++ {
		d := 0.01 * float64(seed+1)
		g := 0.4 + 0.1*float64(seed)
		for _, r := range []schemas.ExperimentRow{
			{Arm: "sft", TaskID: "h", Split: schemas.HeldIn, DeltaR: 0.1},
			{Arm: "sft", TaskID: "o", Split: schemas.HeldOut, DeltaR: 0.1},
			{Arm: "sft+ppo", TaskID: "h", Split: schemas.HeldIn, DeltaR: 0.1 + d, RewardCurve: []float64{0.1, 0, 0, 0.1 + g}},
			{Arm: "sft+ppo", TaskID: "o", Split: schemas.HeldOut, DeltaR: 0.1, RewardCurve: []float64{0.1, 0, 0, 0.1 + g}},
		} {
			r.Seed = seed
			rows = append(rows, r)
		}
	}
	s := summarise(cfg, arms, rows)
	got := map[string]claim{}
	for _, c := range s.claims() {
		got[c.claim] = c
	}
	gainHalf := t975df2 * 0.1 / math.Sqrt(3)      // 0.248
	inHalf := 100 * t975df2 * 0.01 / math.Sqrt(3) // 2.48 points
	want := map[string][2]string{
		"SFT + step-wise PPO beats SFT on held-in tasks (the tasks RL trains on)":                                                {reproduces, "paired difference +3.00% ± " + trim2(inHalf) + " over 3 (seed, task) units"},
		"SFT + step-wise PPO beats SFT on held-out tasks":                                                                        {inconclusive, "paired difference +0.00% ± 0.00 over 3 (seed, task) units"},
		"RL learns its training distribution (sft+ppo): held-in mean reward, last quarter of PPO updates minus first tenth, > 0": {reproduces, "gain +0.600 ± " + trim3(gainHalf) + " over 3 seeds"},
	}
	for k, w := range want {
		c, ok := got[k]
		if !ok || c.verdict != w[0] || c.evidence != w[1] {
			t.Errorf("%s:\n got %+v\nwant %s, %q", k, c, w[0], w[1])
		}
	}
	// Without held-in rows there is no held-in claim.
	var out []schemas.ExperimentRow
	for _, r := range rows {
		if r.Split == schemas.HeldOut {
			out = append(out, r)
		}
	}
	for _, c := range summarise(cfg, arms, out).claims() {
		if strings.Contains(c.claim, "held-in tasks") {
			t.Errorf("held-in claim without held-in rows: %+v", c)
		}
	}
}

func trim2(x float64) string { return fmt.Sprintf("%.2f", x) }
func trim3(x float64) string { return fmt.Sprintf("%.3f", x) }

func TestEqualWall(t *testing.T) {
	pt := func(u int32, wall, out float64) schemas.CurvePoint {
		return schemas.CurvePoint{Update: u, WallS: wall, HeldInDeltaR: math.NaN(), HeldOutDeltaR: out}
	}
	step := map[int64]*seedRun{
		1: {curve: []schemas.CurvePoint{pt(0, 0, 0), pt(2, 10, 0.1), pt(4, 20, 0.2), pt(6, 30, 0.3)}},
		2: {curve: []schemas.CurvePoint{pt(0, 0, 0), pt(2, 10, 0.1), pt(4, 20, 0.3)}},
		3: {curve: []schemas.CurvePoint{pt(0, 0, 0)}}, // the other arm has no seed 3
	}
	episode := map[int64]*seedRun{
		1: {curve: []schemas.CurvePoint{pt(0, 0, 0), pt(2, 15, 0.05), pt(4, 25, 0.15)}},
		2: {curve: []schemas.CurvePoint{pt(0, 0, 0), pt(1, 12, 0.1), pt(2, 24, 0.15), pt(3, 36, 0.2)}},
	}
	// Seed 1 at t = 25 s: 0.2 (the point at 20 s) - 0.15 = 0.05; seed 2
	// at t = 20 s: 0.3 - 0.1 (the point at 12 s) = 0.2.
	e, ts := equalWall(step, episode, schemas.HeldOut)
	sd := math.Sqrt(((0.05-0.125)*(0.05-0.125) + (0.2-0.125)*(0.2-0.125)) / 1)
	if e.n != 2 || !near(e.mean, 0.125) || !near(e.half, t975df1*sd/math.Sqrt(2)) || len(ts) != 2 || ts[0] != 25 || ts[1] != 20 {
		t.Errorf("equalWall: got %+v at %v, want 0.125 ± %.4f over 2 seeds at 25 s and 20 s", e, ts, t975df1*sd/math.Sqrt(2))
	}
	if e, _ := equalWall(step, episode, schemas.HeldIn); e.n != 0 {
		t.Errorf("held-in was not evaluated: got %+v", e)
	}
}

// TestWatchFlag: a corner-case share that rises by 9 points is flagged,
// one that rises by 4 is not.
func TestWatchFlag(t *testing.T) {
	shares := func(first, last float64) []schemas.UpdateShares {
		var us []schemas.UpdateShares
		for u := range 10 { // first tenth: update 1; last quarter: 8-10
			c := first
			if u >= 7 {
				c = last
			} else if u > 0 {
				c = 0.5 // never in a window
			}
			us = append(us, schemas.UpdateShares{Update: int32(u + 1), Corner: c})
		}
		return us
	}
	runs := map[int64]*seedRun{1: {updates: shares(0, 0.1)}, 2: {updates: shares(0.02, 0.1)}}
	rise, first, last := shareRise(runs, watched[0].get)
	if rise.n != 2 || !near(rise.mean, 0.09) || !near(first.mean, 0.01) || !near(last.mean, 0.1) {
		t.Errorf("shareRise: got rise %+v first %+v last %+v, want 0.09, 0.01, 0.1", rise, first, last)
	}

	cfg := DefaultConfig()
	cfg.Arms = []string{"sft+ppo", "no-duration"}
	arms, _ := cfg.arms()
	s := summarise(cfg, arms, nil)
	s.arm("sft+ppo").runs = runs
	s.arm("no-duration").runs = map[int64]*seedRun{1: {updates: shares(0, 0.04)}, 2: {updates: shares(0.01, 0.05)}}
	var b strings.Builder
	writeWatch(&b, s, func(*strings.Builder, string, string) {})
	md := b.String()
	if !strings.Contains(md, "**Flagged**: sft+ppo: timeout + OOM (corner cases).") || strings.Contains(md, "no-duration: timeout") ||
		strings.Count(md, " **rises** |") != 1 || !strings.Contains(md, "| sft+ppo | 2 | 1.0% -> 10.0% (+9.00% ± ") {
		t.Errorf("watch:\n%s", md)
	}
}

// experimentRowV10 is an experiments row as mlerl wrote it before 1.1.
type experimentRowV10 struct {
	Grid         string    `parquet:"grid"`
	Arm          string    `parquet:"arm"`
	Seed         int64     `parquet:"seed"`
	Method       string    `parquet:"method"`
	TaskID       string    `parquet:"task_id"`
	Split        string    `parquet:"split"`
	Metric       string    `parquet:"metric"`
	Direction    string    `parquet:"direction"`
	Trajectory   int32     `parquet:"trajectory"`
	MInit        float64   `parquet:"m_init"`
	FinalScore   float64   `parquet:"final_score"`
	BestScore    *float64  `parquet:"best_score,optional"`
	DeltaR       float64   `parquet:"delta_r"`
	Steps        int32     `parquet:"steps"`
	ValidActions int32     `parquet:"valid_actions"`
	TrainWallS   float64   `parquet:"train_wall_s"`
	TrainCPUS    float64   `parquet:"train_cpu_s"`
	EvalWallS    float64   `parquet:"eval_wall_s"`
	EvalCPUS     float64   `parquet:"eval_cpu_s"`
	RewardCurve  []float64 `parquet:"reward_curve,list"`
	ValidCurve   []float64 `parquet:"valid_curve,list"`
}

// TestReadV10Rows: a 1.0 experiments dataset reads as the current version (the new
// columns empty) and is reported: no learning curves or phenomena, the
// training-reward gain from its reward curves.
func TestReadV10Rows(t *testing.T) {
	ctx := context.Background()
	st := store.NewLocal(t.TempDir())
	v10 := schemas.Experiments
	v10.Version, v10.Row = "1.0", experimentRowV10{}
	p, err := datasets.Begin(ctx, st, "experiments", v10, "old")
	if err != nil {
		t.Fatal(err)
	}
	var old []experimentRowV10
	for seed := int64(1); seed <= 2; seed++ {
		old = append(old, experimentRowV10{Grid: "g", Arm: "sft+ppo", Seed: seed, Method: "sft+ppo", TaskID: "o", Split: schemas.HeldOut, DeltaR: 0.1,
			Steps: 4, ValidActions: 4, TrainWallS: 10, RewardCurve: []float64{0, 0.1 * float64(seed)}, ValidCurve: []float64{1, 1}})
	}
	if err := datasets.WritePart(ctx, p, "cell.parquet", old); err != nil {
		t.Fatal(err)
	}
	m, err := p.Commit(ctx, datasets.CommitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m.SchemaVersion != "1.0" {
		t.Fatalf("the fixture is not a 1.0 dataset: %+v", m)
	}
	rows, err := datasets.ReadAll[schemas.ExperimentRow](ctx, st, m, schemas.Experiments)
	if err != nil {
		t.Fatalf("1.0 rows read as %s: %v", schemas.Experiments.Version, err)
	}
	if len(rows) != 2 || rows[1].DeltaR != 0.1 || len(rows[1].RewardCurve) != 2 || len(rows[1].Curve)+len(rows[1].Updates)+len(rows[1].DurationReward)+len(rows[1].SampleClasses) != 0 {
		t.Fatalf("rows %+v", rows)
	}
	cfg := DefaultConfig()
	cfg.Arms = []string{"sft+ppo"}
	arms, _ := cfg.arms()
	s := summarise(cfg, arms, rows)
	if g := interval(rewardGains(s.arm("sft+ppo").runs)); g.n != 2 || !near(g.mean, 0.15) {
		t.Errorf("gain from 1.0 reward curves: %+v, want 0.15 over 2 seeds", g)
	}
	dir := t.TempDir()
	if err := writeReport(dir, cfg, m.URI, s); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	for _, want := range []string{"| sft+ppo | 0 | n/a |", "No PPO arm recorded a learning curve", "RL learns its training distribution (sft+ppo)"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report of 1.0 rows lacks %q:\n%s", want, md)
		}
	}
	for _, png := range []string{"learning_curves_updates.png", "outcome_shares.png"} {
		if _, err := os.Stat(filepath.Join(dir, png)); err == nil {
			t.Errorf("%s drawn from rows that hold no curve", png)
		}
	}
}

func TestTaskCount(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Preset = PresetTaskCount
	arms, _ := cfg.arms()
	// Per seed, the mean over the held-out tasks a (x) and b (x + 0.02).
	var rows []schemas.ExperimentRow
	for ai, a := range []string{"sft", "ppo-5tasks", "ppo-10tasks", "ppo-20tasks", "ppo-40tasks"} {
		for seed := int64(1); seed <= 2; seed++ {
			x := 0.01*float64(ai) + 0.002*float64(seed)
			rows = append(rows,
				schemas.ExperimentRow{Arm: a, Seed: seed, TaskID: "a", Split: schemas.HeldOut, DeltaR: x},
				schemas.ExperimentRow{Arm: a, Seed: seed, TaskID: "b", Split: schemas.HeldOut, DeltaR: x + 0.02})
		}
	}
	s := summarise(cfg, arms, rows)
	pts := s.taskCount()
	if len(pts) != 5 {
		t.Fatalf("task-count points %+v", pts)
	}
	for i, want := range []int{0, 5, 10, 20, 40} {
		// Seed means 0.01 i + 0.012 and + 0.014: mean 0.01 i + 0.013, sd 0.0014142.
		if p := pts[i]; p.tasks != want || p.e.n != 2 || !near(p.e.mean, 0.01*float64(i)+0.013) || !near(p.e.half, t975df1*0.001) {
			t.Errorf("point %d: %+v, want %d tasks, 2 seeds, mean %.3f ± %.4f", i, p, want, 0.01*float64(i)+0.013, t975df1*0.001)
		}
	}
	dir := t.TempDir()
	if err := writeReport(dir, cfg, "mem://x", s); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	if !strings.Contains(string(md), "| 10 | ppo-10tasks | +3.30% ± 1.27 over 2 seeds |") || !strings.Contains(string(md), "task_count.png") {
		t.Errorf("task-count section:\n%s", md)
	}
}

// TestHeadroomClaims: rows that carry the share of the headroom closed
// give paired claims on it, which one task's huge delta_r cannot decide;
// rows without it (grids before experiments 1.4) give none, and the
// report's table says n/a.
func TestHeadroomClaims(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Preset, cfg.Seeds = PresetRL, []int{1, 2, 3}
	arms, _ := cfg.arms()
	h := func(v float64) *float64 { return &v }
	// Held-out tasks a (tiny m_init: PPO gains +600% delta_r on one seed)
	// and b; in the share of the headroom, PPO loses 0.1 on every unit.
	var rows []schemas.ExperimentRow
	for seed := int64(1); seed <= 3; seed++ {
		big := 0.0
		if seed == 1 {
			big = 6
		}
		for _, r := range []schemas.ExperimentRow{
			{Arm: "sft", TaskID: "a", Split: schemas.HeldOut, DeltaR: 0.1, Headroom: h(0.5)},
			{Arm: "sft", TaskID: "b", Split: schemas.HeldOut, DeltaR: 0.1, Headroom: h(0.3)},
			{Arm: "sft+ppo", TaskID: "a", Split: schemas.HeldOut, DeltaR: 0.1 + big, Headroom: h(0.4)},
			{Arm: "sft+ppo", TaskID: "b", Split: schemas.HeldOut, DeltaR: 0.1, Headroom: h(0.2)},
		} {
			r.Seed = seed
			rows = append(rows, r)
		}
	}
	s := summarise(cfg, arms, rows)
	got := map[string]claim{}
	for _, c := range s.claims() {
		got[c.claim] = c
	}
	room := got["SFT + step-wise PPO beats SFT on held-out tasks, in the share of the headroom closed (bounded per task)"]
	if room.verdict != contradicted || room.evidence != "paired difference -10.00% ± 0.00 over 6 (seed, task) units" {
		t.Errorf("headroom claim %+v, want contradicted, -10.00%% ± 0.00 over 6 units", room)
	}
	if d := got["SFT + step-wise PPO beats SFT on held-out tasks"]; d.verdict != inconclusive {
		t.Errorf("delta_r claim %+v: one unit's +600%% should leave it inconclusive", d)
	}
	for i := range rows {
		rows[i].Headroom = nil
	}
	for _, c := range summarise(cfg, arms, rows).claims() {
		if strings.Contains(c.claim, "headroom") {
			t.Errorf("a headroom claim without headroom rows: %+v", c)
		}
	}
	dir := t.TempDir()
	if err := writeReport(dir, cfg, "mem://x", summarise(cfg, arms, rows)); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	if !strings.Contains(string(md), "held-out headroom closed") || !strings.Contains(string(md), "| n/a |") {
		t.Errorf("report table without the headroom columns:\n%.600s", md)
	}
}

// TestPairedComparisonsWithTheExpert: the report pairs SFT + PPO and SFT
// with the scripted expert per split, over the (seed, task) units all
// have, in the share of the headroom closed and in delta_r, with the
// units better / worse / equal; a unit is the mean of its trajectories.
// The values are exact in binary, so the table's numbers are computed by
// hand.
func TestPairedComparisonsWithTheExpert(t *testing.T) {
	const t975df3 = 3.182446305284263
	cfg := DefaultConfig()
	cfg.Preset, cfg.Seeds = PresetRL, []int{1, 2}
	arms, _ := cfg.arms()
	// Held-out (seed, task) units in the order (1,a) (1,b) (2,a) (2,b).
	deltas := map[string][]float64{
		"expert":  {0.25, 0, 0.25, 0.5}, // (1,a): the mean of 0 and 0.5
		"sft":     {0.25, 0.25, 0.25, 0.25},
		"sft+ppo": {0.5, 0, 0.75, 0.25},
	}
	var rows []schemas.ExperimentRow
	add := func(arm string, seed int64, task, split string, delta, room float64, traj int32) {
		rows = append(rows, schemas.ExperimentRow{Arm: arm, Seed: seed, TaskID: task, Split: split, Trajectory: traj, DeltaR: delta, Headroom: &room})
	}
	for arm, ds := range deltas {
		for i, d := range ds {
			seed, task := int64(1+i/2), []string{"a", "b"}[i%2]
			room := d // the policies close their delta_r of the headroom, the expert none
			if arm == "expert" {
				room = 0
			}
			if arm == "expert" && i == 0 {
				add(arm, seed, task, schemas.HeldOut, 0, room, 0)
				add(arm, seed, task, schemas.HeldOut, 0.5, room, 1)
				continue
			}
			add(arm, seed, task, schemas.HeldOut, d, room, 0)
		}
		for seed := int64(1); seed <= 2; seed++ {
			add(arm, seed, "h", schemas.HeldIn, map[string]float64{"expert": 0, "sft": 0.25, "sft+ppo": 0.5}[arm], 0, 0)
		}
	}
	s := summarise(cfg, arms, rows)
	var b strings.Builder
	writePaired(&b, s)
	md := b.String()
	// sft+ppo - expert, held-out: headroom 0.5, 0, 0.75, 0.25 (mean 0.375),
	// delta_r 0.25, 0, 0.5, -0.25 (mean 0.125), both with squared
	// deviations summing to 0.3125; sft - expert: headroom 0.25 each,
	// delta_r 0, 0.25, 0, -0.25 (0.125).
	half := func(ss float64) string { return fmt.Sprintf("%.2f", 100*t975df3*math.Sqrt(ss/3)/2) }
	for _, want := range []string{
		"| sft+ppo - expert | held-out | +37.50% ± " + half(0.3125) + " over 4 units | 3 / 0 / 1 | +12.50% ± " + half(0.3125) + " over 4 units | 2 / 1 / 1 |",
		"| sft+ppo - expert | held-in | +0.00% ± 0.00 over 2 units | 0 / 0 / 2 | +50.00% ± 0.00 over 2 units | 2 / 0 / 0 |",
		"| sft - expert | held-out | +25.00% ± 0.00 over 4 units | 4 / 0 / 0 | +0.00% ± " + half(0.125) + " over 4 units | 1 / 1 / 2 |",
		"| sft+ppo - sft | held-out |",
		"The scripted expert is the teacher",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the paired table lacks %q:\n%s", want, md)
		}
	}
	got := map[string]claim{}
	for _, c := range s.claims() {
		got[c.claim] = c
	}
	c, ok := got["SFT + step-wise PPO beats the scripted expert whose trajectories it learned from on held-out tasks, in the share of the headroom closed"]
	if !ok || c.verdict != inconclusive || c.evidence != "paired difference +37.50% ± "+half(0.3125)+" over 4 (seed, task) units" {
		t.Errorf("the expert claim: got %+v", c)
	}
	// A grid without the expert arm has neither the comparisons nor the claims.
	cfg.Arms = []string{"initial", "sft", "sft+ppo"}
	arms, _ = cfg.arms()
	s = summarise(cfg, arms, rows)
	b.Reset()
	writePaired(&b, s)
	if strings.Contains(b.String(), "expert") || !strings.Contains(b.String(), "| sft+ppo - sft | held-out |") {
		t.Errorf("no expert arm, yet:\n%s", b.String())
	}
	for _, c := range s.claims() {
		if strings.Contains(c.claim, "expert") {
			t.Errorf("no expert arm, yet the claim %q", c.claim)
		}
	}
}
