// Package agents holds who acts in the environment: the [Agent] interface,
// [RunEpisode] (one episode of any agent in an [env.Env], recorded as a
// trajectory and its steps), the prompt renderer every agent reads
// ([State], [Full], [Compact]; prompt.go), and the built-in agents: the
// [Scripted] expert (the embedded default), the [LLM] expert (an
// OpenAI-compatible chat endpoint) and the [Random] valid-action baseline.
// The trained policy implements Agent too, for evaluation.
//
// Start with [RunEpisode].
package agents

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/internal/llm"
	"github.com/mlerl/mlerl/internal/tokenizer"
	"github.com/mlerl/mlerl/schemas"
)

// Observation is what an agent sees before each action.
type Observation struct {
	// State is the structured state; Full and Compact its two renderings.
	State   State
	Full    string
	Compact string
	// Last is the previous step's result (nil before the first step).
	Last *env.StepResult
}

// Agent acts in one episode. Act returns the agent's raw response text.
type Agent interface {
	Act(ctx context.Context, obs Observation) (text string, usage llm.Usage, err error)
}

// Waiter is an Agent that answers in batches with other episodes' agents
// (episode.Lockstep): LastWait is how long its last Act waited for the
// others' requests before the batch it was answered in began, time the
// episode spent neither generating nor stepping.
type Waiter interface {
	LastWait() time.Duration
}

// Factory makes one Agent per episode. Name identifies it in datasets
// (trajectories.expert, eval_results.method).
type Factory interface {
	Name() string
	// Episode starts an episode with its plan (idea texts) and a seed; the
	// same seed and plan give the same behaviour.
	Episode(plan []string, seed int64) Agent
}

// Options shape the prompts of an episode.
type Options struct {
	// FullBudget and CompactBudget are the token budgets of the two
	// renderings, counted by Count.
	FullBudget    int
	CompactBudget int
	Count         Counter
	// CountName names Count: [CounterQwen3] or [CounterApprox].
	CountName string
	// MaxSteps is the environment's step limit (shown in the prompts).
	MaxSteps int
	// Format is the compact prompt's format (CompactFormat, or
	// CompactFormat1 for a rollout recorded before formats).
	Format int
}

// Compact renders s as the small policy's prompt with o's budget,
// counter and format.
func (o Options) Compact(s State) string {
	s.Format = o.Format
	return Compact(s, o.CompactBudget, o.Count)
}

// The prompts' default token budgets, the rollouts' (`full_budget`,
// `compact_budget`): the compact one is what the small policy's context
// holds (policy.DefaultConfig's prompt_tokens). Evaluation and PPO must
// render prompts with the budgets the rollouts used, which the steps
// manifest records ([Prompts]).
const (
	DefaultFullBudget    = 6000
	DefaultCompactBudget = 448
)

// Token counters by name, as manifests record them.
const (
	// CounterQwen3 is the Qwen3 tokenizer `make setup` installs.
	CounterQwen3 = "qwen3"
	// CounterApprox is [ApproxCounter]: 4 bytes a token.
	CounterApprox = "approx"
)

// NewOptions returns the options stages use: the given budgets and step
// limit, with tokens counted by the Qwen tokenizer when it is installed
// (`make setup`), approximately otherwise. Rollouts and evaluation must
// count the same way, so that the policy acts on the prompts it was
// trained on: a rollout records its [Prompts] and evaluation renders with
// [NewOptionsFor] of them.
func NewOptions(fullBudget, compactBudget, maxSteps int) Options {
	o := Options{FullBudget: fullBudget, CompactBudget: compactBudget, Count: ApproxCounter, CountName: CounterApprox, MaxSteps: maxSteps, Format: CompactFormat}
	if tok, err := tokenizer.Default(); err == nil {
		o.Count, o.CountName = tok.Count, CounterQwen3
	}
	return o
}

// Prompts is how an episode's prompts are rendered: the two budgets, the
// token counter and the compact prompt's format. A rollout records its
// own in the steps manifest (Extra "prompts") so that whatever acts on its
// tasks later (evaluation, PPO) renders the same prompts.
type Prompts struct {
	FullBudget    int    `json:"full_budget"`
	CompactBudget int    `json:"compact_budget"`
	Counter       string `json:"token_counter"`
	// Format 0 is a rollout's from before formats were recorded: format 1.
	Format int `json:"compact_format,omitempty"`
}

