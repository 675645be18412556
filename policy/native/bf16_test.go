package native

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// forEachBF16 runs f with each bf16 implementation this CPU has in use:
// the plain-Go one, and the AVX512_BF16 one where it exists.
func forEachBF16(t *testing.T, f func(t *testing.T, bk *bf16Kernels)) {
	t.Helper()
	if err := selectKernels(); err != nil {
		t.Fatal(err)
	}
	saved := bf16Fast
	defer func() { bf16Fast = saved }()
	impls := []*bf16Kernels{bf16Generic}
	if saved != nil && KernelName() == "avx512" {
		impls = append(impls, saved)
		impls = append(impls, bf16Others...)
	}
	for _, bk := range impls {
		bf16Fast = nil
		if bk != bf16Generic {
			bf16Fast = bk
		}
		if bf16Kern() != bk {
			t.Fatalf("bf16Kern() is %s, want %s", bf16Kern().name, bk.name)
		}
		t.Run(bk.name, func(t *testing.T) { f(t, bk) })
	}
}

// TestToBF16: round to nearest even on the 16 bits dropped, signed zero
// for zeros and denormals, infinities kept, NaN kept a NaN (also the NaN
// that rounding up would carry into the sign), overflow to infinity.
func TestToBF16(t *testing.T) {
	cases := []struct {
		in   uint32
		want uint16
	}{
		{0x3f800000, 0x3f80},                 // 1
		{0x3f808000, 0x3f80},                 // tie, even stays
		{0x3f818000, 0x3f82},                 // tie, odd rounds up
		{0x3f808001, 0x3f81},                 // above the tie
		{0x3f807fff, 0x3f80},                 // below the tie
		{0xbf818000, 0xbf82},                 // negative tie
		{0x00000000, 0x0000},                 // +0
		{0x80000000, 0x8000},                 // -0
		{0x00400000, 0x0000},                 // denormal
		{0x807fffff, 0x8000},                 // negative denormal
		{0x7f800000, 0x7f80},                 // +inf
		{0xff800000, 0xff80},                 // -inf
		{0x7f7fffff, 0x7f80},                 // max float rounds to inf
		{0x7fc00000, 0x7fc0},                 // quiet NaN
		{0x7fffffff, 0x7fff},                 // NaN with every bit: no carry into the sign
		{0x7f800001, 0x7fc0},                 // signalling NaN with low bits only: quieted
		{math.Float32bits(3.140625), 0x4049}, // exact in bf16
	}
	for _, c := range cases {
		if got := toBF16(math.Float32frombits(c.in)); got != c.want {
			t.Errorf("toBF16(%#08x) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
	if v := fromBF16(0x4049); v != 3.140625 {
		t.Errorf("fromBF16(0x4049) = %v", v)
	}
}

// bf16Inputs is random values of varied magnitude with every special
// value mixed in.
func bf16Inputs(r *rand.Rand, n int) []float32 {
	specials := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.Float32frombits(0x7fffffff), math.Float32frombits(0x00400000), math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000), math.MaxFloat32}
	out := make([]float32, n)
	for i := range out {
		if r.IntN(8) == 0 {
			out[i] = specials[r.IntN(len(specials))]
		} else {
			out[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(9)-4)))
		}
	}
	return out
}

