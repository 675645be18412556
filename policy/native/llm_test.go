package native

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"testing"
	"time"

	"github.com/mlerl/mlerl/policy/hf"
)

// The real model's rows of `make bench` (BENCH_LLM=1, issue 61): a
// pretrained Hugging Face folder's weights (SmolLM2-135M-Instruct's,
// .deps/smollm2-hf: its GGUF dequantized by transformers) in the native
// engine, at the demo recipe's lengths (448-token prompts, 160-token
// responses, a 640-token context), each benchmark the counterpart of a
// mode of scripts/bench_torch_llm.py on the same shapes. MLERL_LLM names
// the folder; without it they are skipped. Like BenchmarkLoRASFTBig they
// are meant to run one case per process, for a peak memory of its own:
//
//	MLERL_LLM=.deps/smollm2-hf GOEXPERIMENT=simd go test -run '^$' -bench 'LLMGenerate/batch=1$' -benchtime 1x ./policy/native/

// llmLens are the demo recipe's lengths (policy.DemoConfig): the prompt,
// the response (new tokens when generating) and the context.
const llmPrompt, llmResponse, llmCtx = 448, 160, 640

// llmDir is the folder MLERL_LLM names, or skips b.
func llmDir(b *testing.B) string {
	dir := os.Getenv("MLERL_LLM")
	if dir == "" {
		b.Skip("MLERL_LLM names a Hugging Face folder (scripts/bench.sh BENCH_LLM=1 sets it): the real model's rows")
	}
	return dir
}

// llmConfig is the native config of the folder's config.json, as
// policy.newHF builds it for a Hugging Face policy, with a ctx-token
// context.
func llmConfig(dir string, ctx int) (Config, error) {
	a, err := hf.ReadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return Config{}, err
	}
	cfg := Config{Vocab: a.VocabSize, DModel: a.HiddenSize, Heads: a.NumHeads, Layers: a.NumLayers, FFN: a.IntermediateSize,
		RoPEBase: a.RopeTheta, Ctx: ctx, KVHeads: a.NumKVHeads, HeadSize: a.HeadDim, Norm: NormRMS, NormEps: a.RMSNormEps,
		FFNKind: FFNSwiGLU, NoQKVBias: !a.QKVBias, NoOutBias: true, NoFFNBias: true, NoLMBias: true, QKNorm: a.QKNorm,
		TiedEmbed: a.TieWordEmbeddings}
	if a.RopeScaling != nil {
		cfg.InvFreq = hf.InvFreq(a)
	}
	return cfg, nil
}

// llmNames maps a Hugging Face tensor name onto the native parameter it
// fills (the table of policy/policy_hf.go, which this package cannot
// import); outIn marks a Linear weight, [out, in] there.
var llmNames = []struct {
	re     *regexp.Regexp
	native string
	outIn  bool
}{
	{regexp.MustCompile(`^model\.embed_tokens\.weight$`), "/token_embed/embeddings", false},
	{regexp.MustCompile(`^model\.norm\.weight$`), "/ln_final/rms_normalization/gain", false},
	{regexp.MustCompile(`^lm_head\.weight$`), "/lm_head/dense/weights", true},
	{regexp.MustCompile(`^model\.layers\.(\d+)\.input_layernorm\.weight$`), "/block_$1/ln_attn/rms_normalization/gain", false},
	{regexp.MustCompile(`^model\.layers\.(\d+)\.post_attention_layernorm\.weight$`), "/block_$1/ln_ffn/rms_normalization/gain", false},
	{regexp.MustCompile(`^model\.layers\.(\d+)\.self_attn\.([qkv])_proj\.weight$`), "/block_$1/$2/dense/weights", true},
	{regexp.MustCompile(`^model\.layers\.(\d+)\.self_attn\.([qkv])_proj\.bias$`), "/block_$1/$2/dense/biases", false},
	{regexp.MustCompile(`^model\.layers\.(\d+)\.self_attn\.o_proj\.weight$`), "/block_$1/out/dense/weights", true},
	{regexp.MustCompile(`^model\.layers\.(\d+)\.self_attn\.([qk])_norm\.weight$`), "/block_${1}/${2}_norm/rms_normalization/gain", false},
	{regexp.MustCompile(`^model\.layers\.(\d+)\.mlp\.(gate|up|down)_proj\.weight$`), "/block_$1/ffn_$2/dense/weights", true},
}

