//go:build goexperiment.simd && amd64

package native

import "simd/archsimd"

// clearVectorState clears the upper halves of the vector registers
// (VZEROUPPER) for the plain-Go float code that follows: a long
// stretch of it (drawing a model's initial weights) can find them dirty
// however clean every kernel left them, because the runtime's
// asynchronous preemption restores all 512 bits of every register when
// the goroutine resumes (runtime/preempt_amd64.s in GOEXPERIMENT=simd
// builds on AVX-512 CPUs), and on this Intel CPU each legacy-SSE
// instruction (math.Exp's, which the normal draws call) then runs many
// times slower until the next VZEROUPPER.
func clearVectorState() { archsimd.ClearAVXUpperBits() }
