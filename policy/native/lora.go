package native

import (
	"fmt"
	"math"
	"strings"
)

// LoRA (Hu et al., 2021, as PEFT implements it): a dense layer y = x·W +
// b gains a low-rank update,
//
//	y = x·W + b + (alpha/r) · dropout(x)·A·B,   A [in, r], B [r, out],
//
// A drawn uniform in ±1/sqrt(in) (PEFT's Kaiming-uniform with a = √5) and
// B zero, so that a fresh adapter leaves the model's function as it was.
// With adapters the base model is frozen: only the adapters and the value
// head have gradients and AdamW moments, while Backward still carries the
// input gradient through every frozen weight. Dropout (training Forwards
// only, SetTraining) zeroes values of the adapter's input, not of the base
// layer's, with one mask per layer, adapter and step, each value kept with
// probability 1-p and scaled by 1/(1-p).

// LoRAConfig configures the adapters of Options.LoRA.
type LoRAConfig struct {
	Rank    int      // adapter rank r; 0 means no adapters: every weight trains
	Alpha   float64  // the update's scale is Alpha/Rank; 0 means Alpha = Rank (scale 1)
	Dropout float64  // probability in [0, 1) of zeroing an adapter input value in a training Forward; default 0
	Targets []string // the adapted layers: q, k, v, o, gate, up, down (PEFT's q_proj, ... are accepted); a GELU FFN has up (ffn_in) and down (ffn_out)
}

// Options are choices about how a model is stored and trained that leave
// the function it computes as it is.
type Options struct {
	// LoRA adds adapters and freezes the base; the zero value trains every
	// weight (full fine-tuning).
	LoRA LoRAConfig
	// BaseStorage is how a frozen base (LoRA, or Frozen) keeps its
	// matrices (dense layers, embedding, LM head): MatmulBF16 in bfloat16
	// (half the memory; its training products then run in bf16 unless
	// SetMatmul says otherwise), MatmulFP32 ("" too) in float32,
	// StorageQ8_0, StorageQ4_0 or StorageQ4_1 in ggml's quantized blocks
	// (quant.go: a sixth to a third of the memory; the values written are
	// quantized, or SetParamBlocks writes blocks as they are). Norm
	// gains, biases, adapters and the value head stay float32. "auto" is
	// refused: its caller resolves it (bf16.go).
	BaseStorage string
	// MatrixStorage overrides BaseStorage for the base matrices it names
	// (native's names, e.g. "/token_embed/embeddings"): a GGUF file's
	// tensors kept each in its own format (SmolLM2's Q4_1 layers and
	// Q8_0 embedding). Every name must be a matrix of the model.
	MatrixStorage map[string]string
	// LoadedBase tells that the caller writes every base parameter (a
	// pretrained checkpoint's weights): the base's matrices are then not
	// drawn at New, only zeroed (drawing them was most of the time it took
	// to build a Hugging Face-sized model), and the value head and
	// adapters draw their initial values from the seed alone. Without it
	// (mlerl's own model, tests) every parameter is drawn as New draws it.
	LoadedBase bool
	// Frozen freezes the base of a model without adapters, as adapters
	// do: only the value head trains. It makes a base model in the
	// storage of a LoRA model (a bfloat16 one included) for inference or
	// as a frozen reference: a LoRA model with fresh adapters (B zero)
	// computes exactly what such a model computes, in the same storage
	// and product precision.
	Frozen bool
	// Recompute keeps only each block's input during Forward and
	// recomputes the block's activations during the backward pass (about
	// one more forward's work for a fraction of the memory): see
	// Model.Recompute.
	Recompute bool
}

// loraWeights is one adapter's A [in, r] and B [r, out] (nil: none).
type loraWeights struct{ a, b []float32 }

