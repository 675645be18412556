package train

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// EnvRewardConfig is the environment configuration of the "env" reward
// (the default of PPOConfig.Env): the environment evaluation runs
// (MLAgentBench's semantics: an edit or an undo does not run the script)
// with one more reward term, a Final Answer earning how far the
// submission it leaves standing is from the episode's best (<= 0:
// stopping on a worse submission costs, where it cost nothing). With the
// default horizon 2 an edit is credited with the improvement its run
// measures when the policy runs it next. For one-step credit (horizon 1)
// turn on env.execute_after_edit and env.execute_after_undo: an edit or
// undo then runs its script in the same step and earns the measured
// improvement or recovery, but a policy trained so learns that it need
// not run what it edited, which evaluation does not do for it (SCIENCE.md,
// run 7).
func EnvRewardConfig() env.Config {
	c := env.DefaultConfig()
	c.Reward.Final = true
	return c
}

// EnvReward is the step-wise RL reward: restore the state's snapshot from
// st in a fresh sandboxed workspace, carry out the action there and return
// the environment's reward terms and the step's duration. ecfg.Runner
// must be set. With settle, a state whose workspace holds an edit the
// expert has not run yet is settled first (its script run once, outside
// the episode, and the settled state snapshotted; env.Env.Settle): the
// action's improvement is then measured from the edited script's score,
// so that running the expert's pending edit is not credited to the
// policy, nor is its gain added to a new edit's.
func EnvReward(st store.Store, ecfg env.Config, settle bool) RewardFunc {
	var settled *settler
	if settle {
		settled = &settler{st: st, ecfg: ecfg, refs: map[string]*settleEntry{}}
	}
	return func(ctx context.Context, s schemas.RLState, action string) (Outcome, error) {
		if s.SnapshotRef == "" {
			return Outcome{}, fmt.Errorf("state %s has no snapshot_ref to restore", s.StateID)
		}
		ref := s.SnapshotRef
		if settled != nil {
			var err error
			if ref, err = settled.ref(ctx, ref); err != nil {
				return Outcome{}, fmt.Errorf("state %s: settling its pending edit: %w", s.StateID, err)
			}
		}
		r, err := env.StepFrom(ctx, ecfg, st, ref, action)
		if err != nil {
			return Outcome{}, fmt.Errorf("state %s: %w", s.StateID, err)
		}
		return stepOutcome(r), nil
	}
}

// settler settles each snapshot once; concurrent requests for the same
// snapshot wait for the first.
type settler struct {
	st   store.Store
	ecfg env.Config
	mu   sync.Mutex
	refs map[string]*settleEntry
}

type settleEntry struct {
	done chan struct{}
	ref  string
	err  error
}

// ref returns the settled snapshot of ref (ref itself when nothing was
// pending, or the pending edit did not produce a valid submission).
func (s *settler) ref(ctx context.Context, ref string) (string, error) {
	s.mu.Lock()
	e, ok := s.refs[ref]
	if !ok {
		e = &settleEntry{done: make(chan struct{})}
		s.refs[ref] = e
	}
	s.mu.Unlock()
	if ok {
		select {
		case <-e.done:
			return e.ref, e.err
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	e.ref, e.err = s.settle(ctx, ref)
	if e.err != nil {
		s.mu.Lock()
		delete(s.refs, ref) // retried by the next request
		s.mu.Unlock()
	}
	close(e.done)
	return e.ref, e.err
}

func (s *settler) settle(ctx context.Context, ref string) (string, error) {
	e, err := env.Restore(ctx, s.ecfg, s.st, ref)
	if err != nil {
		return "", err
	}
	defer e.Close()
	changed, err := e.Settle(ctx, "train.py")
	if err != nil || !changed {
		return ref, err
	}
	settled, err := e.Snapshot(ctx)
	if errors.Is(err, env.ErrNotKept) {
		return ref, nil // the settled state is not kept: the state as it was
	}
	return settled, err
}

// stepOutcome is the reward view of a step's result.
func stepOutcome(r env.StepResult) Outcome {
	out := Outcome{Reward: r.Reward.Total, DurationS: r.WallDuration.Seconds(), FormatError: r.FormatError != nil,
		Valid: env.Accepted(r.Outcome), Class: string(r.Outcome)}
	if r.Action != nil {
		out.Action = r.Action.Name
	}
	out.Executed = r.Executed
	out.Unchanged = unchangedEdit(r.Observation)
	if len(r.Markers) > 0 {
		out.LastMarker = r.Markers[len(r.Markers)-1]
	}
	for _, t := range r.Reward.Terms {
		out.Terms = append(out.Terms, schemas.RewardTerm{Name: t.Name, Value: t.Value})
	}
	return out
}

// openEnvReward is the "env" reward factory: the data root's store and a
// warm sandbox runner (cold when the worker cannot start).
func openEnvReward(ctx context.Context, cfg PPOConfig) (RewardFunc, func() error, error) {
	st, err := store.Open(ctx, cfg.Data)
	if err != nil {
		return nil, nil, err
	}
	python, err := sandbox.FindPython(cfg.Env.Python)
	if err != nil {
		return nil, nil, err
	}
	ecfg := cfg.Env
	ecfg.Runner = sandbox.New(ctx, python, true, nil)
	ecfg.ExecCache = env.NewExecCacheFor(ecfg)
	// An empty Python makes every Restore probe the interpreter (~2 s).
	ecfg.Python = python
	return EnvReward(st, ecfg, cfg.SettlePending), ecfg.Runner.Close, nil
}
