package experiment

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/schemas"
)

// Statistics of the grid. The unit of every interval is a (seed, task)
// pair: its trajectories are averaged first (avg@k; best@k takes their
// best), so a task's several trajectories do not count as independent
// samples, and the interval covers both seeds (training randomness) and
// tasks.

// estimate is a mean with its 95% interval half-width over n units.
type estimate struct {
	mean, half float64
	n          int
}

func (e estimate) String() string {
	if e.n == 0 {
		return "n/a"
	}
	if e.n < 2 {
		return fmt.Sprintf("%+.2f%% (n=1)", 100*e.mean)
	}
	return fmt.Sprintf("%+.2f%% ± %.2f", 100*e.mean, 100*e.half)
}

// num formats a mean and its interval as plain numbers (rewards, shares).
func (e estimate) num() string {
	switch {
	case e.n == 0:
		return "n/a"
	case e.n < 2:
		return fmt.Sprintf("%+.3f (n=1)", e.mean)
	}
	return fmt.Sprintf("%+.3f ± %.3f", e.mean, e.half)
}

// interval returns the mean of xs and the half-width of its two-sided 95%
// Student-t interval (0 with fewer than two values).
func interval(xs []float64) estimate {
	n := len(xs)
	if n == 0 {
		return estimate{}
	}
	m := 0.0
	for _, x := range xs {
		m += x
	}
	m /= float64(n)
	if n < 2 {
		return estimate{mean: m, n: n}
	}
	ss := 0.0
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	se := math.Sqrt(ss/float64(n-1)) / math.Sqrt(float64(n))
	t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(n - 1)}.Quantile(0.975)
	return estimate{mean: m, half: t * se, n: n}
}

// unit keys a (seed, task).
type unit struct {
	seed int64
	task string
}

// armStats is one arm's line of the report.
type armStats struct {
	arm                                    Arm
	heldOut, heldIn, bestOut, valid        estimate
	outUnits, inUnits                      map[unit]float64 // avg@k delta_r per unit
	roomOut, roomIn                        estimate         // the share of the headroom closed (rows that have it)
	outRoom, inRoom                        map[unit]float64 // avg@k share of the headroom closed per unit
	trainWall, trainCPU, evalWall, evalCPU float64          // means over seeds
	rewardCurve, validCurve                [][]float64      // per seed
	trajectories, steps                    int
	taskValid                              map[string][2]int  // held-out task: valid steps, steps
	runs                                   map[int64]*seedRun // PPO arms: each seed's training record
	samples                                sampleSums         // PPO arms: their samples, pooled over seeds
	phases                                 map[string]float64 // PPO arms: wall seconds per phase of training, means over the seeds that recorded it
	evalPhases                             map[string]float64 // trajectory-seconds per phase of evaluation (generate, wait, execute), means over the seeds that recorded it
}

type summary struct {
	cfg    Config
	preset Preset
	arms   []*armStats
	// timeQuality is the suite's time-quality relation per task, from the
	// data root's steps (nil: none there).
	timeQuality []taskTimeQuality
	// scoredOn says which hidden answers the rows are scored on, fits each
	// arm's public minus private difference (feedback.go).
	scoredOn string
	fits     []armFit
}

