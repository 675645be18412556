package native

import (
	"encoding/hex"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// quantStorages are the quantized base storages the tests run.
var quantStorages = []string{StorageQ8_0, StorageQ4_0, StorageQ4_1}

// quantConfigs are architectures whose matrices' rows (inputs) are whole
// blocks of 32: Llama's (tied head, GQA), Qwen2's (untied head, q/k/v
// biases), Qwen3's (q/k norm) and mlerl's own (LayerNorm, GELU, biases).
func quantConfigs() []struct {
	name string
	cfg  Config
	lo   LoRAConfig
} {
	return []struct {
		name string
		cfg  Config
		lo   LoRAConfig
	}{
		{"llama", Config{Vocab: 45, DModel: 32, Heads: 4, KVHeads: 2, HeadSize: 8, Layers: 2, FFN: 64, Ctx: 40,
			Norm: NormRMS, NormEps: 1e-5, FFNKind: FFNSwiGLU, NoQKVBias: true, NoOutBias: true, NoFFNBias: true, NoLMBias: true, TiedEmbed: true},
			LoRAConfig{Rank: 2, Alpha: 3, Targets: allTargets}},
		{"qwen2", Config{Vocab: 37, DModel: 32, Heads: 2, KVHeads: 1, HeadSize: 16, Layers: 2, FFN: 96, Ctx: 40, RoPEBase: 1e6,
			Norm: NormRMS, FFNKind: FFNSwiGLU, NoOutBias: true, NoFFNBias: true, NoLMBias: true},
			LoRAConfig{Rank: 3, Targets: []string{"q", "v", "down"}}},
		{"qwen3", Config{Vocab: 40, DModel: 64, Heads: 2, KVHeads: 1, HeadSize: 32, Layers: 1, FFN: 64, Ctx: 40, RoPEBase: 1e6,
			Norm: NormRMS, FFNKind: FFNSwiGLU, NoQKVBias: true, NoOutBias: true, NoFFNBias: true, QKNorm: true, TiedEmbed: true},
			LoRAConfig{Rank: 2, Targets: []string{"k", "o", "up"}}},
		{"mlerl", Config{Vocab: 33, DModel: 32, Heads: 2, Layers: 2, FFN: 64, Ctx: 40},
			LoRAConfig{Rank: 2, Alpha: 4, Targets: []string{"q", "k", "v", "o", "up", "down"}}},
	}
}

// setRandom writes N(0, 0.3²) values into every parameter of m (norm
// gains 1 + that), quantized where m stores them so; a matrix in a raw
// format (which takes blocks only) is left as it is.
func setRandom(t testing.TB, m *Model, seed uint64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 17))
	for _, p := range m.Params() {
		if q, _ := parseQuant(p.Quant); q.raw() != nil {
			continue
		}
		v := make([]float32, p.Size())
		for i := range v {
			v[i] = float32(0.3 * r.NormFloat64())
			if strings.Contains(p.Name, "gain") {
				v[i]++
			}
		}
		if err := m.SetParam(p.Name, v); err != nil {
			t.Fatal(err)
		}
	}
}

