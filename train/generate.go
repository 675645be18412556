package train

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/ml/model"
)

// GenerateOptions control sampling. The zero value is greedy decoding of
// up to 0 tokens; use [DefaultGenerateOptions].
type GenerateOptions struct {
	// Temperature divides the logits; 0 means greedy (argmax).
	Temperature float64
	// TopP keeps the smallest set of tokens whose probability reaches TopP
	// (nucleus sampling); 0 or >= 1 keeps every token.
	TopP float64
	// MaxNewTokens bounds each response.
	MaxNewTokens int
	// Stop lists model-id sequences that end a response (the sequence is
	// kept in the output); EosID always ends a response (and is kept).
	Stop [][]int32
	// Seed makes sampling deterministic: the same policy, prompts and
	// options give the same samples.
	Seed uint64
}

// DefaultGenerateOptions samples at temperature 1 with top-p 1.
func DefaultGenerateOptions() GenerateOptions {
	return GenerateOptions{Temperature: 1, TopP: 1, MaxNewTokens: 128, Seed: 1}
}

// Sample is one generated response.
type Sample struct {
	// Prompt is the prompt as the model saw it (left-truncated to fit).
	Prompt []int32
	// Tokens are the generated ids, the stop sequence or EosID included.
	Tokens []int32
	// LogProbs are log pi(token) at temperature 1 under the generating policy.
	LogProbs []float32
	// Value is the value head at the last prompt token: V(s).
	Value float32
	// Stopped is false when MaxNewTokens ran out first.
	Stopped bool
}

// promptBucket rounds a prompt length up so that few prefill graphs are
// compiled (one per bucket).
func promptBucket(n, ctx int) int {
	b := 16
	for b < n {
		b *= 2
	}
	return min(b, ctx)
}

// fitPrompt keeps the last ctx-maxNew tokens of a prompt (the end of the
// state, with the latest observation, matters most).
func fitPrompt(prompt []int32, ctx, maxNew int) ([]int32, error) {
	room := ctx - maxNew
	if room < 1 {
		return nil, fmt.Errorf("generate: max_new_tokens %d leaves no room for a prompt in context %d", maxNew, ctx)
	}
	if len(prompt) == 0 {
		return nil, fmt.Errorf("generate: empty prompt")
	}
	if len(prompt) > room {
		prompt = prompt[len(prompt)-room:]
	}
	return prompt, nil
}

// prefillGraph runs the prompts [B,P] (right-padded; lastIdx [B] is the
// index of each row's last real token) and returns the logits [B,V] and
// value [B] at lastIdx, then every layer's keys and values padded to the
// full context [B,Ctx,H,Dh].
func (p *Policy) prefillGraph(scope *model.Scope, inputs []*Node) []*Node {
	tokens, lastIdx := inputs[0], inputs[1]
	g := tokens.Graph()
	b, s := tokens.Shape().Dimensions[0], tokens.Shape().Dimensions[1]
	positions := BroadcastToDims(Iota(g, tokens.Shape(), 1), b, s)
	real := LessOrEqual(positions, InsertAxes(lastIdx, -1))
	segments := ConvertDType(real, tokens.DType()) // 1 real, 0 padding
	x := p.embed(scope, tokens, positions)
	mask := packedMask(segments)
	outs := make([]*Node, 2, 2+2*p.Cfg.Layers)
	for l := range p.Cfg.Layers {
		var k, v *Node
		x, k, v = p.block(scope.In("block_%d", l), x, mask, nil, nil, nil)
		if pad := p.Cfg.Ctx - s; pad > 0 {
			zeros := Zeros(g, shapes.Make(k.DType(), b, pad, p.Cfg.Heads, p.Cfg.headDim()))
			k = Concatenate([]*Node{k, zeros}, 1)
			v = Concatenate([]*Node{v, zeros}, 1)
		}
		outs = append(outs, k, v)
	}
	// Select the last real position of each row with a one-hot sum (no
	// dynamic slicing needed).
	pick := ConvertDType(Equal(positions, InsertAxes(lastIdx, -1)), x.DType()) // [B,P]
	last := ReduceSum(Mul(x, InsertAxes(pick, -1)), 1)                         // [B,D]
	outs[0], outs[1] = p.heads(scope, last)
	return outs
}

