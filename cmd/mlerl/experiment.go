package main

import (
	"github.com/spf13/cobra"

	"github.com/mlerl/mlerl/experiment"
)

func init() {
	commands = append(commands, func() *cobra.Command {
		return stageCommand("experiment", "A grid of arms x seeds (--preset main, rl, ablations or taskcount), each trained and evaluated by the stages -> experiments and a report with 95% intervals", experiment.DefaultConfig, experiment.Run)
	})
}
