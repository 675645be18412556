//go:build goexperiment.simd && amd64

package native

import "simd/archsimd"

// The machine's fused multiply-add peak (fma_amd64.s): the physical limit
// of float32 throughput on one core, what a GEMM at 100% would reach. make
// bench measures it on 1 and 2 threads and reports every row's model FLOP
// utilisation against it beside the GEMM peak's.

//go:noescape
func fmaLoop256(n int, a, b float32, out *[8]float32)

//go:noescape
func fmaLoop512(n int, a, b float32, out *[16]float32)

// FMALoop runs n iterations of the widest register-only FMA loop this CPU
// has and returns the FLOPs it did, the instruction set's name, and the
// sum of its accumulators' lanes (lanes x accumulators x n x a x b when
// nothing rounds). ok is false without AVX2 and FMA.
func FMALoop(n int, a, b float32) (flops float64, isa string, sum float64, ok bool) {
	switch {
	case archsimd.X86.AVX512():
		var out [16]float32
		fmaLoop512(n, a, b, &out)
		for _, v := range out {
			sum += float64(v)
		}
		return float64(n) * 16 * 16 * 2, "avx512", sum, true
	case archsimd.X86.AVX2() && archsimd.X86.FMA():
		var out [8]float32
		fmaLoop256(n, a, b, &out)
		for _, v := range out {
			sum += float64(v)
		}
		return float64(n) * 12 * 8 * 2, "avx2", sum, true
	}
	return 0, "", 0, false
}
