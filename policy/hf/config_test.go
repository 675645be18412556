package hf

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
)

func TestParseConfigCheckpoints(t *testing.T) {
	tests := []struct {
		name                         string
		arch                         string
		heads, kv, headDim           int
		tied, qkvBias, qkNorm, scale bool
		theta                        float64
		dtype                        DType
	}{
		{"llama", "LlamaForCausalLM", 6, 2, 8, true, false, false, false, 100000, F32},
		{"llama3", "LlamaForCausalLM", 4, 1, 8, false, false, false, true, 500000, BF16},
		{"qwen2", "Qwen2ForCausalLM", 4, 2, 8, true, true, false, false, 1e6, F32},
		{"qwen3", "Qwen3ForCausalLM", 4, 2, 16, false, false, true, false, 1e6, F32},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := ReadConfig("testdata/ckpt/" + tt.name + "/config.json")
			if err != nil {
				t.Fatal(err)
			}
			got := []any{a.Architecture, a.NumHeads, a.NumKVHeads, a.HeadDim, a.TieWordEmbeddings, a.QKVBias, a.QKNorm, a.RopeScaling != nil, a.RopeTheta, a.DType}
			want := []any{tt.arch, tt.heads, tt.kv, tt.headDim, tt.tied, tt.qkvBias, tt.qkNorm, tt.scale, tt.theta, tt.dtype}
			for i := range got {
				if got[i] != want[i] {
					t.Errorf("field %d: got %v, want %v (all: got %v, want %v)", i, got[i], want[i], got, want)
					break
				}
			}
		})
	}
}

// hubLlama31 is the shape of Llama 3.1's config.json on the hub
// (transformers 4's layout: rope_theta and rope_scaling, torch_dtype).
const hubLlama31 = `{
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
  "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 128,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 8, "num_hidden_layers": 2, "num_key_value_heads": 2,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256}`

// hubQwen25 is the shape of Qwen2.5-0.5B-Instruct's config.json: sliding
// fields present but off.
const hubQwen25 = `{
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02,
  "intermediate_size": 128, "max_position_embeddings": 32768, "max_window_layers": 21,
  "model_type": "qwen2", "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936}`

func TestParseConfigHubLayouts(t *testing.T) {
	a, err := ParseConfig("config.json", []byte(hubLlama31))
	if err != nil {
		t.Fatal(err)
	}
	if a.RopeScaling == nil || a.RopeScaling.Factor != 8 || a.RopeScaling.OriginalMaxPositionEmbeddings != 8192 || a.RopeTheta != 500000 || a.DType != BF16 || len(a.EOSTokenIDs) != 3 || *a.BOSTokenID != 128000 {
		t.Errorf("Llama 3.1 layout read as %+v, scaling %+v", a, a.RopeScaling)
	}
	q, err := ParseConfig("config.json", []byte(hubQwen25))
	if err != nil {
		t.Fatal(err)
	}
	if !q.TieWordEmbeddings || !q.QKVBias || q.HeadDim != 16 || q.EOSTokenIDs[0] != 151645 {
		t.Errorf("Qwen2.5 layout read as %+v", q)
	}
}

