package main

import (
	"github.com/spf13/cobra"

	"github.com/mlerl/mlerl/train"
)

func init() {
	commands = append(commands, func() *cobra.Command {
		cmd := &cobra.Command{
			Use:   "train",
			Short: "Trainer stage: SFT on expert examples, then step-wise PPO on expert states",
		}
		cmd.AddCommand(
			stageCommand("sft", "Supervised fine-tuning of the policy on sft_examples", train.DefaultSFTConfig, train.RunSFT),
			stageCommand("ppo", "Step-wise PPO from the SFT checkpoint on rl_states (mode episode: the episode-wise baseline)", train.DefaultPPOConfig, train.RunPPO),
		)
		return cmd
	})
}
