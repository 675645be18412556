package train

import (
	"context"
	"fmt"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// EnvRewardConfig is the environment configuration of the "env" reward
// (the default of PPOConfig.Env): env's defaults with edits executed in
// the same step. Step-wise RL takes one action per sampled state, so an
// edit also runs its script and its reward carries the measured
// improvement (otherwise every edit would earn 0 and only the expert's
// next Execute Script would be credited).
func EnvRewardConfig() env.Config {
	c := env.DefaultConfig()
	c.ExecuteAfterEdit = true
	return c
}

// EnvReward is the step-wise RL reward: restore the state's snapshot from
// st in a fresh sandboxed workspace, carry out the action there and return
// the environment's reward terms and the action's execution time.
// ecfg.Runner must be set.
func EnvReward(st store.Store, ecfg env.Config) RewardFunc {
	return func(ctx context.Context, s schemas.RLState, action string) (Outcome, error) {
		if s.SnapshotRef == "" {
			return Outcome{}, fmt.Errorf("state %s has no snapshot_ref to restore", s.StateID)
		}
		r, err := env.StepFrom(ctx, ecfg, st, s.SnapshotRef, action)
		if err != nil {
			return Outcome{}, fmt.Errorf("state %s: %w", s.StateID, err)
		}
		out := stepOutcome(r)
		return out, nil
	}
}

// stepOutcome is the reward view of a step's result.
func stepOutcome(r env.StepResult) Outcome {
	out := Outcome{Reward: r.Reward.Total, DurationS: r.ExecDuration.Seconds(), FormatError: r.FormatError != nil}
	out.Valid = r.Outcome != env.OutcomeFormatError && r.Outcome != env.OutcomeInvalidAction && r.Outcome != env.OutcomeInvalidEdit
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
	// An empty Python makes every Restore probe the interpreter (~2 s).
	ecfg.Python = python
	return EnvReward(st, ecfg), ecfg.Runner.Close, nil
}
