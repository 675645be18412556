package native

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Hugging Face model shapes for the memory and time measurements of
// BenchmarkLoRASFTBig (random weights: only the shapes matter).
func hfShape(name string) (Config, bool) {
	switch name {
	case "qwen2.5-0.5b":
		return Config{Vocab: 151936, DModel: 896, Heads: 14, KVHeads: 2, HeadSize: 64, Layers: 24, FFN: 4864, Ctx: 640,
			RoPEBase: 1e6, Norm: NormRMS, NormEps: 1e-6, FFNKind: FFNSwiGLU, NoOutBias: true, NoFFNBias: true, NoLMBias: true, TiedEmbed: true}, true
	case "smollm2-135m":
		return Config{Vocab: 49152, DModel: 576, Heads: 9, KVHeads: 3, HeadSize: 64, Layers: 30, FFN: 1536, Ctx: 640,
			RoPEBase: 100000, Norm: NormRMS, NormEps: 1e-5, FFNKind: FFNSwiGLU, NoQKVBias: true, NoOutBias: true, NoFFNBias: true, NoLMBias: true, TiedEmbed: true}, true
	case "qwen3-0.6b":
		return Config{Vocab: 151936, DModel: 1024, Heads: 16, KVHeads: 8, HeadSize: 128, Layers: 28, FFN: 3072, Ctx: 640,
			RoPEBase: 1e6, Norm: NormRMS, NormEps: 1e-6, FFNKind: FFNSwiGLU, NoQKVBias: true, NoOutBias: true, NoFFNBias: true, NoLMBias: true, QKNorm: true, TiedEmbed: true}, true
	}
	return Config{}, false
}

// demoRecipeBatch is rows rows of the demo recipe's SFT packing: each a
// BOS, a 448-token prompt and a 160-token response in a 640-token row,
// with the LM head at the 160 positions that predict the response.
func demoRecipeBatch(rows, vocab int) (Batch, []int32, []int32) {
	const width, prompt, response = 640, 448, 160
	r := rand.New(rand.NewPCG(1, 2))
	b := Batch{B: rows, S: width, Tokens: make([]int32, rows*width), Positions: make([]int32, rows*width), Segments: make([]int32, rows*width)}
	var idx, targets []int32
	for row := range rows {
		n := 1 + prompt + response
		for j := range n {
			at := row*width + j
			b.Tokens[at], b.Positions[at], b.Segments[at] = int32(r.IntN(vocab)), int32(j), 1
		}
		for j := prompt; j < prompt+response; j++ {
			idx, targets = append(idx, int32(row*width+j)), append(targets, b.Tokens[row*width+j+1])
		}
	}
	return b, idx, targets
}

// BenchmarkLoRASFTBig measures LoRA SFT steps (rank 16, alpha 32,
// dropout 0.05 on q, k, v, o, gate, up and down; forward, fused
// cross-entropy at the response positions, backward, AdamW) on Hugging
// Face shapes with random weights, at the demo recipe's lengths, and
// reports seconds per step and the process's peak resident memory
// (VmHWM, reset before the model is built). It needs MLERL_BIG=1 (a step
// of the 0.5B shape takes minutes on two cores) and is meant to run one
// case per process, for a peak of its own:
//
//	MLERL_BIG=1 GOEXPERIMENT=simd go test -run '^$' -bench 'LoRASFTBig/qwen2.5-0.5b/rows=8/recompute=true' -benchtime 2x ./policy/native/
//
// MLERL_BIG_SHAPES, MLERL_BIG_ROWS and MLERL_BIG_RECOMPUTE (comma
// lists) narrow the cases.
func BenchmarkLoRASFTBig(b *testing.B) {
	if os.Getenv("MLERL_BIG") != "1" {
		b.Skip("MLERL_BIG=1 runs the Hugging Face-sized steps (minutes each)")
	}
	list := func(env, def string) []string { return strings.Split(envOr(env, def), ",") }
	for _, shape := range list("MLERL_BIG_SHAPES", "qwen2.5-0.5b,smollm2-135m,qwen3-0.6b") {
		cfg, ok := hfShape(shape)
		if !ok {
			b.Fatalf("unknown shape %q", shape)
		}
		for _, rows := range list("MLERL_BIG_ROWS", "4,8") {
			nr, err := strconv.Atoi(rows)
			if err != nil {
				b.Fatal(err)
			}
			for _, rec := range list("MLERL_BIG_RECOMPUTE", "true,false") {
				name := fmt.Sprintf("%s/rows=%d/recompute=%s", shape, nr, rec)
				b.Run(name, func(b *testing.B) { benchLoRABig(b, cfg, nr, rec == "true") })
			}
		}
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func benchLoRABig(b *testing.B, cfg Config, rows int, recompute bool) {
	debug.FreeOSMemory()
	resetPeakRSS()
	t0 := time.Now()
	m, err := NewWithOptions(cfg, Options{
		LoRA:      LoRAConfig{Rank: 16, Alpha: 32, Dropout: 0.05, Targets: allTargets},
		Recompute: recompute,
	}, 1)
	if err != nil {
		b.Fatal(err)
	}
	opt := NewAdamW(m, AdamWConfig{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, ClipNorm: 1})
	batch, idx, targets := demoRecipeBatch(rows, cfg.Vocab)
	m.SetTraining(true)
	b.Logf("%d params (%d trainable), base in %s, built in %.1fs, RSS %.2f GiB", m.NumParams(), m.NumTrainable(), m.BaseStorage(), time.Since(t0).Seconds(), rssGiB("VmRSS"))
	step := func() {
		m.ZeroGrad()
		if err := m.Forward(batch); err != nil {
			b.Fatal(err)
		}
		if _, err := m.CrossEntropyBackward(idx, targets, nil); err != nil {
			b.Fatal(err)
		}
		opt.Step(m, 1e-4)
	}
	t1 := time.Now()
	step() // warm-up: buffers grow to size
	b.Logf("first step %.1fs", time.Since(t1).Seconds())
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuSeconds()
	for range b.N {
		step()
	}
	secs := time.Since(start).Seconds() / float64(b.N)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(secs, "s/step")
	b.ReportMetric((cpuSeconds()-cpu0)/float64(b.N), "cpu-s/step")
	b.ReportMetric(float64(rows*(1+448+160))/secs, "tok/s")
	b.ReportMetric(rssGiB("VmHWM"), "peak_RSS_GiB")
	b.ReportMetric(float64(ms.HeapSys)/(1<<30), "heap_sys_GiB")
}

// resetPeakRSS resets the kernel's record of this process's peak
// resident memory (VmHWM), where Linux allows it.
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// rssGiB reads a memory field of /proc/self/status (VmRSS, VmHWM) in GiB
// (0 where there is none).
func rssGiB(field string) float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / (1 << 20)
		}
	}
	return 0
}
