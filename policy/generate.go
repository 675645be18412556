package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"sync"
)

// GenerateOptions control sampling.
type GenerateOptions struct {
	// Temperature divides the logits; 0 means greedy (argmax).
	Temperature float64
	// TopP keeps the smallest set of tokens whose probability reaches TopP
	// (nucleus sampling); 0 or >= 1 keeps every token.
	TopP float64
	// MaxNewTokens bounds each response (0: the model's ResponseTokens).
	MaxNewTokens int
	// Seed makes sampling deterministic: the same policy, prompts and
	// options give the same samples.
	Seed uint64
	// RowSeeds, when set (one per prompt), gives each row its own random
	// stream instead of Seed's shared one: a row's sample then does not
	// depend on which other rows share the call (a caller may batch the
	// same rows differently from run to run and draw the same samples).
	RowSeeds []uint64
	// Constrain, when set, returns the grammar constraint of row i
	// (constrained decoding; see Constraint). Nil: free decoding.
	Constrain func(row int) Constraint
}

// Sample is one generated response.
type Sample struct {
	// Prompt is the prompt as the model saw it (Policy.EncodePrompt's).
	Prompt []int32
	// Tokens are the generated ids, the stop id included when it stopped.
	Tokens []int32
	// LogProbs are log pi(token) at temperature 1 under the generating
	// policy, renormalised over the constraint's allowed tokens when
	// decoding was constrained (0 for a forced token).
	LogProbs []float32
	// Masks holds, per token, the allowed-token bitset the constraint
	// imposed, or the policy's FreeMask in free decoding (nil: free
	// decoding over every id); PPO applies the same masks when it
	// recomputes log-probabilities, so the importance ratio is exact.
	Masks []Bitset
	// Free marks, per token, the tokens sampled inside the grammar's free
	// text (see FreeTexter; nil: free decoding, or no token was).
	Free []bool
	// Stopped is false when MaxNewTokens ran out first.
	Stopped bool
	// Forced counts tokens appended without sampling (jump-forward).
	Forced int
}

// Bitset is a set of model ids.
type Bitset []uint64

// NewBitset returns an empty set for n ids.
func NewBitset(n int) Bitset { return make(Bitset, (n+63)/64) }

// Has reports whether id is in the set.
func (b Bitset) Has(id int32) bool { return b[id>>6]&(1<<(uint(id)&63)) != 0 }

// Set adds id.
func (b Bitset) Set(id int32) { b[id>>6] |= 1 << (uint(id) & 63) }

// Count is the number of ids in the set.
func (b Bitset) Count() int {
	n := 0
	for _, w := range b {
		for ; w != 0; w &= w - 1 {
			n++
		}
	}
	return n
}

// Generator samples responses from an engine of a policy, which maps text
// to model ids (constrained decoding works on text) and says where a
// response stops. A nil Policy is mlerl's model without a vocabulary:
// its special ids, enough for free decoding.
type Generator struct {
	Engine Engine
	Policy *Policy
}

