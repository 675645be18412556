package diversity

import (
	"math/rand/v2"
	"testing"
)

// benchPanels times one row (or four) against 1,000 kept 384-d vectors.
func benchPanels(b *testing.B, ks *kernelSet, four bool) {
	const d, k = 384, 1000
	ldb := k + maxPanel
	r := rand.New(rand.NewPCG(1, 1))
	picks := make([]float32, d*ldb)
	for i := range picks {
		picks[i] = float32(r.NormFloat64())
	}
	rows := randomRows(r, 64, d)
	buf := make([]float32, 4*maxPanel)
	b.ResetTimer()
	for it := range b.N {
		a := rows[it%60:]
		if four {
			for c0 := 0; c0 < k; c0 += ks.w4 {
				ks.row4(a[0], a[1], a[2], a[3], picks, ldb, c0, buf)
			}
		} else {
			for c0 := 0; c0 < k; c0 += ks.w1 {
				ks.row1(a[0], picks, ldb, c0, buf)
			}
		}
	}
	n := 1
	if four {
		n = 4
	}
	b.ReportMetric(float64(b.N)*float64(n*k*d)*2/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func BenchmarkPanelRow1(b *testing.B)        { benchPanels(b, kern, false) }
func BenchmarkPanelRow4(b *testing.B)        { benchPanels(b, kern, true) }
func BenchmarkPanelRow1Generic(b *testing.B) { benchPanels(b, &genericKernels, false) }
func BenchmarkPanelRow4Generic(b *testing.B) { benchPanels(b, &genericKernels, true) }
