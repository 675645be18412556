package train

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/internal/config"
	"github.com/mlerl/mlerl/internal/progress"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/schemas"
)

// Step-wise PPO (ML-Agent) with duration-aware weighting (the second
// paper), reading top to bottom in RunPPOWith: settings; states and
// policies; the asynchronous reward collector; then per update: rollout
// (sample expert states, generate group_size actions for each, collect
// rewards as they arrive, drop groups older than max_staleness policy
// versions), advantages, the duration weights, epochs x minibatches of
// the clipped PPO loss, metrics, learning-curve evaluations and
// checkpoints.
//
// Each sample is a one-step episode: the state comes from the expert
// state pool, the environment executes one action, the episode ends. The
// baseline that turns a reward into an advantage is, by default, the
// mean reward of the other samples of the same state (leave-one-out,
// what RLOO and GRPO use): the signal is which action pays in this
// state, not which state pays. A group whose samples all earned the same
// reward carries no signal and is dropped (and counted). The alternative
// is ML-Agent's critic, A = R - V(s), with V a value head on the trunk
// that does not move it, warmed up on the expert states' rewards. Every
// decision token of an action gets the sample's advantage (token-level
// advantages); tokens the grammar forced and, by default, free text
// (Reflection, Thought, free arguments: what the environment does not act
// on) are left out of the policy-gradient and KL terms. Episode-wise PPO
// (whole trajectories from a task's initial state) is the baseline arm in
// episodes.go.

