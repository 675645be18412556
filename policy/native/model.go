package native

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// Model is the transformer: its parameters and gradients as flat arrays
// with named views (w, g), and the activations of the last Forward kept
// for Heads and Backward. A Model is not safe for concurrent use.
type Model struct {
	Config Config // resolved: FFN, RoPEBase, KVHeads, HeadSize, Norm, NormEps and FFNKind filled in
	// DetachValue keeps the value head's gradient out of the trunk (and
	// the final norm): only the value head learns from dValues.
	DetachValue bool
	// Recompute keeps only each block's input during Forward; the
	// backward pass recomputes a block's activations from it just before
	// the block's own backward (bit for bit the same ones: the gradients
	// do not change). Set it before Forward; Options.Recompute sets it at
	// New.
	Recompute bool

	// bf16 rounds the inputs of the dense layers' and (heads of at least
	// attnBF16MinHead values) the attention's training products to
	// bfloat16 (SetMatmul; bf16.go). Decoding is float32 either way.
	bf16 bool
	// int8 quantizes the input of products of at most gemmSmallM rows
	// with quantized blocks to int8 (SetQuantActivations; quant8.go).
	int8 bool

	// data and grad hold every trainable parameter and its gradient, in
	// Params order; frozen, half and quants the frozen ones (a LoRA
	// model's base), in float32, bfloat16 and quantized blocks.
	data, grad []float32
	frozen     []float32
	half       []uint16
	quants     []*qmat
	w, g       weights // named views into the storage and into grad
	table      []paramField
	gtable     []paramField
	byName     map[string]int
	cos, sin   []float32 // RoPE tables [Ctx, HeadDim/2]

	lora     loraSet
	seed     uint64 // New's: dropout masks are drawn from it
	training bool   // SetTraining: dropout on
	forwards uint64 // training Forwards so far: each draws its own masks

	p    *pool
	ln1  bf16Input // a layer's ln1 converted once for its q, k and v products (bf16)
	acts activations
	head headState
	back backState
	dec  decodeState
}

// New builds a model with deterministic initial weights drawn from seed
// (weights N(0, 0.02²), biases 0, norm gains 1 and offsets 0), every
// weight trainable.
func New(cfg Config, seed uint64) (*Model, error) {
	return NewWithOptions(cfg, Options{}, seed)
}

// NewWithOptions is New with adapters, a frozen base's storage and
// recomputation chosen by opt. The base's initial weights are the same
// as New's for the same seed; adapters' A are drawn after them and their
// B are zero.
func NewWithOptions(cfg Config, opt Options, seed uint64) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := selectKernels(); err != nil {
		return nil, err
	}
	cfg = cfg.resolved()
	lo, err := resolveLoRA(cfg, opt.LoRA)
	if err != nil {
		return nil, err
	}
	frozen := lo.Rank > 0 || opt.Frozen
	plan, err := resolveBaseStorage(opt, frozen)
	if err != nil {
		return nil, err
	}
	m := &Model{Config: cfg, p: workers(), lora: lo, seed: seed, Recompute: opt.Recompute, byName: map[string]int{}}
	m.table = paramTable(cfg, lo, &m.w)
	m.gtable = paramTable(cfg, lo, &m.g)
	for i, f := range m.table {
		m.byName[f.name] = i
	}
	for name := range plan.by {
		if i, ok := m.byName[name]; !ok || m.table[i].half == nil || m.table[i].role != roleBase {
			return nil, fmt.Errorf("native: matrix storage names %q, which is not a base matrix of this model", name)
		}
	}
	st, err := allocate(m.table, m.gtable, plan)
	if err != nil {
		return nil, err
	}
	m.data, m.grad, m.frozen, m.half, m.quants = st.data, st.grad, st.frozen, st.half, st.quants
	initParams(m.table, seed, opt.LoadedBase)
	m.cos, m.sin = ropeTables(cfg)
	if len(m.half) > 0 {
		// A bfloat16 base is meant for bf16 products; float32 ones would
		// widen every weight at every product.
		m.bf16 = true
	}
	return m, nil
}

