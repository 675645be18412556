package gguf

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlerl/mlerl/policy/hf"
)

// tinyRef is what scripts/gguf_reference.py recorded of a tiny model:
// transformers' logits (NAME.safetensors) for IDs, its greedy
// continuation and the original tokenizer's ids of test strings.
type tinyRef struct {
	FileSHA256 string `json:"file_sha256"`
	IDs        []int
	Greedy     []int
	Tokenize   []struct {
		Text string
		IDs  []int
	}
	logits [][]float32
}

var tinyModels = []string{"llama", "llama5", "llamak", "llama3", "qwen2", "qwen3"}

func readTinyRef(t *testing.T, name string) *tinyRef {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	r := &tinyRef{}
	if err := json.Unmarshal(raw, r); err != nil {
		t.Fatal(err)
	}
	st, err := hf.OpenFile(filepath.Join("testdata", name+".safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	v, info, err := st.Float32("logits")
	if err != nil {
		t.Fatal(err)
	}
	for i := range info.Shape[0] {
		r.logits = append(r.logits, v[i*info.Shape[1]:(i+1)*info.Shape[1]])
	}
	return r
}

// TestTinyModelsMatchTransformers loads each tiny GGUF file as a
// checkpoint and compares policy/hf's reference forward pass with the
// logits transformers computes from the same file (from_pretrained with
// gguf_file), and the synthesised tokenizer with the original one.
func TestTinyModelsMatchTransformers(t *testing.T) {
	for _, name := range tinyModels {
		t.Run(name, func(t *testing.T) {
			ref := readTinyRef(t, name)
			ck, err := Load(filepath.Join("testdata", name+".gguf"))
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			got, err := hf.ReferenceLogits(ck, ref.IDs)
			if err != nil {
				t.Fatal(err)
			}
			worst, scale := 0.0, 0.0
			for p := range got {
				for i, x := range got[p] {
					worst = max(worst, math.Abs(x-float64(ref.logits[p][i])))
					scale = max(scale, math.Abs(x))
				}
			}
			// transformers computes in float32, the reference in float64.
			if worst > 1e-4*max(1, scale) {
				t.Errorf("logits differ from transformers' by up to %.3g (scale %.3g)", worst, scale)
			}
			t.Logf("%s: max |logit - transformers'| %.2g (scale %.2g)", name, worst, scale)
			for _, s := range ref.Tokenize {
				if ids := ck.Tokenizer.Encode(s.Text); !slices.Equal(ids, s.IDs) {
					t.Errorf("encode %q = %v, the original tokenizer %v", s.Text, ids, s.IDs)
				}
				if dec := ck.Tokenizer.Decode(s.IDs); dec != s.Text {
					t.Errorf("decode of %q's ids = %q", s.Text, dec)
				}
			}
			// Greedy decoding from the reference, every id allowed as in
			// transformers' generate.
			seq := slices.Clone(ref.IDs)
			for range ref.Greedy {
				l, err := hf.ReferenceLogits(ck, seq)
				if err != nil {
					t.Fatal(err)
				}
				last := l[len(l)-1]
				best := 0
				for i := range last {
					if last[i] > last[best] {
						best = i
					}
				}
				seq = append(seq, best)
			}
			if g := seq[len(ref.IDs):]; !slices.Equal(g, ref.Greedy) {
				t.Errorf("greedy continuation %v, transformers' %v", g, ref.Greedy)
			}
		})
	}
}