// Generate samples one response per prompt (model ids: see
// Policy.EncodePrompt), in one batch: the prompts are prefilled once,
// then each call to the engine extends every unfinished row by its next
// sampled token plus whatever the row's constraint forces after it. A
// row ends at one of the policy's stop ids or at MaxNewTokens.
func (g Generator) Generate(prompts [][]int32, opts GenerateOptions) ([]Sample, error) {
	cfg := g.Engine.Config()
	if len(prompts) == 0 {
		return nil, nil
	}
	maxNew := opts.MaxNewTokens
	if maxNew == 0 {
		maxNew = cfg.ResponseTokens
	}
	if maxNew < 1 {
		return nil, fmt.Errorf("generate: max_new_tokens must be at least 1, got %d", maxNew)
	}
	n := len(prompts)
	samples := make([]Sample, n)
	pol := g.Policy
	if pol == nil {
		pol = NewMLERL(cfg, nil, nil)
	}
	for i, p := range prompts {
		if err := pol.checkPrompt(p); err != nil {
			return nil, fmt.Errorf("generate: prompt %d %v", i, err)
		}
		if len(p)+maxNew > cfg.Ctx {
			return nil, fmt.Errorf("generate: prompt %d has %d tokens; with max_new_tokens %d it exceeds the context %d", i, len(p), maxNew, cfg.Ctx)
		}
		samples[i].Prompt = p
	}
	cons := make([]Constraint, n)
	if opts.Constrain != nil {
		for i := range cons {
			cons[i] = opts.Constrain(i)
		}
	}
	dec, err := g.Engine.NewDecoder(n)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	defer dec.Close()
	logits, err := dec.Prefill(prompts)
	if err != nil {
		return nil, fmt.Errorf("generate: prefill: %w", err)
	}
	if opts.RowSeeds != nil && len(opts.RowSeeds) != n {
		return nil, fmt.Errorf("generate: %d row seeds for %d prompts", len(opts.RowSeeds), n)
	}
	rng := rand.New(rand.NewPCG(opts.Seed, rngStream))
	rowRNG := func(int) *rand.Rand { return rng }
	if opts.RowSeeds != nil {
		rngs := make([]*rand.Rand, n)
		for i, seed := range opts.RowSeeds {
			rngs[i] = rand.New(rand.NewPCG(seed, rngStream))
		}
		rowRNG = func(i int) *rand.Rand { return rngs[i] }
	}
	done := make([]bool, n)
	v := cfg.Vocab
	// Each step: the rows' constraints in row order (forced tokens, masks),
	// then the rows' distributions in parallel (the log-softmax over the
	// vocabulary, the step's heaviest work outside the model), then the
	// draws and the constraints' updates in row order, so the random
	// numbers go to the rows in the same order as one row at a time.
	smps := samplerPool.Get().(*[]sampler)
	defer samplerPool.Put(smps)
	if len(*smps) < n {
		*smps = append(*smps, make([]sampler, n-len(*smps))...)
	}
	smp := (*smps)[:n]
	masks, frees := make([]Bitset, n), make([]bool, n)
	var pending []int
	for step := 0; ; step++ {
		appends := make([][]int32, n)
		active := false
		pending = pending[:0]
		for i := range samples {
			if done[i] {
				continue
			}
			s := &samples[i]
			if cons[i] != nil {
				// What the grammar fixes before any choice (the start of the
				// response, or the end of free text when the budget runs
				// low) is appended without sampling.
				forced, err := cons[i].Forced(maxNew - len(s.Tokens))
				if err != nil {
					return nil, fmt.Errorf("generate: row %d: %w", i, err)
				}
				if len(forced) > 0 {
					if err := s.force(cons[i], forced, v, pol); err != nil {
						return nil, fmt.Errorf("generate: row %d: %w", i, err)
					}
					if s.finished(maxNew, pol) {
						done[i] = true
						continue
					}
					appends[i], active = forced, true
					continue
				}
			}
			mask := pol.FreeMask()
			if cons[i] != nil {
				mask = NewBitset(v)
				if err := cons[i].Allowed(mask, maxNew-len(s.Tokens)); err != nil {
					return nil, fmt.Errorf("generate: row %d: %w", i, err)
				}
			}
			free := false
			if ft, ok := cons[i].(FreeTexter); ok {
				free = ft.InFreeText()
			}
			masks[i], frees[i] = mask, free
			pending = append(pending, i)
		}
		eachRow(pending, func(i int) { smp[i].prepare(logits[i*v:(i+1)*v], masks[i], opts) })
		for _, i := range pending {
			s := &samples[i]
			tok, lp := smp[i].draw(rowRNG(i))
			s.Tokens, s.LogProbs, s.Masks = append(s.Tokens, tok), append(s.LogProbs, lp), appendMask(s.Masks, masks[i])
			s.markFree(frees[i])
			add := []int32{tok}
			if cons[i] != nil && !pol.IsStop(tok) {
				if err := cons[i].Accept(tok); err != nil {
					return nil, fmt.Errorf("generate: row %d: %w", i, err)
				}
				// Jump-forward: what the grammar fixes after the token is
				// appended in the same engine call, without sampling.
				forced, err := cons[i].Forced(maxNew - len(s.Tokens))
				if err != nil {
					return nil, fmt.Errorf("generate: row %d: %w", i, err)
				}
				if err := s.force(cons[i], forced, v, pol); err != nil {
					return nil, fmt.Errorf("generate: row %d: %w", i, err)
				}
				add = append(add, forced...)
			}
			if s.finished(maxNew, pol) {
				done[i] = true
				continue
			}
			appends[i], active = add, true
		}
		if !active {
			break
		}
		if logits, err = dec.Extend(appends); err != nil {
			return nil, fmt.Errorf("generate: step %d: %w", step, err)
		}
	}
	return samples, nil
}

