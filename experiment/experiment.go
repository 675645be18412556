package experiment

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/mlerl/mlerl/internal/config"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/progress"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/schemas"
)

// Config is the config of `mlerl experiment`: a grid of arms x seeds.
type Config struct {
	// Data, in a --config file, is taken from the file's folder when
	// relative, so that a committed run config (docs/run16/run16.yaml)
	// works from any clone; --data is taken as typed and wins.
	Data string `yaml:"data" path:"from-config" help:"data root with tasks, ideas, rl_states and sft_examples (make ingest rollout dataset); a relative data: in the --config file is taken from the file's folder, --data from the working directory (and wins over the file)"`
	Name string `yaml:"name" help:"grid name: prefix of its checkpoints, eval datasets and report"`
	Out  string `yaml:"out" help:"dataset the grid's rows are written to"`
	// Budget picks the training and evaluation sizes (see Budgets).
	Budget string `yaml:"budget" help:"small (minutes: 40 SFT updates, 2 PPO updates, 2 trajectories of 8 steps per held-out task) or full (about 25 minutes per seed on 2 idle AVX-512 cores, 40 on AVX2-only ones: 2 SFT epochs, 40 PPO updates of 32 samples (SCIENCE.md run 10), 4 trajectories of 8 steps per task)"`
	Seeds  []int  `yaml:"seeds" help:"seeds: every arm is trained and evaluated once per seed"`
	// Preset is the grid (Presets): its arms with their flags, and what it
	// adds to every stage run (learning curves, evaluation splits).
	Preset string `yaml:"preset" help:"the grid's arms and per-arm flags: main (baselines, SFT, SFT+PPO and four ablations of it), rl (issues 21 and 49: initial, expert, sft, sft+ppo with learning curves, held-in tasks evaluated too), ablations (issue 22: duration weighting on/off in the asynchronous collector, instrumentation on/off in a free-decoding arm, episode-wise vs step-wise at equal wall time), taskcount (ML-Agent's task-count curve: sft as 0 tasks, PPO on the first 5, 10, 20 and 40 held-in tasks)"`
	// Arms picks some of the preset's arms (empty: all of them);
	// ExtraArms adds PPO arms, ablations of sft+ppo when the grid has it.
	Arms      []string `yaml:"arms" help:"the preset's arms to run, in this order (empty: all of them; main's: initial, random, expert, sft, sft-free, sft+ppo, no-duration, sparse, episode-wise, no-format)"`
	ExtraArms []string `yaml:"extra_arms" help:"more PPO arms, each 'name: --flag value ...' (flags of train ppo, after the grid's): ablations of sft+ppo when the grid runs it"`
	// Bin runs the stages as a user does, one process each, so that each
	// cell's wall and CPU time (its scripts included) are measured.
	// SFTFlags, PPOFlags and EvalFlags come after the budget's flags of
	// every stage of that kind (a smaller model, other eval splits...).
	SFTFlags  []string `yaml:"sft_flags" help:"more flags of every train sft run, after the budget's (e.g. --model.layers=2)"`
	PPOFlags  []string `yaml:"ppo_flags" help:"more flags of every train ppo run, after the budget's and the preset's, before the arm's"`
	EvalFlags []string `yaml:"eval_flags" help:"more flags of every evaluate run, after the budget's and the preset's, before the arm's"`
	Bin       string   `yaml:"bin" help:"the mlerl binary that runs each stage (empty: this one)"`
	// Policy, a Hugging Face folder or GGUF file, is what the grid's SFT arms
	// fine-tune, and an arm of its own evaluated as it is.
	Policy  string `yaml:"policy" help:"mlerl (the grid trains mlerl's own model), hf:DIR or gguf:FILE: every SFT arm fine-tunes this Hugging Face checkpoint or GGUF model (PPO arms start from it through their SFT checkpoint), and the grid adds the baseline arm policy, the model (with adapter) evaluated as it is"`
	Adapter string `yaml:"adapter" help:"with policy hf:DIR or gguf:FILE: a PEFT LoRA adapter folder on it (trained elsewhere): the policy arm evaluates base + adapter, and SFT starts from it"`
	Report  string `yaml:"report" help:"local folder for report.md and its plots (empty: reports/experiment-<name>/ beside a local data root, else ./)"`
}

