package native

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/policy/ggml"
)

// rawScales places and sizes each raw format's float16 scales in a
// random block: their byte offsets, and the magnitude that keeps the
// block's values near N(0, 0.3²)'s (sub-block scale and value ranges
// differ by format); dmin-like second scales (Q5_1's m, the K-quants'
// dmin) get their own.
var rawScales = map[quantType]struct {
	d, dmin     int // offsets; dmin -1 when none
	sd, sdmin   float64
	minNegative bool // Q5_1's m is an offset added, of either sign
}{
	qQ5_1:   {0, 2, 0.02, 0.3, true},
	qQ2_K:   {80, 82, 0.015, 0.01, false},
	qQ3_K:   {108, -1, 0.003, 0, false},
	qQ4_K:   {0, 2, 0.0007, 0.005, false},
	qQ5_K:   {0, 2, 0.0004, 0.005, false},
	qQ6_K:   {208, -1, 0.0001, 0, false},
	qIQ4_XS: {0, -1, 0.0001, 0, false},
}

// rawTypes are the formats kept as a GGUF file stores them.
func rawTypes() []quantType {
	var ts []quantType
	for t := range rawFormats {
		if quantType(t).raw() != nil {
			ts = append(ts, quantType(t))
		}
	}
	return ts
}

// randRawBlocks is n random blocks of typ: random bytes (every value,
// sub-block scale and high bit drawn) with float16 scales of the
// format's magnitude.
func randRawBlocks(r *rand.Rand, typ quantType, n int) []byte {
	f, sc := typ.raw(), rawScales[typ]
	b := make([]byte, n*f.Bytes)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	put := func(o []byte, v float64) {
		h := f32ToF16(float32(v))
		o[0], o[1] = byte(h), byte(h>>8)
	}
	for k := range n {
		blk := b[k*f.Bytes : (k+1)*f.Bytes]
		put(blk[sc.d:], sc.sd*(0.5+r.Float64()))
		if sc.dmin >= 0 {
			v := sc.sdmin * (0.5 + r.Float64())
			if sc.minNegative {
				v = sc.sdmin * r.NormFloat64()
			}
			put(blk[sc.dmin:], v)
		}
	}
	return b
}

// rawConfigs are architectures whose matrices' rows (inputs) are whole
// blocks of 256: a Llama (tied head, GQA) and a Qwen2 (untied head,
// q/k/v biases).
func rawConfigs() []struct {
	name string
	cfg  Config
	lo   LoRAConfig
} {
	return []struct {
		name string
		cfg  Config
		lo   LoRAConfig
	}{
		{"llama", Config{Vocab: 45, DModel: 256, Heads: 4, KVHeads: 2, HeadSize: 64, Layers: 1, FFN: 512, Ctx: 40,
			Norm: NormRMS, NormEps: 1e-5, FFNKind: FFNSwiGLU, NoQKVBias: true, NoOutBias: true, NoFFNBias: true, NoLMBias: true, TiedEmbed: true},
			LoRAConfig{Rank: 2, Alpha: 3, Targets: allTargets}},
		{"qwen2", Config{Vocab: 37, DModel: 256, Heads: 2, KVHeads: 1, HeadSize: 128, Layers: 1, FFN: 256, Ctx: 40, RoPEBase: 1e6,
			Norm: NormRMS, FFNKind: FFNSwiGLU, NoOutBias: true, NoFFNBias: true, NoLMBias: true},
			LoRAConfig{Rank: 3, Targets: []string{"q", "v", "down"}}},
	}
}

// newRawModel is a model of cfg whose every base matrix is kept in typ's
// blocks (MatrixStorage, a loaded base), written with random blocks; the
// other parameters as setRandom draws them.
func newRawModel(t *testing.T, cfg Config, lo LoRAConfig, typ quantType, seed uint64) *Model {
	t.Helper()
	plain, err := NewWithOptions(cfg, Options{LoRA: lo}, 1)
	if err != nil {
		t.Fatal(err)
	}
	storage := map[string]string{}
	for _, p := range plain.Params() {
		if len(p.Shape) == 2 && !p.Trainable() {
			storage[p.Name] = typ.String()
		}
	}
	m, err := NewWithOptions(cfg, Options{LoRA: lo, MatrixStorage: storage, LoadedBase: true}, 1)
	if err != nil {
		t.Fatal(err)
	}
	setRandom(t, m, seed)
	r := rand.New(rand.NewPCG(seed, 19))
	for _, p := range m.Params() {
		if p.Quant != "" {
			if err := m.SetParamBlocks(p.Name, p.Quant, randRawBlocks(r, typ, p.Size()/typ.blockValues())); err != nil {
				t.Fatal(err)
			}
		}
	}
	return m
}

