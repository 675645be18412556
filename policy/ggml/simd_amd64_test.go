//go:build goexperiment.simd && amd64

package ggml

import (
	"math"
	"math/rand/v2"
	"simd/archsimd"
	"syscall"
	"testing"
)

// scaleOffsets are each format's float16 fields in a block.
var scaleOffsets = map[*Format][]int{Q2_K: {80, 82}, Q3_K: {108}, Q4_K: {0, 2}, Q5_K: {0, 2}, Q6_K: {208}, IQ4_XS: {0}, Q5_1: {0, 2}}

// vectorForms are each format's vector dequantizers and the CPU feature
// each needs.
var vectorForms = []struct {
	f       *Format
	name    string
	blocks  func(y []float32, src []byte)
	present func() bool
}{
	{Q2_K, "avx512", q2KBlocks512, archsimd.X86.AVX512}, {Q3_K, "avx512", q3KBlocks512, archsimd.X86.AVX512},
	{Q4_K, "avx512", q4KBlocks512, archsimd.X86.AVX512}, {Q5_K, "avx512", q5KBlocks512, archsimd.X86.AVX512}, {Q6_K, "avx512", q6KBlocks512, archsimd.X86.AVX512},
	{IQ4_XS, "avx512", iq4XSBlocks512, archsimd.X86.AVX512}, {Q5_1, "avx512", q51Blocks512, archsimd.X86.AVX512},
	{Q2_K, "avx2", q2KBlocks256, archsimd.X86.AVX2}, {Q3_K, "avx2", q3KBlocks256, archsimd.X86.AVX2}, {Q5_1, "avx2", q51Blocks256, archsimd.X86.AVX2},
	{IQ4_XS, "avx2", iq4XSBlocks256, archsimd.X86.AVX2},
	{Q4_K, "avx2", q4KBlocks256, archsimd.X86.AVX2}, {Q5_K, "avx2", q5KBlocks256, archsimd.X86.AVX2}, {Q6_K, "avx2", q6KBlocks256, archsimd.X86.AVX2},
}

// TestVectorBlocks: each vector dequantizer this CPU runs (AVX-512 and
// AVX2 where it has both: each is tested, whichever the package uses)
// gives the scalar one's values bit for bit, on random blocks (every
// byte drawn; the float16 scales any finite half, subnormals and
// negatives included).
func TestVectorBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	ran := 0
	for _, vf := range vectorForms {
		if !vf.present() {
			continue
		}
		ran++
		f, offs := vf.f, scaleOffsets[vf.f]
		n := 37
		if f.Values == 32 {
			n = 37*8 + 5 // more than one chunk of Q5_1's scales
		}
		src := make([]byte, n*f.Bytes)
		for i := range src {
			src[i] = byte(r.Uint32())
		}
		for k := range n {
			for _, o := range offs {
				h := uint16(r.Uint32())
				if h>>10&0x1f == 0x1f { // Inf or NaN: make it finite
					h &^= 1 << 14
				}
				src[k*f.Bytes+o], src[k*f.Bytes+o+1] = byte(h), byte(h>>8)
			}
		}
		got, want := make([]float32, n*f.Values), make([]float32, n*f.Values)
		vf.blocks(got, src)
		for k := range n {
			f.Dequant(want[k*f.Values:(k+1)*f.Values], src[k*f.Bytes:(k+1)*f.Bytes])
		}
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s %s: value %d (block %d) is %v, the scalar dequantizer's %v", f.Name, vf.name, i, i/f.Values, got[i], want[i])
			}
		}
	}
	if ran == 0 {
		t.Skip("no vector dequantizer on this CPU (AVX-512 or AVX2)")
	}
}

