package train

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
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
// (generate one action per sampled expert state, collect rewards as they
// arrive, drop samples older than max_staleness policy versions),
// advantages, the duration weights, epochs x minibatches of the clipped
// PPO loss, metrics and checkpoints.
//
// Each sample is a one-step episode (the state comes from the expert
// state pool, the environment executes one action, the episode ends), so
// the advantage estimator is A = R - V(s) with V(s) the value head at the
// last prompt token, and the return target is R. Every token of the
// action gets the sample's advantage (token-level advantages); the losses
// average over the action tokens of a minibatch. Episode-wise PPO (whole
// trajectories from a task's initial state) is the baseline arm in
// episodes.go.

// PPOConfig is the config of `mlerl train ppo`.
type PPOConfig struct {
	Data   string `yaml:"data" help:"data root: a local path or gs://bucket/prefix"`
	States string `yaml:"states" help:"rl_states dataset in the data root (name or name/v<N>)"`
	SFT    string `yaml:"sft" help:"SFT checkpoint folder in the data root (its latest step is the start and the KL reference)"`
	Out    string `yaml:"out" help:"PPO checkpoint folder in the data root"`
	Reward string `yaml:"reward" help:"reward: env (sandboxed execution, agentic-ML reward) or format (format only, no execution)"`
	// Mode: step-wise (ML-Agent) or episode-wise PPO (the baseline arm).
	Mode string `yaml:"mode" help:"step (one action from each sampled expert state, ML-Agent) or episode (whole episodes from each task's initial state, the baseline)"`
	// Env configures the environment of the env reward: budgets, reward
	// terms, instrumentation, executing edits in the same step.
	Env          env.Config `yaml:"env"`
	Engine       string     `yaml:"engine" help:"native (the CPU engine) or gomlx (GoMLX; XLA on a GPU with GOMLX_BACKEND=xla:cuda)"`
	Decode       string     `yaml:"decode" help:"constrained (actions follow the action grammar; the PPO ratio uses the same masks) or free"`
	Updates      int        `yaml:"updates" help:"PPO updates"`
	BatchSize    int        `yaml:"batch_size" help:"samples (state, action, reward) per update"`
	Minibatches  int        `yaml:"minibatches" help:"minibatches per update epoch"`
	UpdateEpochs int        `yaml:"update_epochs" help:"passes over each batch"`
	ClipCoef     float64    `yaml:"clip_coef" help:"PPO ratio clipping"`
	VfCoef       float64    `yaml:"vf_coef" help:"value loss coefficient (the critic learns faster through it)"`
	EntCoef      float64    `yaml:"ent_coef" help:"entropy bonus coefficient"`
	KLCoef       float64    `yaml:"kl_coef" help:"KL penalty to the frozen SFT policy"`
	NormAdv      bool       `yaml:"norm_adv" help:"normalise advantages over the batch"`
	// DurationWeighting multiplies each sample's policy-gradient term by
	// dt_k / mean(dt in batch).
	DurationWeighting bool               `yaml:"duration_weighting" help:"weight policy-gradient terms by action duration / batch mean duration"`
	MaxStaleness      int                `yaml:"max_staleness" help:"drop samples generated more than this many policy versions ago"`
	Workers           int                `yaml:"workers" help:"concurrent reward workers"`
	Optim             policy.OptimConfig `yaml:"optim"`
	Temperature       float64            `yaml:"temperature" help:"sampling temperature"`
	TopP              float64            `yaml:"top_p" help:"nucleus sampling threshold"`
	MaxNewTokens      int                `yaml:"max_new_tokens" help:"longest action in tokens (0: the policy's response_tokens)"`
	GenBatch          int                `yaml:"gen_batch" help:"states per generation call"`
	EpisodeSteps      int                `yaml:"episode_steps" help:"mode episode: actions per episode"`
	Seed              int64              `yaml:"seed" help:"seed for state sampling and generation"`
	CheckpointEvery   int                `yaml:"checkpoint_every" help:"save every N updates (and at the end)"`
	Resume            bool               `yaml:"resume" help:"continue from the latest PPO checkpoint when there is one"`
}

// PPO modes.
const (
	ModeStep    = "step"
	ModeEpisode = "episode"
)