// TestRawQuantBase: a base kept in each raw format (Q5_1, the K-quants,
// IQ4_XS, as a GGUF file stores them) computes what a float32 base
// holding its dequantized values computes: logits, loss and gradients
// bit for bit (fp32 and bf16 products), decoding within QuantTolerance;
// int8 activations do not apply to the formats without an int8 form on
// this CPU (the same decoding, bit for bit) and move those with one
// (Q4_K, Q5_K, Q6_K: ggml.Format.DotQ8) by the inputs' rounding only.
// Every format runs on the Llama in fp32; Q4_K and Q6_K (the common
// files' formats) on both architectures in fp32 and bf16.
func TestRawQuantBase(t *testing.T) {
	for _, tc := range rawConfigs() {
		for _, typ := range rawTypes() {
			for _, matmul := range []string{MatmulFP32, MatmulBF16} {
				if (tc.name != "llama" || matmul != MatmulFP32) && typ != qQ4_K && typ != qQ6_K {
					continue // the other formats: one architecture, fp32
				}
				t.Run(tc.name+"/"+typ.String()+"/"+matmul, func(t *testing.T) {
					q := newRawModel(t, tc.cfg, tc.lo, typ, 3)
					full, err := NewWithOptions(tc.cfg, Options{LoRA: tc.lo, BaseStorage: MatmulFP32}, 1)
					if err != nil {
						t.Fatal(err)
					}
					compareQuantBase(t, tc.cfg, q, full, typ.String(), matmul, false)
					seq := randTokens(rand.New(rand.NewPCG(7, 8)), 12, tc.cfg.Vocab)
					want := decodeSteps(t, q, seq, 4)
					if _, err := q.SetQuantActivations(ActivationsInt8); err != nil {
						t.Fatal(err)
					}
					got := decodeSteps(t, q, seq, 4)
					if typ.raw().HasDotQ8() {
						// The products take int8 inputs: the logits move by
						// what the inputs' rounding (up to 1/254 of a
						// 256-block's largest input) makes of them in these
						// tiny random models: measured 0.011-0.013 of the
						// largest logit (Q4_K), 0.034-0.043 (Q6_K), 0.11
						// (Q5_K; float32 products of the inputs rounded to
						// the same int8 grid move them by the same 0.113:
						// the rounding, not the kernel). The products themselves are checked
						// exactly (ggml's TestDotQ8, TestGemvRawInt8); this
						// bound catches a path that did not run, or ran
						// wild (a min's sign: 1.6 of the largest).
						scale, diff := 1.0, 0.0
						for i := range want {
							scale = max(scale, math.Abs(float64(want[i])))
							diff = max(diff, math.Abs(float64(got[i]-want[i])))
						}
						t.Logf("%s: int8 activations moved the logits by %.3g of the largest", typ, diff/scale)
						if diff == 0 || diff/scale > 0.25 {
							t.Errorf("int8 activations moved the logits by %.3g of the largest: want above 0 (the int8 form ran) and at most 0.25", diff/scale)
						}
						return
					}
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("logit %d: %v with int8 activations, %v without: %s has no int8 form here, so its products take float32 inputs", i, got[i], want[i], typ)
						}
					}
				})
			}
		}
	}
}

