// Package rollout is the rollout stage: expert trajectories on the task
// suite, recorded as the `trajectories` and `steps` datasets (the SFT data
// and the pool of expert states that step-wise RL samples from).
//
// The whole flow is [Run]; the agents live in env/agents, the environment
// in env, and what the rollout shares with evaluate and serve-env (task
// selection, plans and seeds, run keys, the script runner, one episode in
// a fresh environment) in env/episode. The steps manifest records how the
// prompts were rendered (Extra "prompts"), which evaluation reads back.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/env/episode"
	"github.com/mlerl/mlerl/internal/config"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/llm"
	"github.com/mlerl/mlerl/internal/progress"
	"github.com/mlerl/mlerl/internal/shard"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/internal/textutil"
	"github.com/mlerl/mlerl/schemas"
)

// Config is the rollout stage's configuration.
type Config struct {
	episode.Source `yaml:",inline"`

	Trajectories  string   `yaml:"trajectories" help:"name of the trajectories dataset to write"`
	Steps         string   `yaml:"steps" help:"name of the steps dataset to write"`
	Split         string   `yaml:"split" help:"which tasks to roll out: held-in, held-out or all"`
	Only          []string `yaml:"only" help:"task ids to roll out (empty: all of the split)"`
	PerTask       int      `yaml:"per_task" help:"trajectories per task"`
	Seed          int64    `yaml:"seed" help:"run seed: the same seed gives the same plans and expert choices"`
	Shard         string   `yaml:"shard" help:"i/K: run only the i-th of K shards (0-based); empty: from JOB_COMPLETION_INDEX and MLERL_SHARDS when set, else all"`
	Workers       int      `yaml:"workers" help:"trajectories in parallel (0: one per core)"`
	FlushEvery    int      `yaml:"flush_every" help:"finished trajectories per part file (a crash loses at most the unflushed ones)"`
	Expert        string   `yaml:"expert" help:"scripted (built-in) or llm (needs llm.base_url)"`
	SlipRate      float64  `yaml:"slip_rate" help:"scripted expert: chance of a slip (malformed answer, wrong file) per step"`
	Temperature   float64  `yaml:"temperature" help:"llm expert: sampling temperature"`
	Warm          bool     `yaml:"warm" help:"run scripts in the warm Python worker (falls back to cold processes)"`
	FullBudget    int      `yaml:"full_budget" help:"token budget of the full (LLM) prompt"`
	CompactBudget int      `yaml:"compact_budget" help:"token budget of the compact (small policy) prompt"`

	Env env.Config `yaml:"env"`
	LLM llm.Config `yaml:"llm"`
}

// DefaultConfig returns the embedded default: 20 scripted trajectories per
// held-in task, 15 steps and 30 minutes each.
func DefaultConfig() Config {
	return Config{
		Source: episode.DefaultSource(), Trajectories: "trajectories", Steps: "steps",
		Split: schemas.HeldIn, PerTask: 20, Seed: 1, FlushEvery: 8, Expert: "scripted", SlipRate: 0.06,
		Temperature: 0.7, Warm: true, FullBudget: 6000, CompactBudget: 448,
		Env: env.DefaultConfig(), LLM: llm.DefaultConfig(),
	}
}