// TestCvtBF16MatchesToBF16: every implementation's vector conversions
// give toBF16's bits, at every length around the vector width.
func TestCvtBF16MatchesToBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	forEachBF16(t, func(t *testing.T, bk *bf16Kernels) {
		for n := range 70 {
			src, src1 := bf16Inputs(r, n), bf16Inputs(r, n)
			dst := make([]uint16, n+1)
			dst[n] = 0xabcd
			bk.cvt(dst[:n], src)
			pairs := make([]uint32, n+1)
			pairs[n] = 0xdeadbeef
			bk.cvtPairs(pairs[:n], src, src1)
			for i := range n {
				if want := toBF16(src[i]); dst[i] != want {
					t.Fatalf("n %d: cvt(%#08x) = %#04x, want %#04x", n, math.Float32bits(src[i]), dst[i], want)
				}
				if want := uint32(toBF16(src[i])) | uint32(toBF16(src1[i]))<<16; pairs[i] != want {
					t.Fatalf("n %d: cvtPairs[%d] = %#08x, want %#08x", n, i, pairs[i], want)
				}
			}
			if dst[n] != 0xabcd || pairs[n] != 0xdeadbeef {
				t.Fatalf("n %d: a conversion wrote past its end", n)
			}
		}
		// Panels: nr pairs each, stride apart, nothing written between.
		for _, panels := range []int{1, 2, 5} {
			stride := bk.nr + 7
			r0, r1 := bf16Inputs(r, panels*bk.nr), bf16Inputs(r, panels*bk.nr)
			dst := make([]uint32, panels*stride)
			for i := range dst {
				dst[i] = 0xdeadbeef
			}
			bk.cvtPanels(panels, r0, r1, dst, stride)
			for i, v := range dst {
				p, j := i/stride, i%stride
				want := uint32(0xdeadbeef)
				if j < bk.nr {
					c := p*bk.nr + j
					want = uint32(toBF16(r0[c])) | uint32(toBF16(r1[c]))<<16
				}
				if v != want {
					t.Fatalf("%d panels: dst[%d] = %#08x, want %#08x", panels, i, v, want)
				}
			}
		}
		// A's panels: two of mr pairs per k pair, down qn pairs of rows,
		// nothing written past a panel's qn runs (a kernel reading A in
		// rows has none).
		for _, qn := range []int{1, 2, 7} {
			if bk.rowA {
				break
			}
			mr, lda, stride := bk.mr, 2*bk.mr+5, qn*bk.mr+3
			src := bf16Inputs(r, 2*qn*lda)
			dst := make([]uint32, 2*stride)
			for i := range dst {
				dst[i] = 0xdeadbeef
			}
			bk.cvtPanelsA(qn, src, lda, dst, stride)
			for i, v := range dst {
				p, j := i/stride, i%stride
				want := uint32(0xdeadbeef)
				if j < qn*mr {
					q, c := j/mr, p*mr+j%mr
					want = uint32(toBF16(src[2*q*lda+c])) | uint32(toBF16(src[(2*q+1)*lda+c]))<<16
				}
				if v != want {
					t.Fatalf("cvtPanelsA, %d pairs: dst[%d] = %#08x, want %#08x", qn, i, v, want)
				}
			}
		}
	})
}

// TestGemmBF16 checks the bf16 product in all four layouts, odd k, ragged
// rows and columns, overwriting and accumulating, serial and parallel
// sizes, on the pool and on one worker (gemmSerial: attention's): C equals the float64 product of the bf16-rounded inputs within
// float32 rounding, nothing outside C is written, and C is within bf16's
// rounding of the float32 product.
func TestGemmBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	sizes := [][3]int{{9, 1, 1}, {9, 130, 77}, {12, 33, 130}, {13, 64, 128}, {17, 70, 5}, {33, 31, 2}, {67, 45, 260}, {130, 300, 65}, {200, 257, 301}}
	forEachBF16(t, func(t *testing.T, bk *bf16Kernels) {
		for _, sz := range sizes {
			for _, ta := range []bool{false, true} {
				for _, tb := range []bool{false, true} {
					for _, acc := range []bool{false, true} {
						m, n, k := sz[0], sz[1], sz[2]
						name := fmt.Sprintf("%dx%dx%d ta=%v tb=%v acc=%v", m, n, k, ta, tb, acc)
						lda, ldb, ldc := k+3, n+1, n+5
						if ta {
							lda = m + 2
						}
						if tb {
							ldb = k + 1
						}
						a := randSlice(r, max(m, k)*lda)
						b := randSlice(r, max(n, k)*ldb)
						c0 := randSlice(r, m*ldc)
						want, bound := refGemm(ta, tb, m, n, k, a, lda, b, ldb, c0, ldc, acc, func(v float32) float64 { return float64(fromBF16(toBF16(v))) })
						f32 := append([]float32(nil), c0...)
						gemm(workers(), gemmOp{ta: ta, tb: tb, m: m, n: n, k: k, a: a, lda: lda, b: b, ldb: ldb, c: f32, ldc: ldc, acc: acc})
						var first []float32
						for _, mode := range []string{"pool", "serial", "shared A"} {
							c := append([]float32(nil), c0...)
							op := gemmOp{ta: ta, tb: tb, m: m, n: n, k: k, a: a, lda: lda, b: b, ldb: ldb, c: c, ldc: ldc, acc: acc, bf16: true}
							switch mode {
							case "pool":
								gemm(workers(), op)
								first = c
							case "serial":
								gemmSerial(&workspace{}, op)
							case "shared A":
								op.bf16A = shareBF16A(workers(), &bf16Input{}, true, ta, a, lda, m, k)
								gemm(workers(), op)
								// The same conversion, once: the same bits.
								for i := range c {
									if math.Float32bits(c[i]) != math.Float32bits(first[i]) {
										t.Fatalf("%s: shared A: C[%d] = %g, unshared %g", name, i, c[i], first[i])
									}
								}
							}
							name := fmt.Sprintf("%s %s", name, mode)
							for i := range m {
								for j := range ldc {
									at := i*ldc + j
									if j >= n {
										if c[at] != c0[at] {
											t.Fatalf("%s: wrote outside C at (%d, %d)", name, i, j)
										}
										continue
									}
									if math.Abs(float64(c[at])-want[at]) > 2e-6*bound[at]+1e-6 {
										t.Fatalf("%s: C(%d,%d) = %g, want %g (bf16 inputs)", name, i, j, c[at], want[at])
									}
									// Each input is within 2^-9 of its value: a product
									// within about 2^-8 of its magnitude.
									if math.Abs(float64(c[at])-float64(f32[at])) > 8e-3*bound[at]+1e-5 {
										t.Fatalf("%s: C(%d,%d) = %g, float32 product %g: further than bf16 rounding", name, i, j, c[at], f32[at])
									}
								}
							}
						}
					}
				}
			}
		}
	})
}

