package train

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/env/episode"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/progress"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/schemas"
)

// The same loop serves step-wise PPO with horizon n > 1 (n-step returns):
// the episodes then start from sampled expert states (any step), last n
// steps, and only their first actions are trained, each credited with
// G_0, the rewards of its own step and of the policy's continuation
// (telescoping to the score the continuation leaves), against the mean
// G_0 of the state's other episodes.
//
// Episode-wise PPO, the baseline arm next to step-wise PPO: the policy
// plays whole episodes of episode_steps actions from tasks' initial
// states (the first expert state of each held-in trajectory) with the
// same environment and reward, and every action is credited with the
// return from its step to the episode's end, G_t = sum of r_t' for
// t' >= t. group_size episodes start from each drawn initial state; with
// the group baseline, A_t = G_t - the mean G_t of the group's other
// episodes that reached step t (none: the step is left out, A = 0), with
// the critic A_t = G_t - V(s_t). The episodes of a batch act together in
// one generation call, each from its own random stream; their actions
// execute concurrently, and the episodes whose step is back act again
// together while a slow script still runs (playSteps).

func runEpisodePPO(ctx context.Context, cfg PPOConfig, log io.Writer) error {
	r, err := newPPORun(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer r.close()
	horizon := cfg.Mode == ModeStep
	starts, steps, nGroups := r.states, cfg.Horizon, cfg.BatchSize/cfg.GroupSize
	if !horizon {
		starts = nil
		for _, s := range r.states {
			if s.StepIndex == 0 {
				starts = append(starts, s)
			}
		}
		if len(starts) == 0 {
			return fmt.Errorf("train ppo: %s has no initial states (step_index 0) to start episodes from", r.s.input.URI)
		}
		steps = cfg.EpisodeSteps
		nGroups = (cfg.BatchSize + cfg.GroupSize*steps - 1) / (cfg.GroupSize * steps)
	}
	python, err := sandbox.FindPython(cfg.Env.Python)
	if err != nil {
		return fmt.Errorf("train ppo: %w", err)
	}
	ecfg := cfg.Env
	ecfg.Python = python
	ecfg.Runner = sandbox.New(ctx, python, true, nil)
	defer ecfg.Runner.Close()
	ecfg.ExecCache = env.NewExecCacheFor(ecfg)
	opts, err := promptOptions(ctx, r.s, ecfg.MaxSteps, true)
	if err != nil {
		return err
	}
	if horizon {
		fmt.Fprintf(log, "train ppo: step-wise with %d-step returns, %d states, %d actions per state, policy %d params on the %s engine\n",
			steps, len(starts), cfg.GroupSize, r.policy.Config().NumParams(), r.policy.Name())
	} else {
		fmt.Fprintf(log, "train ppo: episode-wise, %d initial states, %d steps per episode, %d episodes per state, policy %d params on the %s engine\n",
			len(starts), steps, cfg.GroupSize, r.policy.Config().NumParams(), r.policy.Name())
	}
	curve, err := r.begin(ctx)
	if err != nil {
		return err
	}
	defer curve.close()

	bar := progress.New("train ppo", cfg.Updates)
	bar.Resume(r.state.Update)
	for r.state.Update < cfg.Updates {
		start, cpu0 := time.Now(), cpuSeconds()
		boundary := r.state
		// --- 1. Rollout: group_size episodes from each sampled state;
		// groups without a signal are replaced by new draws (dynamic
		// sampling, at most oversample x the groups wanted).
		r.execS, r.busyS, r.scriptS = 0, 0, 0
		cache0 := ecfg.ExecCache.Stats()
		c, err := collect(cfg, nGroups, r.state.KeepRate, func(n int) ([]*group, []float64, float64, error) {
			return r.episodes(ctx, starts, ecfg, opts, n, steps)
		})
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
		groups, returns, trajAdv := c.groups, c.returns, c.trajAdv
		if c.drawn > 0 && horizon {
			// The share of groups with a signal, averaged over recent
			// updates: what the next update's first round expects.
			keep := float64(len(groups)+c.surplus) / float64(c.drawn)
			if r.state.KeepRate == 0 {
				r.state.KeepRate = keep
			}
			r.state.KeepRate = 0.7*r.state.KeepRate + 0.3*keep
		}
		batch := flatten(groups)
		t0 := time.Now()
		// --- 2. Advantages: A_t = G_t - the group's other G_t, or - V(s_t)
		// (horizon: A_0 = G_0 - the group's other G_0).
		b_rewards, b_durations := make([]float64, len(batch)), make([]float64, len(batch))
		valid := 0
		for i, s := range batch {
			b_rewards[i], b_durations[i] = s.Out.Reward, s.Out.DurationS
			if s.Out.Valid {
				valid++
			}
		}
		var b_advantages, b_returns, b_values []float64
		if cfg.Advantage == AdvantageCritic && len(batch) > 0 {
			if b_values, err = r.values(r.pack(batch)); err != nil {
				return fmt.Errorf("train ppo: update %d: %w", r.state.Update, err)
			}
			b_advantages, b_returns = oneStepAdvantages(returns, b_values, cfg.NormAdv)
		} else if trajAdv != nil {
			b_advantages = trajAdv
		} else if horizon {
			b_advantages = groupAdvantages(groups, cfg.GroupStd)
		} else {
			b_advantages = episodeGroupAdvantages(groups, returns)
		}
		// --- 3-4. Duration-aware weights and the clipped loss.
		l, err := r.learn(groups, b_advantages, b_returns, b_durations)
		if err != nil {
			return err
		}
		learnS, lr, klCoef, epochs := time.Since(t0).Seconds(), l.lr, l.klCoef, l.epochs
		r.state.WallS += time.Since(start).Seconds()
		r.state.CPUS += cpuSeconds() - cpu0
		// --- 5. Metrics, learning curve and checkpoints.
		mode := ModeEpisode
		if horizon {
			mode = ModeStep
		}
		rec := map[string]any{"stage": "ppo", "mode": mode, "horizon": steps, "step": r.state.Update,
			"charts/groups_dropped_fraction": ratio(len(c.dropped)-c.surplus, c.drawn), "charts/groups": len(groups),
			"charts/groups_drawn": c.drawn, "charts/groups_surplus": c.surplus, "charts/oversample": float64(c.drawn) / float64(nGroups),
			"charts/rollout_rounds": c.rounds, "time/oversample_s": c.extraS,
			"charts/samples": len(batch), "charts/lr": lr, "charts/kl_coef": klCoef, "charts/epochs": epochs,
			"charts/samples_per_s": float64(len(batch)) / time.Since(start).Seconds(),
			"time/generate_s":      c.genS, "time/execute_s": r.execS, "time/execute_busy_s": r.busyS, "time/execute_script_s": r.scriptS, "time/learn_s": learnS, "time/update_s": time.Since(start).Seconds(),
			"time/wall_s": r.state.WallS, "time/cpu_s": r.state.CPUS,
		}
		if len(batch) > 0 { // nothing measured, nothing written
			rec["charts/reward_mean"], rec["charts/return_mean"], rec["charts/credit_mean"] = mean(b_rewards), mean(returns), mean(returns)
			rec["charts/duration_mean"], rec["charts/valid_action_rate"] = mean(b_durations), ratio(valid, len(batch))
		}
		if b_values != nil {
			rec["charts/value_mean"] = mean(b_values)
		}
		recordExecCache(rec, ecfg.ExecCache, cache0)
		c.beh.record(rec, "behaviour/")
		r.recordOwn(rec, groups, c.dropped)
		recordShares(rec, batch, trajAdv != nil)
		recordSamples(rec, batch, flatten(c.dropped))
		if err := r.endUpdate(ctx, rec, l, curve); err != nil {
			return err
		}
		r.refreshOwn(r.state.Update)
		bar.Add(1, updateSummary(rec))
	}
	bar.Done()
	fmt.Fprintf(log, "train ppo: done, checkpoint %s\n", r.s.st.URI(cfg.Out))
	return r.s.saveMerged(r.pol, r.policy, cfg.SaveMerged, cfg.Out)
}

// collected is one update's rollout in live environments, credited: the
// groups to train (at most the groups wanted), what they are credited
// with (horizon: each kept first action's G_0; episode-wise: every step's
// G_t), credit all's per-step advantages, the groups dropped (no signal,
// or surplus beyond the groups wanted), what dynamic sampling drew and
// cost, and the policy's behaviour over every episode played.
type collected struct {
	groups           []*group
	returns, trajAdv []float64
	dropped          []*group
	surplus          int     // dropped groups that had a signal: drawn beyond the batch
	drawn, rounds    int     // states drawn (groups played) and rounds of episodes
	genS, extraS     float64 // generation seconds; the rollout's wall seconds in proportion to the draws beyond the groups wanted
	beh              behaviour
}

// collect plays nGroups groups of episodes and credits them; with the
// group baseline, groups whose credit is flat carry no signal and are
// dropped, and new states are drawn until nGroups groups with a signal
// are collected (DAPO's dynamic sampling) or oversample x nGroups states
// have been drawn. Each round draws the shortfall divided by the share of
// groups with a signal it expects (the first round: keep, the share in
// recent updates, 0 when unknown; later rounds: the share so far; at
// least a quarter), so that few rounds fill a batch, and groups beyond
// nGroups are dropped as surplus. Episode-wise PPO drops no group and
// plays one round. play plays n groups (ppoRun.episodes).
func collect(cfg PPOConfig, nGroups int, keep float64, play func(n int) ([]*group, []float64, float64, error)) (collected, error) {
	horizon := cfg.Mode == ModeStep
	limit := nGroups
	if horizon && cfg.Advantage == AdvantageGroup {
		limit = cfg.Oversample * nGroups
	}
	var c collected
	t0 := time.Now()
	for len(c.groups) < nGroups && c.drawn < limit {
		n := nGroups - len(c.groups)
		if c.rounds > 0 {
			keep = float64(len(c.groups)) / float64(c.drawn)
		}
		if keep > 0 && limit > nGroups {
			n = min(int(math.Ceil(float64(n)/max(keep, 0.25))), limit-c.drawn)
		}
		groups, returns, genS, err := play(n)
		if err != nil {
			return c, err
		}
		c.drawn, c.genS = c.drawn+n, c.genS+genS
		c.beh.add(groups)
		if !horizon {
			c.groups, c.returns, c.rounds = groups, returns, 1
			break
		}
		c.credit(groups, returns, cfg)
		c.rounds++
	}
	c.trim(nGroups)
	// What the draws beyond the groups wanted cost: the rollout's wall time
	// in their proportion.
	c.extraS = time.Since(t0).Seconds() * float64(max(c.drawn-nGroups, 0)) / float64(max(c.drawn, 1))
	return c, nil
}

// credit keeps a round's groups with a signal and what they are credited
// with (firstActions, or trajectoryCredit with credit all), and sets the
// others apart as dropped.
func (c *collected) credit(groups []*group, returns []float64, cfg PPOConfig) {
	if cfg.Credit == CreditAll {
		kept, adv, credit, dropped := trajectoryCredit(groups, returns, cfg.GroupStd)
		c.groups, c.trajAdv, c.returns, c.dropped = append(c.groups, kept...), append(c.trajAdv, adv...), append(c.returns, credit...), append(c.dropped, dropped...)
		return
	}
	kept, rets, dropped := firstActions(groups, returns, cfg.Advantage == AdvantageGroup)
	c.groups, c.returns, c.dropped = append(c.groups, kept...), append(c.returns, rets...), append(c.dropped, dropped...)
}

// trim keeps the first n groups (and their credit) and drops the rest as
// surplus.
func (c *collected) trim(n int) {
	if len(c.groups) <= n {
		return
	}
	samples, episodes := 0, 0
	for _, g := range c.groups[:n] {
		samples += len(g.Samples)
		for _, s := range g.Samples {
			if s.Step == 0 {
				episodes++
			}
		}
	}
	c.surplus = len(c.groups) - n
	c.dropped = append(c.dropped, c.groups[n:]...)
	c.groups, c.returns = c.groups[:n], c.returns[:episodes]
	if c.trajAdv != nil {
		c.trajAdv = c.trajAdv[:samples]
	}
}

// episodeGroupAdvantages is A_t = G_t - the mean G_t of the group's other
// episodes that reached step t (0 when none did), in flatten(groups)
// order; a group's samples are its episodes' steps, episode after
// episode (sample.Step and sample.Episode say which).
func episodeGroupAdvantages(groups []*group, returns []float64) []float64 {
	adv := make([]float64, 0, len(returns))
	i := 0
	for _, g := range groups {
		type key struct{ ep, t int }
		at := map[key]float64{}
		for j, s := range g.Samples {
			at[key{s.Episode, s.Step}] = returns[i+j]
		}
		for j, s := range g.Samples {
			sum, n := 0.0, 0
			for k, v := range at {
				if k.t == s.Step && k.ep != s.Episode {
					sum, n = sum+v, n+1
				}
			}
			a := 0.0
			if n > 0 {
				a = returns[i+j] - sum/float64(n)
			}
			adv = append(adv, a)
		}
		i += len(g.Samples)
	}
	return adv
}

// firstActions keeps, for horizon > 1, each group's first actions with
// their returns G_0 as what they are credited with; with the group
// baseline (dropFlat) it drops the groups of fewer than two or whose G_0
// are all equal, and returns them (their first actions) apart, so that
// the update records what it did not train on.
func firstActions(groups []*group, returns []float64, dropFlat bool) (kept []*group, rets []float64, dropped []*group) {
	i := 0
	for _, g := range groups {
		var first []*sample
		for _, s := range g.Samples {
			if s.Step == 0 {
				s.Ret, s.HasRet = returns[i], true
				first = append(first, s)
			}
			i++
		}
		g.Samples = first
		if len(first) == 0 || dropFlat && (len(first) < 2 || flatRewards(first)) {
			dropped = append(dropped, g)
			continue
		}
		kept = append(kept, g)
		for _, s := range first {
			rets = append(rets, s.Ret)
		}
	}
	return kept, rets, dropped
}

// recordShares adds the batch's outcome and action shares to an update's
// record. With credit all (later) they stay those of the first actions,
// as with credit first, and the later steps' go under "later/".
func recordShares(rec map[string]any, batch []*sample, later bool) {
	shared := batch
	if later {
		var first, rest []*sample
		for _, s := range batch {
			if s.Step == 0 {
				first = append(first, s)
			} else {
				rest = append(rest, s)
			}
		}
		shared = first
		for k, v := range outcomeShares(rest) {
			rec["later/"+k] = v
		}
		rec["charts/later_samples"] = len(rest)
	}
	for k, v := range outcomeShares(shared) {
		rec[k] = v
	}
}

// trajectoryCredit is credit all (multi-turn GRPO over n-step
// continuations): every action of an episode is trained with the
// episode's leave-one-out advantage A_0 = G_0 - the mean G_0 of its
// group's other episodes (divided by the group's G_0 standard deviation
// with byStd), so that the continuation's own actions learn too: an edit
// the next action leaves unrun costs both. Groups of fewer than two
// episodes, or whose G_0 are all equal, are dropped. It returns the kept
// groups (all their steps, in episode order), the advantages in
// flatten(kept) order, the kept episodes' G_0 (what the update credited,
// one per episode) and the dropped groups (all their steps).
func trajectoryCredit(groups []*group, returns []float64, byStd bool) (kept []*group, adv, credit []float64, dropped []*group) {
	i := 0
	for _, g := range groups {
		var first []*sample
		for _, s := range g.Samples {
			s.Ret, s.HasRet = returns[i], true
			i++
			if s.Step == 0 {
				first = append(first, s)
			}
		}
		if len(first) < 2 || flatRewards(first) {
			dropped = append(dropped, g)
			continue
		}
		a0 := map[int]float64{}
		for j, a := range groupAdvantages([]*group{{Samples: first}}, byStd) {
			a0[first[j].Episode] = a
			credit = append(credit, first[j].Ret)
		}
		for _, s := range g.Samples {
			adv = append(adv, a0[s.Episode])
		}
		kept = append(kept, g)
	}
	return kept, adv, credit, dropped
}

// episodes plays group_size episodes of steps actions from each of
// nGroups sampled start states, and returns them as groups (a group: the
// steps of one state's episodes), their returns G_t in flatten order, and
// the generation time.
func (r *ppoRun) episodes(ctx context.Context, starts []schemas.RLState, ecfg env.Config, opts agents.Options, nGroups, steps int) ([]*group, []float64, float64, error) {
	cfg := r.cfg
	k := cfg.GroupSize
	n := nGroups * k
	envs := make([]*env.Env, n)
	plans := make([][]string, n)
	groups := make([]*group, nGroups)
	defer func() {
		for _, e := range envs {
			if e != nil {
				e.Close()
			}
		}
	}()
	for gi := range groups {
		s, own := r.drawStart(starts)
		groups[gi] = &group{State: s, Version: r.state.Update, Own: own}
		for j := range k {
			e, err := env.Restore(ctx, ecfg, r.s.st, s.SnapshotRef)
			if err != nil {
				return nil, nil, 0, fmt.Errorf("state %s: %w", s.StateID, err)
			}
			envs[gi*k+j], plans[gi*k+j] = e, agents.PlanFromCompact(s.Prompt)
		}
		r.state.Drawn++
	}
	first := (r.state.Drawn - int64(nGroups)) * int64(k) // episode 0's number among all episodes drawn (its row seeds)
	played := make([][]*sample, n)
	gen := policy.Generator{Engine: r.policy, Policy: r.pol}
	// act generates the next action of each episode in rows (one call:
	// the rows' prompts prefilled together), each drawn from its own
	// random stream (the episode's number and step), so that the actions
	// do not depend on which episodes share a call.
	act := func(rows []int) error {
		var prompts [][]int32
		var contexts []policy.GrammarContext
		seeds := make([]uint64, len(rows))
		for j, i := range rows {
			st := agents.StateOf(envs[i], plans[i], opts.MaxSteps)
			p, err := r.pol.EncodePrompt(opts.Compact(st))
			if err != nil {
				return err
			}
			gc := policy.NewGrammarContext(st, plans[i], r.oneLine)
			gc.DashThoughts = cfg.FreeText == FreeTextForce
			prompts, contexts = append(prompts, p), append(contexts, gc)
			seeds[j] = rowSeed(cfg.Seed, first+int64(i), len(played[i]))
		}
		gopts := policy.GenerateOptions{Temperature: cfg.Temperature, TopP: cfg.TopP, MaxNewTokens: cfg.MaxNewTokens, RowSeeds: seeds}
		r.state.GenCalls++
		if cfg.Decode == policy.DecodeConstrained {
			gopts.Constrain = func(i int) policy.Constraint { return gen.ActionGrammar(contexts[i]) }
		}
		out, err := gen.Generate(prompts, gopts)
		if err != nil {
			return err
		}
		for j, i := range rows {
			played[i] = append(played[i], &sample{State: groups[i/k].State, Prompt: out[j].Prompt, Action: out[j].Tokens, LogP: out[j].LogProbs, Masks: out[j].Masks,
				Free: out[j].Free, Version: r.state.Update, Text: strings.TrimSpace(r.pol.Decode(out[j].Tokens)), Episode: i, Step: len(played[i]),
				LastStep: contexts[j].NoEdit || contexts[j].NoUndo})
		}
		return nil
	}
	var busy sync.Mutex
	step := func(ctx context.Context, i int) error {
		smp := played[i][len(played[i])-1]
		t0 := time.Now()
		res, err := envs[i].Step(ctx, smp.Text)
		if err != nil {
			return err
		}
		smp.Out = stepOutcome(res)
		busy.Lock()
		r.busyS += time.Since(t0).Seconds()
		if !res.ExecCached {
			r.scriptS += res.ExecDuration.Seconds()
		}
		busy.Unlock()
		return nil
	}
	more := func(i int) bool {
		done, _ := envs[i].Done()
		return !done && len(played[i]) < steps
	}
	t0 := time.Now()
	genS, err := playSteps(ctx, n, k, cfg.Workers, cfg.Lockstep, more, act, step)
	if err != nil {
		return nil, nil, 0, err
	}
	r.execS += time.Since(t0).Seconds() - genS
	if err := r.collectOwn(ctx, envs, plans, groups, opts, steps); err != nil {
		return nil, nil, 0, err
	}
	var returns []float64
	for gi, grp := range groups {
		for i := gi * k; i < (gi+1)*k; i++ {
			ep := played[i]
			ret := 0.0
			rets := make([]float64, len(ep))
			for t := len(ep) - 1; t >= 0; t-- {
				ret += ep[t].Out.Reward
				rets[t] = ret
			}
			for t, s := range ep {
				s.G = grp
				grp.Samples = append(grp.Samples, s)
				returns = append(returns, rets[t])
			}
		}
	}
	return groups, returns, genS, nil
}

// stragglerGrace is how long the steps still running must have run, with
// a worker idle and no step waiting for one, before the episodes whose
// step is back act without them (playSteps): long enough that the usual
// spread of a batch's scripts (a fraction of a second to a second or two)
// ends in one generation call, short against the slow scripts that held
// whole updates (tens of seconds).
var stragglerGrace = 2 * time.Second

// playSteps plays the steps of n episodes (indices gi*k + j, k per group)
// on workers goroutines. act generates the next action of each episode in
// rows (one generation call), step runs an episode's latest action in its
// environment, and more says whether an episode acts (again). The
// episodes that act at all act first together, their actions run in
// acrossGroups order; then the episodes whose step is back act again
// together, once no action waits for a worker and either none is running
// or, unless lockstep, a worker is idle and the steps still running have
// run stragglerGrace: an episode does not wait for another's slow script
// to start its next action. With lockstep every episode's step t is back
// before any acts again (the earlier schedule; the actions are the same
// when act draws each episode's from its own random stream). It returns
// the seconds spent in act.
func playSteps(ctx context.Context, n, k, workers int, lockstep bool, more func(i int) bool, act func(rows []int) error, step func(ctx context.Context, i int) error) (float64, error) {
	ctx, cancel := context.WithCancel(ctx)
	type result struct {
		i   int
		err error
	}
	var (
		mu      sync.Mutex
		cond    = sync.NewCond(&mu)
		queue   []int                 // episodes whose action waits for a worker
		started = map[int]time.Time{} // episodes whose step is running, since when
		closed  bool
		results = make(chan result, n) // at most one step per episode in flight
		wg      sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				for len(queue) == 0 && !closed {
					cond.Wait()
				}
				if closed {
					mu.Unlock()
					return
				}
				i := queue[0]
				queue = queue[1:]
				started[i] = time.Now()
				mu.Unlock()
				err := step(ctx, i)
				mu.Lock()
				delete(started, i)
				mu.Unlock()
				results <- result{i, err}
			}
		})
	}
	defer func() { // steps still running are cancelled: an error ended the play
		cancel()
		mu.Lock()
		closed, queue = true, nil
		mu.Unlock()
		cond.Broadcast()
		wg.Wait()
	}()
	var ready []int // episodes to act next
	for i := range n {
		if more(i) {
			ready = append(ready, i)
		}
	}
	inflight, genS := 0, 0.0 // steps queued or running or not yet received
	for len(ready) > 0 || inflight > 0 {
		var wake <-chan time.Time
		if len(ready) > 0 {
			mu.Lock()
			waiting, running := len(queue), len(started)
			var oldest time.Time
			for _, t := range started {
				if oldest.IsZero() || t.Before(oldest) {
					oldest = t
				}
			}
			mu.Unlock()
			straggling := !lockstep && waiting == 0 && running > 0 && running < workers
			if waiting == 0 && (inflight == 0 || straggling && time.Since(oldest) >= stragglerGrace) {
				slices.Sort(ready)
				t0 := time.Now()
				if err := act(ready); err != nil {
					return genS, err
				}
				genS += time.Since(t0).Seconds()
				mu.Lock()
				queue = append(queue, acrossGroups(ready, k)...)
				mu.Unlock()
				cond.Broadcast()
				inflight += len(ready)
				ready = ready[:0]
				continue
			}
			if straggling {
				wake = time.After(stragglerGrace - time.Since(oldest))
			}
		}
		select {
		case res := <-results:
			inflight--
			if res.err != nil {
				return genS, res.err
			}
			if more(res.i) {
				ready = append(ready, res.i)
			}
		case <-wake:
		case <-ctx.Done():
			return genS, ctx.Err()
		}
	}
	return genS, nil
}