// Validate implements config.Validator: every field, before anything is
// read or written.
func (c *Config) Validate() error {
	if err := c.Source.Validate(); err != nil {
		return err
	}
	switch {
	case c.Trajectories == "":
		return config.Errorf("trajectories", c.Trajectories, "must name the dataset to write")
	case c.Steps == "":
		return config.Errorf("steps", c.Steps, "must name the dataset to write")
	case c.Steps == c.Trajectories:
		return config.Errorf("steps", c.Steps, "must differ from trajectories")
	}
	switch c.Split {
	case schemas.HeldIn, schemas.HeldOut, "all":
	default:
		return config.Errorf("split", c.Split, "want %s, %s or all", schemas.HeldIn, schemas.HeldOut)
	}
	if i := slices.Index(c.Only, ""); i >= 0 {
		return config.Errorf("only", c.Only, "item %d is empty: want task ids", i+1)
	}
	if _, err := shard.Parse(c.Shard); err != nil {
		return config.Errorf("shard", c.Shard, "want i/K with 0 <= i < K (e.g. 2/8)")
	}
	if _, err := shard.Resolve(c.Shard, os.Getenv); err != nil {
		return err // the Job's environment variables disagree
	}
	switch c.Expert {
	case "scripted":
	case "llm":
		if !c.LLM.Enabled() {
			return config.Errorf("expert", c.Expert, "needs llm.base_url (an OpenAI-compatible endpoint)")
		}
	default:
		return config.Errorf("expert", c.Expert, "want scripted or llm")
	}
	switch {
	case c.PerTask < 1:
		return config.Errorf("per_task", c.PerTask, "must be at least 1")
	case c.Workers < 0:
		return config.Errorf("workers", c.Workers, "must not be negative (0: one per core)")
	case c.FlushEvery < 1:
		return config.Errorf("flush_every", c.FlushEvery, "must be at least 1")
	case !(c.SlipRate >= 0 && c.SlipRate <= 1):
		return config.Errorf("slip_rate", c.SlipRate, "must be in [0, 1] (a probability per step)")
	case !(c.Temperature >= 0) || math.IsInf(c.Temperature, 0):
		return config.Errorf("temperature", c.Temperature, "must be a number >= 0")
	case c.FullBudget < 1:
		return config.Errorf("full_budget", c.FullBudget, "must be positive (tokens)")
	case c.CompactBudget < 1:
		return config.Errorf("compact_budget", c.CompactBudget, "must be positive (tokens)")
	}
	if err := config.Nest("env", c.Env.Validate()); err != nil {
		return err
	}
	if c.Env.EditorKind == env.EditorLLM && !c.LLM.Enabled() {
		return config.Errorf("env.editor", c.Env.EditorKind, "needs llm.base_url (an OpenAI-compatible endpoint)")
	}
	return config.Nest("llm", c.LLM.Validate())
}

// Derive implements config.Deriver: in a Kubernetes Indexed Job the shard
// comes from JOB_COMPLETION_INDEX and MLERL_SHARDS (see internal/shard),
// so the resolved config printed and stored says which shard ran.
func (c *Config) Derive() {
	if s, err := shard.Resolve(c.Shard, os.Getenv); err == nil && c.Shard == "" && s != shard.All {
		c.Shard = s.String()
	}
}

// inputs are the data root a rollout reads and writes, and the tasks of
// its split with their kept ideas.
type inputs struct {
	st store.Store
	*episode.Inputs
}

func loadInputs(ctx context.Context, cfg Config) (*inputs, error) {
	st, err := store.Open(ctx, cfg.Data)
	if err != nil {
		return nil, err
	}
	var splits []string // "all": every split
	if cfg.Split != "all" {
		splits = []string{cfg.Split}
	}
	in, err := episode.Load(ctx, st, cfg.Tasks, cfg.Ideas, splits, cfg.Only)
	if err != nil {
		return nil, fmt.Errorf("rollout: %w", err)
	}
	return &inputs{st: st, Inputs: in}, nil
}