// resolveBaseStorage checks how a base is stored (Options.BaseStorage:
// fp32, bf16 or a quantized format, "" being fp32; MatrixStorage per
// matrix) and returns the plan; anything but fp32 needs a frozen base.
func resolveBaseStorage(opt Options, frozen bool) (basePlan, error) {
	plan := basePlan{frozen: frozen, by: map[string]string{}}
	parse := func(what, mode string) (string, error) {
		if t, ok := parseQuant(mode); ok {
			return t.String(), nil
		}
		half, err := parsePrecision(what, mode)
		if err != nil {
			return "", fmt.Errorf("%w (or a quantized storage: %s, %s, %s)", err, StorageQ8_0, StorageQ4_0, StorageQ4_1)
		}
		if half {
			return MatmulBF16, nil
		}
		return MatmulFP32, nil
	}
	var err error
	if plan.def, err = parse("base storage", opt.BaseStorage); err != nil {
		return plan, err
	}
	if t, _ := parseQuant(plan.def); t.raw() != nil {
		return plan, fmt.Errorf("native: base storage %s: a matrix is kept in %s blocks only as a GGUF file stores them (Options.MatrixStorage with LoadedBase); as the storage of every matrix, use %s, %s or %s", plan.def, plan.def, StorageQ8_0, StorageQ4_0, StorageQ4_1)
	}
	for name, mode := range opt.MatrixStorage {
		if plan.by[name], err = parse("storage of "+name, mode); err != nil {
			return plan, err
		}
		if t, _ := parseQuant(plan.by[name]); t.raw() != nil && !opt.LoadedBase {
			return plan, fmt.Errorf("native: storage of %s: %s blocks come only from a loaded base (Options.LoadedBase, SetParamBlocks); they cannot be quantized from float32 values", name, plan.by[name])
		}
	}
	if !frozen {
		for _, s := range append([]string{plan.def}, slices.Collect(maps.Values(plan.by))...) {
			if s != MatmulFP32 {
				return plan, fmt.Errorf("native: base storage %q needs a frozen base (LoRA adapters, or Options.Frozen): a trained weight keeps float32", s)
			}
		}
	}
	return plan, nil
}

// BaseStorage reports how the model keeps its base matrices: "bf16",
// "fp32", a quantized format (q8_0, q4_0, q4_1), or where they differ
// (a GGUF file's tensors kept as stored) their formats joined by "+"
// in table order ("q8_0+q4_1").
func (m *Model) BaseStorage() string {
	var kinds []string
	for _, f := range m.table {
		if f.role != roleBase || f.half == nil {
			continue
		}
		k := MatmulFP32
		switch {
		case f.qmat() != nil:
			k = f.qmat().typ.String()
		case *f.dst == nil:
			k = MatmulBF16
		}
		if !slices.Contains(kinds, k) {
			kinds = append(kinds, k)
		}
	}
	return strings.Join(kinds, "+")
}

// NumParams is the number of scalar parameters, frozen ones included.
func (m *Model) NumParams() int {
	n := len(m.data) + len(m.frozen) + len(m.half)
	for _, q := range m.quants {
		n += q.rows * q.cols
	}
	return n
}

// BaseBytes is the memory the frozen base's matrices and vectors take in
// their storage (float32, bfloat16 or blocks).
func (m *Model) BaseBytes() int {
	n := 4*len(m.frozen) + 2*len(m.half)
	for _, q := range m.quants {
		n += q.bytes()
	}
	return n
}

// NumTrainable is the number of trainable scalar parameters (all of them
// without adapters): the size of the gradient and of each AdamW moment.
func (m *Model) NumTrainable() int { return len(m.data) }

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
	// blocks holds each block's activations, or with recompute one
	// block's (the one being recomputed).
	blocks    []blockActs
	recompute bool   // the Forward's Model.Recompute
	drop      bool   // the Forward applied dropout (training, Dropout > 0)
	step      uint64 // its dropout masks' step (dropKey)
}

