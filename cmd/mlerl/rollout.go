package main

import (
	"github.com/spf13/cobra"

	"github.com/mlerl/mlerl/rollout"
)

func init() {
	commands = append(commands, func() *cobra.Command {
		cmd := stageCommand("rollout", "Rollout stage: expert trajectories -> the trajectories and steps datasets", rollout.DefaultConfig, rollout.Run)
		cmd.AddCommand(stageCommand("commit", "Commit a sharded rollout once every shard's parts are written (idempotent; same config as the shards)", rollout.DefaultConfig, rollout.Commit))
		return cmd
	})
}
