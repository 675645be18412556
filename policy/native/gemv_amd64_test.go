//go:build goexperiment.simd && amd64

package native

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestGemvRowsMatchesStrips: the AVX2 set's row-streaming gemv gives
// gemv256's sums bit for bit (so decoding samples the same tokens as
// before it), with and without accumulation, on shapes with ragged
// columns and rows that are not a multiple of 4.
func TestGemvRowsMatchesStrips(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range [][2]int{{256, 256}, {256, 1024}, {1023, 256}, {5, 24}, {258, 600}, {1, 64}, {7, 1100}} {
		k, n := s[0], s[1]
		x, b := make([]float32, k), make([]float32, k*n)
		for i := range x {
			x[i] = r.Float32() - 0.5
		}
		for i := range b {
			b[i] = r.Float32() - 0.5
		}
		for _, acc := range []bool{false, true} {
			y1, y2 := make([]float32, n), make([]float32, n)
			for i := range y1 {
				y1[i] = float32(i)
				y2[i] = float32(i)
			}
			gemv256(x, b, n, y1, acc)
			gemvRows256(x, b, n, y2, acc)
			for i := range y1 {
				if y1[i] != y2[i] {
					t.Fatalf("%dx%d acc %v: y[%d] %v vs %v", k, n, acc, i, y1[i], y2[i])
				}
			}
		}
	}
}

// BenchmarkGemv compares the AVX2 gemv kernels on the decode step's
// matrix shapes (one thread, 256-column tasks as gemm splits them), over
// 24 copies of the matrix so that, as in decoding, the weights come from
// beyond the L2 cache: GB/s of weights read.
func BenchmarkGemv(b *testing.B) {
	for _, s := range [][2]int{{256, 256}, {256, 1024}, {1024, 256}, {256, 4096}} {
		k, n := s[0], s[1]
		// Many matrices, so that the weights do not stay in cache (as in
		// a decode step, which reads 17 MB of them).
		const copies = 24
		x, bs := make([]float32, k), make([][]float32, copies)
		for i := range bs {
			bs[i] = make([]float32, k*n)
			for j := range bs[i] {
				bs[i][j] = float32(j%7) * 0.1
			}
		}
		for i := range x {
			x[i] = 0.01 * float32(i%5)
		}
		y := make([]float32, n)
		for _, impl := range []struct {
			name string
			f    func(x, b []float32, ldb int, y []float32, acc bool)
		}{{"strips", gemv256}, {"rows", gemvRows256}} {
			b.Run(fmt.Sprintf("%dx%d/%s", k, n, impl.name), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					m := bs[i%copies]
					for j0 := 0; j0 < n; j0 += 256 {
						impl.f(x, m[j0:], n, y[j0:min(n, j0+256)], false)
					}
				}
				b.ReportMetric(float64(k*n*4)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}
