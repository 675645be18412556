//go:build !(goexperiment.simd && amd64)

package native

// clearVectorState is vector_simd_amd64.go's; without vector kernels
// there is nothing to clear.
func clearVectorState() {}
