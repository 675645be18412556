package policy

import (
	"math/rand/v2"
	"os"
	"syscall"
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

// BenchmarkGenerate measures one Generator.Generate call as step-wise PPO
// makes them: 32 rows (4 states x K=8 samples sharing a 448-token
// prompt), up to 160 new tokens each at temperature 1, free decoding, on
// the demo shape with a 4,096-id vocabulary and the native engine, one
// engine for every call (as a stage keeps one). It reports the wall and
// CPU time per call and the system (kernel) share of that CPU time: page
// faults on freshly mapped memory show up there.
func BenchmarkGenerate(b *testing.B) {
	const rows, states, promptLen, maxNew = 32, 4, 448, 160
	cfg := DemoConfig()
	cfg.Vocab = 4096
	e, err := NewEngine(EngineNative, cfg, InitWeights(cfg, 1))
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	prompts := make([][]int32, rows)
	for i := range prompts {
		if i%(rows/states) == 0 {
			prompts[i] = randPrompt(r, promptLen, cfg.Vocab)
		} else {
			prompts[i] = prompts[i-1]
		}
	}
	g := Generator{Engine: e}
	opts := GenerateOptions{Temperature: 1, MaxNewTokens: maxNew, Seed: 7}
	if _, err := g.Generate(prompts, opts); err != nil { // warm-up
		b.Fatal(err)
	}
	b.ResetTimer()
	u0, s0 := rusage()
	start := time.Now()
	tokens := 0
	for i := range b.N {
		opts.Seed = uint64(i)
		out, err := g.Generate(prompts, opts)
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range out {
			tokens += len(s.Tokens)
		}
	}
	secs := time.Since(start).Seconds()
	u1, s1 := rusage()
	cpu := (u1 - u0) + (s1 - s0)
	b.ReportMetric(secs*1e3/float64(b.N), "ms/call")
	b.ReportMetric(cpu*1e3/float64(b.N), "cpu-ms/call")
	b.ReportMetric(100*(s1-s0)/cpu, "sys-%")
	b.ReportMetric(float64(tokens)/cpu, "tok/cpu-s")
}

// rusage returns this process's user and system CPU seconds.
func rusage() (user, sys float64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return float64(ru.Utime.Nano()) / 1e9, float64(ru.Stime.Nano()) / 1e9
}
