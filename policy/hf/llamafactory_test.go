package hf

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// llamaFactoryAdapter is an adapter LLaMA-Factory 0.9.5 (PEFT 0.18.1)
// wrote, its two files as written: `llamafactory-cli train` with
// finetuning_type lora, lora_target all, lora_rank 4, lora_alpha 8, three
// steps on the tiny qwen2 checkpoint with mlerl's ShareGPT export (make
// interop's TestLlamaFactoryTrainsLoRA, which also checks its logits
// against PEFT's). Its config differs from PEFT 0.21's own: fewer keys,
// target_modules unsorted, base_model_name_or_path the absolute path of
// the machine that trained it.
const llamaFactoryAdapter = "testdata/lora/llamafactory-qwen2"

// TestReadLlamaFactoryAdapter proves that an adapter as LLaMA-Factory
// writes it is read as it is (what `mlerl evaluate --adapter` and `train
// --adapter` open), and that the options of LLaMA-Factory that change
// what the adapter computes, and that mlerl does not implement, are
// refused by name rather than dropped.
func TestReadLlamaFactoryAdapter(t *testing.T) {
	c := loadCkpt(t, "testdata/ckpt/qwen2")
	ad, err := ReadAdapter(llamaFactoryAdapter, c.Arch)
	if err != nil {
		t.Fatalf("ReadAdapter: %v", err)
	}
	if ad.R != 4 || ad.Alpha != 8 || !slices.Equal(ad.Targets, []string{"down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"}) {
		t.Errorf("got r %d alpha %g targets %v, want r 4 alpha 8 and every Linear of the layer (lora_target all)", ad.R, ad.Alpha, ad.Targets)
	}
	if got, want := len(ad.Modules), 7*c.Arch.NumLayers; got != want {
		t.Errorf("got %d modules, want %d", got, want)
	}
	trained := false
	for _, m := range ad.Modules {
		trained = trained || slices.ContainsFunc(m.B, func(b float32) bool { return b != 0 })
	}
	if !trained {
		t.Error("every lora_B read is zero: the trained values were lost")
	}

	// LLaMA-Factory's options that write a config mlerl cannot apply.
	tests := []struct {
		name string
		key  string
		val  any
	}{
		{"additional_target (new tokens' embeddings)", "modules_to_save", []string{"embed_tokens", "lm_head"}},
		{"use_rslora", "use_rslora", true},
		{"use_dora", "use_dora", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cfg map[string]any
			readJSON(t, filepath.Join(llamaFactoryAdapter, AdapterConfigFile), &cfg)
			cfg[tt.key] = tt.val
			dir := t.TempDir()
			b, _ := json.Marshal(cfg)
			w, err := os.ReadFile(filepath.Join(llamaFactoryAdapter, AdapterWeightsFile))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, AdapterConfigFile), b, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, AdapterWeightsFile), w, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = ReadAdapter(dir, c.Arch)
			if want := `field "` + tt.key + `"`; err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("got %v, want an error naming %s", err, want)
			}
		})
	}
}
