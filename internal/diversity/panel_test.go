package diversity

import (
	"math/rand/v2"
	"testing"
)

// benchPanels times four rows against 1,024 kept 384-d vectors, the inner
// loop of Select on BenchmarkDiversity100k's pool.
func benchPanels(b *testing.B, ks *kernelSet) {
	const d, k = 384, 1024
	w := ks.w
	r := rand.New(rand.NewPCG(1, 1))
	picks := make([]float32, d*k)
	for i := range picks {
		picks[i] = float32(r.NormFloat64())
	}
	rows := randomRows(r, 64, d)
	buf := make([]float32, 4*w)
	b.ResetTimer()
	for it := range b.N {
		a := rows[it%60:]
		for c0 := 0; c0 < k; c0 += w {
			ks.row4(a[0], a[1], a[2], a[3], picks[c0*d:(c0+w)*d], buf)
		}
	}
	b.ReportMetric(float64(b.N)*float64(4*k*d)*2/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func BenchmarkPanel(b *testing.B)        { benchPanels(b, kern) }
func BenchmarkPanelGeneric(b *testing.B) { benchPanels(b, &genericKernels) }