// BenchmarkDequant measures dequantizing a matrix of SmolLM2-135M's
// ffn_down shape (576 rows of 1536 values) in each format with vector
// dequantizers: the vector code (DequantBlocks) against the scalar
// (Dequant per block), nanoseconds of CPU per value. Run with
// GOMAXPROCS=1 so that the CPU is this goroutine's.
func BenchmarkDequant(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, f := range []*Format{Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, Q5_1} {
		n := 1536 * 576 / f.Values
		src := make([]byte, n*f.Bytes)
		for i := range src {
			src[i] = byte(r.Uint32())
		}
		for k := range n {
			for _, o := range scaleOffsets[f] {
				src[k*f.Bytes+o], src[k*f.Bytes+o+1] = 0, 0x3c // 1.0
			}
		}
		y := make([]float32, n*f.Values)
		run := func(name string, do func()) {
			b.Run(f.Name+"/"+name, func(b *testing.B) {
				c := cpuSeconds()
				for range b.N {
					do()
				}
				b.ReportMetric((cpuSeconds()-c)/float64(b.N)/float64(n*f.Values)*1e9, "cpu-ns/value")
			})
		}
		for _, vf := range vectorForms {
			if vf.f == f && vf.present() {
				run(vf.name, func() { vf.blocks(y, src) })
			}
		}
		run("scalar", func() {
			for k := range n {
				f.Dequant(y[k*f.Values:(k+1)*f.Values], src[k*f.Bytes:(k+1)*f.Bytes])
			}
		})
	}
}

// cpuSeconds is the process's user and system CPU time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// dotForms are the fused dot products and the CPU feature each needs.
var dotForms = []struct {
	f       *Format
	name    string
	dot     func(x []float32, src []byte, s []float32) float32
	present func() bool
}{
	{Q4_K, "avx512", q4KDot512, archsimd.X86.AVX512}, {Q5_K, "avx512", q5KDot512, archsimd.X86.AVX512}, {Q6_K, "avx512", q6KDot512, archsimd.X86.AVX512},
	{IQ4_XS, "avx512", iq4XSDot512, archsimd.X86.AVX512}, {Q2_K, "avx512", q2KDot512, archsimd.X86.AVX512}, {Q3_K, "avx512", q3KDot512, archsimd.X86.AVX512},
	{Q4_K, "avx2", q4KDot256, archsimd.X86.AVX2}, {Q5_K, "avx2", q5KDot256, archsimd.X86.AVX2}, {Q6_K, "avx2", q6KDot256, archsimd.X86.AVX2},
}

// TestDot: each fused dot product this CPU runs equals the float64 dot
// product of x with the scalar dequantizer's values, to within float32
// rounding of the sum of the terms' magnitudes (the K-quants' values are
// d·sc·q - dmin·m, whose two products the fused form sums apart), on
// random blocks with any finite float16 scales and rows of 1 to 7
// blocks.
func TestDot(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	ran := 0
	for _, df := range dotForms {
		if !df.present() {
			continue
		}
		ran++
		f := df.f
		for trial := range 40 {
			n := 1 + trial%7
			src := randomBlocks(r, f, n)
			x := make([]float32, n*f.Values)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			vals, mags := make([]float32, len(x)), make([]float32, len(x))
			blk := make([]byte, f.Bytes)
			var want, bound float64
			for k := range n {
				b := src[k*f.Bytes : (k+1)*f.Bytes]
				f.Dequant(vals[k*f.Values:], b)
				// The terms' magnitudes: |d|·sc·q + |dmin|·m, the values of
				// the block with d's sign cleared and dmin's set (Q2_K's
				// d and dmin are at bytes 80 and 82; Q3_K, Q6_K and IQ4_XS,
				// without mins: |value|).
				copy(blk, b)
				switch f {
				case Q4_K, Q5_K:
					blk[1] &^= 0x80
					blk[3] |= 0x80
				case Q2_K:
					blk[81] &^= 0x80
					blk[83] |= 0x80
				}
				f.Dequant(mags[k*f.Values:], blk)
			}
			for i := range x {
				want += float64(x[i]) * float64(vals[i])
				bound += math.Abs(float64(x[i]) * float64(mags[i]))
			}
			got := df.dot(x, src, make([]float32, DotScratch(len(x))))
			if d := math.Abs(float64(got) - want); !(d <= 4e-6*bound) {
				t.Fatalf("%s %s, %d blocks: dot %v, the dequantized values' %v (off by %.3g, allowed %.3g)", f.Name, df.name, n, got, want, d, 4e-6*bound)
			}
		}
	}
	if ran == 0 {
		t.Skip("no fused dot product on this CPU (AVX-512 or AVX2)")
	}
}

