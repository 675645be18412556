package evaluate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/env/episode"
	"github.com/mlerl/mlerl/internal/config"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/llm"
	"github.com/mlerl/mlerl/internal/progress"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/internal/textutil"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/schemas"
)

// Method names, in report order.
const (
	MethodInitial = "initial"
	MethodRandom  = "random"
	MethodExpert  = "expert"
	MethodLLM     = "llm"
	MethodSFT     = "sft"
	MethodPPO     = "sft+ppo"
	// MethodPolicy is the Hugging Face policy the policy key names (with
	// its adapter), evaluated as it is: a base model, or one fine-tuned
	// elsewhere.
	MethodPolicy = "policy"
)

// AllMethods lists every method in report order.
var AllMethods = []string{MethodInitial, MethodRandom, MethodExpert, MethodLLM, MethodSFT, MethodPPO, MethodPolicy}

// Config is the evaluation stage's configuration.
type Config struct {
	episode.Source `yaml:",inline"`

	Out     string   `yaml:"out" help:"name of the eval_results dataset to write"`
	Splits  []string `yaml:"splits" help:"splits to evaluate, each reported separately: held-out, held-in"`
	Only    []string `yaml:"only" help:"task ids to evaluate (empty: every task of the splits)"`
	Methods []string `yaml:"methods" help:"methods: initial, random, expert, llm (needs llm.base_url), sft, sft+ppo, policy (the Hugging Face folder the policy key names); llm without an endpoint and policies without a checkpoint are skipped with a note"`
	PerTask int      `yaml:"per_task" help:"trajectories per task and method (avg@N, best@N)"`
	// PolicyPerTask trades statistical power for time: on CPU the trained
	// policies' generation is the slowest part of an evaluation.
	PolicyPerTask int    `yaml:"policy_per_task" help:"trajectories per task for the trained policies (sft, sft+ppo), the first of per_task's (0: per_task)"`
	Seed          int64  `yaml:"seed" help:"run seed: trajectory i of a task gets the same seed and plan for every method"`
	Workers       int    `yaml:"workers" help:"episodes in parallel (0: one per core)"`
	SFT           string `yaml:"sft" help:"SFT checkpoint folder in the data root (its latest step)"`
	PPO           string `yaml:"ppo" help:"PPO checkpoint folder in the data root (the checkpoint ppo_checkpoint names)"`
	// PPOCheckpoint: the checkpoint train ppo selected by its declared
	// rule (its selection.json), or the last one.
	PPOCheckpoint string `yaml:"ppo_checkpoint" help:"which PPO checkpoint: selected (the one train ppo selected by its rule, select.rule in its config; the latest when the run selected none) or last"`
	// Policy is a Hugging Face policy evaluated as it is (method policy).
	Policy  string         `yaml:"policy" help:"method policy: the Hugging Face checkpoint folder or GGUF model file to evaluate, hf:DIR or gguf:FILE (a base model, or with adapter one fine-tuned elsewhere); sft and sft+ppo checkpoints of a Hugging Face policy need no key (their policy.json names the base)"`
	Adapter string         `yaml:"adapter" help:"method policy: a PEFT LoRA adapter folder on the policy's base (e.g. one LLaMA-Factory or mlerl trained; empty: the base as it is)"`
	Budgets policy.Budgets `yaml:"model"`
	// The policies' sampling.
	Temperature  float64 `yaml:"temperature" help:"policy sampling temperature (0: greedy)"`
	TopP         float64 `yaml:"top_p" help:"policy nucleus sampling threshold"`
	MaxNewTokens int     `yaml:"max_new_tokens" help:"longest policy answer in tokens (0: the policy's response_tokens)"`
	Engine       string  `yaml:"engine" help:"policy engine: native (CPU) or gomlx (GoMLX; XLA on a GPU with GOMLX_BACKEND=xla:cuda)"`
	Decode       string  `yaml:"decode" help:"policy decoding: constrained (the action grammar) or free"`
	Activations  string  `yaml:"activations" help:"native engine, a base kept in quantized blocks (a GGUF file's): fp32 multiplies float32 inputs by the blocks; int8 quantizes the inputs per block and sums in integers as llama.cpp does (about twice the decoding speed with AVX512_VNNI, logits within policy/native's Int8Bound of fp32's)"`
	// The baselines' settings (as in the rollouts).
	SlipRate       float64 `yaml:"slip_rate" help:"expert: chance of a slip per step (the rollouts' setting)"`
	LLMTemperature float64 `yaml:"llm_temperature" help:"llm agent: sampling temperature"`
	// The environment (as in the rollouts).
	Warm bool `yaml:"warm" help:"run scripts in the warm Python worker (falls back to cold processes)"`
	// Steps names the rollout whose prompts the evaluation renders like.
	Steps  string     `yaml:"steps" help:"steps dataset of the rollout the policies learned from (name, or name/vN): prompts are rendered with the token budgets and counter its manifest records (empty: the default budgets)"`
	Report string     `yaml:"report" help:"local folder for report.md and the plots (empty: reports/eval-v<N>/ in the data root)"`
	Env    env.Config `yaml:"env"`
	LLM    llm.Config `yaml:"llm"`
}