func summarise(cfg Config, arms []Arm, rows []schemas.ExperimentRow) summary {
	byArm := map[string][]schemas.ExperimentRow{}
	for _, r := range rows {
		byArm[r.Arm] = append(byArm[r.Arm], r)
	}
	var s summary
	s.cfg = cfg
	s.preset, _ = presetNamed(cfg.Preset)
	s.scoredOn, s.fits = scoredOnOf(rows), feedbackFits(arms, rows)
	for _, a := range arms {
		st := &armStats{arm: a, outUnits: map[unit]float64{}, inUnits: map[unit]float64{}, outRoom: map[unit]float64{}, inRoom: map[unit]float64{}, taskValid: map[string][2]int{},
			runs: map[int64]*seedRun{}, samples: newSampleSums()}
		type acc struct {
			sum, best float64
			n         int
		}
		units := map[string]map[unit]*acc{schemas.HeldOut: {}, schemas.HeldIn: {}}
		rooms := map[string]map[unit]*acc{schemas.HeldOut: {}, schemas.HeldIn: {}}
		validByUnit := map[unit][2]int{}
		costs := map[int64]schemas.ExperimentRow{}
		for _, r := range byArm[a.Name] {
			u := unit{r.Seed, r.TaskID}
			m := units[r.Split]
			if m == nil {
				continue
			}
			if m[u] == nil {
				m[u] = &acc{best: math.Inf(-1)}
			}
			m[u].sum += r.DeltaR
			m[u].n++
			m[u].best = math.Max(m[u].best, r.DeltaR)
			if r.Headroom != nil {
				if rooms[r.Split][u] == nil {
					rooms[r.Split][u] = &acc{}
				}
				rooms[r.Split][u].sum += *r.Headroom
				rooms[r.Split][u].n++
			}
			v := validByUnit[u]
			validByUnit[u] = [2]int{v[0] + int(r.ValidActions), v[1] + int(r.Steps)}
			if r.Split == schemas.HeldOut {
				tv := st.taskValid[r.TaskID]
				st.taskValid[r.TaskID] = [2]int{tv[0] + int(r.ValidActions), tv[1] + int(r.Steps)}
			}
			costs[r.Seed] = r
			st.trajectories++
			st.steps += int(r.Steps)
		}
		var out, in, best, valid []float64
		for u, x := range units[schemas.HeldOut] {
			st.outUnits[u] = x.sum / float64(x.n)
			out = append(out, x.sum/float64(x.n))
			best = append(best, x.best)
		}
		for u, x := range units[schemas.HeldIn] {
			st.inUnits[u] = x.sum / float64(x.n)
			in = append(in, x.sum/float64(x.n))
		}
		for _, v := range validByUnit {
			if v[1] > 0 {
				valid = append(valid, float64(v[0])/float64(v[1]))
			}
		}
		st.heldOut, st.heldIn, st.bestOut, st.valid = interval(out), interval(in), interval(best), interval(valid)
		var roomOut, roomIn []float64
		for u, x := range rooms[schemas.HeldOut] {
			st.outRoom[u] = x.sum / float64(x.n)
			roomOut = append(roomOut, st.outRoom[u])
		}
		for u, x := range rooms[schemas.HeldIn] {
			st.inRoom[u] = x.sum / float64(x.n)
			roomIn = append(roomIn, st.inRoom[u])
		}
		st.roomOut, st.roomIn = interval(roomOut), interval(roomIn)
		seeds := make([]int64, 0, len(costs))
		for seed := range costs {
			seeds = append(seeds, seed)
		}
		sort.Slice(seeds, func(i, j int) bool { return seeds[i] < seeds[j] })
		for _, seed := range seeds {
			r := costs[seed]
			n := float64(len(costs))
			st.trainWall += r.TrainWallS / n
			st.trainCPU += r.TrainCPUS / n
			st.evalWall += r.EvalWallS / n
			st.evalCPU += r.EvalCPUS / n
			for _, ph := range r.PPOTime {
				if st.phases == nil {
					st.phases = map[string]float64{}
				}
				st.phases[ph.Phase] += ph.WallS / n
			}
			for _, ph := range r.EvalTime {
				if st.evalPhases == nil {
					st.evalPhases = map[string]float64{}
				}
				st.evalPhases[ph.Phase] += ph.WallS / n
			}
			if len(r.RewardCurve) > 0 {
				st.rewardCurve = append(st.rewardCurve, r.RewardCurve)
				st.validCurve = append(st.validCurve, r.ValidCurve)
			}
			if a.Kind == KindPPO && len(r.RewardCurve)+len(r.Curve) > 0 {
				st.runs[seed] = &seedRun{reward: r.RewardCurve, curve: r.Curve, updates: r.Updates, durations: r.UpdateDurations}
			}
			st.samples.add(r)
		}
		s.arms = append(s.arms, st)
	}
	return s
}

func (s summary) arm(name string) *armStats {
	for _, a := range s.arms {
		if a.arm.Name == name {
			return a
		}
	}
	return nil
}

// table is the headline table printed on stdout.
func (s summary) table() string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ARM\tHELD-OUT DELTA_R (95% CI)\tBEST@K\tHELD-IN DELTA_R\tVALID ACTIONS\tTRAIN WALL/CPU\tEVAL WALL/CPU")
	for _, a := range s.arms {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.arm.Name, a.heldOut, a.bestOut, a.heldIn, rate(a.valid),
			cost(a.trainWall, a.trainCPU), cost(a.evalWall, a.evalCPU))
	}
	w.Flush()
	for _, c := range s.claims() {
		fmt.Fprintf(&b, "%s: %s\n", c.verdict, c.claim)
	}
	return b.String()
}

// roomCell is a share-of-headroom estimate for a table ("n/a" without rows
// that have it: grids written before experiments 1.4).
func roomCell(e estimate) string {
	if e.n == 0 {
		return "n/a"
	}
	return e.String()
}

func rate(e estimate) string {
	if e.n == 0 {
		return "n/a"
	}
	if e.n < 2 {
		return fmt.Sprintf("%.1f%%", 100*e.mean)
	}
	return fmt.Sprintf("%.1f%% ± %.1f", 100*e.mean, 100*e.half)
}

func cost(wall, cpu float64) string {
	if wall == 0 {
		return "-"
	}
	return fmt.Sprintf("%s / %s", time.Duration(wall*float64(time.Second)).Round(time.Second), time.Duration(cpu*float64(time.Second)).Round(time.Second))
}

// claim is one statement the grid tests, with its evidence and, for an
// ablation, the phenomenon its feature acts on.
type claim struct {
	claim, evidence, phenomenon, verdict, paper string
}