var (
	llmSkip    = regexp.MustCompile(`rotary_emb\.inv_freq$`) // recomputed from config.json
	llmOwnInit = regexp.MustCompile(`^/value_head/|/lora_[ab]$`)
)

// llmLoad returns a loader writing dir's weights into a model built with
// llmConfig's config: every base parameter must be written (only the
// adapters and the value head keep their initial values), so a folder
// that does not fill the model is an error, not a benchmark of random
// weights.
func llmLoad(dir string) func(*Model) error {
	return func(m *Model) error {
		w, err := hf.OpenWeights(dir)
		if err != nil {
			return err
		}
		defer w.Close()
		set := map[string]bool{}
		for _, name := range w.Names() {
			if llmSkip.MatchString(name) {
				continue
			}
			n, outIn := "", false
			for _, e := range llmNames {
				if e.re.MatchString(name) {
					n, outIn = e.re.ReplaceAllString(name, e.native), e.outIn
					break
				}
			}
			if n == "" {
				return fmt.Errorf("%s: tensor %s has no counterpart in the native engine", dir, name)
			}
			v, _, err := w.Float32(name)
			if err != nil {
				return err
			}
			if outIn {
				err = m.SetParamOutIn(n, v)
			} else {
				err = m.SetParam(n, v)
			}
			if err != nil {
				return fmt.Errorf("%s: tensor %s: %w", dir, name, err)
			}
			set[n] = true
		}
		for _, p := range m.Params() {
			if !set[p.Name] && !llmOwnInit.MatchString(p.Name) {
				return fmt.Errorf("%s: no tensor fills the model's %s", dir, p.Name)
			}
		}
		return nil
	}
}

// llmCheckGreedy decodes the first conversation of the folder's
// SOURCE.json (scripts/smollm2_hf.py writes it: transformers' prompt ids
// and greedy tokens) on m and fails b unless m's greedy tokens are
// transformers': the benchmark then times the real model, loaded right.
// A folder without SOURCE.json is logged and not checked.
func llmCheckGreedy(b *testing.B, dir string, m *Model) {
	raw, err := os.ReadFile(filepath.Join(dir, "SOURCE.json"))
	if err != nil {
		b.Logf("no greedy check: %v", err)
		return
	}
	var src struct {
		Reference []struct {
			PromptIDs []int32 `json:"prompt_ids"`
			GreedyIDs []int32 `json:"greedy_ids"`
		} `json:"reference"`
	}
	if err := json.Unmarshal(raw, &src); err != nil || len(src.Reference) == 0 {
		b.Fatalf("%s: SOURCE.json: no reference (%v)", dir, err)
	}
	ref := src.Reference[0]
	c, err := m.NewCache(1, len(ref.PromptIDs)+len(ref.GreedyIDs))
	if err != nil {
		b.Fatal(err)
	}
	logits, err := m.Extend(c, []int{0}, [][]int32{ref.PromptIDs})
	if err != nil {
		b.Fatal(err)
	}
	var got []int32
	for range ref.GreedyIDs {
		t := argmax(logits)
		got = append(got, t)
		if logits, err = m.Decode(c, []int{0}, []int32{t}); err != nil {
			b.Fatal(err)
		}
	}
	if !slices.Equal(got, ref.GreedyIDs) {
		b.Fatalf("%s: greedy tokens %v, transformers' (SOURCE.json) %v: the weights are not loaded as transformers reads them", dir, got, ref.GreedyIDs)
	}
}

