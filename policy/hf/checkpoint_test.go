package hf

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// copyDir copies a testdata checkpoint into a fresh folder.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// listing is every file's path and size under dir.
func listing(t *testing.T, dir string) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			info, _ := d.Info()
			out = append(out, fmt.Sprintf("%s %d", p, info.Size()))
		}
		return nil
	})
	sort.Strings(out)
	return out
}

func editJSON(t *testing.T, path string, edit func(m map[string]any)) {
	t.Helper()
	var m map[string]any
	readJSON(t, path, &m)
	edit(m)
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// patchHeader rewrites the safetensors header of path with edit.
func patchHeader(t *testing.T, path string, edit func(h map[string]map[string]any)) {
	t.Helper()
	b, _ := os.ReadFile(path)
	n := binary.LittleEndian.Uint64(b)
	var h map[string]map[string]any
	if err := json.Unmarshal(b[8:8+n], &h); err != nil {
		t.Fatal(err)
	}
	edit(h)
	hb, _ := json.Marshal(h)
	for len(hb)%8 != 0 {
		hb = append(hb, ' ')
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(hb)))
	out = append(append(out, hb...), b[8+n:]...)
	os.WriteFile(path, out, 0o644)
}

// TestLoadBadInput: each broken folder is refused in one line naming the
// file or field, and Load writes nothing.
func TestLoadBadInput(t *testing.T) {
	st := func(dir string) string { return filepath.Join(dir, "model.safetensors") }
	tests := []struct {
		name    string
		src     string
		corrupt func(t *testing.T, dir string)
		want    string
	}{
		{"truncated safetensors", "qwen2", func(t *testing.T, d string) {
			b, _ := os.ReadFile(st(d))
			os.WriteFile(st(d), b[:len(b)-100], 0o644)
		}, "past the 156700-byte data section: truncated"},
		{"header longer than file", "qwen2", func(t *testing.T, d string) {
			b, _ := os.ReadFile(st(d))
			binary.LittleEndian.PutUint64(b, uint64(len(b)))
			os.WriteFile(st(d), b, 0o644)
		}, "runs past the end of the"},
		{"overlapping offsets", "qwen2", func(t *testing.T, d string) {
			patchHeader(t, st(d), func(h map[string]map[string]any) {
				a := h["model.norm.weight"]["data_offsets"].([]any)
				e := h["model.layers.1.input_layernorm.weight"]
				e["data_offsets"] = []any{a[0], a[1]}
			})
		}, "overlap"},
		{"offsets past end", "qwen2", func(t *testing.T, d string) {
			patchHeader(t, st(d), func(h map[string]map[string]any) {
				h["model.norm.weight"]["data_offsets"] = []any{1 << 30, 1<<30 + 128}
			})
		}, "past the"},
		{"dtype i8", "qwen2", func(t *testing.T, d string) {
			patchHeader(t, st(d), func(h map[string]map[string]any) {
				e := h["model.norm.weight"]
				e["dtype"], e["shape"] = "I8", []any{128}
			})
		}, `tensor "model.norm.weight" has dtype "I8"`},
		{"dtype f64", "qwen2", func(t *testing.T, d string) {
			patchHeader(t, st(d), func(h map[string]map[string]any) {
				e := h["model.norm.weight"]
				e["dtype"], e["shape"] = "F64", []any{16}
			})
		}, `has dtype "F64"`},
		{"mistral with sliding window", "llama", func(t *testing.T, d string) {
			editJSON(t, filepath.Join(d, "config.json"), func(m map[string]any) {
				m["architectures"], m["model_type"], m["sliding_window"] = []string{"MistralForCausalLM"}, "mistral", 4096
			})
		}, `config.json: field "architectures": is "MistralForCausalLM"`},
		{"gpt2", "llama", func(t *testing.T, d string) {
			os.WriteFile(filepath.Join(d, "config.json"), []byte(`{"architectures":["GPT2LMHeadModel"],"model_type":"gpt2","n_layer":2}`), 0o644)
		}, `is "GPT2LMHeadModel"`},
		{"missing config", "llama", func(t *testing.T, d string) { os.Remove(filepath.Join(d, "config.json")) }, "config.json is missing"},
		{"missing weights", "llama", func(t *testing.T, d string) { os.Remove(st(d)) }, "neither model.safetensors nor model.safetensors.index.json"},
		{"missing tokenizer", "qwen3", func(t *testing.T, d string) { os.Remove(filepath.Join(d, "tokenizer.json")) }, "tokenizer.json is missing"},
		{"no chat template", "qwen2", func(t *testing.T, d string) {
			editJSON(t, filepath.Join(d, "tokenizer_config.json"), func(m map[string]any) { delete(m, "chat_template") })
		}, "tokenizer_config.json has no chat_template"},
		{"unknown chat template", "qwen2", func(t *testing.T, d string) {
			editJSON(t, filepath.Join(d, "tokenizer_config.json"), func(m map[string]any) {
				m["chat_template"] = "{% for m in messages %}<start_of_turn>{{ m['content'] }}{% endfor %}"
			})
		}, "tokenizer_config.json: the chat template is not one mlerl renders"},
		{"hidden size contradicts embedding", "qwen2", func(t *testing.T, d string) {
			editJSON(t, filepath.Join(d, "config.json"), func(m map[string]any) { m["hidden_size"] = 64 })
		}, "config.json says vocab_size 640 and hidden_size 64, but model.embed_tokens.weight has shape [640 32]"},
		{"fewer layers than the weights", "qwen2", func(t *testing.T, d string) {
			editJSON(t, filepath.Join(d, "config.json"), func(m map[string]any) { m["num_hidden_layers"] = 1 })
		}, "num_hidden_layers 1, but the weights hold layers 0..1"},
		{"more layers than the weights", "qwen2", func(t *testing.T, d string) {
			editJSON(t, filepath.Join(d, "config.json"), func(m map[string]any) { m["num_hidden_layers"] = 3 })
		}, "num_hidden_layers 3, but the weights hold layers 0..1"},
		{"untied without a head", "qwen2", func(t *testing.T, d string) {
			editJSON(t, filepath.Join(d, "config.json"), func(m map[string]any) { m["tie_word_embeddings"] = false })
		}, "tensor lm_head.weight is missing (and 0 more); config.json has tie_word_embeddings false"},
		{"tied with a head", "qwen3", func(t *testing.T, d string) {
			editJSON(t, filepath.Join(d, "config.json"), func(m map[string]any) { m["tie_word_embeddings"] = true })
		}, "lm_head.weight is present but config.json has tie_word_embeddings true"},
		{"qwen3 config on qwen2 weights", "qwen2", func(t *testing.T, d string) {
			editJSON(t, filepath.Join(d, "config.json"), func(m map[string]any) {
				m["architectures"], m["model_type"] = []string{"Qwen3ForCausalLM"}, "qwen3"
			})
		}, "is missing"},
		{"kv heads contradict k_proj", "qwen2", func(t *testing.T, d string) {
			editJSON(t, filepath.Join(d, "config.json"), func(m map[string]any) { m["num_key_value_heads"] = 4 })
		}, "num_key_value_heads 4 x head_dim 8"},
		{"sharded index names a missing shard", "qwen2-sharded", func(t *testing.T, d string) {
			os.Remove(filepath.Join(d, "model-00002-of-00002.safetensors"))
		}, "names shard model-00002-of-00002.safetensors, which is missing"},
		{"sharded index misses a tensor", "qwen2-sharded", func(t *testing.T, d string) {
			editJSON(t, filepath.Join(d, "model.safetensors.index.json"), func(m map[string]any) {
				delete(m["weight_map"].(map[string]any), "model.norm.weight")
			})
		}, `holds tensor "model.norm.weight", which model.safetensors.index.json maps to ""`},
		{"sharded index path escape", "qwen2-sharded", func(t *testing.T, d string) {
			editJSON(t, filepath.Join(d, "model.safetensors.index.json"), func(m map[string]any) {
				m["weight_map"].(map[string]any)["model.norm.weight"] = "../x.safetensors"
			})
		}, "want a file name in the same folder"},
		{"tokenizer larger than vocab", "qwen2", func(t *testing.T, d string) {
			editJSON(t, filepath.Join(d, "config.json"), func(m map[string]any) { m["vocab_size"] = 600 })
		}, "config.json says vocab_size 600"},
		{"template and tokenizer disagree", "llama3", func(t *testing.T, d string) {
			editJSON(t, filepath.Join(d, "tokenizer_config.json"), func(m map[string]any) {
				m["chat_template"] = "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
			})
			// Renamed rather than removed: the added tokens after it keep
			// their ids (tokenizers numbers them in the order listed).
			editJSON(t, filepath.Join(d, "tokenizer.json"), func(m map[string]any) {
				for _, a := range m["added_tokens"].([]any) {
					if a.(map[string]any)["content"] == "<|im_end|>" {
						a.(map[string]any)["content"] = "<|im_end_renamed|>"
					}
				}
			})
		}, `the chat format writes "<|im_end|>", which is not an added token`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyDir(t, "testdata/ckpt/"+tt.src)
			tt.corrupt(t, dir)
			before := listing(t, filepath.Dir(dir))
			c, err := Load(dir)
			if err == nil {
				c.Close()
				t.Fatalf("Load got no error, want one containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load error got %q, want one containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
			if after := listing(t, filepath.Dir(dir)); strings.Join(after, "|") != strings.Join(before, "|") {
				t.Errorf("Load changed the folder: before %v, after %v", before, after)
			}
		})
	}
}

func TestWriteMergedRefusesAndLeavesNothing(t *testing.T) {
	c := loadCkpt(t, "testdata/ckpt/qwen2")
	q3 := loadCkpt(t, "testdata/ckpt/qwen3")
	ad, _ := NewAdapter(q3.Arch, 2, 4, []string{"q_proj"})
	parent := t.TempDir()
	dir := filepath.Join(parent, "merged")
	if err := WriteMerged(dir, c, ad, F32); err == nil {
		t.Fatal("an adapter for another base: got no error")
	}
	if err := WriteMerged(dir, c, nil, "F64"); err == nil {
		t.Fatal("dtype F64: got no error")
	}
	if ents, _ := os.ReadDir(parent); len(ents) != 0 {
		t.Errorf("failed writes left %v", ents)
	}
	// A re-save without an adapter is the same model.
	if err := WriteMerged(dir, c, nil, F32); err != nil {
		t.Fatal(err)
	}
	m := loadCkpt(t, dir)
	for _, n := range c.Weights.Names() {
		a, _, _ := c.Weights.(*Weights).Raw(n)
		b, _, _ := m.Weights.(*Weights).Raw(n)
		if string(a) != string(b) {
			t.Errorf("%s changed in an F32 re-save", n)
		}
	}
}
