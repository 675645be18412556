package hf

import (
	"encoding/json"
	"math"
	"os"
	"slices"
	"testing"
)

// refMeta is testdata/ref/NAME.json, written by scripts/hf_reference.py.
type refMeta struct {
	Checkpoint  string  `json:"checkpoint"`
	InputIDs    [][]int `json:"input_ids"`
	GreedyFrom  []int   `json:"greedy_prompt"`
	Greedy      []int   `json:"greedy"`
	MinTop2Gap  float64 `json:"greedy_min_top2_gap"`
	BF16MaxDiff float64 `json:"bf16_max_abs_diff_vs_f32"`
}

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (regenerate with `.deps/pyref/bin/python scripts/hf_reference.py`)", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// refTensor reads one float32 tensor of a reference safetensors file.
func refTensor(t testing.TB, path, name string) ([]float32, []int) {
	t.Helper()
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v, info, err := f.Float32(name)
	if err != nil {
		t.Fatal(err)
	}
	return v, info.Shape
}

func loadCkpt(t testing.TB, dir string) *Checkpoint {
	t.Helper()
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// logitsDiff compares got with want (row b of a [B, T, V] reference) and
// returns the largest |got - want| and that divided by the largest |want|
// of the same position ("relative" below).
func logitsDiff(got [][]float64, want []float32, b, T, V int) (abs, rel float64) {
	for t := range T {
		row := want[(b*T+t)*V : (b*T+t+1)*V]
		scale := 0.0
		for _, w := range row {
			scale = math.Max(scale, math.Abs(float64(w)))
		}
		for v, w := range row {
			d := math.Abs(got[t][v] - float64(w))
			abs = math.Max(abs, d)
			rel = math.Max(rel, d/scale)
		}
	}
	return abs, rel
}

// TestReferenceMatchesTransformers: the float64 reference forward gives
// transformers' float32 logits within 1e-4 relative, and the same greedy
// continuation, on all four tiny checkpoints and the sharded copy.
func TestReferenceMatchesTransformers(t *testing.T) {
	for _, name := range []string{"llama", "llama3", "qwen2", "qwen3", "qwen2-sharded"} {
		t.Run(name, func(t *testing.T) {
			refName := name
			if name == "qwen2-sharded" {
				refName = "qwen2"
			}
			var meta refMeta
			readJSON(t, "testdata/ref/"+refName+".json", &meta)
			want, shape := refTensor(t, "testdata/ref/"+refName+".safetensors", "logits")
			c := loadCkpt(t, "testdata/ckpt/"+name)
			r, err := NewReference(c.Arch, c.Weights, nil)
			if err != nil {
				t.Fatal(err)
			}
			B, T, V := shape[0], shape[1], shape[2]
			if V != c.Arch.VocabSize || B != len(meta.InputIDs) {
				t.Fatalf("reference shape %v, checkpoint vocab %d, %d sequences", shape, c.Arch.VocabSize, len(meta.InputIDs))
			}
			for b, ids := range meta.InputIDs {
				got, err := r.Logits(ids)
				if err != nil {
					t.Fatal(err)
				}
				abs, rel := logitsDiff(got, want, b, T, V)
				t.Logf("sequence %d: max |diff| %.3g, relative %.3g", b, abs, rel)
				if rel > 1e-4 {
					t.Errorf("sequence %d: logits differ from transformers' by %.3g relative (abs %.3g), want <= 1e-4", b, rel, abs)
				}
			}
			got, err := r.Greedy(meta.GreedyFrom, len(meta.Greedy))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, meta.Greedy) {
				t.Errorf("greedy continuation got %v, want %v (transformers; smallest top-2 gap %.3g)", got, meta.Greedy, meta.MinTop2Gap)
			}
		})
	}
}

// TestReferenceBF16 states the bf16 tolerance: transformers running the
// bf16 checkpoint in bf16 (every matmul and activation rounded to 8 bits
// of mantissa) against the float64 reference on the same bf16 weights.
// The bound, 5% of the position's largest logit, is about twice what is
// measured (the test logs it); the float32 run of the same weights agrees
// to 1e-4 (TestReferenceMatchesTransformers/llama3).
func TestReferenceBF16(t *testing.T) {
	var meta refMeta
	readJSON(t, "testdata/ref/llama3.json", &meta)
	want, shape := refTensor(t, "testdata/ref/llama3.safetensors", "logits_bf16")
	c := loadCkpt(t, "testdata/ckpt/llama3")
	if info, _ := c.Weights.Info("model.embed_tokens.weight"); info.DType != BF16 {
		t.Fatalf("llama3's weights are %s, want BF16", info.DType)
	}
	r, err := NewReference(c.Arch, c.Weights, nil)
	if err != nil {
		t.Fatal(err)
	}
	for b, ids := range meta.InputIDs {
		got, _ := r.Logits(ids)
		abs, rel := logitsDiff(got, want, b, shape[1], shape[2])
		t.Logf("bf16 sequence %d: max |diff| %.3g, relative %.3g (transformers bf16 vs f32: %.3g abs)", b, abs, rel, meta.BF16MaxDiff)
		if rel > 0.05 {
			t.Errorf("sequence %d: transformers' bf16 logits differ from the reference by %.3g relative, want <= 0.05", b, rel)
		}
	}
}

func TestReferenceRejectsBadTokens(t *testing.T) {
	c := loadCkpt(t, "testdata/ckpt/qwen2")
	if _, err := ReferenceLogits(c, []int{1, c.Arch.VocabSize}); err == nil {
		t.Error("a token id past the vocabulary: got no error")
	}
}
