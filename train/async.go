package train

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"math/rand/v2"

	"github.com/mlerl/mlerl/internal/progress"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/schemas"
)

// The asynchronous regime of the duration-aware paper (collector async):
// a fixed pool of actors (workers of them), each serving its own tasks as
// the paper's actors serve their competitions, draws a state, generates
// an action with the policy version it last synchronised, executes it
// and starts over, without waiting for the learner; the learner updates
// on the first batch_size samples that complete, whoever made them, so
// that slow actions arrive in a later update, staler, and are dropped
// once older than max_staleness versions. Within a fixed time an actor
// whose task runs fast completes, and so is updated on, far more often
// than one whose task runs slowly: the frequency bias that duration-aware
// weighting (dt / mean dt) corrects. With fewer actors than tasks an
// actor serves several tasks, drawing among them uniformly, and the bias
// is weaker. Each sample is credited against the critic (A = R - V(s)):
// its group is not waited for. The synchronous collector (the default)
// has no such bias: every generated group is used.

// Collector modes.
const (
	CollectorSync  = "sync"
	CollectorAsync = "async"
)

// asyncBatcher forms the asynchronous regime's batches from completions:
// it keeps completed samples in the order they completed, and take hands
// out the first n whose version is within maxStaleness of the current
// one, dropping (and returning) the older ones it passes. It is the
// collector's whole batching rule, kept apart from the goroutines so that
// a simulated clock can drive it (async_test.go).
type asyncBatcher struct {
	done []*sample
}

func (b *asyncBatcher) add(s *sample) { b.done = append(b.done, s) }

// ready reports how many completed samples wait.
func (b *asyncBatcher) ready() int { return len(b.done) }

// take returns the first n usable samples (nil if fewer wait; stale ones
// met on the way are dropped all the same).
func (b *asyncBatcher) take(version, maxStaleness, n int) (batch, stale []*sample) {
	kept := b.done[:0]
	for _, s := range b.done {
		if version-s.Version > maxStaleness {
			stale = append(stale, s)
			continue
		}
		kept = append(kept, s)
	}
	b.done = kept
	if len(b.done) < n {
		return nil, stale
	}
	batch = append([]*sample(nil), b.done[:n]...)
	b.done = append(b.done[:0], b.done[n:]...)
	return batch, stale
}

// actorPools assigns the held-in tasks (in TaskOrder) to workers actors,
// task i to actor i mod workers (with more actors than tasks, actor i
// serves task i mod tasks), and returns each actor's states.
func actorPools(states []schemas.RLState, workers int) [][]schemas.RLState {
	var ids []string
	byTask := map[string][]schemas.RLState{}
	for _, s := range states {
		ids = append(ids, s.TaskID)
		byTask[s.TaskID] = append(byTask[s.TaskID], s)
	}
	order := TaskOrder(ids)
	pools := make([][]schemas.RLState, workers)
	for i, id := range order {
		pools[i%workers] = append(pools[i%workers], byTask[id]...)
	}
	for i := len(order); i < workers; i++ {
		pools[i] = byTask[order[i%len(order)]]
	}
	return pools
}

// actors is the pool of asynchronous actors. They generate with their own
// copy of the policy (synced to the learner's after every update, under
// mu) and send completed samples on out.
type actors struct {
	r       *ppoRun
	reward  RewardFunc
	eng     policy.Engine // the actors' copy of the policy
	mu      sync.Mutex    // guards everything below and generation
	version int
	rng     *rand.Rand // the actors' state sampler (their order is timing's, not reproducible)
	calls   uint64     // generation calls (their seeds)
	drawn   int64      // states drawn since the last update
	genS    float64    // generation seconds since the last update
	out     chan *sample
	wg      sync.WaitGroup
}

func (r *ppoRun) startActors(ctx context.Context, reward RewardFunc) (*actors, error) {
	ws, err := r.policy.Weights()
	if err != nil {
		return nil, err
	}
	eng, err := policy.NewEngine(r.cfg.Engine, r.policy.Config(), ws)
	if err != nil {
		return nil, err
	}
	a := &actors{r: r, reward: reward, eng: eng, version: r.state.Update, out: make(chan *sample, 4*r.cfg.BatchSize),
		rng: rand.New(rand.NewPCG(uint64(r.cfg.Seed), uint64(r.state.Drawn)^0x6163746f72)), calls: r.state.GenCalls << 16}
	for _, pool := range actorPools(r.states, r.cfg.Workers) {
		a.wg.Add(1)
		go a.loop(ctx, pool)
	}
	return a, nil
}

