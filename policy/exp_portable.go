//go:build !(goexperiment.simd && amd64)

package policy

// expSub4 is the vector part of expSubFMA: none without AVX2 (it returns
// how many values it did).
func expSub4(dst, x []float64, c float64) int { return 0 }

// clearVectorState: nothing to clear without the vector kernels.
func clearVectorState() {}