func TestParseConfigRefusals(t *testing.T) {
	edit := func(base string, kv ...any) string {
		var m map[string]any
		json.Unmarshal([]byte(base), &m)
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(m, kv[i].(string))
				continue
			}
			m[kv[i].(string)] = kv[i+1]
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	tests := []struct {
		name, config, want string
	}{
		{"mistral", edit(hubLlama31, "architectures", []string{"MistralForCausalLM"}, "model_type", "mistral", "sliding_window", 4096), `field "architectures": is "MistralForCausalLM": mlerl runs LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM`},
		{"gpt2", `{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 768}`, `is "GPT2LMHeadModel"`},
		{"two architectures", edit(hubLlama31, "architectures", []string{"LlamaForCausalLM", "X"}), "want exactly one"},
		{"model_type mismatch", edit(hubLlama31, "model_type", "qwen2"), `field "model_type": is "qwen2" but architectures says LlamaForCausalLM`},
		{"gelu", edit(hubLlama31, "hidden_act", "gelu"), `field "hidden_act": is "gelu": only silu`},
		{"sliding window on", edit(hubQwen25, "use_sliding_window", true), `field "use_sliding_window": is true`},
		{"sliding layer", edit(hubQwen25, "layer_types", []string{"full_attention", "sliding_attention"}), `layer 1 is "sliding_attention"`},
		{"rope linear", edit(hubLlama31, "rope_scaling", map[string]any{"rope_type": "linear", "factor": 2.0}), `field "rope_scaling": rope_type is "linear"`},
		{"rope yarn v5", edit(hubLlama31, "rope_parameters", map[string]any{"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6}), `field "rope_parameters": rope_type is "yarn"`},
		{"llama3 scaling without factor", edit(hubLlama31, "rope_scaling", map[string]any{"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}), "factor is <nil>"},
		{"moe", edit(hubQwen25, "num_experts", 8), `field "num_experts": is 8`},
		{"quantized", edit(hubQwen25, "quantization_config", map[string]any{"quant_method": "gptq"}), `field "quantization_config"`},
		{"kv heads", edit(hubLlama31, "num_key_value_heads", 3), "want a positive divisor of num_attention_heads 8"},
		{"missing hidden", edit(hubLlama31, "hidden_size", nil), `field "hidden_size": is missing`},
		{"string layers", edit(hubLlama31, "num_hidden_layers", "2"), `field "num_hidden_layers": want an integer`},
		{"attention bias", edit(hubLlama31, "attention_bias", true), `field "attention_bias": is true`},
		{"dtype", edit(hubLlama31, "torch_dtype", "int8"), `field "torch_dtype": dtype "int8"`},
		{"odd head dim", edit(hubLlama31, "head_dim", 7), "want a positive even number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig("some/config.json", []byte(tt.config))
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "some/config.json") {
				t.Fatalf("ParseConfig error got %v, want one starting with the file and containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

// TestInvFreq compares RoPE's inverse frequencies with transformers'
// rotary_emb.inv_freq, which it computes in float32 (hence 1e-6).
func TestInvFreq(t *testing.T) {
	for _, name := range []string{"llama", "llama3", "qwen2", "qwen3"} {
		a, err := ReadConfig("testdata/ckpt/" + name + "/config.json")
		if err != nil {
			t.Fatal(err)
		}
		var ref struct {
			InvFreq []float64 `json:"inv_freq"`
		}
		b, _ := os.ReadFile("testdata/ref/" + name + ".json")
		json.Unmarshal(b, &ref)
		got := InvFreq(a)
		if len(got) != len(ref.InvFreq) {
			t.Fatalf("%s: %d frequencies, want %d", name, len(got), len(ref.InvFreq))
		}
		for i := range got {
			if math.Abs(got[i]-ref.InvFreq[i]) > 1e-6*ref.InvFreq[i] {
				t.Errorf("%s: inv_freq[%d] got %g, want %g", name, i, got[i], ref.InvFreq[i])
			}
		}
	}
	// llama3's tiny config puts frequencies in all three of Llama 3's bands
	// (kept, smoothed, divided by factor): check that it does.
	a, _ := ReadConfig("testdata/ckpt/llama3/config.json")
	plain := *a
	plain.RopeScaling = nil
	kept, divided, smooth := 0, 0, 0
	for i, f := range InvFreq(a) {
		switch p := InvFreq(&plain)[i]; {
		case f == p:
			kept++
		case math.Abs(f-p/a.RopeScaling.Factor) < 1e-15:
			divided++
		default:
			smooth++
		}
	}
	if kept == 0 || divided == 0 || smooth == 0 {
		t.Errorf("llama3 bands: %d kept, %d smoothed, %d divided; want each > 0", kept, smooth, divided)
	}
}
