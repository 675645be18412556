package native

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Param is one named parameter tensor: views into the model's flat
// arrays (row-major). Names are the checkpoint paths of the GoMLX engine,
// e.g. "/block_0/q/dense/weights", and for the Hugging Face architectures
// their extensions (doc.go maps them to Hugging Face's names).
//
// A trainable parameter has Data and Grad. A frozen one (the base of a
// LoRA model, or of Options.Frozen) has no Grad; one stored in bfloat16
// (a frozen base's matrices with Options.BaseStorage bf16) has BF16
// instead of Data: write it through Model.SetParam.
type Param struct {
	Name  string
	Shape []int
	Data  []float32 // the weights; writes change the model
	Grad  []float32 // accumulated by Backward, cleared by ZeroGrad; nil when frozen
	BF16  []uint16  // the weights rounded to bfloat16, when stored so (Data is then nil)
	// Quant names the block format of a matrix stored in quantized
	// blocks (q8_0, q4_0, q4_1; Data and BF16 are then nil): write it
	// through Model.SetParam (quantized), SetParamOutIn or SetParamBlocks
	// (the blocks as they are), read it through ParamValues (dequantized).
	Quant string
}

// Size is the number of elements of Shape.
func (p Param) Size() int {
	n := 1
	for _, d := range p.Shape {
		n *= d
	}
	return n
}

// Trainable reports whether the parameter has a gradient (and AdamW
// moments).
func (p Param) Trainable() bool { return p.Grad != nil }

// weights names the slices of one flat array (the parameters, or their
// gradients) in the canonical order listed by paramTable. A slice is nil
// where the architecture has no such parameter, and in the gradients
// where the parameter is frozen; the ...H slices hold frozen matrices
// stored in bfloat16 and the ...Q ones frozen matrices in quantized
// blocks (their float32 slice is then nil).
type weights struct {
	embed                      []float32 // [V, D]
	embedH                     []uint16
	embedQ                     *qmat // rows V of D: the embedding as it is
	blocks                     []blockWeights
	lnFinalGain, lnFinalOffset []float32 // [D]
	lmW, lmB                   []float32 // [D, V], [V]; nil when tied
	lmH                        []uint16
	lmQ                        *qmat     // rows V of D: the transpose of lmW
	valueW, valueB             []float32 // [D, 1], [1]
}

// blockWeights is one block's tensors. The attention's projections map D
// to QDim (q) or KVDim (k, v) and QDim back to D (out). The FFN's first
// matrix is ffnIn (GELU's input, SwiGLU's gate), ffnUp is SwiGLU's up
// projection, ffnOut the last (GELU's output, SwiGLU's down).
type blockWeights struct {
	lnAttnGain, lnAttnOffset []float32 // [D]; no offset with RMSNorm
	qW, qB                   []float32 // [D, QDim], [QDim]
	kW, kB                   []float32 // [D, KVDim], [KVDim]
	vW, vB                   []float32
	qNorm, kNorm             []float32 // [HeadDim] (QKNorm)
	outW, outB               []float32 // [QDim, D], [D]
	lnFFNGain, lnFFNOffset   []float32 // [D]
	ffnInW, ffnInB           []float32 // [D, F], [F]
	ffnUpW, ffnUpB           []float32 // [D, F], [F] (SwiGLU)
	ffnOutW, ffnOutB         []float32 // [F, D], [D]
	half                     [numTargets][]uint16
	quant                    [numTargets]*qmat // rows out of in: the transpose of the [in, out] weight
	lora                     [numTargets]loraWeights
}

// target names a block's dense layers, the places an adapter can go.
type target int

const (
	tQ target = iota
	tK
	tV
	tOut
	tFFNIn // GELU's input, SwiGLU's gate
	tFFNUp // SwiGLU's up
	tFFNOut
	numTargets
)