// PPOConfig is the config of `mlerl train ppo`.
type PPOConfig struct {
	Data   string `yaml:"data" help:"data root: a local path or gs://bucket/prefix"`
	States string `yaml:"states" help:"rl_states dataset in the data root (name or name/v<N>)"`
	SFT    string `yaml:"sft" help:"SFT checkpoint folder in the data root (its latest step is the start and the KL reference; mlerl's model or a Hugging Face policy, as its checkpoint records)"`
	Out    string `yaml:"out" help:"PPO checkpoint folder in the data root"`
	Reward string `yaml:"reward" help:"reward: env (sandboxed execution, agentic-ML reward) or format (format only, no execution)"`
	// Policy, when a Hugging Face folder or GGUF file, is the start and the KL
	// reference instead of the SFT checkpoint (policy.ParseSpec).
	Policy string `yaml:"policy" help:"empty: start from the sft checkpoint, whatever policy it trained (mlerl's model or a Hugging Face one); hf:DIR or gguf:FILE: start from this Hugging Face checkpoint folder or GGUF model file instead (with adapter when given), which is then the KL reference, and sft is not read"`
	// Adapter is a PEFT adapter the Hugging Face policy starts from.
	Adapter string `yaml:"adapter" help:"with policy hf:DIR or gguf:FILE: a PEFT LoRA adapter folder to start from (e.g. one LLaMA-Factory trained; empty: fresh adapters, the base itself)"`
	// Budgets are a Hugging Face policy's token budgets when it starts
	// from its folder (an SFT checkpoint has its own).
	Budgets policy.Budgets `yaml:"model"`
	// Tuning: LoRA or full fine-tuning, base storage, recomputation.
	Tuning     policy.Tuning `yaml:",inline"`
	SaveMerged string        `yaml:"save_merged" help:"with a Hugging Face policy: a local folder (new, empty, or this run's own from an earlier or resumed run) to write the trained model into at the end, adapters merged, as a Hugging Face checkpoint (empty: none; every checkpoint holds the PEFT adapter either way)"`
	// Mode: step-wise (ML-Agent) or episode-wise PPO (the baseline arm).
	Mode string `yaml:"mode" help:"step (actions from sampled expert states, ML-Agent) or episode (whole episodes from each task's initial state, the baseline)"`
	// Env configures the environment of the env reward: budgets, reward
	// terms, instrumentation, executing edits and undos in the same step.
	Env    env.Config `yaml:"env"`
	Engine string     `yaml:"engine" help:"native (the CPU engine) or gomlx (GoMLX; XLA on a GPU with GOMLX_BACKEND=xla:cuda)"`
	// Matmul is the precision of the learner's and the reference's
	// products (policy.SetMatmul); the sampler decodes in float32 either
	// way.
	Matmul string `yaml:"matmul" help:"precision of the learner's (and the reference's) matrix products: auto (bf16 where the CPU's bf16 products outrun float32: AMX tiles, or AMD's AVX512_BF16; else fp32; the printed config shows what it resolved to), fp32, or bf16 (native engine); the sampler decodes in float32 either way"`
	// OldLogP says where the ratio's behaviour log-probabilities come
	// from: the sampler's, or the learner's own forward before an
	// update's first minibatch (needed when the learner's products
	// differ from the sampler's float32 ones).
	OldLogP string `yaml:"old_logp" help:"behaviour log-probabilities of the PPO ratio: sampler (those the float32 sampler drew with), recompute (the learner's own forward over the batch before the update's first minibatch, as verl and OpenRLHF do: the ratio starts at exactly 1 whatever the products' precision; one more forward per update) or auto (recompute where matmul resolved to bf16, else sampler)"`
	Decode  string `yaml:"decode" help:"constrained (actions follow the action grammar; the PPO ratio uses the same masks) or free"`
	Updates int    `yaml:"updates" help:"PPO updates"`
	// BatchSize counts samples: batch_size / group_size states per update.
	BatchSize int `yaml:"batch_size" help:"samples (state, action, reward) per update: batch_size / group_size states, group_size actions each"`
	GroupSize int `yaml:"group_size" help:"actions sampled per state (K): the group whose other samples' mean reward is each one's baseline"`
	// Horizon > 1 credits each sampled action with the rewards of the
	// policy's own continuation from the state (n-step returns).
	Horizon int `yaml:"horizon" help:"mode step: steps credited to a sampled action: 1 (its own reward) or n (its reward plus those of the policy's next n-1 actions from the state it leads to, in live environments); episode-wise PPO credits whole returns"`
	// Credit says which steps of an n-step continuation are trained.
	Credit string `yaml:"credit" help:"mode step, horizon > 1: first (only the sampled first action is trained) or all (every action of the continuation is trained with its episode's group-relative advantage A_0, as multi-turn GRPO: an edit the continuation leaves unrun costs the second action too)"`
	// Advantage is the baseline: the group's (leave-one-out) or a critic's.
	Advantage    string  `yaml:"advantage" help:"group (A = R - mean of the group's other rewards, RLOO/GRPO) or critic (A = R - V(s), ML-Agent's PPO: a value head that does not move the trunk)"`
	GroupStd     bool    `yaml:"group_std" help:"advantage group: divide by the group's reward standard deviation"`
	NormAdv      bool    `yaml:"norm_adv" help:"advantage critic: normalise advantages over the batch"`
	CriticWarmup int     `yaml:"critic_warmup" help:"advantage critic: value-head steps on the expert states' rewards before the first update"`
	Minibatches  int     `yaml:"minibatches" help:"minibatches per update epoch (whole groups each)"`
	UpdateEpochs int     `yaml:"update_epochs" help:"passes over each batch"`
	TargetKL     float64 `yaml:"target_kl" help:"stop an update's epochs once a minibatch's approx_kl exceeds this (0: never)"`
	ClipCoef     float64 `yaml:"clip_coef" help:"PPO ratio clipping"`
	ClipCoefHigh float64 `yaml:"clip_coef_high" help:"upper clip of the ratio, 1+clip_coef_high (DAPO's clip-higher: unlikely tokens can gain more than likely ones lose; 0: clip_coef, symmetric)"`
	VfCoef       float64 `yaml:"vf_coef" help:"advantage critic: value loss coefficient (the value head has its own gradient: it does not move the trunk)"`
	EntCoef      float64 `yaml:"ent_coef" help:"entropy bonus coefficient (decision tokens)"`
	KLCoef       float64 `yaml:"kl_coef" help:"KL penalty to the frozen SFT policy (per decision token); the start when kl_target adapts it"`
	KLTarget     float64 `yaml:"kl_target" help:"adapt kl_coef after each update toward this KL to the SFT policy per decision token (x1.5 above 1.5 x target, /1.5 below target / 1.5; 0: fixed)"`
	// FreeText decides what the loss does with free-text tokens.
	FreeText string `yaml:"free_text" help:"mask (free-text tokens are left out of the PG and KL terms), force (Reflection and Thought fixed to '-', terse policies only) or train (every sampled token, as before)"`
	// DurationWeighting multiplies each sample's policy-gradient term by
	// max(dt_k, min_duration_s) / its batch mean.
	DurationWeighting bool    `yaml:"duration_weighting" help:"weight policy-gradient terms by the step's duration (floored at min_duration_s) / the batch mean"`
	MinDurationS      float64 `yaml:"min_duration_s" help:"duration weighting: the floor of a step's duration in seconds, so that no sample weighs 0"`
	// SettlePending runs an expert state's pending edit before the
	// policy acts in it (env.Env.Settle).
	SettlePending bool `yaml:"settle_pending" help:"run a state's pending edit before the policy acts, so that an Execute Script is not credited with the expert's edit"`
	// Lockstep plays live episodes' steps (horizon > 1, episode-wise) in
	// lockstep, every episode's step t before any step t+1 (the earlier
	// schedule); by default an episode acts again once its own step is
	// back, without waiting for another's slow script (playSteps). The
	// samples are the same either way.
	Lockstep bool `yaml:"lockstep" help:"live episodes (horizon > 1, episode-wise): every episode's step t runs before any step t+1 (the samples are the same; by default episodes whose step is back act again while a slow script runs)"`

	// Collector: sync (the default) or async, the second paper's regime.
	Collector    string             `yaml:"collector" help:"sync (every generated group is used: no frequency bias) or async (a pool of workers actors that generate and execute continuously; each update takes the first batch_size completions, the duration-aware paper's regime; needs advantage critic)"`
	MaxStaleness int                `yaml:"max_staleness" help:"drop groups (async: samples) generated more than this many policy versions ago"`
	Workers      int                `yaml:"workers" help:"concurrent reward workers"`
	Optim        policy.OptimConfig `yaml:"optim"`
	Temperature  float64            `yaml:"temperature" help:"sampling temperature: 1 (the stored log-probabilities are at temperature 1)"`
	TopP         float64            `yaml:"top_p" help:"nucleus sampling threshold: 1 (PPO's ratio needs the sampling distribution's log-probabilities)"`
	MaxNewTokens int                `yaml:"max_new_tokens" help:"longest action in tokens (0: the policy's response_tokens)"`
	GenBatch     int                `yaml:"gen_batch" help:"samples per generation call (gen_batch / group_size states)"`
	EpisodeSteps int                `yaml:"episode_steps" help:"mode episode: actions per episode"`
	Seed         int64              `yaml:"seed" help:"seed for state sampling and generation"`
	// StateTasks restricts the state pool to the first N held-in tasks of
	// a fixed order (ML-Agent's task-count curve).
	StateTasks int `yaml:"state_tasks" help:"train on the expert states of the first N held-in tasks only, in a fixed order (task ids shuffled with a fixed seed; 0: every task)"`
	// Oversample bounds dynamic sampling (DAPO): groups without a signal
	// are replaced by more draws, up to this many times the groups wanted.
	Oversample int `yaml:"oversample" help:"dynamic sampling: when groups carry no signal (equal credit), draw more states until batch_size samples in groups with a signal are collected, at most oversample x batch_size / group_size states per update (1: one draw per group, no dynamic sampling)"`
	// OwnStates mixes states the policy reached itself into the pool
	// (DAgger-style; own.go).
	OwnStates OwnStatesConfig `yaml:"own_states"`
	// Select says which checkpoint `mlerl evaluate` takes (select.go).
	Select SelectConfig `yaml:"select"`
	// Curve evaluates the policy every curve.every updates: ML-Agent's
	// learning curves (curve.go).
	Curve           CurveConfig `yaml:"curve"`
	CheckpointEvery int         `yaml:"checkpoint_every" help:"save every N updates (and at the end)"`
	Resume          bool        `yaml:"resume" help:"continue from the latest PPO checkpoint when there is one"`
}