// DefaultPrompts are the prompts of a stage that has no rollout's to
// follow: the default budgets, the counter NewOptions picks, the current
// format.
func DefaultPrompts() Prompts {
	return Prompts{FullBudget: DefaultFullBudget, CompactBudget: DefaultCompactBudget, Format: CompactFormat}
}

// Prompts returns the settings o renders with.
func (o Options) Prompts() Prompts {
	return Prompts{FullBudget: o.FullBudget, CompactBudget: o.CompactBudget, Counter: o.CountName, Format: o.Format}
}

// NewOptionsFor returns the options that render prompts as p says. An
// empty counter is the one [NewOptions] picks; the Qwen3 counter without
// the tokenizer installed is an error (prompts counted another way would
// not be the ones recorded).
func NewOptionsFor(p Prompts, maxSteps int) (Options, error) {
	o := NewOptions(p.FullBudget, p.CompactBudget, maxSteps)
	switch {
	case p.Format == 0:
		o.Format = CompactFormat1
	case p.Format < 0 || p.Format > CompactFormat:
		return Options{}, fmt.Errorf("prompts of compact format %d: this binary renders formats %d to %d (a newer mlerl made them: use it)", p.Format, CompactFormat1, CompactFormat)
	default:
		o.Format = p.Format
	}
	switch p.Counter {
	case "", o.CountName:
		return o, nil
	case CounterApprox:
		o.Count, o.CountName = ApproxCounter, CounterApprox
		return o, nil
	case CounterQwen3:
		_, err := tokenizer.Default()
		return Options{}, fmt.Errorf("prompts were counted with the %s tokenizer, which is not loaded here (%v); run `make setup`", CounterQwen3, err)
	}
	return Options{}, fmt.Errorf("unknown token counter %q: want %s or %s", p.Counter, CounterQwen3, CounterApprox)
}

// Episode is a recorded episode.
type Episode struct {
	Trajectory schemas.Trajectory
	Steps      []schemas.Step
	// ActS, WaitS and StepS are the wall seconds the episode spent in the
	// agent's answers (a policy's generation, an LLM's calls), waiting for
	// the other episodes of the agent's batch (a [Waiter]'s LastWait,
	// taken out of ActS), and in the environment's steps (script runs,
	// replays of the execution cache included), summed over its steps.
	ActS, WaitS, StepS float64
	// Private holds the episode's scores on the private part of the hidden
	// answers (nil for a task without parts): what evaluation reports.
	// The trajectory's own scores are the public part's, which the agent
	// was told.
	Private *PrivateScores
}

// PrivateScores are an episode's scores on the private part of the
// hidden answers: the initial script's, the final submission's and the
// best-public submission's (nil before any valid run).
type PrivateScores struct {
	MInit, Final float64
	Best         *float64
}

// observed is what the agent may read of a step's result: r itself, or
// with the environment's feedback none a copy without hidden-test scores
// and rewards (a reward is a difference of scores).
func observed(e *env.Env, r *env.StepResult) *env.StepResult {
	if r == nil || e.Feedback() != env.FeedbackNone {
		return r
	}
	c := *r
	c.MetricBefore, c.MetricAfter, c.BestBefore = math.NaN(), nil, nil
	c.Reward = env.Reward{}
	return &c
}

// maxPromptScriptBytes bounds the train.py read into a prompt.
const maxPromptScriptBytes = 1 << 20