// copyParams writes every parameter of src into dst: quantized blocks as
// they are where both store them so, else src's values (dequantized).
func copyParams(t testing.TB, dst, src *Model) {
	t.Helper()
	for _, p := range src.Params() {
		if p.Quant != "" {
			if typ, blocks, err := src.ParamBlocks(p.Name); err == nil {
				if err := dst.SetParamBlocks(p.Name, typ, blocks); err == nil {
					continue
				}
			}
		}
		v, err := src.ParamValues(p.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := dst.SetParam(p.Name, v); err != nil {
			t.Fatal(err)
		}
	}
}

// TestF16: f16ToF32 widens every half exactly and f32ToF16 rounds to
// nearest even: every half comes back from its widening, and the values
// half-way between two halves go to the even one.
func TestF16(t *testing.T) {
	for h := range 1 << 16 {
		f := f16ToF32(uint16(h))
		if f != f { // NaN stays NaN
			if g := f32ToF16(f); g&0x7c00 != 0x7c00 || g&0x3ff == 0 {
				t.Fatalf("NaN %#x came back as %#x", h, g)
			}
			continue
		}
		if g := f32ToF16(f); g != uint16(h) {
			t.Fatalf("half %#x (%g) came back as %#x", h, f, g)
		}
		// Half-way to the next half up (same sign), for finite non-max.
		if h&0x7fff < 0x7bff {
			next := f16ToF32(uint16(h + 1))
			mid := float32((float64(f) + float64(next)) / 2)
			want := uint16(h)
			if h&1 == 1 {
				want = uint16(h + 1)
			}
			if g := f32ToF16(mid); g != want {
				t.Fatalf("half-way between %#x and %#x (%g) rounded to %#x, want %#x", h, h+1, mid, g, want)
			}
		}
	}
	if f32ToF16(70000) != 0x7c00 || f32ToF16(-1e-9) != 0x8000 {
		t.Errorf("overflow %#x, underflow %#x", f32ToF16(70000), f32ToF16(-1e-9))
	}
}

// quantRef is testdata/quant_blocks.json (scripts/quant_reference.py):
// float32 inputs, the gguf package's quantization of them and its
// dequantization.
type quantRef struct {
	Rows, Cols int
	Input      []float32
	Types      map[string]struct {
		Blocks      string
		Dequantized []float32
	}
}

// TestQuantizeMatchesGGUF: native's quantizers write the bytes the gguf
// package (ggml's reference quantizers) writes, and its dequantization
// gives the gguf package's values bit for bit; the blocks survive the
// rearrangement into rows (setBlocks, blocks).
func TestQuantizeMatchesGGUF(t *testing.T) {
	raw, err := os.ReadFile("testdata/quant_blocks.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref quantRef
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	for _, name := range quantStorages {
		r, ok := ref.Types[strings.ToUpper(name)]
		if !ok {
			t.Fatalf("testdata has no %s", name)
		}
		typ, _ := parseQuant(name)
		q := newQmat(typ, ref.Rows, ref.Cols)
		q.quantizeRows(ref.Input)
		want, _ := hex.DecodeString(r.Blocks)
		if got := q.blocks(); hex.EncodeToString(got) != r.Blocks {
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%s: byte %d (block %d) is %#x, gguf wrote %#x", name, i, i/typ.blockBytes(), got[i], want[i])
				}
			}
		}
		q2 := newQmat(typ, ref.Rows, ref.Cols)
		q2.setBlocks(want)
		row := make([]float32, ref.Cols)
		for j := range ref.Rows {
			q2.dequantRow(row, j)
			for i, v := range row {
				if w := r.Dequantized[j*ref.Cols+i]; math.Float32bits(v) != math.Float32bits(w) {
					t.Fatalf("%s: row %d value %d dequantizes to %v, gguf %v", name, j, i, v, w)
				}
			}
		}
	}
}

// TestQuantBase: a model whose frozen base is stored in quantized blocks
// computes, in products of more than gemmSmallM rows (Forward, Heads,
// the SFT loss and every trainable gradient through the frozen base,
// with and without recomputation, in float32 and in bf16 products), bit
// for bit what the same model computes with a float32 base holding the
// dequantized weights; decoding (products of a few rows read from the
// blocks) is within QuantTolerance of that model's decoding. It runs on
// every kernel tier.
func TestQuantBase(t *testing.T) {
	for _, tc := range quantConfigs() {
		for _, storage := range quantStorages {
			for _, matmul := range []string{MatmulFP32, MatmulBF16} {
				t.Run(tc.name+"/"+storage+"/"+matmul, func(t *testing.T) {
					q, err := NewWithOptions(tc.cfg, Options{LoRA: tc.lo, BaseStorage: storage}, 1)
					if err != nil {
						t.Fatal(err)
					}
					full, err := NewWithOptions(tc.cfg, Options{LoRA: tc.lo, BaseStorage: MatmulFP32}, 1)
					if err != nil {
						t.Fatal(err)
					}
					setRandom(t, q, 3)
					for _, p := range q.Params() {
						if p.Quant != storage && len(p.Shape) == 2 && !p.Trainable() {
							t.Fatalf("%s stored as %q, want %s", p.Name, p.Quant, storage)
						}
					}
					compareQuantBase(t, tc.cfg, q, full, storage, matmul, true)
				})
			}
		}
	}
}

