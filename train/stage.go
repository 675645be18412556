package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/mlerl/mlerl/internal/config"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/schemas"
)

// stage is what SFT and PPO share: the store, the input dataset's rows
// split into held-in and held-out, resuming from and saving checkpoints,
// and the metric lines.
type stage struct {
	name    string // "train sft", "train ppo"
	log     io.Writer
	st      store.Store
	input   *datasets.Manifest
	metrics []string
	resumed bool
}

// openStage opens the data root and reads the named dataset, split by
// the rows' split field.
func openStage[T any](ctx context.Context, name, data, dataset string, schema schemas.Info, split func(T) string, log io.Writer) (s *stage, heldIn, heldOut []T, err error) {
	st, err := store.Open(ctx, data)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	m, err := datasets.ResolveIn(ctx, st, dataset)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w (run `mlerl dataset` first)", name, err)
	}
	rows, err := datasets.ReadAll[T](ctx, st, m, schema)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	for i, r := range rows {
		switch split(r) {
		case schemas.HeldIn:
			heldIn = append(heldIn, r)
		case schemas.HeldOut:
			heldOut = append(heldOut, r)
		default:
			return nil, nil, nil, fmt.Errorf("%s: %s row %d: split %q is neither %q nor %q; fix the dataset stage", name, m.URI, i, split(r), schemas.HeldIn, schemas.HeldOut)
		}
	}
	if len(heldIn) == 0 {
		return nil, nil, nil, fmt.Errorf("%s: %s has no %s rows to train on", name, m.URI, schemas.HeldIn)
	}
	return &stage{name: name, log: log, st: st, input: m}, heldIn, heldOut, nil
}

// latest loads the latest checkpoint in dir into config and state (nil
// when there is none or resume is off).
func (s *stage) latest(ctx context.Context, dir string, resume bool, config, state any) (*policy.Checkpoint, error) {
	if !resume {
		return nil, nil
	}
	sub, err := policy.LatestCheckpoint(ctx, s.st, dir)
	if err != nil || sub == "" {
		return nil, err
	}
	ck, err := policy.LoadCheckpoint(ctx, s.st, sub, config, state)
	if err != nil {
		return nil, fmt.Errorf("resuming: %w", err)
	}
	s.metrics, s.resumed = ck.Metrics, true
	return ck, nil
}

// engine makes the run's engine of policy pol from a checkpoint, restoring
// the optimiser's state when the same engine wrote it; seed draws a
// Hugging Face policy's fresh adapters and value head (a checkpoint's
// tensors replace them).
func (s *stage) engine(ck *policy.Checkpoint, pol *policy.Policy, name string, optim policy.OptimConfig, seed uint64) (policy.Engine, error) {
	var eng policy.Engine
	resumedOpt := false
	var err error
	if ck.Dir == "" { // a fresh start: no optimiser state to restore
		eng, err = pol.NewEngine(name, seed, ck.Weights)
	} else {
		eng, resumedOpt, err = ck.Engine(pol, name, true)
	}
	if err != nil {
		return nil, err
	}
	if len(ck.Optimizer) > 0 && !resumedOpt {
		fmt.Fprintf(s.log, "%s: %s was written by the %s engine; its optimiser state does not carry over to %s: the optimiser starts afresh\n", s.name, s.st.URI(ck.Dir), ck.OptimizerEngine, name)
	}
	eng.SetOptim(optim)
	return eng, nil
}

// record appends a metrics line.
func (s *stage) record(m map[string]any) {
	b, _ := json.Marshal(m)
	s.metrics = append(s.metrics, string(b)+"\n")
}

// save writes a checkpoint of eng with the stage config, the policy (its
// vocabulary, or a Hugging Face policy's source and adapter) and the
// resumable state at step.
func (s *stage) save(ctx context.Context, dir string, step int, eng policy.Engine, config any, pol *policy.Policy, state any) error {
	sb, err := json.Marshal(state)
	if err != nil {
		return err
	}
	if err := policy.SaveCheckpoint(ctx, s.st, dir, step, eng, policy.Checkpoint{Config: config, Policy: pol, State: sb, Metrics: s.metrics}); err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	return nil
}

// interrupted is the one line a stage stopped by a signal returns, after
// saving what a resume needs.
func (s *stage) interrupted(ctx context.Context, what, dir string) error {
	return fmt.Errorf("%s: interrupted (%v) %s; the checkpoint in %s holds the run: rerun the same command to resume", s.name, context.Cause(ctx), what, s.st.URI(dir))
}

// validatePolicy checks the keys that choose and train the policy, the
// same in train sft and train ppo: policy (mlerl, hf:DIR or gguf:FILE), adapter only
// with a Hugging Face policy, save_merged too unless fromCheckpoint (train
// ppo, whose policy is the SFT checkpoint's unless hf:DIR or gguf:FILE names one: it
// is checked once that checkpoint is read), and the tuning.
func validatePolicy(spec, adapter, saveMerged string, t policy.Tuning, fromCheckpoint bool) error {
	_, _, err := policy.ParseSpec(spec)
	switch {
	case err != nil:
		return config.Errorf("policy", spec, "%v", err)
	case adapter != "" && !policy.Pretrained(spec):
		return config.Errorf("adapter", adapter, "is a PEFT adapter of a Hugging Face model: it needs policy hf:DIR or gguf:FILE, its base")
	case saveMerged != "" && !policy.Pretrained(spec) && !fromCheckpoint:
		return config.Errorf("save_merged", saveMerged, "writes a Hugging Face folder: it needs policy hf:DIR or gguf:FILE (mlerl's own model has no Hugging Face form)")
	case policy.Pretrained(spec) || fromCheckpoint:
		return t.Validate()
	}
	return nil
}

