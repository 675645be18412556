package main

import (
	"context"
	"fmt"

	_ "github.com/gomlx/compute/gobackend" // the default GoMLX backend; GOMLX_BACKEND selects others
	"github.com/spf13/cobra"

	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/internal/tokenizer"
	"github.com/mlerl/mlerl/rollout/env"
	"github.com/mlerl/mlerl/schemas"
	"github.com/mlerl/mlerl/train"
)

func init() {
	train.RegisterTokenizer("qwen", func() (train.Tokenizer, error) { return tokenizer.Default() })
	train.RegisterReward("env", envReward)
	commands = append(commands, func() *cobra.Command {
		cmd := &cobra.Command{
			Use:   "train",
			Short: "Trainer stage: SFT on expert examples, then step-wise PPO on expert states",
		}
		cmd.AddCommand(
			stageCommand("sft", "Supervised fine-tuning of the policy on sft_examples", train.DefaultSFTConfig, train.RunSFT),
			stageCommand("ppo", "Step-wise PPO from the SFT checkpoint on rl_states", train.DefaultPPOConfig, train.RunPPO),
		)
		return cmd
	})
}

// envReward restores each state's snapshot in a fresh sandboxed workspace,
// executes the action there and returns the environment's reward (the
// agentic-ML reward of rollout/env with its default settings).
func envReward(ctx context.Context, cfg train.PPOConfig) (train.RewardFunc, func() error, error) {
	st, err := store.Open(ctx, cfg.Data)
	if err != nil {
		return nil, nil, err
	}
	python, err := sandbox.FindPython("")
	if err != nil {
		return nil, nil, err
	}
	runner, err := sandbox.NewWarm(ctx, python)
	if err != nil {
		return nil, nil, err
	}
	ecfg := env.DefaultConfig()
	ecfg.Runner = runner
	// An empty Python makes every Restore probe the interpreter (~2 s).
	ecfg.Python = python
	// Step-wise RL takes one action per sampled state: an edit also runs
	// its script so that its reward carries the measured improvement
	// (otherwise every edit would earn 0 and only the expert's next
	// Execute Script would be credited).
	ecfg.ExecuteAfterEdit = true
	fn := func(ctx context.Context, s schemas.RLState, action string) (train.Outcome, error) {
		if s.SnapshotRef == "" {
			return train.Outcome{}, fmt.Errorf("state %s has no snapshot_ref to restore", s.StateID)
		}
		e, err := env.Restore(ctx, ecfg, st, s.SnapshotRef)
		if err != nil {
			return train.Outcome{}, fmt.Errorf("state %s: %w", s.StateID, err)
		}
		defer e.Close()
		r, err := e.Step(ctx, action)
		if err != nil {
			return train.Outcome{}, fmt.Errorf("state %s: %w", s.StateID, err)
		}
		out := train.Outcome{Reward: r.Reward.Total, DurationS: r.ExecDuration.Seconds(), FormatError: r.FormatError != nil}
		for _, t := range r.Reward.Terms {
			out.Terms = append(out.Terms, schemas.RewardTerm{Name: t.Name, Value: t.Value})
		}
		return out, nil
	}
	return fn, runner.Close, nil
}