// TestRawDequantRange: a raw matrix's dequantRange over any range of
// 32-value blocks (inside one 256-value block, across several, whole)
// is the matching part of its whole row's values, and those are the
// format's own dequantization of the row's bytes.
func TestRawDequantRange(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, typ := range rawTypes() {
		f := typ.raw()
		const rows, cols = 3, 768
		q := newQmat(typ, rows, cols)
		src := randRawBlocks(r, typ, rows*cols/f.Values)
		q.setBlocks(src)
		if !bytes.Equal(q.blocks(), src) {
			t.Fatalf("%s: blocks() does not give back setBlocks' bytes", typ)
		}
		full, want := make([]float32, cols), make([]float32, cols)
		for j := range rows {
			q.dequantRow(full, j)
			f.DequantBlocks(want, src[j*q.rowBytes:(j+1)*q.rowBytes])
			for i := range cols {
				if math.Float32bits(full[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s row %d value %d: %v, the format's %v", typ, j, i, full[i], want[i])
				}
			}
			for _, rg := range [][2]int{{0, q.nb}, {3, 4}, {5, 17}, {7, 9}, {8, 16}, {23, 24}} {
				got := make([]float32, (rg[1]-rg[0])*QuantBlock)
				q.dequantRange(got, j, rg[0], rg[1])
				for i, v := range got {
					if math.Float32bits(v) != math.Float32bits(full[rg[0]*QuantBlock+i]) {
						t.Fatalf("%s row %d blocks %v: value %d is %v, the row's %v", typ, j, rg, i, v, full[rg[0]*QuantBlock+i])
					}
				}
			}
		}
	}
}

// TestQGemvRawFused: for every raw format, qgemvRaw with 1 to 5 input
// rows (strided, as decoding lays them out; accumulating into y or not)
// gives the float64 products of the dequantized rows within float32
// rounding of the terms' magnitudes, both by the row-by-row path (each
// weight row dequantized, then kernels.dot) and by the form the format
// takes on this CPU: the fused dot
// products of Q4_K, Q5_K and Q6_K (rows in pairs where the two-row form
// exists), the other formats' row-by-row path itself.
func TestQGemvRawFused(t *testing.T) {
	if err := selectKernels(); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(23, 24))
	for _, typ := range rawTypes() {
		const n, cols, ldx, ldy = 7, 768, 800, 9
		q := newQmat(typ, n, cols)
		q.setBlocks(randRawBlocks(r, typ, n*cols/typ.blockValues()))
		for rows := 1; rows <= 5; rows++ {
			x := randSlice(r, rows*ldx)
			for _, acc := range []bool{false, true} {
				y0 := randSlice(r, rows*ldy)
				got, want := append([]float32(nil), y0...), append([]float32(nil), y0...)
				ws := &workspace{}
				qgemvRaw(ws, q, 0, n, x, ldx, rows, got, ldy, acc)
				fusedRawDot = false
				qgemvRaw(ws, q, 0, n, x, ldx, rows, want, ldy, acc)
				fusedRawDot = true
				row := make([]float32, cols)
				for j := range n {
					q.dequantRow(row, j)
					for rr := range rows {
						var ref, mag float64
						for i, v := range row {
							ref += float64(v) * float64(x[rr*ldx+i])
							mag += math.Abs(float64(v) * float64(x[rr*ldx+i]))
						}
						if acc {
							ref += float64(y0[rr*ldy+j])
							mag += math.Abs(float64(y0[rr*ldy+j]))
						}
						for _, c := range []struct {
							path string
							v    float32
						}{{"this CPU's", got[rr*ldy+j]}, {"the row-by-row", want[rr*ldy+j]}} {
							if d := math.Abs(float64(c.v) - ref); !(d <= 1e-5*mag) {
								t.Fatalf("%s, %d rows (acc %v): output %d of row %d is %v by %s path, the float64 product of the dequantized row %v", typ, rows, acc, j, rr, c.v, c.path, ref)
							}
						}
					}
				}
				for i := range got { // the outputs past n in each row's stride stay as they were
					if i%ldy >= n && got[i] != y0[i] {
						t.Fatalf("%s, %d rows: y[%d] past the outputs was written", typ, rows, i)
					}
				}
			}
		}
	}
}

