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
		{"no arms", func(c *Config) { c.Arms, c.ExtraArms = nil, nil }, "must list at least one arm"},
		{"unknown arm", func(c *Config) { c.Arms = []string{"sft", "ppo"} }, `item 2 "ppo" is not a built-in arm`},
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
