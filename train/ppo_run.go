package train

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/internal/blobs"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/schemas"
)

// The parts of a step-wise PPO run, in the order RunPPOWith uses them.

// ppoRun is a PPO run's state: its config, expert states, the policy being
// trained and the frozen reference (the SFT policy), the vocabulary, the
// resumable position and the sampler.
type ppoRun struct {
	cfg        PPOConfig
	s          *stage
	states     []schemas.RLState
	policy     policy.Engine
	ref        policy.Engine
	vocab      *policy.Vocab
	tok        policy.Tokenizer
	oneLine    bool // the SFT policy writes terse responses
	state      ppoState
	pcg        *rand.PCG
	rng        *rand.Rand
	facts      *stateFacts
	carry      []*sample // results collected beyond the last batch
	consecErrs int
}

// newPPORun reads the held-in expert states, the SFT checkpoint (the
// reference and, unless resuming, the start) and the PPO checkpoint to
// resume from.
func newPPORun(ctx context.Context, cfg PPOConfig, log io.Writer) (*ppoRun, error) {
	s, states, _, err := openStage(ctx, "train ppo", cfg.Data, cfg.States, schemas.RLStates,
		func(r schemas.RLState) string { return r.Split }, log)
	if err != nil {
		return nil, err
	}
	r := &ppoRun{cfg: cfg, s: s, states: states}
	sftDir, err := policy.LatestCheckpoint(ctx, s.st, cfg.SFT)
	if err != nil {
		return nil, fmt.Errorf("train ppo: %w", err)
	}
	if sftDir == "" {
		return nil, fmt.Errorf("train ppo: no SFT checkpoint in %s; run `mlerl train sft` first", s.st.URI(cfg.SFT))
	}
	var sftCfg SFTConfig
	refCk, err := policy.LoadCheckpoint(ctx, s.st, sftDir, &sftCfg, nil)
	if err != nil {
		return nil, fmt.Errorf("train ppo: reference policy: %w", err)
	}
	if cfg.MaxNewTokens > refCk.Model.ResponseTokens {
		return nil, fmt.Errorf("train ppo: max_new_tokens %d exceeds the policy's model.response_tokens %d (its context holds prompt_tokens %d + response_tokens)", cfg.MaxNewTokens, refCk.Model.ResponseTokens, refCk.Model.PromptTokens)
	}
	r.vocab, r.oneLine = refCk.Vocab, sftCfg.Response == policy.ResponseTerse
	if r.tok, err = policy.OpenTokenizer(sftCfg.Tokenizer); err != nil {
		return nil, fmt.Errorf("train ppo: %w", err)
	}
	if r.ref, _, err = refCk.Engine(cfg.Engine, false); err != nil {
		return nil, fmt.Errorf("train ppo: %w", err)
	}
	r.pcg = rand.NewPCG(uint64(cfg.Seed), 0x70706f)
	ck, err := s.latest(ctx, cfg.Out, cfg.Resume, nil, &r.state)
	if err != nil {
		return nil, fmt.Errorf("train ppo: %w", err)
	}
	if ck != nil {
		if err := r.pcg.UnmarshalBinary(r.state.RNG); err != nil {
			return nil, fmt.Errorf("train ppo: resuming %s: RNG state: %w", s.st.URI(ck.Dir), err)
		}
		fmt.Fprintf(log, "train ppo: resuming from %s at update %d\n", s.st.URI(ck.Dir), r.state.Update)
	} else {
		ck = &policy.Checkpoint{Model: refCk.Model, Vocab: refCk.Vocab, Weights: refCk.Weights, Dir: refCk.Dir}
	}
	if r.policy, err = s.engine(ck, cfg.Engine, cfg.Optim); err != nil {
		return nil, fmt.Errorf("train ppo: %w", err)
	}
	r.rng = rand.New(r.pcg)
	if cfg.Decode == policy.DecodeConstrained {
		if r.facts, err = newStateFacts(ctx, s.st); err != nil {
			return nil, fmt.Errorf("train ppo: %w", err)
		}
	}
	return r, nil
}

func (r *ppoRun) close() {
	r.policy.Close()
	r.ref.Close()
}

// save writes a checkpoint at the current update.
func (r *ppoRun) save(ctx context.Context) error {
	rb, err := r.pcg.MarshalBinary()
	if err != nil {
		return err
	}
	r.state.RNG = rb
	return r.s.save(ctx, r.cfg.Out, r.state.Update, r.policy, r.cfg, r.vocab, r.state)
}

// rolloutStats count what one rollout saw.
type rolloutStats struct {
	stale, formatErrors, valid, cached, rewardErrors int
	forced, tokens                                   int
	genS, waitS                                      float64
}