// Run rolls out the experts and writes the trajectories and steps datasets.
// Rerun after a crash with the same config, it resumes: finished
// trajectories (those in flushed part files) are skipped, and steps of
// trajectories whose part was not completed are dropped and redone, so no
// row is duplicated or lost.
//
// Sharded (cfg.Shard "i/K", or a Kubernetes Indexed Job's environment, see
// internal/shard), each process runs every K-th trajectory into the same
// pending version (found by run key) and writes its own part files; the
// process that sees every trajectory written commits, and [Commit] does
// the same as a separate step. A rerun once the run is committed does
// nothing.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("rollout: %w", err)
	}
	sh, err := shard.Resolve(cfg.Shard, os.Getenv)
	if err != nil {
		return err
	}
	shard, shards := sh.Index, sh.Count

	// 1. Inputs: the tasks of the split and their kept ideas.
	in, err := loadInputs(ctx, cfg)
	if err != nil {
		return err
	}
	st, tasksM, ideasM, tasks := in.st, in.TasksM, in.IdeasM, in.Tasks

	// 2. The work list: every trajectory of this shard, with its plan.
	var jobs []episode.Job
	g := 0
	for _, t := range tasks {
		for i := 0; i < cfg.PerTask; i, g = i+1, g+1 {
			if !sh.Owns(g) {
				continue
			}
			id := trajectoryID(t.TaskID, i)
			seed := episode.Seed(cfg.Seed, id)
			plan, err := in.Plan(t.TaskID, seed)
			if err != nil {
				return fmt.Errorf("rollout: %w", err)
			}
			jobs = append(jobs, episode.Job{Task: t, ID: id, Seed: seed, Plan: plan})
		}
	}

	// 3. Resume: open (or find) the pending versions and skip what is done.
	key := runKey(cfg, tasksM, ideasM)
	if done, err := committedRun(ctx, cfg, in, key); err != nil || done {
		return err
	}
	// What can fail on this machine (no Python, no LLM client) fails
	// before a version is opened.
	envCfg, closeRunner, err := episode.Setup(ctx, cfg.Env, cfg.LLM, cfg.Warm, func(err error) {
		if ctx.Err() == nil { // else the run is stopping: not worth a line
			fmt.Fprintf(os.Stderr, "rollout: warm worker unavailable (%v); using cold processes\n", err)
		}
	})
	if err != nil {
		return err
	}
	defer closeRunner()
	factory, err := newExpert(cfg)
	if err != nil {
		return err
	}
	opts := promptOptions(cfg)
	trajP, err := datasets.Begin(ctx, st, cfg.Trajectories, schemas.Trajectories, key)
	if err != nil {
		return err
	}
	stepsP, err := beginSteps(ctx, st, cfg, key)
	if err != nil {
		return err
	}
	done, nextSeq, err := resume(ctx, trajP, stepsP, shard, shards)
	if err != nil {
		return err
	}
	todo := slices.DeleteFunc(slices.Clone(jobs), func(j episode.Job) bool { return done[j.ID] })
	fmt.Fprintf(os.Stderr, "rollout: %d tasks, shard %d/%d: %d trajectories, %d already done, writing %s and %s\n",
		len(tasks), shard, shards, len(jobs), len(jobs)-len(todo), trajP.URI(), stepsP.URI())

	// 4. Run the trajectories in parallel; a writer flushes finished ones.
	workers := cfg.Workers
	if workers <= 0 {
		workers = runtime.NumCPU()
	}
	bar := progress.New("rollout", len(todo))
	results := make(chan *agents.Episode)
	w := &partWriter{trajP: trajP, stepsP: stepsP, shard: shard, shards: shards, seq: nextSeq, every: cfg.FlushEvery}
	var writeErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		writeErr = w.consume(ctx, results)
	}()
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(workers)
	for _, j := range todo {
		eg.Go(func() error {
			ep, err := runOne(ectx, st, envCfg, factory, opts, j, shard)
			if err != nil {
				return err
			}
			select {
			case results <- ep:
			case <-ectx.Done():
				return ectx.Err()
			}
			bar.Add(1, j.ID)
			return nil
		})
	}
	runErr := eg.Wait()
	close(results)
	wg.Wait()
	if ctx.Err() != nil && writeErr == nil { // a signal: the finished trajectories are written
		return bar.Interrupted(ctx.Err(), w.written, "trajectories", "rerun the same command to resume (the pending version keeps them)")
	}
	bar.Done()
	if err := errors.Join(runErr, writeErr); err != nil {
		return fmt.Errorf("rollout: %w (rerun the same command to resume; finished trajectories are kept)", err)
	}
	if line := envCfg.ExecCache.Stats().String(); line != "" {
		fmt.Fprintf(os.Stderr, "rollout: %s\n", line)
	}
	fmt.Fprintf(os.Stderr, "rollout: %s\n", envCfg.Blobs)

	// 5. Commit when every shard's trajectories are in.
	_, err = commitIfComplete(ctx, cfg, in, trajP, stepsP, factory.Name(), sh)
	return err
}

// Commit is the commit step of a sharded rollout (`mlerl rollout commit`):
// with the same config as the shards, it finds their pending version and
// writes the manifests once every trajectory is written. It is idempotent
// and safe to run concurrently with another commit or with the last shard
// (manifests are created only if absent: the GCS generation precondition),
// and when parts are missing it fails naming the shards to rerun.
func Commit(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("rollout commit: %w", err)
	}
	in, err := loadInputs(ctx, cfg)
	if err != nil {
		return err
	}
	key := runKey(cfg, in.TasksM, in.IdeasM)
	if done, err := committedRun(ctx, cfg, in, key); err != nil || done {
		return err
	}
	trajP, err := datasets.FindPending(ctx, in.st, cfg.Trajectories, schemas.Trajectories, key)
	if err != nil {
		return err
	}
	if trajP == nil {
		return fmt.Errorf("rollout commit: no pending %s version for run key %s in %s: run the shards first, with the same config", cfg.Trajectories, key, cfg.Data)
	}
	stepsP, err := beginSteps(ctx, in.st, cfg, key)
	if err != nil {
		return err
	}
	factory, err := newExpert(cfg)
	if err != nil {
		return err
	}
	complete, err := commitIfComplete(ctx, cfg, in, trajP, stepsP, factory.Name(), shard.All)
	if err != nil {
		return err
	}
	if !complete {
		return fmt.Errorf("rollout commit: %s is incomplete: %w", trajP.URI(), missingShards(ctx, cfg, in, trajP))
	}
	return nil
}