// hfShapeUnset refuses shape keys set for a Hugging Face policy, whose
// shape is its config.json's: a value other than the stage's default
// (want) means the key was set.
func hfShapeUnset(got, want policy.Config) error {
	for _, k := range []struct {
		key       string
		got, want any
	}{{"model.d_model", got.DModel, want.DModel}, {"model.heads", got.Heads, want.Heads}, {"model.layers", got.Layers, want.Layers},
		{"model.ffn", got.FFN, want.FFN}, {"model.rope_base", got.RoPEBase, want.RoPEBase}, {"model.vocab", got.Vocab, want.Vocab}} {
		if k.got != k.want {
			return config.Errorf(k.key, k.got, "is the shape of mlerl's own model: a Hugging Face policy's shape is its config.json's (drop the key; model.ctx and the token budgets still apply)")
		}
	}
	return nil
}

// resumedPolicy opens the policy of a checkpoint being resumed, refusing
// one of another kind or base than the config asks for (kind, dir: the
// policy key's).
func resumedPolicy(s *stage, ck *policy.Checkpoint, kind, dir, tokenizer string) (*policy.Policy, error) {
	was := policy.KindMLERL
	if ck.Source != nil {
		was = ck.Source.Spec()
	}
	want := kind
	if kind != policy.KindMLERL {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, err
		}
		want = kind + ":" + abs
	}
	if was != want {
		return nil, fmt.Errorf("%s holds a checkpoint of policy %s but the config asks for %s; use another out folder or resume=false", s.st.URI(ck.Dir), was, want)
	}
	return ck.OpenPolicy(tokenizer)
}

// describeModel is the policy's model in the stages' first log line.
func describeModel(pol *policy.Policy) string {
	if pol.Kind() == policy.KindHF {
		return fmt.Sprintf("%s (%s, %s chat format), %s", pol.Source.Architecture, pol.Source.Spec(), pol.Source.Chat, pol.Model.Describe())
	}
	return fmt.Sprintf("%d params", pol.Model.NumParams())
}

// saveMerged writes a Hugging Face policy's trained model, adapters
// merged, as a Hugging Face folder in dir (nothing when dir is empty),
// with mergedMark naming the checkpoint folder it came from: a rerun of
// the same run (resumed, or already done) writes it again over its own.
func (s *stage) saveMerged(pol *policy.Policy, eng policy.Engine, dir, out string) error {
	if dir == "" {
		return nil
	}
	if err := s.mergedTargetFree(dir, out); err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	ws, err := policy.TrainableWeights(eng)
	if err == nil && pol.Model.LoRA == nil {
		ws, err = eng.Weights()
	}
	if err != nil {
		return fmt.Errorf("%s: save_merged: %w", s.name, err)
	}
	if err := os.RemoveAll(dir); err != nil { // empty, or this run's own (mergedTargetFree)
		return fmt.Errorf("%s: save_merged: %w", s.name, err)
	}
	if err := pol.WriteMerged(dir, ws); err != nil {
		return fmt.Errorf("%s: save_merged %s: %w", s.name, dir, err)
	}
	mark, _ := json.Marshal(map[string]string{"checkpoints": s.st.URI(out), "note": "written by mlerl's save_merged; a rerun of the same run replaces this folder"})
	if err := os.WriteFile(filepath.Join(dir, mergedMark), mark, 0o644); err != nil {
		return fmt.Errorf("%s: save_merged: %w", s.name, err)
	}
	fmt.Fprintf(s.log, "%s: wrote the merged model to %s (a Hugging Face folder: transformers' from_pretrained and vLLM load it)\n", s.name, dir)
	return nil
}

// mergedMark is the file that tells a merged folder which run wrote it.
const mergedMark = "mlerl_merged.json"

// mergedTargetFree refuses, before any training, a save_merged folder
// that exists and is neither empty nor this run's own (its mergedMark
// names out): the merged model is written at the end of the run.
func (s *stage) mergedTargetFree(dir, out string) error {
	if dir == "" {
		return nil
	}
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist) || err == nil && len(ents) == 0:
		return nil
	case err != nil:
		return config.Errorf("save_merged", dir, "%v", err)
	}
	var mark map[string]string
	if b, err := os.ReadFile(filepath.Join(dir, mergedMark)); err == nil && json.Unmarshal(b, &mark) == nil && mark["checkpoints"] == s.st.URI(out) {
		return nil
	}
	return config.Errorf("save_merged", dir, "exists and is not empty (nor this run's merged folder): name a new folder (the merged model is written there at the end of the run)")
}

// peakRSSGiB is this process's peak resident memory so far, in GiB.
func peakRSSGiB() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Maxrss) / (1 << 20) // Linux reports KiB
}