// parseTarget maps a name LoRAConfig.Targets accepts to its target: a
// SwiGLU FFN has gate, up and down; a GELU one up (its input) and down.
func parseTarget(name string, swiglu bool) (target, error) {
	n := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(name)), "_proj")
	switch {
	case n == "q":
		return tQ, nil
	case n == "k":
		return tK, nil
	case n == "v":
		return tV, nil
	case n == "o" || n == "out":
		return tOut, nil
	case (n == "gate" || n == "ffn_gate") && swiglu:
		return tFFNIn, nil
	case (n == "up" || n == "ffn_up") && swiglu:
		return tFFNUp, nil
	case (n == "up" || n == "ffn_in") && !swiglu:
		return tFFNIn, nil
	case n == "down" || n == "ffn_down" || n == "ffn_out":
		return tFFNOut, nil
	}
	return 0, fmt.Errorf("native: lora target %q: want q, k, v, o, up, down (and gate for a SwiGLU FFN)", name)
}

// loraSet is a resolved LoRAConfig: the targets as a set, the scale.
type loraSet struct {
	LoRAConfig
	on    [numTargets]bool
	scale float32
}

func (l loraSet) has(t target) bool { return l.Rank > 0 && l.on[t] }

// resolveLoRA checks o.LoRA against c and resolves it.
func resolveLoRA(c Config, lo LoRAConfig) (loraSet, error) {
	s := loraSet{LoRAConfig: lo}
	if lo.Rank == 0 {
		return s, nil
	}
	switch {
	case lo.Rank < 0:
		return s, fmt.Errorf("native: lora rank %d must be >= 0", lo.Rank)
	case lo.Alpha < 0 || math.IsNaN(lo.Alpha) || math.IsInf(lo.Alpha, 0):
		return s, fmt.Errorf("native: lora alpha %g must be a finite value >= 0", lo.Alpha)
	case !(lo.Dropout >= 0 && lo.Dropout < 1):
		return s, fmt.Errorf("native: lora dropout %g must be in [0, 1)", lo.Dropout)
	case len(lo.Targets) == 0:
		return s, fmt.Errorf("native: lora rank %d with no targets (want some of q, k, v, o, gate, up, down)", lo.Rank)
	}
	for _, name := range lo.Targets {
		t, err := parseTarget(name, c.swiglu())
		if err != nil {
			return s, err
		}
		s.on[t] = true
	}
	alpha := lo.Alpha
	if alpha == 0 {
		alpha = float64(lo.Rank)
	}
	s.scale = float32(alpha / float64(lo.Rank))
	return s, nil
}

// loraActs is what an adapter keeps from Forward for Backward: us =
// scale·(dropout(x)·A), [n, r].
type loraActs struct{ us []float32 }

// dropKey is the key of one adapter's dropout mask in one training
// Forward: the model's seed, the Forward's number, the layer and the
// target, mixed.
func dropKey(seed, step uint64, layer int, t target) uint64 {
	k := splitmix(seed ^ 0x6c6f7261) // "lora"
	k = splitmix(k ^ step)
	return splitmix(k ^ uint64(layer)<<8 ^ uint64(t))
}

// splitmix is SplitMix64's output function: a bijective mix of 64 bits.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// dropout sets xd = x with each value zeroed when its draw (element i of
// the [n, in] input, keyed by key: dropped) falls below p, the others
// scaled by 1/(1-p). The mask depends only on key and i, so the backward
// pass (and a recomputed forward) draws the same one again.
func dropout(pl *pool, xd, x []float32, key uint64, p float64, n, in int) {
	thresh := dropThreshold(p)
	keep := float32(1 / (1 - p))
	fast := dropoutFast
	if KernelName() != "avx512" {
		fast = nil
	}
	pl.chunks(n, rowGrain, func(_, lo, hi int) {
		i, end := lo*in, hi*in
		if fast != nil {
			// Up to a multiple of 4 here (a draw's first element), then
			// blocks of 32 in the vector loop, the rest here.
			for ; i < end && i&3 != 0; i++ {
				if dropped(key, i, thresh) {
					xd[i] = 0
				} else {
					xd[i] = x[i] * keep
				}
			}
			if blocks := (end - i) / 32; blocks > 0 {
				fast(xd[i:], x[i:], key+uint64(i>>2), blocks, thresh, keep)
				i += 32 * blocks
			}
		}
		for i < end {
			// One draw gives the 16-bit uniforms of 4 consecutive
			// elements (a quarter of the hashing).
			h := splitmix(key + uint64(i>>2))
			for ; i < end; i++ {
				if uint32(h>>(16*(i&3)))&0xffff < thresh {
					xd[i] = 0
				} else {
					xd[i] = x[i] * keep
				}
				if i&3 == 3 {
					i++
					break
				}
			}
		}
	})
}

