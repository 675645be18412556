package native

import (
	"fmt"
	"math"
)

// Model is the transformer: its parameters and gradients as two flat
// arrays with named views (w, g), and the activations of the last Forward
// kept for Heads and Backward. A Model is not safe for concurrent use.
type Model struct {
	Config Config // resolved: FFN and RoPEBase filled in
	// DetachValue keeps the value head's gradient out of the trunk (and
	// the final LayerNorm): only the value head learns from dValues.
	DetachValue bool

	// bf16 rounds the inputs of the dense layers' and (heads of at least
	// attnBF16MinHead values) the attention's training products to
	// bfloat16 (SetMatmul; bf16.go). Decoding is float32 either way.
	bf16 bool

	data, grad []float32 // every parameter, then every gradient, in Params order
	w, g       weights   // named views into data and grad
	table      []paramField
	gtable     []paramField
	cos, sin   []float32 // RoPE tables [Ctx, HeadDim/2]

	p    *pool
	ln1  bf16Input // a layer's ln1 converted once for its q, k and v products (bf16)
	acts activations
	head headState
	back backState
	dec  decodeState
}

// New builds a model with deterministic initial weights drawn from seed
// (weights N(0, 0.02²), biases 0, LayerNorm gain 1 and offset 0).
func New(cfg Config, seed uint64) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := selectKernels(); err != nil {
		return nil, err
	}
	cfg = cfg.resolved()
	m := &Model{Config: cfg, p: workers()}
	n, _ := bind(cfg, &m.w, nil)
	m.data, m.grad = make([]float32, n), make([]float32, n)
	_, m.table = bind(cfg, &m.w, m.data)
	_, m.gtable = bind(cfg, &m.g, m.grad)
	initParams(m.table, seed)
	m.cos, m.sin = ropeTables(cfg.Ctx, cfg.HeadDim(), cfg.RoPEBase)
	return m, nil
}

// Params lists every parameter tensor in the canonical order, as views
// into the model (load weights by writing Data).
func (m *Model) Params() []Param {
	ps := make([]Param, len(m.table))
	for i, f := range m.table {
		ps[i] = Param{Name: f.name, Shape: append([]int(nil), f.shape...), Data: *f.dst, Grad: *m.gtable[i].dst}
	}
	return ps
}

// NumParams is the number of scalar parameters.
func (m *Model) NumParams() int { return len(m.data) }

// ZeroGrad clears every gradient.
func (m *Model) ZeroGrad() { clear(m.grad) }

// Batch is B rows of S tokens, flattened row-major. Positions are the
// RoPE positions (restarting at 0 for each example packed in a row);
// Segments number the examples of a row 1, 2, ... and mark padding with 0.
// A token attends the earlier tokens of its row with the same segment.
//
// Prefix, when not nil, names per position a segment of the same row
// that the position also attends to, all of it (0: none): a prompt
// packed once and shared by several continuations (tree attention).
// Every position of a segment names the same prefix; a prefix lies wholly
// before the segments that name it and has no prefix itself.
type Batch struct {
	B, S      int
	Tokens    []int32
	Positions []int32
	Segments  []int32
	Prefix    []int32
}

// activations is what Forward keeps for Heads and Backward.
type activations struct {
	b      Batch
	n      int     // real (non-padding) tokens
	slot   []int32 // [B*S]: flat position -> compact row, -1 for padding
	tokens []int32 // [n] per compact row
	pos    []int32
	groups []group
	// families lists, per group without a prefix, that group and then
	// every group that names it as its prefix (indices into groups).
	families [][]int32
	famBuf   []int32
	packs    prefixPacks // scratch for attention: the prefixes' keys, then values, packed
	x        [][]float32 // Layers+1 residual streams [n, D]; x[l] enters block l
	blocks   []blockActs
}

type blockActs struct {
	ln1, ln1Mean, ln1Rstd []float32 // LayerNorm before attention
	q, k, v               []float32 // [n, D], q and k after RoPE
	att                   []float32 // attention output before the out projection
	probs                 []float32 // softmax weights per group and head
	mid                   []float32 // x + attention
	ln2, ln2Mean, ln2Rstd []float32 // LayerNorm before the FFN
	pre, act              []float32 // [n, F] FFN hidden before and after GELU
}