// PPO modes, advantage baselines and free-text treatments.
const (
	ModeStep    = "step"
	ModeEpisode = "episode"

	AdvantageGroup  = "group"
	AdvantageCritic = "critic"

	CreditFirst = "first"
	CreditAll   = "all"

	FreeTextMask  = "mask"
	FreeTextForce = "force"
	FreeTextTrain = "train"

	OldLogPAuto      = "auto"
	OldLogPSampler   = "sampler"
	OldLogPRecompute = "recompute"
)

// DefaultPPOConfig holds the defaults SCIENCE.md's seed-1 runs 7 and 7b
// chose for the demo-sized policy: the group baseline over 4 actions per
// state, each credited with its own reward and the policy's next action's
// (horizon 2) in MLAgentBench's semantics (EnvRewardConfig: an edit does
// not run its script), free text out of the loss, lr 5e-5, 2 epochs x 2
// minibatches, kl_coef 0.02; CleanRL's where the runs did not look.
func DefaultPPOConfig() PPOConfig {
	return PPOConfig{
		Data: "./data", States: schemas.RLStates.Name, SFT: "checkpoints/sft", Out: "checkpoints/ppo",
		Budgets: policy.DefaultBudgets(), Tuning: policy.DefaultTuning(),
		Reward: RewardEnv, Mode: ModeStep, Env: EnvRewardConfig(), Engine: policy.EngineNative, Matmul: policy.MatmulAuto, OldLogP: OldLogPAuto, Decode: policy.DecodeConstrained,
		Updates: 20, BatchSize: 32, GroupSize: 4, Horizon: 2, Credit: CreditFirst, Advantage: AdvantageGroup, CriticWarmup: 50, NormAdv: true,
		Minibatches: 2, UpdateEpochs: 2, TargetKL: 0.05,
		ClipCoef: 0.2, VfCoef: 0.5, EntCoef: 0.0, KLCoef: 0.02, KLTarget: 0,
		FreeText: FreeTextMask, Collector: CollectorSync, DurationWeighting: true, MinDurationS: 1, SettlePending: false, MaxStaleness: 2, Workers: 2,
		Optim:       policy.OptimConfig{LR: 5e-5, MinLRRatio: 1, WarmupSteps: 0, WeightDecay: 0, Beta1: 0.9, Beta2: 0.999, ClipNorm: 1},
		Temperature: 1, TopP: 1, GenBatch: 32, EpisodeSteps: 4, Seed: 1, Curve: DefaultCurveConfig(), CheckpointEvery: 5, Resume: true,
		Oversample: 4, OwnStates: DefaultOwnStatesConfig(), Select: DefaultSelectConfig(),
	}
}

// Derive resolves base_storage, matmul and old_logp auto to what they
// mean on this machine (config.Deriver; policy.ResolvePrecision), so that
// the config the stage prints and every checkpoint's config.json say
// what ran. A value that does not resolve is left for Validate, and the
// run, to refuse.
func (c *PPOConfig) Derive() { _ = c.resolvePrecision() }

// resolvePrecision resolves the tuning's base_storage (policy.Tuning's
// ResolvedFor the policy key; started from an SFT checkpoint, whose
// base only its policy.json names, startPolicy keeps a quantized storage
// it recorded when this was auto), matmul (for the engine; empty, as in
// the configs of runs from before the key, is fp32: PPO computed in
// float32 then) and old_logp: the one place train ppo decides them.
func (c *PPOConfig) resolvePrecision() error {
	t, terr := c.Tuning.ResolvedForEngine(c.Policy, c.Engine)
	if terr == nil {
		c.Tuning = t
	}
	if strings.TrimSpace(c.Matmul) == "" {
		c.Matmul = policy.MatmulFP32
	}
	mm, err := policy.ResolveMatmul(c.Engine, c.Matmul)
	if err != nil {
		return config.Errorf("matmul", c.Matmul, "%v", err)
	}
	c.Matmul = mm
	if c.OldLogP == OldLogPAuto || c.OldLogP == "" {
		c.OldLogP = OldLogPSampler
		if mm == policy.MatmulBF16 {
			c.OldLogP = OldLogPRecompute
		}
	}
	return terr
}

