//go:build !(goexperiment.simd && amd64)

package gguf

func clearVectorState() {}