// Arm is one line of the grid.
type Arm struct {
	Name string `yaml:"name" help:"the arm's name in the report"`
	// Kind: a baseline evaluated as it is (initial, random, expert), the
	// SFT policy, or SFT then PPO with Flags added to `mlerl train ppo`.
	Kind string `yaml:"kind" help:"baseline, sft or ppo"`
	// Method is the baseline's evaluate method (initial, random, expert).
	Method string `yaml:"method" help:"baseline: initial, random or expert"`
	// Flags are passed to `mlerl train ppo` (kind ppo): the ablation.
	Flags []string `yaml:"flags" help:"ppo: extra flags of train ppo, e.g. --duration_weighting=false"`
	// EvalFlags are passed to the arm's `mlerl evaluate` (kind sft or ppo).
	EvalFlags []string `yaml:"eval_flags" help:"sft, ppo: extra flags of the arm's evaluate, e.g. --decode=free"`
	// AblationOf names the arm this one is compared with, and Paper what
	// the papers report for it, for the claims table.
	AblationOf string `yaml:"ablation_of" help:"the arm this arm ablates (the claims table compares them)"`
	Paper      string `yaml:"paper" help:"what the papers report for the ablation (shown beside the verdict)"`
	// Phenomenon names what the ablated feature corrects (PhenomenonDuration...):
	// when the grid measures too little of it, the claim is "not testable
	// here" (phenomena.go).
	Phenomenon string `yaml:"phenomenon" help:"what the ablated feature acts on: duration, instrumentation, format or empty (none)"`
	// EqualWall compares the arm with AblationOf on their learning curves
	// at equal wall time (the smaller of the two arms' total update time)
	// instead of on their final evaluations.
	EqualWall bool `yaml:"equal_wall" help:"compare with ablation_of on the learning curves at equal wall time"`
}

// Arm kinds.
const (
	KindBaseline = "baseline"
	KindSFT      = "sft"
	KindPPO      = "ppo"
)

// Phenomena an ablation can name (Arm.Phenomenon): what its feature acts
// on, measured by the report's phenomenon checks (phenomena.go).
const (
	PhenomenonDuration        = "duration"        // duration weighting: a relation of duration and reward
	PhenomenonInstrumentation = "instrumentation" // partial credit: scripts that fail part-way
	PhenomenonFormat          = "format"          // the format term: answers that do not parse or are refused
)

// DefaultArms is the grid: the three baselines, SFT (with constrained
// decoding, and decoding freely), SFT then step-wise PPO, and four
// ablations of it.
func DefaultArms() []Arm {
	return []Arm{
		{Name: "initial", Kind: KindBaseline, Method: "initial"},
		{Name: "random", Kind: KindBaseline, Method: "random"},
		{Name: "expert", Kind: KindBaseline, Method: "expert"},
		{Name: "sft", Kind: KindSFT},
		{Name: "sft-free", Kind: KindSFT, EvalFlags: []string{"--decode=free"}},
		{Name: "sft+ppo", Kind: KindPPO},
		{Name: "no-duration", Kind: KindPPO, Phenomenon: PhenomenonDuration, Flags: []string{"--duration_weighting=false"}, AblationOf: "sft+ppo",
			Paper: "duration-aware weighting: +3.9% over plain PPO (RL for MLE agents)"},
		{Name: "sparse", Kind: KindPPO, Phenomenon: PhenomenonInstrumentation, Flags: []string{"--env.instrument=false"}, AblationOf: "sft+ppo",
			Paper: "partial credit from instrumentation: +22% (RL for MLE agents)"},
		{Name: "episode-wise", Kind: KindPPO, Flags: []string{"--mode=episode"}, AblationOf: "sft+ppo",
			Paper: "step-wise RL beats episode-wise RL (ML-Agent)"},
		{Name: "no-format", Kind: KindPPO, Phenomenon: PhenomenonFormat, Flags: []string{"--env.reward.format=false"}, AblationOf: "sft+ppo",
			Paper: "the agentic reward without its format term does worse (ML-Agent)"},
	}
}

