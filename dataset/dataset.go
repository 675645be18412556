package dataset

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/mlerl/mlerl/internal/config"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/internal/tokenizer"
	"github.com/mlerl/mlerl/policy/hf"
	"github.com/mlerl/mlerl/schemas"
)

// Config is the dataset stage's configuration.
type Config struct {
	Data     string `yaml:"data" help:"data root (local path or gs://bucket/prefix)"`
	Steps    string `yaml:"steps" help:"steps dataset to read (name, or name/vN)"`
	Tasks    string `yaml:"tasks" help:"tasks dataset giving each task's split (name, or name/vN); empty: the version the steps were rolled out from"`
	SFT      string `yaml:"sft" help:"name of the sft_examples dataset to write"`
	RLStates string `yaml:"rl_states" help:"name of the rl_states dataset to write"`
	// SFT filters.
	ErrorSteps        string `yaml:"error_steps" help:"SFT: steps whose own outcome is an error: keep, drop-refused (drop invalid_action/invalid_edit, keep failed runs) or drop (successes only); format errors are always dropped"`
	MaxTokens         int    `yaml:"max_tokens" help:"SFT: drop examples whose compact prompt + response exceed this many Qwen tokens (0: no limit)"`
	HeldOutValidation bool   `yaml:"held_out_validation" help:"SFT: keep steps of held-out tasks as split=held-out examples (validation loss only; never in rl_states or exports)"`
	PlanVariants      int    `yaml:"plan_variants" help:"SFT: extra examples per expert edit of a held-in task, each with the plan entry the edit used swapped for another idea of the task, in the prompts and the answer (teaches copying the instruction from the plan; 0: none)"`
	// RL state pool.
	PerStratum int   `yaml:"per_stratum" help:"RL: at most this many states per (task, step index), sampled with seed (0: every expert state)"`
	Seed       int64 `yaml:"seed" help:"RL: seed of the per-stratum sample"`
	// Outputs.
	Exports             bool   `yaml:"exports" help:"write the ShareGPT (sft) and verl (rl_states) exports under exports/<name>/v<N>/"`
	VerlPrompt          string `yaml:"verl_prompt" help:"verl export's prompt: policy (as mlerl prompts a Hugging Face policy: system, mlerl's system message; user, the compact prompt), compact (the compact prompt alone, one user message; the chat template adds its default system message) or full (system: role, tools, answer format; user: the state)"`
	VerlMaxPromptLength int    `yaml:"verl_max_prompt_length" help:"warn when a verl export prompt is longer than this many tokens: verl's data.max_prompt_length (0: no check)"`
	SharegptCutoffLen   int    `yaml:"sharegpt_cutoff_len" help:"warn when a ShareGPT export example (prompt and answer) is longer than this many tokens: LLaMA-Factory's cutoff_len, which cuts longer prompts without a word (0: no check)"`
	ExportTokenizer     string `yaml:"export_tokenizer" help:"Hugging Face checkpoint folder whose tokenizer and chat template count the exports' tokens, as verl and LLaMA-Factory count them when they train that model (empty: Qwen3's tokenizer and template)"`
	ValPerTask          int    `yaml:"val_per_task" help:"verl validation file: initial states (one per sampled plan) of each held-out task the rollout did not visit"`
	Workers             int    `yaml:"workers" help:"tokenizer goroutines (0: one per core)"`
}

