package main

import (
	"github.com/spf13/cobra"

	"github.com/mlerl/mlerl/evaluate"
)

func init() {
	commands = append(commands, func() *cobra.Command {
		return stageCommand("evaluate", "Evaluation stage: every method on the held-out tasks -> eval_results and a report (Markdown + PNG plots)", evaluate.DefaultConfig, evaluate.Run)
	})
}
