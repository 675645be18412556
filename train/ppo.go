package train

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/ml/model"

	"github.com/mlerl/mlerl/internal/config"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/progress"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// Step-wise PPO (ML-Agent) with duration-aware weighting (the second
// paper), reading top to bottom: settings; states and policies; the
// asynchronous reward workers; then per update: rollout (generate one
// action per sampled expert state, collect rewards as they arrive, drop
// samples older than max_staleness policy versions), advantages, the
// duration weights, flattening into b_ arrays, epochs x minibatches of the
// clipped PPO loss, metrics and checkpoints.
//
// Each sample is a one-step episode (the state comes from the expert
// state pool, the environment executes one action, the episode ends), so
// the advantage estimator is A = R - V(s) with V(s) the value head at the
// last prompt token, and the return target is R. Every token of the action
// gets the sample's advantage (token-level advantages); the losses average
// over the action tokens of a minibatch.

// PPOConfig is the config of `mlerl train ppo`.
type PPOConfig struct {
	Data   string `yaml:"data" help:"data root: a local path or gs://bucket/prefix"`
	States string `yaml:"states" help:"rl_states dataset in the data root (name or name/v<N>)"`
	SFT    string `yaml:"sft" help:"SFT checkpoint folder in the data root (its latest step is the start and the KL reference)"`
	Out    string `yaml:"out" help:"PPO checkpoint folder in the data root"`
	Reward string `yaml:"reward" help:"reward: env (sandboxed execution, agentic-ML reward) or format (format only, no execution)"`
	// Updates x BatchSize samples in all (the paper: 1 epoch over 10k states).
	Updates      int     `yaml:"updates" help:"PPO updates"`
	BatchSize    int     `yaml:"batch_size" help:"samples (state, action, reward) per update"`
	Minibatches  int     `yaml:"minibatches" help:"minibatches per update epoch"`
	UpdateEpochs int     `yaml:"update_epochs" help:"passes over each batch"`
	ClipCoef     float64 `yaml:"clip_coef" help:"PPO ratio clipping"`
	VfCoef       float64 `yaml:"vf_coef" help:"value loss coefficient (the critic learns faster through it)"`
	EntCoef      float64 `yaml:"ent_coef" help:"entropy bonus coefficient"`
	KLCoef       float64 `yaml:"kl_coef" help:"KL penalty to the frozen SFT policy"`
	NormAdv      bool    `yaml:"norm_adv" help:"normalise advantages over the batch"`
	// DurationWeighting multiplies each sample's policy-gradient term by
	// dt_k / mean(dt in batch).
	DurationWeighting bool        `yaml:"duration_weighting" help:"weight policy-gradient terms by action duration / batch mean duration"`
	MaxStaleness      int         `yaml:"max_staleness" help:"drop samples generated more than this many policy versions ago"`
	Workers           int         `yaml:"workers" help:"concurrent reward workers"`
	Optim             OptimConfig `yaml:"optim"`
	Temperature       float64     `yaml:"temperature" help:"sampling temperature"`
	TopP              float64     `yaml:"top_p" help:"nucleus sampling threshold"`
	MaxNewTokens      int         `yaml:"max_new_tokens" help:"longest action in tokens"`
	GenBatch          int         `yaml:"gen_batch" help:"states per generation call"`
	Seed              int64       `yaml:"seed" help:"seed for state sampling and generation"`
	CheckpointEvery   int         `yaml:"checkpoint_every" help:"save every N updates (and at the end)"`
	Resume            bool        `yaml:"resume" help:"continue from the latest PPO checkpoint when there is one"`
}