// BenchmarkLLMGenerate measures greedy generation of the real model with
// a KV cache, float32 weights without adapters (what evaluation and a
// merged policy decode with; decoding is float32 in this engine), at the
// demo recipe's lengths: batch=1 one 448-token prompt; batch=8 and
// batch=32 2 and 8 prompts, each prefilled once and shared by 4 rows
// (Cache.Share: K=4 samples per state, as step-wise PPO samples); 160 new
// tokens per row. Before timing, the model's greedy answer to
// SOURCE.json's conversation is checked against transformers'. Metrics as
// BenchmarkGenerateBig's (prefill_tok/s: the prompt tokens over the
// prefills, the counterpart of llama-bench's pp).
func BenchmarkLLMGenerate(b *testing.B) {
	dir := llmDir(b)
	for _, g := range []bigGen{{prompts: 1, perPrompt: 1}, {prompts: 2, perPrompt: 4}, {prompts: 8, perPrompt: 4}} {
		g.promptLen, g.newTokens = llmPrompt, llmResponse
		var m *Model
		b.Run(fmt.Sprintf("batch=%d", g.prompts*g.perPrompt), func(b *testing.B) {
			if m == nil {
				debug.FreeOSMemory()
				resetPeakRSS()
				cfg, err := llmConfig(dir, llmCtx)
				if err != nil {
					b.Fatal(err)
				}
				t0 := time.Now()
				if m, err = New(cfg, 1); err != nil {
					b.Fatal(err)
				}
				if err := llmLoad(dir)(m); err != nil {
					b.Fatal(err)
				}
				b.Logf("%s: %d params, loaded in %.1fs", dir, m.NumParams(), time.Since(t0).Seconds())
				llmCheckGreedy(b, dir, m)
			}
			benchGenerateBig(b, m, g)
		})
	}
}

// llmMatmuls are the product precisions the training rows run in: fp32
// (a float32 base) and, where the CPU has AVX512_BF16, bf16 (a bf16 base,
// as base_storage auto trains a Hugging Face policy there).
func llmMatmuls() []string {
	if BF16Native() {
		return []string{MatmulFP32, MatmulBF16}
	}
	return []string{MatmulFP32}
}

// BenchmarkLLMLoRASFT measures LoRA SFT steps of the real model as
// BenchmarkLoRASFTBig does (rank 16, alpha 32, dropout 0.05 on every
// Linear; 4 rows of BOS + 448 + 160 tokens, the LM head at the
// responses; recomputation; AdamW): train sft's default tuning on a
// Hugging Face policy. MLERL_LLM_ROWS changes the rows.
func BenchmarkLLMLoRASFT(b *testing.B) {
	dir := llmDir(b)
	rows := 4
	if v := os.Getenv("MLERL_LLM_ROWS"); v != "" {
		if _, err := fmt.Sscan(v, &rows); err != nil || rows < 1 {
			b.Fatalf("MLERL_LLM_ROWS=%q: want a positive number of rows", v)
		}
	}
	for _, mode := range llmMatmuls() {
		var step func(*testing.B)
		b.Run(fmt.Sprintf("matmul=%s/rows=%d", mode, rows), func(b *testing.B) {
			if step == nil {
				cfg, err := llmConfig(dir, llmCtx)
				if err != nil {
					b.Fatal(err)
				}
				step = newLoRABig(b, cfg, bigLoRA{rows: rows, recompute: true, dropout: 0.05, storage: mode}, llmLoad(dir))
			}
			benchLoRABig(b, step, rows)
		})
	}
}

