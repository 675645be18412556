//go:build goexperiment.simd && amd64

package diversity

import "simd/archsimd"

// useAVX2 selects the AVX2+FMA kernel; other amd64 CPUs use dotGeneric.
var useAVX2 = archsimd.X86.AVX2() && archsimd.X86.FMA()

// dot is the float32 dot product of two equal-length vectors.
func dot(a, b []float32) float32 {
	if !useAVX2 || len(a) < 32 {
		return dotGeneric(a, b)
	}
	return dotAVX2(a, b)
}

// dotAVX2 uses four 8-lane fused multiply-add accumulators (32 floats per
// iteration) and finishes the tail with the scalar loop.
func dotAVX2(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	var acc0, acc1, acc2, acc3 archsimd.Float32x8
	i := 0
	for ; i+32 <= n; i += 32 {
		acc0 = archsimd.LoadFloat32x8Slice(a[i:]).MulAdd(archsimd.LoadFloat32x8Slice(b[i:]), acc0)
		acc1 = archsimd.LoadFloat32x8Slice(a[i+8:]).MulAdd(archsimd.LoadFloat32x8Slice(b[i+8:]), acc1)
		acc2 = archsimd.LoadFloat32x8Slice(a[i+16:]).MulAdd(archsimd.LoadFloat32x8Slice(b[i+16:]), acc2)
		acc3 = archsimd.LoadFloat32x8Slice(a[i+24:]).MulAdd(archsimd.LoadFloat32x8Slice(b[i+24:]), acc3)
	}
	for ; i+8 <= n; i += 8 {
		acc0 = archsimd.LoadFloat32x8Slice(a[i:]).MulAdd(archsimd.LoadFloat32x8Slice(b[i:]), acc0)
	}
	sum := acc0.Add(acc1).Add(acc2.Add(acc3))
	var lanes [8]float32
	sum.StoreSlice(lanes[:])
	s := ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]))
	for ; i < n; i++ {
		s += a[i] * b[i]
	}
	return s
}