// Validate checks the config, each failure one line naming the key.
func (c PPOConfig) Validate() error {
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	switch {
	case c.Data == "":
		return config.Errorf("data", c.Data, "must name the data root (a folder or gs://bucket/prefix)")
	case c.States == "":
		return config.Errorf("states", c.States, "must name the rl_states dataset (name or name/vN)")
	case c.SFT == "":
		return config.Errorf("sft", c.SFT, "must name the SFT checkpoint folder")
	case c.Out == "":
		return config.Errorf("out", c.Out, "must name a checkpoint folder in the data root")
	case c.Out == c.SFT:
		return config.Errorf("out", c.Out, "must differ from sft (the start and the KL reference)")
	case c.Reward != RewardEnv && c.Reward != RewardFormat:
		return config.Errorf("reward", c.Reward, "want one of %s, %s", RewardEnv, RewardFormat)
	case c.Mode != ModeStep && c.Mode != ModeEpisode:
		return config.Errorf("mode", c.Mode, "want %s or %s", ModeStep, ModeEpisode)
	case c.Mode == ModeEpisode && c.Reward != RewardEnv:
		return config.Errorf("mode", c.Mode, "needs reward %s (episodes run in the environment)", RewardEnv)
	case c.Engine != policy.EngineNative && c.Engine != policy.EngineGoMLX:
		return config.Errorf("engine", c.Engine, "want %s or %s", policy.EngineNative, policy.EngineGoMLX)
	case c.Decode != policy.DecodeConstrained && c.Decode != policy.DecodeFree:
		return config.Errorf("decode", c.Decode, "want %s or %s", policy.DecodeConstrained, policy.DecodeFree)
	case c.Matmul != "" && c.Matmul != policy.MatmulAuto && c.Matmul != policy.MatmulFP32 && c.Matmul != policy.MatmulBF16:
		return config.Errorf("matmul", c.Matmul, "want %s, %s or %s", policy.MatmulAuto, policy.MatmulFP32, policy.MatmulBF16)
	case c.Matmul == policy.MatmulBF16 && c.Engine != policy.EngineNative:
		return config.Errorf("matmul", c.Matmul, "bf16 products are the %s engine's (engine is %s): use auto or fp32", policy.EngineNative, c.Engine)
	case c.OldLogP != "" && c.OldLogP != OldLogPAuto && c.OldLogP != OldLogPSampler && c.OldLogP != OldLogPRecompute:
		return config.Errorf("old_logp", c.OldLogP, "want %s, %s or %s", OldLogPAuto, OldLogPSampler, OldLogPRecompute)
	case c.Updates < 1:
		return config.Errorf("updates", c.Updates, "must be at least 1")
	case c.Horizon < 1:
		return config.Errorf("horizon", c.Horizon, "must be at least 1 (1: one-step rewards)")
	case c.Horizon > 1 && c.Mode == ModeStep && c.Reward != RewardEnv:
		return config.Errorf("horizon", c.Horizon, "needs reward %s (the continuation runs in the environment)", RewardEnv)
	case c.Credit != CreditFirst && c.Credit != CreditAll:
		return config.Errorf("credit", c.Credit, "want %s or %s", CreditFirst, CreditAll)
	case c.Credit == CreditAll && (c.Mode != ModeStep || c.Horizon < 2 || c.Advantage != AdvantageGroup):
		return config.Errorf("credit", c.Credit, "trains every step of a continuation: it needs mode %s, horizon >= 2 and advantage %s", ModeStep, AdvantageGroup)
	case c.Horizon > 1 && c.Collector != CollectorSync:
		return config.Errorf("collector", c.Collector, "scores one action per sample: it needs horizon 1 (and, for an edit's credit, env.execute_after_edit)")
	case c.GroupSize < 1:
		return config.Errorf("group_size", c.GroupSize, "must be at least 1 (2 or more for the group baseline)")
	case c.Advantage != AdvantageGroup && c.Advantage != AdvantageCritic:
		return config.Errorf("advantage", c.Advantage, "want %s or %s", AdvantageGroup, AdvantageCritic)
	case c.Advantage == AdvantageGroup && c.GroupSize < 2:
		return config.Errorf("group_size", c.GroupSize, "must be at least 2 with advantage %s (a sample's baseline is the others' mean)", AdvantageGroup)
	case c.BatchSize < 1:
		return config.Errorf("batch_size", c.BatchSize, "must be at least 1")
	case c.BatchSize%c.GroupSize != 0:
		return config.Errorf("batch_size", c.BatchSize, "must be a multiple of group_size %d (whole groups per update)", c.GroupSize)
	case c.Minibatches < 1 || c.Minibatches > c.BatchSize/c.GroupSize:
		return config.Errorf("minibatches", c.Minibatches, "must be in [1, batch_size / group_size] (%d groups per update)", c.BatchSize/c.GroupSize)
	case c.UpdateEpochs < 1:
		return config.Errorf("update_epochs", c.UpdateEpochs, "must be at least 1")
	case c.CriticWarmup < 0:
		return config.Errorf("critic_warmup", c.CriticWarmup, "must not be negative")
	case !(c.TargetKL >= 0) || !finite(c.TargetKL):
		return config.Errorf("target_kl", c.TargetKL, "must be a number >= 0 (0: never stop early)")
	case !(c.ClipCoef > 0 && c.ClipCoef < 1):
		return config.Errorf("clip_coef", c.ClipCoef, "must be a number in (0, 1)")
	case !(c.ClipCoefHigh == 0 || c.ClipCoefHigh >= c.ClipCoef && c.ClipCoefHigh < 10):
		return config.Errorf("clip_coef_high", c.ClipCoefHigh, "must be 0 (symmetric: clip_coef) or in [clip_coef %g, 10)", c.ClipCoef)
	case c.Oversample < 1:
		return config.Errorf("oversample", c.Oversample, "must be at least 1 (1: no dynamic sampling)")
	case !(c.VfCoef >= 0) || !finite(c.VfCoef):
		return config.Errorf("vf_coef", c.VfCoef, "must be a number >= 0")
	case !(c.EntCoef >= 0) || !finite(c.EntCoef):
		return config.Errorf("ent_coef", c.EntCoef, "must be a number >= 0")
	case !(c.KLCoef >= 0) || !finite(c.KLCoef):
		return config.Errorf("kl_coef", c.KLCoef, "must be a number >= 0")
	case !(c.KLTarget >= 0) || !finite(c.KLTarget):
		return config.Errorf("kl_target", c.KLTarget, "must be a number >= 0 (0: a fixed kl_coef)")
	case c.KLTarget > 0 && c.KLCoef == 0:
		return config.Errorf("kl_coef", c.KLCoef, "must be positive for kl_target to adapt it (the start, e.g. 0.02)")
	case c.FreeText != FreeTextMask && c.FreeText != FreeTextForce && c.FreeText != FreeTextTrain:
		return config.Errorf("free_text", c.FreeText, "want %s, %s or %s", FreeTextMask, FreeTextForce, FreeTextTrain)
	case c.FreeText == FreeTextForce && c.Decode != policy.DecodeConstrained:
		return config.Errorf("free_text", c.FreeText, "needs decode %s (the grammar fixes the free text)", policy.DecodeConstrained)
	case !(c.MinDurationS > 0) || !finite(c.MinDurationS):
		return config.Errorf("min_duration_s", c.MinDurationS, "must be a positive number of seconds (no sample may weigh 0)")
	case c.Collector != CollectorSync && c.Collector != CollectorAsync:
		return config.Errorf("collector", c.Collector, "want %s or %s", CollectorSync, CollectorAsync)
	case c.Collector == CollectorAsync && c.Advantage != AdvantageCritic:
		return config.Errorf("collector", c.Collector, "needs advantage %s (an update takes whichever samples completed first, not whole groups)", AdvantageCritic)
	case c.Collector == CollectorAsync && c.Mode != ModeStep:
		return config.Errorf("collector", c.Collector, "needs mode %s", ModeStep)
	case c.MaxStaleness < 0:
		return config.Errorf("max_staleness", c.MaxStaleness, "must not be negative")
	case c.Workers < 1:
		return config.Errorf("workers", c.Workers, "must be at least 1")
	case c.Temperature != 1:
		return config.Errorf("temperature", c.Temperature, "must be 1: the behaviour log-probabilities PPO's ratio divides by are stored at temperature 1, so sampling at another temperature would make every update off-policy without a correction")
	case c.TopP != 1:
		return config.Errorf("top_p", c.TopP, "must be 1: nucleus sampling changes the sampling distribution, and the stored log-probabilities are not under it")
	case c.MaxNewTokens < 0:
		return config.Errorf("max_new_tokens", c.MaxNewTokens, "must not be negative (0: the policy's response_tokens)")
	case c.GenBatch < 1:
		return config.Errorf("gen_batch", c.GenBatch, "must be at least 1")
	case c.GenBatch%c.GroupSize != 0:
		return config.Errorf("gen_batch", c.GenBatch, "must be a multiple of group_size %d (each state's group is generated together)", c.GroupSize)
	case c.EpisodeSteps < 1:
		return config.Errorf("episode_steps", c.EpisodeSteps, "must be at least 1")
	case c.CheckpointEvery < 0:
		return config.Errorf("checkpoint_every", c.CheckpointEvery, "must not be negative")
	case c.StateTasks < 0:
		return config.Errorf("state_tasks", c.StateTasks, "must not be negative (0: every task)")
	}
	if err := config.Nest("optim", c.Optim.Validate()); err != nil {
		return err
	}
	if err := config.Nest("curve", c.Curve.Validate()); err != nil {
		return err
	}
	if err := config.Nest("own_states", c.OwnStates.Validate()); err != nil {
		return err
	}
	if c.OwnStates.Mix > 0 && (c.Mode != ModeStep || c.Horizon < 2) {
		return config.Errorf("own_states.mix", c.OwnStates.Mix, "collects the states the policy's continuations reach: it needs mode %s and horizon >= 2", ModeStep)
	}
	if err := config.Nest("select", c.Select.Validate(c.Curve)); err != nil {
		return err
	}
	if c.Env.EditorKind == env.EditorLLM {
		return config.Errorf("env.editor", c.Env.EditorKind, "is not available in train ppo, which has no llm endpoint (use %s)", env.EditorOffline)
	}
	if err := validatePolicy(c.Policy, c.Adapter, c.SaveMerged, c.Tuning, true); err != nil {
		return err
	}
	if err := config.Nest("model", c.Budgets.Validate()); err != nil {
		return err
	}
	return config.Nest("env", c.Env.Validate())
}

