package native

import (
	"math"
	"math/rand/v2"
	"testing"
)

// forEachKernel runs f once per kernel path available in this build on
// this CPU, with that path in use.
func forEachKernel(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	if err := selectKernels(); err != nil {
		t.Fatal(err)
	}
	saved := kern
	defer func() { kern = saved }()
	for _, k := range availableKernels() {
		kern = k
		t.Run(k.name, f)
	}
}

func tinyConfig() Config {
	return Config{Vocab: 13, DModel: 8, Heads: 2, Layers: 2, FFN: 12, Ctx: 40}
}

// newTestModel builds a model whose weights are large enough (std 0.3,
// gains near 1, non-zero biases) for attention and GELU to be far from
// linear, so the tests exercise every path.
func newTestModel(t testing.TB, cfg Config, seed uint64) *Model {
	t.Helper()
	m, err := New(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, 99))
	for _, p := range m.Params() {
		for i := range p.Data {
			v := float32(0.3 * r.NormFloat64())
			if len(p.Shape) == 1 && p.Shape[0] == cfg.DModel && containsStr(p.Name, "gain") {
				v = 1 + v
			}
			p.Data[i] = v
		}
	}
	return m
}

func containsStr(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// example is one sequence to pack: tokens and the position of its first.
type example struct {
	tokens []int32
	start  int32
}

// packRows builds a batch of rows of width s, each row holding the listed
// examples in order (segments 1, 2, ...) followed by padding (token pad).
func packRows(s int, pad int32, rows ...[]example) Batch {
	b := Batch{B: len(rows), S: s}
	b.Tokens, b.Positions, b.Segments = make([]int32, b.B*s), make([]int32, b.B*s), make([]int32, b.B*s)
	for r, exs := range rows {
		at := r * s
		for e, ex := range exs {
			for j, tok := range ex.tokens {
				b.Tokens[at], b.Positions[at], b.Segments[at] = tok, ex.start+int32(j), int32(e+1)
				at++
			}
		}
		for ; at < (r+1)*s; at++ {
			b.Tokens[at] = pad
		}
	}
	return b
}

func randTokens(r *rand.Rand, n, vocab int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = int32(r.IntN(vocab))
	}
	return t
}

// realPositions lists the flat positions of non-padding tokens.
func realPositions(b Batch) []int32 {
	var idx []int32
	for i, s := range b.Segments {
		if s != 0 {
			idx = append(idx, int32(i))
		}
	}
	return idx
}

// maxRelDiff returns max|got-want| / max(max|want|, floor).
func maxRelDiff(got []float32, want []float64, floor float64) float64 {
	scale, diff := floor, 0.0
	for i, w := range want {
		scale = math.Max(scale, math.Abs(w))
		diff = math.Max(diff, math.Abs(float64(got[i])-w))
	}
	return diff / scale
}

func toF64(s []float32) []float64 {
	out := make([]float64, len(s))
	for i, v := range s {
		out[i] = float64(v)
	}
	return out
}

// refGemm is C = A·B (+ C when acc) in float64 over the inputs as in maps
// them (float64(v), or rounded first), in gemmOp's layouts, and each
// element's sum of the products' magnitudes (the bound of float32
// rounding).
func refGemm(ta, tb bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c0 []float32, ldc int, acc bool,
	in func(float32) float64) (want, bound []float64) {
	want, bound = make([]float64, m*ldc), make([]float64, m*ldc)
	for i := range m {
		for j := range n {
			s, sa := 0.0, 0.0
			if acc {
				s, sa = float64(c0[i*ldc+j]), math.Abs(float64(c0[i*ldc+j]))
			}
			for p := range k {
				av, bv := a[i*lda+p], b[p*ldb+j]
				if ta {
					av = a[p*lda+i]
				}
				if tb {
					bv = b[j*ldb+p]
				}
				pr := in(av) * in(bv)
				s += pr
				sa += math.Abs(pr)
			}
			want[i*ldc+j], bound[i*ldc+j] = s, sa
		}
	}
	return want, bound
}

// bf16HalfStep is half the distance between the two bfloat16 values
// around x: the most rounding x to nearest can change it (bfloat16 keeps
// 8 significant bits: the step is 2⁻⁷ of x's power of two).
func bf16HalfStep(x float64) float64 {
	if x == 0 {
		return 0
	}
	_, e := math.Frexp(math.Abs(x)) // |x| in [2^(e-1), 2^e)
	return math.Ldexp(1, e-1-8)
}

// bf16Tolerance is BF16Tolerance.
func bf16Tolerance(depth int) float64 { return BF16Tolerance(depth) }
