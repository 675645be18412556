//go:build !(goexperiment.simd && amd64)

package diversity

// dot is the float32 dot product of two equal-length vectors.
func dot(a, b []float32) float32 { return dotGeneric(a, b) }