// ppoState is the resumable position of a PPO run.
type ppoState struct {
	Update   int     `json:"update"`    // updates done (= policy version)
	Drawn    int64   `json:"drawn"`     // states drawn so far (data position)
	GenCalls uint64  `json:"gencalls"`  // generation calls so far (their seeds)
	RNG      []byte  `json:"rng"`       // the state sampler's PCG state
	KLCoef   float64 `json:"kl_coef"`   // the KL coefficient in force (kl_target adapts it)
	WallS    float64 `json:"wall_s"`    // wall seconds of updates so far (the learning curves' time axis)
	CPUS     float64 `json:"cpu_s"`     // CPU seconds of this process so far, scripts' included
	Warm     bool    `json:"warm"`      // the critic warm-up is done
	Own      ownPool `json:"own"`       // own_states: the pool and the states collected since its refresh
	KeepRate float64 `json:"keep_rate"` // dynamic sampling: the recent share of groups with a signal (0: none seen yet)
}

// sample is one generated action waiting for, or holding, its reward.
type sample struct {
	State   schemas.RLState
	G       *group          // the group of its state (nil: episode-wise)
	Prompt  []int32         // model ids, BOS first
	Action  []int32         // generated ids (EOS included when it stopped)
	LogP    []float32       // behaviour log-probs of Action (under its masks)
	Masks   []policy.Bitset // constrained decoding's masks (nil: free)
	Free    []bool          // tokens sampled inside free text (policy.Sample.Free)
	Version int             // policy version that generated it
	Text    string          // decoded action
	Episode int             // episode-wise: the episode in its group and the step in it
	Step    int
	Out     Outcome
	// Ret is the return credited to the action when it is not its own
	// reward (HasRet): horizon > 1, the rewards of the policy's
	// continuation summed.
	Ret    float64
	HasRet bool
	Cached bool
	Err    error

	// LastStep: its state was its episode's last step, where the grammar
	// offered no edit or undo (policy.GrammarContext.NoEdit, NoUndo); the
	// masks carry that to the learner, this counts it.
	LastStep bool
}

// ret is what the action is credited with: its reward, or its return.
func (s *sample) ret() float64 {
	if s.HasRet {
		return s.Ret
	}
	return s.Out.Reward
}

// group is the group_size samples of one drawn state.
type group struct {
	State   schemas.RLState
	Samples []*sample
	Version int
	Own     bool // the state is one the policy reached itself (own_states)
	left    int  // samples whose reward has not arrived
}

// RunPPO is `mlerl train ppo` with the reward named in cfg.Reward.
func RunPPO(ctx context.Context, cfg PPOConfig) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("train ppo: %w", err)
	}
	if cfg.Mode == ModeEpisode || cfg.Horizon > 1 {
		// Both play episodes in live environments (episodes.go).
		return runEpisodePPO(ctx, cfg, os.Stderr)
	}
	reward, closeReward, err := openReward(ctx, cfg)
	if err != nil {
		return fmt.Errorf("train ppo: %w", err)
	}
	defer closeReward()
	return RunPPOWith(ctx, cfg, reward, os.Stderr)
}