// DefaultPPOConfig follows CleanRL's defaults where the papers are silent;
// the learning rate is for the small demo policy (the paper's 1e-6 actor /
// 1e-5 critic are for a 7B model; here one rate, and vf_coef for the critic).
func DefaultPPOConfig() PPOConfig {
	return PPOConfig{
		Data: "./data", States: schemas.RLStates.Name, SFT: "checkpoints/sft", Out: "checkpoints/ppo",
		Reward: RewardEnv, Mode: ModeStep, Env: EnvRewardConfig(), Engine: policy.EngineNative, Decode: policy.DecodeConstrained,
		Updates: 20, BatchSize: 16, Minibatches: 2, UpdateEpochs: 1,
		ClipCoef: 0.2, VfCoef: 0.5, EntCoef: 0.0, KLCoef: 0.05, NormAdv: true,
		DurationWeighting: true, MaxStaleness: 2, Workers: 4,
		Optim:       policy.OptimConfig{LR: 1e-5, MinLRRatio: 1, WarmupSteps: 0, WeightDecay: 0, Beta1: 0.9, Beta2: 0.999, ClipNorm: 0.5},
		Temperature: 1, TopP: 1, GenBatch: 8, EpisodeSteps: 4, Seed: 1, CheckpointEvery: 5, Resume: true,
	}
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
	case c.Updates < 1:
		return config.Errorf("updates", c.Updates, "must be at least 1")
	case c.BatchSize < 1:
		return config.Errorf("batch_size", c.BatchSize, "must be at least 1")
	case c.Minibatches < 1 || c.Minibatches > c.BatchSize:
		return config.Errorf("minibatches", c.Minibatches, "must be in [1, batch_size] (batch_size is %d)", c.BatchSize)
	case c.UpdateEpochs < 1:
		return config.Errorf("update_epochs", c.UpdateEpochs, "must be at least 1")
	case !(c.ClipCoef > 0 && c.ClipCoef < 1):
		return config.Errorf("clip_coef", c.ClipCoef, "must be a number in (0, 1)")
	case !(c.VfCoef >= 0) || !finite(c.VfCoef):
		return config.Errorf("vf_coef", c.VfCoef, "must be a number >= 0")
	case !(c.EntCoef >= 0) || !finite(c.EntCoef):
		return config.Errorf("ent_coef", c.EntCoef, "must be a number >= 0")
	case !(c.KLCoef >= 0) || !finite(c.KLCoef):
		return config.Errorf("kl_coef", c.KLCoef, "must be a number >= 0")
	case c.MaxStaleness < 0:
		return config.Errorf("max_staleness", c.MaxStaleness, "must not be negative")
	case c.Workers < 1:
		return config.Errorf("workers", c.Workers, "must be at least 1")
	case !(c.Temperature >= 0) || !finite(c.Temperature):
		return config.Errorf("temperature", c.Temperature, "must be a number >= 0 (0: greedy)")
	case !(c.TopP > 0 && c.TopP <= 1):
		return config.Errorf("top_p", c.TopP, "must be in (0, 1]")
	case c.MaxNewTokens < 0:
		return config.Errorf("max_new_tokens", c.MaxNewTokens, "must not be negative (0: the policy's response_tokens)")
	case c.GenBatch < 1:
		return config.Errorf("gen_batch", c.GenBatch, "must be at least 1")
	case c.EpisodeSteps < 1:
		return config.Errorf("episode_steps", c.EpisodeSteps, "must be at least 1")
	case c.CheckpointEvery < 0:
		return config.Errorf("checkpoint_every", c.CheckpointEvery, "must not be negative")
	}
	if err := config.Nest("optim", c.Optim.Validate()); err != nil {
		return err
	}
	if c.Env.EditorKind == env.EditorLLM {
		return config.Errorf("env.editor", c.Env.EditorKind, "is not available in train ppo, which has no llm endpoint (use %s)", env.EditorOffline)
	}
	return config.Nest("env", c.Env.Validate())
}

// ppoState is the resumable position of a PPO run.
type ppoState struct {
	Update   int    `json:"update"`   // updates done (= policy version)
	Drawn    int64  `json:"drawn"`    // states drawn so far (data position)
	GenCalls uint64 `json:"gencalls"` // generation calls so far (their seeds)
	RNG      []byte `json:"rng"`      // the state sampler's PCG state
}

// sample is one generated action waiting for, or holding, its reward.
type sample struct {
	State   schemas.RLState
	Prompt  []int32         // model ids, BOS first
	Action  []int32         // generated ids (EOS included when it stopped)
	LogP    []float32       // behaviour log-probs of Action (under its masks)
	Masks   []policy.Bitset // constrained decoding's masks (nil: free)
	Version int             // policy version that generated it
	Text    string          // decoded action
	Out     Outcome
	Cached  bool
	Err     error
}

