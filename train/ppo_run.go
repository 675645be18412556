package train

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/schemas"
)

// The parts of a step-wise PPO run, in the order RunPPOWith uses them.

// ppoRun is a PPO run's state: its config, expert states, the policy
// (what it is: pol; the engine being trained: policy) and the frozen
// reference (the policy PPO starts from), the resumable position and the
// sampler.
type ppoRun struct {
	cfg        PPOConfig
	s          *stage
	states     []schemas.RLState
	pol        *policy.Policy
	policy     policy.Engine
	ref        policy.Engine
	oneLine    bool // the SFT policy writes terse responses
	state      ppoState
	pcg        *rand.PCG
	rng        *rand.Rand
	facts      *stateFacts
	carry      []*group // groups collected beyond the last batch
	consecErrs int
	execS      float64 // live environments: wall seconds of the update's steps (executing actions)
	busyS      float64 // live environments: the steps' own wall seconds summed over the workers running them
	scriptS    float64 // live environments: the scripts' (and editor's) run time in the steps not replayed from the cache
}

// newPPORun reads the held-in expert states, the policy PPO starts from
// (the SFT checkpoint's, or a Hugging Face folder with policy hf:DIR):
// the reference and, unless resuming, the start; and the PPO checkpoint
// to resume from.
func newPPORun(ctx context.Context, cfg PPOConfig, log io.Writer) (*ppoRun, error) {
	s, states, _, err := openStage(ctx, "train ppo", cfg.Data, cfg.States, schemas.RLStates,
		func(r schemas.RLState) string { return r.Split }, log)
	if err != nil {
		return nil, err
	}
	if states, err = restrictTasks(states, cfg.StateTasks, log); err != nil {
		return nil, fmt.Errorf("train ppo: %w", err)
	}
	if err := s.mergedTargetFree(cfg.SaveMerged, cfg.Out); err != nil {
		return nil, fmt.Errorf("train ppo: %w", err)
	}
	if err := cfg.resolvePrecision(); err != nil {
		return nil, fmt.Errorf("train ppo: %w", err)
	}
	r := &ppoRun{cfg: cfg, s: s, states: states}
	start, err := r.startPolicy(ctx)
	if err != nil {
		return nil, err
	}
	if cfg.SaveMerged != "" && r.pol.Kind() != policy.KindHF {
		return nil, fmt.Errorf("train ppo: save_merged %s: writes a Hugging Face folder, and the SFT policy in %s is mlerl's own model: drop the key", cfg.SaveMerged, s.st.URI(cfg.SFT))
	}
	if cfg.MaxNewTokens > r.pol.Model.ResponseTokens {
		return nil, fmt.Errorf("train ppo: max_new_tokens %d exceeds the policy's model.response_tokens %d (its context holds prompt_tokens %d + response_tokens)", cfg.MaxNewTokens, r.pol.Model.ResponseTokens, r.pol.Model.PromptTokens)
	}
	if cfg.Collector == CollectorAsync && r.pol.Kind() == policy.KindHF {
		return nil, fmt.Errorf("train ppo: collector %s copies the policy for its actors, which mlerl does for its own model only: use collector %s with a Hugging Face policy", CollectorAsync, CollectorSync)
	}
	// The reference is the policy PPO starts from, frozen: the SFT policy,
	// or the Hugging Face base (with the adapter it starts from).
	if r.ref, err = r.s.engine(start, r.pol, cfg.Engine, cfg.Optim, uint64(cfg.Seed)); err != nil {
		return nil, fmt.Errorf("train ppo: %w", err)
	}
	r.pcg = rand.NewPCG(uint64(cfg.Seed), 0x70706f)
	r.state.KLCoef = cfg.KLCoef
	ck, err := s.latest(ctx, cfg.Out, cfg.Resume, nil, &r.state)
	if err != nil {
		return nil, fmt.Errorf("train ppo: %w", err)
	}
	if ck != nil {
		if err := samePolicy(ck, start); err != nil {
			return nil, fmt.Errorf("train ppo: %s: %w", s.st.URI(ck.Dir), err)
		}
		if err := r.pcg.UnmarshalBinary(r.state.RNG); err != nil {
			return nil, fmt.Errorf("train ppo: resuming %s: RNG state: %w", s.st.URI(ck.Dir), err)
		}
		fmt.Fprintf(log, "train ppo: resuming from %s at update %d\n", s.st.URI(ck.Dir), r.state.Update)
	} else {
		ck = start
	}
	optim := cfg.Optim
	optim.DetachValue = true // the critic, when there is one, is a head of its own
	if r.policy, err = s.engine(ck, r.pol, cfg.Engine, optim, uint64(cfg.Seed)); err != nil {
		return nil, fmt.Errorf("train ppo: %w", err)
	}
	// The learner's products in matmul, and the reference's alike (its
	// KL then reads exactly 0 before the first update). The sampler
	// decodes in float32 whatever they are: with bf16 products the
	// learner's log-probabilities differ from the sampler's by bf16's
	// rounding, so old_logp recompute (auto's choice there) takes the
	// ratio's behaviour log-probabilities from the learner's own forward.
	for _, e := range []policy.Engine{r.policy, r.ref} {
		if _, err := policy.SetMatmul(e, cfg.Matmul); err != nil {
			return nil, fmt.Errorf("train ppo: %w", err)
		}
	}
	// The config printed at start resolved base_storage auto without the
	// base (an SFT checkpoint names it): this line says what runs.
	storage := ""
	if r.pol.Kind() == policy.KindHF {
		storage = fmt.Sprintf("base stored %s; ", r.pol.Model.BaseStorage)
	}
	fmt.Fprintf(log, "train ppo: %slearner and reference products %s (the sampler decodes in float32); behaviour log-probabilities: %s\n", storage, cfg.Matmul, cfg.OldLogP)
	r.rng = rand.New(r.pcg)
	if cfg.Decode == policy.DecodeConstrained {
		if r.facts, err = newStateFacts(s.st, cfg.Env); err != nil {
			return nil, fmt.Errorf("train ppo: %w", err)
		}
	}
	return r, nil
}

