//go:build goexperiment.simd && amd64

package native

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestFMALoopComputes: the peak loop really does its FMAs: after n
// iterations of acc += a*b its accumulators hold lanes x accumulators x n
// x a x b (exact in float32 for these values), and FLOPs are 2 per lane
// per accumulator per iteration.
func TestFMALoopComputes(t *testing.T) {
	for _, n := range []int{0, 1, 7, 1000} {
		flops, isa, sum, ok := FMALoop(n, 1.5, 0.25)
		if !ok {
			t.Skip("no AVX2+FMA")
		}
		lanes := map[string]float64{"avx2": 8 * 12, "avx512": 16 * 16}[isa]
		if want := lanes * float64(n) * 1.5 * 0.25; sum != want {
			t.Errorf("%s, n %d: accumulators sum to %v, want %v", isa, n, sum, want)
		}
		if want := lanes * float64(n) * 2; flops != want {
			t.Errorf("%s, n %d: %v FLOPs, want %v", isa, n, flops, want)
		}
	}
}

// BenchmarkFMAPeak is the machine's float32 FMA peak: GOMAXPROCS
// goroutines, each locked to its thread, run the register-only loop for
// the same number of iterations; GFLOP/s is their FLOPs over the wall
// time (make bench: 1 and 2 threads).
func BenchmarkFMAPeak(b *testing.B) {
	if _, isa, _, ok := FMALoop(1, 1, 1); ok {
		b.Run("isa="+isa, func(b *testing.B) {
			const n = 1 << 22 // about 1-4 ms per call: many calls per benchmark, no scheduler noise inside one
			p := runtime.GOMAXPROCS(0)
			var total float64
			cpu0 := cpuSeconds()
			start := time.Now()
			for range b.N {
				var wg sync.WaitGroup
				var mu sync.Mutex
				for range p {
					wg.Add(1)
					go func() {
						defer wg.Done()
						runtime.LockOSThread()
						defer runtime.UnlockOSThread()
						f, _, _, _ := FMALoop(n, 1, 1e-9)
						mu.Lock()
						total += f
						mu.Unlock()
					}()
				}
				wg.Wait()
			}
			wall := time.Since(start).Seconds()
			b.ReportMetric(total/wall/1e9, "GFLOP/s")
			b.ReportMetric(total/(cpuSeconds()-cpu0)/1e9, "GFLOP/cpu-s")
		})
		return
	}
	b.Skip("no AVX2+FMA: no register-only FMA loop for this CPU")
}