type blockActs struct {
	ln1, ln1Mean, ln1Rstd []float32 // norm before attention (mean: LayerNorm only)
	q, k, v               []float32 // [n, QDim], [n, KVDim] x 2; q and k after q/k norm and RoPE
	qPre, kPre            []float32 // QKNorm: q and k before their norm
	qRstd, kRstd          []float32 // QKNorm: per row and head
	att                   []float32 // [n, QDim] attention output before the out projection
	probs                 []float32 // softmax weights per group and head
	mid                   []float32 // x + attention
	ln2, ln2Mean, ln2Rstd []float32 // norm before the FFN
	pre, act              []float32 // [n, F] GELU's input and output; SwiGLU's gate and silu(gate)·up
	up                    []float32 // [n, F] SwiGLU's up
	lora                  [numTargets]loraActs
}

// Forward runs the trunk (embedding and blocks) on b, keeping the
// activations Heads and Backward need. Padding positions are skipped.
func (m *Model) Forward(b Batch) error {
	if err := m.layout(b); err != nil {
		return err
	}
	c, a := m.Config, &m.acts
	a.drop = m.training && m.lora.Rank > 0 && m.lora.Dropout > 0
	if a.drop {
		a.step = m.forwards
		m.forwards++
	}
	m.embed(a.x[0], a.tokens)
	for l := range c.Layers {
		m.blockForward(l, m.blockActs(l), a.x[l], a.x[l+1])
	}
	return nil
}

// embed sets x to the embeddings of tokens.
func (m *Model) embed(x []float32, tokens []int32) {
	d := m.Config.DModel
	if m.w.embed != nil {
		embeddingForward(x, m.w.embed, tokens, d)
		return
	}
	if q := m.w.embedQ; q != nil {
		for i, t := range tokens {
			q.dequantRow(x[i*d:(i+1)*d], int(t))
		}
		return
	}
	for i, t := range tokens {
		row := m.w.embedH[int(t)*d : int(t)*d+d]
		for j, h := range row {
			x[i*d+j] = fromBF16(h)
		}
	}
}

// blockActs is where block l's activations go: its own, or with
// recompute the one shared scratch.
func (m *Model) blockActs(l int) *blockActs {
	if m.acts.recompute {
		return &m.acts.blocks[0]
	}
	return &m.acts.blocks[l]
}

// blockForward runs block l on x (the Forward's batch layout) into out,
// keeping its activations in ba. out nil skips the last product (a
// recomputation for the backward pass, which does not need the block's
// output again).
func (m *Model) blockForward(l int, ba *blockActs, x, out []float32) {
	c, a, p := m.Config, &m.acts, m.p
	n, d, dh := a.n, c.DModel, c.HeadDim()
	w := &m.w.blocks[l]
	m.normForward(ba.ln1, ba.ln1Mean, ba.ln1Rstd, x, w.lnAttnGain, w.lnAttnOffset, n)
	xa := shareBF16A(p, &m.ln1, m.bf16, false, ba.ln1, d, n, d)
	q, k := ba.q, ba.k
	if c.QKNorm {
		q, k = ba.qPre, ba.kPre
	}
	m.linearForward(l, tQ, q, ba.ln1, xa, nil, n, &ba.lora[tQ], m.bf16, nil, a.drop)
	m.linearForward(l, tK, k, ba.ln1, xa, nil, n, &ba.lora[tK], m.bf16, nil, a.drop)
	m.linearForward(l, tV, ba.v, ba.ln1, xa, nil, n, &ba.lora[tV], m.bf16, nil, a.drop)
	if c.QKNorm {
		headNormForward(p, ba.q, ba.qRstd, ba.qPre, w.qNorm, n, c.Heads, dh, c.NormEps)
		headNormForward(p, ba.k, ba.kRstd, ba.kPre, w.kNorm, n, c.KVHeads, dh, c.NormEps)
	}
	ropeForward(p, ba.q, a.pos, n, c.Heads, dh, m.cos, m.sin, false)
	ropeForward(p, ba.k, a.pos, n, c.KVHeads, dh, m.cos, m.sin, false)
	attentionGQAForward(p, ba.att, ba.probs, ba.q, ba.k, ba.v, a.groups, a.prefixPacks(), c.Heads, c.KVHeads, dh, m.bf16)
	m.linearForward(l, tOut, ba.mid, ba.att, nil, x, n, &ba.lora[tOut], m.bf16, nil, a.drop)
	m.normForward(ba.ln2, ba.ln2Mean, ba.ln2Rstd, ba.mid, w.lnFFNGain, w.lnFFNOffset, n)
	if c.swiglu() {
		xa := shareBF16A(p, &m.ln1, m.bf16, false, ba.ln2, d, n, d)
		m.linearForward(l, tFFNIn, ba.pre, ba.ln2, xa, nil, n, &ba.lora[tFFNIn], m.bf16, nil, a.drop)
		m.linearForward(l, tFFNUp, ba.up, ba.ln2, xa, nil, n, &ba.lora[tFFNUp], m.bf16, nil, a.drop)
		swigluForward(p, ba.act, ba.pre, ba.up)
	} else {
		m.linearForward(l, tFFNIn, ba.pre, ba.ln2, nil, nil, n, &ba.lora[tFFNIn], m.bf16, nil, a.drop)
		geluForward(p, ba.act, ba.pre)
	}
	// Without out (a recomputation) only the output layer's adapter
	// activation is needed.
	m.linearForward(l, tFFNOut, out, ba.act, nil, ba.mid, n, &ba.lora[tFFNOut], m.bf16, nil, a.drop)
}