// startPolicy opens the policy PPO starts from and returns the checkpoint
// its weights come from: the SFT checkpoint's latest step (whatever
// policy it trained: its policy.json says), or with policy hf:DIR the
// folder itself (and the adapter), fresh adapters on it. A Hugging Face
// policy's LoRA trains without dropout here, as TRL's PPO does, so that
// the ratio starts at exactly 1.
func (r *ppoRun) startPolicy(ctx context.Context) (*policy.Checkpoint, error) {
	cfg, s := r.cfg, r.s
	kind, _, _ := policy.ParseSpec(cfg.Policy)
	var start *policy.Checkpoint
	if kind != policy.KindMLERL {
		pol, err := policy.OpenSpec(cfg.Policy, cfg.Budgets.Config(), cfg.Tuning, cfg.Adapter)
		if err != nil {
			return nil, fmt.Errorf("train ppo: %w", err)
		}
		r.pol, start = pol, &policy.Checkpoint{Model: pol.Model}
	} else {
		sftDir, err := policy.LatestCheckpoint(ctx, s.st, cfg.SFT)
		if err != nil {
			return nil, fmt.Errorf("train ppo: %w", err)
		}
		if sftDir == "" {
			return nil, fmt.Errorf("train ppo: no SFT checkpoint in %s; run `mlerl train sft` first (or start from a Hugging Face folder or GGUF file with --policy hf:DIR or gguf:FILE)", s.st.URI(cfg.SFT))
		}
		var sftCfg SFTConfig
		if start, err = policy.LoadCheckpoint(ctx, s.st, sftDir, &sftCfg, nil); err != nil {
			return nil, fmt.Errorf("train ppo: reference policy: %w", err)
		}
		if r.pol, err = start.OpenPolicy(sftCfg.Tokenizer); err != nil {
			return nil, fmt.Errorf("train ppo: %w", err)
		}
		r.oneLine = sftCfg.Response == policy.ResponseTerse
		if cfg.FreeText == FreeTextForce && !r.oneLine {
			return nil, fmt.Errorf("train ppo: free_text %s fixes Reflection and Thought to \"-\", what terse SFT responses hold; the SFT policy in %s was trained on %s responses: use free_text %s", FreeTextForce, s.st.URI(sftDir), sftCfg.Response, FreeTextMask)
		}
		start = &policy.Checkpoint{Model: start.Model, Vocab: start.Vocab, Source: start.Source, Weights: start.Weights, Dir: start.Dir}
	}
	if cfg.FreeText == FreeTextForce && !r.oneLine {
		return nil, fmt.Errorf("train ppo: free_text %s fixes Reflection and Thought to \"-\", what terse SFT responses hold; a Hugging Face policy started from its folder writes full responses: use free_text %s", FreeTextForce, FreeTextMask)
	}
	if r.pol.Kind() == policy.KindHF {
		m := &r.pol.Model
		// Resolved (newPPORun); auto keeps an SFT checkpoint's quantized base.
		r.cfg.Tuning.BaseStorage = cfg.Tuning.ResolveAutoFor(m.BaseStorage, cfg.Engine)
		m.BaseStorage, m.Recompute = r.cfg.Tuning.BaseStorage, cfg.Tuning.Recompute
		if m.LoRA != nil {
			lo := *m.LoRA
			lo.Dropout = 0
			m.LoRA = &lo
		} else {
			m.BaseStorage = policy.MatmulFP32 // every weight trains
		}
		start.Model = *m
	}
	return start, nil
}