// DefaultConfig returns the embedded default: every expert step becomes an
// SFT example (refused slips and format errors dropped, at most 1024
// tokens), every expert edit also 4 plan variants (sharing its weight),
// and every step an RL state; exports on, verl's with the policy's prompt,
// checked against verl's default max_prompt_length (512), and 4 initial
// states per held-out task in its validation file; the ShareGPT examples
// checked against LLaMA-Factory's default cutoff_len (2048); tokens
// counted as Qwen3's tokenizer and template count them.
func DefaultConfig() Config {
	sft, rl := DefaultSFTOptions(), DefaultRLOptions()
	return Config{
		Data: "./data", Steps: schemas.Steps.Name, SFT: schemas.SFTExamples.Name, RLStates: schemas.RLStates.Name,
		ErrorSteps: sft.ErrorSteps, MaxTokens: sft.MaxTokens, HeldOutValidation: sft.HeldOutValidation, PlanVariants: 4,
		PerStratum: rl.PerStratum, Seed: rl.Seed, Exports: true,
		VerlPrompt: string(PromptPolicy), VerlMaxPromptLength: 512, SharegptCutoffLen: 2048, ValPerTask: 4,
	}
}

// Validate implements config.Validator: every field, before anything is
// read or written.
func (c *Config) Validate() error {
	switch c.ErrorSteps {
	case ErrorStepsKeep, ErrorStepsDropRefused, ErrorStepsDrop:
	default:
		return config.Errorf("error_steps", c.ErrorSteps, "want %s, %s or %s", ErrorStepsKeep, ErrorStepsDropRefused, ErrorStepsDrop)
	}
	switch {
	case c.Data == "":
		return config.Errorf("data", c.Data, "must name the data root (a folder or gs://bucket/prefix)")
	case c.Steps == "":
		return config.Errorf("steps", c.Steps, "must name the steps dataset (name or name/vN)")
	case c.SFT == "":
		return config.Errorf("sft", c.SFT, "must name the dataset to write")
	case c.RLStates == "":
		return config.Errorf("rl_states", c.RLStates, "must name the dataset to write")
	case c.RLStates == c.SFT:
		return config.Errorf("rl_states", c.RLStates, "must differ from sft")
	case c.MaxTokens < 0:
		return config.Errorf("max_tokens", c.MaxTokens, "must not be negative (0: no limit)")
	case c.PlanVariants < 0:
		return config.Errorf("plan_variants", c.PlanVariants, "must not be negative (0: no variants)")
	case c.PerStratum < 0:
		return config.Errorf("per_stratum", c.PerStratum, "must not be negative (0: every expert state)")
	case c.Workers < 0:
		return config.Errorf("workers", c.Workers, "must not be negative (0: one per core)")
	case c.VerlMaxPromptLength < 0:
		return config.Errorf("verl_max_prompt_length", c.VerlMaxPromptLength, "must not be negative (0: no warning)")
	case c.SharegptCutoffLen < 0:
		return config.Errorf("sharegpt_cutoff_len", c.SharegptCutoffLen, "must not be negative (0: no warning)")
	case c.ValPerTask < 0:
		return config.Errorf("val_per_task", c.ValPerTask, "must not be negative")
	}
	if _, err := ParsePromptForm(c.VerlPrompt, PromptPolicy); err != nil {
		return config.Errorf("verl_prompt", c.VerlPrompt, "%v", err)
	}
	return nil
}

