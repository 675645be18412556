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
// BenchmarkLoRASFTBig and BenchmarkGenerateBig (random weights: only the
// shapes matter).
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
// lists) narrow the cases; MLERL_BIG_STORAGE stores the base in bf16 or
// quantized blocks (newBigModel).
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
				var step func(*testing.B) // built once per case, not again for each b.N
				b.Run(name, func(b *testing.B) {
					if step == nil {
						step = newLoRABig(b, cfg, bigLoRA{rows: nr, recompute: rec == "true", dropout: 0.05}, nil)
					}
					benchLoRABig(b, step, nr)
				})
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

// bigLoRA is how newLoRABig builds its model: rows of the demo recipe per
// step, recomputation, LoRA dropout, and the base's storage ("" is the
// engine's default; "fp32" or "bf16" name it, bf16 products with a bf16
// base).
type bigLoRA struct {
	rows      int
	recompute bool
	dropout   float64
	storage   string
}

// newLoRABig builds a LoRA model of shape cfg (rank 16, alpha 32 on every
// target), writes its base with load when load is not nil (a real
// model's weights: llm_test.go), and returns its SFT step on o.rows rows
// of the demo recipe with AdamW, warmed up (the step reports a failure on
// the b it is given).
func newLoRABig(b *testing.B, cfg Config, o bigLoRA, load func(*Model) error) func(*testing.B) {
	debug.FreeOSMemory()
	resetPeakRSS()
	t0 := time.Now()
	m, err := newBigModel(b, cfg, Options{
		LoRA:        LoRAConfig{Rank: 16, Alpha: 32, Dropout: o.dropout, Targets: allTargets},
		Recompute:   o.recompute,
		BaseStorage: o.storage,
	})
	if err != nil {
		b.Fatal(err)
	}
	if load != nil {
		if err := load(m); err != nil {
			b.Fatal(err)
		}
	}
	rows := o.rows
	opt := NewAdamW(m, AdamWConfig{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, ClipNorm: 1})
	batch, idx, targets := demoRecipeBatch(rows, cfg.Vocab)
	m.SetTraining(true)
	b.Logf("%d params (%d trainable), base in %s, %s products, built in %.1fs, RSS %.2f GiB", m.NumParams(), m.NumTrainable(), m.BaseStorage(), m.Matmul(), time.Since(t0).Seconds(), rssGiB("VmRSS"))
	step := func(b *testing.B) {
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
	step(b) // warm-up: buffers grow to size
	b.Logf("first step %.1fs", time.Since(t1).Seconds())
	return step
}

func benchLoRABig(b *testing.B, step func(*testing.B), rows int) {
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuSeconds()
	for range b.N {
		step(b)
	}
	secs := time.Since(start).Seconds() / float64(b.N)
	cpu := (cpuSeconds() - cpu0) / float64(b.N)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(secs, "s/step")
	b.ReportMetric(cpu, "cpu-s/step")
	b.ReportMetric(float64(rows*(1+448+160))/secs, "tok/s")
	b.ReportMetric(float64(rows*(1+448+160))/cpu, "tok/cpu-s")
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

// BenchmarkGenerateBig measures greedy generation with a KV cache on the
// Hugging Face shapes (New: random weights, float32, no adapters), the
// counterpart of scripts/bench_torch_hf_generate.py:
//
//   - batch=1: one 300-token prompt, then 128 new tokens;
//   - batch=8: one 300-token prompt, prefilled once, 8 rows continuing
//     from it, 64 new tokens per row;
//   - batch=32: 4 prompts of 300 tokens, each prefilled once, 8 rows
//     per prompt continuing from it (Cache.Share, as step-wise PPO
//     generates), 64 new tokens per row.
//
// Before the timed generations, one warm-up (the prefill and 4 decode
// steps) grows the buffers. new_tok/s counts the new tokens over the
// whole time, prefill included; new_tok/cpu-s over the process's CPU
// time (getrusage); decode_tok/s and decode_tok/cpu-s over the decode
// steps only;
// peak_RSS_GiB is the process's peak resident memory (VmHWM, reset
// before the model is built). Like BenchmarkLoRASFTBig it needs
// MLERL_BIG=1 and is meant to run one case per process:
//
//	MLERL_BIG=1 GOEXPERIMENT=simd go test -run '^$' -bench 'GenerateBig/smollm2-135m/batch=1$' -benchtime 1x ./policy/native/
//
// MLERL_BIG_SHAPES narrows the shapes; MLERL_BIG_STORAGE stores the
// (frozen) base in bf16 or quantized blocks, MLERL_BIG_ACTIVATIONS=int8
// quantizes the inputs of its products with them (newBigModel).
func BenchmarkGenerateBig(b *testing.B) {
	if os.Getenv("MLERL_BIG") != "1" {
		b.Skip("MLERL_BIG=1 runs the Hugging Face-sized generations (minutes each)")
	}
	for _, shape := range strings.Split(envOr("MLERL_BIG_SHAPES", "qwen2.5-0.5b,smollm2-135m,qwen3-0.6b"), ",") {
		cfg, ok := hfShape(shape)
		if !ok {
			b.Fatalf("unknown shape %q", shape)
		}
		for _, g := range []bigGen{{prompts: 1, perPrompt: 1, newTokens: 128}, {prompts: 1, perPrompt: 8, newTokens: 64}, {prompts: 4, perPrompt: 8, newTokens: 64}} {
			var m *Model // built once per case, not again for each b.N
			b.Run(fmt.Sprintf("%s/batch=%d", shape, g.prompts*g.perPrompt), func(b *testing.B) {
				if m == nil {
					debug.FreeOSMemory()
					resetPeakRSS()
					var err error
					if m, err = newBigModel(b, cfg, Options{}); err != nil {
						b.Fatal(err)
					}
				}
				benchGenerateBig(b, m, g)
			})
		}
	}
}

// bigGen is one case of BenchmarkGenerateBig (and BenchmarkLLMGenerate):
// prompts prompts of promptLen tokens (0: bigPromptLen, or
// MLERL_BIG_PROMPT's length, e.g. 1 to compare with llama-bench's tg128
// at depth 0), perPrompt rows continuing from each.
type bigGen struct{ prompts, perPrompt, newTokens, promptLen int }

const bigPromptLen = 300

// benchGenerateBig times g's generations on m: new_tok/s and
// new_tok/cpu-s over the whole time, decode_tok/s over the decode steps,
// prefill_tok/s the prompt tokens over the prefills (one Extend of every
// prompt, PackWeights included), and the process's peak memory.
func benchGenerateBig(b *testing.B, m *Model, g bigGen) {
	cfg := m.Config
	if g.promptLen == 0 {
		n, err := strconv.Atoi(envOr("MLERL_BIG_PROMPT", strconv.Itoa(bigPromptLen)))
		if err != nil || n < 1 {
			b.Fatalf("MLERL_BIG_PROMPT=%q: want a positive number of tokens", os.Getenv("MLERL_BIG_PROMPT"))
		}
		g.promptLen = n
	}
	r := rand.New(rand.NewPCG(7, 8))
	prompts, firsts := make([][]int32, g.prompts), make([]int, g.prompts)
	for i := range prompts {
		prompts[i] = randTokens(r, g.promptLen, cfg.Vocab)
		firsts[i] = i * g.perPrompt
	}
	rows := g.prompts * g.perPrompt
	all := make([]int, rows)
	for i := range all {
		all[i] = i
	}
	c, err := m.NewCache(rows, g.promptLen+g.newTokens)
	if err != nil {
		b.Fatal(err)
	}
	logits := make([]float32, rows*cfg.Vocab)
	var prefillSecs float64
	// generate prefills each prompt once, lets its rows share it, and
	// decodes n tokens; it returns the decode steps' wall seconds and
	// adds their CPU seconds to decodeCPU.
	var decodeCPU float64
	generate := func(n int) float64 {
		for i := range rows {
			c.Reset(i)
		}
		t0 := time.Now()
		m.PackWeights(c) // once per prefill, as the policy's decoder does (engine_native.go)
		first, err := m.Extend(c, firsts, prompts)
		if err != nil {
			b.Fatal(err)
		}
		prefillSecs += time.Since(t0).Seconds()
		for s, src := range firsts {
			for j := range g.perPrompt {
				if j > 0 {
					if err := c.Share(src+j, src); err != nil {
						b.Fatal(err)
					}
				}
				copy(logits[(src+j)*cfg.Vocab:(src+j+1)*cfg.Vocab], first[s*cfg.Vocab:(s+1)*cfg.Vocab])
			}
		}
		cpu0 := cpuSeconds()
		secs := decodeGreedy(b, m, c, all, logits, n)
		decodeCPU += cpuSeconds() - cpu0
		return secs
	}
	generate(4) // warm-up: buffers grow to size
	decodeCPU = 0
	var decodeSecs float64
	prefillSecs = 0
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuSeconds()
	for range b.N {
		decodeSecs += generate(g.newTokens)
	}
	secs, cpu := time.Since(start).Seconds(), cpuSeconds()-cpu0
	n := float64(b.N * rows * g.newTokens)
	b.ReportMetric(n/secs, "new_tok/s")
	b.ReportMetric(n/cpu, "new_tok/cpu-s")
	b.ReportMetric(n/decodeSecs, "decode_tok/s")
	b.ReportMetric(float64(b.N*g.prompts*g.promptLen)/prefillSecs, "prefill_tok/s")
	b.ReportMetric(n/decodeCPU, "decode_tok/cpu-s")
	b.ReportMetric(rssGiB("VmHWM"), "peak_RSS_GiB")
}