// samePolicy refuses to resume a PPO checkpoint of another policy than
// the one the run starts from.
func samePolicy(ck, start *policy.Checkpoint) error {
	base := func(c *policy.Checkpoint) string {
		if c.Source == nil {
			return policy.KindMLERL
		}
		return c.Source.Spec()
	}
	if base(ck) != base(start) {
		return fmt.Errorf("holds a PPO run of policy %s but this run starts from %s: use another out folder or resume=false", base(ck), base(start))
	}
	return nil
}

// taskOrderSeed fixes the order in which state_tasks takes tasks: the
// same for every run seed, so that the pools of 3, 6 and 10 tasks nest.
const taskOrderSeed = 0x7461736b

// TaskOrder is the fixed order of task ids that state_tasks takes from:
// sorted, then shuffled with a fixed seed.
func TaskOrder(ids []string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	out = slices.Compact(out)
	rand.New(rand.NewPCG(taskOrderSeed, 1)).Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// restrictTasks keeps the states of the first n tasks of TaskOrder (all
// of them when n is 0).
func restrictTasks(states []schemas.RLState, n int, log io.Writer) ([]schemas.RLState, error) {
	if n == 0 {
		return states, nil
	}
	var ids []string
	for _, s := range states {
		ids = append(ids, s.TaskID)
	}
	order := TaskOrder(ids)
	if n > len(order) {
		return nil, fmt.Errorf("state_tasks %d: the state pool has %d held-in tasks", n, len(order))
	}
	keep := map[string]bool{}
	for _, id := range order[:n] {
		keep[id] = true
	}
	var out []schemas.RLState
	for _, s := range states {
		if keep[s.TaskID] {
			out = append(out, s)
		}
	}
	fmt.Fprintf(log, "train ppo: state pool restricted to %d of %d tasks (state_tasks): %s\n", n, len(order), strings.Join(order[:n], ", "))
	return out, nil
}

func (r *ppoRun) close() {
	r.policy.Close()
	r.ref.Close()
	r.pol.Close()
}

// save writes a checkpoint at the current update.
func (r *ppoRun) save(ctx context.Context) error {
	rb, err := r.pcg.MarshalBinary()
	if err != nil {
		return err
	}
	r.state.RNG = rb
	return r.s.save(ctx, r.cfg.Out, r.state.Update, r.policy, r.cfg, r.pol, r.state)
}

// rolloutStats count what one rollout saw.
type rolloutStats struct {
	stale, formatErrors, valid, cached, rewardErrors int
	flat, small                                      int       // groups dropped: equal rewards; fewer than 2 samples left
	seen, distinct                                   int       // groups completed, and their distinct actions in all
	dropped                                          []*sample // the samples of the groups dropped
	forced, free, tokens                             int
	genS, waitS, execS                               float64
}

// groupStd is the mean over groups of the within-group reward standard
// deviation.
func (ro rolloutStats) groupStd(groups []*group) float64 {
	s := 0.0
	for _, g := range groups {
		_, std := groupStats(g.Samples)
		s += std
	}
	return s / float64(max(len(groups), 1))
}

// rollout collects one batch of whole groups: it samples states and
// generates group_size actions for each whenever fewer than batch_size +
// workers samples are in flight (slow actions overlap with generation),
// takes results as they arrive, and takes a group once all its samples
// are back: groups older than max_staleness versions are dropped, and so,
// with the group baseline, are groups whose rewards are all equal (no
// signal: counted as flat). Over-collected groups wait for the next
// batch. Dropped groups are replaced by new draws (dynamic sampling), and
// so that a policy that always does the same never loops forever, the
// rollout stops once it has taken oversample x the groups it wants (the
// batch is then smaller, possibly empty: a skipped update).
func (r *ppoRun) rollout(ctx context.Context, col *collector) ([]*group, rolloutStats, error) {
	cfg, version := r.cfg, r.state.Update
	want := cfg.BatchSize / cfg.GroupSize
	var batch []*group
	var st rolloutStats
	dropped := func() int { return st.flat + st.small + st.stale/cfg.GroupSize }
	take := func(g *group) error {
		kept := g.Samples[:0]
		for _, s := range g.Samples {
			if s.Err == nil {
				kept = append(kept, s)
				continue
			}
			st.rewardErrors++
			r.consecErrs++
			fmt.Fprintf(r.s.log, "train ppo: reward for state %s failed: %v\n", s.State.StateID, s.Err)
			if r.consecErrs > 2*cfg.BatchSize {
				return fmt.Errorf("train ppo: %d reward errors in a row, the last: %w", r.consecErrs, s.Err)
			}
		}
		g.Samples = kept
		if len(kept) > 0 {
			r.consecErrs = 0
			st.seen++
			st.distinct += distinctActions(kept)
		}
		switch {
		case version-g.Version > cfg.MaxStaleness:
			st.stale += len(kept)
			st.dropped = append(st.dropped, kept...)
		case cfg.Advantage == AdvantageGroup && len(kept) < 2:
			st.small++
			st.dropped = append(st.dropped, kept...)
		case cfg.Advantage == AdvantageGroup && flatRewards(kept):
			st.flat++
			st.dropped = append(st.dropped, kept...)
		case len(batch) < want:
			batch = append(batch, g)
			for _, s := range kept {
				if s.Out.FormatError {
					st.formatErrors++
				}
				if s.Out.Valid {
					st.valid++
				}
				if s.Cached {
					st.cached++
				} else {
					st.execS += s.Out.DurationS
				}
				for t, m := range s.Masks {
					switch {
					case m != nil && m.Count() == 1:
						st.forced++
					case t < len(s.Free) && s.Free[t]:
						st.free++
					}
				}
				st.tokens += len(s.Action)
			}
		default:
			r.carry = append(r.carry, g) // over-collected: the next update's
		}
		return nil
	}
	prev := r.carry
	r.carry = nil
	for _, g := range prev {
		if err := take(g); err != nil {
			return nil, st, err
		}
	}
	for len(batch) < want && len(batch)+dropped() < cfg.Oversample*want {
		if err := ctx.Err(); err != nil {
			return nil, st, err
		}
		if col.outstanding < cfg.BatchSize+cfg.Workers {
			t0 := time.Now()
			groups, err := r.generate(ctx, version)
			if err != nil {
				return nil, st, err
			}
			for _, g := range groups {
				for _, s := range g.Samples {
					col.submit(s)
				}
			}
			st.genS += time.Since(t0).Seconds()
		}
		// Take what has arrived; wait only when no more may be started.
		t0 := time.Now()
		arrived := false
		arrive := func(s *sample) error {
			arrived = true
			s.G.left--
			if s.G.left == 0 {
				return take(s.G)
			}
			return nil
		}
		for len(batch) < want {
			s, ok := col.poll()
			if !ok {
				break
			}
			if err := arrive(s); err != nil {
				return nil, st, err
			}
		}
		if !arrived && len(batch) < want && col.outstanding >= cfg.BatchSize+cfg.Workers {
			s, err := col.wait(ctx)
			if err != nil {
				return nil, st, err
			}
			if err := arrive(s); err != nil {
				return nil, st, err
			}
		}
		st.waitS += time.Since(t0).Seconds()
	}
	return batch, st, nil
}

// flatRewards reports whether every sample earned the same reward.
func flatRewards(ss []*sample) bool {
	for _, s := range ss[1:] {
		if s.ret() != ss[0].ret() {
			return false
		}
	}
	return true
}

// generate samples gen_batch / group_size states and group_size actions
// for each, in one generation call: the group's rows share one prompt,
// which the engine prefills once.
func (r *ppoRun) generate(ctx context.Context, version int) ([]*group, error) {
	cfg := r.cfg
	k := cfg.GroupSize
	n := cfg.GenBatch / k
	groups := make([]*group, n)
	prompts := make([][]int32, 0, cfg.GenBatch)
	contexts := make([]policy.GrammarContext, 0, cfg.GenBatch)
	for i := range groups {
		s := r.states[r.rng.IntN(len(r.states))]
		p, err := r.pol.EncodePrompt(s.Prompt)
		if err != nil {
			return nil, fmt.Errorf("state %s: %w", s.StateID, err)
		}
		var gc policy.GrammarContext
		if r.facts != nil {
			if gc, err = r.facts.grammar(ctx, s, r.oneLine, cfg.FreeText == FreeTextForce); err != nil {
				return nil, err
			}
		}
		groups[i] = &group{State: s, Version: version, left: k}
		for range k {
			prompts, contexts = append(prompts, p), append(contexts, gc)
		}
	}
	r.state.Drawn += int64(n)
	opts := policy.GenerateOptions{Temperature: cfg.Temperature, TopP: cfg.TopP, MaxNewTokens: cfg.MaxNewTokens, Seed: newSeed(cfg.Seed, r.state.GenCalls)}
	r.state.GenCalls++
	gen := policy.Generator{Engine: r.policy, Policy: r.pol}
	if r.facts != nil {
		opts.Constrain = func(i int) policy.Constraint { return gen.ActionGrammar(contexts[i]) }
	}
	out, err := gen.Generate(prompts, opts)
	if err != nil {
		return nil, err
	}
	for i, s := range out {
		g := groups[i/k]
		g.Samples = append(g.Samples, &sample{State: g.State, G: g, Prompt: s.Prompt, Action: s.Tokens, LogP: s.LogProbs, Masks: s.Masks,
			Free: s.Free, Version: version, Text: strings.TrimSpace(r.pol.Decode(s.Tokens)), LastStep: contexts[i].NoEdit || contexts[i].NoUndo})
	}
	return groups, nil
}

// minibatch is some samples packed for the engine: the batch, the
// positions predicting each action token, and where each sample's tokens
// start among them (its first is predicted at the prompt's last token,
// where V(s) is read).
type minibatch struct {
	batch   policy.Batch
	idx     []int32 // action-token positions (the position predicting each action token)
	toks    []ppoToken
	valueAt []int // per sample, the index in idx of its first action token's position (its prompt's last token)
}

// pack packs samples into one minibatch with each distinct prompt once
// (policy.Batch.Prefix): a row per prompt, the prompt then each of its
// samples' actions as a continuation attending it, so that the K samples
// of a state cost one prompt in the learner as in generation. The first
// action token of every sample is predicted at the prompt's last token
// (one position serving all of them), token t at the continuation's
// token t-1; an action's last token is never an input. Tokens the grammar
// forced, and free text unless free_text is train, are marked Skip: they
// take no part in the policy-gradient and KL terms.
func (r *ppoRun) pack(samples []*sample) minibatch {
	type bucket struct {
		prompt  []int32
		members []int
	}
	var buckets []*bucket
	byPrompt := map[string]*bucket{}
	for i, s := range samples {
		key := promptKey(s.Prompt)
		b, ok := byPrompt[key]
		if !ok {
			b = &bucket{prompt: s.Prompt}
			byPrompt[key] = b
			buckets = append(buckets, b)
		}
		b.members = append(b.members, i)
	}
	width := 0
	for _, b := range buckets {
		n := len(b.prompt)
		for _, i := range b.members {
			n += max(len(samples[i].Action)-1, 0)
		}
		width = max(width, n)
	}
	width = (width + 31) / 32 * 32
	mb := minibatch{batch: policy.Batch{B: len(buckets), S: width}}
	size := len(buckets) * width
	mb.batch.Tokens, mb.batch.Positions, mb.batch.Segments, mb.batch.Prefix = make([]int32, size), make([]int32, size), make([]int32, size), make([]int32, size)
	mb.valueAt = make([]int, len(samples))
	type span struct{ last, cont int } // the prompt's last position, the continuation's first
	spans := make([]span, len(samples))
	for row, b := range buckets {
		at := row * width
		for t, tok := range b.prompt {
			mb.batch.Tokens[at+t], mb.batch.Positions[at+t], mb.batch.Segments[at+t] = tok, int32(t), 1
		}
		last := at + len(b.prompt) - 1
		at += len(b.prompt)
		for si, i := range b.members {
			a := samples[i].Action
			spans[i] = span{last: last, cont: at}
			for t := range max(len(a)-1, 0) {
				k := at + t
				mb.batch.Tokens[k], mb.batch.Positions[k] = a[t], int32(len(b.prompt)+t)
				mb.batch.Segments[k], mb.batch.Prefix[k] = int32(si+2), 1
			}
			at += max(len(a)-1, 0)
		}
	}
	for i, s := range samples {
		mb.valueAt[i] = len(mb.idx)
		for t, tok := range s.Action {
			pos := spans[i].last
			if t > 0 {
				pos = spans[i].cont + t - 1
			}
			mb.idx = append(mb.idx, int32(pos))
			tk := ppoToken{Target: tok, OldLogP: float64(s.LogP[t])}
			if s.Masks != nil {
				tk.Mask = s.Masks[t]
			}
			tk.Free = t < len(s.Free) && s.Free[t]
			tk.Skip = tk.Mask != nil && tk.Mask.Count() == 1 || tk.Free && r.cfg.FreeText != FreeTextTrain
			mb.toks = append(mb.toks, tk)
		}
	}
	return mb
}

// promptKey identifies a prompt's tokens.
func promptKey(p []int32) string {
	b := make([]byte, 4*len(p))
	for i, t := range p {
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(t), byte(t>>8), byte(t>>16), byte(t>>24)
	}
	return string(b)
}

// values returns V(s) of each sample of mb under the current policy.
func (r *ppoRun) values(mb minibatch) ([]float64, error) {
	idx := make([]int32, len(mb.valueAt))
	for i, at := range mb.valueAt {
		idx[i] = mb.idx[at]
	}
	_, vs, err := r.policy.Logits(mb.batch, idx)
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(vs))
	for i, v := range vs {
		out[i] = float64(v)
	}
	return out, nil
}