// DefaultConfig returns 8 trajectories per held-out task and method, the
// rollouts' environment limits (15 steps, 30 minutes), and the checkpoint
// folders `mlerl train sft|ppo` write by default.
func DefaultConfig() Config {
	return Config{
		Source: episode.DefaultSource(), Out: schemas.EvalResults.Name,
		Splits: []string{schemas.HeldOut}, Methods: slices.DeleteFunc(slices.Clone(AllMethods), func(m string) bool { return m == MethodPolicy }), PerTask: 8, Seed: 1,
		SFT: "checkpoints/sft", PPO: "checkpoints/ppo", PPOCheckpoint: policy.CheckpointSelected, Engine: policy.EngineNative, Decode: policy.DecodeConstrained, Activations: policy.ActivationsFP32,
		Temperature: 0.7, TopP: 0.95, Budgets: policy.DefaultBudgets(),
		SlipRate: 0.06, LLMTemperature: 0.7, Warm: true,
		Steps: "steps",
		Env:   env.DefaultConfig(), LLM: llm.DefaultConfig(),
	}
}

// Validate implements config.Validator: every field, before anything is
// read or written.
func (c *Config) Validate() error {
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	if err := c.Source.Validate(); err != nil {
		return err
	}
	switch {
	case c.Out == "":
		return config.Errorf("out", c.Out, "must name the dataset to write")
	case len(c.Splits) == 0:
		return config.Errorf("splits", c.Splits, "must name %s, %s or both", schemas.HeldOut, schemas.HeldIn)
	case len(c.Methods) == 0:
		return config.Errorf("methods", c.Methods, "must name some of %s", strings.Join(AllMethods, ", "))
	case c.Engine != policy.EngineNative && c.Engine != policy.EngineGoMLX:
		return config.Errorf("engine", c.Engine, "want %s or %s", policy.EngineNative, policy.EngineGoMLX)
	case c.Decode != policy.DecodeConstrained && c.Decode != policy.DecodeFree:
		return config.Errorf("decode", c.Decode, "want %s or %s", policy.DecodeConstrained, policy.DecodeFree)
	case c.Activations != "" && c.Activations != policy.ActivationsFP32 && c.Activations != policy.ActivationsInt8:
		return config.Errorf("activations", c.Activations, "want %s or %s", policy.ActivationsFP32, policy.ActivationsInt8)
	}
	if c.Policy != "" {
		switch kind, _, err := policy.ParseSpec(c.Policy); {
		case err != nil:
			return config.Errorf("policy", c.Policy, "%v", err)
		case kind == policy.KindMLERL:
			return config.Errorf("policy", c.Policy, "names mlerl's own model, which is evaluated from its checkpoints (methods sft, sft+ppo): method %s prompts a pretrained model as it is (hf:DIR)", MethodPolicy)
		}
	}
	for i, s := range c.Splits {
		if s != schemas.HeldOut && s != schemas.HeldIn {
			return config.Errorf("splits", c.Splits, "item %d %q is not %s or %s", i+1, s, schemas.HeldOut, schemas.HeldIn)
		}
		if slices.Index(c.Splits, s) < i {
			return config.Errorf("splits", c.Splits, "%q is listed twice", s)
		}
	}
	for i, m := range c.Methods {
		if !slices.Contains(AllMethods, m) {
			return config.Errorf("methods", c.Methods, "item %d %q is not one of %s", i+1, m, strings.Join(AllMethods, ", "))
		}
		if slices.Index(c.Methods, m) < i {
			return config.Errorf("methods", c.Methods, "%q is listed twice", m)
		}
	}
	if i := slices.Index(c.Only, ""); i >= 0 {
		return config.Errorf("only", c.Only, "item %d is empty: want task ids", i+1)
	}
	switch {
	case c.PerTask < 1:
		return config.Errorf("per_task", c.PerTask, "must be at least 1")
	case c.PolicyPerTask < 0 || c.PolicyPerTask > c.PerTask:
		return config.Errorf("policy_per_task", c.PolicyPerTask, "must be in [0, per_task] (0: per_task, which is %d)", c.PerTask)
	case c.Workers < 0:
		return config.Errorf("workers", c.Workers, "must not be negative (0: one per core)")
	case c.SFT == "" && slices.Contains(c.Methods, MethodSFT):
		return config.Errorf("sft", c.SFT, "must name the SFT checkpoint folder (method %s is on)", MethodSFT)
	case c.PPO == "" && slices.Contains(c.Methods, MethodPPO):
		return config.Errorf("ppo", c.PPO, "must name the PPO checkpoint folder (method %s is on)", MethodPPO)
	case c.Policy != "" && !slices.Contains(c.Methods, MethodPolicy):
		return config.Errorf("policy", c.Policy, "is evaluated as method %s: add it to methods (e.g. --methods initial,%s)", MethodPolicy, MethodPolicy)
	case c.Policy == "" && slices.Contains(c.Methods, MethodPolicy):
		return config.Errorf("methods", c.Methods, "method %s evaluates the Hugging Face folder the policy key names: give --policy hf:DIR", MethodPolicy)
	case c.Adapter != "" && c.Policy == "":
		return config.Errorf("adapter", c.Adapter, "is a PEFT adapter of a Hugging Face model: it needs policy hf:DIR, its base")
	case c.PPOCheckpoint != policy.CheckpointSelected && c.PPOCheckpoint != policy.CheckpointLast:
		return config.Errorf("ppo_checkpoint", c.PPOCheckpoint, "want %s or %s", policy.CheckpointSelected, policy.CheckpointLast)
	case !(c.Temperature >= 0) || !finite(c.Temperature):
		return config.Errorf("temperature", c.Temperature, "must be a number >= 0 (0: greedy)")
	case !(c.TopP > 0 && c.TopP <= 1):
		return config.Errorf("top_p", c.TopP, "must be in (0, 1]")
	case c.MaxNewTokens < 0:
		return config.Errorf("max_new_tokens", c.MaxNewTokens, "must not be negative (0: the policy's response_tokens)")
	case !(c.SlipRate >= 0 && c.SlipRate <= 1):
		return config.Errorf("slip_rate", c.SlipRate, "must be in [0, 1] (a probability per step)")
	case !(c.LLMTemperature >= 0) || !finite(c.LLMTemperature):
		return config.Errorf("llm_temperature", c.LLMTemperature, "must be a number >= 0")
	}
	if err := config.Nest("model", c.Budgets.Validate()); err != nil {
		return err
	}
	if err := config.Nest("env", c.Env.Validate()); err != nil {
		return err
	}
	if c.Env.EditorKind == env.EditorLLM && !c.LLM.Enabled() {
		return config.Errorf("env.editor", c.Env.EditorKind, "needs llm.base_url (an OpenAI-compatible endpoint)")
	}
	return config.Nest("llm", c.LLM.Validate())
}