// rngStream is the second word of every generation's PCG seed.
const rngStream = 0x6d6c6572

// samplerPool keeps the rows' samplers (vocabulary-sized buffers each)
// from one Generate call to the next.
var samplerPool = sync.Pool{New: func() any { return new([]sampler) }}

// sampleSerial makes eachRow run on the calling goroutine (tests compare
// the two).
var sampleSerial = false

// eachRow calls f for every row, split over GOMAXPROCS goroutines when
// there are enough rows; f must only touch its row's state.
func eachRow(rows []int, f func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), len(rows)/4)
	if sampleSerial || workers < 2 {
		for _, i := range rows {
			f(i)
		}
		return
	}
	var wg sync.WaitGroup
	for w := range workers {
		part := rows[w*len(rows)/workers : (w+1)*len(rows)/workers]
		wg.Go(func() {
			for _, i := range part {
				f(i)
			}
		})
	}
	wg.Wait()
}

// force appends tokens the constraint fixed (log-probability 0, a
// one-token mask each).
func (s *Sample) force(c Constraint, toks []int32, vocab int, p *Policy) error {
	for _, f := range toks {
		one := NewBitset(vocab)
		one.Set(f)
		s.Tokens, s.LogProbs, s.Masks = append(s.Tokens, f), append(s.LogProbs, 0), append(s.Masks, one)
		s.markFree(false)
		s.Forced++
		if p.IsStop(f) {
			continue
		}
		if err := c.Accept(f); err != nil {
			return fmt.Errorf("forced token: %w", err)
		}
	}
	return nil
}

// finished reports whether the sample has ended (a stop id, or the
// budget).
func (s *Sample) finished(maxNew int, p *Policy) bool {
	if len(s.Tokens) > 0 && p.IsStop(s.Tokens[len(s.Tokens)-1]) {
		s.Stopped = true
		return true
	}
	return len(s.Tokens) >= maxNew
}

// markFree records whether the token just appended was free text,
// keeping Free nil until a free token comes.
func (s *Sample) markFree(free bool) {
	if s.Free == nil && !free {
		return
	}
	for len(s.Free) < len(s.Tokens)-1 {
		s.Free = append(s.Free, false)
	}
	s.Free = append(s.Free, free)
}

// IsFree reports whether token t was sampled inside free text.
func (s Sample) IsFree(t int) bool { return t < len(s.Free) && s.Free[t] }

func appendMask(ms []Bitset, m Bitset) []Bitset {
	if m == nil && ms == nil {
		return nil
	}
	return append(ms, m)
}

// sampleToken draws a token from one row of logits, restricted to mask
// when it is not nil, and returns it with its log-probability at
// temperature 1 (over the mask's tokens). The mask is applied before the
// temperature and top-p.
func sampleToken(logits []float32, mask Bitset, opts GenerateOptions, rng *rand.Rand) (int32, float32) {
	var s sampler
	s.prepare(logits, mask, opts)
	return s.draw(rng)
}

// sampler is sampleToken in two parts, prepare (the row's distribution:
// no random numbers, so rows can be prepared in parallel) and draw, with
// its buffers kept from one token to the next.
type sampler struct {
	logp, probs []float64
	idx         []int // the ids draw walks (top-p's nucleus, or all allowed)
	total       float64
	best        int // greedy: the argmax
	greedy      bool
}