// update runs up to update_epochs passes of minibatches (whole groups
// each) of the clipped loss, stopping early once a minibatch's approx_kl
// exceeds target_kl, and returns the metrics averaged over the
// minibatches run and the number of epochs begun. The reference forward
// runs once per update, and not at all when the KL coefficient is 0
// (kl_ref then reads 0).
func (r *ppoRun) update(groups []*group, adv, returns, weights []float64, lr float64) (ppoStats, int, behaviourGap, error) {
	cfg := r.cfg
	coefs := ppoCoefs{ClipCoef: cfg.ClipCoef, ClipHigh: cfg.ClipCoefHigh, EntCoef: cfg.EntCoef, KLCoef: r.state.KLCoef}
	if returns != nil {
		coefs.VfCoef = cfg.VfCoef
	}
	// Each group's first sample's index in the flat batch.
	first := make([]int, len(groups))
	for i := 1; i < len(groups); i++ {
		first[i] = first[i-1] + len(groups[i-1].Samples)
	}
	g_inds := make([]int, len(groups))
	for i := range g_inds {
		g_inds[i] = i
	}
	var sums ppoStats
	numMB, epochs := 0, 0
	vocab := r.policy.Config().Vocab
	if len(groups) == 0 {
		return sums, 0, behaviourGap{}, nil
	}
	mbGroups := (len(groups) + cfg.Minibatches - 1) / cfg.Minibatches
	// The reference's log-probabilities do not change within an update:
	// one forward per minibatch of groups, before the epochs.
	var refLogp map[*sample][]float64
	if coefs.KLCoef > 0 {
		refLogp = map[*sample][]float64{}
		for start := 0; start < len(groups); start += mbGroups {
			var ss []*sample
			for _, g := range groups[start:min(start+mbGroups, len(groups))] {
				ss = append(ss, g.Samples...)
			}
			mb := r.pack(ss)
			refLogits, _, err := r.ref.Logits(mb.batch, mb.idx)
			if err != nil {
				return sums, 0, behaviourGap{}, err
			}
			lp := tokenLogProbs(refLogits, mb.toks, vocab)
			for j, s := range ss {
				refLogp[s] = lp[mb.valueAt[j] : mb.valueAt[j]+len(s.Action)]
			}
		}
	}
	shuffle := func() { r.rng.Shuffle(len(g_inds), func(i, j int) { g_inds[i], g_inds[j] = g_inds[j], g_inds[i] }) }
	// minibatch returns the samples of the minibatch of groups starting
	// at start in the current order, and each one's index in the flat
	// batch.
	minibatch := func(start int) (mbSamples []*sample, flat []int) {
		for _, gi := range g_inds[start:min(start+mbGroups, len(g_inds))] {
			for j, s := range groups[gi].Samples {
				mbSamples, flat = append(mbSamples, s), append(flat, first[gi]+j)
			}
		}
		return mbSamples, flat
	}
	shuffle() // the first epoch's order
	// old_logp recompute: the behaviour log-probabilities from the
	// learner's own forward, before any step, on exactly the first
	// epoch's minibatches (the same packing, so the same bits: its first
	// minibatch's ratios read exactly 1).
	var oldLogp map[*sample][]float64
	var gap behaviourGap
	if cfg.OldLogP == OldLogPRecompute {
		oldLogp = map[*sample][]float64{}
		for start := 0; start < len(g_inds); start += mbGroups {
			ss, _ := minibatch(start)
			mb := r.pack(ss)
			logits, _, err := r.policy.Logits(mb.batch, mb.idx)
			if err != nil {
				return sums, 0, gap, err
			}
			lp := tokenLogProbs(logits, mb.toks, vocab)
			for j, s := range ss {
				own := lp[mb.valueAt[j] : mb.valueAt[j]+len(s.Action)]
				oldLogp[s] = own
				for t, l := range own {
					if !mb.toks[mb.valueAt[j]+t].Skip {
						gap.add(math.Abs(l - float64(s.LogP[t])))
					}
				}
			}
		}
	}
	stop := false
	for epoch := range cfg.UpdateEpochs {
		if stop {
			break
		}
		epochs++
		if epoch > 0 {
			shuffle()
		}
		for start := 0; start < len(g_inds) && !stop; start += mbGroups {
			mbSamples, flat := minibatch(start)
			mb := r.pack(mbSamples)
			var mbReturns []float32
			for j, i := range flat {
				if returns != nil {
					mbReturns = append(mbReturns, float32(returns[i]))
				}
				end := len(mb.toks)
				if j+1 < len(flat) {
					end = mb.valueAt[j+1]
				}
				ref, old := refLogp[mbSamples[j]], oldLogp[mbSamples[j]]
				for k := mb.valueAt[j]; k < end; k++ {
					mb.toks[k].Advantage, mb.toks[k].Weight = float32(adv[i]), float32(weights[i])
					if ref != nil {
						mb.toks[k].RefLogP = ref[k-mb.valueAt[j]]
					}
					if old != nil {
						mb.toks[k].OldLogP = old[k-mb.valueAt[j]]
					}
				}
			}
			valueAt := mb.valueAt
			if returns == nil {
				valueAt = nil
			}
			var st ppoStats
			loss, _, err := r.policy.TrainStep(mb.batch, mb.idx, ppoLoss(mb.toks, valueAt, mbReturns, coefs, vocab, &st), lr)
			if err != nil {
				return sums, epochs, gap, err
			}
			if math.IsNaN(loss) {
				return sums, epochs, gap, fmt.Errorf("the loss is NaN; lower optim.lr")
			}
			for i := range sums {
				sums[i] += st[i]
			}
			numMB++
			if cfg.TargetKL > 0 && st[metricApproxKL] > cfg.TargetKL {
				stop = true
			}
		}
	}
	for i := range sums {
		sums[i] /= float64(max(numMB, 1))
	}
	return sums, epochs, gap, nil
}

