package policy

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/mlerl/mlerl/policy/hf"
	"github.com/mlerl/mlerl/policy/native"
)

// The architecture engine against transformers and PEFT directly:
// policy/hf's tiny checkpoints, loaded through policy/hf, and the logits,
// greedy continuations, adapted logits, SFT loss and adapter gradients
// scripts/hf_reference.py computed on them (policy/hf/testdata).

// hfRefDir returns policy/hf's testdata folder, or skips.
func hfRefDir(t *testing.T) string {
	t.Helper()
	for _, dir := range []string{os.Getenv("MLERL_HF_TESTDATA"), filepath.Join("hf", "testdata")} {
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

// hfRefFile is a reference's JSON half (its tensors are beside it).
type hfRefFile struct {
	Checkpoint string    `json:"checkpoint"`
	InputIDs   [][]int32 `json:"input_ids"`
	Prompt     []int32   `json:"greedy_prompt"`
	Greedy     []int32   `json:"greedy"`
	InvFreq    []float64 `json:"inv_freq"` // transformers' (float32) frequencies
	Adapter    string    `json:"adapter"`
	Mask       [][]int32 `json:"response_mask"`
	Loss       float64   `json:"loss"`
	Rank       int       `json:"r"`
	Alpha      float64   `json:"lora_alpha"`
}

func readHFRef(t *testing.T, path string) hfRefFile {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r hfRefFile
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return r
}

// hfNativeConfig is the native.Config of a checkpoint's architecture
// (doc.go's table in policy/native) with transformers' RoPE frequencies.
func hfNativeConfig(a *hf.Arch, invFreq []float64) native.Config {
	return native.Config{Vocab: a.VocabSize, DModel: a.HiddenSize, Heads: a.NumHeads, KVHeads: a.NumKVHeads, HeadSize: a.HeadDim,
		Layers: a.NumLayers, FFN: a.IntermediateSize, Ctx: 64, RoPEBase: a.RopeTheta, Norm: native.NormRMS, NormEps: a.RMSNormEps,
		FFNKind: native.FFNSwiGLU, NoQKVBias: !a.QKVBias, NoOutBias: true, NoFFNBias: true, NoLMBias: true, QKNorm: a.QKNorm,
		TiedEmbed: a.TieWordEmbeddings, InvFreq: invFreq}
}

// gomlxHFNames maps GoMLX parameter names to Hugging Face's (the table of
// policy/native's doc.go), with whether the tensor is a Linear weight
// stored [out, in] (transposed to native's [in, out]). The value head has
// none.
var gomlxHFNames = func() []struct {
	re        *regexp.Regexp
	hf        string
	transpose bool
} {
	type rule = struct {
		re        *regexp.Regexp
		hf        string
		transpose bool
	}
	rules := []rule{
		{regexp.MustCompile(`^/token_embed/embeddings$`), "model.embed_tokens.weight", false},
		{regexp.MustCompile(`^/ln_final/rms_normalization/gain$`), "model.norm.weight", false},
		{regexp.MustCompile(`^/lm_head/dense/weights$`), "lm_head.weight", true},
		{regexp.MustCompile(`^/block_(\d+)/ln_attn/rms_normalization/gain$`), "model.layers.$1.input_layernorm.weight", false},
		{regexp.MustCompile(`^/block_(\d+)/ln_ffn/rms_normalization/gain$`), "model.layers.$1.post_attention_layernorm.weight", false},
		{regexp.MustCompile(`^/block_(\d+)/([qkv])/dense/weights$`), "model.layers.$1.self_attn.${2}_proj.weight", true},
		{regexp.MustCompile(`^/block_(\d+)/([qkv])/dense/biases$`), "model.layers.$1.self_attn.${2}_proj.bias", false},
		{regexp.MustCompile(`^/block_(\d+)/out/dense/weights$`), "model.layers.$1.self_attn.o_proj.weight", true},
		{regexp.MustCompile(`^/block_(\d+)/([qk])_norm/rms_normalization/gain$`), "model.layers.$1.self_attn.${2}_norm.weight", false},
		{regexp.MustCompile(`^/block_(\d+)/ffn_(gate|up|down)/dense/weights$`), "model.layers.$1.mlp.${2}_proj.weight", true},
	}
	for ab, AB := range map[string]string{"a": "A", "b": "B"} {
		rules = append(rules,
			rule{regexp.MustCompile(`^/block_(\d+)/([qkv])/lora_` + ab + `$`), "base_model.model.model.layers.$1.self_attn.${2}_proj.lora_" + AB + ".weight", true},
			rule{regexp.MustCompile(`^/block_(\d+)/out/lora_` + ab + `$`), "base_model.model.model.layers.$1.self_attn.o_proj.lora_" + AB + ".weight", true},
			rule{regexp.MustCompile(`^/block_(\d+)/ffn_(gate|up|down)/lora_` + ab + `$`), "base_model.model.model.layers.$1.mlp.${2}_proj.lora_" + AB + ".weight", true})
	}
	return rules
}()

// hfName is native's name's Hugging Face tensor ("" when none).
func hfName(name string) (string, bool) {
	for _, r := range gomlxHFNames {
		if r.re.MatchString(name) {
			return r.re.ReplaceAllString(name, r.hf), r.transpose
		}
	}
	return "", false
}

// hfEngine loads a checkpoint (and, when adapterDir is not "", a PEFT
// adapter with rank and alpha) into a GoMLX engine by native's names.
func hfEngine(t *testing.T, dir, adapterDir string, ref hfRefFile) (*gomlxEngine, native.Config) {
	t.Helper()
	ck, err := hf.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	cfg := hfNativeConfig(ck.Arch, ref.InvFreq)
	var lora native.LoRAConfig
	var adapter *hf.File
	if adapterDir != "" {
		lora = native.LoRAConfig{Rank: ref.Rank, Alpha: ref.Alpha, Targets: []string{"q", "k", "v", "o", "gate", "up", "down"}}
		if adapter, err = hf.OpenFile(filepath.Join(adapterDir, "adapter_model.safetensors")); err != nil {
			t.Fatal(err)
		}
		defer adapter.Close()
	}
	e, err := NewGomlxEngineArch(cfg, lora, GomlxArchOptions{Backend: testBackend(t)})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := e.Weights()
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range ws {
		name, tr := hfName(w.Name)
		if name == "" {
			continue // the value head: no Hugging Face counterpart
		}
		var data []float32
		var info hf.TensorInfo
		if adapter != nil && name[:5] == "base_" {
			data, info, err = adapter.Float32(name)
		} else {
			data, info, err = ck.Weights.Float32(name)
		}
		if err != nil {
			t.Fatalf("%s (%s): %v", w.Name, name, err)
		}
		if tr {
			data = transposed(data, info.Shape[0], info.Shape[1])
		}
		ws[i].F32 = data
	}
	if err := e.SetWeights(ws); err != nil {
		t.Fatal(err)
	}
	return e.(*gomlxEngine), cfg
}

// refTensor reads one float32 tensor of a reference safetensors file.
func refTensor(t *testing.T, path, name string) []float32 {
	t.Helper()
	f, err := hf.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v, _, err := f.Float32(name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// rowsOf packs equal-length token rows, one example per row, with the
// heads at every position.
func rowsOf(rows [][]int32) (Batch, []int32) {
	s := len(rows[0])
	b := Batch{B: len(rows), S: s}
	var idx []int32
	for r, row := range rows {
		for j, tok := range row {
			b.Tokens = append(b.Tokens, tok)
			b.Positions = append(b.Positions, int32(j))
			b.Segments = append(b.Segments, 1)
			idx = append(idx, int32(r*s+j))
		}
	}
	return b, idx
}

// maxDiff returns max |got - want| and max |want|.
func maxDiff(got, want []float32) (diff, scale float64) {
	for i, w := range want {
		diff = math.Max(diff, math.Abs(float64(got[i])-float64(w)))
		scale = math.Max(scale, math.Abs(float64(w)))
	}
	return diff, scale
}

func argmaxF32(v []float32) int32 {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return int32(best)
}

// TestGomlxArchHFReference: each family's tiny checkpoint (Llama with
// plain and Llama 3 scaled RoPE, Qwen2, Qwen3), loaded through policy/hf,
// gives transformers' float32 logits on its reference rows, and through
// the decoder transformers' greedy continuation.
func TestGomlxArchHFReference(t *testing.T) {
	dir := hfRefDir(t)
	for _, name := range []string{"llama", "llama3", "qwen2", "qwen3"} {
		t.Run(name, func(t *testing.T) {
			ref := readHFRef(t, filepath.Join(dir, "ref", name+".json"))
			e, cfg := hfEngine(t, filepath.Join(dir, ref.Checkpoint), "", ref)
			want := refTensor(t, filepath.Join(dir, "ref", name+".safetensors"), "logits")
			b, idx := rowsOf(ref.InputIDs)
			got, _, err := e.Logits(b, idx)
			if err != nil {
				t.Fatal(err)
			}
			diff, scale := maxDiff(got, want)
			t.Logf("logits max |diff| %.3g (max |logit| %.3g)", diff, scale)
			if diff > 2e-5*math.Max(1, scale) {
				t.Errorf("logits differ from transformers' by %.3g (max |logit| %.3g)", diff, scale)
			}
			d, err := e.NewDecoder(1)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			logits, err := d.Prefill([][]int32{ref.Prompt})
			if err != nil {
				t.Fatal(err)
			}
			for i, w := range ref.Greedy {
				next := argmaxF32(logits[:cfg.Vocab])
				if next != w {
					t.Fatalf("greedy token %d is %d, transformers' %d", i, next, w)
				}
				if logits, err = d.Extend([][]int32{{next}}); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestGomlxArchHFReferenceLoRA: PEFT's adapters on the Qwen2 and Qwen3
// checkpoints (every target, B non-zero) give PEFT's adapted logits, SFT
// loss on the response tokens and every adapter gradient (A and B, in
// PEFT's layout).
func TestGomlxArchHFReferenceLoRA(t *testing.T) {
	dir := hfRefDir(t)
	for _, name := range []string{"qwen2", "qwen3"} {
		t.Run(name, func(t *testing.T) {
			ref := readHFRef(t, filepath.Join(dir, "lora", name, "ref.json"))
			base := readHFRef(t, filepath.Join(dir, "ref", name+".json"))
			ref.InvFreq = base.InvFreq
			e, cfg := hfEngine(t, filepath.Join(dir, ref.Checkpoint), filepath.Join(dir, ref.Adapter), ref)
			refPath := filepath.Join(dir, "lora", name, "ref.safetensors")
			b, idx := rowsOf(ref.InputIDs)
			got, _, err := e.Logits(b, idx)
			if err != nil {
				t.Fatal(err)
			}
			diff, scale := maxDiff(got, refTensor(t, refPath, "logits_adapted"))
			t.Logf("adapted logits max |diff| %.3g (max %.3g)", diff, scale)
			if diff > 2e-5*math.Max(1, scale) {
				t.Errorf("adapted logits differ from PEFT's by %.3g (max %.3g)", diff, scale)
			}
			// Position i predicts token i+1, weighted by its response mask.
			idx, targets, weights := []int32(nil), []int32(nil), []float32(nil)
			for r, row := range ref.InputIDs {
				for i := 0; i+1 < len(row); i++ {
					idx, targets = append(idx, int32(r*len(row)+i)), append(targets, row[i+1])
					weights = append(weights, float32(ref.Mask[r][i+1]))
				}
			}
			loss, grads, err := e.Gradients(b, idx, sftLoss(targets, weights, cfg.Vocab))
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(loss-ref.Loss) > 1e-5*ref.Loss {
				t.Errorf("loss %.8g, PEFT's %.8g", loss, ref.Loss)
			}
			checked, worst := 0, 0.0
			for _, g := range grads {
				hfn, _ := hfName(g.Name)
				if hfn == "" {
					continue // the value head
				}
				want := refTensor(t, refPath, "grad."+hfn)
				got := transposed(g.F32, g.Shape[0], g.Shape[1]) // native [in, r] / [r, out] to PEFT's [r, in] / [out, r]
				diff, scale := maxDiff(got, want)
				worst = math.Max(worst, diff/scale)
				if diff > 1e-4*scale {
					t.Errorf("%s: gradient differs from PEFT's by %.3g (max %.3g)", g.Name, diff, scale)
				}
				checked++
			}
			t.Logf("loss %.8g (PEFT %.8g); worst relative adapter gradient difference %.2g", loss, ref.Loss, worst)
			if checked != 2*7*cfg.Layers {
				t.Errorf("checked %d adapter gradients, want %d", checked, 2*7*cfg.Layers)
			}
		})
	}
}