// compareQuantBase checks q, a model whose base is in blocks of storage,
// against full, a float32 model of the same config and adapters, after
// writing q's adapters and full's weights (q's, dequantized) here:
// products in matmul, the heads' outputs, loss and gradients bit for
// bit, with and without recompute; decoding within QuantTolerance; with
// int8 activations (int8), within Int8Bound's statement.
func compareQuantBase(t *testing.T, cfg Config, q, full *Model, storage, matmul string, int8 bool) {
	t.Helper()
	// Non-zero adapters: the gradient flows through them.
	for _, p := range q.Params() {
		if strings.Contains(p.Name, "lora_b") {
			for i := range p.Data {
				p.Data[i] = float32(i%5) * 0.1
			}
		}
	}
	copyParams(t, full, q)
	if q.BaseStorage() != storage || q.NumParams() != full.NumParams() || q.BaseBytes() >= full.BaseBytes()/2 {
		t.Fatalf("storage %s, %d params (float32 %d), %d base bytes (float32 %d)", q.BaseStorage(), q.NumParams(), full.NumParams(), q.BaseBytes(), full.BaseBytes())
	}
	for _, m := range []*Model{q, full} {
		if _, err := m.SetMatmul(matmul); err != nil {
			t.Fatal(err)
		}
	}
	rr := rand.New(rand.NewPCG(5, 6))
	b, heads := packTrees(60, true, []tree{randTrees(rr, cfg.Vocab, 20, 9, 14)}, []tree{randTrees(rr, cfg.Vocab, 15, 22)})
	idx := flatten(heads)
	targets := randTokens(rr, len(idx), cfg.Vocab)
	seq := randTokens(rr, 15, cfg.Vocab)
	depth := 4*cfg.Layers + 1
	forEachKernel(t, func(t *testing.T) {
		for _, rec := range []bool{false, true} {
			var out [2][]float32
			var loss [2]float64
			for i, m := range []*Model{q, full} {
				m.Recompute = rec
				heads := forwardHeads(t, m, b, idx)
				m.ZeroGrad()
				if err := m.Forward(b); err != nil {
					t.Fatal(err)
				}
				l, err := m.CrossEntropyBackward(idx, targets, nil)
				if err != nil {
					t.Fatal(err)
				}
				out[i], loss[i] = append(heads, m.grad...), l
			}
			if loss[0] != loss[1] {
				t.Errorf("recompute %v: loss %v with a quantized base, %v with its dequantized float32 copy", rec, loss[0], loss[1])
			}
			for i := range out[0] {
				if math.Float32bits(out[0][i]) != math.Float32bits(out[1][i]) {
					t.Fatalf("recompute %v: output %d: %v with a quantized base, %v with its dequantized copy", rec, i, out[0][i], out[1][i])
				}
			}
		}
		// A prompt (panels), then token by token (blocks).
		for _, m := range []*Model{q, full} {
			m.Recompute = false
		}
		want := decodeSteps(t, full, seq, 6)
		got := decodeSteps(t, q, seq, 6)
		if d := maxRelDiff(got, toF64(want), 1); d > QuantTolerance(depth) {
			t.Errorf("decoding from the blocks differs from the dequantized float32 base's by %.2g (tolerance %.2g)", d, QuantTolerance(depth))
		}
		if !int8 {
			return
		}
		// int8 inputs: within int8's rounding, inputs moved by up to
		// 1/254 of their block's largest value (Int8Bound, per product),
		// through depth products of these weights (N(0, 0.3²): gains of
		// a few per layer): stated as 2/254 of the largest logit per
		// product, summed.
		if _, err := q.SetQuantActivations(ActivationsInt8); err != nil {
			t.Fatal(err)
		}
		got8 := decodeSteps(t, q, seq, 6)
		if _, err := q.SetQuantActivations(ActivationsFP32); err != nil {
			t.Fatal(err)
		}
		if d := maxRelDiff(got8, toF64(want), 1); d > 2*float64(depth)/254 || d == 0 {
			t.Errorf("int8 decoding differs from the float32 base's by %.2g of the largest logit (bound %.2g)", d, 2*float64(depth)/254)
		} else if len(simdKernels) > 0 && kern == simdKernels[0] {
			t.Logf("int8 decoding: %.2g of the largest logit from the float32 base's (bound %.2g)", d, 2*float64(depth)/254)
		}
	})
}

