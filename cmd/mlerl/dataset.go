package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mlerl/mlerl/dataset"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
)

// `mlerl dataset` runs the stage; `mlerl dataset publish|pull` share
// versions between data roots. Cobra runs the parent's RunE when no
// subcommand name is given, and the stage's own flags stay local to it.
func init() {
	commands = append(commands, func() *cobra.Command {
		cmd := stageCommand("dataset", "Dataset stage: steps -> sft_examples and rl_states (with exports and stats); publish/pull share versions",
			dataset.DefaultConfig, dataset.Run)
		cmd.AddCommand(
			copyCommand("publish <src-dataset-uri> <dst-root>", "Copy a committed dataset version to another data root (e.g. local -> gs://), checksums verified",
				"mlerl dataset publish ./data/rl_states/v2 gs://team-bucket/mlerl"),
			copyCommand("pull <src-dataset-uri> <dst-root>", "Copy a committed dataset version from a shared root (e.g. gs:// -> local), checksums verified",
				"mlerl dataset pull gs://team-bucket/mlerl/rl_states/v2 ./data"),
		)
		return cmd
	})
}

// copyCommand is publish or pull: the same copy, named for its direction.
func copyCommand(use, short, example string) *cobra.Command {
	var withParents bool
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Example: "  " + example,
		Long: short + `.

The source is a dataset URI: <root>/<name>[/v<N>] (latest version without
/v<N>). The version keeps its name and number at the destination. Part
files, stats.md, exports and the blobs its rows reference (task trees,
snapshots) are copied and checked against the manifest's checksums; the
manifest is written last. Copying a version the destination already holds
with the same checksums does nothing; with other content it is refused.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			root, name, version, err := datasets.SplitURI(args[0])
			if err != nil {
				return err
			}
			src, err := store.Open(ctx, root)
			if err != nil {
				return err
			}
			dst, err := store.Open(ctx, args[1])
			if err != nil {
				return err
			}
			res, err := dataset.Publish(ctx, src, dst, name, version, dataset.PublishOptions{WithParents: withParents, Log: cmd.OutOrStdout()})
			if err != nil {
				return fmt.Errorf("%s: %w", cmd.Name(), err)
			}
			if res.NoOp {
				fmt.Fprintf(cmd.OutOrStdout(), "nothing to do: %s v%d is already at %s with the same checksums\n", res.Name, res.Version, args[1])
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&withParents, "with-parents", false, "also copy the parent versions (steps, tasks, ideas...) found in the source root")
	return cmd
}
