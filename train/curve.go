package train

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/env/episode"
	"github.com/mlerl/mlerl/internal/config"
	"github.com/mlerl/mlerl/internal/llm"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/schemas"
)

// Learning curves (ML-Agent's Fig. 3): every curve.every updates, and
// before the first and after the last, `train ppo` plays a small fixed set
// of evaluation episodes with the policy being trained (the same tasks,
// plans and seeds each time, MLAgentBench's environment as `mlerl
// evaluate` runs it) and records delta_r per split beside the update's
// metrics, with the wall and CPU seconds spent on updates so far (the
// evaluations themselves are not counted), so that step-wise and
// episode-wise PPO can be compared on one time axis.

// CurveConfig configures the learning-curve evaluations.
type CurveConfig struct {
	Every       int      `yaml:"every" help:"evaluate the policy every N updates, and before the first and after the last (0: never)"`
	Splits      []string `yaml:"splits" help:"task splits to evaluate (held-in, held-out)"`
	PerTask     int      `yaml:"per_task" help:"episodes per task (the same plans and seeds at every point)"`
	MaxSteps    int      `yaml:"max_steps" help:"steps per episode"`
	Tasks       string   `yaml:"tasks" help:"tasks dataset in the data root"`
	Ideas       string   `yaml:"ideas" help:"ideas dataset in the data root (the episodes' plans)"`
	Temperature float64  `yaml:"temperature" help:"sampling temperature of the evaluation episodes (mlerl evaluate's default 0.7)"`
	TopP        float64  `yaml:"top_p" help:"nucleus sampling of the evaluation episodes (mlerl evaluate's default 0.95)"`
	Batch       int      `yaml:"batch" help:"episodes played together (one batched generation per step; as many scripts at once at most)"`
	MaxTasks    int      `yaml:"max_tasks" help:"at most N tasks per split, a fixed sample (ordered by a hash of the task id: the same tasks at every point, in every arm and seed); 0: every task"`
}

// DefaultCurveConfig is off; when on, 2 episodes of 8 steps per held-in
// and held-out task, sampled as `mlerl evaluate` samples.
func DefaultCurveConfig() CurveConfig {
	return CurveConfig{Every: 0, Splits: []string{schemas.HeldIn, schemas.HeldOut}, PerTask: 2, MaxSteps: 8,
		Tasks: schemas.Tasks.Name, Ideas: schemas.Ideas.Name, Temperature: 0.7, TopP: 0.95, Batch: 8}
}

// Validate checks the settings (keys relative to the curve block).
func (c CurveConfig) Validate() error {
	switch {
	case c.Every < 0:
		return config.Errorf("every", c.Every, "must not be negative (0: no learning curve)")
	case c.Every == 0:
		return nil
	case len(c.Splits) == 0:
		return config.Errorf("splits", c.Splits, "must list %s and/or %s", schemas.HeldIn, schemas.HeldOut)
	case c.PerTask < 1:
		return config.Errorf("per_task", c.PerTask, "must be at least 1")
	case c.MaxSteps < 1:
		return config.Errorf("max_steps", c.MaxSteps, "must be at least 1")
	case c.Tasks == "" || c.Ideas == "":
		return config.Errorf("tasks", c.Tasks, "tasks and ideas must name datasets")
	case !(c.Temperature >= 0):
		return config.Errorf("temperature", c.Temperature, "must be a number >= 0 (0: greedy)")
	case !(c.TopP > 0 && c.TopP <= 1):
		return config.Errorf("top_p", c.TopP, "must be in (0, 1]")
	case c.Batch < 1:
		return config.Errorf("batch", c.Batch, "must be at least 1")
	case c.MaxTasks < 0:
		return config.Errorf("max_tasks", c.MaxTasks, "must not be negative (0: every task)")
	}
	for i, s := range c.Splits {
		if s != schemas.HeldIn && s != schemas.HeldOut {
			return config.Errorf("splits", c.Splits, "item %d %q: want %s or %s", i+1, s, schemas.HeldIn, schemas.HeldOut)
		}
	}
	return nil
}

