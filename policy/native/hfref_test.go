package native

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// Checks against transformers: policy/hf's tiny checkpoints and the
// logits, greedy continuations and LoRA gradients transformers and PEFT
// computed on them (scripts/hf_reference.py). The files belong to
// policy/hf; these tests skip where they are absent (MLERL_HF_TESTDATA
// names another copy of that testdata folder).

// hfTestdata returns policy/hf's testdata folder, or skips.
func hfTestdata(t *testing.T) string {
	t.Helper()
	for _, dir := range []string{os.Getenv("MLERL_HF_TESTDATA"), filepath.Join("..", "hf", "testdata")} {
		if dir == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "ref", "qwen2.json")); err == nil {
			return dir
		}
	}
	t.Skip("no policy/hf testdata (transformers references); MLERL_HF_TESTDATA may name one")
	return ""
}

// readSafetensors reads every tensor of a safetensors file as float32
// (F32, BF16 and F16 data), with its shape.
func readSafetensors(t *testing.T, path string) (map[string][]float32, map[string][]int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b[:8])
	var header map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &header); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	data := b[8+n:]
	vals, shapes := map[string][]float32{}, map[string][]int{}
	for name, raw := range header {
		if name == "__metadata__" {
			continue
		}
		var info struct {
			DType   string `json:"dtype"`
			Shape   []int  `json:"shape"`
			Offsets [2]int `json:"data_offsets"`
		}
		if err := json.Unmarshal(raw, &info); err != nil {
			t.Fatal(err)
		}
		src := data[info.Offsets[0]:info.Offsets[1]]
		var out []float32
		switch info.DType {
		case "F32":
			for i := 0; i < len(src); i += 4 {
				out = append(out, math.Float32frombits(binary.LittleEndian.Uint32(src[i:])))
			}
		case "BF16":
			for i := 0; i < len(src); i += 2 {
				out = append(out, fromBF16(binary.LittleEndian.Uint16(src[i:])))
			}
		default:
			t.Fatalf("%s: %s has dtype %s", path, name, info.DType)
		}
		vals[name], shapes[name] = out, info.Shape
	}
	return vals, shapes
}

