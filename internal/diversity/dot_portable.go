//go:build !(goexperiment.simd && amd64)

package diversity

// Without GOEXPERIMENT=simd on amd64, kern stays genericKernels.
