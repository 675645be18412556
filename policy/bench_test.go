package policy

import (
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// BenchmarkPrefill measures Decoder.Prefill of 8 rows on the demo shape
// (vocabulary 4,096) with 448-token prompts, as step-wise PPO draws them:
// 8 distinct prompts, 2 states x K=4 samples, 1 state x K=8. A repeated
// prompt is computed once and its cache row forked, so the cost follows
// the number of distinct prompts. rows_tok/s counts every row's prompt
// tokens (what the caller asked for).
func BenchmarkPrefill(b *testing.B) {
	const rows, promptLen = 8, 448
	cfg := DemoConfig()
	cfg.Vocab = 4096
	for _, engine := range []string{EngineNative, EngineGoMLX} {
		for _, states := range []int{8, 2, 1} {
			b.Run(engine+"/distinct="+itoa(states)+"_of_8", func(b *testing.B) {
				if engine == EngineGoMLX && os.Getenv("MLERL_BENCH_GOMLX") == "" {
					b.Skip("set MLERL_BENCH_GOMLX=1 (GoMLX on CPU is 10-40x slower)")
				}
				e, err := NewEngine(engine, cfg, InitWeights(cfg, 1))
				if err != nil {
					b.Fatal(err)
				}
				r := rand.New(rand.NewPCG(1, 2))
				distinct := make([][]int32, states)
				for i := range distinct {
					distinct[i] = randPrompt(r, promptLen, cfg.Vocab)
				}
				prompts := make([][]int32, rows)
				for i := range prompts {
					prompts[i] = distinct[i*states/rows]
				}
				d, err := e.NewDecoder(rows)
				if err != nil {
					b.Fatal(err)
				}
				defer d.Close()
				if _, err := d.Prefill(prompts); err != nil { // warm-up (GoMLX compiles)
					b.Fatal(err)
				}
				b.ResetTimer()
				start := time.Now()
				for range b.N {
					if _, err := d.Prefill(prompts); err != nil {
						b.Fatal(err)
					}
				}
				secs := time.Since(start).Seconds()
				b.ReportMetric(secs*1e3/float64(b.N), "ms/prefill")
				b.ReportMetric(float64(b.N*rows*promptLen)/secs, "rows_tok/s")
			})
		}
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
