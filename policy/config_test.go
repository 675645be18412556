package policy

import (
	"math"
	"testing"
)

type validateCase[C any] struct {
	name string
	edit func(*C)
	want string
}

func checkValidate[C interface{ Validate() error }](t *testing.T, base func() C, cases []validateCase[C]) {
	t.Helper()
	for _, c := range cases {
		cfg := base()
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

func TestConfigValidate(t *testing.T) {
	base := func() Config { c := DemoConfig(); c.Vocab = 100; return c }
	checkValidate(t, base, []validateCase[Config]{
		{"demo", func(*Config) {}, ""},
		{"d_model", func(c *Config) { c.DModel = 0 }, "d_model 0: must be positive"},
		{"heads", func(c *Config) { c.Heads = -1 }, "heads -1: must be positive"},
		{"heads divide", func(c *Config) { c.Heads = 3 }, "heads 3: must divide d_model (256)"},
		{"layers", func(c *Config) { c.Layers = 0 }, "layers 0: must be positive"},
		{"ctx", func(c *Config) { c.Ctx = 0 }, "ctx 0: must be positive"},
		{"ffn", func(c *Config) { c.FFN = -1 }, "ffn -1: must not be negative (0: 4*d_model)"},
		{"vocab", func(c *Config) { c.Vocab = -2 }, "vocab -2: must not be negative (0: from the trimmed vocabulary)"},
		{"head width", func(c *Config) { c.Heads = 256 }, "heads 256: must leave an even head width (d_model/heads is 1; rotary embeddings rotate pairs)"},
		{"rope_base", func(c *Config) { c.RoPEBase = 0.5 }, "rope_base 0.5: must be a number > 1 (0: 10000)"},
		{"response_tokens", func(c *Config) { c.ResponseTokens = 1 }, "response_tokens 1: must be at least 2"},
		{"budgets", func(c *Config) { c.PromptTokens = 600 }, "ctx 640: cannot hold BOS + prompt_tokens 600 + response_tokens 160 = 761: raise ctx or lower the budgets"},
	})
}
func TestOptimConfigValidate(t *testing.T) {
	base := func() OptimConfig {
		return OptimConfig{LR: 1e-3, MinLRRatio: 0.1, WarmupSteps: 20, WeightDecay: 0.01, Beta1: 0.9, Beta2: 0.95, ClipNorm: 1}
	}
	checkValidate(t, base, []validateCase[OptimConfig]{
		{"sft default", func(*OptimConfig) {}, ""},
		{"lr", func(o *OptimConfig) { o.LR = 0 }, "lr 0: must be a positive number"},
		{"NaN lr", func(o *OptimConfig) { o.LR = math.NaN() }, "lr NaN: must be a positive number"},
		{"min_lr_ratio", func(o *OptimConfig) { o.MinLRRatio = 1.5 }, "min_lr_ratio 1.5: must be in [0, 1] (a fraction of lr)"},
		{"warmup_steps", func(o *OptimConfig) { o.WarmupSteps = -1 }, "warmup_steps -1: must not be negative"},
		{"weight_decay", func(o *OptimConfig) { o.WeightDecay = -0.01 }, "weight_decay -0.01: must be a number >= 0"},
		{"beta1", func(o *OptimConfig) { o.Beta1 = 1 }, "beta1 1: must be in [0, 1)"},
		{"beta2", func(o *OptimConfig) { o.Beta2 = -0.1 }, "beta2 -0.1: must be in [0, 1)"},
		{"clip_norm", func(o *OptimConfig) { o.ClipNorm = math.Inf(1) }, "clip_norm +Inf: must be a number >= 0 (0: off)"},
	})
}
