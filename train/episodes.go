package train

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/env/episode"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/progress"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/schemas"
)

// Episode-wise PPO, the baseline arm next to step-wise PPO: the policy
// plays whole episodes of episode_steps actions from tasks' initial
// states (the first expert state of each held-in trajectory) with the
// same environment and reward, and every action is credited with the
// return from its step to the episode's end, G_t = sum of r_t' for
// t' >= t (A_t = G_t - V(s_t)). Episodes of a batch step in lockstep, one
// generation call per step; their actions execute concurrently.

func runEpisodePPO(ctx context.Context, cfg PPOConfig, log io.Writer) error {
	r, err := newPPORun(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer r.close()
	var starts []schemas.RLState
	for _, s := range r.states {
		if s.StepIndex == 0 {
			starts = append(starts, s)
		}
	}
	if len(starts) == 0 {
		return fmt.Errorf("train ppo: %s has no initial states (step_index 0) to start episodes from", r.s.input.URI)
	}
	python, err := sandbox.FindPython(cfg.Env.Python)
	if err != nil {
		return fmt.Errorf("train ppo: %w", err)
	}
	ecfg := cfg.Env
	ecfg.Python = python
	ecfg.Runner = sandbox.New(ctx, python, true, nil)
	defer ecfg.Runner.Close()
	opts, err := promptOptions(ctx, r.s, ecfg.MaxSteps)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "train ppo: episode-wise, %d initial states, %d steps per episode, policy %d params on the %s engine\n",
		len(starts), cfg.EpisodeSteps, r.policy.Config().NumParams(), r.policy.Name())

	bar := progress.New("train ppo", cfg.Updates)
	bar.Add(r.state.Update, "")
	for r.state.Update < cfg.Updates {
		start := time.Now()
		boundary := r.state
		// --- 1. Rollout: whole episodes from sampled initial states.
		batch, returns, valid, err := r.episodes(ctx, starts, ecfg, opts)
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
		// --- 2. Advantages: A_t = G_t - V(s_t).
		b_values, err := r.values(r.pack(batch))
		if err != nil {
			return fmt.Errorf("train ppo: update %d: %w", r.state.Update, err)
		}
		b_advantages := make([]float64, len(batch))
		b_rewards, b_durations := make([]float64, len(batch)), make([]float64, len(batch))
		for i, s := range batch {
			b_advantages[i] = returns[i] - b_values[i]
			b_rewards[i], b_durations[i] = s.Out.Reward, s.Out.DurationS
		}
		if cfg.NormAdv {
			normalise(b_advantages)
		}
		// --- 3. Duration-aware weights.
		b_weights := durationWeights(b_durations, cfg.DurationWeighting)
		// --- 4. Epochs x minibatches of the clipped loss.
		lr := cfg.Optim.LRAt(r.state.Update, cfg.Updates)
		t0 := time.Now()
		sums, err := r.update(batch, b_advantages, returns, b_weights, lr)
		if err != nil {
			return fmt.Errorf("train ppo: update %d: %w", r.state.Update, err)
		}
		r.state.Update++
		// --- 5. Metrics and checkpoints.
		rec := map[string]any{"stage": "ppo", "mode": ModeEpisode, "step": r.state.Update,
			"charts/reward_mean": mean(b_rewards), "charts/return_mean": mean(returns), "charts/value_mean": mean(b_values),
			"charts/duration_mean": mean(b_durations), "charts/lr": lr,
			"charts/valid_action_rate": float64(valid) / float64(len(batch)),
			"charts/samples_per_s":     float64(len(batch)) / time.Since(start).Seconds(),
			"time/update_s":            time.Since(t0).Seconds(),
		}
		if err := r.endUpdate(ctx, rec, sums); err != nil {
			return err
		}
		bar.Add(1, fmt.Sprintf("return %.3f", rec["charts/return_mean"]))
	}
	bar.Done()
	fmt.Fprintf(log, "train ppo: done, checkpoint %s\n", r.s.st.URI(cfg.Out))
	return nil
}