// Budget sizes one run of the grid: the flags each stage gets. Curve
// sizes the learning-curve evaluations of train ppo, in grids whose
// preset asks for curves (Preset.CurvePoints).
type Budget struct {
	SFT, PPO, Evaluate, Curve []string
}

// Budgets are the built-in sizes. Small finishes in minutes on 2 cores;
// full in about 15 minutes per seed (SFT is 2 epochs over the data
// science.sh makes, 40 expert trajectories per held-in task and their
// plan variants: about 1,900 updates; SCIENCE.md's runs 1-4 had 6
// trajectories per task, where 2 epochs were too few). PPO takes train
// ppo's defaults (SCIENCE.md runs 7-7b chose them) at run 10's size: 40
// updates of 32 samples, whole groups of 4 actions per state. Held-in tasks are evaluated on request
// (eval_flags: --splits=held-out,held-in). Both evaluate 8 steps per
// trajectory: in the small budget's former 4 the scripted expert never
// edited (its opening, then an edit cycle and the Final Answer, need
// more: agents.ScriptedEditSteps) and showed +0.00% on every task; the
// small learning curve keeps 4 steps, to stay minutes.
var Budgets = map[string]Budget{
	"small": {
		SFT:      []string{"--epochs=1", "--max_steps=40", "--batch_rows=4"},
		PPO:      []string{"--updates=2", "--batch_size=16", "--gen_batch=16", "--minibatches=2", "--workers=2", "--episode_steps=2", "--checkpoint_every=2"},
		Evaluate: []string{"--splits=held-out", "--per_task=2", "--policy_per_task=2", "--env.max_steps=8"},
		Curve:    []string{"--curve.splits=held-in,held-out", "--curve.per_task=1", "--curve.max_steps=4"},
	},
	"full": {
		SFT:      []string{"--epochs=2", "--batch_rows=4"},
		PPO:      []string{"--updates=40", "--batch_size=32", "--gen_batch=32", "--minibatches=2", "--workers=2", "--episode_steps=4", "--checkpoint_every=20"},
		Evaluate: []string{"--splits=held-out", "--per_task=4", "--policy_per_task=4", "--env.max_steps=8"},
		Curve:    []string{"--curve.splits=held-in,held-out", "--curve.per_task=2", "--curve.max_steps=8"},
	},
}

// DefaultConfig is the main preset with the small budget and 2 seeds;
// `--budget full --seeds 1,2,3` is the run BENCHMARKS.md reports.
func DefaultConfig() Config {
	return Config{Data: "./data", Name: "grid", Out: schemas.Experiments.Name, Budget: "small", Seeds: []int{1, 2}, Preset: PresetMain, Policy: policy.KindMLERL}
}