// normForward applies the model's norm (LayerNorm, or RMSNorm: no mean,
// no offset) to the n rows of x.
func (m *Model) normForward(out, mean, rstd, x, gain, offset []float32, n int) {
	c := m.Config
	if c.rms() {
		rmsNormForward(m.p, out, rstd, x, gain, n, c.DModel, c.NormEps)
		return
	}
	layerNormForward(m.p, out, mean, rstd, x, gain, offset, n, c.DModel)
}

// normBackward is normForward's backward pass: it adds the input's
// gradient to dx and the gain's and offset's to dGain and dOffset (nil:
// frozen).
func (m *Model) normBackward(dx, dGain, dOffset, dOut, x, mean, rstd, gain []float32, n int, part []float32) []float32 {
	c := m.Config
	if c.rms() {
		return rmsNormBackward(m.p, dx, dGain, dOut, x, rstd, gain, n, c.DModel, part)
	}
	return layerNormBackward(m.p, dx, dGain, dOffset, dOut, x, mean, rstd, gain, n, c.DModel, part)
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
	qd, kvd := c.QDim(), c.KVDim()
	a.n = n
	a.recompute = m.Recompute
	nb := c.Layers
	if a.recompute {
		nb = 1
	}
	if len(a.x) != c.Layers+1 {
		a.x = make([][]float32, c.Layers+1)
	}
	if len(a.blocks) != nb {
		a.blocks = make([]blockActs, nb) // the other layout's buffers go to the GC
	}
	for l := range a.x {
		a.x[l] = grow(a.x[l], n*d)
	}
	for l := range a.blocks {
		ba := &a.blocks[l]
		for _, s := range []*[]float32{&ba.ln1, &ba.mid, &ba.ln2} {
			*s = grow(*s, n*d)
		}
		ba.q, ba.att = grow(ba.q, n*qd), grow(ba.att, n*qd)
		ba.k, ba.v = grow(ba.k, n*kvd), grow(ba.v, n*kvd)
		for _, s := range []*[]float32{&ba.ln1Rstd, &ba.ln2Rstd} {
			*s = grow(*s, n)
		}
		if !c.rms() {
			ba.ln1Mean, ba.ln2Mean = grow(ba.ln1Mean, n), grow(ba.ln2Mean, n)
		}
		if c.QKNorm {
			ba.qPre, ba.kPre = grow(ba.qPre, n*qd), grow(ba.kPre, n*kvd)
			ba.qRstd, ba.kRstd = grow(ba.qRstd, n*c.Heads), grow(ba.kRstd, n*c.KVHeads)
		}
		ba.pre, ba.act = grow(ba.pre, n*f), grow(ba.act, n*f)
		if c.swiglu() {
			ba.up = grow(ba.up, n*f)
		}
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
			off += m.Config.KVHeads * packSize(a.groups[fam[0]], m.Config.HeadDim())
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
// applies the final norm.
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
	m.normForward(hs.h, hs.mean, hs.rstd, hs.in, m.w.lnFinalGain, m.w.lnFinalOffset, k)
	return nil
}

// Heads applies the final norm, the LM head and the value head at flat
// positions idx (into the last Forward's B*S; each must be a real token).
// It returns logits [len(idx)*Vocab] and values [len(idx)], owned by the
// model and valid until the next call of Heads, CrossEntropy or
// Backward.
func (m *Model) Heads(idx []int32) (logits, values []float32, err error) {
	if err := m.headsInput(idx); err != nil {
		return nil, nil, err
	}
	hs, c := &m.head, m.Config
	k, d, v := len(idx), c.DModel, c.Vocab
	hs.logits = grow(hs.logits, k*v)
	m.lmForward(hs.logits, hs.h, k, m.bf16, nil)
	hs.values = grow(hs.values, k)
	for i := range k {
		hs.values[i] = kern.dot(hs.h[i*d:(i+1)*d], m.w.valueW) + m.w.valueB[0]
	}
	return hs.logits, hs.values, nil
}

// lmForward sets logits [k, Vocab] to the LM head of h [k, D]: h·W + b,
// or with tied embeddings h·Eᵀ. packed, when not nil, is W (or Eᵀ) in
// gemm's panels (PackWeights).
func (m *Model) lmForward(logits, h []float32, k int, bf16 bool, packed []float32) {
	c := m.Config
	d, v := c.DModel, c.Vocab
	if c.TiedEmbed {
		gemm(m.p, gemmOp{tb: true, m: k, n: v, k: d, a: h, lda: d, b: m.w.embed, bh: m.w.embedH, bq: m.w.embedQ, q8: m.int8, ldb: d, c: logits, ldc: v, bf16: bf16, packed: packed})
		return
	}
	op := gemmOp{m: k, n: v, k: d, a: h, lda: d, b: m.w.lmW, bh: m.w.lmH, ldb: v, c: logits, ldc: v, bias: m.w.lmB, bf16: bf16, packed: packed}
	if m.w.lmQ != nil {
		op.tb, op.bq, op.q8 = true, m.w.lmQ, m.int8 // its rows are the head's columns
	}
	gemm(m.p, op)
}

// lmBackward sets dh [k, D] from dLogits [k, Vocab] through the LM head
// and adds the head's gradients (the embedding's, when tied; none when
// frozen).
func (m *Model) lmBackward(dh, dLogits, h []float32, k int) {
	c := m.Config
	d, v := c.DModel, c.Vocab
	if c.TiedEmbed {
		if m.g.embed != nil {
			gemm(m.p, gemmOp{ta: true, m: v, n: d, k: k, a: dLogits, lda: v, b: h, ldb: d, c: m.g.embed, ldc: d, acc: true, bf16: m.bf16})
		}
		gemm(m.p, gemmOp{m: k, n: d, k: v, a: dLogits, lda: v, b: m.w.embed, bh: m.w.embedH, bq: m.w.embedQ, ldb: d, c: dh, ldc: d, bf16: m.bf16})
		return
	}
	denseBackward(m.p, m.bf16, nil, dh, m.g.lmW, m.g.lmB, dLogits, h, linear{w: m.w.lmW, h: m.w.lmH, q: m.w.lmQ}, k, d, v, false)
}

// backState holds the gradient buffers of Backward.
type backState struct {
	dx                    []float32 // [n, D] gradient of the current residual stream
	dLn, dAtt, dq, dk, dv []float32 // [n, D], [n, QDim], [n, QDim], [n, KVDim] x 2
	dqPre, dkPre          []float32 // QKNorm: the gradients before the norm
	dAct, dGate           []float32 // [n, F]
	part                  []float32
	// loraDU, loraTmp and dropX are the adapters' scratch: dU [n, r],
	// dU·Aᵀ [n, in] and the dropped-out input [n, in].
	loraDU, loraTmp, dropX []float32
}

// Backward adds to every trainable parameter's gradient the gradient of
// a loss whose derivatives with respect to the heads' outputs at idx are
// dLogits [len(idx)*Vocab] and dValues [len(idx)] (either may be nil:
// zero). It uses the activations of the last Forward; idx may repeat
// positions.
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
	hs, d := &m.head, c.DModel
	hs.dh = grow(hs.dh, k*d)
	clear(hs.dh)
	if dLogits != nil {
		m.lmBackward(hs.dh, dLogits, hs.h, k)
	}
	m.backwardHeads(dValues)
	m.backwardTrunk()
	return nil
}