// Verdicts.
const (
	reproduces   = "reproduces"
	contradicted = "contradicted"
	inconclusive = "inconclusive"
	notTestable  = "not testable here"
)

func verdict(e estimate) string {
	switch {
	case e.n < 2:
		return inconclusive
	case e.mean-e.half > 0:
		return reproduces
	case e.mean+e.half < 0:
		return contradicted
	}
	return inconclusive
}

// paired returns the 95% interval of a - b over the units of split both
// arms have (the same seed and task: the same plans and states).
func paired(a, b *armStats, split string) estimate {
	au, bu := a.outUnits, b.outUnits
	if split == schemas.HeldIn {
		au, bu = a.inUnits, b.inUnits
	}
	return pairedUnits(au, bu)
}

// pairedRoom is paired on the share of the headroom closed.
func pairedRoom(a, b *armStats, split string) estimate {
	au, bu := a.outRoom, b.outRoom
	if split == schemas.HeldIn {
		au, bu = a.inRoom, b.inRoom
	}
	return pairedUnits(au, bu)
}

func pairedUnits(au, bu map[unit]float64) estimate { return interval(pairedDiffs(au, bu)) }

// pairedDiffs are a - b over the units both have.
func pairedDiffs(au, bu map[unit]float64) []float64 {
	var d []float64
	for u, x := range au {
		if y, ok := bu[u]; ok {
			d = append(d, x-y)
		}
	}
	return d
}

// tally counts the units a paired difference puts above, below and at 0.
func tally(d []float64) (better, worse, equal int) {
	for _, x := range d {
		switch {
		case x > 0:
			better++
		case x < 0:
			worse++
		default:
			equal++
		}
	}
	return better, worse, equal
}

// comparisons are the paired differences the report tabulates, where the
// grid has both arms: SFT + PPO against SFT (what RL adds), and SFT + PPO
// and SFT against the scripted expert whose trajectories SFT learned
// from (does the trained agent beat its teacher? issue 49).
var comparisons = [][2]string{{"sft+ppo", "sft"}, {"sft+ppo", "expert"}, {"sft", "expert"}}

