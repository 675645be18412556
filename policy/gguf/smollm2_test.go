package gguf

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/mlerl/mlerl/policy/hf"
)

// smolRef is testdata/smollm2.json, made by `scripts/gguf_reference.py
// smollm2 FILE` from the real SmolLM2-135M-Instruct Q4_1 file.
type smolRef struct {
	FileSHA256 string `json:"file_sha256"`
	Size       int64
	Tensors    map[string]struct {
		Type   string
		Shape  []int
		SHA256 string
		First  []float64
		Sum    float64
	}
	Rendered  string
	IDs       []int
	Positions []struct {
		LogSumExp float64   `json:"logsumexp"`
		TopIDs    []int     `json:"top_ids"`
		TopLogits []float64 `json:"top_logits"`
	}
	Greedy []int
}

// smolFile is the real file when MLERL_SMOLLM2_GGUF names it.
func smolFile(t *testing.T) (string, *smolRef) {
	path := os.Getenv("MLERL_SMOLLM2_GGUF")
	if path == "" {
		t.Skip("MLERL_SMOLLM2_GGUF not set (make real-model fetches SmolLM2-135M-Instruct.Q4_1.gguf)")
	}
	raw, err := os.ReadFile("testdata/smollm2.json")
	if err != nil {
		t.Fatal(err)
	}
	ref := &smolRef{}
	if err := json.Unmarshal(raw, ref); err != nil {
		t.Fatal(err)
	}
	return path, ref
}