// backwardHeads adds the value head's part of dValues (nil: none) to
// m.head.dh, the gradient of the final norm's output (set by the caller
// from the LM head), runs the final norm backward and leaves the gradient
// of the final residual stream in m.back.dx.
func (m *Model) backwardHeads(dValues []float32) {
	c, hs, bs, a := m.Config, &m.head, &m.back, &m.acts
	k, d := len(hs.rows), c.DModel
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
	hs.part = m.normBackward(hs.dIn, m.g.lnFinalGain, m.g.lnFinalOffset, hs.dh, hs.in, hs.mean, hs.rstd, m.w.lnFinalGain, k, hs.part)
	bs.dx = grow(bs.dx, a.n*d)
	clear(bs.dx)
	for i, r := range hs.rows {
		kern.axpy(bs.dx[int(r)*d:int(r)*d+d], 1, hs.dIn[i*d:])
	}
}

// backwardTrunk runs the blocks backward (last to first) and the
// embedding, from the gradient of the final residual stream in m.back.dx;
// with recompute, each block's activations are recomputed first.
func (m *Model) backwardTrunk() {
	c, a, bs := m.Config, &m.acts, &m.back
	n, d, f := a.n, c.DModel, c.FFN
	bs.dLn = grow(bs.dLn, n*d)
	bs.dAtt, bs.dq = grow(bs.dAtt, n*c.QDim()), grow(bs.dq, n*c.QDim())
	bs.dk, bs.dv = grow(bs.dk, n*c.KVDim()), grow(bs.dv, n*c.KVDim())
	if c.QKNorm {
		bs.dqPre, bs.dkPre = grow(bs.dqPre, n*c.QDim()), grow(bs.dkPre, n*c.KVDim())
	}
	bs.dAct = grow(bs.dAct, n*f)
	if c.swiglu() {
		bs.dGate = grow(bs.dGate, n*f)
	}
	for l := c.Layers - 1; l >= 0; l-- {
		ba := m.blockActs(l)
		if a.recompute {
			m.blockForward(l, ba, a.x[l], nil)
		}
		m.blockBackward(l, ba, a.x[l], bs.dx)
	}
	if m.g.embed != nil {
		embeddingBackward(m.g.embed, bs.dx, a.tokens, d)
	}
}