// curveEval is the fixed set of evaluation episodes and what they run in.
type curveEval struct {
	cfg  CurveConfig
	jobs []episode.Job
	ecfg env.Config
	opts agents.Options
	stop func() error
}

// openCurve prepares the learning-curve episodes (nil when curve.every is
// 0): the tasks of the chosen splits, per_task plans and seeds each, and
// an environment configured as `mlerl evaluate`'s (no same-step runs, no
// final-answer term: the episodes are scored by their final submission)
// with the run's execution-cache options (env.exec_cache,
// env.exec_cache_timeouts).
func (r *ppoRun) openCurve(ctx context.Context) (*curveEval, error) {
	c := r.cfg.Curve
	if c.Every == 0 {
		return nil, nil
	}
	in, err := episode.Load(ctx, r.s.st, c.Tasks, c.Ideas, c.Splits, nil)
	if err != nil {
		return nil, fmt.Errorf("train ppo: learning curve: %w", err)
	}
	ce := &curveEval{cfg: c}
	tasks := curveTasks(in.Tasks, c.MaxTasks)
	for _, t := range tasks {
		for i := range c.PerTask {
			seed := episode.Seed("ppo-curve", t.TaskID, i)
			plan, err := in.Plan(t.TaskID, seed)
			if err != nil {
				return nil, fmt.Errorf("train ppo: learning curve: %w", err)
			}
			ce.jobs = append(ce.jobs, episode.Job{Task: t, ID: fmt.Sprintf("curve-%s-%02d", t.TaskID, i), Seed: seed, Plan: plan})
		}
	}
	if ce.ecfg, ce.stop, err = episode.Setup(ctx, curveEnv(r.cfg.Env, c.MaxSteps), llm.Config{}, true, nil); err != nil {
		return nil, fmt.Errorf("train ppo: learning curve: %w", err)
	}
	if ce.opts, err = promptOptions(ctx, r.s, c.MaxSteps, false); err != nil {
		ce.stop()
		return nil, err
	}
	fmt.Fprintf(r.s.log, "train ppo: learning curve every %d updates: %d episodes of %d steps on %d %s tasks\n",
		c.Every, len(ce.jobs), c.MaxSteps, len(tasks), strings.Join(c.Splits, "/"))
	if len(tasks) < len(in.Tasks) {
		ids := make([]string, len(tasks))
		for i, t := range tasks {
			ids[i] = t.TaskID
		}
		fmt.Fprintf(r.s.log, "train ppo: learning curve on %d of %d tasks (curve.max_tasks %d per split): %s\n", len(tasks), len(in.Tasks), c.MaxTasks, strings.Join(ids, ", "))
	}
	return ce, nil
}

// curveEnv is the learning curve's environment configuration: evaluate's
// defaults with the curve's step limit, and the run's interpreter,
// instrumentation and execution-cache options (its own cache, shared by
// the curve's points) and its last_step_edits: a run that offers edits on
// the last step is evaluated so (its evaluate is given the same flag), and
// the curve is what selection reads in its place. Edits do not run the
// script there whatever the run's execute_after_edit, so the curve's last
// steps offer none by default.
func curveEnv(run env.Config, maxSteps int) env.Config {
	ecfg := env.DefaultConfig()
	ecfg.MaxSteps, ecfg.Python, ecfg.Instrument = maxSteps, run.Python, run.Instrument
	ecfg.ExecCacheOn, ecfg.ExecCacheTimeouts = run.ExecCacheOn, run.ExecCacheTimeouts
	ecfg.LastStepEdits = run.LastStepEdits
	return ecfg
}