// RunPPOWith runs step-wise PPO with the given reward function.
func RunPPOWith(ctx context.Context, cfg PPOConfig, reward RewardFunc, log io.Writer) error {
	// --- Settings, expert states and policies.
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("train ppo: %w", err)
	}
	if cfg.Horizon > 1 {
		return fmt.Errorf("train ppo: horizon %d plays the policy's continuations in live environments: run it with RunPPO (the reward function given here scores one action)", cfg.Horizon)
	}
	r, err := newPPORun(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer r.close()
	fmt.Fprintf(log, "train ppo: %d held-in states, policy %s on the %s engine, reward %q, %s decoding, %d actions per state, %s baseline, free text %s, duration weighting %v\n",
		len(r.states), describeModel(r.pol), r.policy.Name(), cfg.Reward, cfg.Decode, cfg.GroupSize, cfg.Advantage, cfg.FreeText, cfg.DurationWeighting)
	curve, err := r.begin(ctx)
	if err != nil {
		return err
	}
	defer curve.close()

	if cfg.Collector == CollectorAsync {
		return runAsyncPPO(ctx, r, reward, curve, log)
	}

	// --- The reward collector: actions execute while the learner
	// generates and updates; results arrive in completion order, and an
	// update takes whole groups.
	col := newCollector(ctx, reward, cfg.Workers, 4*cfg.BatchSize+cfg.GenBatch+cfg.Workers)
	defer col.close()

	bar := progress.New("train ppo", cfg.Updates)
	bar.Resume(r.state.Update)
	for r.state.Update < cfg.Updates {
		start, cpu0 := time.Now(), cpuSeconds()
		boundary := r.state // what a resume needs if this update is interrupted

		// --- 1. Rollout: group_size actions per sampled expert state.
		groups, ro, err := r.rollout(ctx, col)
		if err != nil {
			if ctx.Err() != nil {
				r.state = boundary
				if err := r.save(ctx); err != nil {
					return err
				}
				return r.s.interrupted(ctx, fmt.Sprintf("during update %d of %d", r.state.Update+1, cfg.Updates), cfg.Out)
			}
			return err
		}
		batch := flatten(groups)
		t0 := time.Now()

		// --- 2. Advantages: leave-one-out within each group, or R - V(s).
		b_rewards, b_durations := make([]float64, len(batch)), make([]float64, len(batch))
		for i, s := range batch {
			b_rewards[i], b_durations[i] = s.Out.Reward, s.Out.DurationS
		}
		var b_advantages, b_returns, b_values []float64
		if cfg.Advantage == AdvantageCritic && len(batch) > 0 {
			if b_values, err = r.values(r.pack(batch)); err != nil {
				return fmt.Errorf("train ppo: update %d: %w", r.state.Update, err)
			}
			b_advantages, b_returns = oneStepAdvantages(b_rewards, b_values, cfg.NormAdv)
		} else {
			b_advantages = groupAdvantages(groups, cfg.GroupStd)
		}

		// --- 3-4. Duration-aware weights, then epochs x minibatches of
		// the clipped loss.
		l, err := r.learn(groups, b_advantages, b_returns, b_durations)
		if err != nil {
			return err
		}
		learnS, lr, klCoef, epochs := time.Since(t0).Seconds(), l.lr, l.klCoef, l.epochs
		r.state.WallS += time.Since(start).Seconds()
		r.state.CPUS += cpuSeconds() - cpu0

		// --- 5. Metrics, learning curve and checkpoints.
		rec := map[string]any{"stage": "ppo", "mode": ModeStep, "step": r.state.Update,
			"charts/distinct_actions_per_group": ratio(ro.distinct, ro.seen),
			"charts/groups_dropped_fraction":    float64(ro.flat) / float64(max(ro.flat+len(groups), 1)),
			"charts/groups_drawn":               ro.seen, "charts/oversample": float64(ro.seen) / float64(cfg.BatchSize/cfg.GroupSize),
			"charts/samples": len(batch), "charts/groups": len(groups),
			"charts/lr": lr, "charts/kl_coef": klCoef, "charts/epochs": epochs,
			"charts/stale_fraction":  ratio(ro.stale, ro.stale+len(batch)),
			"charts/reward_errors":   ro.rewardErrors,
			"charts/forced_fraction": ratio(ro.forced, ro.tokens),
			"charts/free_fraction":   ratio(ro.free, ro.tokens),
			"charts/samples_per_s":   float64(len(batch)) / time.Since(start).Seconds(),
			"time/generate_s":        ro.genS, "time/execute_s": ro.execS, "time/wait_rewards_s": ro.waitS, "time/learn_s": learnS,
			"time/update_s": time.Since(start).Seconds(), "time/wall_s": r.state.WallS, "time/cpu_s": r.state.CPUS,
		}
		if len(batch) > 0 { // nothing measured, nothing written
			rec["charts/reward_mean"], rec["charts/credit_mean"], rec["charts/reward_std_in_group"] = mean(b_rewards), mean(b_rewards), ro.groupStd(groups)
			rec["charts/duration_mean"], rec["charts/format_error_rate"], rec["charts/valid_action_rate"] = mean(b_durations), ratio(ro.formatErrors, len(batch)), ratio(ro.valid, len(batch))
			rec["charts/cache_hit_rate"] = ratio(ro.cached, len(batch))
		}
		if b_values != nil {
			rec["charts/value_mean"] = mean(b_values)
		}
		for k, v := range outcomeShares(batch) {
			rec[k] = v
		}
		recordSamples(rec, batch, ro.dropped)
		if err := r.endUpdate(ctx, rec, l, curve); err != nil {
			return err
		}
		bar.Add(1, fmt.Sprintf("%s, %d groups (%d flat), %.1f samples/s, generate %.0fs execute %.0fs learn %.0fs",
			updateSummary(rec), len(groups), ro.flat, rec["charts/samples_per_s"], ro.genS, ro.execS, learnS))
	}
	bar.Done()
	fmt.Fprintf(log, "train ppo: done, checkpoint %s\n", r.s.st.URI(cfg.Out))
	return r.s.saveMerged(r.pol, r.policy, cfg.SaveMerged, cfg.Out)
}