// loop is one actor: draw a state of its pool, generate, execute, send,
// until ctx ends.
func (a *actors) loop(ctx context.Context, pool []schemas.RLState) {
	defer a.wg.Done()
	for ctx.Err() == nil {
		a.mu.Lock()
		t0 := time.Now()
		groups, err := a.r.generateWith(ctx, a.eng, a.version, a.r.cfg.GroupSize, pool[a.rng.IntN(len(pool))], a.calls)
		a.calls++
		a.drawn++
		a.genS += time.Since(t0).Seconds()
		a.mu.Unlock()
		if err != nil {
			a.send(ctx, &sample{Err: err})
			return
		}
		for _, g := range groups {
			for _, s := range g.Samples {
				s.G = nil
				s.Out, s.Err = a.reward(ctx, s.State, s.Text)
				if !a.send(ctx, s) {
					return
				}
			}
		}
	}
}

func (a *actors) send(ctx context.Context, s *sample) bool {
	select {
	case a.out <- s:
		return true
	case <-ctx.Done():
		return false
	}
}

// sync gives the actors the learner's weights as policy version v.
func (a *actors) sync(v int) error {
	ws, err := a.r.policy.Weights()
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.version = v
	return a.eng.SetWeights(ws)
}

// collect returns and resets the generation time and the states drawn
// since the last call.
func (a *actors) collect() (genS float64, drawn int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	genS, drawn = a.genS, a.drawn
	a.genS, a.drawn = 0, 0
	return genS, drawn
}

// runAsyncPPO is step-wise PPO with the asynchronous collector.
func runAsyncPPO(ctx context.Context, r *ppoRun, reward RewardFunc, curve *curveEval, log io.Writer) error {
	cfg := r.cfg
	actx, stop := context.WithCancel(ctx)
	act, err := r.startActors(actx, reward)
	if err != nil {
		stop()
		return fmt.Errorf("train ppo: actors: %w", err)
	}
	defer func() {
		stop()
		for range act.out { // unblock actors sending
		}
	}()
	go func() { act.wg.Wait(); close(act.out) }()
	defer act.eng.Close()

	var b asyncBatcher
	bar := progress.New("train ppo", cfg.Updates)
	bar.Resume(r.state.Update)
	for r.state.Update < cfg.Updates {
		start, cpu0 := time.Now(), cpuSeconds()
		var batch, dropped []*sample
		rewardErrors := 0
		for batch == nil {
			var s *sample
			var ok bool
			select {
			case s, ok = <-act.out:
			case <-ctx.Done():
			}
			if ctx.Err() != nil || !ok {
				if err := r.save(ctx); err != nil {
					return err
				}
				return r.s.interrupted(ctx, fmt.Sprintf("during update %d of %d", r.state.Update+1, cfg.Updates), cfg.Out)
			}
			if s.Err != nil {
				rewardErrors++
				r.consecErrs++
				fmt.Fprintf(r.s.log, "train ppo: actor: %v\n", s.Err)
				if r.consecErrs > 2*cfg.BatchSize || s.State.StateID == "" {
					return fmt.Errorf("train ppo: actor: %w", s.Err)
				}
				continue
			}
			r.consecErrs = 0
			b.add(s)
			var stale []*sample
			batch, stale = b.take(r.state.Update, cfg.MaxStaleness, cfg.BatchSize)
			dropped = append(dropped, stale...)
		}
		waitS := time.Since(start).Seconds()
		t0 := time.Now()
		b_rewards, b_durations := make([]float64, len(batch)), make([]float64, len(batch))
		for i, s := range batch {
			b_rewards[i], b_durations[i] = s.Out.Reward, s.Out.DurationS
		}
		b_values, err := r.values(r.pack(batch))
		if err != nil {
			return fmt.Errorf("train ppo: update %d: %w", r.state.Update, err)
		}
		b_advantages, b_returns := oneStepAdvantages(b_rewards, b_values, cfg.NormAdv)
		groups := make([]*group, len(batch)) // one sample each: minibatches split samples
		for i, s := range batch {
			groups[i] = &group{State: s.State, Samples: []*sample{s}, Version: s.Version}
		}
		l, err := r.learn(groups, b_advantages, b_returns, b_durations)
		if err != nil {
			return err
		}
		learnS, lr, klCoef, epochs := time.Since(t0).Seconds(), l.lr, l.klCoef, l.epochs
		if err := act.sync(r.state.Update); err != nil {
			return fmt.Errorf("train ppo: syncing the actors: %w", err)
		}
		genS, drawn := act.collect()
		r.state.Drawn += drawn
		r.state.GenCalls += uint64(drawn)
		r.state.WallS += time.Since(start).Seconds()
		r.state.CPUS += cpuSeconds() - cpu0
		dropDur := make([]float64, len(dropped))
		for i, s := range dropped {
			dropDur[i] = s.Out.DurationS
		}
		rec := map[string]any{"stage": "ppo", "mode": ModeStep, "collector": CollectorAsync, "step": r.state.Update,
			"charts/reward_mean": mean(b_rewards), "charts/credit_mean": mean(b_rewards), "charts/value_mean": mean(b_values), "charts/samples": len(batch),
			"charts/duration_mean": mean(b_durations), "charts/lr": lr, "charts/kl_coef": klCoef, "charts/epochs": epochs,
			"charts/stale_fraction": ratio(len(dropped), len(dropped)+len(batch)), "charts/reward_errors": rewardErrors,
			"charts/valid_action_rate": validShare(batch),
			"charts/samples_per_s":     float64(len(batch)) / time.Since(start).Seconds(),
			"time/generate_s":          genS, "time/wait_rewards_s": waitS, "time/learn_s": learnS,
			"time/update_s": time.Since(start).Seconds(), "time/wall_s": r.state.WallS, "time/cpu_s": r.state.CPUS,
			"samples/dropped_duration_s": dropDur,
		}
		for k, v := range outcomeShares(batch) {
			rec[k] = v
		}
		recordSamples(rec, batch, dropped)
		if err := r.endUpdate(ctx, rec, l, curve); err != nil {
			return err
		}
		bar.Add(1, fmt.Sprintf("reward %.3f, %d samples (%d stale dropped), learn %.0fs", rec["charts/reward_mean"], len(batch), len(dropped), learnS))
	}
	bar.Done()
	fmt.Fprintf(log, "train ppo: done, checkpoint %s\n", r.s.st.URI(cfg.Out))
	return nil
}