// episodes plays enough episodes for a batch of batch_size steps and
// returns the steps as samples with their returns G_t, and how many
// actions were valid.
func (r *ppoRun) episodes(ctx context.Context, starts []schemas.RLState, ecfg env.Config, opts agents.Options) ([]*sample, []float64, int, error) {
	cfg := r.cfg
	n := (cfg.BatchSize + cfg.EpisodeSteps - 1) / cfg.EpisodeSteps
	envs := make([]*env.Env, n)
	plans := make([][]string, n)
	defer func() {
		for _, e := range envs {
			if e != nil {
				e.Close()
			}
		}
	}()
	for i := range envs {
		s := starts[r.rng.IntN(len(starts))]
		e, err := env.Restore(ctx, ecfg, r.s.st, s.SnapshotRef)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("state %s: %w", s.StateID, err)
		}
		envs[i], plans[i] = e, agents.PlanFromCompact(s.Prompt)
		r.state.Drawn++
	}
	steps := make([][]*sample, n)
	valid := 0
	gen := policy.Generator{Engine: r.policy, Vocab: r.vocab, Tok: r.tok}
	for range cfg.EpisodeSteps {
		var live []int
		var prompts [][]int32
		var contexts []policy.GrammarContext
		for i, e := range envs {
			if done, _ := e.Done(); done {
				continue
			}
			st := agents.StateOf(e, plans[i], opts.MaxSteps)
			p, err := policy.EncodePrompt(r.vocab, r.tok, r.policy.Config(), agents.Compact(st, opts.CompactBudget, opts.Count))
			if err != nil {
				return nil, nil, 0, err
			}
			live, prompts = append(live, i), append(prompts, p)
			contexts = append(contexts, policy.NewGrammarContext(st, plans[i], r.oneLine))
		}
		if len(live) == 0 {
			break
		}
		gopts := policy.GenerateOptions{Temperature: cfg.Temperature, TopP: cfg.TopP, MaxNewTokens: cfg.MaxNewTokens, Seed: newSeed(cfg.Seed, r.state.GenCalls)}
		r.state.GenCalls++
		if cfg.Decode == policy.DecodeConstrained {
			gopts.Constrain = func(i int) policy.Constraint { return gen.ActionGrammar(contexts[i]) }
		}
		samples, err := gen.Generate(prompts, gopts)
		if err != nil {
			return nil, nil, 0, err
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(cfg.Workers)
		for j, i := range live {
			smp := &sample{Prompt: samples[j].Prompt, Action: samples[j].Tokens, LogP: samples[j].LogProbs, Masks: samples[j].Masks,
				Version: r.state.Update, Text: strings.TrimSpace(r.vocab.Decode(r.tok, samples[j].Tokens))}
			steps[i] = append(steps[i], smp)
			g.Go(func() error {
				res, err := envs[i].Step(gctx, smp.Text)
				if err != nil {
					return err
				}
				smp.Out = stepOutcome(res)
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return nil, nil, 0, err
		}
	}
	var batch []*sample
	var returns []float64
	for _, ep := range steps {
		g := 0.0
		rets := make([]float64, len(ep))
		for t := len(ep) - 1; t >= 0; t-- {
			g += ep[t].Out.Reward
			rets[t] = g
		}
		for t, s := range ep {
			if s.Out.Valid {
				valid++
			}
			batch, returns = append(batch, s), append(returns, rets[t])
		}
	}
	return batch, returns, valid, nil
}

// promptOptions renders episodes' prompts as the rollout behind the state
// pool rendered them (budgets and token counter from the steps manifest
// the pool was made from; episode.PromptsOf), the defaults when the pool
// names no steps version that records them.
func promptOptions(ctx context.Context, s *stage, maxSteps int) (agents.Options, error) {
	p := agents.Prompts{FullBudget: agents.DefaultFullBudget, CompactBudget: agents.DefaultCompactBudget}
	from := "the default budgets"
	for _, parent := range s.input.Parents {
		if parent.Name != schemas.Steps.Name {
			continue
		}
		m, err := datasets.ResolveIn(ctx, s.st, fmt.Sprintf("%s/v%d", parent.Name, parent.Version))
		if err != nil {
			return agents.Options{}, fmt.Errorf("train ppo: the state pool's steps: %w", err)
		}
		if rec, ok := episode.PromptsOf(m); ok {
			p, from = rec, m.URI
		}
	}
	opts, err := agents.NewOptionsFor(p, maxSteps)
	if err != nil {
		return agents.Options{}, fmt.Errorf("train ppo: %w", err)
	}
	fmt.Fprintf(s.log, "train ppo: prompts rendered with budgets %d/%d tokens (%s)\n", p.FullBudget, p.CompactBudget, from)
	return opts, nil
}