// TestSmolLM2 checks the real SmolLM2-135M-Instruct file (opt-in): the
// header and tensor table, a sample of tensors against gguf's
// dequantization, the logits of a chat prompt against transformers
// loading the same file (its top ten ids per position and log-sum-exp),
// the greedy continuation against transformers' generate(do_sample=False),
// and the tokenizer and chat template against transformers' rendering.
func TestSmolLM2(t *testing.T) {
	path, ref := smolFile(t)
	start := time.Now()
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := Convert(f)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("header, %d metadata keys and %d tensors read and checked in %v", len(f.Keys), len(f.Tensors), time.Since(start))

	t.Run("weights", func(t *testing.T) {
		for name, w := range ref.Tensors {
			v, info, err := f.Float32(name)
			if err != nil {
				t.Fatal(err)
			}
			if info.Type.String() != w.Type {
				t.Errorf("%s: type %s, gguf says %s", name, info.Type, w.Type)
			}
			if got := f32SHA(v); got != w.SHA256 {
				t.Errorf("%s: dequantized sha256 %s, gguf's %s (first %v, want %v)", name, got, w.SHA256, v[:4], w.First[:4])
			}
		}
	})

	a, err := hf.ParseConfig(path+" (as config.json)", c.Files["config.json"])
	if err != nil {
		t.Fatal(err)
	}
	if a.NumLayers != 30 || a.HiddenSize != 576 || a.NumHeads != 9 || a.NumKVHeads != 3 || a.VocabSize != 49152 || !a.TieWordEmbeddings {
		t.Fatalf("arch %+v: want SmolLM2-135M's 30 layers, 576 wide, 9 heads, 3 KV heads, 49152 ids, tied", a)
	}
	start = time.Now()
	r, err := hf.NewReference(a, c.Weights, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("reference model built (float64) in %v", time.Since(start))

	var logits [][]float64
	t.Run("logits", func(t *testing.T) {
		var err error
		logits, err = r.Logits(ref.IDs)
		if err != nil {
			t.Fatal(err)
		}
		worst := 0.0
		for p, want := range ref.Positions {
			row := logits[p]
			worst = max(worst, math.Abs(logSumExp(row)-want.LogSumExp))
			for k, id := range want.TopIDs {
				worst = max(worst, math.Abs(row[id]-want.TopLogits[k]))
			}
			// The top ids in order, where transformers' gaps are wider
			// than the float32 noise.
			top := topIDs(row, len(want.TopIDs))
			for k := range top {
				if top[k] != want.TopIDs[k] && (k+1 >= len(want.TopLogits) || want.TopLogits[k]-want.TopLogits[k+1] > 1e-3) {
					t.Errorf("position %d: top ids %v, transformers' %v", p, top, want.TopIDs)
					break
				}
			}
		}
		// transformers runs in float32 over 30 layers; logits are ~25.
		if worst > 2e-3 {
			t.Errorf("logits differ from transformers' by up to %.3g", worst)
		}
		t.Logf("max |logit - transformers'| over %d positions' top ten and log-sum-exp: %.2g", len(ref.Positions), worst)
	})

	t.Run("greedy", func(t *testing.T) {
		seq := slices.Clone(ref.IDs)
		for range ref.Greedy {
			l, err := r.Logits(seq)
			if err != nil {
				t.Fatal(err)
			}
			seq = append(seq, topIDs(l[len(l)-1], 1)[0])
		}
		if g := seq[len(ref.IDs):]; !slices.Equal(g, ref.Greedy) {
			t.Errorf("greedy continuation %v, transformers' %v", g, ref.Greedy)
		}
	})

	// The model written back as F16 and Q8_0 (from its dequantized
	// weights): the logits move by the types' rounding, the answer's
	// first token stays.
	t.Run("export", func(t *testing.T) {
		if logits == nil {
			t.Skip("no logits")
		}
		ck, err := hf.Assemble(path, c.Files, c.Weights)
		if err != nil {
			t.Skipf("the tokenizer is refused (%v): export needs it", err)
		}
		same := func(_ string, v []float32) ([]float32, error) { return v, nil }
		for _, typ := range []Type{F16, Q8_0} {
			out := filepath.Join(t.TempDir(), "smollm2.gguf")
			start := time.Now()
			if err := Export(out, ck, same, typ, "SmolLM2-135M-Instruct"); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			st, _ := os.Stat(out)
			g, err := Open(out)
			if err != nil {
				t.Fatal(err)
			}
			gc, err := Convert(g)
			if err != nil {
				t.Fatal(err)
			}
			ga, err := hf.ParseConfig(out, gc.Files["config.json"])
			if err != nil {
				t.Fatal(err)
			}
			gr, err := hf.NewReference(ga, gc.Weights, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := gr.Logits(ref.IDs)
			g.Close()
			if err != nil {
				t.Fatal(err)
			}
			// Per position: the largest logit change, the change of the
			// log-probability of the original's top token, and whether the
			// top token stays.
			worst, worstLP, same := 0.0, 0.0, 0
			for p := range got {
				for i := range got[p] {
					worst = max(worst, math.Abs(got[p][i]-logits[p][i]))
				}
				top := topIDs(logits[p], 1)[0]
				lp := func(row []float64) float64 { return row[top] - logSumExp(row) }
				worstLP = max(worstLP, math.Abs(lp(got[p])-lp(logits[p])))
				if topIDs(got[p], 1)[0] == top {
					same++
				}
			}
			if topIDs(got[len(got)-1], 1)[0] != ref.Greedy[0] {
				t.Errorf("%s: the answer's first token is %d, want %d", typ, topIDs(got[len(got)-1], 1)[0], ref.Greedy[0])
			}
			// F16 holds the dequantized weights to 11 bits; Q8_0 to
			// 1/254 of each block's largest value (8 times finer than the
			// file's own Q4_1).
			tol := map[Type]float64{F16: 0.05, Q8_0: 0.5}[typ]
			if worstLP > tol {
				t.Errorf("%s: the top token's log-probability moved by up to %.3g, over %g", typ, worstLP, tol)
			}
			t.Logf("%s: written in %v, %.1f MB; against the Q4_1 file over %d positions: logits within %.3g, the top token's log-probability within %.3g, the same top token at %d",
				typ, took.Round(time.Millisecond), float64(st.Size())/1e6, len(got), worst, worstLP, same)
		}
	})

	t.Run("tokenizer", func(t *testing.T) {
		ck, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		defer ck.Close()
		ids, err := ck.EncodeChat([]hf.Message{{Role: "user", Content: "What is the capital of France?"}}, true)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids, ref.IDs) {
			t.Errorf("chat-rendered prompt ids %v, transformers' %v", ids, ref.IDs)
		}
		if s, _ := ck.Chat.Render([]hf.Message{{Role: "user", Content: "What is the capital of France?"}}, true); s != ref.Rendered {
			t.Errorf("rendered %q, transformers' %q", s, ref.Rendered)
		}
		if got := ck.Tokenizer.Decode(ref.Greedy); got != "The capital of France is Paris.<|im_end|>" {
			t.Errorf("greedy decodes to %q", got)
		}
	})
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("Go heap in use %d MiB (peak RSS is the process's: see the report)", ms.HeapInuse>>20)
}

func logSumExp(row []float64) float64 {
	m := slices.Max(row)
	s := 0.0
	for _, x := range row {
		s += math.Exp(x - m)
	}
	return m + math.Log(s)
}

// topIDs are the k ids of the largest values, largest first.
func topIDs(row []float64, k int) []int {
	ids := make([]int, len(row))
	for i := range ids {
		ids[i] = i
	}
	sort.SliceStable(ids, func(i, j int) bool { return row[ids[i]] > row[ids[j]] })
	return ids[:k]
}