func validShare(batch []*sample) float64 {
	n := 0
	for _, s := range batch {
		if s.Out.Valid {
			n++
		}
	}
	return ratio(n, len(batch))
}

// generateWith generates k actions for state s with eng (the actors'
// copy of the policy) at policy version v, the generation seed from
// calls. It leaves the learner's state alone.
func (r *ppoRun) generateWith(ctx context.Context, eng policy.Engine, v, k int, s schemas.RLState, calls uint64) ([]*group, error) {
	p, err := r.pol.EncodePrompt(s.Prompt)
	if err != nil {
		return nil, fmt.Errorf("state %s: %w", s.StateID, err)
	}
	var gc policy.GrammarContext
	if r.facts != nil {
		if gc, err = r.facts.grammar(ctx, s, r.oneLine, r.cfg.FreeText == FreeTextForce); err != nil {
			return nil, err
		}
	}
	prompts := make([][]int32, k)
	for i := range prompts {
		prompts[i] = p
	}
	opts := policy.GenerateOptions{Temperature: r.cfg.Temperature, TopP: r.cfg.TopP, MaxNewTokens: r.cfg.MaxNewTokens, Seed: newSeed(r.cfg.Seed, calls)}
	gen := policy.Generator{Engine: eng, Policy: r.pol}
	if r.facts != nil {
		opts.Constrain = func(int) policy.Constraint { return gen.ActionGrammar(gc) }
	}
	out, err := gen.Generate(prompts, opts)
	if err != nil {
		return nil, err
	}
	g := &group{State: s, Version: v, left: k}
	for _, smp := range out {
		g.Samples = append(g.Samples, &sample{State: s, Prompt: smp.Prompt, Action: smp.Tokens, LogP: smp.LogProbs, Masks: smp.Masks,
			Free: smp.Free, Version: v, Text: strings.TrimSpace(r.pol.Decode(smp.Tokens)), LastStep: gc.NoEdit || gc.NoUndo})
	}
	return []*group{g}, nil
}