// arms resolves the preset's arms, the subset Arms names, and the extra
// arms.
func (c Config) arms() ([]Arm, error) {
	p, ok := presetNamed(c.Preset)
	if !ok {
		return nil, config.Errorf("preset", c.Preset, "want one of %s", presetNames())
	}
	out := slices.Clone(p.Arms)
	if policy.Pretrained(c.Policy) {
		// The folder as it is, after the preset's baselines.
		at := 0
		for at < len(out) && out[at].Kind == KindBaseline {
			at++
		}
		out = slices.Insert(out, at, Arm{Name: "policy", Kind: KindBaseline, Method: "policy"})
	}
	if len(c.Arms) > 0 {
		builtin := map[string]Arm{}
		for _, a := range out {
			builtin[a.Name] = a
		}
		out = nil
		for i, name := range c.Arms {
			a, ok := builtin[name]
			if !ok {
				return nil, config.Errorf("arms", c.Arms, "item %d %q is not a built-in arm of preset %s (%s); add PPO arms with extra_arms", i+1, name, p.Name, strings.Join(slices.Sorted(maps.Keys(builtin)), ", "))
			}
			out = append(out, a)
		}
	}
	base := ""
	if slices.ContainsFunc(out, func(a Arm) bool { return a.Name == "sft+ppo" }) {
		base = "sft+ppo"
	}
	for i, spec := range c.ExtraArms {
		name, flags, ok := strings.Cut(spec, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.TrimSpace(flags) == "" {
			return nil, config.Errorf("extra_arms", c.ExtraArms, "item %d %q: want 'name: --flag value ...'", i+1, spec)
		}
		a := Arm{Name: name, Kind: KindPPO, Flags: strings.Fields(flags)}
		if base != "" {
			a.AblationOf, a.Paper = base, "(your ablation)"
		}
		out = append(out, a)
	}
	return out, nil
}

// Validate checks the config, each failure one line naming the key.
func (c Config) Validate() error {
	switch {
	case c.Data == "":
		return config.Errorf("data", c.Data, "must name the data root (a folder or gs://bucket/prefix)")
	case c.Name == "" || strings.ContainsAny(c.Name, "/ \\"):
		return config.Errorf("name", c.Name, "must be a word without slashes or spaces (it prefixes folders and dataset names)")
	case c.Out == "":
		return config.Errorf("out", c.Out, "must name the dataset to write")
	case len(c.Seeds) == 0:
		return config.Errorf("seeds", c.Seeds, "must list at least one seed (two or more give intervals over seeds)")
	}
	if _, ok := Budgets[c.Budget]; !ok {
		return config.Errorf("budget", c.Budget, "want small or full")
	}
	kind, _, err := policy.ParseSpec(c.Policy)
	switch {
	case err != nil:
		return config.Errorf("policy", c.Policy, "%v", err)
	case c.Adapter != "" && kind == policy.KindMLERL:
		return config.Errorf("adapter", c.Adapter, "is a PEFT adapter of a Hugging Face model: it needs policy hf:DIR, its base")
	}
	for i, seed := range c.Seeds {
		if slices.Index(c.Seeds, seed) < i {
			return config.Errorf("seeds", c.Seeds, "%d is listed twice", seed)
		}
	}
	arms, err := c.arms()
	if err != nil {
		return err
	}
	p, _ := presetNamed(c.Preset)
	names := map[string]bool{}
	for i, a := range arms {
		key := fmt.Sprintf("arms[%d]", i)
		switch {
		case a.Name == "" || strings.ContainsAny(a.Name, "/ \\"):
			return config.Errorf(key+".name", a.Name, "must be a word without slashes or spaces")
		case names[a.Name]:
			return config.Errorf(key+".name", a.Name, "is listed twice")
		case a.Kind != KindBaseline && a.Kind != KindSFT && a.Kind != KindPPO:
			return config.Errorf(key+".kind", a.Kind, "want baseline, sft or ppo")
		case a.Kind == KindBaseline && !slices.Contains([]string{"initial", "random", "expert", "policy"}, a.Method):
			return config.Errorf(key+".method", a.Method, "want initial, random, expert or policy for a baseline")
		case a.Method == "policy" && kind == policy.KindMLERL:
			return config.Errorf(key+".method", a.Method, "evaluates a Hugging Face folder: give the grid policy hf:DIR")
		case a.Kind != KindPPO && len(a.Flags) > 0:
			return config.Errorf(key+".flags", a.Flags, "only ppo arms take train ppo flags")
		case a.Kind == KindBaseline && len(a.EvalFlags) > 0:
			return config.Errorf(key+".eval_flags", a.EvalFlags, "baselines share one evaluate run; give evaluate flags to the grid (eval_flags)")
		case !slices.Contains([]string{"", PhenomenonDuration, PhenomenonInstrumentation, PhenomenonFormat}, a.Phenomenon):
			return config.Errorf(key+".phenomenon", a.Phenomenon, "want %s, %s, %s or empty", PhenomenonDuration, PhenomenonInstrumentation, PhenomenonFormat)
		case (a.Phenomenon != "" || a.EqualWall) && a.AblationOf == "":
			return config.Errorf(key+".ablation_of", a.AblationOf, "must name the arm that %s ablates (its phenomenon or equal-wall comparison needs one)", a.Name)
		case a.EqualWall && (a.Kind != KindPPO || p.CurvePoints == 0):
			return config.Errorf(key+".equal_wall", a.EqualWall, "needs a PPO arm in a preset with learning curves")
		}
		names[a.Name] = true
	}
	for _, a := range arms {
		if a.AblationOf != "" && !names[a.AblationOf] {
			return config.Errorf("arms", c.Arms, "%s is an ablation of %s, which the grid does not run", a.Name, a.AblationOf)
		}
	}
	return nil
}

// Run is `mlerl experiment`: it trains and evaluates every arm with every
// seed, one cell at a time, each stage in its own process, and writes the
// grid's rows to the experiments dataset and its report. A cell's rows
// are a part file of the pending version: a rerun skips finished cells,
// and the stages resume their own checkpoints and pending versions.
func Run(ctx context.Context, cfg Config) error {
	return run(ctx, cfg, os.Stdout, os.Stderr)
}

func run(ctx context.Context, cfg Config, out, log io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("experiment: %w", err)
	}
	if cfg.Bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("experiment: bin: %w", err)
		}
		cfg.Bin = exe
	}
	st, err := store.Open(ctx, cfg.Data)
	if err != nil {
		return fmt.Errorf("experiment: %w", err)
	}
	for _, need := range []string{schemas.Tasks.Name, schemas.Ideas.Name, schemas.SFTExamples.Name, schemas.RLStates.Name} {
		if _, err := datasets.Latest(ctx, st, need); err != nil {
			return fmt.Errorf("experiment: %w (run `make ingest rollout dataset DATA=%s` first)", err, cfg.Data)
		}
	}
	if hint, err := earlierRLGrid(ctx, st, cfg); err != nil {
		return fmt.Errorf("experiment: %w", err)
	} else if hint != "" {
		fmt.Fprintf(log, "experiment %s: %s\n", cfg.Name, hint)
	}
	p, err := datasets.Begin(ctx, st, cfg.Out, schemas.Experiments, runKey(cfg))
	if err != nil {
		return fmt.Errorf("experiment: %w", err)
	}
	arms, _ := cfg.arms()
	cells := plan(cfg, arms)
	bar := progress.New("experiment", len(cells))
	done := 0
	for _, c := range cells {
		if ok, err := p.HasPart(ctx, c.part()); err != nil {
			return fmt.Errorf("experiment: %w", err)
		} else if ok {
			done++
		}
	}
	fmt.Fprintf(log, "experiment %s: %d arms x %d seeds = %d cells (%d done), %s budget, rows in %s\n",
		cfg.Name, len(arms), len(cfg.Seeds), len(cells), done, cfg.Budget, p.URI())
	bar.Resume(done)
	for _, c := range cells {
		if ok, _ := p.HasPart(ctx, c.part()); ok {
			continue
		}
		rows, err := c.run(ctx, cfg, st, p.URI(), log)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("experiment: interrupted in cell %s; rerun the same command to resume (finished cells are kept)", c.name())
			}
			return fmt.Errorf("experiment: cell %s: %w", c.name(), err)
		}
		if err := datasets.WritePart(ctx, p, c.part(), rows); err != nil {
			return fmt.Errorf("experiment: %w", err)
		}
		bar.Add(1, c.name())
	}
	bar.Done()
	m, err := p.Commit(ctx, datasets.CommitOptions{Producer: datasets.NewProducer(cfg)})
	if err != nil {
		return fmt.Errorf("experiment: %w", err)
	}
	rows, err := datasets.ReadAll[schemas.ExperimentRow](ctx, st, m, schemas.Experiments)
	if err != nil {
		return fmt.Errorf("experiment: %w", err)
	}
	dir := reportDir(cfg)
	rep := summarise(cfg, arms, rows)
	if rep.timeQuality, err = timeQuality(ctx, st); err != nil {
		return fmt.Errorf("experiment: the steps' time-quality relation: %w", err)
	}
	if err := writeReport(dir, cfg, m.URI, rep); err != nil {
		return fmt.Errorf("experiment: report: %w", err)
	}
	fmt.Fprint(out, rep.table())
	fmt.Fprintf(out, "report: %s/report.md\n", dir)
	return nil
}

