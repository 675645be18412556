package dataset

// Validation states: the held-out tasks' states that verl's validation
// file holds. They never enter rl_states (the RL pool is held-in only);
// they are exported for a trainer to measure the policy on tasks it
// never trains on.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// RolloutSettings are the settings of the rollout that made the steps
// which shape its prompts: validation states rendered here must look like
// the states the policy trains on.
type RolloutSettings struct {
	Seed          int64 // run seed: trajectory i of a task gets its plan from it
	FullBudget    int   // token budget of the full prompt
	CompactBudget int   // token budget of the compact prompt
	MaxSteps      int   // the environment's step limit, shown in the prompts
}

// DefaultRolloutSettings returns the rollout stage's defaults.
func DefaultRolloutSettings() RolloutSettings {
	return RolloutSettings{Seed: 1, FullBudget: agents.DefaultFullBudget, CompactBudget: agents.DefaultCompactBudget, MaxSteps: env.DefaultConfig().MaxSteps}
}

// RolloutSettingsOf reads the settings from the resolved config the
// rollout stored in the steps manifest; ok is false (and the defaults are
// returned) when the manifest holds no rollout config.
func RolloutSettingsOf(steps *datasets.Manifest) (rs RolloutSettings, ok bool) {
	rs = DefaultRolloutSettings()
	if steps.Producer.Config == nil {
		return rs, false
	}
	var c struct {
		Seed          *int64 `json:"seed"`
		FullBudget    int    `json:"full_budget"`
		CompactBudget int    `json:"compact_budget"`
		Env           struct {
			MaxSteps int `json:"max_steps"`
		} `json:"env"`
	}
	b, err := json.Marshal(steps.Producer.Config)
	if err != nil || json.Unmarshal(b, &c) != nil || c.CompactBudget <= 0 || c.FullBudget <= 0 || c.Env.MaxSteps <= 0 || c.Seed == nil {
		return rs, false
	}
	return RolloutSettings{Seed: *c.Seed, FullBudget: c.FullBudget, CompactBudget: c.CompactBudget, MaxSteps: c.Env.MaxSteps}, true
}

// ValOptions configure [BuildValStates].
type ValOptions struct {
	// PerTask is how many initial states (one per sampled plan) a
	// held-out task without expert steps gets. The dataset stage's
	// default is 4.
	PerTask int
	// Rollout shapes the rendered prompts and samples the plans.
	Rollout RolloutSettings
	// Ideas are the ideas dataset's rows the plans come from (the steps'
	// parent); none: initial states have no plan.
	Ideas []schemas.Idea
}

// ValCounts says where the validation states come from.
type ValCounts struct {
	Tasks     int `json:"tasks"`      // held-out tasks
	Rolled    int `json:"rolled_out"` // states from held-out expert steps
	Initial   int `json:"initial"`    // rendered initial states
	Duplicate int `json:"duplicate"`  // same snapshot and prompt as a kept state
}