// beginSteps resumes the run's steps version, or its committed manifest's
// version when a commit died between the steps and trajectories manifests.
func beginSteps(ctx context.Context, st store.Store, cfg Config, key string) (*datasets.Pending, error) {
	if m, err := datasets.FindRun(ctx, st, cfg.Steps, key); err != nil {
		return nil, err
	} else if m != nil {
		return &datasets.Pending{St: st, Name: m.Name, Version: m.Version, Schema: schemas.Steps, RunKey: key}, nil
	}
	return datasets.Begin(ctx, st, cfg.Steps, schemas.Steps, key)
}

// commitIfComplete commits the run when every trajectory of every shard is
// written, and reports whether it was.
func commitIfComplete(ctx context.Context, cfg Config, in *inputs, trajP, stepsP *datasets.Pending, expert string, sh shard.Shard) (bool, error) {
	all, err := datasets.ReadPending[schemas.Trajectory](ctx, trajP)
	if err != nil {
		return false, err
	}
	want := len(in.Tasks) * cfg.PerTask
	if len(all) < want {
		fmt.Fprintf(os.Stderr, "rollout: shard %s done; %d of %d trajectories written; the last shard to finish commits (or run `mlerl rollout commit`)\n", sh, len(all), want)
		return false, nil
	}
	parents := []datasets.Parent{in.TasksM.Ref(), in.IdeasM.Ref()}
	producer := datasets.NewProducer(cfg)
	steps, err := datasets.ReadPending[schemas.Step](ctx, stepsP)
	if err != nil {
		return false, err
	}
	extra := stepExtra(all, steps)
	extra["expert"] = expert
	// How the steps' prompts were rendered, for whatever renders prompts
	// of these tasks later (evaluation: see episode.PromptsOf).
	extra[episode.PromptsKey] = promptOptions(cfg).Prompts()
	summary := extra["summary"].([]TaskSummary)
	sm, err := stepsP.Commit(ctx, datasets.CommitOptions{Producer: producer, Parents: parents, Extra: extra})
	if err != nil {
		return false, err
	}
	tm, err := trajP.Commit(ctx, datasets.CommitOptions{Producer: producer, Parents: append(parents, sm.Ref()), Extra: extra})
	if err != nil {
		return false, err
	}
	printSummary(os.Stdout, summary)
	fmt.Printf("actions:  %s\noutcomes: %s\n", counts(extra["actions"].(map[string]int)), counts(extra["outcomes"].(map[string]int)))
	fmt.Fprintf(os.Stderr, "rollout: committed %s v%d (%d rows) and %s v%d (%d rows)\n", tm.Name, tm.Version, tm.Rows, sm.Name, sm.Version, sm.Rows)
	return true, nil
}

// missingShards says which shards' trajectories are not all written.
func missingShards(ctx context.Context, cfg Config, in *inputs, trajP *datasets.Pending) error {
	have := map[string]bool{}
	rows, err := datasets.ReadPending[schemas.Trajectory](ctx, trajP)
	if err != nil {
		return err
	}
	for _, r := range rows {
		have[r.TrajectoryID] = true
	}
	// The shard count is in the part names: shard-<i>-of-<K>-part-<n>.
	shards := 1
	parts, err := trajP.Parts(ctx)
	if err != nil {
		return err
	}
	for _, p := range parts {
		var i, k, n int
		if _, err := fmt.Sscanf(p, "shard-%d-of-%d-part-%d.parquet", &i, &k, &n); err == nil && k > shards {
			shards = k
		}
	}
	missing := map[int]int{}
	g := 0
	for _, t := range in.Tasks {
		for i := 0; i < cfg.PerTask; i, g = i+1, g+1 {
			if !have[trajectoryID(t.TaskID, i)] {
				missing[g%shards]++
			}
		}
	}
	var list []string
	for i := 0; i < shards; i++ {
		if missing[i] > 0 {
			list = append(list, fmt.Sprintf("shard %d/%d (%d trajectories)", i, shards, missing[i]))
		}
	}
	return fmt.Errorf("%d of %d trajectories written; missing: %s; rerun those shards with the same config", len(rows), len(in.Tasks)*cfg.PerTask, strings.Join(list, ", "))
}

