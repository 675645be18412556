package train

import (
	"math"
	"testing"

	"github.com/mlerl/mlerl/policy"
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

func TestSFTConfigValidate(t *testing.T) {
	base := func() SFTConfig { c := DefaultSFTConfig(); c.Tokenizer = "bytes"; return c }
	checkValidate(t, base, []validateCase[SFTConfig]{
		{"default", func(*SFTConfig) {}, ""},
		{"terse", func(c *SFTConfig) { c.Response = policy.ResponseTerse }, ""},
		{"data", func(c *SFTConfig) { c.Data = "" }, `data "": must name the data root (a folder or gs://bucket/prefix)`},
		{"examples", func(c *SFTConfig) { c.Examples = "" }, `examples "": must name the sft_examples dataset (name or name/vN)`},
		{"out", func(c *SFTConfig) { c.Out = "" }, `out "": must name a checkpoint folder in the data root`},
		{"tokenizer", func(c *SFTConfig) { c.Tokenizer = "gpt2" }, `tokenizer "gpt2": want one of bytes, qwen`},
		{"engine", func(c *SFTConfig) { c.Engine = "cuda" }, `engine "cuda": want native or gomlx`},
		{"vocab_min_count", func(c *SFTConfig) { c.VocabMinCount = 0 }, "vocab_min_count 0: must be at least 1"},
		{"model.vocab", func(c *SFTConfig) { c.Model.Vocab = 5000 }, "model.vocab 5000: must be 0: the vocabulary is trimmed to the examples' tokens (see vocab_min_count)"},
		{"model.ctx", func(c *SFTConfig) { c.Model.Ctx = 8 }, "model.ctx 8: cannot hold BOS + prompt_tokens 448 + response_tokens 160 = 609: raise ctx or lower the budgets"},
		{"model.ctx zero", func(c *SFTConfig) { c.Model.Ctx = 0 }, "model.ctx 0: must be positive"},
		{"model.prompt_tokens", func(c *SFTConfig) { c.Model.PromptTokens = 8 }, "model.prompt_tokens 8: must be at least 16"},
		{"model.heads", func(c *SFTConfig) { c.Model.Heads = 5 }, "model.heads 5: must divide d_model (256)"},
		{"epochs", func(c *SFTConfig) { c.Epochs = 0 }, "epochs 0: must be at least 1"},
		{"batch_rows", func(c *SFTConfig) { c.BatchRows = 0 }, "batch_rows 0: must be at least 1"},
		{"checkpoint_every", func(c *SFTConfig) { c.CheckpointEvery = -1 }, "checkpoint_every -1: must not be negative (0: each epoch)"},
		{"max_steps", func(c *SFTConfig) { c.MaxSteps = -1 }, "max_steps -1: must not be negative (0: every epoch)"},
		{"response", func(c *SFTConfig) { c.Response = "short" }, `response "short": want full or terse`},
		{"full", func(c *SFTConfig) { c.Response = policy.ResponseFull }, ""},
		{"optim.lr", func(c *SFTConfig) { c.Optim.LR = -1 }, "optim.lr -1: must be a positive number"},
		{"matmul bf16", func(c *SFTConfig) { c.Matmul = policy.MatmulBF16 }, ""},
		{"matmul", func(c *SFTConfig) { c.Matmul = "fp16" }, `matmul "fp16": want auto, fp32 or bf16`},
		{"matmul bf16 on gomlx", func(c *SFTConfig) { c.Engine, c.Matmul = policy.EngineGoMLX, policy.MatmulBF16 },
			`matmul "bf16": bf16 products are the native engine's (engine is gomlx): use auto or fp32`},
		{"matmul auto on gomlx", func(c *SFTConfig) { c.Engine = policy.EngineGoMLX }, ""},
	})
}

func TestPPOConfigValidate(t *testing.T) {
	checkValidate(t, DefaultPPOConfig, []validateCase[PPOConfig]{
		{"default", func(*PPOConfig) {}, ""},
		{"critic", func(c *PPOConfig) { c.Advantage, c.GroupSize, c.BatchSize, c.GenBatch = AdvantageCritic, 1, 8, 8 }, ""},
		{"horizon", func(c *PPOConfig) { c.Horizon = 0 }, "horizon 0: must be at least 1 (1: one-step rewards)"},
		{"horizon needs the env", func(c *PPOConfig) { c.Reward = RewardFormat }, "horizon 2: needs reward env (the continuation runs in the environment)"},
		{"credit", func(c *PPOConfig) { c.Credit = "last" }, `credit "last": want first or all`},
		{"credit all", func(c *PPOConfig) { c.Credit = CreditAll }, ""},
		{"credit all needs a continuation", func(c *PPOConfig) { c.Credit, c.Horizon = CreditAll, 1 }, `credit "all": trains every step of a continuation: it needs mode step, horizon >= 2 and advantage group`},
		{"greedy", func(c *PPOConfig) { c.Temperature = 0 }, "temperature 0: must be 1: the behaviour log-probabilities PPO's ratio divides by are stored at temperature 1, so sampling at another temperature would make every update off-policy without a correction"},
		{"top_p 0.95", func(c *PPOConfig) { c.TopP = 0.95 }, "top_p 0.95: must be 1: nucleus sampling changes the sampling distribution, and the stored log-probabilities are not under it"},
		{"group_size", func(c *PPOConfig) { c.GroupSize = 1 }, "group_size 1: must be at least 2 with advantage group (a sample's baseline is the others' mean)"},
		{"advantage", func(c *PPOConfig) { c.Advantage = "gae" }, `advantage "gae": want group or critic`},
		{"batch of whole groups", func(c *PPOConfig) { c.BatchSize = 30 }, "batch_size 30: must be a multiple of group_size 4 (whole groups per update)"},
		{"gen_batch of whole groups", func(c *PPOConfig) { c.GenBatch = 14 }, "gen_batch 14: must be a multiple of group_size 4 (each state's group is generated together)"},
		{"free_text", func(c *PPOConfig) { c.FreeText = "drop" }, `free_text "drop": want mask, force or train`},
		{"force needs the grammar", func(c *PPOConfig) { c.FreeText, c.Decode = FreeTextForce, policy.DecodeFree }, `free_text "force": needs decode constrained (the grammar fixes the free text)`},
		{"min_duration_s", func(c *PPOConfig) { c.MinDurationS = 0 }, "min_duration_s 0: must be a positive number of seconds (no sample may weigh 0)"},
		{"kl_target without kl_coef", func(c *PPOConfig) { c.KLTarget, c.KLCoef = 0.01, 0 }, "kl_coef 0: must be positive for kl_target to adapt it (the start, e.g. 0.02)"},
		{"target_kl", func(c *PPOConfig) { c.TargetKL = -1 }, "target_kl -1: must be a number >= 0 (0: never stop early)"},
		{"curve.per_task", func(c *PPOConfig) { c.Curve.Every, c.Curve.PerTask = 5, 0 }, "curve.per_task 0: must be at least 1"},
		{"curve.splits", func(c *PPOConfig) { c.Curve.Every, c.Curve.Splits = 5, []string{"test"} }, `curve.splits ["test"]: item 1 "test": want held-in or held-out`},
		{"data", func(c *PPOConfig) { c.Data = "" }, `data "": must name the data root (a folder or gs://bucket/prefix)`},
		{"states", func(c *PPOConfig) { c.States = "" }, `states "": must name the rl_states dataset (name or name/vN)`},
		{"sft", func(c *PPOConfig) { c.SFT = "" }, `sft "": must name the SFT checkpoint folder`},
		{"out", func(c *PPOConfig) { c.Out = "" }, `out "": must name a checkpoint folder in the data root`},
		{"out is sft", func(c *PPOConfig) { c.Out = c.SFT }, `out "checkpoints/sft": must differ from sft (the start and the KL reference)`},
		{"reward", func(c *PPOConfig) { c.Reward = "human" }, `reward "human": want one of env, format`},
		{"updates", func(c *PPOConfig) { c.Updates = 0 }, "updates 0: must be at least 1"},
		{"batch_size", func(c *PPOConfig) { c.BatchSize = 0 }, "batch_size 0: must be at least 1"},
		{"minibatches", func(c *PPOConfig) { c.Minibatches = 17 }, "minibatches 17: must be in [1, batch_size / group_size] (8 groups per update)"},
		{"update_epochs", func(c *PPOConfig) { c.UpdateEpochs = 0 }, "update_epochs 0: must be at least 1"},
		{"clip_coef", func(c *PPOConfig) { c.ClipCoef = 0 }, "clip_coef 0: must be a number in (0, 1)"},
		{"mode", func(c *PPOConfig) { c.Mode = "trajectory" }, `mode "trajectory": want step or episode`},
		{"episode needs env", func(c *PPOConfig) { c.Mode, c.Reward = ModeEpisode, RewardFormat }, `mode "episode": needs reward env (episodes run in the environment)`},
		{"decode", func(c *PPOConfig) { c.Decode = "greedy" }, `decode "greedy": want constrained or free`},
		{"episode_steps", func(c *PPOConfig) { c.EpisodeSteps = 0 }, "episode_steps 0: must be at least 1"},
		{"env.max_steps", func(c *PPOConfig) { c.Env.MaxSteps = -1 }, "env.max_steps -1: must be positive"},
		{"vf_coef", func(c *PPOConfig) { c.VfCoef = -1 }, "vf_coef -1: must be a number >= 0"},
		{"ent_coef", func(c *PPOConfig) { c.EntCoef = math.NaN() }, "ent_coef NaN: must be a number >= 0"},
		{"kl_coef", func(c *PPOConfig) { c.KLCoef = -0.05 }, "kl_coef -0.05: must be a number >= 0"},
		{"max_staleness", func(c *PPOConfig) { c.MaxStaleness = -1 }, "max_staleness -1: must not be negative"},
		{"workers", func(c *PPOConfig) { c.Workers = 0 }, "workers 0: must be at least 1"},
		{"max_new_tokens", func(c *PPOConfig) { c.MaxNewTokens = -1 }, "max_new_tokens -1: must not be negative (0: the policy's response_tokens)"},
		{"gen_batch", func(c *PPOConfig) { c.GenBatch = 0 }, "gen_batch 0: must be at least 1"},
		{"checkpoint_every", func(c *PPOConfig) { c.CheckpointEvery = -5 }, "checkpoint_every -5: must not be negative"},
		{"optim.beta2", func(c *PPOConfig) { c.Optim.Beta2 = 1 }, "optim.beta2 1: must be in [0, 1)"},
	})
}