// earlierRLArms are the rl preset's arms before it had the expert arm
// (issue 49): naming them gives a grid the run key it had then.
var earlierRLArms = []string{"initial", "sft", "sft+ppo"}

// earlierRLGrid says, when an rl grid is about to start a new version
// while one of the same grid started before the preset had its expert arm
// is pending, what the rerun does and how to resume that one instead:
// the expert's rows belong in the baselines' cell, which the earlier
// version may have finished without them, so it is not resumed silently.
func earlierRLGrid(ctx context.Context, st store.Store, cfg Config) (string, error) {
	if cfg.Preset != PresetRL || len(cfg.Arms) > 0 {
		return "", nil
	}
	if p, err := datasets.FindPending(ctx, st, cfg.Out, schemas.Experiments, runKey(cfg)); err != nil || p != nil {
		return "", err
	}
	old := cfg
	old.Arms = earlierRLArms
	p, err := datasets.FindPending(ctx, st, cfg.Out, schemas.Experiments, runKey(old))
	if err != nil || p == nil {
		return "", err
	}
	return fmt.Sprintf("%s holds this grid as started before the rl preset had its expert arm; this run starts a new version with the expert (training resumes from the grid's checkpoints, every evaluation runs again); to finish %s without the expert instead, rerun with --arms %s",
		p.URI(), p.URI(), strings.Join(earlierRLArms, ",")), nil
}