// RunEpisode lets agent act in e until the episode ends, snapshotting the
// state before every action so that any step can be restored. The
// trajectory's identity fields (id, task, expert, seed, plan) come from
// traj; the rest is filled in.
func RunEpisode(ctx context.Context, e *env.Env, agent Agent, traj schemas.Trajectory, plan []string, opts Options) (*Episode, error) {
	start := time.Now()
	ep := &Episode{Trajectory: traj}
	ep.Trajectory.MInit = e.Spec().MInit
	var last *env.StepResult
	for {
		if done, _ := e.Done(); done {
			break
		}
		st := StateOf(e, plan, opts.MaxSteps)
		obs := Observation{State: st, Full: Full(st, opts.FullBudget, opts.Count), Compact: opts.Compact(st), Last: observed(e, last)}
		snap, err := snapshot(ctx, e, traj)
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		text, usage, err := agent.Act(ctx, obs)
		if err != nil {
			return nil, fmt.Errorf("task %s, trajectory %s, step %d: agent: %w", traj.TaskID, traj.TrajectoryID, e.Steps()+1, err)
		}
		// The agent's thinking time counts against the episode's time limit.
		act := time.Since(t0)
		e.AddTime(act)
		var wait time.Duration
		if w, ok := agent.(Waiter); ok {
			wait = min(w.LastWait(), act)
		}
		ep.ActS += (act - wait).Seconds()
		ep.WaitS += wait.Seconds()
		tStep := time.Now()
		r, err := e.Step(ctx, text)
		ep.StepS += time.Since(tStep).Seconds()
		if err == env.ErrDone {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("task %s, trajectory %s, step %d: %w", traj.TaskID, traj.TrajectoryID, e.Steps(), err)
		}
		ep.Steps = append(ep.Steps, stepRow(traj, plan, obs, snap, text, r, usage, time.Since(t0)))
		ep.Trajectory.TotalReward += r.Reward.Total
		ep.Trajectory.Tokens += usage.PromptTokens + usage.CompletionTokens + r.Usage.PromptTokens + r.Usage.CompletionTokens
		ep.Trajectory.CostUSD += usage.CostUSD + r.Usage.CostUSD
		last = &r
	}
	if len(ep.Steps) > 0 {
		snap, err := snapshot(ctx, e, traj)
		if err != nil {
			return nil, err
		}
		for i := range ep.Steps {
			if i+1 < len(ep.Steps) {
				ep.Steps[i].SnapshotAfter = ep.Steps[i+1].SnapshotRef
			} else {
				ep.Steps[i].SnapshotAfter = snap
				ep.Steps[i].Done = true
			}
		}
	}
	_, reason := e.Done()
	t := &ep.Trajectory
	t.NumSteps = int32(len(ep.Steps))
	t.EndReason = reason
	if b, ok := e.Best(); ok {
		t.BestMetric = &b
	}
	if cur := e.Current(); last != nil {
		t.FinalMetric = &cur
	}
	if t.BestMetric != nil {
		t.Improved = better(e.Spec().Direction, *t.BestMetric, t.MInit)
	}
	if mi := e.Spec().MInitPrivate; mi != nil {
		cur, best := e.PrivateScores()
		ep.Private = &PrivateScores{MInit: *mi, Final: *mi, Best: best}
		if cur != nil {
			ep.Private.Final = *cur
		}
	}
	t.WallS = time.Since(start).Seconds()
	return ep, nil
}

// snapshot snapshots e; a state that cannot be kept (over the workspace
// quota, a workspace that cannot be read whole: env.ErrNotKept) is not
// (reference "", one line on stderr naming the step and why) and the
// episode goes on.
func snapshot(ctx context.Context, e *env.Env, traj schemas.Trajectory) (string, error) {
	snap, err := e.Snapshot(ctx)
	if errors.Is(err, env.ErrNotKept) {
		fmt.Fprintf(os.Stderr, "task %s, trajectory %s, after step %d: %v\n", traj.TaskID, traj.TrajectoryID, e.Steps(), err)
		return "", nil
	}
	return snap, err
}

func better(direction string, a, b float64) bool {
	if direction == schemas.LowerIsBetter {
		return a < b
	}
	return a > b
}

func stepRow(traj schemas.Trajectory, plan []string, obs Observation, snap, text string, r env.StepResult, usage llm.Usage, wall time.Duration) schemas.Step {
	s := schemas.Step{
		TaskID: traj.TaskID, TrajectoryID: traj.TrajectoryID, StepIndex: int32(r.Step - 1),
		State: obs.Full, CompactState: obs.Compact, Plan: plan,
		ActionText: text, Observation: r.Observation, Outcome: string(r.Outcome),
		MetricAfter: r.MetricAfter, BestBefore: r.BestBefore, Markers: r.Markers,
		Reward: r.Reward.Total, ExecS: r.ExecDuration.Seconds(), WallS: wall.Seconds(),
		PromptTokens: usage.PromptTokens + r.Usage.PromptTokens, CompletionTokens: usage.CompletionTokens + r.Usage.CompletionTokens,
		CostUSD: usage.CostUSD + r.Usage.CostUSD, SnapshotRef: snap,
	}
	mb := r.MetricBefore
	s.MetricBefore = &mb
	if r.Action != nil {
		s.ActionName = r.Action.Name
		s.ActionInput = r.Action.Input()
	}
	for _, t := range r.Reward.Terms {
		s.RewardTerms = append(s.RewardTerms, schemas.RewardTerm{Name: t.Name, Value: t.Value})
	}
	return s
}
