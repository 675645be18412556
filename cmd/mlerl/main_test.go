package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/spf13/cobra"

	"github.com/mlerl/mlerl/internal/progress"
)

func TestErrorLine(t *testing.T) {
	live := context.Background()
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	root := &cobra.Command{Use: "mlerl"}
	rollout := &cobra.Command{Use: "rollout"}
	commit := &cobra.Command{Use: "commit"}
	root.AddCommand(rollout)
	rollout.AddCommand(commit)
	bar := progress.NewTo(io.Discard, false, "rollout", 6)
	tests := []struct {
		name string
		ctx  context.Context
		cmd  *cobra.Command
		err  error
		want string
	}{
		{"failure", live, rollout, errors.New("rollout: no held-in tasks"), "mlerl: rollout: no held-in tasks"},
		{"cancelled without a signal", live, rollout, context.Canceled, "mlerl: context canceled"},
		{"stage says how far it got", stopped, rollout,
			bar.Interrupted(context.Canceled, 4, "trajectories", "rerun the same command to resume (the pending version keeps them)"),
			"rollout: interrupted after 4/6 trajectories; rerun the same command to resume (the pending version keeps them)"},
		{"cancellation the stage explains", stopped, rollout, fmt.Errorf("evaluate: %w (rerun the same command to resume; finished pairs are kept)", context.Canceled),
			"mlerl rollout: interrupted: evaluate: context canceled (rerun the same command to resume; finished pairs are kept)"},
		{"bare cancellation", stopped, commit, fmt.Errorf("read steps/v3: %w", context.Canceled),
			"mlerl rollout commit: interrupted (read steps/v3: context canceled); rerun the same command to finish: a stage resumes its pending version, and committed versions are never rewritten"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errorLine(tt.ctx, tt.cmd, tt.err); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}