// behaviourGap sums |learner - sampler| over an update's action tokens
// (those the loss trains) when old_logp recompute replaces the sampler's
// log-probabilities: how far the learner's products (bf16) move them.
type behaviourGap struct {
	sum, max float64
	n        int
}

func (g *behaviourGap) add(d float64) { g.sum, g.max, g.n = g.sum+d, max(g.max, d), g.n+1 }

// stateFacts are what the action grammar enumerates for an expert state,
// read the way an episode reads its state (agents.StateOf on the restored
// snapshot): its files, train.py, the scripts it may undo, the task's
// kind, and the plan its prompt shows. They are read once per snapshot.
type stateFacts struct {
	st    store.Store
	ecfg  env.Config
	mu    sync.Mutex
	cache map[string]agents.State
}

// newStateFacts reads states from st with the environment config ecfg
// (its interpreter found once; no script runs).
func newStateFacts(st store.Store, ecfg env.Config) (*stateFacts, error) {
	python, err := sandbox.FindPython(ecfg.Python)
	if err != nil {
		return nil, err
	}
	ecfg.Python, ecfg.Runner = python, sandbox.NewCold(python)
	return &stateFacts{st: st, ecfg: ecfg, cache: map[string]agents.State{}}, nil
}

// state returns the prompt state of s with what the grammar needs.
func (f *stateFacts) state(ctx context.Context, s schemas.RLState) (agents.State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	plan := agents.PlanFromCompact(s.Prompt)
	if st, ok := f.cache[s.SnapshotRef]; ok {
		st.Plan = plan
		return st, nil
	}
	if s.SnapshotRef == "" {
		return agents.State{TaskID: s.TaskID, Plan: plan}, nil
	}
	e, err := env.Restore(ctx, f.ecfg, f.st, s.SnapshotRef)
	if err != nil {
		return agents.State{}, fmt.Errorf("state %s: %w", s.StateID, err)
	}
	defer e.Close()
	st := agents.StateOf(e, plan, f.ecfg.MaxSteps)
	f.cache[s.SnapshotRef] = st
	return st, nil
}