// randomBlocks are n blocks of f with every byte drawn and the float16
// scales any finite half.
func randomBlocks(r *rand.Rand, f *Format, n int) []byte {
	src := make([]byte, n*f.Bytes)
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	for k := range n {
		for _, o := range scaleOffsets[f] {
			h := uint16(r.Uint32())
			if h>>10&0x1f == 0x1f {
				h &^= 1 << 14
			}
			src[k*f.Bytes+o], src[k*f.Bytes+o+1] = byte(h), byte(h>>8)
		}
	}
	return src
}

// BenchmarkDot measures each fused dot product this CPU runs (AVX-512 and
// AVX2 forms both, where it has both) on a matrix of SmolLM2-135M's
// ffn_down shape (576 rows of 1536 values) times one vector, CPU
// nanoseconds per value, beside the vector dequantizers of the same
// rows (what the engine's other path does before its own dot product).
// Run with GOMAXPROCS=1.
func BenchmarkDot(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	const cols, rows = 1536, 576
	x := make([]float32, cols)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	s, y := make([]float32, DotScratch(cols)), make([]float32, cols)
	for _, f := range []*Format{Q4_K, Q5_K, Q6_K, IQ4_XS, Q2_K, Q3_K} {
		rb := cols / f.Values * f.Bytes
		src := randomBlocks(r, f, rows*cols/f.Values)
		run := func(name string, do func(row []byte)) {
			b.Run(f.Name+"/"+name, func(b *testing.B) {
				c := cpuSeconds()
				for range b.N {
					for j := range rows {
						do(src[j*rb : (j+1)*rb])
					}
				}
				b.ReportMetric((cpuSeconds()-c)/float64(b.N)/float64(rows*cols)*1e9, "cpu-ns/value")
			})
		}
		for _, df := range dotForms {
			if df.f == f && df.present() {
				run("dot-"+df.name, func(row []byte) { df.dot(x, row, s) })
			}
		}
		for _, df := range dotQ8Forms {
			if df.f == f && f.HasDotQ8() {
				var q Q8K
				q.Quantize(x)
				run("dotq8-avx2", func(row []byte) { df.dot(&q, row, s) })
			}
		}
		for _, vf := range vectorForms {
			if vf.f == f && vf.present() {
				run("dequant-"+vf.name, func(row []byte) { vf.blocks(y, row) })
			}
		}
	}
}

