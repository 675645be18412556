package main

import "github.com/spf13/cobra"

// ingestSubcommands holds the constructors of `mlerl ingest <what>`; each
// file adds its own in an init function.
var ingestSubcommands []func() *cobra.Command

func init() {
	commands = append(commands, func() *cobra.Command {
		cmd := &cobra.Command{
			Use:   "ingest",
			Short: "Ingest stage: write the tasks and ideas datasets",
		}
		for _, c := range ingestSubcommands {
			cmd.AddCommand(c())
		}
		return cmd
	})
}
