package train

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

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

// engine makes the run's engine from a checkpoint, restoring the
// optimiser's state when the same engine wrote it.
func (s *stage) engine(ck *policy.Checkpoint, name string, optim policy.OptimConfig) (policy.Engine, error) {
	eng, resumedOpt, err := ck.Engine(name, true)
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

// save writes a checkpoint of eng with the stage config, vocabulary and
// resumable state at step.
func (s *stage) save(ctx context.Context, dir string, step int, eng policy.Engine, config any, vocab *policy.Vocab, state any) error {
	sb, err := json.Marshal(state)
	if err != nil {
		return err
	}
	if err := policy.SaveCheckpoint(ctx, s.st, dir, step, eng, policy.Checkpoint{Config: config, Vocab: vocab, State: sb, Metrics: s.metrics}); err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	return nil
}

// interrupted is the one line a stage stopped by a signal returns, after
// saving what a resume needs.
func (s *stage) interrupted(ctx context.Context, what, dir string) error {
	return fmt.Errorf("%s: interrupted (%v) %s; the checkpoint in %s holds the run: rerun the same command to resume", s.name, context.Cause(ctx), what, s.st.URI(dir))
}