// method is one evaluated agent.
type method struct {
	name    string
	factory agents.Factory     // nil for initial
	batch   episode.BatchActor // the trained policies: episodes run in lockstep
	source  string             // checkpoint or endpoint, for the report
	// sameAsSFT, for sft+ppo: why the checkpoint read holds the SFT
	// weights (the run selected update 0), else "".
	sameAsSFT string
}

// item is one evaluation trajectory of a task.
type item struct {
	index int
	seed  int64
	plan  []schemas.Idea
}

// job is one method's trajectories of one task that run together: one
// trajectory for the baselines, all of them for a trained policy (run in
// lockstep so that its generation is batched).
type job struct {
	method *method
	task   schemas.Task
	items  []item
}

// Run evaluates the methods and writes the eval_results dataset and the
// report. Rerun after a crash with the same config, it resumes: a (method,
// task) whose part file was written is not run again.
func Run(ctx context.Context, cfg Config) error {
	return run(ctx, cfg, os.Stdout, os.Stderr)
}

func run(ctx context.Context, cfg Config, out, log io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("evaluate: %w", err)
	}
	st, err := store.Open(ctx, cfg.Data)
	if err != nil {
		return err
	}

	// 1. Inputs: the tasks of the splits and their kept ideas, and how the
	// rollout rendered its prompts.
	in, err := episode.Load(ctx, st, cfg.Tasks, cfg.Ideas, cfg.Splits, cfg.Only)
	if err != nil {
		return fmt.Errorf("evaluate: %w", err)
	}
	pr, err := readPrompts(ctx, st, cfg)
	if err != nil {
		return err
	}

	// 2. Methods: the baselines and the trained policies.
	methods, notes, err := openMethods(ctx, st, cfg)
	if err != nil {
		return err
	}
	notes = append(notes, pr.notes...)
	if p := cfg.PolicyPerTask; p > 0 && p < cfg.PerTask {
		for _, m := range methods {
			if m.batch != nil {
				notes = append(notes, fmt.Sprintf("%s: %d trajectories per task (the others %d), to save time", m.name, p, cfg.PerTask))
			}
		}
	}
	if n := lastStepNote(cfg, methods); n != "" {
		notes = append(notes, n)
	}
	for _, n := range notes {
		fmt.Fprintf(log, "evaluate: %s\n", n)
	}

	// 3. The work list: trajectory i of a task has one seed and one plan,
	// shared by every method.
	jobs, err := workList(cfg, in, methods)
	if err != nil {
		return err
	}

	// 4. Resume: one part file per (method, task).
	key := runKey(cfg, in, methods, pr.prompts)
	pending, err := datasets.Begin(ctx, st, cfg.Out, schemas.EvalResults, key)
	if err != nil {
		return err
	}
	todo, left, err := unfinished(ctx, pending, jobs)
	if err != nil {
		return err
	}
	episodes := 0
	for _, j := range jobs {
		episodes += len(j.items)
	}
	fmt.Fprintf(log, "evaluate: %d tasks x %d methods, up to %d trajectories each: %d episodes, %d already done, writing %s\n",
		len(in.Tasks), len(methods), cfg.PerTask, episodes, episodes-left, pending.URI())

	// 5. The episodes, in parallel; a (method, task) is written as soon as
	// its trajectories are in.
	envCfg, stop, err := episode.Setup(ctx, cfg.Env, cfg.LLM, cfg.Warm, func(err error) {
		fmt.Fprintf(log, "evaluate: warm worker unavailable (%v); using cold processes\n", err)
	})
	if err != nil {
		return err
	}
	defer stop()
	bar := progress.New("evaluate", left)
	err = runJobs(ctx, st, envCfg, pr.opts, cfg.Workers, todo, key, pending, bar)
	bar.Done()
	if err != nil {
		return fmt.Errorf("evaluate: %w (rerun the same command to resume; finished (method, task) pairs are kept)", err)
	}
	if line := envCfg.ExecCache.Stats().String(); line != "" {
		fmt.Fprintf(log, "evaluate: %s\n", line)
	}
	fmt.Fprintf(log, "evaluate: %s\n", envCfg.Blobs)

	// 6. The dataset, with lineage to its inputs and the checkpoints.
	rows, err := datasets.ReadPending[schemas.EvalResult](ctx, pending)
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		return errors.New("evaluate: no results were written")
	}
	mBest := make(map[string]float64, len(in.Tasks))
	for _, t := range in.Tasks {
		mBest[t.TaskID] = t.MBest
	}
	sum := SummarizeWith(rows, mBest)
	sources := map[string]string{}
	for _, m := range methods {
		if m.source != "" {
			sources[m.name] = m.source
		}
		if m.sameAsSFT != "" {
			sum.PPOIsSFT = m.sameAsSFT
		}
	}
	extra := map[string]any{"methods": methodNames(methods), "sources": sources, "notes": notes,
		"per_task": cfg.PerTask, "policy_per_task": cfg.PolicyPerTask, "max_steps": cfg.Env.MaxSteps, "headline": sum.Headlines,
		episode.PromptsKey: pr.prompts}
	if pr.steps != "" {
		extra["prompts_from"] = pr.steps
	}
	m, err := pending.Commit(ctx, datasets.CommitOptions{Producer: datasets.NewProducer(cfg),
		Parents: []datasets.Parent{in.TasksM.Ref(), in.IdeasM.Ref()}, Extra: extra})
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "evaluate: committed %s v%d (%d rows)\n", m.Name, m.Version, m.Rows)

	// 7. The report: Markdown and plots, with the trainers' curves.
	rin := ReportInput{Summary: sum, Results: m, Tasks: in.TasksM, Ideas: in.IdeasM, Sources: sources, Notes: notes,
		PerTask: cfg.PerTask, MaxSteps: cfg.Env.MaxSteps, Curves: readCurves(ctx, st, cfg), Rows: rows}
	where, err := WriteReport(ctx, st, cfg.Report, fmt.Sprintf("reports/eval-v%d", m.Version), rin)
	if err != nil {
		return fmt.Errorf("evaluate: report: %w", err)
	}
	PrintHeadline(out, sum)
	fmt.Fprintf(out, "report: %s\n", where)
	return nil
}