// Attachment is a file written beside a dataset version (its stats.md,
// its exports), listed with its checksum in the manifest's
// Extra["attachments"] so that `mlerl dataset publish` copies and
// verifies it along with the part files.
type Attachment struct {
	Key    string `json:"key"` // relative to the data root
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// Run builds sft_examples and rl_states from the expert steps:
//
//  1. read the steps and the tasks they were rolled out on (for the split);
//  2. count tokens with the Qwen tokenizer;
//  3. build the SFT examples and the RL state pool and check that no
//     held-out task leaks into training data;
//  4. write each dataset with its stats.md and exports, and commit it with
//     its lineage (steps, tasks, ideas, trajectories).
//
// Rerun with the same config and inputs, it does nothing: each dataset is
// found by its run key. A run that died before committing is resumed.
func Run(ctx context.Context, cfg Config) error {
	return run(ctx, cfg, os.Stdout, os.Stderr)
}

// run is Run with the report (stats) and log lines going to out and log.
func run(ctx context.Context, cfg Config, out, log io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	start := time.Now()
	st, err := store.Open(ctx, cfg.Data)
	if err != nil {
		return err
	}

	// 1. Inputs.
	stepsM, err := datasets.ResolveIn(ctx, st, cfg.Steps)
	if err != nil {
		return fmt.Errorf("dataset: steps (written by `mlerl rollout`): %w", err)
	}
	tasksM, err := tasksFor(ctx, st, stepsM, cfg.Tasks)
	if err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	taskRows, err := datasets.ReadAll[schemas.Task](ctx, st, tasksM, schemas.Tasks)
	if err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	tasks := map[string]schemas.Task{}
	for i, t := range taskRows {
		if t.Split != schemas.HeldIn && t.Split != schemas.HeldOut {
			return fmt.Errorf("dataset: %s row %d (task %q): split %q is neither %s nor %s; fix the task's task.yaml and re-ingest", tasksM.URI, i, t.TaskID, t.Split, schemas.HeldIn, schemas.HeldOut)
		}
		tasks[t.TaskID] = t
	}
	steps, err := datasets.ReadAll[schemas.Step](ctx, st, stepsM, schemas.Steps)
	if err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	slices.SortFunc(steps, func(a, b schemas.Step) int {
		return cmp.Or(cmp.Compare(a.TrajectoryID, b.TrajectoryID), cmp.Compare(a.StepIndex, b.StepIndex))
	})
	byID := map[string]int{} // example and state ids are the steps' (trajectory, step index)
	for i, s := range steps {
		id := exampleID(s)
		if _, dup := byID[id]; dup {
			return fmt.Errorf("dataset: %s: two rows are trajectory %s step %d; the steps dataset is damaged, re-run the rollout into a new version", stepsM.URI, s.TrajectoryID, s.StepIndex)
		}
		byID[id] = i
	}
	fmt.Fprintf(log, "dataset: %d steps from %s v%d, splits from %s v%d\n", len(steps), stepsM.Name, stepsM.Version, tasksM.Name, tasksM.Version)

	// 2. Token counts (compact prompt and response) with the real tokenizer.
	tok, err := tokenizer.Default()
	if err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	t0 := time.Now()
	tokens := CountTokens(steps, tok.Count, cfg.Workers)
	fmt.Fprintf(log, "dataset: tokenized %d steps in %s\n", len(steps), time.Since(t0).Round(time.Millisecond))

	// 3. Build (SFT from the steps and their plan variants), then refuse
	// to write anything that would leak.
	variants, variantCounts := PlanVariants(heldInSteps(steps, tasks), cfg.PlanVariants, cfg.Seed)
	sftSteps, sftTokens := steps, tokens
	if len(variants) > 0 {
		sftSteps = append(slices.Clone(steps), variants...)
		sftTokens = append(slices.Clone(tokens), CountTokens(variants, tok.Count, cfg.Workers)...)
		for i, v := range variants {
			byID[exampleID(v)] = len(steps) + i
		}
		fmt.Fprintf(log, "dataset: %d plan variants of %d expert edits\n", variantCounts.Made, variantCounts.Edits)
	}
	sftOpts := SFTOptions{ErrorSteps: cfg.ErrorSteps, MaxTokens: cfg.MaxTokens, HeldOutValidation: cfg.HeldOutValidation}
	sft, sftCounts, err := BuildSFT(sftSteps, sftTokens, tasks, sftOpts)
	if err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	sftCounts.Variants = variantCounts
	weighVariants(sft)
	rl, rlCounts, err := BuildRLStates(steps, tasks, RLOptions{PerStratum: cfg.PerStratum, Seed: cfg.Seed})
	if err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	if err := CheckNoLeak(tasks, sft, rl, cfg.HeldOutValidation); err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	// The held-out tasks' states, for verl's validation file only.
	var val []schemas.RLState
	var valCounts ValCounts
	if cfg.Exports {
		if val, valCounts, err = valStates(ctx, st, stepsM, steps, tasks, cfg, log); err != nil {
			return fmt.Errorf("dataset: validation states: %w", err)
		}
	}

	// 4. Write and commit each dataset.
	statRow := func(id, task, split string) StatRow {
		i := byID[id]
		return StatRow{TaskID: task, Split: split, Outcome: sftSteps[i].Outcome, StepIndex: sftSteps[i].StepIndex,
			Reward: sftSteps[i].Reward, PromptTokens: sftTokens[i].Prompt, ResponseTokens: sftTokens[i].Response}
	}
	key := runKey(cfg, stepsM, tasksM)
	parents, err := lineage(ctx, st, stepsM, tasksM)
	if err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	commit := datasets.CommitOptions{Producer: datasets.NewProducer(cfg), Parents: parents}

	sftOut := output[schemas.SFTExample]{
		name: cfg.SFT, schema: schemas.SFTExamples, rows: sft, counts: sftCounts,
		stat: func(e schemas.SFTExample) StatRow { return statRow(e.ExampleID, e.TaskID, e.Split) },
		task: func(e schemas.SFTExample) (string, string) { return e.TaskID, e.Split },
	}
	form, _ := ParsePromptForm(cfg.VerlPrompt, PromptPolicy) // checked by Validate
	exp := exportConfig{count: QwenChat(tok.Count), tokenizer: TokenizerQwen3, verlPrompt: form,
		maxPromptLength: cfg.VerlMaxPromptLength, cutoffLen: cfg.SharegptCutoffLen, log: log}
	if cfg.Exports && cfg.ExportTokenizer != "" {
		// The trainers count with the model's own tokenizer and template;
		// a tiny or foreign vocabulary can double Qwen3's counts.
		c, err := hf.Load(cfg.ExportTokenizer)
		if err != nil {
			return fmt.Errorf("dataset: export_tokenizer: %w", err)
		}
		defer c.Close()
		exp.count, exp.tokenizer = CheckpointChat(c), cfg.ExportTokenizer
	}
	if cfg.Exports {
		sftOut.exports = exp.sft
	}
	sftM, sftStats, err := writeOutput(ctx, st, key, sftOut, commit, log)
	if err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	rlOut := output[schemas.RLState]{
		name: cfg.RLStates, schema: schemas.RLStates, rows: rl, counts: rlCounts,
		stat: func(s schemas.RLState) StatRow { return statRow(s.StateID, s.TaskID, s.Split) },
		task: func(s schemas.RLState) (string, string) { return s.TaskID, s.Split },
	}
	if cfg.Exports {
		rlOut.exports = func(ctx context.Context, st store.Store, dir string, rows []schemas.RLState) ([]Attachment, map[string]any, []ExportStats, error) {
			return exp.rl(ctx, st, dir, rows, val, valCounts)
		}
	}
	rlM, rlStats, err := writeOutput(ctx, st, key, rlOut, commit, log)
	if err != nil {
		return fmt.Errorf("dataset: %w", err)
	}

	out.Write(sftStats)
	fmt.Fprintln(out)
	out.Write(rlStats)
	fmt.Fprintf(log, "dataset: %s v%d (%d rows) and %s v%d (%d rows) in %s\n",
		sftM.Name, sftM.Version, sftM.Rows, rlM.Name, rlM.Version, rlM.Rows, time.Since(start).Round(time.Millisecond))
	return nil
}

// heldInSteps returns the steps of held-in tasks (plan variants are made
// of those only: held-out examples are for validation).
func heldInSteps(steps []schemas.Step, tasks map[string]schemas.Task) []schemas.Step {
	var out []schemas.Step
	for _, s := range steps {
		if tasks[s.TaskID].Split == schemas.HeldIn {
			out = append(out, s)
		}
	}
	return out
}

// tasksFor returns the tasks version named by ref, or (ref empty) the
// tasks parent of the steps version in the same root.
func tasksFor(ctx context.Context, st store.Store, stepsM *datasets.Manifest, ref string) (*datasets.Manifest, error) {
	if ref != "" {
		m, err := datasets.ResolveIn(ctx, st, ref)
		if err != nil {
			return nil, fmt.Errorf("tasks: %w", err)
		}
		return m, nil
	}
	for _, p := range stepsM.Parents {
		m, err := datasets.ReadManifest(ctx, st, p.Name, p.Version)
		if err == nil && m.Schema == schemas.Tasks.Name {
			return m, nil
		}
	}
	return nil, fmt.Errorf("%s names no tasks version of this data root among its parents; pass --tasks <name or name/vN>", stepsM.URI)
}

// lineage lists the versions the outputs derive from: the steps, the
// tasks, the steps' own parents (ideas), and the trajectories version the
// same rollout committed (the one whose parents name these steps), when
// it is in the root.
func lineage(ctx context.Context, st store.Store, stepsM, tasksM *datasets.Manifest) ([]datasets.Parent, error) {
	out := []datasets.Parent{stepsM.Ref(), tasksM.Ref()}
	add := func(p datasets.Parent) {
		if !slices.ContainsFunc(out, func(q datasets.Parent) bool { return q.Name == p.Name && q.Version == p.Version }) {
			out = append(out, p)
		}
	}
	for _, p := range stepsM.Parents {
		add(p)
	}
	all, committed, err := datasets.Versions(ctx, st, schemas.Trajectories.Name)
	if err != nil {
		return nil, err
	}
	for i := len(all) - 1; i >= 0; i-- {
		if !committed[all[i]] {
			continue
		}
		m, err := datasets.ReadManifest(ctx, st, schemas.Trajectories.Name, all[i])
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(m.Parents, func(p datasets.Parent) bool { return p.Name == stepsM.Name && p.Version == stepsM.Version }) {
			add(m.Ref())
			break
		}
	}
	return out, nil
}

// runKey identifies a run: the inputs' versions and every setting that
// changes the rows (not the data root or the worker count), and with
// exports on the version of what they write (exportFormat).
// rlScores is bumped when what rl_states' m_init and m_best hold changes,
// so that a rerun rebuilds the datasets rather than finding the old ones.
// 2: the public part's scores (schemas.Task.Public), as the environment's
// rewards use them; 1 held the scores on all hidden answers.
const rlScores = 2

func runKey(cfg Config, stepsM, tasksM *datasets.Manifest) string {
	c := cfg
	c.Data, c.Workers = "", 0
	parts := []string{fmt.Sprintf("%s v%d", stepsM.Name, stepsM.Version), fmt.Sprintf("%s v%d", tasksM.Name, tasksM.Version), config.Canonical(c),
		fmt.Sprintf("rl_states scores v%d", rlScores)}
	if cfg.Exports {
		parts = append(parts, fmt.Sprintf("exports v%d", exportFormat))
	}
	return shortHash(parts...)
}

// CheckNoLeak fails when a held-out task could reach training: an RL
// state of a held-out task, or an SFT example whose split is not its
// task's (a held-out task's example labelled held-in), or any held-out
// example when heldOutValidation is off.
func CheckNoLeak(tasks map[string]schemas.Task, sft []schemas.SFTExample, rl []schemas.RLState, heldOutValidation bool) error {
	for i, s := range rl {
		if t := tasks[s.TaskID]; t.Split != schemas.HeldIn || s.Split != schemas.HeldIn {
			return fmt.Errorf("rl_states row %d (state %s): task %s (split %q, row says %q) would leak into RL training: %w", i, s.StateID, s.TaskID, t.Split, s.Split, ErrHeldOut)
		}
	}
	for i, e := range sft {
		t := tasks[e.TaskID]
		if e.Split != t.Split || (t.Split == schemas.HeldOut && !heldOutValidation) {
			return fmt.Errorf("sft_examples row %d (example %s): task %s is %q, row says %q: %w", i, e.ExampleID, e.TaskID, t.Split, e.Split, ErrHeldOut)
		}
	}
	return nil
}

// output is one dataset the stage writes.
type output[T any] struct {
	name    string
	schema  schemas.Info
	rows    []T
	counts  any
	stat    func(T) StatRow
	task    func(T) (id, split string)
	exports func(ctx context.Context, st store.Store, dir string, rows []T) ([]Attachment, map[string]any, []ExportStats, error)
}

// writeOutput writes o as a new version (or finds the one an earlier run
// with the same key committed): the part file, the exports, stats.md
// beside the part (with the exports' prompt lengths), then the manifest
// with the stats, splits and attachments in Extra. It returns the
// manifest and the rendered stats.
func writeOutput[T any](ctx context.Context, st store.Store, key string, o output[T], commit datasets.CommitOptions, log io.Writer) (*datasets.Manifest, []byte, error) {
	if m, err := datasets.FindRun(ctx, st, o.name, key); err != nil {
		return nil, nil, err
	} else if m != nil {
		fmt.Fprintf(log, "dataset: %s v%d was already built from the same inputs and config; nothing to do\n", m.Name, m.Version)
		md, err := store.ReadAll(ctx, st, datasets.Dir(m.Name, m.Version)+"/stats.md")
		return m, md, err
	}
	p, err := datasets.Begin(ctx, st, o.name, o.schema, key)
	if err != nil {
		return nil, nil, err
	}
	if err := datasets.WritePart(ctx, p, "part-00000.parquet", o.rows); err != nil {
		return nil, nil, err
	}

	rows := make([]StatRow, len(o.rows))
	splits := map[string][]string{schemas.HeldIn: {}, schemas.HeldOut: {}}
	seen := map[string]bool{}
	for i, r := range o.rows {
		rows[i] = o.stat(r)
		if id, split := o.task(r); !seen[id] {
			seen[id] = true
			splits[split] = append(splits[split], id)
		}
	}
	for _, ids := range splits {
		sort.Strings(ids)
	}
	stats := ComputeStats(o.name, p.Version, rows, o.counts)
	var atts []Attachment
	extra := map[string]any{"tasks": splits}
	if o.exports != nil {
		more, info, es, err := o.exports(ctx, st, fmt.Sprintf("exports/%s/v%d", o.name, p.Version), o.rows)
		if err != nil {
			return nil, nil, err
		}
		atts = append(atts, more...)
		extra["exports"] = info
		stats.Exports = es
	}
	var md bytes.Buffer
	if err := stats.WriteMarkdown(&md); err != nil {
		return nil, nil, err
	}
	statsAtt, err := writeAttachment(ctx, st, p.Dir()+"/stats.md", func(w io.Writer) error { _, err := w.Write(md.Bytes()); return err })
	if err != nil {
		return nil, nil, err
	}
	extra["stats"] = stats
	extra["attachments"] = append([]Attachment{statsAtt}, atts...)
	commit.Extra = extra
	m, err := p.Commit(ctx, commit)
	if err != nil {
		return nil, nil, err
	}
	return m, md.Bytes(), nil
}

// writeAttachment streams an object through write, hashing what it writes.
func writeAttachment(ctx context.Context, st store.Store, key string, write func(io.Writer) error) (Attachment, error) {
	w, err := st.Create(ctx, key, store.CreateOptions{})
	if err != nil {
		return Attachment{}, err
	}
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(w, h)}
	if err := write(cw); err != nil {
		w.Abort()
		return Attachment{}, fmt.Errorf("write %s: %w", st.URI(key), err)
	}
	if err := w.Close(); err != nil {
		return Attachment{}, err
	}
	return Attachment{Key: key, Bytes: cw.n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// errNoAttachments is wrapped when a manifest's attachments list cannot be read.
var errNoAttachments = errors.New("unreadable attachments list")