// runKey identifies a rollout: everything that changes its rows (not
// workers, shard or flushing).
func runKey(cfg Config, tasks, ideas *datasets.Manifest) string {
	c := cfg
	c.Workers, c.Shard, c.FlushEvery, c.Data = 0, "", 0, ""
	return episode.RunKey(tasks, ideas, c)
}

// trajectoryID names trajectory i of a task.
func trajectoryID(task string, i int) string {
	return fmt.Sprintf("%s-%04d", task, i)
}

// promptOptions are the options the experts' prompts are rendered with:
// the configured budgets, counted by the tokenizer when it is installed.
func promptOptions(cfg Config) agents.Options {
	return agents.NewOptions(cfg.FullBudget, cfg.CompactBudget, cfg.Env.MaxSteps)
}

func newExpert(cfg Config) (agents.Factory, error) {
	if cfg.Expert == "llm" {
		c, err := llm.New(cfg.LLM)
		if err != nil {
			return nil, err
		}
		return agents.LLM{Client: c, Temperature: cfg.Temperature}, nil
	}
	return agents.Scripted{SlipRate: cfg.SlipRate}, nil
}

// runOne runs one trajectory in a fresh environment.
func runOne(ctx context.Context, st store.Store, envCfg env.Config, factory agents.Factory, opts agents.Options, j episode.Job, shard int) (*agents.Episode, error) {
	ep, err := episode.Run(ctx, st, envCfg, opts, j, factory.Name(), factory.Episode(j.PlanTexts(), j.Seed))
	if err != nil {
		return nil, err
	}
	ep.Trajectory.Shard = int32(shard)
	return ep, nil
}

// partWriter buffers finished episodes and writes them as numbered part
// files: the steps part first, then the trajectories part of the same
// name, which marks the trajectories done.
type partWriter struct {
	trajP, stepsP *datasets.Pending
	shard, shards int
	seq, every    int
	buf           []*agents.Episode
	written       int // trajectories written by this run
}

func partName(shard, shards, seq int) string {
	return fmt.Sprintf("shard-%03d-of-%03d-part-%05d.parquet", shard, shards, seq)
}

func (w *partWriter) consume(ctx context.Context, in <-chan *agents.Episode) error {
	// Finished trajectories are written even when the run is interrupted:
	// they took minutes, the write takes a moment.
	ctx = context.WithoutCancel(ctx)
	var err error
	for ep := range in {
		if err != nil {
			continue // keep draining so workers do not block
		}
		w.buf = append(w.buf, ep)
		if len(w.buf) >= w.every {
			err = w.flush(ctx)
		}
	}
	if err == nil && len(w.buf) > 0 {
		err = w.flush(ctx)
	}
	return err
}

func (w *partWriter) flush(ctx context.Context) error {
	// Sort so the part's content does not depend on completion order.
	sort.Slice(w.buf, func(i, j int) bool { return w.buf[i].Trajectory.TrajectoryID < w.buf[j].Trajectory.TrajectoryID })
	var trajs []schemas.Trajectory
	var steps []schemas.Step
	for _, ep := range w.buf {
		trajs = append(trajs, ep.Trajectory)
		steps = append(steps, ep.Steps...)
	}
	name := partName(w.shard, w.shards, w.seq)
	if err := datasets.WritePart(ctx, w.stepsP, name, steps); err != nil {
		return err
	}
	if err := datasets.WritePart(ctx, w.trajP, name, trajs); err != nil {
		return err
	}
	w.seq++
	w.written += len(trajs)
	w.buf = w.buf[:0]
	if afterPartFlush != nil {
		afterPartFlush(w.written)
	}
	return nil
}

// afterPartFlush, when set (tests only), is called after every part is
// written with the trajectories this run has written; the kill test
// SIGKILLs its own process from it.
var afterPartFlush func(written int)

