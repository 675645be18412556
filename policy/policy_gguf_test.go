package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/policy/gguf"
	"github.com/mlerl/mlerl/policy/hf"
)

// The tiny GGUF files of policy/gguf/testdata (made by
// scripts/gguf_reference.py: llama.cpp's layout, mixed quantizations) as
// policies.

func ggufTestdata(name string) string { return filepath.Join("gguf", "testdata", name) }

// openTinyGGUF opens a tiny GGUF file as a policy with LoRA (rank 4) and a
// float32 base.
func openTinyGGUF(t testing.TB, path string) *Policy {
	t.Helper()
	tu := DefaultTuning()
	tu.LoRA.Rank, tu.LoRA.Alpha, tu.BaseStorage = 4, 8, MatmulFP32
	p, err := OpenGGUF(path, hfBudgets(), tu, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// transformersLogits reads the logits transformers computed from a tiny
// GGUF file, and the ids they are of.
func transformersLogits(t *testing.T, name string) ([]int32, [][]float32) {
	t.Helper()
	raw, err := os.ReadFile(ggufTestdata(name + ".json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct{ IDs []int32 }
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	st, err := hf.OpenFile(ggufTestdata(name + ".safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	v, info, err := st.Float32("logits")
	if err != nil {
		t.Fatal(err)
	}
	rows := make([][]float32, info.Shape[0])
	for i := range rows {
		rows[i] = v[i*info.Shape[1] : (i+1)*info.Shape[1]]
	}
	return ref.IDs, rows
}

// TestGGUFPolicyLogits: a policy opened from each tiny GGUF file runs on
// the native engine with transformers' logits from the same file
// (from_pretrained with gguf_file), and the reference's on the
// chat-rendered prompt; its Source records the file and its sha256.
func TestGGUFPolicyLogits(t *testing.T) {
	for _, name := range []string{"llama", "llama5", "llamak", "llama3", "qwen2", "qwen3"} {
		t.Run(name, func(t *testing.T) {
			path := ggufTestdata(name + ".gguf")
			p := openTinyGGUF(t, path)
			abs, _ := filepath.Abs(path)
			want, _ := fileSHA256(path)
			if p.Kind() != KindHF || p.Source.Kind != KindGGUF || p.Source.Base != abs || p.Source.FileSHA256 != want || p.Source.Spec() != "gguf:"+abs {
				t.Errorf("source %+v", *p.Source)
			}
			e, err := p.NewEngine(EngineNative, 7, nil)
			if err != nil {
				t.Fatal(err)
			}
			ids, tf := transformersLogits(t, name)
			b, idx := positionsBatch(ids)
			got, _, err := e.Logits(b, idx)
			if err != nil {
				t.Fatal(err)
			}
			v := len(got) / len(ids)
			worst := 0.0
			for i := range tf {
				for j, w := range tf[i] {
					worst = max(worst, math.Abs(float64(got[i*v+j]-w)))
				}
			}
			if worst > 1e-4 {
				t.Errorf("native engine's logits differ from transformers' by %.3g", worst)
			}
			t.Logf("%s: native engine vs transformers from the same GGUF: max |diff| %.2g", name, worst)
			ref, err := hf.NewReference(p.hf.Arch, p.hf.Weights, nil)
			if err != nil {
				t.Fatal(err)
			}
			prompt, err := p.EncodePrompt("Task: tiny (t). Metric: accuracy, higher is better.\nAnswer with Reflection, Thought, Action, Action Input.\n")
			if err != nil {
				t.Fatal(err)
			}
			checkLogits(t, name, e, ref, prompt)
		})
	}
}

// TestGGUFCheckpointRoundTrip trains the tiny llama GGUF one step, saves
// and reloads the checkpoint (policy.json naming the file by its sha256),
// and writes what it trained three ways: the PEFT adapter (for the
// GGUF's Hugging Face names), a merged Hugging Face folder (config.json,
// tokenizer.json and tokenizer_config.json made from the metadata) and a
// GGUF file, each giving the engine's logits. A changed file is refused
// when the checkpoint is reopened. With MLERL_POLICY_GGUF_ROUNDTRIP_DIR
// set, the adapter, merged folder, GGUF file and logits go there for
// `scripts/gguf_reference.py check-policy DIR`.
func TestGGUFCheckpointRoundTrip(t *testing.T) {
	ctx := context.Background()
	base := filepath.Join(t.TempDir(), "tiny.gguf")
	raw, err := os.ReadFile(ggufTestdata("llama.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(base, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	p := openTinyGGUF(t, base)
	e, err := p.NewEngine(EngineNative, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.SetOptim(OptimConfig{LR: 1e-2, Beta1: 0.9, Beta2: 0.99, ClipNorm: 1})
	toks, err := p.EncodePrompt("Task: tiny (t). Improve train.py.")
	if err != nil {
		t.Fatal(err)
	}
	b, idx := positionsBatch(toks)
	loss := func(logits, _, dLogits, _ []float32) float64 {
		v := len(logits) / len(idx)
		for i := range idx {
			dLogits[i*v+int(toks[(i+1)%len(toks)])] = -1
		}
		return 0
	}
	for range 2 { // the second step moves the A matrices too
		if _, _, err := e.TrainStep(b, idx, loss, 1e-2); err != nil {
			t.Fatal(err)
		}
	}
	st := store.NewLocal(t.TempDir())
	if err := SaveCheckpoint(ctx, st, "ck", 1, e, Checkpoint{Config: map[string]string{"k": "v"}, Policy: p, State: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	pj, err := store.ReadAll(ctx, st, "ck/"+StepFolder(1)+"/policy.json")
	if err != nil || !strings.Contains(string(pj), `"kind": "gguf"`) || !strings.Contains(string(pj), p.Source.FileSHA256) {
		t.Errorf("policy.json: %s (%v)", pj, err)
	}
	ck, err := LoadCheckpoint(ctx, st, "ck/"+StepFolder(1), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	q, err := ck.OpenPolicy("")
	if err != nil {
		t.Fatal(err)
	}
	if *q.Source != *p.Source {
		t.Errorf("reopened source:\ngot  %+v\nwant %+v", *q.Source, *p.Source)
	}
	e2, resumed, err := ck.Engine(q, EngineNative, true)
	if err != nil || !resumed {
		t.Fatalf("engine: resumed %v, %v", resumed, err)
	}
	want, _, _ := e.Logits(b, idx)
	got, _, _ := e2.Logits(b, idx)
	q.Close()
	if !slices.Equal(got, want) {
		t.Errorf("the reloaded engine's logits differ from the saved one's")
	}

	dir := os.Getenv("MLERL_POLICY_GGUF_ROUNDTRIP_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	adDir := filepath.Join(st.URI(""), "ck", StepFolder(1), AdapterFolder)
	ad, err := hf.ReadAdapter(adDir, p.hf.Arch)
	if err != nil {
		t.Fatal(err)
	}
	if ad.BaseModel != p.Source.Base {
		t.Errorf("adapter base_model_name_or_path %q, want the GGUF file %q", ad.BaseModel, p.Source.Base)
	}
	ref, err := hf.NewReference(p.hf.Arch, p.hf.Weights, ad)
	if err != nil {
		t.Fatal(err)
	}
	checkLogits(t, "the checkpoint's PEFT adapter on the GGUF base", e, ref, toks)
	if err := os.CopyFS(filepath.Join(dir, "adapter"), os.DirFS(adDir)); err != nil {
		t.Fatal(err)
	}
	ws, err := TrainableWeights(e)
	if err != nil {
		t.Fatal(err)
	}
	merged := filepath.Join(dir, "merged")
	if err := p.WriteMerged(merged, ws); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"} {
		if _, err := os.Stat(filepath.Join(merged, f)); err != nil {
			t.Errorf("merged folder: %v", err)
		}
	}
	mc, err := hf.Load(merged)
	if err != nil {
		t.Fatal(err)
	}
	if mc.Chat.Kind != hf.ChatML || !strings.Contains(mc.Chat.DefaultSystem, "SmolLM") {
		t.Errorf("merged folder's chat format %+v", mc.Chat)
	}
	mref, err := hf.NewReference(mc.Arch, mc.Weights, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkLogits(t, "the merged folder", e, mref, toks)
	mc.Close()
	for _, typ := range []gguf.Type{gguf.F32, gguf.Q8_0} {
		out := filepath.Join(dir, "merged-"+strings.ToLower(typ.String())+".gguf")
		if err := p.WriteGGUF(out, ws, typ); err != nil {
			t.Fatal(err)
		}
		gc, err := gguf.Load(out)
		if err != nil {
			t.Fatal(err)
		}
		gref, err := hf.NewReference(gc.Arch, gc.Weights, nil)
		if err != nil {
			t.Fatal(err)
		}
		if typ == gguf.F32 {
			checkLogits(t, "the merged GGUF file", e, gref, toks)
		} else {
			ids := make([]int, len(toks))
			for i, id := range toks {
				ids[i] = int(id)
			}
			lq, _ := gref.Logits(ids)
			v := len(want) / len(toks)
			worst, scale := 0.0, 0.0
			for i := range lq {
				for j := range lq[i] {
					worst = max(worst, math.Abs(lq[i][j]-float64(want[i*v+j])))
					scale = max(scale, math.Abs(float64(want[i*v+j])))
				}
			}
			// Q8_0 rounds each weight to within half of its block's
			// max/127: a few percent of the logits' scale on this random
			// model (whose Q4 weights are not on Q8_0's grid).
			if worst > 0.05*scale {
				t.Errorf("the Q8_0 GGUF's logits differ from the engine's by %.3g (scale %.3g)", worst, scale)
			}
			t.Logf("Q8_0 export: max |logit diff| %.3g (scale %.3g)", worst, scale)
		}
		gc.Close()
	}
	if err := p.WriteGGUF(filepath.Join(dir, "merged-f32.gguf"), ws, gguf.F16); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("writing over an existing file: %v", err)
	}
	logits := make([][]float64, len(toks))
	ids := make([]int, len(toks))
	v := len(want) / len(toks)
	for i := range toks {
		ids[i] = int(toks[i])
		for _, l := range want[i*v : (i+1)*v] {
			logits[i] = append(logits[i], float64(l))
		}
	}
	b2, _ := json.Marshal(map[string]any{"base": p.Source.Base, "input_ids": ids, "logits": logits})
	if err := os.WriteFile(filepath.Join(dir, "go_logits.json"), b2, 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("MLERL_POLICY_GGUF_ROUNDTRIP_DIR") != "" {
		if err := os.WriteFile(filepath.Join(dir, "base.gguf"), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The base changed after training: reopening the checkpoint refuses.
	if err := os.WriteFile(base, append(raw, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ck.OpenPolicy(""); err == nil || !strings.Contains(err.Error(), "has changed since the checkpoint was trained") {
		t.Errorf("a changed GGUF base: %v", err)
	}
}

// TestParseSpecGGUF: gguf:FILE, and its refusals.
func TestParseSpecGGUF(t *testing.T) {
	kind, path, err := ParseSpec("gguf:/m/SmolLM2.gguf")
	if err != nil || kind != KindGGUF || path != "/m/SmolLM2.gguf" || !Pretrained("gguf:/m/SmolLM2.gguf") {
		t.Errorf("gguf:/m/SmolLM2.gguf: %s %s %v", kind, path, err)
	}
	if _, _, err := ParseSpec("gguf:"); err == nil || !strings.Contains(err.Error(), "gguf:FILE") {
		t.Errorf("gguf: %v", err)
	}
	if _, _, err := ParseSpec("ggml:x"); err == nil || !strings.Contains(err.Error(), "gguf:FILE") {
		t.Errorf("ggml:x: %v", err)
	}
	for _, bad := range []string{"gguf:" + ggufTestdata("missing.gguf"), "gguf:" + ggufTestdata("")} {
		if _, err := OpenSpec(bad, hfBudgets(), DefaultTuning(), ""); err == nil || !strings.HasPrefix(err.Error(), "policy gguf:") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// TestGGUFSplitPolicy: a split model (llama.cpp's gguf-split, opened by
// its first shard) is the whole file's policy: logits equal bit for bit;
// its Source hashes every shard, so a checkpoint's base whose later
// shard changed is refused when reopened.
func TestGGUFSplitPolicy(t *testing.T) {
	dir := t.TempDir()
	var shards []string
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("llama-%05d-of-00003.gguf", i)
		b, err := os.ReadFile(ggufTestdata(filepath.Join("split", name)))
		if err != nil {
			t.Fatal(err)
		}
		shards = append(shards, filepath.Join(dir, name))
		if err := os.WriteFile(shards[i-1], b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	split, whole := openTinyGGUF(t, shards[0]), openTinyGGUF(t, ggufTestdata("llama.gguf"))
	want, err := filesSHA256(shards)
	if err != nil {
		t.Fatal(err)
	}
	if split.Source.Base != shards[0] || split.Source.FileSHA256 != want {
		t.Errorf("source %+v, want the first shard and the shards' sha256 %s", *split.Source, want)
	}
	ids, _ := transformersLogits(t, "llama")
	b, idx := positionsBatch(ids)
	var logits [2][]float32
	for i, p := range []*Policy{split, whole} {
		e, err := p.NewEngine(EngineNative, 7, nil)
		if err != nil {
			t.Fatal(err)
		}
		if logits[i], _, err = e.Logits(b, idx); err != nil {
			t.Fatal(err)
		}
	}
	for i := range logits[1] {
		if math.Float32bits(logits[0][i]) != math.Float32bits(logits[1][i]) {
			t.Fatalf("logit %d: %v from the split model, %v from the whole file", i, logits[0][i], logits[1][i])
		}
	}
	if p, err := openSource(split.Source, split.Model); err != nil {
		t.Fatalf("reopening the unchanged split model: %v", err)
	} else {
		p.Close()
	}
	last, err := os.ReadFile(shards[2])
	if err != nil {
		t.Fatal(err)
	}
	last[len(last)-1] ^= 1 // a weight's byte in the last shard
	if err := os.WriteFile(shards[2], last, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := openSource(split.Source, split.Model); err == nil || !strings.Contains(err.Error(), "has changed since the checkpoint was trained on it") {
		t.Errorf("reopening with a changed shard: %v", err)
	}
}