// TestDot2: each two-row fused form gives, for each of its rows, the
// one-row form's result bit for bit (the same operations in the same
// order), on random blocks and rows of 1 to 7 blocks.
func TestDot2(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	forms := []struct {
		f    *Format
		dot2 func(xa, xb []float32, src []byte, s []float32) (float32, float32)
		dot  func(x []float32, src []byte, s []float32) float32
	}{{Q4_K, q4KDot2x512, q4KDot512}, {Q5_K, q5KDot2x512, q5KDot512}, {Q6_K, q6KDot2x512, q6KDot512}, {IQ4_XS, iq4XSDot2x512, iq4XSDot512}}
	if !archsimd.X86.AVX512() {
		t.Skip("the two-row forms are AVX-512 only")
	}
	for _, fm := range forms {
		for trial := range 40 {
			n := 1 + trial%7
			src := randomBlocks(r, fm.f, n)
			xa, xb := make([]float32, n*256), make([]float32, n*256)
			for i := range xa {
				xa[i], xb[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
			}
			s := make([]float32, DotScratch(len(xa)))
			a, b := fm.dot2(xa, xb, src, s)
			wa, wb := fm.dot(xa, src, s), fm.dot(xb, src, s)
			if math.Float32bits(a) != math.Float32bits(wa) || math.Float32bits(b) != math.Float32bits(wb) {
				t.Fatalf("%s, %d blocks: two-row form %v, %v; one-row form %v, %v", fm.f.Name, n, a, b, wa, wb)
			}
		}
	}
}

// dotQ8Forms are the int8 dot products (dotq8_amd64.go) and the CPU
// feature each needs.
var dotQ8Forms = []struct {
	f   *Format
	dot func(x *Q8K, src []byte, s []float32) float32
}{{Q4_K, q4KDotQ8}, {Q5_K, q5KDotQ8}, {Q6_K, q6KDotQ8}}

// TestDotQ8: each int8 dot product equals the float64 dot product of the
// scalar dequantizer's values with the vector as Q8K holds it (D·Q), to
// within float32 rounding of the sum of the terms' magnitudes, on random
// blocks with any finite float16 scales, rows of 1 to 7 blocks, inputs of
// mixed scales per block and an all-zero block (D = 0).
func TestDotQ8(t *testing.T) {
	if !archsimd.X86.AVX2() || !archsimd.X86.FMA() {
		t.Skip("no AVX2 on this CPU")
	}
	r := rand.New(rand.NewPCG(7, 8))
	for _, df := range dotQ8Forms {
		f := df.f
		for trial := range 60 {
			n := 1 + trial%7
			src := randomBlocks(r, f, n)
			x := make([]float32, n*256)
			for i := range x {
				x[i] = float32(r.NormFloat64() * math.Exp(float64(i/256%3)))
			}
			if trial%5 == 4 {
				clear(x[:256])
			}
			var q Q8K
			q.Quantize(x)
			vals, mags := make([]float32, len(x)), make([]float32, len(x))
			blk := make([]byte, f.Bytes)
			var want, bound float64
			for k := range n {
				b := src[k*f.Bytes : (k+1)*f.Bytes]
				f.Dequant(vals[k*256:], b)
				// The terms' magnitudes: Q4_K and Q5_K |d|·sc·q + |dmin|·m
				// (d's sign cleared, dmin's set); Q6_K sums sc·q over its
				// unsigned levels (up to 63) and takes 32·sc off apart, so
				// its terms reach 95·|d·sc|: three times the all-63
				// block's values (31·d·sc).
				copy(blk, b)
				switch f {
				case Q4_K, Q5_K:
					blk[1] &^= 0x80
					blk[3] |= 0x80
				case Q6_K:
					for i := range 192 {
						blk[i] = 0xff
					}
				}
				f.Dequant(mags[k*256:], blk)
				if f == Q6_K {
					for i := range mags[k*256 : (k+1)*256] {
						mags[k*256+i] *= 3.1
					}
				}
			}
			for i := range x {
				xq := float64(q.D[i/256]) * float64(q.Q[i])
				want += xq * float64(vals[i])
				bound += math.Abs(xq * float64(mags[i]))
			}
			got := df.dot(&q, src, make([]float32, DotScratch(len(x))))
			if d := math.Abs(float64(got) - want); !(d <= 4e-6*bound) {
				t.Fatalf("%s, %d blocks: dot %v, the dequantized values' %v (off by %.3g, allowed %.3g)", f.Name, n, got, want, d, 4e-6*bound)
			}
			if !f.HasDotQ8() || f.DotQ8(&q, src, make([]float32, DotScratch(len(x)))) != got {
				t.Fatalf("%s: Format.DotQ8 is not this CPU's form", f.Name)
			}
		}
	}
}