// runKey identifies a grid: the same config resumes the same version.
func runKey(cfg Config) string {
	h := sha256.New()
	b := Budgets[cfg.Budget]
	fmt.Fprintf(h, "%s|%s|%v|%s|%q|%q|%q|%q|%q|%q", cfg.Name, cfg.Budget, cfg.Seeds, cfg.Data, b.SFT, b.PPO, b.Evaluate, cfg.SFTFlags, cfg.PPOFlags, cfg.EvalFlags)
	if p, _ := presetNamed(cfg.Preset); p.Name != PresetMain { // main's grids keep the key they had before presets
		fmt.Fprintf(h, "|preset %s %q %d %q", p.Name, p.EvalFlags, p.CurvePoints, b.Curve)
	}
	if policy.Pretrained(cfg.Policy) { // mlerl's grids keep their key
		fmt.Fprintf(h, "|policy %s %s", cfg.Policy, cfg.Adapter)
	}
	arms, _ := cfg.arms()
	for _, a := range arms {
		fmt.Fprintf(h, "|%s/%s/%s/%v", a.Name, a.Kind, a.Method, a.Flags)
		if len(a.EvalFlags) > 0 {
			fmt.Fprintf(h, "/%v", a.EvalFlags)
		}
	}
	return "experiment-" + hex.EncodeToString(h.Sum(nil))[:16]
}