// blockBackward runs block l backward: dx holds the gradient of the
// block's output and is left holding that of its input x; ba holds the
// block's activations.
func (m *Model) blockBackward(l int, ba *blockActs, x, dx []float32) {
	c, a, bs, p := m.Config, &m.acts, &m.back, m.p
	n, d, dh := a.n, c.DModel, c.HeadDim()
	w, g := &m.w.blocks[l], &m.g.blocks[l]
	// FFN: x_out = mid + ffn(norm2(mid)).
	m.linearBackward(l, tFFNOut, bs.dAct, dx, ba.act, nil, n, &ba.lora[tFFNOut], false)
	if c.swiglu() {
		swigluBackward(p, bs.dGate, bs.dAct, bs.dAct, ba.pre, ba.up)
		xta := shareBF16A(p, &m.ln1, m.bf16, true, ba.ln2, d, d, n)
		m.linearBackward(l, tFFNIn, bs.dLn, bs.dGate, ba.ln2, xta, n, &ba.lora[tFFNIn], false)
		m.linearBackward(l, tFFNUp, bs.dLn, bs.dAct, ba.ln2, xta, n, &ba.lora[tFFNUp], true)
	} else {
		geluBackward(p, bs.dAct, bs.dAct, ba.pre)
		m.linearBackward(l, tFFNIn, bs.dLn, bs.dAct, ba.ln2, nil, n, &ba.lora[tFFNIn], false)
	}
	bs.part = m.normBackward(dx, g.lnFFNGain, g.lnFFNOffset, bs.dLn, ba.mid, ba.ln2Mean, ba.ln2Rstd, w.lnFFNGain, n, bs.part)
	// Attention: mid = x + attn(norm1(x))·W_out + b_out.
	m.linearBackward(l, tOut, bs.dAtt, dx, ba.att, nil, n, &ba.lora[tOut], false)
	attentionGQABackward(p, bs.dq, bs.dk, bs.dv, bs.dAtt, ba.probs, ba.q, ba.k, ba.v, a.groups, a.families, a.prefixPacks(), c.Heads, c.KVHeads, dh, n, m.bf16)
	ropeForward(p, bs.dq, a.pos, n, c.Heads, dh, m.cos, m.sin, true)
	ropeForward(p, bs.dk, a.pos, n, c.KVHeads, dh, m.cos, m.sin, true)
	dq, dk := bs.dq, bs.dk
	if c.QKNorm {
		bs.part = headNormBackward(p, bs.dqPre, g.qNorm, bs.dq, ba.qPre, ba.qRstd, w.qNorm, n, c.Heads, dh, bs.part)
		bs.part = headNormBackward(p, bs.dkPre, g.kNorm, bs.dk, ba.kPre, ba.kRstd, w.kNorm, n, c.KVHeads, dh, bs.part)
		dq, dk = bs.dqPre, bs.dkPre
	}
	xta := shareBF16A(p, &m.ln1, m.bf16, true, ba.ln1, d, d, n)
	m.linearBackward(l, tQ, bs.dLn, dq, ba.ln1, xta, n, &ba.lora[tQ], false)
	m.linearBackward(l, tK, bs.dLn, dk, ba.ln1, xta, n, &ba.lora[tK], true)
	m.linearBackward(l, tV, bs.dLn, bs.dv, ba.ln1, xta, n, &ba.lora[tV], true)
	bs.part = m.normBackward(dx, g.lnAttnGain, g.lnAttnOffset, bs.dLn, x, ba.ln1Mean, ba.ln1Rstd, w.lnAttnGain, n, bs.part)
}