// decodeSteps prefills all but the last steps tokens of seq, decodes
// them one at a time, and returns every step's logits.
func decodeSteps(t *testing.T, m *Model, seq []int32, steps int) []float32 {
	t.Helper()
	c := newCache(t, m, 1, len(seq))
	out := extendCopy(t, m, c, []int{0}, [][]int32{seq[:len(seq)-steps]})
	for _, tok := range seq[len(seq)-steps:] {
		l, err := m.Decode(c, []int{0}, []int32{tok})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l...)
	}
	return out
}

// TestQuantStorageOptions: quantized storage needs a frozen base and
// whole blocks; MatrixStorage names base matrices only; SetParamBlocks
// takes the blocks of the matrix's format only.
func TestQuantStorageOptions(t *testing.T) {
	cfg := quantConfigs()[0].cfg
	lo := LoRAConfig{Rank: 1, Targets: []string{"q"}}
	for _, tc := range []struct {
		cfg  Config
		opt  Options
		want string // the storage, or the error's text
		err  bool
	}{
		{cfg, Options{BaseStorage: StorageQ4_1}, "frozen base", true},
		{cfg, Options{LoRA: lo, BaseStorage: "q5_0"}, "q8_0, q4_0, q4_1", true},
		{variantConfigs()[0].cfg, Options{LoRA: lo, BaseStorage: StorageQ8_0}, "not a multiple of 32", true},
		{cfg, Options{LoRA: lo, MatrixStorage: map[string]string{"/block_0/ln_attn/rms_normalization/gain": StorageQ8_0}}, "not a base matrix", true},
		{cfg, Options{LoRA: lo, MatrixStorage: map[string]string{"/nope": StorageQ8_0}}, "not a base matrix", true},
		{cfg, Options{LoRA: lo, BaseStorage: " Q4_1"}, StorageQ4_1, false},
		{cfg, Options{Frozen: true, BaseStorage: StorageQ8_0}, StorageQ8_0, false},
		{cfg, Options{Frozen: true, BaseStorage: StorageQ4_1, MatrixStorage: map[string]string{"/token_embed/embeddings": StorageQ8_0}}, "q8_0+q4_1", false},
		{cfg, Options{Frozen: true, MatrixStorage: map[string]string{"/block_1/ffn_down/dense/weights": StorageQ4_0}}, "fp32+q4_0", false},
	} {
		m, err := NewWithOptions(tc.cfg, tc.opt, 1)
		switch {
		case tc.err && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: got %v, want an error containing %q", tc.opt, err, tc.want)
		case !tc.err && err != nil:
			t.Errorf("%+v: %v", tc.opt, err)
		case !tc.err && m.BaseStorage() != tc.want:
			t.Errorf("%+v: base stored as %s, want %s", tc.opt, m.BaseStorage(), tc.want)
		case !tc.err && m.Matmul() != MatmulFP32:
			t.Errorf("%+v: products in %s, want fp32", tc.opt, m.Matmul())
		}
	}
	m, err := NewWithOptions(cfg, Options{Frozen: true, BaseStorage: StorageQ4_1}, 1)
	if err != nil {
		t.Fatal(err)
	}
	name := "/block_0/q/dense/weights"
	typ, blocks, err := m.ParamBlocks(name)
	if err != nil || typ != StorageQ4_1 || len(blocks) != 32*32/32*20 {
		t.Fatalf("ParamBlocks: %s, %d bytes, %v", typ, len(blocks), err)
	}
	for _, bad := range []struct {
		typ    string
		blocks []byte
		want   string
	}{
		{StorageQ8_0, blocks, "stored as q4_1"},
		{StorageQ4_1, blocks[1:], "needs 640 bytes"},
	} {
		if err := m.SetParamBlocks(name, bad.typ, bad.blocks); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("SetParamBlocks(%s, %d bytes): %v, want %q", bad.typ, len(bad.blocks), err, bad.want)
		}
	}
	if err := m.SetParamBlocks("/block_0/ln_attn/rms_normalization/gain", typ, blocks); err == nil || !strings.Contains(err.Error(), "not stored in quantized blocks") {
		t.Errorf("SetParamBlocks on a gain: %v", err)
	}
	if _, err := NewWithOptions(cfg, Options{LoRA: lo, BaseStorage: StorageQ8_0}, 1); err != nil {
		t.Fatal(err)
	}
	lm := newVariantModel(t, cfg, Options{LoRA: lo, BaseStorage: StorageQ8_0}, 2)
	if err := lm.MergeLoRA(); err == nil || !strings.Contains(err.Error(), "quantized blocks") {
		t.Errorf("MergeLoRA on a quantized base: %v", err)
	}
}