// hfConfig builds the Config of a checkpoint's config.json (the fields
// these families use), with invFreq as transformers computed it.
func hfConfig(t *testing.T, dir string, invFreq []float64) Config {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		ModelType     string  `json:"model_type"`
		Hidden        int     `json:"hidden_size"`
		Heads         int     `json:"num_attention_heads"`
		KVHeads       int     `json:"num_key_value_heads"`
		HeadDim       int     `json:"head_dim"`
		Layers        int     `json:"num_hidden_layers"`
		Inter         int     `json:"intermediate_size"`
		Vocab         int     `json:"vocab_size"`
		Eps           float64 `json:"rms_norm_eps"`
		Tied          bool    `json:"tie_word_embeddings"`
		AttentionBias bool    `json:"attention_bias"`
		Rope          struct {
			Theta float64 `json:"rope_theta"`
		} `json:"rope_parameters"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	return Config{Vocab: c.Vocab, DModel: c.Hidden, Heads: c.Heads, KVHeads: c.KVHeads, HeadSize: c.HeadDim, Layers: c.Layers,
		FFN: c.Inter, Ctx: 64, RoPEBase: c.Rope.Theta, Norm: NormRMS, NormEps: c.Eps, FFNKind: FFNSwiGLU,
		NoQKVBias: c.ModelType != "qwen2" && !c.AttentionBias, NoOutBias: true, NoFFNBias: true, NoLMBias: true,
		QKNorm: c.ModelType == "qwen3", TiedEmbed: c.Tied, InvFreq: invFreq}
}

// hfNames maps Hugging Face tensor names to native ones (doc.go's
// table), and whether the tensor is a Linear weight to transpose.
var hfNames = []struct {
	re        *regexp.Regexp
	native    string
	transpose bool
}{
	{regexp.MustCompile(`^model\.embed_tokens\.weight$`), "/token_embed/embeddings", false},
	{regexp.MustCompile(`^model\.norm\.weight$`), "/ln_final/rms_normalization/gain", false},
	{regexp.MustCompile(`^lm_head\.weight$`), "/lm_head/dense/weights", true},
	{regexp.MustCompile(`^model\.layers\.(\d+)\.input_layernorm\.weight$`), "/block_$1/ln_attn/rms_normalization/gain", false},
	{regexp.MustCompile(`^model\.layers\.(\d+)\.post_attention_layernorm\.weight$`), "/block_$1/ln_ffn/rms_normalization/gain", false},
	{regexp.MustCompile(`^model\.layers\.(\d+)\.self_attn\.([qkv])_proj\.weight$`), "/block_$1/$2/dense/weights", true},
	{regexp.MustCompile(`^model\.layers\.(\d+)\.self_attn\.([qkv])_proj\.bias$`), "/block_$1/$2/dense/biases", false},
	{regexp.MustCompile(`^model\.layers\.(\d+)\.self_attn\.o_proj\.weight$`), "/block_$1/out/dense/weights", true},
	{regexp.MustCompile(`^model\.layers\.(\d+)\.self_attn\.([qk])_norm\.weight$`), "/block_$1/${2}_norm/rms_normalization/gain", false},
	{regexp.MustCompile(`^model\.layers\.(\d+)\.mlp\.(gate|up|down)_proj\.weight$`), "/block_$1/ffn_$2/dense/weights", true},
	{regexp.MustCompile(`^(?:grad\.)?base_model\.model\.model\.layers\.(\d+)\.self_attn\.([qkv])_proj\.lora_([AB])\.weight$`), "/block_$1/$2/lora_$3", true},
	{regexp.MustCompile(`^(?:grad\.)?base_model\.model\.model\.layers\.(\d+)\.self_attn\.o_proj\.lora_([AB])\.weight$`), "/block_$1/out/lora_$2", true},
	{regexp.MustCompile(`^(?:grad\.)?base_model\.model\.model\.layers\.(\d+)\.mlp\.(gate|up|down)_proj\.lora_([AB])\.weight$`), "/block_$1/ffn_$2/lora_$3", true},
}

// nativeName maps a Hugging Face tensor name (lora_A/B lower-cased).
func nativeName(t *testing.T, hf string) (string, bool) {
	t.Helper()
	for _, m := range hfNames {
		if m.re.MatchString(hf) {
			n := m.re.ReplaceAllString(hf, m.native)
			n = regexp.MustCompile(`lora_([AB])$`).ReplaceAllStringFunc(n, func(s string) string { return "lora_" + string(s[5]+'a'-'A') })
			return n, m.transpose
		}
	}
	t.Fatalf("no native name for %s", hf)
	return "", false
}

// loadHF writes every tensor of a safetensors file into m.
func loadHF(t *testing.T, m *Model, path string) {
	t.Helper()
	vals, shapes := readSafetensors(t, path)
	for name, v := range vals {
		n, tr := nativeName(t, name)
		var err error
		if tr && len(shapes[name]) == 2 {
			err = m.SetParamOutIn(n, v)
		} else {
			err = m.SetParam(n, v)
		}
		if err != nil {
			t.Fatalf("%s -> %s: %v", name, n, err)
		}
	}
}

type hfRef struct {
	Checkpoint string    `json:"checkpoint"`
	InputIDs   [][]int32 `json:"input_ids"`
	Prompt     []int32   `json:"greedy_prompt"`
	Greedy     []int32   `json:"greedy"`
	InvFreq    []float64 `json:"inv_freq"`
	// LoRA references.
	Adapter string    `json:"adapter"`
	Mask    [][]int32 `json:"response_mask"`
	Loss    float64   `json:"loss"`
	Rank    int       `json:"r"`
	Alpha   float64   `json:"lora_alpha"`
}

func readRef(t *testing.T, path string) hfRef {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r hfRef
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// rowsBatch packs equal-length token rows, one example per row.
func rowsBatch(rows [][]int32) Batch {
	var exs [][]example
	for _, r := range rows {
		exs = append(exs, []example{{r, 0}})
	}
	return packRows(len(rows[0]), 0, exs...)
}

// maxAbsDiff returns max |got - want| and max |want|.
func maxAbsDiff(got, want []float32) (diff, scale float64) {
	for i, w := range want {
		diff = math.Max(diff, math.Abs(float64(got[i])-float64(w)))
		scale = math.Max(scale, math.Abs(float64(w)))
	}
	return diff, scale
}

// TestHFReferenceLogits: each family's tiny checkpoint, loaded through
// the name mapping of doc.go, gives transformers' float32 logits on its
// two reference rows (to float32 rounding: transformers rounds RoPE's
// angles to float32) and its greedy continuation through the decoder.
func TestHFReferenceLogits(t *testing.T) {
	dir := hfTestdata(t)
	for _, name := range []string{"llama", "llama3", "qwen2", "qwen3"} {
		t.Run(name, func(t *testing.T) {
			ref := readRef(t, filepath.Join(dir, "ref", name+".json"))
			cfg := hfConfig(t, filepath.Join(dir, ref.Checkpoint), ref.InvFreq)
			m, err := New(cfg, 1)
			if err != nil {
				t.Fatal(err)
			}
			loadHF(t, m, filepath.Join(dir, ref.Checkpoint, "model.safetensors"))
			want, _ := readSafetensors(t, filepath.Join(dir, "ref", name+".safetensors"))
			b := rowsBatch(ref.InputIDs)
			forEachKernel(t, func(t *testing.T) {
				got := forwardHeads(t, m, b, realPositions(b))
				diff, scale := maxAbsDiff(got[:len(want["logits"])], want["logits"])
				t.Logf("logits max |diff| %.3g (max |logit| %.3g)", diff, scale)
				if diff > 2e-5*math.Max(1, scale) {
					t.Errorf("logits differ from transformers' by %.3g (max |logit| %.3g)", diff, scale)
				}
				c, err := m.NewCache(1, cfg.Ctx)
				if err != nil {
					t.Fatal(err)
				}
				logits, err := m.Extend(c, []int{0}, [][]int32{ref.Prompt})
				if err != nil {
					t.Fatal(err)
				}
				for i, w := range ref.Greedy {
					next := argmax(logits)
					if next != w {
						t.Fatalf("greedy token %d is %d, transformers' %d", i, next, w)
					}
					if logits, err = m.Decode(c, []int{0}, []int32{next}); err != nil {
						t.Fatal(err)
					}
				}
			})
		})
	}
}

// TestHFReferenceLoRA: PEFT's adapter on the Qwen2 checkpoint (rank 4,
// alpha 8, every target, B non-zero) gives PEFT's adapted logits, SFT
// loss on the response tokens and every adapter gradient (A and B,
// transposed to PEFT's layout), and merged logits after MergeLoRA: to
// float32 rounding with a float32 base and float32 products; with a
// bfloat16 base and bf16 products (what train sft runs where the CPU has
// AVX512_BF16) within bf16Tolerance of the chain of bf16 products each
// result went through.
func TestHFReferenceLoRA(t *testing.T) {
	dir := hfTestdata(t)
	ref := readRef(t, filepath.Join(dir, "lora", "qwen2", "ref.json"))
	base := readRef(t, filepath.Join(dir, "ref", "qwen2.json"))
	cfg := hfConfig(t, filepath.Join(dir, ref.Checkpoint), base.InvFreq)
	want, _ := readSafetensors(t, filepath.Join(dir, "lora", "qwen2", "ref.safetensors"))
	// The bf16 chains: a head of 8 values keeps the attention's products
	// in float32 (attnBF16MinHead), so a block's longest path is q, o,
	// gate and down through their adapters (two products each), and the
	// LM head ends it. The merged model has no adapters (one product
	// per layer); the gradients go down and back up that chain.
	if cfg.HeadDim() >= attnBF16MinHead {
		t.Fatalf("head dim %d: the attention would run in bf16, which the chains below leave out", cfg.HeadDim())
	}
	adapted, merged := 8*cfg.Layers+1, 4*cfg.Layers+1
	for _, storage := range []string{MatmulFP32, MatmulBF16} {
		t.Run("base="+storage, func(t *testing.T) {
			tolLogits, tolMerged, tolGrad := 2e-5, 2e-5, 1e-4
			if storage == MatmulBF16 {
				tolLogits, tolMerged, tolGrad = bf16Tolerance(adapted), bf16Tolerance(merged), bf16Tolerance(2*adapted)
			}
			forEachKernel(t, func(t *testing.T) {
				m, err := NewWithOptions(cfg, Options{LoRA: LoRAConfig{Rank: ref.Rank, Alpha: ref.Alpha, Targets: allTargets}, BaseStorage: storage}, 1)
				if err != nil {
					t.Fatal(err)
				}
				if m.BaseStorage() != storage || m.Matmul() != storage {
					t.Fatalf("base %s, products %s; want %s", m.BaseStorage(), m.Matmul(), storage)
				}
				loadHF(t, m, filepath.Join(dir, ref.Checkpoint, "model.safetensors"))
				loadHF(t, m, filepath.Join(dir, ref.Adapter, "adapter_model.safetensors"))
				b := rowsBatch(ref.InputIDs)
				got := forwardHeads(t, m, b, realPositions(b))
				diff, scale := maxAbsDiff(got[:len(want["logits_adapted"])], want["logits_adapted"])
				t.Logf("adapted logits max |diff| %.3g (max |logit| %.3g, allowed %.3g)", diff, scale, tolLogits*math.Max(1, scale))
				if diff > tolLogits*math.Max(1, scale) {
					t.Errorf("adapted logits differ from PEFT's by %.3g (max %.3g)", diff, scale)
				}
				// Position i predicts token i+1, weighted by its response mask.
				var idx, targets []int32
				var weights []float32
				for r, row := range ref.InputIDs {
					for i := 0; i+1 < len(row); i++ {
						idx, targets = append(idx, int32(r*len(row)+i)), append(targets, row[i+1])
						weights = append(weights, float32(ref.Mask[r][i+1]))
					}
				}
				m.ZeroGrad()
				if err := m.Forward(b); err != nil {
					t.Fatal(err)
				}
				loss, err := m.CrossEntropyBackward(idx, targets, weights)
				if err != nil {
					t.Fatal(err)
				}
				// A position's cross-entropy moves by at most the
				// largest change of its logits (diff, measured above)
				// times sum |p - onehot| <= 2, and so does the weighted
				// mean.
				tolLoss := 1e-5 * ref.Loss
				if storage == MatmulBF16 {
					tolLoss = 2*diff + 1e-5*ref.Loss
				}
				t.Logf("loss %.8g, PEFT's %.8g (allowed %.3g)", loss, ref.Loss, tolLoss)
				if math.Abs(loss-ref.Loss) > tolLoss {
					t.Errorf("loss %.8g, PEFT's %.8g", loss, ref.Loss)
				}
				checked, worst := 0, 0.0
				for name, g := range want {
					if len(name) < 5 || name[:5] != "grad." {
						continue
					}
					n, _ := nativeName(t, name)
					i, err := m.field(n)
					if err != nil {
						t.Fatal(err)
					}
					f := m.table[i]
					hf := make([]float32, len(g))
					transposeF32(hf, *m.gtable[i].dst, f.shape[0], f.shape[1])
					diff, scale := maxAbsDiff(hf, g)
					worst = math.Max(worst, diff/scale)
					if diff > tolGrad*scale {
						t.Errorf("%s: gradient differs from PEFT's by %.3g (max %.3g)", n, diff, scale)
					}
					checked++
				}
				t.Logf("adapter gradients: worst max |diff| / max |grad| %.3g (allowed %.3g)", worst, tolGrad)
				if checked != 2*7*cfg.Layers {
					t.Errorf("checked %d adapter gradients, want %d", checked, 2*7*cfg.Layers)
				}
				if err := m.MergeLoRA(); err != nil {
					t.Fatal(err)
				}
				got = forwardHeads(t, m, b, realPositions(b))
				diff, scale = maxAbsDiff(got[:len(want["logits_merged"])], want["logits_merged"])
				t.Logf("merged logits max |diff| %.3g (max |logit| %.3g, allowed %.3g)", diff, scale, tolMerged*math.Max(1, scale))
				if diff > tolMerged*math.Max(1, scale) {
					t.Errorf("merged logits differ from PEFT's by %.3g (max %.3g)", diff, scale)
				}
			})
		})
	}
}