// curveTasks keeps at most max tasks of each split (0: all): per split,
// the tasks ordered by the SHA-256 of "ppo-curve-tasks/" + id, so that the
// sample depends on the task ids alone (not on the order they were
// ingested in, the seed or the arm), then back in their original order.
func curveTasks(tasks []schemas.Task, max int) []schemas.Task {
	if max <= 0 {
		return tasks
	}
	key := func(id string) string {
		h := sha256.Sum256([]byte("ppo-curve-tasks/" + id))
		return hex.EncodeToString(h[:])
	}
	bySplit := map[string][]string{}
	for _, t := range tasks {
		bySplit[t.Split] = append(bySplit[t.Split], t.TaskID)
	}
	keep := map[string]bool{}
	for split, ids := range bySplit {
		sort.Slice(ids, func(i, j int) bool { return key(ids[i]) < key(ids[j]) })
		for _, id := range ids[:min(max, len(ids))] {
			keep[split+"/"+id] = true
		}
	}
	var out []schemas.Task
	for _, t := range tasks {
		if keep[t.Split+"/"+t.TaskID] {
			out = append(out, t)
		}
	}
	return out
}

func (c *curveEval) close() {
	if c != nil && c.stop != nil {
		c.stop()
	}
}

// curvePoint evaluates the policy when the update count is on the curve
// (0, every curve.every updates, the last) and has no point yet (a
// resumed run keeps the points it recorded), records the point, and
// reports whether it evaluated one.
func (r *ppoRun) curvePoint(ctx context.Context, c *curveEval) (bool, error) {
	u := r.state.Update
	if c == nil || (u%c.cfg.Every != 0 && u != r.cfg.Updates) || r.hasCurvePoint(u) {
		return false, nil
	}
	t0 := time.Now()
	agent, err := policy.NewPolicyAgent("ppo", policy.Generator{Engine: r.policy, Policy: r.pol},
		policy.AgentOptions{Temperature: c.cfg.Temperature, TopP: c.cfg.TopP, MaxNewTokens: r.cfg.MaxNewTokens, Decode: r.cfg.Decode,
			Terse: r.oneLine, DashThoughts: r.cfg.FreeText == FreeTextForce})
	if err != nil {
		return false, err
	}
	finals := make([]float64, len(c.jobs))
	beh := map[string]*behaviour{}
	for _, j := range c.jobs {
		beh[j.Task.Split] = &behaviour{}
	}
	valid, steps := make([]int, len(c.jobs)), make([]int, len(c.jobs))
	// Episodes play c.cfg.Batch at a time, each batch in lockstep (the
	// same batches and seeds at every point).
	for start := 0; start < len(c.jobs); start += c.cfg.Batch {
		part := c.jobs[start:min(start+c.cfg.Batch, len(c.jobs))]
		ls := episode.NewLockstep(agent, episode.Seed("ppo-curve", r.cfg.Seed, start), len(part))
		eg, ectx := errgroup.WithContext(ctx)
		var mu sync.Mutex
		for k, j := range part {
			eg.Go(func() error {
				defer ls.Leave(ectx, k)
				ep, err := episode.Run(ectx, r.s.st, c.ecfg, c.opts, j, "ppo", ls.Agent(k, j.PlanTexts()))
				if err != nil {
					return fmt.Errorf("learning curve, task %s: %w", j.Task.TaskID, err)
				}
				mu.Lock()
				defer mu.Unlock()
				finals[start+k] = env.SpecFromTask(j.Task).MInit
				if ep.Trajectory.FinalMetric != nil {
					finals[start+k] = *ep.Trajectory.FinalMetric
				}
				beh[j.Task.Split].episode(ep.Steps)
				spec := env.SpecFromTask(j.Task)
				beh[j.Task.Split].scores(spec.Direction, spec.MInit, ep.Trajectory.BestMetric, ep.Trajectory.FinalMetric)
				for _, s := range ep.Steps {
					steps[start+k]++
					if env.Accepted(env.Outcome(s.Outcome)) {
						valid[start+k]++
					}
				}
				return nil
			})
		}
		if err := eg.Wait(); err != nil {
			return false, fmt.Errorf("train ppo: %w", err)
		}
	}
	rec := curveRecord(c.jobs, finals, valid, steps)
	for split, b := range beh {
		b.record(rec, "curve/"+split+"/behaviour/")
	}
	rec["stage"], rec["step"] = "ppo-curve", u
	rec["time/wall_s"], rec["time/cpu_s"], rec["time/curve_s"] = r.state.WallS, r.state.CPUS, time.Since(t0).Seconds()
	r.s.record(rec)
	fmt.Fprintf(r.s.log, "train ppo: learning curve at update %d: %s (%.0fs)\n", u, curveSummary(rec), time.Since(t0).Seconds())
	return true, nil
}