// decodeGraph feeds one token per row (tokens [B,1] at positions pos [B])
// through the cached model: inputs[2:] are the layers' keys and values
// [B,Ctx,H,Dh]. The new key and value are written at pos through a one-hot
// mask, and attention covers cache slots 0..pos. Returns logits [B,V],
// values [B] and the updated caches.
func (p *Policy) decodeGraph(scope *model.Scope, inputs []*Node) []*Node {
	tokens, pos := inputs[0], inputs[1]
	g := tokens.Graph()
	b := tokens.Shape().Dimensions[0]
	ctx := p.Cfg.Ctx
	positions := InsertAxes(pos, -1) // [B,1]
	slots := Iota(g, shapes.Make(pos.DType(), 1, ctx), 1)
	mask := Reshape(LessOrEqual(slots, positions), b, 1, 1, ctx)                          // [B,1,1,Ctx]
	write := Reshape(ConvertDType(Equal(slots, positions), dtypes.Float32), b, ctx, 1, 1) // [B,Ctx,1,1]
	x := p.embed(scope, tokens, positions)
	outs := make([]*Node, 2, 2+2*p.Cfg.Layers)
	for l := range p.Cfg.Layers {
		var k, v *Node
		x, k, v = p.block(scope.In("block_%d", l), x, mask, inputs[2+2*l], inputs[3+2*l], write)
		outs = append(outs, k, v)
	}
	logits, values := p.heads(scope, Squeeze(x, 1))
	outs[0], outs[1] = logits, values
	return outs
}

// Generate samples one response per prompt (model ids, BOS included by the
// caller), in one batch. Prompts longer than Ctx-MaxNewTokens keep their
// last tokens. It prefills the prompts once, then decodes one token per
// step with a fixed-size KV cache.
func (p *Policy) Generate(prompts [][]int32, opts GenerateOptions) ([]Sample, error) {
	if len(prompts) == 0 {
		return nil, nil
	}
	if opts.MaxNewTokens < 1 {
		return nil, fmt.Errorf("generate: max_new_tokens must be at least 1, got %d", opts.MaxNewTokens)
	}
	b := len(prompts)
	samples := make([]Sample, b)
	maxLen := 0
	for i, pr := range prompts {
		fit, err := fitPrompt(pr, p.Cfg.Ctx, opts.MaxNewTokens)
		if err != nil {
			return nil, fmt.Errorf("prompt %d: %w", i, err)
		}
		samples[i].Prompt = fit
		maxLen = max(maxLen, len(fit))
	}
	pb := promptBucket(maxLen, p.Cfg.Ctx)
	tokens := make([]int32, b*pb)
	lastIdx := make([]int32, b)
	for i, s := range samples {
		copy(tokens[i*pb:], s.Prompt)
		lastIdx[i] = int32(len(s.Prompt) - 1)
	}
	var err error
	if p.prefill == nil {
		if p.prefill, err = model.NewExec(p.Backend, p.Store, p.prefillGraph); err != nil {
			return nil, fmt.Errorf("generate: prefill graph: %w", err)
		}
		if p.decode, err = model.NewExec(p.Backend, p.Store, p.decodeGraph); err != nil {
			return nil, fmt.Errorf("generate: decode graph: %w", err)
		}
	}
	outs, err := p.prefill.Exec(i32Tensor(tokens, b, pb), i32Tensor(lastIdx, b))
	if err != nil {
		return nil, fmt.Errorf("generate: prefill: %w", err)
	}
	values, err := flat(outs[1])
	if err != nil {
		return nil, err
	}
	for i := range samples {
		samples[i].Value = values[i]
	}
	rng := rand.New(rand.NewPCG(opts.Seed, 0x6d6c6572))
	pos := slices.Clone(lastIdx)
	done := make([]bool, b)
	next := make([]int32, b)
	for step := 0; ; step++ {
		logits, err := flat(outs[0])
		if err != nil {
			return nil, err
		}
		allDone := true
		for i := range samples {
			if done[i] {
				next[i] = PadID
				continue
			}
			row := logits[i*p.Cfg.Vocab : (i+1)*p.Cfg.Vocab]
			tok, lp := sampleToken(row, opts, rng)
			s := &samples[i]
			s.Tokens = append(s.Tokens, tok)
			s.LogProbs = append(s.LogProbs, lp)
			switch {
			case tok == EosID || endsWithStop(s.Tokens, opts.Stop):
				done[i], s.Stopped = true, true
			case len(s.Tokens) >= opts.MaxNewTokens:
				done[i] = true
			}
			next[i] = tok
			pos[i]++
			allDone = allDone && done[i]
		}
		if allDone {
			break
		}
		// Finished rows keep decoding padding at a clamped position: their
		// outputs are ignored, and the batch keeps one compiled shape.
		stepPos := make([]int32, b)
		for i := range pos {
			stepPos[i] = min(pos[i], int32(p.Cfg.Ctx-1))
		}
		args := make([]any, 0, 2+2*p.Cfg.Layers)
		args = append(args, i32Tensor(slices.Clone(next), b, 1), i32Tensor(stepPos, b))
		for _, t := range outs[2:] {
			args = append(args, t)
		}
		newOuts, err := p.decode.Exec(args...)
		if err != nil {
			return nil, fmt.Errorf("generate: decode step %d: %w", step, err)
		}
		for _, t := range outs {
			t.FinalizeAll()
		}
		outs = newOuts
	}
	for _, t := range outs {
		t.FinalizeAll()
	}
	return samples, nil
}

