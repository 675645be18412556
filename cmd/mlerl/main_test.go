package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
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

// TestProfiles: MLERL_CPUPROFILE and MLERL_MEMPROFILE write the command's
// CPU and heap profiles (gzipped pprof protobufs, no temporary file left
// beside them) and keep its exit status; a path that cannot be created
// stops the command with the variable's name.
func TestProfiles(t *testing.T) {
	for _, env := range []string{CPUProfileEnv, MemProfileEnv} {
		t.Run(env, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "profile.pprof")
			t.Setenv(env, path)
			if _, stderr, code := runMain(t, "version"); code != 0 {
				t.Fatalf("version with a profile: exit %d: %s", code, stderr)
			}
			b, err := os.ReadFile(path)
			if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
				t.Errorf("profile %s: %d bytes, err %v: want a gzipped pprof file", path, len(b), err)
			}
			if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(left) > 0 {
				t.Errorf("temporary files left: %v", left)
			}
			if _, _, code := runMain(t, "no-such-command"); code != 1 {
				t.Errorf("a failing command with a profile: exit %d, want 1", code)
			}
			t.Setenv(env, filepath.Join(t.TempDir(), "missing", "profile.pprof"))
			if _, stderr, code := runMain(t, "version"); code != 2 || !strings.Contains(stderr, env) {
				t.Errorf("an unwritable profile path: exit %d, stderr %q; want 2 and the variable's name", code, stderr)
			}
		})
	}
}
