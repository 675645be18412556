//go:build goexperiment.simd && amd64

package gguf

import "simd/archsimd"

// clearVectorState clears the vector registers' upper halves before
// SHA-256's SSE code, which runs up to 100 times slower after code that
// left them dirty (see policy's cleanVectorWriter).
func clearVectorState() { archsimd.ClearAVXUpperBits() }