// targetNames are the targets' names in parameter paths; a SwiGLU FFN's
// are swigluNames.
var (
	targetNames = [numTargets]string{"q", "k", "v", "out", "ffn_in", "ffn_up", "ffn_out"}
	swigluNames = [numTargets]string{"q", "k", "v", "out", "ffn_gate", "ffn_up", "ffn_down"}
)

// targetName is t's name in c's parameter paths.
func targetName(c Config, t target) string {
	if c.swiglu() {
		return swigluNames[t]
	}
	return targetNames[t]
}

// linear is one dense layer's tensors: y = x·w + b (+ the adapter).
type linear struct {
	w       []float32 // [in, out]; nil when stored in h or q (or frozen, in gradients)
	h       []uint16  // the frozen w in bfloat16
	q       *qmat     // the frozen w in quantized blocks, transposed: rows out of in
	b       []float32 // [out] or nil
	lora    loraWeights
	in, out int
}

// lin returns block b's dense layer t with its shapes from c.
func (b *blockWeights) lin(c Config, t target) linear {
	d, f, qd, kvd := c.DModel, c.FFN, c.QDim(), c.KVDim()
	l := linear{h: b.half[t], q: b.quant[t], lora: b.lora[t]}
	switch t {
	case tQ:
		l.w, l.b, l.in, l.out = b.qW, b.qB, d, qd
	case tK:
		l.w, l.b, l.in, l.out = b.kW, b.kB, d, kvd
	case tV:
		l.w, l.b, l.in, l.out = b.vW, b.vB, d, kvd
	case tOut:
		l.w, l.b, l.in, l.out = b.outW, b.outB, qd, d
	case tFFNIn:
		l.w, l.b, l.in, l.out = b.ffnInW, b.ffnInB, d, f
	case tFFNUp:
		l.w, l.b, l.in, l.out = b.ffnUpW, b.ffnUpB, d, f
	case tFFNOut:
		l.w, l.b, l.in, l.out = b.ffnOutW, b.ffnOutB, f, d
	}
	return l
}

// paramRole tells what a parameter is to training: the base model
// (frozen under LoRA), an adapter, or the value head (always trained).
type paramRole int

const (
	roleBase paramRole = iota
	roleAdapter
	roleValue
)

type paramField struct {
	name  string
	shape []int
	dst   *[]float32
	half  *[]uint16 // where a frozen copy in bfloat16 goes (matrices only), else nil
	init  paramInit
	role  paramRole
	// quant is where a frozen copy in quantized blocks goes (matrices
	// only), else nil; qT tells that its rows are the matrix's columns
	// (a dense weight [in, out] is stored as rows out of in), not its rows
	// (the embedding [V, D]: rows V of D).
	quant **qmat
	qT    bool
}

type paramInit int

const (
	initNormal paramInit = iota // N(0, 0.02²)
	initZero
	initOne
	initKaiming // U(-1/sqrt(fan in), 1/sqrt(fan in)): PEFT's lora_A
)

func (p paramField) size() int {
	n := 1
	for _, s := range p.shape {
		n *= s
	}
	return n
}