// promptSettings are how an evaluation renders its prompts: as the
// rollout whose steps the policies learned from did.
type promptSettings struct {
	prompts agents.Prompts
	opts    agents.Options
	steps   string   // the steps version they were read from ("" for the defaults)
	notes   []string // for the report
}

// readPrompts reads how the rollout rendered its prompts (budgets and
// token counter) from the manifest of the steps dataset cfg.Steps names,
// so that the policies act on prompts like those they were trained on.
// With steps "" (no rollout) the default budgets are used.
func readPrompts(ctx context.Context, st store.Store, cfg Config) (promptSettings, error) {
	var pr promptSettings
	if cfg.Steps == "" {
		pr.prompts = agents.DefaultPrompts()
		pr.notes = append(pr.notes, fmt.Sprintf("prompts: the default budgets (%d and %d tokens; steps is empty)", pr.prompts.FullBudget, pr.prompts.CompactBudget))
	} else {
		m, err := datasets.ResolveIn(ctx, st, cfg.Steps)
		if err != nil {
			return pr, fmt.Errorf("evaluate: steps: %w (prompts are rendered as the rollout rendered them: run `mlerl rollout` first, or set steps to \"\" for the default budgets)", err)
		}
		p, ok := episode.PromptsOf(m)
		if !ok {
			return pr, fmt.Errorf("evaluate: steps: %s records no prompt budgets: name the steps dataset of a rollout", m.URI)
		}
		pr.prompts, pr.steps = p, fmt.Sprintf("%s v%d", m.Name, m.Version)
	}
	opts, err := agents.NewOptionsFor(pr.prompts, cfg.Env.MaxSteps)
	if err != nil {
		return pr, fmt.Errorf("evaluate: %w", err)
	}
	pr.opts = opts
	pr.prompts.Counter, pr.prompts.Format = opts.CountName, opts.Format
	return pr, nil
}