// BenchmarkLLMPPOLearner is BenchmarkPPOLearner's shared-prompt step on
// the real model, as train ppo runs a Hugging Face policy: LoRA rank 16
// on every Linear without dropout (the ratio starts at 1), the value
// head detached from the trunk, recomputation; 4 states x 8 actions of
// 40-96 tokens on 400-448-token prompts (ppoBatches: the batch
// TestWritePPOBenchData writes for scripts/bench_torch_llm.py ppo), each
// state's prompt packed once (Batch.Prefix) as train ppo packs; the LM
// head at the action positions, the PPO-shaped host loss, backward,
// AdamW at 1e-5. Metrics as BenchmarkPPOLearner's, and the peak memory.
//
// Where the CPU has AVX512_BF16 it runs three ways: a float32 base with
// float32 products; a bf16 base with float32 products (what train ppo ran
// there before its matmul key: base_storage auto stored the base in bf16
// and PPO forced float32 products, which widen each weight as they pack
// it); and a bf16 base with bf16 products (matmul bf16). A base kept in
// Q4_1 blocks runs with float32 products and, with AVX512_BF16, bf16 ones.
func BenchmarkLLMPPOLearner(b *testing.B) {
	dir := llmDir(b)
	_, pb := ppoBatches(4, 8, 1)
	type variant struct{ storage, matmul string }
	// A base in Q4_1 blocks (the published file's format, quantized here
	// from the folder's weights) is what train ppo runs on a GGUF policy.
	vs := []variant{{MatmulFP32, MatmulFP32}, {StorageQ4_1, MatmulFP32}}
	if BF16Native() {
		vs = append(vs, variant{MatmulBF16, MatmulFP32}, variant{MatmulBF16, MatmulBF16}, variant{StorageQ4_1, MatmulBF16})
	}
	for _, v := range vs {
		b.Run("base="+v.storage+"/matmul="+v.matmul+"/shared", func(b *testing.B) {
			debug.FreeOSMemory()
			resetPeakRSS()
			cfg, err := llmConfig(dir, llmCtx)
			if err != nil {
				b.Fatal(err)
			}
			m, err := NewWithOptions(cfg, Options{
				LoRA:        LoRAConfig{Rank: 16, Alpha: 32, Targets: allTargets},
				Recompute:   true,
				BaseStorage: v.storage,
			}, 1)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := m.SetMatmul(v.matmul); err != nil {
				b.Fatal(err)
			}
			if err := llmLoad(dir)(m); err != nil {
				b.Fatal(err)
			}
			m.DetachValue = true
			m.SetTraining(true)
			opt := NewAdamW(m, AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.01, ClipNorm: 1})
			var dLogits, dValues []float32
			step := func() {
				m.ZeroGrad()
				if err := m.Forward(pb.Batch); err != nil {
					b.Fatal(err)
				}
				logits, values, err := m.Heads(pb.idx)
				if err != nil {
					b.Fatal(err)
				}
				dLogits, dValues = grow(dLogits, len(logits)), grow(dValues, len(values))
				ppoLossGrad(logits, values, dLogits, dValues, pb.targets, pb.valueAt, cfg.Vocab)
				if err := m.Backward(pb.idx, dLogits, dValues); err != nil {
					b.Fatal(err)
				}
				opt.Step(m, 1e-5)
			}
			t1 := time.Now()
			step() // warm-up: buffers grow to size
			b.Logf("base in %s, %s products; first step %.1fs", m.BaseStorage(), m.Matmul(), time.Since(t1).Seconds())
			b.ResetTimer()
			start, cpu0 := time.Now(), cpuSeconds()
			for range b.N {
				step()
			}
			secs, cpu := time.Since(start).Seconds(), cpuSeconds()-cpu0
			b.ReportMetric(secs/float64(b.N), "s/step")
			b.ReportMetric(float64(b.N*pb.real)/secs, "real_tok/s")
			b.ReportMetric(float64(b.N*pb.sample)/secs, "sample_tok/s")
			b.ReportMetric(float64(b.N*pb.real)/cpu, "real_tok/cpu-s")
			b.ReportMetric(float64(b.N*pb.sample)/cpu, "sample_tok/cpu-s")
			b.ReportMetric(rssGiB("VmHWM"), "peak_RSS_GiB")
		})
	}
}
