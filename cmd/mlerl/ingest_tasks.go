package main

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/mlerl/mlerl/ingest"
)

func init() {
	ingestSubcommands = append(ingestSubcommands, ingestTasksCommand)
}

// ingestTasksCommand is `mlerl ingest tasks [source]`: the optional
// argument is the folder to import (the same as --source).
func ingestTasksCommand() *cobra.Command {
	cmd := stageCommand("tasks [source]", "Check every task, measure its baseline and write the tasks dataset (--from mlebench|mlagentbench <dir> imports first)",
		ingest.DefaultTasksConfig, func(ctx context.Context, cfg ingest.TasksConfig) error {
			err := ingest.RunTasks(ctx, cfg)
			if errors.Is(err, ingest.ErrSomeFailed) {
				return &exitError{code: 1, err: err}
			}
			return err
		})
	run := cmd.RunE
	cmd.Args = cobra.MaximumNArgs(1)
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if len(args) == 1 {
			if err := c.Flags().Set("source", args[0]); err != nil {
				return err
			}
		}
		return run(c, args)
	}
	return cmd
}
