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

func TestSFTConfigValidate(t *testing.T) {
	base := func() SFTConfig { c := DefaultSFTConfig(); c.Tokenizer = "bytes"; return c }
	checkValidate(t, base, []validateCase[SFTConfig]{
		{"default", func(*SFTConfig) {}, ""},
		{"terse", func(c *SFTConfig) { c.Response = ResponseTerse }, ""},
		{"data", func(c *SFTConfig) { c.Data = "" }, `data "": must name the data root (a folder or gs://bucket/prefix)`},
		{"examples", func(c *SFTConfig) { c.Examples = "" }, `examples "": must name the sft_examples dataset (name or name/vN)`},
		{"out", func(c *SFTConfig) { c.Out = "" }, `out "": must name a checkpoint folder in the data root`},
		{"tokenizer", func(c *SFTConfig) { c.Tokenizer = "gpt2" }, `tokenizer "gpt2": want one of bytes`},
		{"vocab_min_count", func(c *SFTConfig) { c.VocabMinCount = 0 }, "vocab_min_count 0: must be at least 1"},
		{"model.vocab", func(c *SFTConfig) { c.Model.Vocab = 5000 }, "model.vocab 5000: must be 0: the vocabulary is trimmed to the examples' tokens (see vocab_min_count)"},
		{"model.ctx", func(c *SFTConfig) { c.Model.Ctx = 8 }, "model.ctx 8: must be at least 64: a prompt and an answer in the action format do not fit in less"},
		{"model.ctx zero", func(c *SFTConfig) { c.Model.Ctx = 0 }, "model.ctx 0: must be positive"},
		{"model.heads", func(c *SFTConfig) { c.Model.Heads = 5 }, "model.heads 5: must divide d_model (256)"},
		{"epochs", func(c *SFTConfig) { c.Epochs = 0 }, "epochs 0: must be at least 1"},
		{"batch_rows", func(c *SFTConfig) { c.BatchRows = 0 }, "batch_rows 0: must be at least 1"},
		{"checkpoint_every", func(c *SFTConfig) { c.CheckpointEvery = -1 }, "checkpoint_every -1: must not be negative (0: each epoch)"},
		{"max_steps", func(c *SFTConfig) { c.MaxSteps = -1 }, "max_steps -1: must not be negative (0: every epoch)"},
		{"response", func(c *SFTConfig) { c.Response = "short" }, `response "short": want full or terse`},
		{"optim.lr", func(c *SFTConfig) { c.Optim.LR = -1 }, "optim.lr -1: must be a positive number"},
	})
}

func TestPPOConfigValidate(t *testing.T) {
	checkValidate(t, DefaultPPOConfig, []validateCase[PPOConfig]{
		{"default", func(*PPOConfig) {}, ""},
		{"greedy", func(c *PPOConfig) { c.Temperature = 0 }, ""},
		{"data", func(c *PPOConfig) { c.Data = "" }, `data "": must name the data root (a folder or gs://bucket/prefix)`},
		{"states", func(c *PPOConfig) { c.States = "" }, `states "": must name the rl_states dataset (name or name/vN)`},
		{"sft", func(c *PPOConfig) { c.SFT = "" }, `sft "": must name the SFT checkpoint folder`},
		{"out", func(c *PPOConfig) { c.Out = "" }, `out "": must name a checkpoint folder in the data root`},
		{"out is sft", func(c *PPOConfig) { c.Out = c.SFT }, `out "checkpoints/sft": must differ from sft (the start and the KL reference)`},
		{"reward", func(c *PPOConfig) { c.Reward = "human" }, `reward "human": want one of env, format`},
		{"updates", func(c *PPOConfig) { c.Updates = 0 }, "updates 0: must be at least 1"},
		{"batch_size", func(c *PPOConfig) { c.BatchSize = 0 }, "batch_size 0: must be at least 1"},
		{"minibatches", func(c *PPOConfig) { c.Minibatches = 17 }, "minibatches 17: must be in [1, batch_size] (batch_size is 16)"},
		{"update_epochs", func(c *PPOConfig) { c.UpdateEpochs = 0 }, "update_epochs 0: must be at least 1"},
		{"clip_coef", func(c *PPOConfig) { c.ClipCoef = 0 }, "clip_coef 0: must be a positive number"},
		{"vf_coef", func(c *PPOConfig) { c.VfCoef = -1 }, "vf_coef -1: must be a number >= 0"},
		{"ent_coef", func(c *PPOConfig) { c.EntCoef = math.NaN() }, "ent_coef NaN: must be a number >= 0"},
		{"kl_coef", func(c *PPOConfig) { c.KLCoef = -0.05 }, "kl_coef -0.05: must be a number >= 0"},
		{"max_staleness", func(c *PPOConfig) { c.MaxStaleness = -1 }, "max_staleness -1: must not be negative"},
		{"workers", func(c *PPOConfig) { c.Workers = 0 }, "workers 0: must be at least 1"},
		{"temperature", func(c *PPOConfig) { c.Temperature = -1 }, "temperature -1: must be a number >= 0 (0: greedy)"},
		{"top_p", func(c *PPOConfig) { c.TopP = 0 }, "top_p 0: must be in (0, 1]"},
		{"max_new_tokens", func(c *PPOConfig) { c.MaxNewTokens = 0 }, "max_new_tokens 0: must be at least 1"},
		{"gen_batch", func(c *PPOConfig) { c.GenBatch = 0 }, "gen_batch 0: must be at least 1"},
		{"checkpoint_every", func(c *PPOConfig) { c.CheckpointEvery = -5 }, "checkpoint_every -5: must not be negative"},
		{"optim.beta2", func(c *PPOConfig) { c.Optim.Beta2 = 1 }, "optim.beta2 1: must be in [0, 1)"},
	})
}
