package hf

import (
	"fmt"
	"math"
)

// Reference is the slow, obvious forward pass of a checkpoint in float64,
// written to be read beside transformers' modeling_llama.py: one function
// per step, loops instead of kernels, no cache. Engines test against it
// (as llm.c's test_gpt2.c tests against PyTorch); it is not for serving.
type Reference struct {
	Arch *Arch
	w    map[string][]float64 // every tensor, row-major, in the file's shape
	inv  []float64
	lora *Adapter
}

// NewReference reads every tensor of w into float64 (exactly: bf16 and
// f16 values are representable). ad, when not nil, is applied as
// transformers+PEFT do: y = W x + (alpha/r) B (A x) on its target modules.
func NewReference(a *Arch, w Tensors, ad *Adapter) (*Reference, error) {
	if err := a.CheckTensors(w); err != nil {
		return nil, err
	}
	r := &Reference{Arch: a, w: map[string][]float64{}, inv: InvFreq(a), lora: ad}
	for n := range a.ExpectedTensors() {
		v, _, err := w.Float32(n)
		if err != nil {
			return nil, err
		}
		d := make([]float64, len(v))
		for i, x := range v {
			d[i] = float64(x)
		}
		r.w[n] = d
	}
	if ad != nil {
		if err := ad.Check(a); err != nil {
			return nil, err
		}
		for p, m := range ad.Modules {
			r.w[p+".lora_A"], r.w[p+".lora_B"] = toF64(m.A), toF64(m.B)
		}
	}
	return r, nil
}

// ReferenceLogits opens nothing and caches nothing: it runs
// [NewReference] on the checkpoint and returns the logits of every
// position of tokens, [len(tokens)][VocabSize].
func ReferenceLogits(c *Checkpoint, tokens []int) ([][]float64, error) {
	r, err := NewReference(c.Arch, c.Weights, nil)
	if err != nil {
		return nil, err
	}
	return r.Logits(tokens)
}

// Logits runs the model on one sequence (positions 0..len-1) and returns
// the logits of every position.
func (r *Reference) Logits(tokens []int) ([][]float64, error) {
	a := r.Arch
	T, H := len(tokens), a.HiddenSize
	x := make([][]float64, T)
	emb := r.w["model.embed_tokens.weight"]
	for t, id := range tokens {
		if id < 0 || id >= a.VocabSize {
			return nil, fmt.Errorf("token %d at position %d is outside the vocabulary of %d", id, t, a.VocabSize)
		}
		x[t] = append([]float64(nil), emb[id*H:(id+1)*H]...)
	}
	for l := range a.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", l)
		h := make([][]float64, T)
		for t := range x {
			h[t] = rmsNorm(x[t], r.w[p+"input_layernorm.weight"], a.RMSNormEps)
		}
		att := r.attention(p, h)
		for t := range x {
			addTo(x[t], att[t])
			h[t] = rmsNorm(x[t], r.w[p+"post_attention_layernorm.weight"], a.RMSNormEps)
			addTo(x[t], r.mlp(p, h[t]))
		}
	}
	head := r.w["lm_head.weight"]
	if a.TieWordEmbeddings {
		head = emb
	}
	out := make([][]float64, T)
	for t := range x {
		out[t] = matVec(head, rmsNorm(x[t], r.w["model.norm.weight"], a.RMSNormEps), a.VocabSize, H)
	}
	return out, nil
}

// linear is y = W x (+ b) (+ LoRA's (alpha/r) B A x) for the module at
// path ("model.layers.0.self_attn.q_proj"), W [out, in].
func (r *Reference) linear(path string, x []float64, out int) []float64 {
	y := matVec(r.w[path+".weight"], x, out, len(x))
	if b, ok := r.w[path+".bias"]; ok {
		addTo(y, b)
	}
	if r.lora != nil {
		if A, ok := r.w[path+".lora_A"]; ok {
			ax := matVec(A, x, r.lora.R, len(x))
			bax := matVec(r.w[path+".lora_B"], ax, out, r.lora.R)
			s := r.lora.Scale()
			for i := range y {
				y[i] += s * bax[i]
			}
		}
	}
	return y
}

