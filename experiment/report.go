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
	trainWall, trainCPU, evalWall, evalCPU float64          // means over seeds
	rewardCurve, validCurve                [][]float64      // per seed
	trajectories, steps                    int
	taskValid                              map[string][2]int // held-out task: valid steps, steps
}

type summary struct {
	cfg  Config
	arms []*armStats
}

func summarise(cfg Config, arms []Arm, rows []schemas.ExperimentRow) summary {
	byArm := map[string][]schemas.ExperimentRow{}
	for _, r := range rows {
		byArm[r.Arm] = append(byArm[r.Arm], r)
	}
	var s summary
	s.cfg = cfg
	for _, a := range arms {
		st := &armStats{arm: a, outUnits: map[unit]float64{}, inUnits: map[unit]float64{}, taskValid: map[string][2]int{}}
		type acc struct {
			sum, best float64
			n         int
		}
		units := map[string]map[unit]*acc{schemas.HeldOut: {}, schemas.HeldIn: {}}
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
			if len(r.RewardCurve) > 0 {
				st.rewardCurve = append(st.rewardCurve, r.RewardCurve)
				st.validCurve = append(st.validCurve, r.ValidCurve)
			}
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

// claim is one statement the grid tests, with its evidence.
type claim struct {
	claim, evidence, verdict, paper string
}

// Verdicts.
const (
	reproduces   = "reproduces"
	contradicted = "contradicted"
	inconclusive = "inconclusive"
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

// paired returns the 95% interval of a - b over the held-out units both
// arms have (the same seed and task: the same plans and states).
func paired(a, b *armStats) estimate {
	var d []float64
	for u, x := range a.outUnits {
		if y, ok := b.outUnits[u]; ok {
			d = append(d, x-y)
		}
	}
	return interval(d)
}

// claims are the grid's tests: SFT beats the initial script, SFT+PPO
// beats SFT, and each full method beats its ablation, on held-out tasks.
func (s summary) claims() []claim {
	var out []claim
	if sft := s.arm("sft"); sft != nil && sft.heldOut.n > 0 {
		out = append(out, claim{claim: "SFT improves on the initial script on held-out tasks (delta_r > 0)",
			evidence: "SFT delta_r " + sft.heldOut.String(), verdict: verdict(sft.heldOut), paper: "ML-Agent: SFT then RL gains on held-out tasks"})
	}
	if ppo, sft := s.arm("sft+ppo"), s.arm("sft"); ppo != nil && sft != nil {
		e := paired(ppo, sft)
		out = append(out, claim{claim: "SFT + step-wise PPO beats SFT on held-out tasks",
			evidence: "paired difference " + e.String(), verdict: verdict(e), paper: "ML-Agent: RL beats SFT"})
	}
	for _, a := range s.arms {
		if a.arm.AblationOf == "" {
			continue
		}
		base := s.arm(a.arm.AblationOf)
		e := paired(base, a)
		out = append(out, claim{claim: fmt.Sprintf("%s beats its ablation %s on held-out tasks", a.arm.AblationOf, a.arm.Name),
			evidence: "paired difference " + e.String(), verdict: verdict(e), paper: a.arm.Paper})
	}
	return out
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
	var b strings.Builder
	fmt.Fprintf(&b, "# Experiment %s\n\n", cfg.Name)
	fmt.Fprintf(&b, "Rows: `%s`. Budget %s, seeds %v, %d arms. Each arm is trained (SFT, then PPO from the seed's SFT checkpoint) and evaluated with each seed; every interval is a two-sided 95%% Student-t interval over (seed, task) units, each unit the mean over its trajectories (avg@k). delta_r = beta (m_final - m_init) / m_init. Costs are means over seeds of the wall time and the CPU time of the cell's processes (their scripts included); a PPO arm's training time excludes the SFT it starts from.\n\n", uri, cfg.Budget, cfg.Seeds, len(s.arms))
	b.WriteString("| arm | kind | held-out delta_r | best@k | held-in delta_r | valid actions | train wall / CPU | eval wall / CPU | trajectories |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, a := range s.arms {
		kind := a.arm.Kind
		if len(a.arm.Flags) > 0 {
			kind += " " + strings.Join(a.arm.Flags, " ")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", a.arm.Name, kind, a.heldOut, a.bestOut, a.heldIn, rate(a.valid),
			cost(a.trainWall, a.trainCPU), cost(a.evalWall, a.evalCPU), a.trajectories)
	}
	b.WriteString("\n## Claims\n\nA claim reproduces when its 95% interval excludes 0 in its direction, is contradicted when it excludes 0 the other way, and is inconclusive otherwise (at this scale, usually).\n\n| claim | evidence | verdict | the papers |\n|---|---|---|---|\n")
	for _, c := range s.claims() {
		fmt.Fprintf(&b, "| %s | %s | **%s** | %s |\n", c.claim, c.evidence, c.verdict, c.paper)
	}
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
	for _, p := range plots {
		fmt.Fprintf(&b, "![%s](%s)\n\n", p, p)
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(b.String()), 0o644)
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
