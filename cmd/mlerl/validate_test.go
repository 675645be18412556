package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigRefusedUpFront runs each stage with an impossible value: the
// command fails with one line naming the stage and the key as the user
// wrote it (flag, kebab-case alias, or file and line), and nothing is
// written to the data root.
func TestConfigRefusedUpFront(t *testing.T) {
	cases := []struct {
		name string
		args []string
		yaml string // written to c.yaml and passed with --config; FILE in want is its path
		want string
	}{
		{"workers", []string{"rollout", "--workers", "-2"}, "", "rollout: --workers -2: must not be negative (0: one per core)"},
		{"slip_rate", []string{"rollout", "--slip_rate", "1.5"}, "", "rollout: --slip_rate 1.5: must be in [0, 1] (a probability per step)"},
		{"kebab alias", []string{"rollout", "--slip-rate=1.5"}, "", "rollout: --slip-rate 1.5: must be in [0, 1] (a probability per step)"},
		{"memory_bytes", []string{"rollout", "--env.memory_bytes", "-1"}, "", "rollout: --env.memory_bytes -1: must be positive (bytes: 4294967296 is 4 GiB)"},
		{"max_steps", []string{"rollout", "--env.max_steps", "-1"}, "", "rollout: --env.max_steps -1: must be positive"},
		{"max_time", []string{"rollout", "--env.max-time", "-1s"}, "", "rollout: --env.max-time -1s: must be positive"},
		{"commit", []string{"rollout", "commit", "--per_task", "0"}, "", "rollout commit: --per_task 0: must be at least 1"},
		{"threshold", []string{"ingest", "ideas", "--threshold", "2"}, "", "ingest ideas: --threshold 2: must be in (-1, 1] (a cosine similarity; 1 disables the near-duplicate check)"},
		{"ingest tasks", []string{"ingest", "tasks", "--workers", "-2"}, "", "ingest tasks: --workers -2: must not be negative (0: one per CPU core)"},
		{"dataset", []string{"dataset", "--error-steps", "some"}, "", `dataset: --error-steps "some": want keep, drop-refused or drop`},
		{"model.ctx", []string{"train", "sft", "--model.ctx", "8"}, "", "train sft: --model.ctx 8: cannot hold BOS + prompt_tokens 448 + response_tokens 160 = 609: raise ctx or lower the budgets"},
		{"ppo", []string{"train", "ppo", "--minibatches", "0"}, "", "train ppo: --minibatches 0: must be in [1, batch_size / group_size] (8 groups per update)"},
		{"evaluate", []string{"evaluate", "--top_p", "0"}, "", "evaluate: --top_p 0: must be in (0, 1]"},
		{"serve-env", []string{"serve-env", "--addr", "localhost"}, "", `serve-env: --addr "localhost": want host:port, e.g. 127.0.0.1:8080 (:8080 listens on every interface)`},
		{"yaml value", []string{"rollout"}, "per_task: 3\nenv:\n  max_steps: -1\n", "rollout: config FILE line 3: env.max_steps -1: must be positive"},
		{"flag over yaml", []string{"rollout", "--env.max_steps=0"}, "env:\n  max_steps: -1\n", "rollout: --env.max_steps 0: must be positive"},
		{"yaml type", []string{"rollout"}, "seed: 1\nper_task: five\n", `rollout: config FILE line 2: per_task "five": want an integer`},
		{"yaml syntax", []string{"rollout"}, "per_task: 3\nonly: [a, b\nseed: 1\n", `rollout: config FILE line 2: did not find expected ',' or ']' (in "only: [a, b")`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			root := filepath.Join(dir, "data")
			args := append(c.args, "--data", root)
			want := c.want
			if c.yaml != "" {
				path := filepath.Join(dir, "c.yaml")
				if err := os.WriteFile(path, []byte(c.yaml), 0o644); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--config", path)
				want = strings.Replace(want, "FILE", path, 1)
			}
			_, err := run(t, args...)
			if err == nil || err.Error() != want {
				t.Errorf("got  %v\nwant %s", err, want)
			}
			if _, err := os.Stat(root); !os.IsNotExist(err) {
				t.Errorf("the data root was touched: %v", err)
			}
		})
	}
	_, stderr, code := runMain(t, "rollout", "--slip_rate", "1.5", "--data", filepath.Join(t.TempDir(), "d"))
	if want := "mlerl: rollout: --slip_rate 1.5: must be in [0, 1] (a probability per step)\n"; code != 1 || stderr != want {
		t.Errorf("main: got exit %d, stderr %q want 1, %q", code, stderr, want)
	}
}