// begin does what every PPO loop does before its first update: the
// critic's warm-up and the learning curve's first point (the SFT policy).
func (r *ppoRun) begin(ctx context.Context) (*curveEval, error) {
	if err := r.warmCritic(ctx); err != nil {
		return nil, err
	}
	curve, err := r.openCurve(ctx)
	if err != nil {
		return nil, err
	}
	point, err := r.curvePoint(ctx, curve)
	if err != nil {
		curve.close()
		return nil, err
	}
	// The SFT policy's checkpoint at update 0: what best-held-in selects
	// when no PPO point beats it.
	if point && r.cfg.Select.effective(r.cfg.Curve) == SelectBestHeldIn {
		err := r.save(ctx)
		if err == nil {
			err = r.selectCheckpoint(ctx, true)
		}
		if err != nil {
			curve.close()
			return nil, err
		}
	}
	return curve, nil
}

// learned is what one learner step did.
type learned struct {
	sums       ppoStats
	epochs     int
	lr, klCoef float64 // the learning rate and KL coefficient it used
	// skipped: the update had no sample to train (every group flat even
	// after dynamic sampling); sums hold nothing measured.
	skipped bool
	// gap: how far the learner's log-probabilities were from the
	// sampler's, where old_logp recompute measured them.
	gap behaviourGap
}

// learn is an update's learner step, the same in every PPO loop: the
// duration-aware weights (max(dt_k, floor) / batch mean), epochs x
// minibatches of the clipped loss, the KL coefficient's adaptation and
// the policy version's increment.
func (r *ppoRun) learn(groups []*group, adv, returns, durations []float64) (learned, error) {
	cfg := r.cfg
	weights := durationWeights(durations, cfg.MinDurationS, cfg.DurationWeighting)
	l := learned{lr: cfg.Optim.LRAt(r.state.Update, cfg.Updates), klCoef: r.state.KLCoef}
	if len(groups) == 0 {
		// Nothing to train: the policy and the KL coefficient stay as
		// they are, and the update counts (so that a run ends).
		l.skipped = true
		r.state.Update++
		return l, nil
	}
	var err error
	if l.sums, l.epochs, l.gap, err = r.update(groups, adv, returns, weights, l.lr); err != nil {
		return l, fmt.Errorf("train ppo: update %d: %w", r.state.Update, err)
	}
	r.state.KLCoef = adaptKL(r.state.KLCoef, l.sums[metricKLRef], cfg.KLTarget)
	r.state.Update++
	return l, nil
}

// endUpdate records an update's metrics with its loss sums
// (ppoMetricNames; none for a skipped update, which records skipped
// true: nothing was measured, so nothing is written), evaluates a
// learning-curve point every curve.every updates and after the last one,
// saves a checkpoint every checkpoint_every updates, after the last one
// and at every curve point, and selects the checkpoint `mlerl evaluate`
// takes (select.go). Step-wise and episode-wise PPO end each update with
// it.
func (r *ppoRun) endUpdate(ctx context.Context, rec map[string]any, l learned, curve *curveEval) error {
	if l.skipped {
		rec["skipped"] = true
	} else {
		for i, name := range ppoMetricNames {
			rec[name] = l.sums[i]
		}
		if l.gap.n > 0 {
			// old_logp recompute: the sampler's log-probabilities against
			// the learner's, per trained action token.
			rec["losses/behaviour_logp_gap"] = l.gap.sum / float64(l.gap.n)
			rec["losses/behaviour_logp_gap_max"] = l.gap.max
		}
	}
	if r.pol.Kind() == policy.KindHF {
		// What a pretrained model's update costs, in the log as it runs.
		rec["memory/peak_rss_gib"] = peakRSSGiB()
		fmt.Fprintf(r.s.log, "train ppo: update %d: %.1f s (generate %.1f s, learn %.1f s), peak RSS %.2f GiB\n",
			r.state.Update, rec["time/update_s"], rec["time/generate_s"], rec["time/learn_s"], rec["memory/peak_rss_gib"])
	}
	r.s.record(rec)
	point, err := r.curvePoint(ctx, curve)
	if err != nil {
		return err
	}
	saved := point || r.state.Update%max(r.cfg.CheckpointEvery, 1) == 0 || r.state.Update == r.cfg.Updates
	if saved {
		if err := r.save(ctx); err != nil {
			return err
		}
	}
	return r.selectCheckpoint(ctx, saved)
}

// updateSummary is an update's progress line: its mean credit, or that it
// was skipped.
func updateSummary(rec map[string]any) string {
	if rec["skipped"] == true {
		return "skipped (no group with a signal)"
	}
	out := ""
	if v, ok := rec["charts/return_mean"].(float64); ok {
		out = fmt.Sprintf("return %.3f", v)
	} else {
		v, _ := rec["charts/reward_mean"].(float64)
		out = fmt.Sprintf("reward %.3f", v)
	}
	if rounds, ok := rec["charts/rollout_rounds"].(int); ok {
		out += fmt.Sprintf(", %d groups of %d drawn in %d rounds, generate %.0fs update %.0fs",
			rec["charts/groups"], rec["charts/groups_drawn"], rounds, rec["time/generate_s"], rec["time/update_s"])
	}
	return out
}

// groupAdvantages returns, sample by sample in the order of flatten(groups),
// the leave-one-out advantage A_i = R_i - mean_{j != i} R_j =
// k/(k-1) (R_i - mean R) of each group of k samples (divided by the
// group's reward standard deviation when byStd is set). Groups reach here
// with at least two samples and rewards that differ (see takeGroup).
func groupAdvantages(groups []*group, byStd bool) []float64 {
	var adv []float64
	for _, g := range groups {
		k := float64(len(g.Samples))
		m, std := groupStats(g.Samples)
		for _, s := range g.Samples {
			a := k / (k - 1) * (s.ret() - m)
			if byStd {
				a /= std + 1e-8
			}
			adv = append(adv, a)
		}
	}
	return adv
}

// groupStats are the mean and standard deviation (over k, not k-1) of
// what the samples are credited with.
func groupStats(ss []*sample) (m, std float64) {
	k := float64(len(ss))
	sq := 0.0
	for _, s := range ss {
		m += s.ret() / k
	}
	for _, s := range ss {
		sq += (s.ret() - m) * (s.ret() - m)
	}
	return m, math.Sqrt(sq / k)
}

