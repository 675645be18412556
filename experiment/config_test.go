package experiment

import (
	"strings"
	"testing"
)

// TestConfigValidate: every bad value is refused in one line naming its key.
func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Config)
		want string // substring of the error; "" for a valid config
	}{
		{"default", func(*Config) {}, ""},
		{"extra arm", func(c *Config) { c.ExtraArms = []string{"high-kl: --kl_coef=0.5"} }, ""},
		{"no data", func(c *Config) { c.Data = "" }, "data"},
		{"name with a slash", func(c *Config) { c.Name = "a/b" }, "name"},
		{"no seeds", func(c *Config) { c.Seeds = nil }, "seeds"},
		{"seed twice", func(c *Config) { c.Seeds = []int{1, 2, 1} }, "1 is listed twice"},
		{"every arm of the preset", func(c *Config) { c.Arms, c.ExtraArms = nil, nil }, ""},
		{"unknown arm", func(c *Config) { c.Arms = []string{"sft", "ppo"} }, `item 2 "ppo" is not a built-in arm of preset main`},
		{"preset rl", func(c *Config) { c.Preset = PresetRL }, ""},
		{"preset ablations", func(c *Config) { c.Preset = PresetAblations }, ""},
		{"preset taskcount", func(c *Config) { c.Preset = PresetTaskCount }, ""},
		{"unknown preset", func(c *Config) { c.Preset = "grid" }, "want one of main, rl, ablations, taskcount"},
		{"an arm of another preset", func(c *Config) { c.Preset, c.Arms = PresetRL, []string{"sft", "no-duration"} }, `"no-duration" is not a built-in arm of preset rl`},
		{"a subset without its base", func(c *Config) { c.Preset, c.Arms = PresetAblations, []string{"sft", "async-no-duration"} }, "async-no-duration is an ablation of async"},
		{"extra arm without sft+ppo", func(c *Config) {
			c.Preset, c.ExtraArms = PresetTaskCount, []string{"ppo-1task: --state_tasks=1"}
		}, ""},
		{"extra arm without flags", func(c *Config) { c.ExtraArms = []string{"lonely"} }, "want 'name: --flag value ...'"},
		{"extra arm named like a built-in", func(c *Config) { c.ExtraArms = []string{"sft: --updates=2"} }, "is listed twice"},
		{"ablation without its base", func(c *Config) { c.Arms = []string{"initial", "sparse"} }, "sparse is an ablation of sft+ppo"},
		{"budget", func(c *Config) { c.Budget = "huge" }, "want small or full"},
	}
	for _, c := range cases {
		cfg := DefaultConfig()
		c.edit(&cfg)
		err := cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.want)
		case err != nil && strings.Contains(err.Error(), "\n"):
			t.Errorf("%s: error is not one line: %q", c.name, err)
		}
	}
}