// TestGemmBF16Routing: gemm takes the bf16 path only when asked and only
// above gemmSmallM rows (decoding stays float32, bit for bit).
func TestGemmBF16Routing(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, m := range []int{1, gemmSmallM, gemmSmallM + 1} {
		n, k := 40, 70
		a, b := randSlice(r, m*k), randSlice(r, k*n)
		c32, c16 := make([]float32, m*n), make([]float32, m*n)
		gemm(workers(), gemmOp{m: m, n: n, k: k, a: a, lda: k, b: b, ldb: n, c: c32, ldc: n})
		gemm(workers(), gemmOp{m: m, n: n, k: k, a: a, lda: k, b: b, ldb: n, c: c16, ldc: n, bf16: true})
		same := true
		for i := range c32 {
			same = same && c32[i] == c16[i]
		}
		if m <= gemmSmallM && !same {
			t.Errorf("m %d: bf16 changed a decoding-sized product", m)
		}
		if m > gemmSmallM && same {
			t.Errorf("m %d: bf16 asked for but the product is float32's", m)
		}
	}
}

// TestSetMatmul: the model computes in the precision it is given, fp32
// or bf16 in any case; "auto" (the caller's to resolve) and an unknown
// mode are errors naming what to do.
func TestSetMatmul(t *testing.T) {
	m := newTestModel(t, tinyConfig(), 1)
	if m.Matmul() != MatmulFP32 {
		t.Fatalf("a new model computes in %s, want fp32", m.Matmul())
	}
	for _, mode := range []string{"fp32", "BF16", "fp32", " bf16 "} {
		got, err := m.SetMatmul(mode)
		if err != nil || got != m.Matmul() || got != strings.ToLower(strings.TrimSpace(mode)) {
			t.Errorf("SetMatmul(%q) = %q, %v; model says %s", mode, got, err, m.Matmul())
		}
	}
	for mode, want := range map[string]string{"fp16": "want fp32 or bf16", "auto": "policy.ResolvePrecision"} {
		if _, err := m.SetMatmul(mode); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("SetMatmul(%s): %v, want an error containing %q", mode, err, want)
		}
	}
	if m.Matmul() != MatmulBF16 {
		t.Errorf("a refused mode changed the model's products to %s", m.Matmul())
	}
}