func (s *sampler) prepare(logits []float32, mask Bitset, opts GenerateOptions) {
	s.logp = logProbsInto(s.logp, logits, mask, 1)
	s.greedy = opts.Temperature <= 0
	if s.greedy {
		best := -1
		for j, l := range logits {
			if (mask == nil || mask.Has(int32(j))) && (best < 0 || l > logits[best]) {
				best = j
			}
		}
		s.best = best
		return
	}
	if opts.Temperature == 1 {
		s.probs = append(s.probs[:0], s.logp...) // the same computation
	} else {
		s.probs = logProbsInto(s.probs, logits, mask, opts.Temperature)
	}
	probs, idx := s.probs, s.idx[:0]
	for j := range probs {
		if !math.IsInf(probs[j], -1) {
			probs[j] = math.Exp(probs[j])
			idx = append(idx, j)
		} else {
			probs[j] = 0
		}
	}
	if opts.TopP > 0 && opts.TopP < 1 {
		// Stable sort: ties keep id order, so sampling stays deterministic.
		sort.SliceStable(idx, func(a, b int) bool { return probs[idx[a]] > probs[idx[b]] })
		cum := 0.0
		for k, j := range idx {
			cum += probs[j]
			if cum >= opts.TopP {
				idx = idx[:k+1]
				break
			}
		}
	}
	total := 0.0
	for _, j := range idx {
		total += probs[j]
	}
	s.idx, s.total = idx, total
}

// draw picks the token from the prepared distribution (one random number
// unless greedy) and returns it with its temperature-1 log-probability.
func (s *sampler) draw(rng *rand.Rand) (int32, float32) {
	if s.greedy {
		return int32(s.best), float32(s.logp[s.best])
	}
	u := rng.Float64() * s.total
	choice := s.idx[len(s.idx)-1]
	for _, j := range s.idx {
		u -= s.probs[j]
		if u < 0 {
			choice = j
			break
		}
	}
	return int32(choice), float32(s.logp[choice])
}

// LogProbs returns log softmax(logits / temperature) in float64,
// over the ids in mask (the others get -Inf) or over all ids (nil mask).
// Sampling and PPO's loss both use it, so that a sample's behaviour
// log-probability and its recomputed one are the same computation.
func LogProbs(logits []float32, mask Bitset, temperature float64) []float64 {
	return logProbsInto(nil, logits, mask, temperature)
}

// logProbsInto is LogProbs into out's memory (grown as needed).
func logProbsInto(out []float64, logits []float32, mask Bitset, temperature float64) []float64 {
	if cap(out) < len(logits) {
		out = make([]float64, len(logits))
	}
	out = out[:len(logits)]
	m := math.Inf(-1)
	for j, l := range logits {
		if mask != nil && !mask.Has(int32(j)) {
			out[j] = math.Inf(-1)
			continue
		}
		out[j] = float64(l) / temperature
		m = max(m, out[j])
	}
	sum := 0.0
	for _, v := range out {
		if !math.IsInf(v, -1) {
			sum += math.Exp(v - m)
		}
	}
	lse := m + math.Log(sum)
	for j := range out {
		out[j] -= lse
	}
	return out
}

// GreedyNoCache is the slow reference for tests: greedy decoding that
// re-runs the full forward over the whole sequence for every token.
func GreedyNoCache(e Engine, prompt []int32, maxNew int) ([]int32, error) {
	cfg := e.Config()
	seq := slices.Clone(prompt)
	var out []int32
	for range maxNew {
		n := len(seq)
		b := Batch{B: 1, S: n, Tokens: slices.Clone(seq), Positions: make([]int32, n), Segments: make([]int32, n)}
		for j := range n {
			b.Positions[j], b.Segments[j] = int32(j), 1
		}
		logits, _, err := e.Logits(b, []int32{int32(n - 1)})
		if err != nil {
			return nil, err
		}
		tok, _ := sampleToken(logits, nil, GenerateOptions{}, nil)
		out = append(out, tok)
		seq = append(seq, tok)
		if tok == EosID || len(seq) >= cfg.Ctx {
			break
		}
	}
	return out, nil
}

// FreeTexter is a Constraint that knows when the next token is free text
// (the action grammar does: see actionConstraint.InFreeText).
type FreeTexter interface {
	InFreeText() bool
}

// Constraint restricts one row's tokens to a grammar (constrained
// decoding; see grammar.go).
type Constraint interface {
	// Allowed adds to mask the model ids that may come next, leaving room
	// to complete the response within limit tokens.
	Allowed(mask Bitset, limit int) error
	// Accept advances the grammar by one token.
	Accept(tok int32) error
	// Forced returns the tokens the grammar fixes next, at most limit of
	// them (none when it offers a choice).
	Forced(limit int) ([]int32, error)
}