// TestRawStorageOptions: a raw format is a storage for the matrices of a
// loaded base only, written by SetParamBlocks (float32 values are
// refused: mlerl does not quantize into it), of whole 256-value blocks.
func TestRawStorageOptions(t *testing.T) {
	tc := rawConfigs()[0]
	name := "/block_0/q/dense/weights"
	for _, bad := range []struct {
		opt  Options
		want string
	}{
		{Options{LoRA: tc.lo, BaseStorage: "q4_k"}, "only as a GGUF file stores them"},
		{Options{LoRA: tc.lo, MatrixStorage: map[string]string{name: "Q6_K"}}, "come only from a loaded base"},
	} {
		if _, err := NewWithOptions(tc.cfg, bad.opt, 1); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: %v, want an error containing %q", bad.opt, err, bad.want)
		}
	}
	small := quantConfigs()[0]
	if _, err := NewWithOptions(small.cfg, Options{LoRA: small.lo, LoadedBase: true, MatrixStorage: map[string]string{name: "q4_k"}}, 1); err == nil || !strings.Contains(err.Error(), "not a multiple of 256") {
		t.Errorf("q4_k rows of 32 values: %v", err)
	}
	m := newRawModel(t, tc.cfg, tc.lo, qQ4_K, 1)
	if got := m.BaseStorage(); got != "q4_k" {
		t.Errorf("base stored as %s, want q4_k", got)
	}
	typ, blocks, err := m.ParamBlocks(name)
	if err != nil || typ != "q4_k" || len(blocks) != 256*256/256*144 {
		t.Fatalf("ParamBlocks: %s, %d bytes, %v", typ, len(blocks), err)
	}
	if err := m.SetParam(name, make([]float32, 256*256)); err == nil || !strings.Contains(err.Error(), "does not quantize into q4_k") {
		t.Errorf("SetParam on a q4_k matrix: %v", err)
	}
	if err := m.SetParamOutIn(name, make([]float32, 256*256)); err == nil || !strings.Contains(err.Error(), "does not quantize into q4_k") {
		t.Errorf("SetParamOutIn on a q4_k matrix: %v", err)
	}
	for _, b := range []struct {
		typ    string
		blocks []byte
		want   string
	}{
		{"q6_k", blocks, "stored as q4_k"},
		{"q4_k", blocks[1:], "needs 36864 bytes"},
	} {
		if err := m.SetParamBlocks(name, b.typ, b.blocks); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("SetParamBlocks(%s, %d bytes): %v, want %q", b.typ, len(b.blocks), err, b.want)
		}
	}
}

// TestGemvRawInt8: with int8 activations, a product of a few rows with a
// Q4_K, Q5_K or Q6_K matrix (gemm, as decoding calls it) equals the
// float64 product of the dequantized rows with the inputs as ggml.Q8K
// rounds them, to within float32 rounding of the terms' magnitudes, for
// 1-5 strided rows with and without accumulation; the outputs past n in
// each row's stride stay as they were. Formats without the int8 form
// keep float32 inputs (the float32 product's tolerance).
func TestGemvRawInt8(t *testing.T) {
	if err := selectKernels(); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(25, 26))
	p := newPool(3)
	ran := 0
	for _, typ := range rawTypes() {
		f := typ.raw()
		const n, cols, ldx, ldy = 70, 768, 800, 73
		q := newQmat(typ, n, cols)
		q.setBlocks(randRawBlocks(r, typ, n*cols/typ.blockValues()))
		if f.HasDotQ8() {
			ran++
		}
		for rows := 1; rows <= 5; rows++ {
			x := randSlice(r, rows*ldx)
			for _, acc := range []bool{false, true} {
				y0 := randSlice(r, rows*ldy)
				got := append([]float32(nil), y0...)
				gemm(p, gemmOp{tb: true, m: rows, n: n, k: cols, a: x, lda: ldx, c: got, ldc: ldy, acc: acc, bq: q, q8: true})
				row := make([]float32, cols)
				for rr := range rows {
					xr := x[rr*ldx : rr*ldx+cols]
					if f.HasDotQ8() {
						var q8 ggml.Q8K
						q8.Quantize(xr)
						xr = make([]float32, cols)
						for i := range xr {
							xr[i] = q8.D[i/256] * float32(q8.Q[i])
						}
					}
					for j := range n {
						q.dequantRow(row, j)
						var ref, mag float64
						for i, v := range row {
							ref += float64(v) * float64(xr[i])
							mag += math.Abs(float64(v) * float64(xr[i]))
						}
						if acc {
							ref += float64(y0[rr*ldy+j])
							mag += math.Abs(float64(y0[rr*ldy+j]))
						}
						if d := math.Abs(float64(got[rr*ldy+j]) - ref); !(d <= 1e-5*mag) {
							t.Fatalf("%s (int8 form %v), %d rows (acc %v): output %d of row %d is %v, the float64 product %v", typ, f.HasDotQ8(), rows, acc, j, rr, got[rr*ldy+j], ref)
						}
					}
				}
				for i := range got {
					if i%ldy >= n && got[i] != y0[i] {
						t.Fatalf("%s, %d rows: y[%d] past the outputs was written", typ, rows, i)
					}
				}
			}
		}
	}
	if ran == 0 {
		t.Skip("no int8 dot product on this CPU (AVX2)")
	}
}
