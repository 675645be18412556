package native

import (
	"fmt"
	"math/rand/v2"
)

// Param is one named parameter tensor: views into the model's flat
// parameter and gradient arrays (row-major). Names are the checkpoint
// paths of the GoMLX engine, e.g. "/block_0/q/dense/weights".
type Param struct {
	Name  string
	Shape []int
	Data  []float32 // the weights; writes change the model
	Grad  []float32 // accumulated by Backward, cleared by ZeroGrad
}

// Size is the number of elements of Shape.
func (p Param) Size() int {
	n := 1
	for _, d := range p.Shape {
		n *= d
	}
	return n
}

// weights names the slices of one flat array (the parameters, or their
// gradients) in the canonical order listed by paramTable.
type weights struct {
	embed                      []float32 // [V, D]
	blocks                     []blockWeights
	lnFinalGain, lnFinalOffset []float32 // [D]
	lmW, lmB                   []float32 // [D, V], [V]
	valueW, valueB             []float32 // [D, 1], [1]
}

type blockWeights struct {
	lnAttnGain, lnAttnOffset []float32 // [D]
	qW, qB                   []float32 // [D, D], [D]
	kW, kB                   []float32
	vW, vB                   []float32
	outW, outB               []float32
	lnFFNGain, lnFFNOffset   []float32 // [D]
	ffnInW, ffnInB           []float32 // [D, F], [F]
	ffnOutW, ffnOutB         []float32 // [F, D], [D]
}

type paramField struct {
	name  string
	shape []int
	dst   *[]float32
	init  paramInit
}

type paramInit int

const (
	initNormal paramInit = iota // N(0, 0.02²)
	initZero
	initOne
)

// paramTable lists the parameters in their canonical order (the order of
// the flat arrays and of Params), each with the slice of w it binds.
func paramTable(c Config, w *weights) []paramField {
	d, f, v := c.DModel, c.FFN, c.Vocab
	w.blocks = make([]blockWeights, c.Layers)
	t := []paramField{{"/token_embed/embeddings", []int{v, d}, &w.embed, initNormal}}
	for l := range c.Layers {
		b := &w.blocks[l]
		p := fmt.Sprintf("/block_%d/", l)
		dense := func(name string, in, out int, wt, bs *[]float32) {
			t = append(t,
				paramField{p + name + "/dense/weights", []int{in, out}, wt, initNormal},
				paramField{p + name + "/dense/biases", []int{out}, bs, initZero})
		}
		norm := func(name string, g, o *[]float32) {
			t = append(t,
				paramField{p + name + "/layer_normalization/gain", []int{d}, g, initOne},
				paramField{p + name + "/layer_normalization/offset", []int{d}, o, initZero})
		}
		norm("ln_attn", &b.lnAttnGain, &b.lnAttnOffset)
		dense("q", d, d, &b.qW, &b.qB)
		dense("k", d, d, &b.kW, &b.kB)
		dense("v", d, d, &b.vW, &b.vB)
		dense("out", d, d, &b.outW, &b.outB)
		norm("ln_ffn", &b.lnFFNGain, &b.lnFFNOffset)
		dense("ffn_in", d, f, &b.ffnInW, &b.ffnInB)
		dense("ffn_out", f, d, &b.ffnOutW, &b.ffnOutB)
	}
	return append(t,
		paramField{"/ln_final/layer_normalization/gain", []int{d}, &w.lnFinalGain, initOne},
		paramField{"/ln_final/layer_normalization/offset", []int{d}, &w.lnFinalOffset, initZero},
		paramField{"/lm_head/dense/weights", []int{d, v}, &w.lmW, initNormal},
		paramField{"/lm_head/dense/biases", []int{v}, &w.lmB, initZero},
		paramField{"/value_head/dense/weights", []int{d, 1}, &w.valueW, initNormal},
		paramField{"/value_head/dense/biases", []int{1}, &w.valueB, initZero},
	)
}

// bind points the slices of w into flat, in table order, and returns the
// total size (flat may be nil to only count).
func bind(c Config, w *weights, flat []float32) (int, []paramField) {
	t := paramTable(c, w)
	off := 0
	for _, p := range t {
		n := 1
		for _, s := range p.shape {
			n *= s
		}
		if flat != nil {
			*p.dst = flat[off : off+n : off+n]
		}
		off += n
	}
	return off, t
}

// initParams fills the parameters deterministically from seed: weights
// N(0, 0.02²), biases and LayerNorm offsets 0, LayerNorm gains 1.
func initParams(t []paramField, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x6d6c65726c))
	for _, p := range t {
		s := *p.dst
		switch p.init {
		case initNormal:
			for i := range s {
				s[i] = float32(0.02 * r.NormFloat64())
			}
		case initZero:
			clear(s)
		case initOne:
			for i := range s {
				s[i] = 1
			}
		}
	}
}