// dropoutFast, where the CPU has it, is dropout's loop over blocks of 32
// elements, the first one a draw's first (dropout_simd_amd64.go): xd[j] =
// 0 or x[j]*keep for j < 32*blocks, element j's draw splitmix(draw0 +
// j/4). It gives the scalar loop's bits.
var dropoutFast func(xd, x []float32, draw0 uint64, blocks int, thresh uint32, keep float32)

// dropThreshold is p in 16 bits: an element is dropped when its 16-bit
// uniform is below it (probability within 2⁻¹⁷ of p).
func dropThreshold(p float64) uint32 { return uint32(math.Round(p * (1 << 16))) }

// dropped reports whether element i of the mask keyed by key is dropped
// (the draw dropout makes, one element at a time).
func dropped(key uint64, i int, thresh uint32) bool {
	return uint32(splitmix(key+uint64(i>>2))>>(16*(i&3)))&0xffff < thresh
}

// SetTraining turns the adapters' dropout on (each Forward then draws new
// masks) or off (the default: Forward, Heads and decoding are then
// deterministic). It changes nothing in a model without dropout.
func (m *Model) SetTraining(on bool) { m.training = on }

// DropoutStep is the number of training Forwards so far, the step whose
// masks the next one draws; SetDropoutStep sets it (a resumed run
// continues its sequence of masks instead of repeating the first ones).
func (m *Model) DropoutStep() uint64 { return m.forwards }

// SetDropoutStep sets the number of training Forwards so far.
func (m *Model) SetDropoutStep(step uint64) { m.forwards = step }

// LoRA returns the model's adapter configuration (Rank 0: none).
func (m *Model) LoRA() LoRAConfig { return m.lora.LoRAConfig }

// MergeLoRA folds every adapter into its base weight, W += (alpha/r)·A·B
// (in the model's [in, out] layout), and sets B to zero, so that the
// model computes the same function (to rounding) with its merged base:
// Params or ParamOutIn then give the weights of a merged model.
//
// A float32 base takes the update with float32 rounding. A base stored in
// bfloat16 is merged in float32 from its stored values and rounded back
// to nearest even: each merged weight is within 2⁻⁸ of |W + ΔW| of the
// exact sum (bfloat16 keeps 8 significant bits), and an update smaller
// than half a bfloat16 step of its weight is lost. A merged model to save
// should rather come from the base checkpoint's own float32 weights plus
// the adapters' update, which never sees that rounding (policy/hf's
// WriteMerged, what --save_merged writes).
func (m *Model) MergeLoRA() error {
	c := m.Config
	if m.lora.Rank == 0 {
		return nil
	}
	for l := range c.Layers {
		for t := range numTargets {
			if ln := m.w.blocks[l].lin(c, t); ln.lora.a != nil && ln.q != nil {
				return fmt.Errorf("native: MergeLoRA: %s is stored in quantized blocks (%s), which an update would have to be quantized into: merge from the base's own weights instead (policy's --save_merged)", targetName(c, t), ln.q.typ)
			}
		}
	}
	var wide []float32 // a bfloat16 base matrix, widened for the merge
	for l := range c.Layers {
		for t := range numTargets {
			ln := m.w.blocks[l].lin(c, t)
			if ln.lora.a == nil {
				continue
			}
			w := ln.w
			if w == nil {
				wide = grow(wide, len(ln.h))
				w = wide
				for i, h := range ln.h {
					w[i] = fromBF16(h)
				}
			}
			r := m.lora.Rank
			as := make([]float32, len(ln.lora.a))
			copy(as, ln.lora.a)
			kern.scale(as, m.lora.scale)
			gemm(m.p, gemmOp{m: ln.in, n: ln.out, k: r, a: as, lda: r, b: ln.lora.b, ldb: ln.out, c: w, ldc: ln.out, acc: true})
			if ln.w == nil {
				cvtBF16Generic(ln.h, w)
			}
			clear(ln.lora.b)
		}
	}
	return nil
}