// randQmat is a rows x cols matrix of typ quantized from N(0, scale²)
// values with a few blocks of larger magnitude.
func randQmat(r *rand.Rand, typ quantType, rows, cols int, scale float64) *qmat {
	q := newQmat(typ, rows, cols)
	v := make([]float32, rows*cols)
	for i := range v {
		v[i] = float32(scale * r.NormFloat64())
		if (i/QuantBlock)%7 == 3 {
			v[i] *= 50
		}
	}
	q.quantizeRows(v)
	return q
}

// TestQGemvKernels: each kernel tier's few-row product from the blocks
// is within float32 rounding of the float64 product with the dequantized
// rows (relative to the sum of the terms' magnitudes: 2⁻¹⁸ of it), for
// every format, widths with partial groups of blocks, ragged quads and 1
// to 8 input rows, accumulating or not; and an output's bits are the
// same whatever the rows, j0 and n of the call that computes it.
func TestQGemvKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	forEachKernel(t, func(t *testing.T) {
		ws := &workspace{}
		for _, typ := range []quantType{qQ8_0, qQ4_0, qQ4_1} {
			for _, cols := range []int{32, 96, 544, 576, 1536} {
				const nrows = 23
				q := randQmat(r, typ, nrows, cols, 0.05)
				st := qsxStride(q.nb)
				for _, rows := range []int{1, 2, 3, 5, 8} {
					x := make([]float32, rows*(cols+5))
					for i := range x {
						x[i] = float32(r.NormFloat64())
					}
					ldx := cols + 5
					sx := make([]float32, rows*st)
					for i := range rows {
						qBlockSums(sx[i*st:(i+1)*st], x[i*ldx:i*ldx+cols])
					}
					for _, acc := range []bool{false, true} {
						ldy := nrows + 2
						y := make([]float32, rows*ldy)
						for i := range y {
							y[i] = float32(i % 5)
						}
						y0 := append([]float32(nil), y...)
						kern.qgemv(ws, q, 0, nrows, x, ldx, rows, sx, y, ldy, acc)
						w := make([]float32, cols)
						for j := range nrows {
							q.dequantRow(w, j)
							for i := range rows {
								var want, mag float64
								for k, v := range w {
									want += float64(x[i*ldx+k]) * float64(v)
									mag += math.Abs(float64(x[i*ldx+k]) * float64(v))
								}
								if acc {
									want += float64(y0[i*ldy+j])
									mag += math.Abs(float64(y0[i*ldy+j]))
								}
								if d := math.Abs(float64(y[i*ldy+j]) - want); d > 0x1p-18*mag {
									t.Fatalf("%s %d cols, %d rows, acc %v: y[%d][%d] = %v, want %v (off by %.2g of the terms' magnitude %g)", typ, cols, rows, acc, i, j, y[i*ldy+j], want, d/mag, mag)
								}
							}
						}
						// Each output alone: one input row, the one matrix
						// row at its j0.
						for i := range rows {
							for j := range nrows {
								one := []float32{y0[i*ldy+j]}
								kern.qgemv(ws, q, j, 1, x[i*ldx:], ldx, 1, sx[i*st:], one, 1, acc)
								if math.Float32bits(one[0]) != math.Float32bits(y[i*ldy+j]) {
									t.Fatalf("%s %d cols: y[%d][%d] is %v in a call of %d rows and 23 outputs, %v alone", typ, cols, i, j, y[i*ldy+j], rows, one[0])
								}
							}
						}
					}
				}
			}
		}
	})
}