// DefaultPPOConfig follows CleanRL's defaults where the papers are silent;
// the learning rate is for the small demo policy (the paper's 1e-6 actor /
// 1e-5 critic are for a 7B model; here one rate, and vf_coef for the critic).
func DefaultPPOConfig() PPOConfig {
	return PPOConfig{
		Data: "./data", States: schemas.RLStates.Name, SFT: "checkpoints/sft", Out: "checkpoints/ppo",
		Reward: "env", Updates: 20, BatchSize: 16, Minibatches: 2, UpdateEpochs: 1,
		ClipCoef: 0.2, VfCoef: 0.5, EntCoef: 0.0, KLCoef: 0.05, NormAdv: true,
		DurationWeighting: true, MaxStaleness: 2, Workers: 4,
		Optim:       OptimConfig{LR: 1e-5, MinLRRatio: 1, WarmupSteps: 0, WeightDecay: 0, Beta1: 0.9, Beta2: 0.999, ClipNorm: 0.5},
		Temperature: 1, TopP: 1, MaxNewTokens: 160, GenBatch: 8, Seed: 1, CheckpointEvery: 5, Resume: true,
	}
}

// Validate checks every field, before anything is read or written.
func (c PPOConfig) Validate() error {
	rewardMu.Lock()
	_, rewardKnown := rewardFns[c.Reward]
	rewards := slices.Sorted(maps.Keys(rewardFns))
	rewardMu.Unlock()
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
	case !rewardKnown:
		return config.Errorf("reward", c.Reward, "want one of %s", strings.Join(rewards, ", "))
	case c.Updates < 1:
		return config.Errorf("updates", c.Updates, "must be at least 1")
	case c.BatchSize < 1:
		return config.Errorf("batch_size", c.BatchSize, "must be at least 1")
	case c.Minibatches < 1 || c.Minibatches > c.BatchSize:
		return config.Errorf("minibatches", c.Minibatches, "must be in [1, batch_size] (batch_size is %d)", c.BatchSize)
	case c.UpdateEpochs < 1:
		return config.Errorf("update_epochs", c.UpdateEpochs, "must be at least 1")
	case !(c.ClipCoef > 0) || !finite(c.ClipCoef):
		return config.Errorf("clip_coef", c.ClipCoef, "must be a positive number")
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
	case c.MaxNewTokens < 1:
		return config.Errorf("max_new_tokens", c.MaxNewTokens, "must be at least 1")
	case c.GenBatch < 1:
		return config.Errorf("gen_batch", c.GenBatch, "must be at least 1")
	case c.CheckpointEvery < 0:
		return config.Errorf("checkpoint_every", c.CheckpointEvery, "must not be negative")
	}
	return config.Nest("optim", c.Optim.Validate())
}

// ppoState is the resumable position of a PPO run.
type ppoState struct {
	Update   int    `json:"update"`   // updates done (= policy version)
	Drawn    int64  `json:"drawn"`    // states drawn so far (data position)
	GenCalls uint64 `json:"gencalls"` // generation calls so far (their seeds)
	RNG      []byte `json:"rng"`      // the state sampler's PCG state
}

// rollout is one generated action waiting for, or holding, its reward.
type rollout struct {
	State   schemas.RLState
	Prompt  []int32   // model ids, BOS first
	Action  []int32   // generated ids (EOS included when it stopped)
	LogP    []float32 // behaviour log-probs of Action
	Value   float32   // V(s) when generated
	Version int       // policy version that generated it
	Text    string    // decoded action
	Out     Outcome
	Cached  bool
	Err     error
}

// RunPPO is `mlerl train ppo` with the reward named in cfg.Reward.
func RunPPO(ctx context.Context, cfg PPOConfig) error {
	reward, closeReward, err := openReward(ctx, cfg)
	if err != nil {
		return fmt.Errorf("train ppo: %w", err)
	}
	defer closeReward()
	return RunPPOWith(ctx, cfg, reward, os.Stderr)
}