// oneStepAdvantages returns A = R - V(s) (normalised to zero mean and unit
// variance over the batch when norm is set) and the return targets R.
func oneStepAdvantages(rewards, values []float64, norm bool) (adv, returns []float64) {
	adv = make([]float64, len(rewards))
	returns = make([]float64, len(rewards))
	for i := range rewards {
		adv[i] = rewards[i] - values[i]
		returns[i] = rewards[i]
	}
	if norm {
		normalise(adv)
	}
	return adv, returns
}

// normalise rescales xs to zero mean and unit variance (unchanged when it
// has fewer than two values).
func normalise(xs []float64) {
	if len(xs) < 2 {
		return
	}
	m, sq := mean(xs), 0.0
	for _, a := range xs {
		sq += (a - m) * (a - m)
	}
	std := math.Sqrt(sq / float64(len(xs)-1))
	for i := range xs {
		xs[i] = (xs[i] - m) / (std + 1e-8)
	}
}

// durationWeights returns w_k = max(dt_k, floor) / mean over the batch of
// max(dt, floor), so that the weights average 1 and none is 0 (a step
// that ran no script still took time: the floor); all ones when off.
func durationWeights(durations []float64, floor float64, on bool) []float64 {
	w := make([]float64, len(durations))
	m := 0.0
	for _, d := range durations {
		m += max(d, floor) / float64(len(durations))
	}
	for i, d := range durations {
		w[i] = 1
		if on {
			w[i] = max(d, floor) / m
		}
	}
	return w
}

// adaptKL is the adaptive KL coefficient (Ziegler et al.'s controller, the
// PPO paper's "adaptive KL penalty"): x1.5 when the KL to the reference
// per decision token exceeds 1.5 x target, /1.5 below target / 1.5, kept
// within [1e-4, 10]; unchanged when target is 0.
func adaptKL(coef, kl, target float64) float64 {
	switch {
	case target <= 0:
		return coef
	case kl > 1.5*target:
		return min(coef*1.5, 10)
	case kl < target/1.5:
		return max(coef/1.5, 1e-4)
	}
	return coef
}

// distinctActions is the number of distinct parsed actions among ss (1:
// the policy gave every sample of the state the same action).
func distinctActions(ss []*sample) int {
	seen := map[string]bool{}
	for _, s := range ss {
		seen[actionKey(s.Text)] = true
	}
	return len(seen)
}

// recordSamples adds an update's samples, those trained on (batch) then
// those of the groups dropped (flat, too small or stale), to its metrics,
// one list per field (samples/duration_s, samples/reward, samples/class,
// samples/action, samples/executed, samples/last_marker,
// samples/staleness, and samples/used, false for the dropped): what the
// experiment report's phenomenon checks read (the correlation of duration
// and reward, where failed runs stopped, how stale samples were), over
// every sample the environment scored.
func recordSamples(rec map[string]any, batch, dropped []*sample) {
	used := make([]bool, len(batch)+len(dropped))
	for i := range batch {
		used[i] = true
	}
	batch = append(slices.Clone(batch), dropped...)
	rec["samples/used"] = used
	n := len(batch)
	dur, rew, stale := make([]float64, n), make([]float64, n), make([]int, n)
	class, action, marker := make([]string, n), make([]string, n), make([]string, n)
	executed := make([]bool, n)
	update, _ := rec["step"].(int)
	for i, s := range batch {
		dur[i], rew[i], stale[i] = s.Out.DurationS, s.Out.Reward, max(update-1-s.Version, 0)
		class[i], action[i], marker[i], executed[i] = s.Out.Class, s.Out.Action, s.Out.LastMarker, s.Out.Executed
	}
	rec["samples/duration_s"], rec["samples/reward"], rec["samples/staleness"] = dur, rew, stale
	rec["samples/class"], rec["samples/action"], rec["samples/executed"], rec["samples/last_marker"] = class, action, executed, marker
}

// flatten lists the groups' samples in order.
func flatten(groups []*group) []*sample {
	var out []*sample
	for _, g := range groups {
		out = append(out, g.Samples...)
	}
	return out
}

// outcomeShares are the shares of the batch's outcomes, for the
// reward-hacking watch: success, error (script failures), timeout, oom,
// refused (format errors, refused actions, invalid edits), the actions
// undo and final answer, and the samples drawn on an episode's last step
// (where the grammar offered no edit or undo: states/last_step).
//
// An empty batch has no shares (an empty map, so that a skipped update
// writes none).
func outcomeShares(batch []*sample) map[string]float64 {
	if len(batch) == 0 {
		return map[string]float64{}
	}
	n := float64(len(batch))
	out := map[string]float64{"outcomes/success": 0, "outcomes/error": 0, "outcomes/timeout": 0, "outcomes/oom": 0,
		"outcomes/refused": 0, "outcomes/editor_error": 0, "actions/undo": 0, "actions/final_answer": 0, "actions/edit": 0, "actions/execute": 0,
		"states/last_step": 0}
	for _, s := range batch {
		if s.LastStep {
			out["states/last_step"] += 1 / n
		}
		switch env.Outcome(s.Out.Class) {
		case env.OutcomeSuccess:
			out["outcomes/success"] += 1 / n
		case env.OutcomeTimeout:
			out["outcomes/timeout"] += 1 / n
		case env.OutcomeOOM:
			out["outcomes/oom"] += 1 / n
		case env.OutcomeEditorError:
			out["outcomes/editor_error"] += 1 / n
		case env.OutcomeFormatError, env.OutcomeInvalidAction, env.OutcomeInvalidEdit:
			out["outcomes/refused"] += 1 / n
		case "":
		default:
			out["outcomes/error"] += 1 / n
		}
		switch s.Out.Action {
		case env.UndoEditScript:
			out["actions/undo"] += 1 / n
		case env.FinalAnswer:
			out["actions/final_answer"] += 1 / n
		case env.EditScriptAI, env.EditScriptSegment:
			out["actions/edit"] += 1 / n
		case env.ExecuteScript:
			out["actions/execute"] += 1 / n
		}
	}
	return out
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(max(len(xs), 1))
}

func ratio(a, b int) float64 { return float64(a) / float64(max(b, 1)) }

// newSeed is the generation seed of one call.
func newSeed(seed int64, calls uint64) uint64 { return uint64(seed)<<20 ^ calls }