// TestBF16TrainsLikeFP32 is the training check on the smallest model the
// bench's batches fit: the same SFT steps from the same weights, once in
// float32 and once with bf16 products; each step's loss stays within 2%
// of float32's, and both curves fall by the same amount within 2% of the
// start. (make bench repeats the check on the bench shape; the demo
// recipe's is in BENCHMARKS.md.)
func TestBF16TrainsLikeFP32(t *testing.T) {
	// One head of 64 values: the attention's products take bf16 too
	// (attnBF16MinHead), over several blocks of queries (attnPanels).
	cfg := Config{Vocab: 4096, DModel: 64, Heads: 1, Layers: 2, FFN: 128, Ctx: 256}
	batches := benchBatches(24)
	run := func(mode string) []float64 {
		m, err := New(cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.SetMatmul(mode); err != nil {
			t.Fatal(err)
		}
		opt := NewAdamW(m, AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.01, ClipNorm: 1})
		var losses []float64
		for i := range 2 * len(batches) {
			bt := batches[i%len(batches)]
			idx, tg, w := bt.headTargets(false)
			m.ZeroGrad()
			if err := m.Forward(bt.Batch); err != nil {
				t.Fatal(err)
			}
			loss, err := m.CrossEntropyBackward(idx, tg, w)
			if err != nil {
				t.Fatal(err)
			}
			opt.Step(m, 3e-3)
			losses = append(losses, loss)
		}
		return losses
	}
	f32, b16 := run(MatmulFP32), run(MatmulBF16)
	for i := range f32 {
		if math.Abs(b16[i]-f32[i]) > 0.02*f32[i] {
			t.Fatalf("step %d: bf16 loss %.4f, fp32 %.4f: more than 2%% apart\nfp32 %v\nbf16 %v", i, b16[i], f32[i], f32, b16)
		}
	}
	n := len(f32) - 1
	if f32[n] >= f32[0] {
		t.Fatalf("fp32 did not learn: %v", f32)
	}
	if d := math.Abs((f32[0] - f32[n]) - (b16[0] - b16[n])); d > 0.02*f32[0] {
		t.Fatalf("bf16 fell %.4f, fp32 %.4f", b16[0]-b16[n], f32[0]-f32[n])
	}
	t.Logf("loss fp32 %.4f -> %.4f, bf16 %.4f -> %.4f (%s)", f32[0], f32[n], b16[0], b16[n], bf16Kern().name)
}

// TestBF16PanelsPrefix: the attention's products over the first nc of a
// head's n keys give the same bits from the head's keys and values
// converted once (attnPanels) as from converting them per product, for
// nc odd or even, within one panel or several, and at n.
func TestBF16PanelsPrefix(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	const n, dh, ld, m = 150, 64, 256, 40
	k, v := randSlice(r, n*ld), randSlice(r, n*ld)
	q, p := randSlice(r, m*dh), randSlice(r, m*n)
	forEachBF16(t, func(t *testing.T, _ *bf16Kernels) {
		ws := &workspace{}
		kT, vB := attnPanels(ws, k, v, ld, n, dh)
		for _, nc := range []int{9, 31, 64, 77, 128, 149, 150} {
			ops := map[string]gemmOp{
				"q·kᵀ": {tb: true, m: m, n: nc, k: dh, a: q, lda: dh, b: k, ldb: ld, ldc: nc, bf16: true},
				"p·v":  {m: m, n: dh, k: nc, a: p, lda: n, b: v, ldb: ld, ldc: dh, bf16: true},
			}
			for name, op := range ops {
				want, got := make([]float32, m*op.ldc), make([]float32, m*op.ldc)
				op.c = want
				gemmSerial(&workspace{}, op)
				op.c, op.bf16B = got, kT
				if name == "p·v" {
					op.bf16B = vB
				}
				gemmSerial(&workspace{}, op)
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("%s over %d keys: element %d is %v from the panels, %v converted per product", name, nc, i, got[i], want[i])
					}
				}
			}
		}
	})
}

