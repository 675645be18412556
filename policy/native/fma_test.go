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

// TestDPBF16LoopComputes: the bf16 peak loop really does its dot
// products: 16 lanes x 16 accumulators x n iterations x 2 pairs x a x b
// (exact for these bf16 values), 64 FLOPs per instruction.
func TestDPBF16LoopComputes(t *testing.T) {
	for _, n := range []int{0, 1, 7, 1000} {
		flops, sum, ok := DPBF16Loop(n, 1.5, 0.25)
		if !ok {
			t.Skip("no AVX512_BF16")
		}
		if want := 16 * 16 * 2 * float64(n) * 1.5 * 0.25; sum != want {
			t.Errorf("n %d: accumulators sum to %v, want %v", n, sum, want)
		}
		if want := 16 * 16 * 4 * float64(n); flops != want {
			t.Errorf("n %d: %v FLOPs, want %v", n, flops, want)
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
			peakLoop(b, func(n int) float64 { f, _, _, _ := FMALoop(n, 1, 1e-9); return f })
		})
		return
	}
	b.Skip("no AVX2+FMA: no register-only FMA loop for this CPU")
}

// BenchmarkBF16Peak is BenchmarkFMAPeak for the bf16 dot product
// (VDPBF16PS, 2 multiply-adds per lane): the limit of the bf16 products.
func BenchmarkBF16Peak(b *testing.B) {
	if _, _, ok := DPBF16Loop(1, 1, 1); !ok {
		b.Skip("no AVX512_BF16 on this CPU")
	}
	b.Run("isa=avx512-bf16", func(b *testing.B) {
		peakLoop(b, func(n int) float64 { f, _, _ := DPBF16Loop(n, 1, 1e-9); return f })
	})
}

// BenchmarkAMXPeak is BenchmarkFMAPeak for AMX's tiles (four TDPBF16PS
// of 16 x 16 x 32 an iteration, their tiles loaded from L1 as the
// micro-kernel loads them): the limit of the bf16 products where the
// tiles are in use (amx_linux_amd64.go).
func BenchmarkAMXPeak(b *testing.B) {
	if _, ok := AMXLoop(0); !ok {
		b.Skip("AMX tiles not in use: " + amxUnavailable)
	}
	b.Run("isa=amx-bf16", func(b *testing.B) {
		peakLoop(b, func(n int) float64 { f, _ := AMXLoop(n / 64); return f })
	})
}

// peakLoop runs loop (n iterations, returning its FLOPs) on GOMAXPROCS
// goroutines, each locked to its thread, b.N times, and reports GFLOP/s
// over the wall time and per CPU-second.
func peakLoop(b *testing.B, loop func(n int) float64) {
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
				f := loop(n)
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
}

// BenchmarkMemPeak is the machine's memory read bandwidth as the kernels
// see it: GOMAXPROCS goroutines, each locked to its thread, take the
// largest value of their own 256 MB of float32 (kern.max: a vector loop
// that reads each value once, far beyond the caches), b.N times; GB/s is
// the bytes read over the wall time, GB/cpu-s over the process's CPU
// time. It is the limit of a batch-1 decode step, which streams every
// weight once per token (make bench: 1 and 2 threads).
func BenchmarkMemPeak(b *testing.B) {
	if err := selectKernels(); err != nil {
		b.Fatal(err)
	}
	const n = 64 << 20 // 256 MB of float32 per goroutine
	p := runtime.GOMAXPROCS(0)
	bufs := make([][]float32, p)
	for i := range bufs {
		bufs[i] = make([]float32, n)
		for j := range bufs[i] {
			bufs[i][j] = float32(j % 1013)
		}
	}
	b.Run("kernel="+KernelName(), func(b *testing.B) {
		var wg sync.WaitGroup
		cpu0, start := cpuSeconds(), time.Now()
		for range b.N {
			for _, buf := range bufs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					if kern.max(buf) != 1012 {
						panic("native: BenchmarkMemPeak: wrong maximum")
					}
				}()
			}
			wg.Wait()
		}
		bytes := float64(b.N*p*n) * 4
		b.ReportMetric(bytes/time.Since(start).Seconds()/1e9, "GB/s")
		b.ReportMetric(bytes/(cpuSeconds()-cpu0)/1e9, "GB/cpu-s")
	})
}