// writePaired is the table of comparisons: per split, the paired
// difference in the share of the headroom closed and in delta_r over the
// (seed, task) units both arms have, each with its 95% interval and the
// units it puts better, worse and equal.
func writePaired(b *strings.Builder, s summary) {
	type row struct{ a, b *armStats }
	var rows []row
	teacher := ""
	for _, c := range comparisons {
		if a, o := s.arm(c[0]), s.arm(c[1]); a != nil && o != nil {
			rows = append(rows, row{a, o})
			if c[1] == "expert" {
				teacher = " The scripted expert is the teacher whose trajectories SFT learned from, evaluated with the same budget."
			}
		}
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("\n## Paired comparisons\n\nPer split, arm minus arm over the (seed, task) units both have (the same tasks, plans and seeds; each unit the mean over its trajectories): the share of the headroom closed and delta_r, each with its 95% Student-t interval over the units and the units it puts better / worse / equal." + teacher + "\n\n| comparison | split | headroom closed: paired difference | better / worse / equal | delta_r: paired difference | better / worse / equal |\n|---|---|---:|---:|---:|---:|\n")
	for _, r := range rows {
		for _, split := range []string{schemas.HeldOut, schemas.HeldIn} {
			au, bu, ar, br := r.a.outUnits, r.b.outUnits, r.a.outRoom, r.b.outRoom
			if split == schemas.HeldIn {
				au, bu, ar, br = r.a.inUnits, r.b.inUnits, r.a.inRoom, r.b.inRoom
			}
			dd, dr := pairedDiffs(au, bu), pairedDiffs(ar, br)
			if len(dd) == 0 {
				continue
			}
			cells := func(d []float64) (string, string) {
				if len(d) == 0 {
					return "n/a", "-"
				}
				bt, wr, eq := tally(d)
				return units(interval(d), "unit"), fmt.Sprintf("%d / %d / %d", bt, wr, eq)
			}
			room, roomTally := cells(dr)
			delta, deltaTally := cells(dd)
			fmt.Fprintf(b, "| %s - %s | %s | %s | %s | %s | %s |\n", r.a.arm.Name, r.b.arm.Name, split, room, roomTally, delta, deltaTally)
		}
	}
}

// units says how many units (what: "seed", "(seed, task) unit") an
// estimate is over.
func units(e estimate, what string) string {
	return fmt.Sprintf("%s over %s", e, plural(e.n, what))
}

// claims are the grid's tests: SFT beats the initial script; SFT+PPO
// beats SFT on held-out tasks and, when they were evaluated, on held-in
// ones; each PPO arm that ablates nothing gains training reward; and
// each full method beats its ablation, unless the grid measured too
// little of the phenomenon the ablated feature acts on.
func (s summary) claims() []claim {
	var out []claim
	if sft := s.arm("sft"); sft != nil && sft.heldOut.n > 0 {
		out = append(out, claim{claim: "SFT improves on the initial script on held-out tasks (delta_r > 0)",
			evidence: "SFT delta_r " + units(sft.heldOut, "(seed, task) unit"), verdict: verdict(sft.heldOut), paper: "ML-Agent: SFT then RL gains on held-out tasks"})
	}
	if ppo, sft := s.arm("sft+ppo"), s.arm("sft"); ppo != nil && sft != nil {
		e := paired(ppo, sft, schemas.HeldOut)
		out = append(out, claim{claim: "SFT + step-wise PPO beats SFT on held-out tasks",
			evidence: "paired difference " + units(e, "(seed, task) unit"), verdict: verdict(e), paper: "ML-Agent: RL beats SFT"})
		if e := paired(ppo, sft, schemas.HeldIn); e.n > 0 {
			out = append(out, claim{claim: "SFT + step-wise PPO beats SFT on held-in tasks (the tasks RL trains on)",
				evidence: "paired difference " + units(e, "(seed, task) unit"), verdict: verdict(e), paper: "issue 21: RL learns its training distribution"})
		}
		for _, split := range []string{schemas.HeldOut, schemas.HeldIn} {
			if e := pairedRoom(ppo, sft, split); e.n > 0 {
				out = append(out, claim{claim: fmt.Sprintf("SFT + step-wise PPO beats SFT on %s tasks, in the share of the headroom closed (bounded per task)", split),
					evidence: "paired difference " + units(e, "(seed, task) unit"), verdict: verdict(e), paper: "issue 30: a statistic no single task decides"})
			}
		}
	}
	if ppo, expert := s.arm("sft+ppo"), s.arm("expert"); ppo != nil && expert != nil {
		if e := pairedRoom(ppo, expert, schemas.HeldOut); e.n > 0 {
			out = append(out, claim{claim: "SFT + step-wise PPO beats the scripted expert whose trajectories it learned from on held-out tasks, in the share of the headroom closed",
				evidence: "paired difference " + units(e, "(seed, task) unit"), verdict: verdict(e), paper: "issue 49: does the trained agent beat its teacher"})
		}
		if e := paired(ppo, expert, schemas.HeldOut); e.n > 0 {
			out = append(out, claim{claim: "SFT + step-wise PPO beats the scripted expert whose trajectories it learned from on held-out tasks (delta_r)",
				evidence: "paired difference " + units(e, "(seed, task) unit"), verdict: verdict(e), paper: "issue 49: does the trained agent beat its teacher"})
		}
	}
	for _, a := range s.arms {
		if a.arm.Kind != KindPPO || a.arm.AblationOf != "" {
			continue
		}
		if g := interval(rewardGains(a.runs)); g.n > 0 {
			out = append(out, claim{claim: fmt.Sprintf("RL learns its training distribution (%s): held-in mean reward, last quarter of PPO updates minus first tenth, > 0", a.arm.Name),
				evidence: fmt.Sprintf("gain %s over %s", g.num(), plural(g.n, "seed")), verdict: verdict(g), paper: "issue 21: the gain's 95% interval above 0"})
		}
	}
	for _, a := range s.arms {
		if a.arm.AblationOf != "" {
			out = append(out, s.ablationClaim(a))
		}
	}
	return out
}

// ablationClaim compares an ablation with its full method: paired on
// held-out units, or on the learning curves at equal wall time; the
// phenomenon is measured over both arms' samples.
func (s summary) ablationClaim(a *armStats) claim {
	base := s.arm(a.arm.AblationOf)
	c := claim{claim: fmt.Sprintf("%s beats its ablation %s on held-out tasks", a.arm.AblationOf, a.arm.Name), paper: a.arm.Paper, phenomenon: "none"}
	var e estimate
	if a.arm.EqualWall {
		var ts []float64
		e, ts = equalWall(base.runs, a.runs, schemas.HeldOut)
		c.claim = fmt.Sprintf("%s beats %s at equal wall time on held-out tasks", a.arm.AblationOf, a.arm.Name)
		c.evidence = fmt.Sprintf("learning-curve delta_r difference at the smaller of each seed's two total update times (mean %s): %s", seconds(ts), units(e, "seed"))
		if in, _ := equalWall(base.runs, a.runs, schemas.HeldIn); in.n > 0 {
			c.evidence += "; held-in " + units(in, "seed")
		}
	} else {
		e = paired(base, a, schemas.HeldOut)
		c.evidence = "paired difference " + units(e, "(seed, task) unit")
	}
	c.verdict = verdict(e)
	if a.arm.Phenomenon != "" {
		pc := check(a.arm.Phenomenon, base.samples.merge(a.samples))
		c.phenomenon = fmt.Sprintf("%s (both arms' samples): %s", a.arm.Phenomenon, pc.figure)
		if pc.known && !pc.testable {
			c.verdict = notTestable
		}
	}
	return c
}

func seconds(ts []float64) string {
	if len(ts) == 0 {
		return "n/a"
	}
	return time.Duration(mean(ts) * float64(time.Second)).Round(time.Second).String()
}

// writeReport writes report.md and its plots into dir.
func writeReport(dir string, cfg Config, uri string, s summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	plots, err := writePlots(dir, s)
	if err != nil {
		return err
	}
	img := func(b *strings.Builder, name, caption string) {
		if plots[name] {
			fmt.Fprintf(b, "![%s](%s)\n\n", caption, name)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Experiment %s\n\n", cfg.Name)
	fmt.Fprintf(&b, "Rows: `%s`. Preset **%s**: %s. Budget %s, seeds %v, %d arms. Each arm is trained (SFT, then PPO from the seed's SFT checkpoint) and evaluated with each seed; unless a figure says otherwise, every interval is a two-sided 95%% Student-t interval over (seed, task) units, each unit the mean over its trajectories (avg@k). delta_r = beta (m_final - m_init) / m_init; the share of the headroom closed = (m_final - m_init) / (m_best - m_init), clipped to [-1, 1] per trajectory, bounded where delta_r is not. Costs are means over seeds of the wall time and the CPU time of the cell's processes (their scripts included); a PPO arm's training time excludes the SFT it starts from.\n\n", uri, s.preset.Name, s.preset.Doc, cfg.Budget, cfg.Seeds, len(s.arms))
	b.WriteString("| arm | kind | held-out delta_r | best@k | held-in delta_r | held-out headroom closed | held-in headroom closed | valid actions | train wall / CPU | eval wall / CPU | trajectories |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, a := range s.arms {
		kind := a.arm.Kind
		if len(a.arm.Flags) > 0 {
			kind += " " + strings.Join(a.arm.Flags, " ")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", a.arm.Name, kind, a.heldOut, a.bestOut, a.heldIn,
			roomCell(a.roomOut), roomCell(a.roomIn), rate(a.valid), cost(a.trainWall, a.trainCPU), cost(a.evalWall, a.evalCPU), a.trajectories)
	}
	if n := expertIdle(cfg, s); n != "" {
		b.WriteString("\n" + n + "\n")
	}
	writePaired(&b, s)
	writeTimeSplit(&b, s.arms)
	writeFeedbackFits(&b, s)
	b.WriteString("\n## Claims\n\nA claim reproduces when its 95% interval excludes 0 in its direction, is contradicted when it excludes 0 the other way, and is inconclusive otherwise (at this scale, usually). An ablation whose phenomenon (what the ablated feature acts on) the grid measured below its threshold is **not testable here**, whatever its difference: ")
	var rules []string
	for _, ph := range []string{PhenomenonDuration, PhenomenonInstrumentation, PhenomenonFormat} {
		rules = append(rules, ph+": "+rule(ph))
	}
	b.WriteString(strings.Join(rules, "; ") + " (issue 22). Episode-wise PPO names no phenomenon.\n\n| claim | evidence | phenomenon | verdict | the papers |\n|---|---|---|---|---|\n")
	for _, c := range s.claims() {
		ph := c.phenomenon
		if ph == "" {
			ph = "-"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | **%s** | %s |\n", c.claim, c.evidence, ph, c.verdict, c.paper)
	}
	writePhenomena(&b, s, img)
	writeTraining(&b, s, img)
	writeWatch(&b, s, img)
	writeTaskCount(&b, s, img)
	b.WriteString("\n## Per task (held-out)\n\nMean delta_r over seeds and trajectories, and the share of steps the environment accepted (valid actions), per task and arm.\n\n")
	writeTaskTable(&b, s)
	b.WriteString("\nWhat each policy did (actions, outcomes) and its training curves are in the cells' evaluation reports: ")
	for i, c := range plan(cfg, armsOf(s)) {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "[%s](cells/%s/report.md)", c.name(), c.name())
	}
	b.WriteString(".\n")
	b.WriteString("\n## Plots\n\n")
	img(&b, "delta_r.png", "delta_r per arm: mean over (seed, task) units, 95% interval")
	img(&b, "valid_actions.png", "valid actions per arm: mean over (seed, task) units, 95% interval")
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(b.String()), 0o644)
}

// expertIdle says why the scripted expert's rows show no edit when the
// grid's evaluation gives it fewer steps than an edit needs ("" when it
// can edit, or the grid has no expert arm): its delta_r is then the
// baseline run's, 0 by construction, not a measure of the expert.
func expertIdle(cfg Config, s summary) string {
	has := false
	for _, a := range s.arms {
		has = has || a.arm.Kind == KindBaseline && a.arm.Method == "expert"
	}
	n := flagInt(cfg.evalArgs(), "env.max_steps")
	if !has || n == 0 || n >= agents.ScriptedEditSteps {
		return ""
	}
	return fmt.Sprintf("**The scripted expert cannot edit in this grid**: evaluation gives a trajectory %d steps (env.max_steps), and the expert starts an edit only with %d steps left (edit, run, undo, run again, then its Final Answer), so its trajectories look around, run the initial script and stop. Its delta_r is the initial script's by construction, not a measure of the expert; give evaluation at least 8 steps (eval_flags: --env.max_steps=8) to compare with it.", n, agents.ScriptedEditSteps)
}

// ppoArms are the arms whose cells trained PPO and recorded something.
func (s summary) ppoArms() []*armStats {
	var out []*armStats
	for _, a := range s.arms {
		if a.arm.Kind == KindPPO && len(a.runs) > 0 {
			out = append(out, a)
		}
	}
	return out
}

// writePhenomena is the phenomenon table: what each PPO arm's samples did.
func writePhenomena(b *strings.Builder, s summary, img func(*strings.Builder, string, string)) {
	arms := s.ppoArms()
	if len(arms) == 0 {
		return
	}
	writeTimeQuality(b, s.timeQuality)
	b.WriteString("\n## Phenomenon checks\n\nOver the training samples of each PPO arm: the samples its updates trained on, pooled over its seeds' cells (with the samples of the groups train ppo dropped, their rewards all equal or too stale, when its metrics record them: samples/used). r is Pearson's correlation of a sample's duration (its step's execution seconds) and its reward, with a Fisher-z 95% interval, over all samples and over those whose step ran a script; staleness is the mean number of policy versions between a sample's generation and its use, for the samples slower than their cell's median duration and the rest; failed runs are script runs that ended in script_error, killed, output_limit, invalid_submission, timeout or oom, with the last instrumentation marker each reached; refused counts invalid actions and invalid edits; the duration quarters rank all of a cell's samples (trained and dropped) by duration, so that a collector which trains on everything it generated puts 25% of its trained samples in each, and one that trains on whatever finishes first and drops the stale puts less in the slowest. n/a: the rows hold no samples (metrics written before train ppo recorded them, or a dataset before 1.2 for the quarters).\n\n")
	b.WriteString("| arm | samples | r(duration, reward), all | r, script runs | staleness slow / fast | script runs | failed runs (of script runs) | format errors / refused (of samples) | trained in the fastest / slowest duration quarter |\n|---|---:|---|---|---:|---:|---|---:|---:|\n")
	for _, a := range arms {
		b.WriteString("| " + strings.Join(append(phenomenaRow(a), quarterShares(a)), " | ") + " |\n")
	}
	b.WriteString("\n")
	img(b, "duration_shares.png", "per update, the trained samples' shares of the cell's duration quarters (the dropped dashed) and their staleness, mean over seeds")
}

// quarterShares is the share of an arm's trained samples, pooled over its
// updates and seeds, in the fastest and in the slowest quarter of their
// cells' durations.
func quarterShares(a *armStats) string {
	var q1, q4, n float64
	for _, r := range a.runs {
		for _, u := range r.durations {
			if u.Trained > 0 {
				t := float64(u.Trained)
				q1, q4, n = q1+u.Q1*t, q4+u.Q4*t, n+t
			}
		}
	}
	if n == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%% / %.1f%%", 100*q1/n, 100*q4/n)
}

// writeTraining is the section on what the PPO arms' training did: the
// reward gain and the learning curves.
func writeTraining(b *strings.Builder, s summary, img func(*strings.Builder, string, string)) {
	arms := s.ppoArms()
	if len(arms) == 0 {
		return
	}
	b.WriteString("\n## RL on its training distribution\n\nPer PPO arm and seed, the gain in training reward: the mean reward of the last quarter of the PPO updates minus that of the first tenth (each rounded up to whole updates; the rewards are what PPO credited the update's trained actions with, drawn from held-in expert states: a sample's own reward, or with horizon n its n-step return). Mean and 95% Student-t interval over seeds.\n\n| arm | updates | first tenth / last quarter | gain (95% CI over seeds) | per seed |\n|---|---:|---|---:|---|\n")
	for _, a := range arms {
		n := 0
		for _, r := range a.runs {
			n = max(n, len(r.reward))
		}
		first, last, _ := windows(n)
		var per []string
		for _, g := range rewardGains(a.runs) {
			per = append(per, fmt.Sprintf("%+.3f", g))
		}
		g := interval(rewardGains(a.runs))
		fmt.Fprintf(b, "| %s | %d | %d / %d | %s over %s | %s |\n", a.arm.Name, n, first, last, g.num(), plural(g.n, "seed"), strings.Join(per, ", "))
	}
	b.WriteString("\n")
	img(b, "reward_curves.png", "PPO mean reward per update: mean over seeds, 95% interval over seeds")

	var withCurve []*armStats
	for _, a := range arms {
		if len(curveStats(a.runs)) > 0 {
			withCurve = append(withCurve, a)
		}
	}
	if len(withCurve) == 0 {
		b.WriteString("No PPO arm recorded a learning curve (train ppo --curve.every; the rl and ablations presets turn it on).\n")
		return
	}
	b.WriteString("\n## Learning curves\n\nThe policy evaluated during PPO training (train ppo --curve.every: the same tasks, plans and seeds at every point), delta_r per split as the mean over the split's tasks; mean over seeds with a 95% Student-t interval over seeds at each point. Time is the cumulative wall or CPU time of the updates so far (the curve evaluations excluded), the mean over seeds; step-wise and episode-wise arms share the time axis.\n\n| arm | seeds | points | held-in delta_r: first point -> last | held-out delta_r: first point -> last | last point: update, wall / CPU |\n|---|---:|---:|---|---|---|\n")
	for _, a := range withCurve {
		cs := curveStats(a.runs)
		f, l := cs[0], cs[len(cs)-1]
		seeds := 0
		for _, r := range a.runs {
			if len(r.curve) > 0 {
				seeds++
			}
		}
		fmt.Fprintf(b, "| %s | %d | %d | %s -> %s | %s -> %s | %d, %s |\n", a.arm.Name, seeds, len(cs),
			f.heldIn, l.heldIn, f.heldOut, l.heldOut, l.update, cost(l.wall.mean, l.cpu.mean))
	}
	b.WriteString("\n")
	img(b, "learning_curves_updates.png", "learning curves: delta_r against PPO updates, mean over seeds, 95% interval over seeds")
	img(b, "learning_curves_wall.png", "learning curves: delta_r against the updates' wall time, mean over seeds, 95% interval over seeds")
	img(b, "learning_curves_cpu.png", "learning curves: delta_r against the updates' CPU time, mean over seeds, 95% interval over seeds")
}

// writeWatch is the reward-hacking watch: whether the corner-case,
// undo or final-answer share rises over training.
func writeWatch(b *strings.Builder, s summary, img func(*strings.Builder, string, string)) {
	var arms []*armStats
	for _, a := range s.ppoArms() {
		for _, r := range a.runs {
			if len(r.updates) > 0 {
				arms = append(arms, a)
				break
			}
		}
	}
	if len(arms) == 0 {
		return
	}
	fmt.Fprintf(b, "\n## Reward-hacking watch\n\nThe corner-case reward (a timeout or out-of-memory run earns 0 where a crash earns -1) and actions that end or undo cheaply are what an RL policy can learn to prefer. Per PPO arm, each share of the update's samples in the first tenth of the updates and in the last quarter (means over seeds), and the rise with its 95%% interval over seeds; **rises** flags a mean rise of more than %.0f percentage points.\n\n| arm | seeds |", 100*watchMargin)
	for _, w := range watched {
		fmt.Fprintf(b, " %s: first -> last (rise) |", w.name)
	}
	b.WriteString("\n|---|---:|")
	for range watched {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	var flags []string
	for _, a := range arms {
		rise, _, _ := shareRise(a.runs, watched[0].get)
		fmt.Fprintf(b, "| %s | %d |", a.arm.Name, rise.n)
		for _, w := range watched {
			rise, first, last := shareRise(a.runs, w.get)
			cell := fmt.Sprintf("%.1f%% -> %.1f%% (%s)", 100*first.mean, 100*last.mean, rise)
			if rise.n == 0 {
				cell = "n/a (fewer than 2 updates)"
			} else if rise.mean > watchMargin {
				cell += " **rises**"
				flags = append(flags, fmt.Sprintf("%s: %s", a.arm.Name, w.name))
			}
			fmt.Fprintf(b, " %s |", cell)
		}
		b.WriteString("\n")
	}
	if len(flags) > 0 {
		fmt.Fprintf(b, "\n**Flagged**: %s. Read the cells' transcripts before reading their delta_r as skill.\n", strings.Join(flags, "; "))
	} else {
		fmt.Fprintf(b, "\nNo watched share rises by more than %.0f percentage points.\n", 100*watchMargin)
	}
	b.WriteString("\n")
	img(b, "outcome_shares.png", "outcome and action shares of each PPO update's samples, mean over seeds")
}

// writeTaskCount is ML-Agent's task-count curve: held-out delta_r
// against the number of held-in tasks RL trained on.
func writeTaskCount(b *strings.Builder, s summary, img func(*strings.Builder, string, string)) {
	pts := s.taskCount()
	if len(pts) == 0 {
		return
	}
	b.WriteString("\n## Task count\n\nHeld-out delta_r against the number of held-in tasks whose expert states PPO trained on (0: the SFT policy; train ppo --state_tasks takes the first N of a fixed order), as ML-Agent's Fig. 5: per seed the mean over held-out tasks, then the mean and its 95% Student-t interval over seeds.\n\n| tasks | arm | held-out delta_r (over seeds) |\n|---:|---|---:|\n")
	for _, p := range pts {
		fmt.Fprintf(b, "| %d | %s | %s |\n", p.tasks, p.arm, units(p.e, "seed"))
	}
	b.WriteString("\n")
	img(b, "task_count.png", "held-out delta_r against the number of training tasks, mean over seeds, 95% interval over seeds")
}

// taskPoint is one point of the task-count curve.
type taskPoint struct {
	tasks int
	arm   string
	e     estimate
}

// taskCount lists the preset's task-count points the grid ran, by tasks.
func (s summary) taskCount() []taskPoint {
	var out []taskPoint
	for _, a := range s.arms {
		if n, ok := s.preset.TaskCounts[a.arm.Name]; ok && len(a.outUnits) > 0 {
			out = append(out, taskPoint{tasks: n, arm: a.arm.Name, e: interval(seedMeans(a.outUnits))})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].tasks < out[j].tasks })
	return out
}

func armsOf(s summary) []Arm {
	var out []Arm
	for _, a := range s.arms {
		out = append(out, a.arm)
	}
	return out
}

// writeTaskTable writes one row per held-out task: each arm's mean
// delta_r and valid-action rate over its seeds and trajectories.
func writeTaskTable(b *strings.Builder, s summary) {
	tasks := map[string]bool{}
	for _, a := range s.arms {
		for u := range a.outUnits {
			tasks[u.task] = true
		}
	}
	names := make([]string, 0, len(tasks))
	for t := range tasks {
		names = append(names, t)
	}
	sort.Strings(names)
	b.WriteString("| task |")
	for _, a := range s.arms {
		fmt.Fprintf(b, " %s |", a.arm.Name)
	}
	b.WriteString("\n|---|")
	for range s.arms {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, t := range names {
		fmt.Fprintf(b, "| %s |", t)
		for _, a := range s.arms {
			sum, n := 0.0, 0
			for u, x := range a.outUnits {
				if u.task == t {
					sum, n = sum+x, n+1
				}
			}
			cell := "n/a"
			if n > 0 {
				cell = fmt.Sprintf("%+.1f%%", 100*sum/float64(n))
			}
			if v, steps := a.taskValid[t][0], a.taskValid[t][1]; steps > 0 {
				cell += fmt.Sprintf(" (%.0f%% valid)", 100*float64(v)/float64(steps))
			}
			fmt.Fprintf(b, " %s |", cell)
		}
		b.WriteString("\n")
	}
}

// writeTimeSplit writes where each arm's cells spent their time: the
// training and evaluation processes' wall and CPU time, and for PPO arms
// the wall seconds of each phase of training as train ppo recorded them
// (generating actions, executing them in the environments, the learner,
// and the learning-curve evaluations), and evaluation's split (the
// trajectories' generate, wait and execute seconds, summed over
// trajectories that ran in parallel), means over seeds. A phase a run did not record
// (datasets written before experiments 1.3 and 1.5) shows "-", and the
// scripts' share of execute needs experiments 1.6.
func writeTimeSplit(b *strings.Builder, arms []*armStats) {
	b.WriteString("\n## Where each cell's time went\n\nMeans over seeds. Train and eval: the stage processes' wall / CPU time (scripts included); a PPO arm's training excludes the SFT it starts from (the sft arm's row). PPO phases: wall seconds summed over the updates from train ppo's metrics (generate: sampling actions; execute: the environments' steps; learn: the learner; curve: the learning-curve evaluations), with their share of the training wall time; where train ppo recorded it, execute also gives the scripts' own run time as a share of the workers' step time (what is not scripts is the environment's overhead: grading, replays, instrumentation, and a worker waiting for an identical run). Eval generate / wait / execute: the evaluation's trajectory-seconds spent in the agent's answers, waiting for the other trajectories of a lockstep batch to ask (a policy answers a task's trajectories together), and in the environment's steps, summed over trajectories that ran in parallel (so they can exceed its wall time), with their share of the three's total.\n\n| arm | train wall / CPU | PPO generate | PPO execute | PPO learn | PPO curve | eval wall / CPU | eval generate | eval wait | eval execute |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, a := range arms {
		cells := make([]string, len(phaseOrder))
		busy, okB := a.phases["execute_busy"]
		scripts, okS := a.phases["execute_scripts"]
		for i, ph := range phaseOrder {
			cells[i] = "-"
			v, ok := a.phases[ph]
			if !ok {
				continue
			}
			share := fmt.Sprintf("%.0f%%", 100*v/max(a.trainWall, 1e-9))
			if ph == "execute" && okB && okS && busy > 0 {
				share += fmt.Sprintf("; scripts %.0f%%", 100*scripts/busy)
			}
			cells[i] = fmt.Sprintf("%s (%s)", time.Duration(v*float64(time.Second)).Round(time.Second), share)
		}
		evalCells := []string{"-", "-", "-"}
		total := a.evalPhases["generate"] + a.evalPhases["wait"] + a.evalPhases["execute"]
		for i, ph := range []string{"generate", "wait", "execute"} {
			if v, ok := a.evalPhases[ph]; ok {
				evalCells[i] = fmt.Sprintf("%s (%.0f%%)", time.Duration(v*float64(time.Second)).Round(time.Second), 100*v/max(total, 1e-9))
			}
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", a.arm.Name, cost(a.trainWall, a.trainCPU), strings.Join(cells, " | "), cost(a.evalWall, a.evalCPU), strings.Join(evalCells, " | "))
	}
}
