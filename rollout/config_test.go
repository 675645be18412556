package rollout

import (
	"math"
	"testing"
	"time"

	"github.com/mlerl/mlerl/internal/shard"
)

// TestConfigValidate pins the message for every field a rollout refuses;
// keys of nested configs come with their prefix.
func TestConfigValidate(t *testing.T) {
	t.Setenv(shard.EnvIndex, "")
	t.Setenv(shard.EnvCount, "")
	cases := []struct {
		name string
		edit func(*Config)
		want string // the whole message; "" for valid
	}{
		{"default", func(*Config) {}, ""},
		{"no slips", func(c *Config) { c.SlipRate = 0 }, ""},
		{"data", func(c *Config) { c.Data = "" }, `data "": must name the data root (a folder or gs://bucket/prefix)`},
		{"tasks", func(c *Config) { c.Tasks = "" }, `tasks "": must name the tasks dataset (name or name/vN)`},
		{"ideas", func(c *Config) { c.Ideas = "" }, `ideas "": must name the ideas dataset (name or name/vN)`},
		{"trajectories", func(c *Config) { c.Trajectories = "" }, `trajectories "": must name the dataset to write`},
		{"steps", func(c *Config) { c.Steps = "" }, `steps "": must name the dataset to write`},
		{"same outputs", func(c *Config) { c.Steps = "trajectories" }, `steps "trajectories": must differ from trajectories`},
		{"split", func(c *Config) { c.Split = "test" }, `split "test": want held-in, held-out or all`},
		{"only", func(c *Config) { c.Only = []string{"a", ""} }, `only ["a", ""]: item 2 is empty: want task ids`},
		{"shard", func(c *Config) { c.Shard = "3/3" }, `shard "3/3": want i/K with 0 <= i < K (e.g. 2/8)`},
		{"expert", func(c *Config) { c.Expert = "human" }, `expert "human": want scripted or llm`},
		{"llm expert offline", func(c *Config) { c.Expert = "llm" }, `expert "llm": needs llm.base_url (an OpenAI-compatible endpoint)`},
		{"per_task", func(c *Config) { c.PerTask = 0 }, "per_task 0: must be at least 1"},
		{"workers", func(c *Config) { c.Workers = -2 }, "workers -2: must not be negative (0: one per core)"},
		{"flush_every", func(c *Config) { c.FlushEvery = 0 }, "flush_every 0: must be at least 1"},
		{"slip_rate", func(c *Config) { c.SlipRate = 1.5 }, "slip_rate 1.5: must be in [0, 1] (a probability per step)"},
		{"NaN slip_rate", func(c *Config) { c.SlipRate = math.NaN() }, "slip_rate NaN: must be in [0, 1] (a probability per step)"},
		{"temperature", func(c *Config) { c.Temperature = -0.1 }, "temperature -0.1: must be a number >= 0"},
		{"full_budget", func(c *Config) { c.FullBudget = 0 }, "full_budget 0: must be positive (tokens)"},
		{"compact_budget", func(c *Config) { c.CompactBudget = -1 }, "compact_budget -1: must be positive (tokens)"},
		{"env.max_steps", func(c *Config) { c.Env.MaxSteps = -1 }, "env.max_steps -1: must be positive"},
		{"env.max_time", func(c *Config) { c.Env.MaxTime = -time.Second }, "env.max_time -1s: must be positive"},
		{"env.memory_bytes", func(c *Config) { c.Env.MemoryBytes = -1 }, "env.memory_bytes -1: must be positive (bytes: 4294967296 is 4 GiB)"},
		{"env.reward.marker_value", func(c *Config) { c.Env.Reward.MarkerValue = -1 }, "env.reward.marker_value -1: must be a number >= 0 (credit per marker reached)"},
		{"llm.timeout", func(c *Config) { c.LLM.Timeout = -time.Second }, "llm.timeout -1s: must not be negative (0: 2m0s)"},
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