// Forward runs the trunk (embedding and blocks) on b, keeping the
// activations Heads and Backward need. Padding positions are skipped.
func (m *Model) Forward(b Batch) error {
	if err := m.layout(b); err != nil {
		return err
	}
	c, a, p := m.Config, &m.acts, m.p
	n, d, f, dh := a.n, c.DModel, c.FFN, c.HeadDim()
	embeddingForward(a.x[0], m.w.embed, a.tokens, d)
	for l := range c.Layers {
		w, ba := &m.w.blocks[l], &a.blocks[l]
		x := a.x[l]
		layerNormForward(p, ba.ln1, ba.ln1Mean, ba.ln1Rstd, x, w.lnAttnGain, w.lnAttnOffset, n, d)
		xa := shareBF16A(p, &m.ln1, m.bf16, false, ba.ln1, d, n, d)
		denseShared(p, m.bf16, xa, ba.q, ba.ln1, w.qW, w.qB, n, d, d)
		denseShared(p, m.bf16, xa, ba.k, ba.ln1, w.kW, w.kB, n, d, d)
		denseShared(p, m.bf16, xa, ba.v, ba.ln1, w.vW, w.vB, n, d, d)
		ropeForward(p, ba.q, a.pos, n, c.Heads, dh, m.cos, m.sin, false)
		ropeForward(p, ba.k, a.pos, n, c.Heads, dh, m.cos, m.sin, false)
		attentionForward(p, ba.att, ba.probs, ba.q, ba.k, ba.v, a.groups, a.prefixPacks(), c.Heads, dh, m.bf16)
		denseForward(p, m.bf16, ba.mid, ba.att, w.outW, w.outB, x, n, d, d)
		layerNormForward(p, ba.ln2, ba.ln2Mean, ba.ln2Rstd, ba.mid, w.lnFFNGain, w.lnFFNOffset, n, d)
		denseForward(p, m.bf16, ba.pre, ba.ln2, w.ffnInW, w.ffnInB, nil, n, d, f)
		geluForward(p, ba.act, ba.pre)
		denseForward(p, m.bf16, a.x[l+1], ba.act, w.ffnOutW, w.ffnOutB, ba.mid, n, f, d)
	}
	return nil
}