// TestQDequantKernels: each tier's dequantization of a row's blocks
// gives dequantRange's values bit for bit (the panels of products of
// many rows are then those of a float32 base holding them), for every
// format and any range of blocks.
func TestQDequantKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	forEachKernel(t, func(t *testing.T) {
		for _, typ := range []quantType{qQ8_0, qQ4_0, qQ4_1} {
			q := randQmat(r, typ, 5, 544, 0.3)
			want, got := make([]float32, q.cols), make([]float32, q.cols)
			for j := range q.rows {
				for _, rg := range [][2]int{{0, q.nb}, {3, 4}, {5, 17}} {
					n := (rg[1] - rg[0]) * QuantBlock
					q.dequantRange(want[:n], j, rg[0], rg[1])
					kern.qdequant(q, got[:n], j, rg[0], rg[1])
					for i := range n {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s row %d blocks %v: value %d is %v, dequantRange's %v", typ, j, rg, i, got[i], want[i])
						}
					}
				}
			}
		}
	})
}

// TestQGemv8Kernels: the int8 products (quant8.go), each kernel tier:
// within float32 rounding (2⁻¹⁸ of the terms' magnitude) of the float64
// product of the dequantized rows with the input rounded to its int8
// grid (x̃ = dx·q), within Int8Bound of the float32 product with the
// input as it is, and an output's bits the same whatever the rows, j0
// and n of the call.
func TestQGemv8Kernels(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	forEachKernel(t, func(t *testing.T) {
		ws := &workspace{}
		for _, typ := range []quantType{qQ8_0, qQ4_0, qQ4_1} {
			for _, cols := range []int{32, 96, 544, 576, 1536} {
				const nrows = 23
				q := randQmat(r, typ, nrows, cols, 0.05)
				for _, rows := range []int{1, 3} {
					ldx := cols + 5
					x := make([]float32, rows*ldx)
					for i := range x {
						x[i] = float32(r.NormFloat64())
					}
					if cols >= 96 {
						clear(x[32:64]) // a block of zeros
					}
					var in q8Input
					quantizeInput8(&in, x, ldx, rows, q.nb)
					if kern.qprep8 != nil {
						kern.qprep8(&in, typ)
					}
					for _, acc := range []bool{false, true} {
						ldy := nrows + 2
						y := make([]float32, rows*ldy)
						for i := range y {
							y[i] = float32(i % 5)
						}
						y0 := append([]float32(nil), y...)
						kern.qgemv8(ws, q, 0, nrows, &in, y, ldy, acc)
						w := make([]float32, cols)
						for j := range nrows {
							q.dequantRow(w, j)
							for i := range rows {
								var want, mag, exact float64
								for k, v := range w {
									xt := float64(in.dx[i*q.nb+k/QuantBlock]) * float64(in.q[i*q.nb*QuantBlock+k])
									want += xt * float64(v)
									mag += math.Abs(xt * float64(v))
									exact += float64(x[i*ldx+k]) * float64(v)
								}
								if acc {
									want += float64(y0[i*ldy+j])
									exact += float64(y0[i*ldy+j])
									mag += math.Abs(float64(y0[i*ldy+j]))
								}
								got := float64(y[i*ldy+j])
								if d := math.Abs(got - want); d > 0x1p-18*mag {
									t.Fatalf("%s %d cols, %d rows, acc %v: y[%d][%d] = %v, want %v (off by %.2g of the terms' magnitude)", typ, cols, rows, acc, i, j, got, want, d/mag)
								}
								if bound := Int8Bound(x[i*ldx:i*ldx+cols], w); math.Abs(got-exact) > bound+0x1p-18*mag {
									t.Fatalf("%s %d cols: y[%d][%d] = %v is %.3g from the float32 product %v, beyond Int8Bound %.3g", typ, cols, i, j, got, math.Abs(got-exact), exact, bound)
								}
							}
						}
						for i := range rows {
							var one q8Input
							quantizeInput8(&one, x[i*ldx:], ldx, 1, q.nb)
							if kern.qprep8 != nil {
								kern.qprep8(&one, typ)
							}
							for j := range nrows {
								o := []float32{y0[i*ldy+j]}
								kern.qgemv8(ws, q, j, 1, &one, o, 1, acc)
								if math.Float32bits(o[0]) != math.Float32bits(y[i*ldy+j]) {
									t.Fatalf("%s %d cols: y[%d][%d] is %v in a call of %d rows and 23 outputs, %v alone", typ, cols, i, j, y[i*ldy+j], rows, o[0])
								}
							}
						}
					}
				}
			}
		}
	})
}