// paramTable lists the parameters in their canonical order (the order of
// Params and, among the trainable ones, of the flat arrays), each with
// the slice of w it binds. mlerl's own model lists exactly the tensors it
// always had, in the same order; adapters come last.
func paramTable(c Config, lo loraSet, w *weights) []paramField {
	d, f, v := c.DModel, c.FFN, c.Vocab
	qd, kvd, dh := c.QDim(), c.KVDim(), c.HeadDim()
	w.blocks = make([]blockWeights, c.Layers)
	t := []paramField{{"/token_embed/embeddings", []int{v, d}, &w.embed, &w.embedH, initNormal, roleBase, &w.embedQ, false}}
	norm := func(prefix string, g, o *[]float32, width int) {
		if c.rms() {
			t = append(t, paramField{prefix + "/rms_normalization/gain", []int{width}, g, nil, initOne, roleBase, nil, false})
			return
		}
		t = append(t,
			paramField{prefix + "/layer_normalization/gain", []int{width}, g, nil, initOne, roleBase, nil, false},
			paramField{prefix + "/layer_normalization/offset", []int{width}, o, nil, initZero, roleBase, nil, false})
	}
	for l := range c.Layers {
		b := &w.blocks[l]
		p := fmt.Sprintf("/block_%d/", l)
		dense := func(tg target, in, out int, wt, bs *[]float32, bias bool) {
			t = append(t, paramField{p + targetName(c, tg) + "/dense/weights", []int{in, out}, wt, &b.half[tg], initNormal, roleBase, &b.quant[tg], true})
			if bias {
				t = append(t, paramField{p + targetName(c, tg) + "/dense/biases", []int{out}, bs, nil, initZero, roleBase, nil, false})
			}
		}
		norm(p+"ln_attn", &b.lnAttnGain, &b.lnAttnOffset, d)
		dense(tQ, d, qd, &b.qW, &b.qB, !c.NoQKVBias)
		dense(tK, d, kvd, &b.kW, &b.kB, !c.NoQKVBias)
		dense(tV, d, kvd, &b.vW, &b.vB, !c.NoQKVBias)
		if c.QKNorm {
			t = append(t,
				paramField{p + "q_norm/rms_normalization/gain", []int{dh}, &b.qNorm, nil, initOne, roleBase, nil, false},
				paramField{p + "k_norm/rms_normalization/gain", []int{dh}, &b.kNorm, nil, initOne, roleBase, nil, false})
		}
		dense(tOut, qd, d, &b.outW, &b.outB, !c.NoOutBias)
		norm(p+"ln_ffn", &b.lnFFNGain, &b.lnFFNOffset, d)
		dense(tFFNIn, d, f, &b.ffnInW, &b.ffnInB, !c.NoFFNBias)
		if c.swiglu() {
			dense(tFFNUp, d, f, &b.ffnUpW, &b.ffnUpB, !c.NoFFNBias)
		}
		dense(tFFNOut, f, d, &b.ffnOutW, &b.ffnOutB, !c.NoFFNBias)
	}
	norm("/ln_final", &w.lnFinalGain, &w.lnFinalOffset, d)
	if !c.TiedEmbed {
		t = append(t, paramField{"/lm_head/dense/weights", []int{d, v}, &w.lmW, &w.lmH, initNormal, roleBase, &w.lmQ, true})
		if !c.NoLMBias {
			t = append(t, paramField{"/lm_head/dense/biases", []int{v}, &w.lmB, nil, initZero, roleBase, nil, false})
		}
	}
	t = append(t,
		paramField{"/value_head/dense/weights", []int{d, 1}, &w.valueW, nil, initNormal, roleValue, nil, false},
		paramField{"/value_head/dense/biases", []int{1}, &w.valueB, nil, initZero, roleValue, nil, false},
	)
	if lo.Rank > 0 {
		for l := range c.Layers {
			b := &w.blocks[l]
			for tg := range numTargets {
				if !lo.has(tg) {
					continue
				}
				ln := b.lin(c, tg)
				p := fmt.Sprintf("/block_%d/%s/", l, targetName(c, tg))
				a := &b.lora[tg]
				t = append(t,
					paramField{p + "lora_a", []int{ln.in, lo.Rank}, &a.a, nil, initKaiming, roleAdapter, nil, false},
					paramField{p + "lora_b", []int{lo.Rank, ln.out}, &a.b, nil, initZero, roleAdapter, nil, false})
			}
		}
	}
	return t
}

// storage is where a model keeps its parameters: the trainable ones (with
// their gradients) in data and grad, in table order; the frozen ones in
// frozen (float32), half (bfloat16) and quants (quantized blocks, one
// matrix each).
type storage struct {
	data, grad, frozen []float32
	half               []uint16
	quants             []*qmat
}

// basePlan is how a model stores its frozen base matrices: def for each
// (Options.BaseStorage), by for the ones named (Options.MatrixStorage);
// fp32, bf16 or a quantized format. A trained base has no plan: every
// weight is float32.
type basePlan struct {
	frozen bool
	def    string
	by     map[string]string
}

