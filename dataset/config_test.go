package dataset

import (
	"fmt"
	"testing"

	"github.com/mlerl/mlerl/internal/config"
	"github.com/mlerl/mlerl/internal/datasets"
)

// TestConfigValidate pins the message for every field the dataset stage
// refuses.
func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Config)
		want string // the whole message; "" for valid
	}{
		{"default", func(*Config) {}, ""},
		{"error_steps", func(c *Config) { c.ErrorSteps = "sometimes" }, `error_steps "sometimes": want keep, drop-refused or drop`},
		{"data", func(c *Config) { c.Data = "" }, `data "": must name the data root (a folder or gs://bucket/prefix)`},
		{"steps", func(c *Config) { c.Steps = "" }, `steps "": must name the steps dataset (name or name/vN)`},
		{"sft", func(c *Config) { c.SFT = "" }, `sft "": must name the dataset to write`},
		{"rl_states", func(c *Config) { c.RLStates = "" }, `rl_states "": must name the dataset to write`},
		{"same outputs", func(c *Config) { c.RLStates = c.SFT }, `rl_states "sft_examples": must differ from sft`},
		{"max_tokens", func(c *Config) { c.MaxTokens = -1 }, "max_tokens -1: must not be negative (0: no limit)"},
		{"plan_variants", func(c *Config) { c.PlanVariants = -1 }, "plan_variants -1: must not be negative (0: no variants)"},
		{"per_stratum", func(c *Config) { c.PerStratum = -3 }, "per_stratum -3: must not be negative (0: every expert state)"},
		{"workers", func(c *Config) { c.Workers = -2 }, "workers -2: must not be negative (0: one per core)"},
		{"sharegpt_cutoff_len", func(c *Config) { c.SharegptCutoffLen = -1 }, "sharegpt_cutoff_len -1: must not be negative (0: no warning)"},
		{"verl_prompt", func(c *Config) { c.VerlPrompt = "short" }, `verl_prompt "short": prompt form "short": want policy, compact or full`},
		{"verl_prompt compact", func(c *Config) { c.VerlPrompt = "compact" }, ""},
	}
	for _, c := range cases {
		cfg := DefaultConfig()
		c.edit(&cfg)
		got := ""
		if err := cfg.Validate(); err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%s: got %q want %q", c.name, got, c.want)
		}
	}
}

// TestRunKeyExportFormat: with exports on, the run key holds the
// exports' format version, so a data root built before the exports
// changed (sharegpt_policy.jsonl, verl's policy prompt) gets a new
// version on a rerun with the same config instead of the old one being
// found with files this code no longer writes; without exports the key
// is what it was but for rl_states' scores (rlScores: the public part's
// since version 2), which are in the key either way.
func TestRunKeyExportFormat(t *testing.T) {
	steps, tasks := &datasets.Manifest{Name: "steps", Version: 3}, &datasets.Manifest{Name: "tasks", Version: 1}
	before := func(cfg Config) string { // the key before exportFormat
		c := cfg
		c.Data, c.Workers = "", 0
		return shortHash(fmt.Sprintf("%s v%d", steps.Name, steps.Version), fmt.Sprintf("%s v%d", tasks.Name, tasks.Version), config.Canonical(c))
	}
	cfg := DefaultConfig()
	cfg.VerlPrompt = "compact" // a config that says the same as before
	if runKey(cfg, steps, tasks) == before(cfg) {
		t.Errorf("exports on: the run key is the one versions written before sharegpt_policy.jsonl have")
	}
	cfg.Exports = false
	if runKey(cfg, steps, tasks) == before(cfg) {
		t.Errorf("exports off: the run key is the one rl_states with all answers' scores have")
	}
	c := cfg
	c.Data, c.Workers = "", 0
	if want := shortHash(fmt.Sprintf("%s v%d", steps.Name, steps.Version), fmt.Sprintf("%s v%d", tasks.Name, tasks.Version), config.Canonical(c), "rl_states scores v2"); runKey(cfg, steps, tasks) != want {
		t.Errorf("exports off: the run key holds more than rl_states' scores version")
	}
}