// TestAttentionBF16: the attention's forward and backward with bf16
// products (heads of attnBF16MinHead values, several blocks of queries)
// stay within bf16's rounding of float32's, and differ from them (the
// bf16 path ran); with narrower heads the bf16 flag leaves them float32,
// bit for bit.
func TestAttentionBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	forEachBF16(t, func(t *testing.T, _ *bf16Kernels) {
		for _, dh := range []int{attnBF16MinHead, attnBF16MinHead / 2} {
			const heads = 2
			d := heads * dh
			groups := []group{{start: 0, n: 150, off: 0, prefix: -1}, {start: 150, n: 70, off: heads * 150 * 150, prefix: -1}}
			n := 220
			q, k, v, dOut := randSlice(r, n*d), randSlice(r, n*d), randSlice(r, n*d), randSlice(r, n*d)
			type result struct{ o, dq, dk, dv []float32 }
			run := func(bf16 bool) result {
				p := workers()
				res := result{make([]float32, n*d), make([]float32, n*d), make([]float32, n*d), make([]float32, n*d)}
				probs := make([]float32, heads*(150*150+70*70))
				attentionForward(p, res.o, probs, q, k, v, groups, nil, heads, dh, bf16)
				fam := [][]int32{{0}, {1}}
				attentionBackward(p, res.dq, res.dk, res.dv, dOut, probs, q, k, v, groups, fam, nil, heads, dh, n, bf16)
				return res
			}
			f32, b16 := run(false), run(true)
			for name, pair := range map[string][2][]float32{"out": {f32.o, b16.o}, "dq": {f32.dq, b16.dq}, "dk": {f32.dk, b16.dk}, "dv": {f32.dv, b16.dv}} {
				want, got := pair[0], pair[1]
				var scale, worst float64
				same := true
				for i := range want {
					scale = max(scale, math.Abs(float64(want[i])))
					worst = max(worst, math.Abs(float64(got[i]-want[i])))
					same = same && got[i] == want[i]
				}
				switch {
				case dh < attnBF16MinHead && !same:
					t.Errorf("dh=%d %s: bf16 changed a head narrower than attnBF16MinHead (largest gap %g)", dh, name, worst)
				case dh >= attnBF16MinHead && same:
					t.Errorf("dh=%d %s: bf16 gave float32's bits: the bf16 products did not run", dh, name)
				case worst > 0.02*scale:
					t.Errorf("dh=%d %s: largest gap %g against a largest value %g (bf16 rounding is about 0.4%%)", dh, name, worst, scale)
				}
			}
		}
	})
}

// TestBF16Transpose: every bf16 kernel set's transpose against the
// definition, on blocks of whole 16 x 16 tiles, with ragged edges, and
// inside larger strides (the lanes outside the block untouched).
func TestBF16Transpose(t *testing.T) {
	forEachBF16(t, func(t *testing.T, bk *bf16Kernels) {
		for _, sz := range [][2]int{{1, 1}, {16, 16}, {32, 128}, {32, 33}, {17, 16}, {31, 47}, {8, 5}, {48, 32}} {
			rows, cols := sz[0], sz[1]
			lds, ldd := cols+3, rows+5
			src := make([]uint32, rows*lds)
			for i := range src {
				src[i] = uint32(i*2654435761) ^ 0x5bd1e995
			}
			dst := make([]uint32, cols*ldd)
			for i := range dst {
				dst[i] = 0xdeadbeef
			}
			bk.transpose(dst, ldd, src, lds, rows, cols)
			for c := range cols {
				for r := range ldd {
					want := uint32(0xdeadbeef)
					if r < rows {
						want = src[r*lds+c]
					}
					if got := dst[c*ldd+r]; got != want {
						t.Fatalf("%d x %d: dst[%d][%d] = %#x, want %#x", rows, cols, c, r, got, want)
					}
				}
			}
		}
	})
}

// TestGemmBF16HalfB: a B stored in bfloat16 (op.bh, a frozen base) gives
// the bits of the same B given as float32 values that are bfloat16
// already, as B and transposed, whole and ragged panels, even and odd k
// and row lengths (bf16PanelsHalf's paths), with every kernel the CPU
// has.
func TestGemmBF16HalfB(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	forEachBF16(t, func(t *testing.T, bk *bf16Kernels) {
		for _, sz := range [][3]int{{40, 64, 96}, {40, 70, 97}, {33, 96, 64}, {65, 32, 130}} {
			for _, tb := range []bool{false, true} {
				for _, pad := range []int{0, 1, 2} {
					m, n, k := sz[0], sz[1], sz[2]
					ldb := n + pad
					if tb {
						ldb = k + pad
					}
					rows := k
					if tb {
						rows = n
					}
					a := randSlice(r, m*k)
					bh := make([]uint16, rows*ldb)
					b := make([]float32, rows*ldb)
					for i, v := range randSlice(r, rows*ldb) {
						bh[i] = toBF16(v)
						b[i] = fromBF16(bh[i])
					}
					want, got := make([]float32, m*n), make([]float32, m*n)
					gemm(workers(), gemmOp{tb: tb, m: m, n: n, k: k, a: a, lda: k, b: b, ldb: ldb, c: want, ldc: n, bf16: true})
					gemm(workers(), gemmOp{tb: tb, m: m, n: n, k: k, a: a, lda: k, bh: bh, ldb: ldb, c: got, ldc: n, bf16: true})
					for i := range want {
						if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
							t.Fatalf("%dx%dx%d tb=%v ldb=%d: C[%d] = %g from bfloat16 B, %g from float32", m, n, k, tb, ldb, i, got[i], want[i])
						}
					}
				}
			}
		}
	})
}