// TestQuantizeInput8: every tier quantizes an input row for the int8
// products to the same integers, scales and sums (the integer sums are
// then the same everywhere): a block of zeros, values half-way between
// two steps (rounded to even), and normal draws.
func TestQuantizeInput8(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	x := make([]float32, 7*QuantBlock)
	for i := range x {
		x[i] = float32(r.NormFloat64()) * float32(1+i/QuantBlock)
	}
	clear(x[32:64])
	for i := range 32 { // block 2: max 127, so the steps are whole numbers
		x[64+i] = float32(i) + 0.5
	}
	x[64] = 127
	var want q8Input
	saved := kern
	kern = genericKernels
	quantizeInput8(&want, x, len(x), 1, 7)
	kern = saved
	if want.q[64+1] != 2 || want.q[64+2] != 2 || want.sum[1] != 0 || want.dx[1] != 0 {
		t.Fatalf("generic: q %v, sums %v, dx %v", want.q[64:70], want.sum, want.dx)
	}
	forEachKernel(t, func(t *testing.T) {
		var got q8Input
		quantizeInput8(&got, x, len(x), 1, 7)
		for i := range want.q {
			if got.q[i] != want.q[i] {
				t.Fatalf("q[%d] = %d, generic %d", i, got.q[i], want.q[i])
			}
		}
		for b := range 7 {
			if got.dx[b] != want.dx[b] || got.sum[b] != want.sum[b] || got.sxq[b] != want.sxq[b] {
				t.Fatalf("block %d: dx %v sum %d sxq %v, generic %v %d %v", b, got.dx[b], got.sum[b], got.sxq[b], want.dx[b], want.sum[b], want.sxq[b])
			}
		}
	})
}