// rowSeed is the seed of the random stream an episode's action at step t
// is drawn from: the run's seed, the episode's number among all episodes
// drawn (resumes continue the count) and the step (below 65,536), mixed.
func rowSeed(seed, episode int64, t int) uint64 {
	return splitmix(splitmix(uint64(seed)) ^ uint64(episode)<<16 ^ uint64(t)&0xffff)
}

// splitmix is SplitMix64's finalizer: a bijection of 64-bit words that
// spreads every input bit over the output.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// acrossGroups orders the live episodes (indices gi*k+j) for the workers
// group by group within each sample index: the first episode of every
// group, then the second of every group, and so on. A group's episodes
// start in the same state and often run the same script on the same
// files; side by side, two workers would start that run together and one
// would wait for the other's (the execution cache's one flight per key)
// instead of running another group's step. Across groups the copies come
// later and replay the first's run from the cache.
func acrossGroups(live []int, k int) []int {
	out := slices.Clone(live)
	slices.SortStableFunc(out, func(a, b int) int {
		return cmp.Or(cmp.Compare(a%k, b%k), cmp.Compare(a/k, b/k))
	})
	return out
}

// promptOptions renders episodes' prompts as the rollout behind the state
// pool rendered them (budgets and token counter from the steps manifest
// the pool was made from; episode.PromptsOf), the defaults when the pool
// names no steps version that records them.
//
// With asRollout the prompts also say "Step k of N" with the rollout's
// N (its env.max_steps, when the steps manifest records it), as the
// expert states' prompts do, whatever the environment's own step limit:
// episodes that continue from, or start at, expert states then show the
// policy the prompts it was trained on.
func promptOptions(ctx context.Context, s *stage, maxSteps int, asRollout bool) (agents.Options, error) {
	p := agents.DefaultPrompts()
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
		var c struct {
			Env struct {
				MaxSteps int `json:"max_steps"`
			} `json:"env"`
		}
		if b, err := json.Marshal(m.Producer.Config); asRollout && err == nil && json.Unmarshal(b, &c) == nil && c.Env.MaxSteps > 0 {
			maxSteps = c.Env.MaxSteps
		}
	}
	opts, err := agents.NewOptionsFor(p, maxSteps)
	if err != nil {
		return agents.Options{}, fmt.Errorf("train ppo: %w", err)
	}
	fmt.Fprintf(s.log, "train ppo: prompts rendered with budgets %d/%d tokens, compact format %d (%s)\n", p.FullBudget, p.CompactBudget, opts.Format, from)
	return opts, nil
}

// recordExecCache adds what the execution cache did since before to an
// update's metrics (nothing without a cache).
func recordExecCache(rec map[string]any, c *env.ExecCache, before env.ExecCacheStats) {
	if c == nil {
		return
	}
	d := c.Stats().Sub(before)
	rec["env/exec_cache_hits"], rec["env/exec_cache_runs"], rec["time/exec_cache_saved_s"] = d.Hits, d.Misses+d.Bypassed, d.Saved.Seconds()
}