// RunPPO is `mlerl train ppo` with the reward named in cfg.Reward.
func RunPPO(ctx context.Context, cfg PPOConfig) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("train ppo: %w", err)
	}
	if cfg.Mode == ModeEpisode {
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
	r, err := newPPORun(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer r.close()
	fmt.Fprintf(log, "train ppo: %d held-in states, policy %d params on the %s engine, reward %q, %s decoding, duration weighting %v\n",
		len(r.states), r.policy.Config().NumParams(), r.policy.Name(), cfg.Reward, cfg.Decode, cfg.DurationWeighting)

	// --- The asynchronous reward collector: actions execute while the
	// learner generates and updates; results arrive in completion order.
	col := newCollector(ctx, reward, cfg.Workers, 4*cfg.BatchSize+cfg.GenBatch+cfg.Workers)
	defer col.close()

	bar := progress.New("train ppo", cfg.Updates)
	bar.Add(r.state.Update, "")
	for r.state.Update < cfg.Updates {
		start := time.Now()
		boundary := r.state // what a resume needs if this update is interrupted

		// --- 1. Rollout: one action per sampled expert state.
		batch, ro, err := r.rollout(ctx, col)
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

		// --- 2. Advantages: one-step episodes, A = R - V(s), returns R.
		mb := r.pack(batch)
		b_rewards, b_durations := make([]float64, len(batch)), make([]float64, len(batch))
		for i, s := range batch {
			b_rewards[i], b_durations[i] = s.Out.Reward, s.Out.DurationS
		}
		b_values, err := r.values(mb)
		if err != nil {
			return fmt.Errorf("train ppo: update %d: %w", r.state.Update, err)
		}
		b_advantages, b_returns := oneStepAdvantages(b_rewards, b_values, cfg.NormAdv)

		// --- 3. Duration-aware weights: dt_k / mean(dt), or all ones.
		b_weights := durationWeights(b_durations, cfg.DurationWeighting)

		// --- 4. Epochs x minibatches of the clipped loss.
		t0 := time.Now()
		lr := cfg.Optim.LRAt(r.state.Update, cfg.Updates)
		sums, err := r.update(batch, b_advantages, b_returns, b_weights, lr)
		if err != nil {
			return fmt.Errorf("train ppo: update %d: %w", r.state.Update, err)
		}
		updS := time.Since(t0).Seconds()
		r.state.Update++

		// --- 5. Metrics and checkpoints.
		rec := map[string]any{"stage": "ppo", "mode": ModeStep, "step": r.state.Update,
			"charts/reward_mean": mean(b_rewards), "charts/value_mean": mean(b_values),
			"charts/duration_mean": mean(b_durations), "charts/lr": lr,
			"charts/format_error_rate": float64(ro.formatErrors) / float64(len(batch)),
			"charts/valid_action_rate": float64(ro.valid) / float64(len(batch)),
			"charts/stale_fraction":    float64(ro.stale) / float64(ro.stale+len(batch)),
			"charts/cache_hit_rate":    float64(ro.cached) / float64(len(batch)),
			"charts/reward_errors":     ro.rewardErrors,
			"charts/forced_fraction":   float64(ro.forced) / float64(max(ro.tokens, 1)),
			"charts/samples_per_s":     float64(len(batch)) / time.Since(start).Seconds(),
			"time/generate_s":          ro.genS, "time/wait_rewards_s": ro.waitS, "time/update_s": updS,
		}
		if err := r.endUpdate(ctx, rec, sums); err != nil {
			return err
		}
		bar.Add(1, fmt.Sprintf("reward %.3f", rec["charts/reward_mean"]))
	}
	bar.Done()
	fmt.Fprintf(log, "train ppo: done, checkpoint %s\n", r.s.st.URI(cfg.Out))
	return nil
}

// endUpdate records an update's metrics with its loss sums
// (ppoMetricNames) and saves a checkpoint every checkpoint_every updates
// and after the last one. Step-wise and episode-wise PPO end each update
// with it.
func (r *ppoRun) endUpdate(ctx context.Context, rec map[string]any, sums ppoStats) error {
	for i, name := range ppoMetricNames {
		rec[name] = sums[i]
	}
	r.s.record(rec)
	if r.state.Update%max(r.cfg.CheckpointEvery, 1) == 0 || r.state.Update == r.cfg.Updates {
		return r.save(ctx)
	}
	return nil
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

// durationWeights returns dt_k / mean(dt) for every sample, so the weights
// average 1; all ones when off or when every duration is 0.
func durationWeights(durations []float64, on bool) []float64 {
	w := make([]float64, len(durations))
	m := mean(durations)
	for i, d := range durations {
		w[i] = 1
		if on && m > 0 {
			w[i] = d / m
		}
	}
	return w
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(max(len(xs), 1))
}

// newSeed is the generation seed of one call.
func newSeed(seed int64, calls uint64) uint64 { return uint64(seed)<<20 ^ calls }

var _ = rand.New