// curveRecord turns the episodes' final scores into delta_r per task,
// beta (m_avg - m_init) / m_init as `mlerl evaluate` computes it, and
// their mean per split, with the share of valid steps per split.
func curveRecord(jobs []episode.Job, finals []float64, valid, steps []int) map[string]any {
	type acc struct {
		sum float64
		n   int
	}
	byTask := map[string]*acc{}
	for i, j := range jobs {
		a, ok := byTask[j.Task.TaskID]
		if !ok {
			a = &acc{}
			byTask[j.Task.TaskID] = a
		}
		a.sum += finals[i]
		a.n++
	}
	rec := map[string]any{}
	split, room := map[string][]float64{}, map[string][]float64{}
	seen := map[string]bool{}
	for _, j := range jobs {
		id := j.Task.TaskID
		if seen[id] {
			continue
		}
		seen[id] = true
		spec := env.SpecFromTask(j.Task)
		mInit := spec.MInit
		avg := byTask[id].sum / float64(byTask[id].n)
		if mInit == 0 {
			continue // the relative gain is undefined: the task has no point (JSON has no NaN)
		}
		beta := 1.0
		if j.Task.Direction == schemas.LowerIsBetter {
			beta = -1
		}
		d := beta * (avg - mInit) / mInit
		split[j.Task.Split] = append(split[j.Task.Split], d)
		rec["curve/task/"+id] = d
		if h, ok := env.HeadroomShare(mInit, spec.MBest, avg); ok {
			room[j.Task.Split] = append(room[j.Task.Split], h)
			rec["curve/task_headroom/"+id] = h
		}
	}
	for s, ds := range split {
		rec["curve/"+s+"/delta_r"] = mean(ds)
		rec["curve/"+s+"/tasks"] = len(ds)
	}
	for s, hs := range room {
		rec["curve/"+s+"/headroom"] = mean(hs)
	}
	v, n := map[string]int{}, map[string]int{}
	for i, j := range jobs {
		v[j.Task.Split] += valid[i]
		n[j.Task.Split] += steps[i]
	}
	for s := range n {
		rec["curve/"+s+"/valid_rate"] = ratio(v[s], n[s])
	}
	return rec
}

// curveSummary is a point's delta_r per split, for the log.
func curveSummary(rec map[string]any) string {
	var parts []string
	for _, s := range []string{schemas.HeldIn, schemas.HeldOut} {
		if d, ok := rec["curve/"+s+"/delta_r"].(float64); ok {
			part := fmt.Sprintf("%s delta_r %+.2f%%", s, 100*d)
			if h, ok := rec["curve/"+s+"/headroom"].(float64); ok {
				part += fmt.Sprintf(" (headroom %+.1f%%)", 100*h)
			}
			parts = append(parts, part)
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// hasCurvePoint reports whether the metrics already hold the curve point
// of update u (a resumed run).
func (r *ppoRun) hasCurvePoint(u int) bool {
	for _, line := range r.s.metrics {
		var m struct {
			Stage string `json:"stage"`
			Step  int    `json:"step"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.Stage == "ppo-curve" && m.Step == u {
			return true
		}
	}
	return false
}