// layout checks b and lays its real tokens out compactly, each example
// contiguous, and sizes the activation buffers.
func (m *Model) layout(b Batch) error {
	c, a := m.Config, &m.acts
	size := b.B * b.S
	if b.B <= 0 || b.S <= 0 {
		return fmt.Errorf("native: batch shape %dx%d must be positive", b.B, b.S)
	}
	if len(b.Tokens) != size || len(b.Positions) != size || len(b.Segments) != size {
		return fmt.Errorf("native: batch %dx%d needs %d tokens, positions and segments (got %d, %d, %d)",
			b.B, b.S, size, len(b.Tokens), len(b.Positions), len(b.Segments))
	}
	if b.Prefix != nil && len(b.Prefix) != size {
		return fmt.Errorf("native: batch %dx%d needs %d prefix ids (got %d)", b.B, b.S, size, len(b.Prefix))
	}
	a.b = b
	a.slot = growInt32(a.slot, size)
	a.tokens, a.pos, a.groups = a.tokens[:0], a.pos[:0], a.groups[:0]
	probs := 0
	var seen []int32 // this row's segments, in order of their groups
	for r := range b.B {
		row := r * b.S
		seen = seen[:0]
		first := len(a.groups) // this row's first group
		for j := range b.S {
			s := b.Segments[row+j]
			if s < 0 {
				return fmt.Errorf("native: segment %d at row %d, column %d is negative", s, r, j)
			}
			if s == 0 {
				a.slot[row+j] = -1
				if b.Prefix != nil && b.Prefix[row+j] != 0 {
					return fmt.Errorf("native: padding at row %d, column %d names prefix %d", r, j, b.Prefix[row+j])
				}
			}
			if s == 0 || containsInt32(seen, s) {
				continue
			}
			seen = append(seen, s)
			g := group{start: len(a.tokens), off: probs, prefix: -1}
			var pre int32
			if b.Prefix != nil {
				pre = b.Prefix[row+j]
			}
			if pre != 0 {
				at := indexInt32(seen, pre)
				if at < 0 || pre == s {
					return fmt.Errorf("native: segment %d at row %d, column %d names prefix %d, which is not an earlier segment of the row", s, r, j, pre)
				}
				g.prefix = first + at
				if a.groups[g.prefix].prefix >= 0 {
					return fmt.Errorf("native: segment %d at row %d names prefix %d, which has a prefix itself", s, r, pre)
				}
			}
			for jj := j; jj < b.S; jj++ {
				if b.Segments[row+jj] == pre && pre != 0 {
					return fmt.Errorf("native: prefix %d at row %d, column %d is not wholly before segment %d (column %d)", pre, r, jj, s, j)
				}
				if b.Segments[row+jj] != s {
					continue
				}
				if b.Prefix != nil && b.Prefix[row+jj] != pre {
					return fmt.Errorf("native: segment %d at row %d names prefixes %d and %d (column %d)", s, r, pre, b.Prefix[row+jj], jj)
				}
				t, ps := b.Tokens[row+jj], b.Positions[row+jj]
				if t < 0 || int(t) >= c.Vocab {
					return fmt.Errorf("native: token %d at row %d, column %d is outside the vocabulary [0, %d)", t, r, jj, c.Vocab)
				}
				if ps < 0 || int(ps) >= c.Ctx {
					return fmt.Errorf("native: position %d at row %d, column %d is outside [0, ctx %d)", ps, r, jj, c.Ctx)
				}
				a.slot[row+jj] = int32(len(a.tokens))
				a.tokens, a.pos = append(a.tokens, t), append(a.pos, ps)
			}
			g.n = len(a.tokens) - g.start
			np := 0
			if g.prefix >= 0 {
				np = a.groups[g.prefix].n
			}
			probs += c.Heads * g.n * (np + g.n)
			a.groups = append(a.groups, g)
		}
	}
	m.buildFamilies()
	n, d, f := len(a.tokens), c.DModel, c.FFN
	a.n = n
	if len(a.x) != c.Layers+1 {
		a.x, a.blocks = make([][]float32, c.Layers+1), make([]blockActs, c.Layers)
	}
	for l := range a.x {
		a.x[l] = grow(a.x[l], n*d)
	}
	for l := range a.blocks {
		ba := &a.blocks[l]
		for _, s := range []*[]float32{&ba.ln1, &ba.q, &ba.k, &ba.v, &ba.att, &ba.mid, &ba.ln2} {
			*s = grow(*s, n*d)
		}
		for _, s := range []*[]float32{&ba.ln1Mean, &ba.ln1Rstd, &ba.ln2Mean, &ba.ln2Rstd} {
			*s = grow(*s, n)
		}
		ba.pre, ba.act = grow(ba.pre, n*f), grow(ba.act, n*f)
		ba.probs = grow(ba.probs, probs)
	}
	return nil
}

// buildFamilies groups the groups for the attention's backward pass: each
// group without a prefix, followed by the groups that name it.
func (m *Model) buildFamilies() {
	a := &m.acts
	a.famBuf = growInt32(a.famBuf, len(a.groups))[:0]
	a.families = a.families[:0]
	for i, g := range a.groups {
		if g.prefix >= 0 {
			continue
		}
		at := len(a.famBuf)
		a.famBuf = append(a.famBuf, int32(i))
		// Continuations follow their prefix within its row.
		for j := i + 1; a.b.Prefix != nil && j < len(a.groups); j++ {
			if a.groups[j].prefix == i {
				a.famBuf = append(a.famBuf, int32(j))
			}
		}
		a.families = append(a.families, a.famBuf[at:len(a.famBuf):len(a.famBuf)])
	}
	// Where each prefix's packed panels go (per head: packSize values).
	a.packs.offs = a.packs.offs[:0]
	if a.b.Prefix == nil {
		a.packs.offs = nil
		return
	}
	for range a.groups {
		a.packs.offs = append(a.packs.offs, -1)
	}
	off := 0
	for _, fam := range a.families {
		if len(fam) > 1 {
			a.packs.offs[fam[0]] = off
			off += m.Config.Heads * packSize(a.groups[fam[0]], m.Config.HeadDim())
		}
	}
}

// prefixPacks is the attention's packed-prefix scratch, nil for a batch
// without prefixes.
func (a *activations) prefixPacks() *prefixPacks {
	if a.packs.offs == nil {
		return nil
	}
	return &a.packs
}

func indexInt32(s []int32, v int32) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