// linearForward computes block l's dense layer t: out = x·W + b (+ res
// when not nil; out may be res) + scale·(dropout(x)·A)·B when the layer
// has an adapter, keeping scale·dropout(x)·A in la for the backward
// pass. xa is x converted for bf16 products (shareBF16A) or nil; packed
// is W in gemm's panels (decoding, PackWeights) or nil. drop applies the
// adapter's dropout (a training Forward's, m.acts.drop; never decoding).
func (m *Model) linearForward(l int, t target, out, x []float32, xa *bf16Input, res []float32, n int, la *loraActs, bf16 bool, packed []float32, drop bool) {
	ln := m.w.blocks[l].lin(m.Config, t)
	if out != nil {
		op := gemmOp{m: n, n: ln.out, k: ln.in, a: x, lda: ln.in, b: ln.w, bh: ln.h, ldb: ln.out, c: out, ldc: ln.out,
			bias: ln.b, res: res, bf16: bf16, bf16A: xa, packed: packed}
		if ln.q != nil {
			op.tb, op.bq, op.q8 = true, ln.q, m.int8 // its rows are W's columns
		}
		gemm(m.p, op)
	}
	if ln.lora.a != nil {
		m.loraForward(l, t, ln, out, x, xa, n, la, bf16, drop)
	}
}

