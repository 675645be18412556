package dataset

import "testing"

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