// of is the storage of parameter p: a frozen matrix's planned one, fp32
// for everything else.
func (b basePlan) of(p paramField) string {
	if !b.frozen || p.role != roleBase || p.half == nil {
		return MatmulFP32
	}
	if s, ok := b.by[p.name]; ok {
		return s
	}
	return b.def
}

// allocate lays the parameters of table t (bound to w) and gt (bound to
// g, the gradients' views) out in new storage: trainable ones (all of
// them when the base is not frozen) in data and grad, frozen ones in
// frozen, half or their own quantized matrix as plan says (matrices
// only). A matrix whose rows do not split into blocks is refused.
func allocate(t, gt []paramField, plan basePlan) (storage, error) {
	var nTrain, nFrozen, nHalf int
	frozen := func(p paramField) bool { return plan.frozen && p.role == roleBase }
	for _, p := range t {
		switch st := plan.of(p); {
		case !frozen(p):
			nTrain += p.size()
		case st == MatmulBF16:
			nHalf += p.size()
		case st == MatmulFP32:
			nFrozen += p.size()
		}
	}
	s := storage{data: make([]float32, nTrain), grad: make([]float32, nTrain), frozen: make([]float32, nFrozen), half: make([]uint16, nHalf)}
	var at, fat, hat int
	for i, p := range t {
		n := p.size()
		st := plan.of(p)
		qt, quant := parseQuant(st)
		switch {
		case !frozen(p):
			*p.dst = s.data[at : at+n : at+n]
			*gt[i].dst = s.grad[at : at+n : at+n]
			at += n
		case st == MatmulBF16:
			*p.half = s.half[hat : hat+n : hat+n]
			hat += n
		case quant:
			rows, cols := p.shape[0], p.shape[1]
			if p.qT {
				rows, cols = cols, rows
			}
			if err := checkQuantShape(p.name, qt, rows, cols); err != nil {
				return s, err
			}
			*p.quant = newQmat(qt, rows, cols)
			s.quants = append(s.quants, *p.quant)
		default:
			*p.dst = s.frozen[fat : fat+n : fat+n]
			fat += n
		}
	}
	return s, nil
}

// initParams fills the parameters deterministically from seed: weights
// N(0, 0.02²), biases and LayerNorm offsets 0, norm gains 1, LoRA's A
// uniform in ±1/sqrt(fan in) and B 0. Every parameter draws its values in
// table order whatever its storage (a bfloat16 one is rounded, a
// quantized one quantized), so a model's base is the same with and
// without adapters. With loadedBase the base's matrices are left zero,
// their values not drawn (the caller writes them: Options.LoadedBase),
// and the value head and adapters draw theirs in the same order.
func initParams(t []paramField, seed uint64, loadedBase bool) {
	r := rand.New(rand.NewPCG(seed, 0x6d6c65726c))
	var tmp, tr []float32
	for _, p := range t {
		if loadedBase && p.role == roleBase && p.init == initNormal {
			continue
		}
		s := *p.dst
		if s == nil {
			tmp = grow(tmp, p.size())
			s = tmp
		}
		switch p.init {
		case initNormal:
			for i := range s {
				if i%(1<<14) == 0 {
					clearVectorState() // see there: NormFloat64 calls math.Exp
				}
				s[i] = float32(0.02 * r.NormFloat64())
			}
		case initZero:
			clear(s)
		case initOne:
			for i := range s {
				s[i] = 1
			}
		case initKaiming:
			bound := 1 / math.Sqrt(float64(p.shape[0]))
			for i := range s {
				s[i] = float32(bound * (2*r.Float64() - 1))
			}
		}
		switch {
		case *p.dst != nil:
		case p.quant != nil && *p.quant != nil && (*p.quant).typ.raw() != nil:
			// Written by SetParamBlocks only (LoadedBase: not reached).
		case p.quant != nil && *p.quant != nil:
			tr = setQuant(*p.quant, p, s, tr)
		default:
			cvtBF16Generic(*p.half, s)
		}
	}
}