// workList is every job of the evaluation. Trajectory i of a task has the
// same seed and plan for every method; methods are interleaved so that
// slow and fast episodes overlap.
func workList(cfg Config, in *episode.Inputs, methods []*method) ([]job, error) {
	var jobs []job
	for _, t := range in.Tasks {
		items := make([]item, cfg.PerTask)
		for i := range items {
			seed := episode.Seed("eval", cfg.Seed, t.TaskID, i)
			plan, err := in.Plan(t.TaskID, seed)
			if err != nil {
				return nil, fmt.Errorf("evaluate: %w", err)
			}
			items[i] = item{index: i, seed: seed, plan: plan}
		}
		for _, m := range methods {
			switch {
			case m.factory == nil: // initial: one row per task, nothing is run
				jobs = append(jobs, job{method: m, task: t, items: items[:1]})
			case m.batch != nil:
				n := cfg.PerTask
				if cfg.PolicyPerTask > 0 {
					n = cfg.PolicyPerTask
				}
				jobs = append(jobs, job{method: m, task: t, items: items[:n]})
			default:
				for _, it := range items {
					jobs = append(jobs, job{method: m, task: t, items: []item{it}})
				}
			}
		}
	}
	sort.SliceStable(jobs, func(a, b int) bool { return jobs[a].items[0].index < jobs[b].items[0].index })
	return jobs, nil
}

// unfinished returns the jobs whose (method, task) part file is not
// written yet, and how many episodes they hold.
func unfinished(ctx context.Context, pending *datasets.Pending, jobs []job) (todo []job, episodes int, err error) {
	parts, err := pending.Parts(ctx)
	if err != nil {
		return nil, 0, err
	}
	todo = slices.DeleteFunc(slices.Clone(jobs), func(j job) bool { return slices.Contains(parts, j.part()) })
	for _, j := range todo {
		episodes += len(j.items)
	}
	return todo, episodes, nil
}