// attention is causal grouped-query self-attention over the sequence h:
// q, k, v projections (+ biases), per-head RMSNorm of q and k (Qwen3),
// RoPE, softmax(q k / sqrt(head_dim)) over positions <= t, o_proj.
func (r *Reference) attention(p string, h [][]float64) [][]float64 {
	a := r.Arch
	T, hd := len(h), a.HeadDim
	q := make([][]float64, T)
	k := make([][]float64, T)
	v := make([][]float64, T)
	for t := range h {
		q[t] = r.linear(p+"self_attn.q_proj", h[t], a.QDim())
		k[t] = r.linear(p+"self_attn.k_proj", h[t], a.KVDim())
		v[t] = r.linear(p+"self_attn.v_proj", h[t], a.KVDim())
		if a.QKNorm {
			for i := range a.NumHeads {
				copy(q[t][i*hd:], rmsNorm(q[t][i*hd:(i+1)*hd], r.w[p+"self_attn.q_norm.weight"], a.RMSNormEps))
			}
			for i := range a.NumKVHeads {
				copy(k[t][i*hd:], rmsNorm(k[t][i*hd:(i+1)*hd], r.w[p+"self_attn.k_norm.weight"], a.RMSNormEps))
			}
		}
		for i := range a.NumHeads {
			rope(q[t][i*hd:(i+1)*hd], t, r.inv)
		}
		for i := range a.NumKVHeads {
			rope(k[t][i*hd:(i+1)*hd], t, r.inv)
		}
	}
	group := a.NumHeads / a.NumKVHeads
	scale := 1 / math.Sqrt(float64(hd))
	out := make([][]float64, T)
	for t := range h {
		ctx := make([]float64, a.QDim())
		for i := range a.NumHeads {
			kv := i / group // query head i reads key/value head i/group
			qi := q[t][i*hd : (i+1)*hd]
			scores := make([]float64, t+1)
			top := math.Inf(-1)
			for s := 0; s <= t; s++ {
				scores[s] = dot(qi, k[s][kv*hd:(kv+1)*hd]) * scale
				top = math.Max(top, scores[s])
			}
			sum := 0.0
			for s := range scores {
				scores[s] = math.Exp(scores[s] - top)
				sum += scores[s]
			}
			for s := range scores {
				w := scores[s] / sum
				for j := range hd {
					ctx[i*hd+j] += w * v[s][kv*hd+j]
				}
			}
		}
		out[t] = r.linear(p+"self_attn.o_proj", ctx, a.HiddenSize)
	}
	return out
}

// mlp is SwiGLU: down(silu(gate x) * up x).
func (r *Reference) mlp(p string, x []float64) []float64 {
	I := r.Arch.IntermediateSize
	g := r.linear(p+"mlp.gate_proj", x, I)
	u := r.linear(p+"mlp.up_proj", x, I)
	for i := range g {
		g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
	}
	return r.linear(p+"mlp.down_proj", g, r.Arch.HiddenSize)
}

// rmsNorm is x / sqrt(mean(x^2) + eps) * w.
func rmsNorm(x, w []float64, eps float64) []float64 {
	ss := 0.0
	for _, v := range x {
		ss += v * v
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+eps)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v * inv * w[i]
	}
	return out
}

// rope rotates one head's vector in place at position pos, in
// transformers' rotate_half layout: dimension i pairs with i + d/2, both
// at frequency inv[i]: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin).
func rope(x []float64, pos int, inv []float64) {
	half := len(x) / 2
	for i := range half {
		c, s := math.Cos(float64(pos)*inv[i]), math.Sin(float64(pos)*inv[i])
		x1, x2 := x[i], x[i+half]
		x[i] = x1*c - x2*s
		x[i+half] = x2*c + x1*s
	}
}

// matVec is W x for W row-major [rows, cols].
func matVec(w, x []float64, rows, cols int) []float64 {
	y := make([]float64, rows)
	for i := range rows {
		y[i] = dot(w[i*cols:(i+1)*cols], x)
	}
	return y
}

func dot(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

func addTo(dst, src []float64) {
	for i := range dst {
		dst[i] += src[i]
	}
}

func toF64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// Greedy extends prompt by n tokens, each the argmax of the last
// position's logits (lowest id on ties), without stopping at EOS: what
// transformers' generate(do_sample=False) gives when no EOS comes.
func (r *Reference) Greedy(prompt []int, n int) ([]int, error) {
	seq := append([]int(nil), prompt...)
	for range n {
		logits, err := r.Logits(seq)
		if err != nil {
			return nil, err
		}
		last := logits[len(logits)-1]
		best := 0
		for i, v := range last {
			if v > last[best] {
				best = i
			}
		}
		seq = append(seq, best)
	}
	return seq[len(prompt):], nil
}
