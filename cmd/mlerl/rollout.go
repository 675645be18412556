package main

import (
	"github.com/spf13/cobra"

	"github.com/mlerl/mlerl/rollout"
)

func init() {
	commands = append(commands, func() *cobra.Command {
		return stageCommand("rollout", "Rollout stage: expert trajectories -> the trajectories and steps datasets", rollout.DefaultConfig, rollout.Run)
	})
}