// resume lists the trajectories already written by this shard, removes
// steps parts whose trajectories part never landed, and returns the next
// part number.
func resume(ctx context.Context, trajP, stepsP *datasets.Pending, shard, shards int) (map[string]bool, int, error) {
	prefix := fmt.Sprintf("shard-%03d-of-%03d-part-", shard, shards)
	trajParts, err := trajP.Parts(ctx)
	if err != nil {
		return nil, 0, err
	}
	have := map[string]bool{}
	done := map[string]bool{}
	next := 0
	for _, p := range trajParts {
		if !strings.HasPrefix(p, prefix) {
			continue
		}
		have[p] = true
		if n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(p, prefix), ".parquet")); err == nil && n >= next {
			next = n + 1
		}
		rows, err := datasets.ReadPart[schemas.Trajectory](ctx, trajP, p)
		if err != nil {
			return nil, 0, err
		}
		for _, r := range rows {
			done[r.TrajectoryID] = true
		}
	}
	stepParts, err := stepsP.Parts(ctx)
	if err != nil {
		return nil, 0, err
	}
	for _, p := range stepParts {
		if strings.HasPrefix(p, prefix) && !have[p] {
			if err := stepsP.St.Delete(ctx, stepsP.Dir()+"/"+p); err != nil {
				return nil, 0, err
			}
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(p, prefix), ".parquet"))
			if n >= next {
				next = n + 1
			}
		}
	}
	return done, next, nil
}

// counts writes a tally as "name n, name n", the most frequent first.
func counts(m map[string]int) string {
	keys := textutil.ByCount(m)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func countBy[T any](rows []T, key func(T) string) map[string]int {
	out := map[string]int{}
	for _, r := range rows {
		k := key(r)
		if k == "" {
			k = "(none)"
		}
		out[k]++
	}
	return out
}

// TaskSummary is one task's line of the end-of-run summary.
type TaskSummary struct {
	TaskID       string  `json:"task_id"`
	Trajectories int     `json:"trajectories"`
	MeanSteps    float64 `json:"mean_steps"`
	Improved     float64 `json:"improved_share"`
	ErrorRate    float64 `json:"error_rate"` // share of steps that failed (format, refused, crashed...)
	MeanReward   float64 `json:"mean_reward"`
	MeanWallS    float64 `json:"mean_wall_s"`
}

func summarize(trajs []schemas.Trajectory, steps []schemas.Step) []TaskSummary {
	by := map[string]*TaskSummary{}
	stepsOf, errorsOf := map[string]int{}, map[string]int{}
	for _, s := range steps {
		stepsOf[s.TaskID]++
		if s.Outcome != string(env.OutcomeSuccess) {
			errorsOf[s.TaskID]++
		}
	}
	var ids []string
	for _, t := range trajs {
		s := by[t.TaskID]
		if s == nil {
			s = &TaskSummary{TaskID: t.TaskID}
			by[t.TaskID] = s
			ids = append(ids, t.TaskID)
		}
		s.Trajectories++
		s.MeanSteps += float64(t.NumSteps)
		if t.Improved {
			s.Improved++
		}
		s.MeanReward += t.TotalReward
		s.MeanWallS += t.WallS
	}
	sort.Strings(ids)
	out := make([]TaskSummary, len(ids))
	for i, id := range ids {
		s := by[id]
		n := float64(s.Trajectories)
		s.MeanSteps /= n
		s.Improved /= n
		s.MeanReward /= n
		s.MeanWallS /= n
		if stepsOf[id] > 0 {
			s.ErrorRate = float64(errorsOf[id]) / float64(stepsOf[id])
		}
		out[i] = *s
	}
	return out
}

func printSummary(f *os.File, sum []TaskSummary) {
	tw := tabwriter.NewWriter(f, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tTRAJECTORIES\tMEAN STEPS\tIMPROVED\tERROR RATE\tMEAN REWARD\tMEAN TIME")
	for _, s := range sum {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.0f%%\t%.0f%%\t%.2f\t%s\n", s.TaskID, s.Trajectories, s.MeanSteps, 100*s.Improved, 100*s.ErrorRate, s.MeanReward, time.Duration(s.MeanWallS*float64(time.Second)).Round(time.Millisecond))
	}
	tw.Flush()
}
