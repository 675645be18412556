package policy

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"slices"
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
	// AnyID makes free decoding draw from every model id, the embedding's
	// padding rows and control tokens included, as transformers'
	// generate() does: `mlerl generate` prints its greedy answer token for
	// token. Without it free decoding keeps to the policy's FreeMask.
	AnyID bool
	// OnTokens, when set, is called with a row and the ids just appended
	// to it (a draw and what the grammar forced after it), in order, as
	// they come: streaming.
	OnTokens func(row int, ids []int32)
	// Context, when set, stops generation between two tokens once it is
	// done (an interrupted `mlerl generate`), with its error.
	Context context.Context
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
	if e, ok := dec.(newTokensExpecter); ok {
		e.ExpectNew(maxNew)
	}
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
	defer func() {
		for i := range *smps {
			(*smps)[i].logits = nil // the decoder's, not the pool's to keep
		}
		samplerPool.Put(smps)
	}()
	if len(*smps) < n {
		*smps = append(*smps, make([]sampler, n-len(*smps))...)
	}
	smp := (*smps)[:n]
	masks, frees := make([]Bitset, n), make([]bool, n)
	var pending []int
	for step := 0; ; step++ {
		if opts.Context != nil && opts.Context.Err() != nil {
			return nil, fmt.Errorf("generate: %w", opts.Context.Err())
		}
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
					if opts.OnTokens != nil {
						opts.OnTokens(i, forced)
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
			if opts.AnyID {
				mask = nil
			}
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
		eachRow(pending, min(4, 1+4096/v), func(i int) { smp[i].prepare(logits[i*v:(i+1)*v], masks[i], opts) })
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
			if opts.OnTokens != nil {
				opts.OnTokens(i, add)
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

// eachRow calls f for every row, split over GOMAXPROCS goroutines with
// at least minRows rows each; f must only touch its row's state. The
// sampler asks for 4 rows per goroutine over mlerl's ~1,000 ids (tens of
// microseconds a row) and 1 over a Hugging Face vocabulary (a
// millisecond a row over Qwen3's 151,936 ids).
func eachRow(rows []int, minRows int, f func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), len(rows)/minRows)
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
//
// It computes what LogProbs computes, bit for bit, but only what draw
// needs: the allowed ids are gathered once (a mask's set bits, not a test
// of every id), LogProbs's normaliser at temperature 1 (the same max, the
// same exp-sum in id order, the same log) gives the chosen token's
// log-probability alone, and the probabilities are exp(logit/T - lse_T)
// as exp(LogProbs(logits, mask, T)) has them, in id order, so the draw's
// total and walk are those of the whole distribution. Greedy needs the
// argmax and the normaliser, no probability. (Reusing the normaliser's
// exp(logit - max) / sum as the probabilities would save one exponential
// per id but round differently.) sample_test.go keeps the computation
// over every id as the reference and checks the two agree.
type sampler struct {
	ids    []int32   // the allowed ids in id order; then the ids draw walks
	x, xt  []float64 // their logits in float64; divided by the temperature
	p      []float64 // exponentials; then the probabilities draw walks
	logits []float32 // the row, for the chosen token's log-probability
	lse    float64   // LogProbs's normaliser at temperature 1: max + log(sum)
	total  float64   // the sum of p, in draw's order
	choice int32     // greedy's argmax, or a row that cannot be normalised's
	lp     float32   // choice's log-probability
	fixed  bool      // draw returns choice
	greedy bool      // draw uses no random number
	cand   []probID  // top-p's candidates
}

func (s *sampler) prepare(logits []float32, mask Bitset, opts GenerateOptions) {
	m1, best := s.gather(logits, mask)
	ids, x, temp := s.ids, s.x, opts.Temperature
	p := s.p[:len(x)]
	s.logits, s.lse = logits, lse(p, x, m1)
	s.greedy = temp <= 0
	if s.greedy {
		s.choice, s.lp, s.fixed = ids[best], float32(x[best]-s.lse), true
		return
	}
	xt, lseT := x, s.lse
	if temp != 1 {
		xt = s.xt[:len(x)]
		mT := math.Inf(-1)
		for k, v := range x {
			xt[k] = v / temp
			mT = max(mT, xt[k])
		}
		lseT = lse(p, xt, mT)
	}
	if math.IsNaN(lseT) || math.IsInf(lseT, -1) {
		// A NaN or +Inf logit, or no allowed id above -Inf: LogProbs is NaN
		// at every id, masked or not, and the draw falls through to the
		// last id.
		last := len(logits) - 1
		l := math.Inf(-1)
		if mask == nil || mask.Has(int32(last)) {
			l = float64(logits[last])
		}
		s.choice, s.lp, s.fixed = int32(last), float32(l-s.lse), true
		return
	}
	s.fixed = false
	// exp(LogProbs at temp), the ids at -Inf left out.
	expSub(p, xt, lseT)
	n, total := 0, 0.0
	for k, v := range xt {
		if math.IsInf(v-lseT, -1) {
			continue
		}
		ids[n], p[n] = ids[k], p[k]
		total += p[k]
		n++
	}
	s.ids, s.p, s.total = ids[:n], p[:n], total
	if opts.TopP > 0 && opts.TopP < 1 {
		s.nucleus(opts.TopP)
	}
}

// lse is logProbsInto's normaliser of x (whose max is m): m + log of the
// sum of exp(x - m) in order, the values at -Inf left out. buf is scratch
// of x's length.
func lse(buf, x []float64, m float64) float64 {
	expSub(buf, x, m)
	sum := 0.0
	for k, v := range x {
		if !math.IsInf(v, -1) {
			sum += buf[k]
		}
	}
	return m + math.Log(sum)
}

// gather puts the allowed ids of the row (all when mask is nil; a
// mask's bits past the row are ignored) and their logits into s.ids and
// s.x, in id order, and returns the logits' max (LogProbs's, at
// temperature 1) and the index in s.ids of the first largest logit.
func (s *sampler) gather(logits []float32, mask Bitset) (float64, int) {
	n := len(logits)
	if cap(s.ids) < n {
		s.ids, s.x, s.xt, s.p = make([]int32, n), make([]float64, n), make([]float64, n), make([]float64, n)
	}
	ids, x := s.ids[:n], s.x[:n]
	m, best, k := math.Inf(-1), -1, 0
	if mask == nil {
		for j, l := range logits {
			v := float64(l)
			ids[j], x[j] = int32(j), v
			m = max(m, v)
			if best < 0 || v > x[best] {
				best = j
			}
		}
		k = n
	} else {
		for w, word := range mask[:min(len(mask), (n+63)/64)] {
			for ; word != 0; word &= word - 1 {
				j := w*64 + bits.TrailingZeros64(word)
				if j >= n {
					break
				}
				v := float64(logits[j])
				ids[k], x[k] = int32(j), v
				m = max(m, v)
				if best < 0 || v > x[best] {
					best = k
				}
				k++
			}
		}
	}
	s.ids, s.x = ids[:k], x[:k]
	return m, best
}

// nucleus keeps top-p's nucleus of the prepared distribution, in draw's
// order: the probabilities from largest down (ties in id order, as a
// stable sort of the ids has them), up to the first whose running sum
// reaches topP (all of them if none does). Only the candidates are
// sorted: the ids at or above a probability whose mass from the top
// reaches topP (a histogram by binary exponent), all of them when the
// running sum does not reach topP among them. The nucleus is the same as
// sorting all: every id left out is below every candidate, so the sorted
// candidates are the sorted order's start and the running sums the same.
func (s *sampler) nucleus(topP float64) {
	var mass [2048]float64
	for _, q := range s.p {
		mass[math.Float64bits(q)>>52] += q
	}
	cut := 0.0
	for e, cum := len(mass)-1, 0.0; e > 0; e-- {
		// The margin covers the rounding of the histogram's sums.
		if cum += mass[e]; cum >= topP+1e-9 {
			cut = math.Float64frombits(uint64(e) << 52)
			break
		}
	}
	for {
		cand := s.cand[:0]
		for k, q := range s.p {
			if q >= cut {
				cand = append(cand, probID{q, s.ids[k]})
			}
		}
		slices.SortFunc(cand, func(a, b probID) int {
			if a.p != b.p {
				return cmp.Compare(b.p, a.p)
			}
			return cmp.Compare(a.id, b.id)
		})
		s.cand = cand
		n, cum, reached := len(cand), 0.0, false
		for k, c := range cand {
			if cum += c.p; cum >= topP {
				n, reached = k+1, true
				break
			}
		}
		if !reached && len(cand) < len(s.p) {
			cut = 0 // not reached among the candidates: sort all
			continue
		}
		total := 0.0
		for k, c := range cand[:n] {
			s.ids[k], s.p[k] = c.id, c.p
			total += c.p
		}
		s.ids, s.p, s.total = s.ids[:n], s.p[:n], total
		return
	}
}

// probID is an id and its probability, for top-p's sort.
type probID struct {
	p  float64
	id int32
}

// draw picks the token from the prepared distribution (one random number
// unless greedy) and returns it with its temperature-1 log-probability.
func (s *sampler) draw(rng *rand.Rand) (int32, float32) {
	if !s.greedy {
		u := rng.Float64() * s.total
		if !s.fixed {
			s.choice = s.ids[len(s.ids)-1]
			for k, q := range s.p {
				u -= q
				if u < 0 {
					s.choice = s.ids[k]
					break
				}
			}
			s.lp = float32(float64(s.logits[s.choice]) - s.lse)
		}
	}
	return s.choice, s.lp
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