// setQuant quantizes data (p's values in the model's layout) into q,
// transposing a dense weight's [in, out] into q's rows first (tr is
// scratch, returned grown).
func setQuant(q *qmat, p paramField, data, tr []float32) []float32 {
	if !p.qT {
		q.quantizeRows(data)
		return tr
	}
	tr = grow(tr, len(data))
	transposeF32(tr, data, p.shape[0], p.shape[1])
	q.quantizeRows(tr)
	return tr
}

// Params lists every parameter tensor in the canonical order, as views
// into the model (load weights by writing Data, or through SetParam).
func (m *Model) Params() []Param {
	ps := make([]Param, len(m.table))
	for i, f := range m.table {
		ps[i] = Param{Name: f.name, Shape: append([]int(nil), f.shape...), Data: *f.dst, Grad: *m.gtable[i].dst}
		if f.half != nil {
			ps[i].BF16 = *f.half
		}
		if q := f.qmat(); q != nil {
			ps[i].Quant = q.typ.String()
		}
	}
	return ps
}

// field returns the table entry of the parameter named name.
func (m *Model) field(name string) (int, error) {
	if i, ok := m.byName[name]; ok {
		return i, nil
	}
	return 0, fmt.Errorf("native: no parameter %q in this model", name)
}

// SetParam writes data, in the model's layout (row-major over the
// parameter's Shape: a dense weight is [in, out]), into the parameter
// named name; a parameter stored in bfloat16 takes data rounded to
// nearest even.
func (m *Model) SetParam(name string, data []float32) error {
	i, err := m.field(name)
	if err != nil {
		return err
	}
	f := m.table[i]
	if len(data) != f.size() {
		return fmt.Errorf("native: parameter %s has shape %v (%d values), got %d values", name, f.shape, f.size(), len(data))
	}
	if *f.dst != nil {
		copy(*f.dst, data)
		return nil
	}
	if q := f.qmat(); q != nil {
		if q.typ.raw() != nil {
			return rawValuesError(name, q)
		}
		setQuant(q, f, data, nil)
		return nil
	}
	cvtBF16Generic(*f.half, data)
	return nil
}

// rawValuesError refuses float32 values for a matrix kept in a raw
// format's blocks, which mlerl cannot quantize into.
func rawValuesError(name string, q *qmat) error {
	return fmt.Errorf("native: parameter %s is kept in %s blocks, which only SetParamBlocks writes (mlerl does not quantize into %s)", name, q.typ, q.typ)
}

// qmat returns the parameter's quantized matrix, nil when it is not
// stored so.
func (f paramField) qmat() *qmat {
	if f.quant == nil {
		return nil
	}
	return *f.quant
}

// SetParamBlocks writes the matrix named name, stored in quantized
// blocks of format typ (q8_0, q4_0, q4_1, or a raw format: q5_1, q2_k,
// q3_k, q4_k, q5_k, q6_k, iq4_xs), from blocks in ggml's layout (a GGUF
// file's tensor data): rows of blocks, each block as ggml lays it out,
// the rows being a dense weight's outputs ([out, in], a Hugging Face
// Linear's layout) or the embedding's tokens ([V, D]). The blocks are
// kept as they are; a matrix stored another way is refused (SetParam
// takes float32 values for any storage but the raw formats).
func (m *Model) SetParamBlocks(name, typ string, blocks []byte) error {
	i, err := m.field(name)
	if err != nil {
		return err
	}
	f := m.table[i]
	q := f.qmat()
	if q == nil {
		return fmt.Errorf("native: parameter %s is not stored in quantized blocks (SetParam takes its float32 values)", name)
	}
	t, _ := parseQuant(typ)
	if t != q.typ {
		return fmt.Errorf("native: parameter %s is stored as %s, got blocks of %q", name, q.typ, typ)
	}
	if want := q.rows * q.rowBytes; len(blocks) != want {
		return fmt.Errorf("native: parameter %s (%d rows of %d values in %s) needs %d bytes of blocks, got %d", name, q.rows, q.cols, t, want, len(blocks))
	}
	q.setBlocks(blocks)
	return nil
}

