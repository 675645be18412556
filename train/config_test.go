package train

import (
	"math"
	"testing"
)

// validateCase is one config edit and the whole message it must give
// ("" for valid).
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

func TestModelConfigValidate(t *testing.T) {
	base := func() ModelConfig { c := DemoModelConfig(); c.Vocab = 100; return c }
	checkValidate(t, base, []validateCase[ModelConfig]{
		{"demo", func(*ModelConfig) {}, ""},
		{"d_model", func(c *ModelConfig) { c.DModel = 0 }, "d_model 0: must be positive"},
		{"heads", func(c *ModelConfig) { c.Heads = -1 }, "heads -1: must be positive"},
		{"heads divide", func(c *ModelConfig) { c.Heads = 3 }, "heads 3: must divide d_model (256)"},
		{"layers", func(c *ModelConfig) { c.Layers = 0 }, "layers 0: must be positive"},
		{"ctx", func(c *ModelConfig) { c.Ctx = 0 }, "ctx 0: must be positive"},
		{"ffn", func(c *ModelConfig) { c.FFN = -1 }, "ffn -1: must not be negative (0: 4*d_model)"},
		{"vocab", func(c *ModelConfig) { c.Vocab = 2 }, "vocab 2: must be at least 4 (the special tokens)"},
	})
}

func TestOptimConfigValidate(t *testing.T) {
	base := func() OptimConfig { return DefaultSFTConfig().Optim }
	checkValidate(t, base, []validateCase[OptimConfig]{
		{"sft default", func(*OptimConfig) {}, ""},
		{"ppo default", func(o *OptimConfig) { *o = DefaultPPOConfig().Optim }, ""},
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