// endsWithStop reports whether toks ends with one of the stop sequences.
func endsWithStop(toks []int32, stops [][]int32) bool {
	for _, s := range stops {
		if len(s) > 0 && len(toks) >= len(s) && slices.Equal(toks[len(toks)-len(s):], s) {
			return true
		}
	}
	return false
}

// sampleToken draws a token from one row of logits and returns it with its
// log-probability at temperature 1.
func sampleToken(logits []float32, opts GenerateOptions, rng *rand.Rand) (int32, float32) {
	logp := logSoftmax(logits, 1)
	if opts.Temperature <= 0 {
		best := 0
		for j, l := range logits {
			if l > logits[best] {
				best = j
			}
		}
		return int32(best), float32(logp[best])
	}
	probs := logSoftmax(logits, opts.Temperature)
	for j := range probs {
		probs[j] = math.Exp(probs[j])
	}
	idx := make([]int, len(probs))
	for j := range idx {
		idx[j] = j
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
	u := rng.Float64() * total
	choice := idx[len(idx)-1]
	for _, j := range idx {
		u -= probs[j]
		if u < 0 {
			choice = j
			break
		}
	}
	return int32(choice), float32(logp[choice])
}

// logSoftmax returns log softmax(logits / temperature) in float64.
func logSoftmax(logits []float32, temperature float64) []float64 {
	out := make([]float64, len(logits))
	m := math.Inf(-1)
	for j, l := range logits {
		out[j] = float64(l) / temperature
		m = max(m, out[j])
	}
	sum := 0.0
	for _, v := range out {
		sum += math.Exp(v - m)
	}
	lse := m + math.Log(sum)
	for j := range out {
		out[j] -= lse
	}
	return out
}

// GenerateGreedyNoCache is the slow reference for tests: greedy decoding
// that re-runs the full forward over the whole sequence for every token.
func (p *Policy) GenerateGreedyNoCache(prompt []int32, maxNew int) ([]int32, error) {
	seq := slices.Clone(prompt)
	var out []int32
	for range maxNew {
		n := len(seq)
		s := promptBucket(n, p.Cfg.Ctx)
		in := batchInput{B: 1, S: s, Tokens: make([]int32, s), Positions: make([]int32, s), Segments: make([]int32, s)}
		copy(in.Tokens, seq)
		for j := range n {
			in.Positions[j], in.Segments[j] = int32(j), 1
		}
		logits, _, err := p.Forward(in)
		if err != nil {
			return nil, err
		}
		row := logits[(n-1)*p.Cfg.Vocab : n*p.Cfg.Vocab]
		tok, _ := sampleToken(row, GenerateOptions{}, nil)
		out = append(out, tok)
		seq = append(seq, tok)
		if tok == EosID || len(seq) >= p.Cfg.Ctx {
			break
		}
	}
	return out, nil
}