// rollout collects one batch: it samples states and generates actions
// whenever fewer than batch_size + workers are in flight (slow actions
// overlap with generation), takes results as they arrive, drops samples
// older than max_staleness versions, and keeps over-collected ones for
// the next batch.
func (r *ppoRun) rollout(ctx context.Context, col *collector) ([]*sample, rolloutStats, error) {
	cfg, version := r.cfg, r.state.Update
	var batch []*sample
	var st rolloutStats
	take := func(s *sample) error {
		switch {
		case s.Err != nil:
			st.rewardErrors++
			r.consecErrs++
			fmt.Fprintf(r.s.log, "train ppo: reward for state %s failed: %v\n", s.State.StateID, s.Err)
			if r.consecErrs > 2*cfg.BatchSize {
				return fmt.Errorf("train ppo: %d reward errors in a row, the last: %w", r.consecErrs, s.Err)
			}
		case version-s.Version > cfg.MaxStaleness:
			st.stale++
		case len(batch) < cfg.BatchSize:
			r.consecErrs = 0
			batch = append(batch, s)
			if s.Out.FormatError {
				st.formatErrors++
			}
			if s.Out.Valid {
				st.valid++
			}
			if s.Cached {
				st.cached++
			}
			for _, m := range s.Masks {
				if m != nil && m.Count() == 1 {
					st.forced++
				}
			}
			st.tokens += len(s.Action)
		default:
			r.carry = append(r.carry, s) // over-collected: the next update's
		}
		return nil
	}
	prev := r.carry
	r.carry = nil
	for _, s := range prev {
		if err := take(s); err != nil {
			return nil, st, err
		}
	}
	for len(batch) < cfg.BatchSize {
		if err := ctx.Err(); err != nil {
			return nil, st, err
		}
		if col.outstanding < cfg.BatchSize+cfg.Workers {
			t0 := time.Now()
			samples, err := r.generate(ctx, version)
			if err != nil {
				return nil, st, err
			}
			for _, s := range samples {
				col.submit(s)
			}
			st.genS += time.Since(t0).Seconds()
		}
		// Take what has arrived; wait only when no more may be started.
		t0 := time.Now()
		arrived := false
		for len(batch) < cfg.BatchSize {
			s, ok := col.poll()
			if !ok {
				break
			}
			arrived = true
			if err := take(s); err != nil {
				return nil, st, err
			}
		}
		if !arrived && len(batch) < cfg.BatchSize && col.outstanding >= cfg.BatchSize+cfg.Workers {
			s, err := col.wait(ctx)
			if err != nil {
				return nil, st, err
			}
			if err := take(s); err != nil {
				return nil, st, err
			}
		}
		st.waitS += time.Since(t0).Seconds()
	}
	return batch, st, nil
}

// generate samples gen_batch states and one action for each.
func (r *ppoRun) generate(ctx context.Context, version int) ([]*sample, error) {
	cfg := r.cfg
	picked := make([]schemas.RLState, cfg.GenBatch)
	prompts := make([][]int32, cfg.GenBatch)
	for i := range picked {
		picked[i] = r.states[r.rng.IntN(len(r.states))]
		p, err := policy.EncodePrompt(r.vocab, r.tok, r.policy.Config(), picked[i].Prompt)
		if err != nil {
			return nil, fmt.Errorf("state %s: %w", picked[i].StateID, err)
		}
		prompts[i] = p
	}
	r.state.Drawn += int64(cfg.GenBatch)
	opts := policy.GenerateOptions{Temperature: cfg.Temperature, TopP: cfg.TopP, MaxNewTokens: cfg.MaxNewTokens, Seed: newSeed(cfg.Seed, r.state.GenCalls)}
	r.state.GenCalls++
	gen := policy.Generator{Engine: r.policy, Vocab: r.vocab, Tok: r.tok}
	if r.facts != nil {
		contexts := make([]policy.GrammarContext, len(picked))
		for i, s := range picked {
			st, err := r.facts.state(ctx, s)
			if err != nil {
				return nil, err
			}
			contexts[i] = policy.NewGrammarContext(st, nil, r.oneLine)
		}
		opts.Constrain = func(i int) policy.Constraint { return gen.ActionGrammar(contexts[i]) }
	}
	samples, err := gen.Generate(prompts, opts)
	if err != nil {
		return nil, err
	}
	out := make([]*sample, len(samples))
	for i, s := range samples {
		out[i] = &sample{State: picked[i], Prompt: s.Prompt, Action: s.Tokens, LogP: s.LogProbs, Masks: s.Masks,
			Version: version, Text: strings.TrimSpace(r.vocab.Decode(r.tok, s.Tokens))}
	}
	return out, nil
}

// minibatch is some samples packed for the engine: the batch, the action
// tokens' positions and the position of each sample's V(s) among them.
type minibatch struct {
	batch   policy.Batch
	idx     []int32 // action-token positions (the position predicting each action token)
	toks    []ppoToken
	valueAt []int // per sample, the index in idx of its first action position (its last prompt token)
}