// runJobs runs the jobs, workers at a time (0: one per core), and writes
// each (method, task)'s rows as one part file as soon as its jobs are
// done.
func runJobs(ctx context.Context, st store.Store, envCfg env.Config, opts agents.Options, workers int, todo []job, key string, pending *datasets.Pending, bar *progress.Bar) error {
	if workers <= 0 {
		workers = runtime.NumCPU()
	}
	remaining := map[string]int{}
	for _, j := range todo {
		remaining[j.part()]++
	}
	var mu sync.Mutex
	buf := map[string][]schemas.EvalResult{}
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(workers)
	for _, j := range todo {
		eg.Go(func() error {
			got, err := runJob(ectx, st, envCfg, opts, j, key, bar)
			if err != nil {
				return fmt.Errorf("%s on %s: %w", j.method.name, j.task.TaskID, err)
			}
			part := j.part()
			mu.Lock()
			buf[part] = append(buf[part], got...)
			remaining[part]--
			var rows []schemas.EvalResult
			if remaining[part] == 0 {
				rows = buf[part]
				delete(buf, part)
			}
			mu.Unlock()
			if rows != nil {
				sort.Slice(rows, func(a, b int) bool { return rows[a].Trajectory < rows[b].Trajectory })
				if err := datasets.WritePart(ectx, pending, part, rows); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return eg.Wait()
}

// openMethods builds the requested methods; unavailable ones (llm without
// an endpoint, a policy without a checkpoint) are left out with a note.
func openMethods(ctx context.Context, st store.Store, cfg Config) ([]*method, []string, error) {
	var out []*method
	var notes []string
	for _, name := range AllMethods {
		if !slices.Contains(cfg.Methods, name) {
			continue
		}
		switch name {
		case MethodInitial:
			out = append(out, &method{name: name})
		case MethodRandom:
			out = append(out, &method{name: name, factory: agents.Random{}})
		case MethodExpert:
			out = append(out, &method{name: name, factory: agents.Scripted{SlipRate: cfg.SlipRate}})
		case MethodLLM:
			if !cfg.LLM.Enabled() {
				notes = append(notes, "llm: skipped (no llm.base_url configured)")
				continue
			}
			c, err := llm.New(cfg.LLM)
			if err != nil {
				return nil, nil, fmt.Errorf("evaluate: llm: %w", err)
			}
			out = append(out, &method{name: name, factory: agents.LLM{Client: c, Temperature: cfg.LLMTemperature}, source: cfg.LLM.BaseURL + " " + c.Model()})
		case MethodSFT, MethodPPO:
			dir, which := cfg.SFT, policy.CheckpointLast
			if name == MethodPPO {
				dir, which = cfg.PPO, cfg.PPOCheckpoint
			}
			latest, err := policy.LatestCheckpoint(ctx, st, dir)
			if err != nil {
				return nil, nil, err
			}
			if latest == "" {
				notes = append(notes, fmt.Sprintf("%s: skipped (no checkpoint in %s; run `mlerl train %s`)", name, st.URI(dir), map[string]string{MethodSFT: "sft", MethodPPO: "ppo"}[name]))
				continue
			}
			a, err := policy.LoadAgent(ctx, st, dir, name, cfg.Engine, policy.AgentOptions{Temperature: cfg.Temperature, TopP: cfg.TopP, MaxNewTokens: cfg.MaxNewTokens, Decode: cfg.Decode, Checkpoint: which, Activations: cfg.Activations})
			if err != nil {
				return nil, nil, fmt.Errorf("evaluate: %w", err)
			}
			m := &method{name: name, factory: a, batch: a, source: a.Source}
			if name == MethodPPO {
				if m.sameAsSFT, err = selectedSFT(ctx, st, dir, a.Source); err != nil {
					return nil, nil, fmt.Errorf("evaluate: %w", err)
				}
				if m.sameAsSFT != "" {
					notes = append(notes, fmt.Sprintf("%s: the PPO run selected update 0, the SFT weights (%s): its rows evaluate the SFT policy a second time, so its difference from sft is sampling noise", name, m.sameAsSFT))
				}
			}
			out = append(out, m)
		case MethodPolicy:
			a, err := policy.OpenAgent(name, cfg.Policy, cfg.Adapter, cfg.Budgets.Config(), cfg.Engine,
				policy.AgentOptions{Temperature: cfg.Temperature, TopP: cfg.TopP, MaxNewTokens: cfg.MaxNewTokens, Decode: cfg.Decode, Activations: cfg.Activations})
			if err != nil {
				return nil, nil, fmt.Errorf("evaluate: %w", err)
			}
			out = append(out, &method{name: name, factory: a, batch: a, source: a.Source})
		}
	}
	if len(out) == 0 {
		return nil, notes, fmt.Errorf("evaluate: none of the methods %v is available (%s)", cfg.Methods, strings.Join(notes, "; "))
	}
	return out, notes, nil
}

// selectedSFT says why the PPO checkpoint loaded from dir (source, its
// URI) holds the SFT weights: the run's selection.json chose update 0
// (no PPO point beat the SFT point by the rule's margin) and source is
// that checkpoint. "" otherwise: another update, the last checkpoint on
// request, or a run older than selection.
func selectedSFT(ctx context.Context, st store.Store, dir, source string) (string, error) {
	b, err := store.ReadAll(ctx, st, dir+"/selection.json")
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var sel struct {
		Update     *int   `json:"selected_update"`
		Checkpoint string `json:"selected"`
		Reason     string `json:"reason"`
	}
	if err := json.Unmarshal(b, &sel); err != nil {
		return "", fmt.Errorf("%s: %w (rerun train ppo's selection, or evaluate with --ppo_checkpoint last)", st.URI(dir+"/selection.json"), err)
	}
	read, selected := strings.CutSuffix(source, " (selected)") // policy.LoadAgent's mark of the selected checkpoint
	if !selected || sel.Update == nil || *sel.Update != 0 || sel.Checkpoint == "" || read != st.URI(dir+"/"+sel.Checkpoint) {
		return "", nil
	}
	return sel.Reason, nil
}

// runJob runs a job's trajectories: one by one, or, for a trained
// policy, all at once in lockstep.
func runJob(ctx context.Context, st store.Store, envCfg env.Config, opts agents.Options, j job, key string, bar *progress.Bar) ([]schemas.EvalResult, error) {
	rows := make([]schemas.EvalResult, len(j.items))
	if j.method.batch == nil {
		for k, it := range j.items {
			var agent agents.Agent
			if j.method.factory != nil {
				agent = j.method.factory.Episode(j.trajectory(it).PlanTexts(), it.seed)
			}
			row, err := runOne(ctx, st, envCfg, opts, j, it, agent, key)
			if err != nil {
				return nil, fmt.Errorf("trajectory %d: %w", it.index, err)
			}
			rows[k] = row
			bar.Add(1, fmt.Sprintf("%s %s #%d", j.method.name, j.task.TaskID, it.index))
		}
		return rows, nil
	}
	ls := episode.NewLockstep(j.method.batch, episode.Seed("eval", j.items[0].seed, j.method.name, len(j.items)), len(j.items))
	eg, ectx := errgroup.WithContext(ctx)
	for k, it := range j.items {
		eg.Go(func() error {
			defer ls.Leave(ectx, k)
			row, err := runOne(ectx, st, envCfg, opts, j, it, ls.Agent(k, j.trajectory(it).PlanTexts()), key)
			if err != nil {
				return fmt.Errorf("trajectory %d: %w", it.index, err)
			}
			rows[k] = row
			bar.Add(1, fmt.Sprintf("%s %s #%d", j.method.name, j.task.TaskID, it.index))
			return nil
		})
	}
	return rows, eg.Wait()
}

// trajectory is trajectory it of j as the episode runner takes it.
func (j job) trajectory(it item) episode.Job {
	return episode.Job{Task: j.task, ID: fmt.Sprintf("eval-%s-%s-%02d", j.method.name, j.task.TaskID, it.index), Seed: it.seed, Plan: it.plan}
}

// part is the name of the part file of j's (method, task).
func (j job) part() string {
	return partName(j.method.name, j.task.TaskID)
}

// runOne runs one trajectory with agent (nil: initial, which records
// m_init without running anything).
func runOne(ctx context.Context, st store.Store, envCfg env.Config, opts agents.Options, j job, it item, agent agents.Agent, key string) (schemas.EvalResult, error) {
	// Scores are the private part's, which no agent saw; the public
	// part's, which the agent was told, go beside them. A task without
	// parts is scored on all its hidden answers (ScoredAll).
	pubInit, pubBest := j.task.Public()
	row := schemas.EvalResult{RunID: key, Method: j.method.name, TaskID: j.task.TaskID, Split: j.task.Split,
		Metric: j.task.Metric, Direction: j.task.Direction, Trajectory: int32(it.index), Seed: it.seed,
		MInit: pubInit, FinalScore: pubInit, ScoredOn: schemas.ScoredAll, MBest: &pubBest}
	if j.task.HasParts() {
		privInit, privBest := j.task.Private()
		row.ScoredOn, row.MInit, row.FinalScore, row.MBest = schemas.ScoredPrivate, privInit, privInit, &privBest
		row.MInitPublic, row.MBestPublic, row.FinalScorePublic = &pubInit, &pubBest, &pubInit
	}
	if agent == nil {
		return row, nil
	}
	ep, err := episode.Run(ctx, st, envCfg, opts, j.trajectory(it), j.method.name, agent)
	if err != nil {
		return row, err
	}
	// The final score is the current submission's: the last graded run's,
	// or m_init when no step ran.
	t := ep.Trajectory
	switch {
	case row.ScoredOn == schemas.ScoredPrivate && ep.Private == nil:
		return row, fmt.Errorf("evaluate: task %s has parts but the episode recorded no private score", j.task.TaskID)
	case row.ScoredOn == schemas.ScoredPrivate:
		row.FinalScore, row.BestScore = ep.Private.Final, ep.Private.Best
		if t.FinalMetric != nil {
			row.FinalScorePublic = t.FinalMetric
		}
		row.BestScorePublic = t.BestMetric
	default:
		if t.FinalMetric != nil {
			row.FinalScore = *t.FinalMetric
		}
		row.BestScore = t.BestMetric
	}
	row.Steps = t.NumSteps
	row.WallS = t.WallS
	row.CostUSD = t.CostUSD
	row.GenerateS, row.WaitS, row.ExecuteS = &ep.ActS, &ep.WaitS, &ep.StepS
	for _, s := range ep.Steps {
		name := s.ActionName
		if name == "" {
			name = "(unparsed)"
		}
		row.Actions = append(row.Actions, name)
		row.Outcomes = append(row.Outcomes, s.Outcome)
		feedback, _, _ := strings.Cut(s.Observation, "\n")
		row.Answers = append(row.Answers, textutil.Clip(s.ActionText, schemas.MaxTranscriptChars))
		row.Feedback = append(row.Feedback, textutil.Clip(feedback, schemas.MaxTranscriptChars))
	}
	return row, nil
}

// runKey identifies an evaluation: everything that changes its rows (not
// workers or where it is written), the methods' sources and how prompts
// are rendered.
func runKey(cfg Config, in *episode.Inputs, methods []*method, p agents.Prompts) string {
	c := cfg
	c.Workers, c.Data, c.Report = 0, "", ""
	extra := make([]string, len(methods), len(methods)+1)
	for i, m := range methods {
		extra[i] = fmt.Sprintf("%s %s", m.name, m.source)
	}
	extra = append(extra, fmt.Sprintf("prompts %d %d %s", p.FullBudget, p.CompactBudget, p.Counter))
	if p.Format != agents.CompactFormat1 {
		// Format 1's key is the one evaluations made before formats had.
		extra[len(extra)-1] += fmt.Sprintf(" format %d", p.Format)
	}
	return episode.RunKey(in.TasksM, in.IdeasM, c, extra...)
}

// lastStepNote says what the trained policies are offered on a
// trajectory's last step (env.last_step_edits): a report reader comparing
// them with an earlier evaluation, or with the baselines, which choose
// their actions themselves, needs to know. "" when no policy acts under
// the grammar.
func lastStepNote(cfg Config, methods []*method) string {
	var names []string
	for _, m := range methods {
		if m.batch != nil {
			names = append(names, m.name)
		}
	}
	if len(names) == 0 || cfg.Decode != policy.DecodeConstrained {
		return ""
	}
	who, step := strings.Join(names, ", "), cfg.Env.MaxSteps
	edit := !cfg.Env.LastStepEdits && !cfg.Env.ExecuteAfterEdit
	undo := !cfg.Env.LastStepEdits && !cfg.Env.ExecuteAfterUndo
	switch {
	case edit && undo:
		return fmt.Sprintf("%s: no edit or undo offered on a trajectory's last step (step %d), where neither could change the score (env.last_step_edits false)", who, step)
	case edit:
		return fmt.Sprintf("%s: no edit offered on a trajectory's last step (step %d), where it could not change the score; undos are, since env.execute_after_undo runs the script after them", who, step)
	case undo:
		return fmt.Sprintf("%s: no undo offered on a trajectory's last step (step %d), where it could not change the score; edits are, since env.execute_after_edit runs the script after them", who, step)
	case cfg.Env.LastStepEdits:
		return fmt.Sprintf("%s: edits and undos offered on a trajectory's last step (step %d) too (env.last_step_edits)", who, step)
	}
	return ""
}

func partName(method, task string) string {
	return strings.NewReplacer("+", "-plus-", ":", "-", "/", "-").Replace(method) + "--" + task + ".parquet"
}

func methodNames(ms []*method) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.name
	}
	return out
}