// RunPPOWith runs step-wise PPO with the given reward function.
func RunPPOWith(ctx context.Context, cfg PPOConfig, reward RewardFunc, log io.Writer) error {
	// --- Settings, data and policies.
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("train ppo: %w", err)
	}
	st, err := store.Open(ctx, cfg.Data)
	if err != nil {
		return fmt.Errorf("train ppo: %w", err)
	}
	m, err := datasets.ResolveIn(ctx, st, cfg.States)
	if err != nil {
		return fmt.Errorf("train ppo: %w (run `mlerl dataset` first)", err)
	}
	all, err := datasets.ReadAll[schemas.RLState](ctx, st, m, schemas.RLStates)
	if err != nil {
		return fmt.Errorf("train ppo: %w", err)
	}
	var states []schemas.RLState
	for _, s := range all {
		if s.Split == schemas.HeldIn {
			states = append(states, s)
		}
	}
	if len(states) == 0 {
		return fmt.Errorf("train ppo: %s has no %s states", m.URI, schemas.HeldIn)
	}
	backend, err := NewBackend()
	if err != nil {
		return fmt.Errorf("train ppo: backend: %w", err)
	}
	sftDir, err := LatestCheckpoint(ctx, st, cfg.SFT)
	if err != nil {
		return fmt.Errorf("train ppo: %w", err)
	}
	if sftDir == "" {
		return fmt.Errorf("train ppo: no SFT checkpoint in %s; run `mlerl train sft` first", st.URI(cfg.SFT))
	}
	var sftCfg SFTConfig
	ref, refCk, err := LoadCheckpoint(ctx, st, sftDir, backend, LoadOptions{WeightsOnly: true}, &sftCfg, nil)
	if err != nil {
		return fmt.Errorf("train ppo: reference policy: %w", err)
	}
	vocab := refCk.Vocab
	tok, err := OpenTokenizer(sftCfg.Tokenizer)
	if err != nil {
		return fmt.Errorf("train ppo: %w", err)
	}
	var (
		policy  *Policy
		state   ppoState
		metrics []string
	)
	latest := ""
	if cfg.Resume {
		if latest, err = LatestCheckpoint(ctx, st, cfg.Out); err != nil {
			return fmt.Errorf("train ppo: %w", err)
		}
	}
	pcg := rand.NewPCG(uint64(cfg.Seed), 0x70706f)
	if latest != "" {
		var ck *Checkpoint
		if policy, ck, err = LoadCheckpoint(ctx, st, latest, backend, LoadOptions{}, nil, &state); err != nil {
			return fmt.Errorf("train ppo: resuming: %w", err)
		}
		metrics = ck.Metrics
		if err := pcg.UnmarshalBinary(state.RNG); err != nil {
			return fmt.Errorf("train ppo: resuming %s: RNG state: %w", st.URI(latest), err)
		}
		fmt.Fprintf(log, "train ppo: resuming from %s at update %d\n", st.URI(latest), state.Update)
	} else if policy, _, err = LoadCheckpoint(ctx, st, sftDir, backend, LoadOptions{WeightsOnly: true}, nil, nil); err != nil {
		return fmt.Errorf("train ppo: initial policy: %w", err)
	}
	rng := rand.New(pcg)
	l, err := newLearner(policy, cfg.Optim, policy.ppoLoss(cfg))
	if err != nil {
		return fmt.Errorf("train ppo: %w", err)
	}
	fmt.Fprintf(log, "train ppo: %d held-in states, policy %d params from %s, reward %q, duration weighting %v\n",
		len(states), policy.Cfg.NumParams(), st.URI(sftDir), cfg.Reward, cfg.DurationWeighting)

	// --- Reward workers: they execute actions concurrently while the
	// learner generates and updates; results arrive in completion order.
	wctx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	cache := newRewardCache()
	outstanding := 0
	jobs := make(chan *rollout, 4*cfg.BatchSize+cfg.GenBatch+cfg.Workers)
	results := make(chan *rollout, cap(jobs))
	var workers sync.WaitGroup
	for range cfg.Workers {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for r := range jobs {
				if wctx.Err() != nil {
					return // the run ended: drop queued actions
				}
				r.Out, r.Cached, r.Err = cache.get(wctx, reward, r.State, r.Text)
				select {
				case results <- r:
				case <-wctx.Done():
					return
				}
			}
		}()
	}
	// On return, cancel in-flight actions and wait for the workers, so no
	// reward call outlives the run (the caller then closes the environment).
	defer func() {
		stopWorkers()
		close(jobs)
		workers.Wait()
	}()

	save := func() error {
		rb, err := pcg.MarshalBinary()
		if err != nil {
			return err
		}
		state.RNG = rb
		sb, _ := json.Marshal(state)
		return SaveCheckpoint(ctx, st, cfg.Out, state.Update, policy, Checkpoint{Config: cfg, Model: policy.Cfg, Vocab: vocab, State: sb, Metrics: metrics})
	}
	genOpts := GenerateOptions{Temperature: cfg.Temperature, TopP: cfg.TopP, MaxNewTokens: cfg.MaxNewTokens}
	bar := progress.New("train ppo", cfg.Updates)
	bar.Add(state.Update, "")
	consecutiveErrors := 0
	var carry []*rollout // results collected beyond the last batch

	for state.Update < cfg.Updates {
		version := state.Update
		var genS, waitS, updS float64
		start := time.Now()

		// --- 1. Rollout: one action per sampled expert state; keep enough
		// work in flight that slow actions overlap with generation.
		var batch []*rollout
		stale, formatErrors, cached, rewardErrors := 0, 0, 0, 0
		take := func(r *rollout) error {
			switch {
			case r.Err != nil:
				rewardErrors++
				consecutiveErrors++
				fmt.Fprintf(log, "train ppo: reward for state %s failed: %v\n", r.State.StateID, r.Err)
				if consecutiveErrors > 2*cfg.BatchSize {
					return fmt.Errorf("train ppo: %d reward errors in a row, the last: %w", consecutiveErrors, r.Err)
				}
			case version-r.Version > cfg.MaxStaleness:
				stale++
			case len(batch) < cfg.BatchSize:
				consecutiveErrors = 0
				batch = append(batch, r)
				if r.Out.FormatError {
					formatErrors++
				}
				if r.Cached {
					cached++
				}
			default:
				carry = append(carry, r) // over-collected: next update's
			}
			return nil
		}
		prev := carry
		carry = nil
		for _, r := range prev {
			if err := take(r); err != nil {
				return err
			}
		}
		for len(batch) < cfg.BatchSize {
			if outstanding < cfg.BatchSize+cfg.Workers {
				t0 := time.Now()
				n := cfg.GenBatch
				picked := make([]schemas.RLState, n)
				prompts := make([][]int32, n)
				for i := range n {
					picked[i] = states[rng.IntN(len(states))]
					prompts[i] = append([]int32{BosID}, vocab.Encode(tok, picked[i].Prompt)...)
				}
				state.Drawn += int64(n)
				genOpts.Seed = uint64(cfg.Seed)<<20 ^ state.GenCalls
				state.GenCalls++
				samples, err := policy.Generate(prompts, genOpts)
				if err != nil {
					return fmt.Errorf("train ppo: update %d: %w", version, err)
				}
				for i, s := range samples {
					act := s.Tokens
					if len(act) > 0 && act[len(act)-1] == EosID {
						act = act[:len(act)-1]
					}
					jobs <- &rollout{State: picked[i], Prompt: s.Prompt, Action: s.Tokens, LogP: s.LogProbs,
						Value: s.Value, Version: version, Text: vocab.Decode(tok, act)}
					outstanding++
				}
				genS += time.Since(t0).Seconds()
			}
			// Take what has arrived; wait only when no more may be started.
			t0 := time.Now()
			arrived := false
			for len(batch) < cfg.BatchSize {
				select {
				case r := <-results:
					outstanding--
					arrived = true
					if err := take(r); err != nil {
						return err
					}
					continue
				default:
				}
				break
			}
			if !arrived && len(batch) < cfg.BatchSize && outstanding >= cfg.BatchSize+cfg.Workers {
				select {
				case r := <-results:
					outstanding--
					if err := take(r); err != nil {
						return err
					}
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			waitS += time.Since(t0).Seconds()
		}

		// --- 2. Advantages: one-step episodes, A = R - V(s), returns R.
		b_rewards := make([]float64, len(batch))
		b_values := make([]float64, len(batch))
		b_durations := make([]float64, len(batch))
		for i, r := range batch {
			b_rewards[i], b_values[i], b_durations[i] = r.Out.Reward, float64(r.Value), r.Out.DurationS
		}
		b_advantages, b_returns := oneStepAdvantages(b_rewards, b_values, cfg.NormAdv)

		// --- 3. Duration-aware weights: dt_k / mean(dt), or all ones.
		b_weights := durationWeights(b_durations, cfg.DurationWeighting)

		// --- 4. Epochs x minibatches of the clipped loss.
		t0 := time.Now()
		b_inds := make([]int, len(batch))
		for i := range b_inds {
			b_inds[i] = i
		}
		var sums [numPPOMetrics]float64
		numMB := 0
		lr := cfg.Optim.LRAt(state.Update, cfg.Updates)
		for range cfg.UpdateEpochs {
			rng.Shuffle(len(b_inds), func(i, j int) { b_inds[i], b_inds[j] = b_inds[j], b_inds[i] })
			mbSize := (len(b_inds) + cfg.Minibatches - 1) / cfg.Minibatches
			for start := 0; start < len(b_inds); start += mbSize {
				mb_inds := b_inds[start:min(start+mbSize, len(b_inds))]
				mb, err := ppoMinibatch(ref, batch, mb_inds, b_advantages, b_returns, b_weights)
				if err != nil {
					return fmt.Errorf("train ppo: update %d: %w", version, err)
				}
				loss, _, ms, err := l.Step(mb, lr)
				if err != nil {
					return fmt.Errorf("train ppo: update %d: %w", version, err)
				}
				if math.IsNaN(loss) {
					return fmt.Errorf("train ppo: update %d: the loss is NaN; lower optim.lr", version)
				}
				for i := range sums {
					sums[i] += ms[i]
				}
				numMB++
			}
		}
		updS = time.Since(t0).Seconds()
		state.Update++

		// --- 5. Metrics and checkpoints.
		mean := func(xs []float64) float64 {
			s := 0.0
			for _, x := range xs {
				s += x
			}
			return s / float64(max(len(xs), 1))
		}
		rec := map[string]any{"stage": "ppo", "step": state.Update,
			"charts/reward_mean": mean(b_rewards), "charts/value_mean": mean(b_values),
			"charts/duration_mean": mean(b_durations), "charts/lr": lr,
			"charts/format_error_rate": float64(formatErrors) / float64(len(batch)),
			"charts/stale_fraction":    float64(stale) / float64(stale+len(batch)),
			"charts/cache_hit_rate":    float64(cached) / float64(len(batch)),
			"charts/reward_errors":     rewardErrors,
			"charts/samples_per_s":     float64(len(batch)) / time.Since(start).Seconds(),
			"time/generate_s":          genS, "time/wait_rewards_s": waitS, "time/update_s": updS,
		}
		for i, name := range ppoMetricNames {
			rec[name] = sums[i] / float64(numMB)
		}
		b, _ := json.Marshal(rec)
		metrics = append(metrics, string(b)+"\n")
		bar.Add(1, fmt.Sprintf("reward %.3f", rec["charts/reward_mean"]))
		if state.Update%max(cfg.CheckpointEvery, 1) == 0 || state.Update == cfg.Updates {
			if err := save(); err != nil {
				return fmt.Errorf("train ppo: %w", err)
			}
		}
	}
	bar.Done()
	fmt.Fprintf(log, "train ppo: done, checkpoint %s\n", st.URI(cfg.Out))
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
	if norm && len(adv) > 1 {
		mean, sq := 0.0, 0.0
		for _, a := range adv {
			mean += a
		}
		mean /= float64(len(adv))
		for _, a := range adv {
			sq += (a - mean) * (a - mean)
		}
		std := math.Sqrt(sq / float64(len(adv)-1))
		for i := range adv {
			adv[i] = (adv[i] - mean) / (std + 1e-8)
		}
	}
	return adv, returns
}

// durationWeights returns dt_k / mean(dt) for every sample, so the weights
// average 1; all ones when off or when every duration is 0.
func durationWeights(durations []float64, on bool) []float64 {
	w := make([]float64, len(durations))
	mean := 0.0
	for _, d := range durations {
		mean += d
	}
	mean /= float64(max(len(durations), 1))
	for i, d := range durations {
		w[i] = 1
		if on && mean > 0 {
			w[i] = d / mean
		}
	}
	return w
}

// ppoMinibatch packs the minibatch's (prompt, action) sequences and lists
// the action tokens (flat index, target, behaviour log-prob, advantage,
// duration weight, the frozen reference's log-prob) and the value positions
// (each prompt's last token, with its return). Lists are padded with mask 0
// to multiples of 64 and 8 so that few graph shapes are compiled.
func ppoMinibatch(ref *Policy, batch []*rollout, mb_inds []int, adv, returns, weights []float64) ([]any, error) {
	exs := make([]encoded, len(mb_inds))
	numAct := 0
	for i, k := range mb_inds {
		r := batch[k]
		toks := append(append([]int32{}, r.Prompt...), r.Action...)
		exs[i] = encoded{Tokens: toks, Response: len(r.Prompt)}
		numAct += len(r.Action)
	}
	order := make([]int, len(exs))
	for i := range order {
		order[i] = i
	}
	// One batch holding every sample of the minibatch.
	packed := packBatches(exs, order, len(exs), ref.Cfg.Ctx)
	if len(packed) != 1 {
		return nil, fmt.Errorf("ppo minibatch packed into %d batches, want 1", len(packed))
	}
	b := packed[0]
	k := max(64, (numAct+63)/64*64)
	m := max(8, (len(mb_inds)+7)/8*8)
	idx, targets := make([]int32, k), make([]int32, k)
	act, oldLogp, mbAdv, mbW := make([]float32, k), make([]float32, k), make([]float32, k), make([]float32, k)
	vIdx, vMask, mbRet := make([]int32, m), make([]float32, m), make([]float32, m)
	j := 0
	for i, s := range mb_inds {
		r := batch[s]
		at := b.Starts[i] + len(r.Prompt) - 1 // position predicting the first action token
		vIdx[i], vMask[i], mbRet[i] = int32(at), 1, float32(returns[s])
		for t := range r.Action {
			idx[j], targets[j] = int32(at+t), r.Action[t]
			act[j], oldLogp[j] = 1, r.LogP[t]
			mbAdv[j], mbW[j] = float32(adv[s]), float32(weights[s])
			j++
		}
	}
	refLogp, err := ref.TargetLogProbs(b.batchInput, idx, targets)
	if err != nil {
		return nil, err
	}
	return append(b.tensors(), i32Tensor(idx, k), i32Tensor(targets, k), f32Tensor(act, k), f32Tensor(oldLogp, k),
		f32Tensor(mbAdv, k), f32Tensor(mbW, k), f32Tensor(refLogp, k), i32Tensor(vIdx, m), f32Tensor(vMask, m), f32Tensor(mbRet, m)), nil
}

// The PPO loss's metrics, in the order ppoLoss returns them.
const numPPOMetrics = 6

var ppoMetricNames = [numPPOMetrics]string{"losses/policy", "losses/value", "losses/entropy", "losses/approx_kl", "losses/clipfrac", "losses/kl_ref"}

// ppoLoss is the clipped surrogate with duration weights, the value loss,
// the entropy bonus and a KL penalty to the reference, over action tokens.
// Inputs: tokens, positions, segments [B,S]; action-token indices,
// targets, mask, behaviour log-probs, advantages, duration weights,
// reference log-probs [K]; value indices, mask, returns [M].
func (p *Policy) ppoLoss(cfg PPOConfig) lossFn {
	return func(scope *model.Scope, in []*Node) (*Node, []*Node) {
		hidden := p.trunk(scope, in[0], in[1], in[2])
		// One pass of the heads over action positions then value positions.
		k := in[3].Shape().Dimensions[0]
		allLogits, allValues := p.heads(scope, gatherRows(hidden, Concatenate([]*Node{in[3], in[10]}, 0)))
		logits := Slice(allLogits, AxisRange(0, k))
		values := Slice(allValues, AxisRange(k))
		mb_targets, mask, mb_logprobs, mb_advantages, mb_weights, mb_reflogprobs, vmask, mb_returns :=
			in[4], in[5], in[6], in[7], in[8], in[9], in[11], in[12]
		g := logits.Graph()
		newlogprob, entropy := tokenLogProbs(logits, mb_targets)
		masked := func(x, m *Node) *Node { // mean of x over m
			return Div(ReduceAllSum(Mul(x, m)), Max(ReduceAllSum(m), OnesLike(ReduceAllSum(m))))
		}
		logratio := Sub(newlogprob, mb_logprobs)
		ratio := Exp(logratio)
		approx_kl := masked(Sub(Sub(ratio, OnesLike(ratio)), logratio), mask)
		clipfrac := masked(ConvertDType(GreaterThan(Abs(Sub(ratio, OnesLike(ratio))), Scalar(g, ratio.DType(), cfg.ClipCoef)), ratio.DType()), mask)

		// Policy loss: clipped surrogate, each term weighted by dt_k/mean(dt).
		pg_loss1 := Mul(Neg(mb_advantages), ratio)
		pg_loss2 := Mul(Neg(mb_advantages), ClipScalar(ratio, 1-cfg.ClipCoef, 1+cfg.ClipCoef))
		pg_loss := masked(Mul(mb_weights, Max(pg_loss1, pg_loss2)), mask)

		// Value loss at each prompt's last token.
		v_loss := Mul(Scalar(g, values.DType(), 0.5), masked(Square(Sub(values, mb_returns)), vmask))

		entropy_loss := masked(entropy, mask)

		// KL to the frozen SFT policy, k3 estimator: exp(d) - d - 1 with
		// d = log pi_ref - log pi (non-negative, unbiased).
		d := Sub(mb_reflogprobs, newlogprob)
		kl_ref := masked(Sub(Sub(Exp(d), d), OnesLike(d)), mask)

		loss := Add(Add(pg_loss, Mul(Scalar(g, pg_loss.DType(), cfg.VfCoef), v_loss)),
			Sub(Mul(Scalar(g, pg_loss.DType(), cfg.KLCoef), kl_ref), Mul(Scalar(g, pg_loss.DType(), cfg.EntCoef), entropy_loss)))
		return loss, []*Node{pg_loss, v_loss, entropy_loss, approx_kl, clipfrac, kl_ref}
	}
}

// TargetLogProbs returns log pi(targets[i]) at the flat positions idx[i]
// of a batch (the frozen reference's log-probs in PPO).
func (p *Policy) TargetLogProbs(in batchInput, idx, targets []int32) ([]float32, error) {
	if err := p.checkInput(in); err != nil {
		return nil, err
	}
	if len(idx) != len(targets) {
		return nil, fmt.Errorf("model: %d indices for %d targets", len(idx), len(targets))
	}
	if p.logp == nil {
		var err error
		p.logp, err = model.NewExec(p.Backend, p.Store, func(scope *model.Scope, tokens, positions, segments, idx, targets *Node) *Node {
			logits, _ := p.heads(scope, gatherRows(p.trunk(scope, tokens, positions, segments), idx))
			lp, _ := tokenLogProbs(logits, targets)
			return lp
		})
		if err != nil {
			return nil, fmt.Errorf("model: log-prob graph: %w", err)
		}
	}
	outs, err := p.logp.Exec(append(in.tensors(), i32Tensor(idx, len(idx)), i32Tensor(targets, len(targets)))...)
	if err != nil {
		return nil, fmt.Errorf("model: log-probs: %w", err)
	}
	return flat(outs[0])
}