// pack packs samples (all of them, or those listed) into one minibatch.
func (r *ppoRun) pack(samples []*sample, only ...int) minibatch {
	if only == nil {
		only = make([]int, len(samples))
		for i := range only {
			only[i] = i
		}
	}
	exs := make([]encoded, len(only))
	for i, k := range only {
		s := samples[k]
		exs[i] = encoded{Tokens: append(append([]int32{}, s.Prompt...), s.Action...), Response: len(s.Prompt)}
	}
	order := make([]int, len(exs))
	for i := range order {
		order[i] = i
	}
	rows := (len(exs) + 1) // enough rows for any packing
	b := packBatches(exs, order, rows, r.policy.Config().Ctx)[0]
	var mb minibatch
	mb.batch = b.Batch
	for i, k := range only {
		s := samples[k]
		at := b.Starts[i] + len(s.Prompt) - 1 // predicts the first action token
		mb.valueAt = append(mb.valueAt, len(mb.idx))
		for t, tok := range s.Action {
			mb.idx = append(mb.idx, int32(at+t))
			tk := ppoToken{Target: tok, OldLogP: s.LogP[t]}
			if s.Masks != nil {
				tk.Mask = s.Masks[t]
			}
			mb.toks = append(mb.toks, tk)
		}
	}
	return mb
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

// update runs update_epochs passes of minibatches of the clipped loss and
// returns the metrics averaged over minibatches.
func (r *ppoRun) update(batch []*sample, adv, returns, weights []float64, lr float64) (ppoStats, error) {
	cfg := r.cfg
	coefs := ppoCoefs{ClipCoef: cfg.ClipCoef, VfCoef: cfg.VfCoef, EntCoef: cfg.EntCoef, KLCoef: cfg.KLCoef}
	b_inds := make([]int, len(batch))
	for i := range b_inds {
		b_inds[i] = i
	}
	var sums ppoStats
	numMB := 0
	vocab := r.policy.Config().Vocab
	for range cfg.UpdateEpochs {
		r.rng.Shuffle(len(b_inds), func(i, j int) { b_inds[i], b_inds[j] = b_inds[j], b_inds[i] })
		mbSize := (len(b_inds) + cfg.Minibatches - 1) / cfg.Minibatches
		for start := 0; start < len(b_inds); start += mbSize {
			mb_inds := b_inds[start:min(start+mbSize, len(b_inds))]
			mb := r.pack(batch, mb_inds...)
			refLogits, _, err := r.ref.Logits(mb.batch, mb.idx)
			if err != nil {
				return sums, err
			}
			refLogp := tokenLogProbs(refLogits, mb.toks, vocab)
			mb_returns := make([]float32, len(mb_inds))
			k := 0
			for i, s := range mb_inds {
				mb_returns[i] = float32(returns[s])
				for range batch[s].Action {
					mb.toks[k].Advantage, mb.toks[k].Weight, mb.toks[k].RefLogP = float32(adv[s]), float32(weights[s]), refLogp[k]
					k++
				}
			}
			var st ppoStats
			loss, _, err := r.policy.TrainStep(mb.batch, mb.idx, ppoLoss(mb.toks, mb.valueAt, mb_returns, coefs, vocab, &st), lr)
			if err != nil {
				return sums, err
			}
			if math.IsNaN(loss) {
				return sums, fmt.Errorf("the loss is NaN; lower optim.lr")
			}
			for i := range sums {
				sums[i] += st[i]
			}
			numMB++
		}
	}
	for i := range sums {
		sums[i] /= float64(max(numMB, 1))
	}
	return sums, nil
}

// stateFacts are what the action grammar enumerates for an expert state:
// the files of its snapshot, its train.py, the task's kind and the plan
// its prompt shows. They are read once per snapshot.
type stateFacts struct {
	st    store.Store
	tasks map[string]schemas.Task
	mu    sync.Mutex
	cache map[string]agents.State
}

func newStateFacts(ctx context.Context, st store.Store) (*stateFacts, error) {
	f := &stateFacts{st: st, tasks: map[string]schemas.Task{}, cache: map[string]agents.State{}}
	if m, err := datasets.Latest(ctx, st, schemas.Tasks.Name); err == nil {
		ts, err := datasets.ReadAll[schemas.Task](ctx, st, m, schemas.Tasks)
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			f.tasks[t.TaskID] = t
		}
	}
	return f, nil
}

// state returns the prompt state of s with what the grammar needs.
func (f *stateFacts) state(ctx context.Context, s schemas.RLState) (agents.State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st, ok := f.cache[s.SnapshotRef]; ok {
		st.Plan = agents.PlanFromCompact(s.Prompt)
		return st, nil
	}
	t := f.tasks[s.TaskID]
	st := agents.State{TaskID: s.TaskID, Modality: t.Modality, TaskType: t.TaskType}
	if s.SnapshotRef != "" {
		tree, err := blobs.GetTreeListing(ctx, f.st, s.SnapshotRef)
		if err != nil {
			return st, fmt.Errorf("state %s: %w", s.StateID, err)
		}
		for _, e := range tree.Entries {
			st.Files = append(st.Files, e.Path)
			if e.Path == "train.py" {
				b, err := blobs.Get(ctx, f.st, e.Hash)
				if err != nil {
					return st, fmt.Errorf("state %s: train.py: %w", s.StateID, err)
				}
				st.Script = string(b)
			}
		}
	}
	f.cache[s.SnapshotRef] = st
	st.Plan = agents.PlanFromCompact(s.Prompt)
	return st, nil
}