// loraForward adds layer t's adapter to out: scale·(dropout(x)·A)·B,
// keeping the first product (scaled) in la. out nil only computes la (a
// recomputation that needs the adapter's activation, not the layer's
// output).
func (m *Model) loraForward(l int, t target, ln linear, out, x []float32, xa *bf16Input, n int, la *loraActs, bf16, drop bool) {
	p, r := m.p, m.lora.Rank
	xd, xda := x, xa
	if drop {
		m.back.dropX = grow(m.back.dropX, n*ln.in)
		xd, xda = m.back.dropX, nil
		dropout(p, xd, x, dropKey(m.seed, m.acts.step, l, t), m.lora.Dropout, n, ln.in)
	}
	la.us = grow(la.us, n*r)
	gemm(p, gemmOp{m: n, n: r, k: ln.in, a: xd, lda: ln.in, b: ln.lora.a, ldb: r, c: la.us, ldc: r, bf16: bf16, bf16A: xda})
	p.chunks(n*r, 1<<14, func(_, lo, hi int) { kern.scale(la.us[lo:hi], m.lora.scale) })
	if out != nil {
		gemm(p, gemmOp{m: n, n: ln.out, k: r, a: la.us, lda: r, b: ln.lora.b, ldb: ln.out, c: out, ldc: ln.out, acc: true, bf16: bf16})
	}
}

// linearBackward is linearForward's backward pass for block l's layer t,
// from dOut [n, out] and the layer's input x [n, in]: it adds the weight's
// and bias's gradients (none when frozen) and the adapter's, and sets dx
// (adds to it when accDx) to the input's gradient. xta is xᵀ converted
// for bf16 products, or nil.
func (m *Model) linearBackward(l int, t target, dx, dOut, x []float32, xta *bf16Input, n int, la *loraActs, accDx bool) {
	c, p, bs := m.Config, m.p, &m.back
	ln, lg := m.w.blocks[l].lin(c, t), m.g.blocks[l].lin(c, t)
	denseBackward(p, m.bf16, xta, dx, lg.w, lg.b, dOut, x, ln, n, ln.in, ln.out, accDx)
	if ln.lora.a == nil {
		return
	}
	r, in, out := m.lora.Rank, ln.in, ln.out
	drop := m.acts.drop
	// y += us·B, us = scale·xd·A: dB += usᵀ·dY; dU = scale·dY·Bᵀ; dA +=
	// xdᵀ·dU; dx += (dU·Aᵀ) through the dropout.
	gemm(p, gemmOp{ta: true, m: r, n: out, k: n, a: la.us, lda: r, b: dOut, ldb: out, c: lg.lora.b, ldc: out, acc: true, bf16: m.bf16})
	bs.loraDU = grow(bs.loraDU, n*r)
	du := bs.loraDU
	gemm(p, gemmOp{tb: true, m: n, n: r, k: out, a: dOut, lda: out, b: ln.lora.b, ldb: out, c: du, ldc: r, bf16: m.bf16})
	p.chunks(n*r, 1<<14, func(_, lo, hi int) { kern.scale(du[lo:hi], m.lora.scale) })
	xd, xdta := x, xta
	key := dropKey(m.seed, m.acts.step, l, t)
	if drop {
		bs.dropX = grow(bs.dropX, n*in)
		xd, xdta = bs.dropX, nil
		dropout(p, xd, x, key, m.lora.Dropout, n, in)
	}
	gemm(p, gemmOp{ta: true, m: in, n: r, k: n, a: xd, lda: in, b: du, ldb: r, c: lg.lora.a, ldc: r, acc: true, bf16: m.bf16, bf16A: xdta})
	if !drop {
		gemm(p, gemmOp{tb: true, m: n, n: in, k: r, a: du, lda: r, b: ln.lora.a, ldb: r, c: dx, ldc: in, acc: true, bf16: m.bf16})
		return
	}
	bs.loraTmp = grow(bs.loraTmp, n*in)
	gemm(p, gemmOp{tb: true, m: n, n: in, k: r, a: du, lda: r, b: ln.lora.a, ldb: r, c: bs.loraTmp, ldc: in, bf16: m.bf16})
	// The dropped-out input's gradient is the mask's: dropout of a
	// vector of ones is that mask scaled, so reuse dropout on loraTmp.
	dropout(p, bs.loraTmp, bs.loraTmp, key, m.lora.Dropout, n, in)
	p.chunks(n, rowGrain, func(_, lo, hi int) { kern.axpy(dx[lo*in:hi*in], 1, bs.loraTmp[lo*in:]) })
}

func sqrt(x float64) float64 { return math.Sqrt(x) }