func containsInt32(s []int32, v int32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// headState holds the heads' inputs and outputs at the positions asked for.
type headState struct {
	rows         []int32   // compact rows of the positions
	in, h        []float32 // [K, D]: final residual rows, after LayerNorm
	mean, rstd   []float32
	logits       []float32 // [K, V]
	values       []float32 // [K]
	dh, dIn      []float32 // [K, D] gradients
	nll          []float32 // [K] per-position losses of CrossEntropy
	part         []float32
	lossRowsDone int
}

// headsInput gathers the final residual rows at flat positions idx and
// applies the final LayerNorm.
func (m *Model) headsInput(idx []int32) error {
	a, hs, d := &m.acts, &m.head, m.Config.DModel
	if a.n == 0 && len(a.slot) == 0 {
		return fmt.Errorf("native: Heads before Forward")
	}
	k := len(idx)
	hs.rows = growInt32(hs.rows, k)
	for i, at := range idx {
		if at < 0 || int(at) >= len(a.slot) || a.slot[at] < 0 {
			return fmt.Errorf("native: head position %d (entry %d) is not a real token of the last batch (padding or outside [0, %d))", at, i, len(a.slot))
		}
		hs.rows[i] = a.slot[at]
	}
	hs.in, hs.h = grow(hs.in, k*d), grow(hs.h, k*d)
	hs.mean, hs.rstd = grow(hs.mean, k), grow(hs.rstd, k)
	x := a.x[m.Config.Layers]
	for i, r := range hs.rows {
		copy(hs.in[i*d:(i+1)*d], x[int(r)*d:])
	}
	layerNormForward(m.p, hs.h, hs.mean, hs.rstd, hs.in, m.w.lnFinalGain, m.w.lnFinalOffset, k, d)
	return nil
}

// Heads applies the final LayerNorm, the LM head and the value head at
// flat positions idx (into the last Forward's B*S; each must be a real
// token). It returns logits [len(idx)*Vocab] and values [len(idx)], owned
// by the model and valid until the next call of Heads, CrossEntropy or
// Backward.
func (m *Model) Heads(idx []int32) (logits, values []float32, err error) {
	if err := m.headsInput(idx); err != nil {
		return nil, nil, err
	}
	hs, c := &m.head, m.Config
	k, d, v := len(idx), c.DModel, c.Vocab
	hs.logits = grow(hs.logits, k*v)
	denseForward(m.p, m.bf16, hs.logits, hs.h, m.w.lmW, m.w.lmB, nil, k, d, v)
	hs.values = grow(hs.values, k)
	for i := range k {
		hs.values[i] = kern.dot(hs.h[i*d:(i+1)*d], m.w.valueW) + m.w.valueB[0]
	}
	return hs.logits, hs.values, nil
}

// backState holds the gradient buffers of Backward.
type backState struct {
	dx                    []float32 // [n, D] gradient of the current residual stream
	dLn, dAtt, dq, dk, dv []float32 // [n, D]
	dAct                  []float32 // [n, F]
	part                  []float32
}

// Backward adds to every parameter's gradient the gradient of a loss
// whose derivatives with respect to the heads' outputs at idx are dLogits
// [len(idx)*Vocab] and dValues [len(idx)] (either may be nil: zero). It
// uses the activations of the last Forward; idx may repeat positions.
func (m *Model) Backward(idx []int32, dLogits, dValues []float32) error {
	c := m.Config
	k := len(idx)
	if dLogits != nil && len(dLogits) != k*c.Vocab {
		return fmt.Errorf("native: dLogits has %d values, want %d (positions) x %d (vocab)", len(dLogits), k, c.Vocab)
	}
	if dValues != nil && len(dValues) != k {
		return fmt.Errorf("native: dValues has %d values, want %d", len(dValues), k)
	}
	if err := m.headsInput(idx); err != nil {
		return err
	}
	m.backwardHeads(dLogits, dValues)
	m.backwardTrunk()
	return nil
}

// backwardHeads runs the heads backward from dLogits and dValues (for the
// rows gathered by headsInput) and leaves the gradient of the final
// residual stream in m.back.dx.
func (m *Model) backwardHeads(dLogits, dValues []float32) {
	c, hs, bs, a := m.Config, &m.head, &m.back, &m.acts
	k, d, v := len(hs.rows), c.DModel, c.Vocab
	hs.dh = grow(hs.dh, k*d)
	clear(hs.dh)
	if dLogits != nil {
		denseBackward(m.p, m.bf16, hs.dh, m.g.lmW, m.g.lmB, dLogits, hs.h, m.w.lmW, k, d, v, false)
	}
	if dValues != nil {
		for i, g := range dValues {
			if !m.DetachValue {
				kern.axpy(hs.dh[i*d:(i+1)*d], g, m.w.valueW)
			}
			kern.axpy(m.g.valueW, g, hs.h[i*d:])
			m.g.valueB[0] += g
		}
	}
	hs.dIn = grow(hs.dIn, k*d)
	clear(hs.dIn)
	hs.part = layerNormBackward(m.p, hs.dIn, m.g.lnFinalGain, m.g.lnFinalOffset, hs.dh, hs.in, hs.mean, hs.rstd, m.w.lnFinalGain, k, d, hs.part)
	bs.dx = grow(bs.dx, a.n*d)
	clear(bs.dx)
	for i, r := range hs.rows {
		kern.axpy(bs.dx[int(r)*d:int(r)*d+d], 1, hs.dIn[i*d:])
	}
}

// backwardTrunk runs the blocks backward (last to first) and the
// embedding, from the gradient of the final residual stream in m.back.dx.
func (m *Model) backwardTrunk() {
	c, a, bs, p := m.Config, &m.acts, &m.back, m.p
	n, d, f, dh := a.n, c.DModel, c.FFN, c.HeadDim()
	for _, s := range []*[]float32{&bs.dLn, &bs.dAtt, &bs.dq, &bs.dk, &bs.dv} {
		*s = grow(*s, n*d)
	}
	bs.dAct = grow(bs.dAct, n*f)
	dx := bs.dx
	for l := c.Layers - 1; l >= 0; l-- {
		w, g, ba := &m.w.blocks[l], &m.g.blocks[l], &a.blocks[l]
		// FFN: x_out = mid + gelu(ln2(mid)·W_in + b_in)·W_out + b_out.
		denseBackward(p, m.bf16, bs.dAct, g.ffnOutW, g.ffnOutB, dx, ba.act, w.ffnOutW, n, f, d, false)
		geluBackward(p, bs.dAct, bs.dAct, ba.pre)
		denseBackward(p, m.bf16, bs.dLn, g.ffnInW, g.ffnInB, bs.dAct, ba.ln2, w.ffnInW, n, d, f, false)
		bs.part = layerNormBackward(p, dx, g.lnFFNGain, g.lnFFNOffset, bs.dLn, ba.mid, ba.ln2Mean, ba.ln2Rstd, w.lnFFNGain, n, d, bs.part)
		// Attention: mid = x + attn(ln1(x))·W_out + b_out.
		denseBackward(p, m.bf16, bs.dAtt, g.outW, g.outB, dx, ba.att, w.outW, n, d, d, false)
		attentionBackward(p, bs.dq, bs.dk, bs.dv, bs.dAtt, ba.probs, ba.q, ba.k, ba.v, a.groups, a.families, a.prefixPacks(), c.Heads, dh, n, m.bf16)
		ropeForward(p, bs.dq, a.pos, n, c.Heads, dh, m.cos, m.sin, true)
		ropeForward(p, bs.dk, a.pos, n, c.Heads, dh, m.cos, m.sin, true)
		xta := shareBF16A(p, &m.ln1, m.bf16, true, ba.ln1, d, d, n)
		denseBackwardShared(p, m.bf16, xta, bs.dLn, g.qW, g.qB, bs.dq, ba.ln1, w.qW, n, d, d, false)
		denseBackwardShared(p, m.bf16, xta, bs.dLn, g.kW, g.kB, bs.dk, ba.ln1, w.kW, n, d, d, true)
		denseBackwardShared(p, m.bf16, xta, bs.dLn, g.vW, g.vB, bs.dv, ba.ln1, w.vW, n, d, d, true)
		bs.part = layerNormBackward(p, dx, g.lnAttnGain, g.lnAttnOffset, bs.dLn, a.x[l], ba.ln1Mean, ba.ln1Rstd, w.lnAttnGain, n, d, bs.part)
	}
	embeddingBackward(m.g.embed, dx, a.tokens, d)
}

func sqrt(x float64) float64 { return math.Sqrt(x) }
