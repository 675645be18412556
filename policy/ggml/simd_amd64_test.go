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
