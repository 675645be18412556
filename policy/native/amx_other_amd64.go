//go:build goexperiment.simd && !linux

package native

// The AMX kernels need Linux's permission for the tiles' register state
// (amx_linux_amd64.go); elsewhere the AVX512_BF16 kernels compute the
// bf16 products.

var amxUnavailable = "AMX is used on Linux only"

func amxKernels(*bf16Kernels) *bf16Kernels { return nil }

// AMXLoop reports that the tiles are not used here.
func AMXLoop(int) (float64, bool) { return 0, false }