// ParamBlocks returns a copy of the matrix named name in ggml's block
// layout (SetParamBlocks' inverse) and its format; an error when it is
// not stored in quantized blocks.
func (m *Model) ParamBlocks(name string) (typ string, blocks []byte, err error) {
	i, err := m.field(name)
	if err != nil {
		return "", nil, err
	}
	q := m.table[i].qmat()
	if q == nil {
		return "", nil, fmt.Errorf("native: parameter %s is not stored in quantized blocks", name)
	}
	return q.typ.String(), q.blocks(), nil
}

// SetParamOutIn is SetParam for a matrix given as [out, in] (row-major),
// the layout of a Hugging Face (PyTorch) Linear weight: it is transposed
// into the model's [in, out] once, here.
func (m *Model) SetParamOutIn(name string, data []float32) error {
	i, err := m.field(name)
	if err != nil {
		return err
	}
	f := m.table[i]
	if len(f.shape) != 2 {
		return fmt.Errorf("native: parameter %s has shape %v, not a matrix to transpose", name, f.shape)
	}
	if len(data) != f.size() {
		return fmt.Errorf("native: parameter %s has shape %v (%d values), got %d values", name, f.shape, f.size(), len(data))
	}
	in, out := f.shape[0], f.shape[1]
	if q := f.qmat(); q != nil && q.typ.raw() != nil {
		return rawValuesError(name, q)
	}
	if q := f.qmat(); q != nil && f.qT {
		q.quantizeRows(data) // its rows are the outputs already
		return nil
	}
	t := make([]float32, len(data))
	transposeF32(t, data, out, in)
	return m.SetParam(name, t)
}

// ParamValues returns a copy of the parameter named name in the model's
// layout, as float32 (widened from bfloat16 where stored so).
func (m *Model) ParamValues(name string) ([]float32, error) {
	i, err := m.field(name)
	if err != nil {
		return nil, err
	}
	f := m.table[i]
	out := make([]float32, f.size())
	if *f.dst != nil {
		copy(out, *f.dst)
		return out, nil
	}
	if q := f.qmat(); q != nil {
		rows := out // the blocks' rows are the matrix's, or (qT) its columns
		if f.qT {
			rows = make([]float32, len(out))
		}
		for j := range q.rows {
			q.dequantRow(rows[j*q.cols:(j+1)*q.cols], j)
		}
		if f.qT {
			transposeF32(out, rows, q.rows, q.cols)
		}
		return out, nil
	}
	for j, h := range *f.half {
		out[j] = fromBF16(h)
	}
	return out, nil
}

// ParamOutIn returns a copy of the matrix named name transposed to [out,
// in], the layout of a Hugging Face Linear weight (for saving).
func (m *Model) ParamOutIn(name string) ([]float32, error) {
	v, err := m.ParamValues(name)
	if err != nil {
		return nil, err
	}
	f := m.table[m.byName[name]]
	if len(f.shape) != 2 {
		return nil, fmt.Errorf("native: parameter %s has shape %v, not a matrix to transpose", name, f.shape)
	}
	t := make([]float32, len(v))
	transposeF32(t, v, f.shape[0], f.shape[1])
	return t, nil
}

// transposeF32 sets dst (cols x rows) to the transpose of src (rows x
// cols), in blocks that keep both sides' lines in cache.
func transposeF32(dst, src []float32, rows, cols int) {
	const blk = 32
	for r0 := 0; r0 < rows; r0 += blk {
		for c0 := 0; c0 < cols; c0 += blk {
			for r := r0; r < min(rows, r0+blk); r++ {
				for c := c0; c < min(cols, c0+blk); c++ {
					dst[c*rows+r] = src[r*cols+c]
				}
			}
		}
	}
}