// grammar is the grammar context of s, as evaluation builds it for the
// same state (policy.NewGrammarContext of the state and its plan).
func (f *stateFacts) grammar(ctx context.Context, s schemas.RLState, oneLine, dash bool) (policy.GrammarContext, error) {
	st, err := f.state(ctx, s)
	if err != nil {
		return policy.GrammarContext{}, err
	}
	gc := policy.NewGrammarContext(st, st.Plan, oneLine)
	gc.DashThoughts = dash
	return gc, nil
}

// cpuSeconds is this process's CPU time, user and system, with that of
// its children that have ended (cold script runs; the warm worker's runs
// are its own children and count once it exits).
func cpuSeconds() float64 {
	total := 0.0
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if syscall.Getrusage(who, &ru) == nil {
			total += float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
		}
	}
	return total
}

// warmCritic trains the value head alone (it does not move the trunk) on
// the expert states' rewards before the first update, critic_warmup
// steps of 16 states each, when the baseline is the critic; the
// optimiser's state is restored afterwards, so that the policy's first
// update starts as it would without the warm-up.
func (r *ppoRun) warmCritic(ctx context.Context) error {
	cfg := r.cfg
	if cfg.Advantage != AdvantageCritic || cfg.CriticWarmup == 0 || r.state.Warm {
		return nil
	}
	saved, err := r.policy.OptimizerState()
	if err != nil {
		return err
	}
	loss := 0.0
	for step := range cfg.CriticWarmup {
		if err := ctx.Err(); err != nil {
			return err
		}
		var exs []encoded
		var targets []float32
		for range 16 {
			s := r.states[r.rng.IntN(len(r.states))]
			p, err := r.pol.EncodePrompt(s.Prompt)
			if err != nil {
				return fmt.Errorf("train ppo: critic warm-up: state %s: %w", s.StateID, err)
			}
			exs, targets = append(exs, encoded{Tokens: p, Response: len(p)}), append(targets, float32(s.ExpertReward))
		}
		order := make([]int, len(exs))
		for i := range order {
			order[i] = i
		}
		b := packBatches(exs, order, len(exs)+1, r.policy.Config().Ctx)[0]
		idx := make([]int32, len(exs))
		for i, e := range exs {
			idx[i] = int32(b.Starts[i] + len(e.Tokens) - 1)
		}
		l, _, err := r.policy.TrainStep(b.Batch, idx, func(_, values, _, dValues []float32) float64 {
			sum := 0.0
			for i, v := range values {
				d := float64(v - targets[i])
				sum += 0.5 * d * d / float64(len(values))
				dValues[i] = float32(d / float64(len(values)))
			}
			return sum
		}, cfg.Optim.LR)
		if err != nil {
			return fmt.Errorf("train ppo: critic warm-up: %w", err)
		}
		if step == 0 || step == cfg.CriticWarmup-1 {
			fmt.Fprintf(r.s.log, "train ppo: critic warm-up step %d of %d: value loss %.4f\n", step+1, cfg.CriticWarmup, l)
		}
		loss = l
	}
	if err := r.policy.SetOptimizerState(saved); err != nil {
		return err
	}
	r.state.Warm = true
	r.s.record(map[string]any{"stage": "ppo-critic-warmup", "step": 0, "losses/value": loss})
	return nil
}