// BuildValStates returns the validation states of the held-out tasks,
// all with Split=held-out. A task the rollout visited (rollout
// split=all) gives its expert states, chosen as [BuildRLStates] chooses
// (a snapshot, both prompts, no duplicate); a task it did not visit gives
// opts.PerTask initial states: the state a rollout starts from, rendered
// and snapshotted here, trajectory i's with the plan a rollout with
// opts.Rollout would sample for it (so identical to that rollout's first
// step). steps must be sorted (trajectory, step index); the output is in
// task order, then trajectory order, and depends only on the inputs.
// Initial states are stored in st (a snapshot is a few blobs: the
// workspace files are the task's, already there).
func BuildValStates(ctx context.Context, st store.Store, steps []schemas.Step, tasks map[string]schemas.Task, opts ValOptions) ([]schemas.RLState, ValCounts, error) {
	var c ValCounts
	var ids []string
	for id, t := range tasks {
		if t.Split == schemas.HeldOut {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	c.Tasks = len(ids)
	byTask := map[string][]schemas.RLState{}
	seen := map[string]bool{}
	for _, s := range steps {
		t, ok := tasks[s.TaskID]
		if !ok || t.Split != schemas.HeldOut || s.SnapshotRef == "" || s.CompactState == "" || s.State == "" {
			continue
		}
		key := s.SnapshotRef + "\x00" + s.CompactState
		if seen[key] {
			c.Duplicate++
			continue
		}
		seen[key] = true
		mInit, mBest := t.Public()
		byTask[s.TaskID] = append(byTask[s.TaskID], schemas.RLState{
			StateID: exampleID(s), TaskID: s.TaskID, Split: t.Split,
			TrajectoryID: s.TrajectoryID, StepIndex: s.StepIndex,
			Prompt: s.CompactState, FullPrompt: s.State, SnapshotRef: s.SnapshotRef,
			Metric: t.Metric, Direction: t.Direction, MInit: mInit, MBest: mBest,
			MetricPrev:   s.MetricBefore,
			ExpertAction: s.ActionText, ExpertReward: s.Reward, ExpertExecS: s.ExecS,
		})
	}
	pools := agents.BuildPools(opts.Ideas)
	var out []schemas.RLState
	for _, id := range ids {
		if rolled := byTask[id]; len(rolled) > 0 {
			out = append(out, rolled...)
			c.Rolled += len(rolled)
			continue
		}
		init, err := InitialStates(ctx, st, tasks[id], opts.PerTask, pools[id], opts.Rollout)
		if err != nil {
			return nil, c, err
		}
		for _, s := range init {
			key := s.SnapshotRef + "\x00" + s.Prompt
			if seen[key] {
				c.Duplicate++ // two plans drew the same ideas
				continue
			}
			seen[key] = true
			out = append(out, s)
			c.Initial++
		}
	}
	return out, c, nil
}

// InitialStates renders n initial states of task t: the fresh workspace,
// snapshotted into st, with the prompts trajectory i (0..n-1) of a rollout
// with settings rs starts from: its plan sampled from pools as the
// rollout samples it (no plan when pools is empty). Their ids are
// "<task>-<i>/00", the id the rollout's first step would have; they have
// no trajectory and no expert action. Nothing is executed.
func InitialStates(ctx context.Context, st store.Store, t schemas.Task, n int, pools agents.Pools, rs RolloutSettings) ([]schemas.RLState, error) {
	if n <= 0 {
		return nil, nil
	}
	cfg := env.DefaultConfig()
	cfg.MaxSteps = rs.MaxSteps
	cfg.Python, cfg.Runner = "python3", refuseRunner{} // nothing runs: no interpreter is looked for
	e, err := env.New(ctx, cfg, env.SpecFromTask(t), st)
	if err != nil {
		return nil, fmt.Errorf("initial state of task %s: %w", t.TaskID, err)
	}
	defer e.Close()
	snap, err := e.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("initial state of task %s: %w", t.TaskID, err)
	}
	script, _ := e.ReadFile("train.py", 1<<20) // as agents.RunEpisode reads it
	opts := agents.NewOptions(rs.FullBudget, rs.CompactBudget, rs.MaxSteps)
	mInit, mBest := t.Public()
	out := make([]schemas.RLState, n)
	for i := range out {
		id := fmt.Sprintf("%s-%04d", t.TaskID, i)
		var plan []string
		if len(pools) > 0 {
			seed := agents.TrajectorySeed(rs.Seed, id)
			ideas, err := agents.SamplePlan(rand.New(rand.NewPCG(uint64(seed), 1)), pools)
			if err != nil {
				return nil, fmt.Errorf("initial state of task %s: %w", t.TaskID, err)
			}
			for _, p := range ideas {
				plan = append(plan, p.Text)
			}
		}
		s := agents.FromEnv(e, plan, rs.MaxSteps, string(script))
		out[i] = schemas.RLState{
			StateID: id + "/00", TaskID: t.TaskID, Split: t.Split,
			Prompt: opts.Compact(s), FullPrompt: agents.Full(s, opts.FullBudget, opts.Count),
			SnapshotRef: snap, Metric: t.Metric, Direction: t.Direction, MInit: mInit, MBest: mBest, MetricPrev: &mInit,
		}
	}
	return out, nil
}

// refuseRunner is the runner of an environment that only renders and
// snapshots: it runs nothing.
type refuseRunner struct{}

func (refuseRunner) Run(context.Context, sandbox.Request) (sandbox.Result, error) {
	return sandbox.Result{}, errors.New("the dataset stage executes nothing")
}

func (refuseRunner) Close() error { return nil }

// valStates builds the validation states for Run: plans from the steps'
// ideas parent, prompts shaped by the rollout's settings from the steps
// manifest.
func valStates(ctx context.Context, st store.Store, stepsM *datasets.Manifest, steps []schemas.Step, tasks map[string]schemas.Task, cfg Config, log io.Writer) ([]schemas.RLState, ValCounts, error) {
	rs, ok := RolloutSettingsOf(stepsM)
	if !ok {
		fmt.Fprintf(log, "dataset: %s holds no rollout config; validation initial states use the rollout defaults (seed %d, %d steps, compact budget %d)\n", stepsM.URI, rs.Seed, rs.MaxSteps, rs.CompactBudget)
	}
	opts := ValOptions{PerTask: cfg.ValPerTask, Rollout: rs}
	for _, p := range stepsM.Parents {
		m, err := datasets.ReadManifest(ctx, st, p.Name, p.Version)
		if err != nil || m.Schema != schemas.Ideas.Name {
			continue
		}
		if opts.Ideas, err = datasets.ReadAll[schemas.Idea](ctx, st, m, schemas.Ideas); err != nil {
			return nil, ValCounts{}, err
		}
		break
	}
	val, c, err := BuildValStates(ctx, st, steps, tasks, opts)
	if err != nil {
		return nil, c, err
	}
	fmt.Fprintf(log, "dataset: %d validation states of %d held-out tasks (%d from the rollout, %d initial states)\n", len(val), c.Tasks, c.Rolled, c.Initial)
	return val, c, nil
}
