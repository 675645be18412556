package policy

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/policy/ggml"
	"github.com/mlerl/mlerl/policy/gguf"
	"github.com/mlerl/mlerl/policy/native"
)

// openQuantGGUF opens a tiny GGUF file as a policy with LoRA (rank 4) and
// the given base storage.
func openQuantGGUF(t testing.TB, path, storage string) *Policy {
	t.Helper()
	tu := DefaultTuning()
	tu.LoRA.Rank, tu.LoRA.Alpha, tu.BaseStorage = 4, 8, storage
	p, err := OpenGGUF(path, hfBudgets(), tu, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestResolveBaseStorage: auto is quant for a GGUF file of quantized
// blocks, and what the CPU says otherwise (a Hugging Face folder, no
// spec); the explicit values stay; anything else is refused naming the
// values.
func TestResolveBaseStorage(t *testing.T) {
	cpu, err := AutoPrecision()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ mode, spec, want string }{
		{"auto", "gguf:" + ggufTestdata("llama.gguf"), StorageQuant},
		{"", "gguf:" + ggufTestdata("qwen3.gguf"), StorageQuant},
		{"auto", "hf:" + hfTestdata("ckpt", "qwen3"), cpu},
		{"auto", "", cpu},
		{"Q8_0", "gguf:" + ggufTestdata("llama.gguf"), StorageQ8_0},
		{"fp32", "gguf:" + ggufTestdata("llama.gguf"), MatmulFP32},
		{"quant", "", StorageQuant},
	} {
		got, err := ResolveBaseStorage(tc.mode, tc.spec)
		if err != nil || got != tc.want {
			t.Errorf("ResolveBaseStorage(%q, %q) = %q, %v; want %q", tc.mode, tc.spec, got, err, tc.want)
		}
	}
	if _, err := ResolveBaseStorage("q5_k", ""); err == nil || !strings.Contains(err.Error(), "q4_1") {
		t.Errorf("q5_k: %v", err)
	}
	if _, err := ResolveBaseStorage("auto", "gguf:/nonexistent.gguf"); err == nil {
		t.Error("auto for a missing file resolved")
	}
	tu := DefaultTuning()
	tu.FullFinetune, tu.BaseStorage = true, StorageQuant
	if err := tu.Validate(); err == nil || !strings.Contains(err.Error(), "full_finetune") {
		t.Errorf("full_finetune with quant: %v", err)
	}
	tu.BaseStorage = MatmulAuto
	if r, err := tu.ResolvedFor("gguf:" + ggufTestdata("llama.gguf")); err != nil || r.BaseStorage != MatmulFP32 {
		t.Errorf("full_finetune auto: %q, %v (want fp32: every weight trains)", r.BaseStorage, err)
	}
	// Resolved without the base, auto keeps a checkpoint's quantized
	// storage; an explicit value does not; on GoMLX (no blocks) it does
	// not either.
	tu = DefaultTuning()
	r, _ := tu.Resolved()
	if r.ResolveAutoFor(StorageQuant, EngineNative) != StorageQuant || r.ResolveAutoFor(MatmulBF16, EngineNative) != r.BaseStorage {
		t.Errorf("auto resolved without a base: keeps %q and %q", r.ResolveAutoFor(StorageQuant, EngineNative), r.ResolveAutoFor(MatmulBF16, EngineNative))
	}
	if got := r.ResolveAutoFor(StorageQuant, EngineGoMLX); got != r.BaseStorage {
		t.Errorf("auto on gomlx kept the checkpoint's quant: %q, want %q", got, r.BaseStorage)
	}
	// Resolved again (train ppo: as its config loads, then as it
	// starts), it still keeps the checkpoint's quantized storage.
	if again, _ := r.Resolved(); again.ResolveAutoFor(StorageQuant, EngineNative) != StorageQuant {
		t.Errorf("auto resolved twice without a base: gave the checkpoint's quant way to %q", again.ResolveAutoFor(StorageQuant, EngineNative))
	}
	tu.BaseStorage = MatmulFP32
	if r, _ := tu.Resolved(); r.ResolveAutoFor(StorageQuant, EngineNative) != MatmulFP32 {
		t.Errorf("explicit fp32 gave way to the checkpoint's quant")
	}
	// A stage on GoMLX: auto on a quantized GGUF file is the float
	// precision auto means elsewhere; an explicit quant is left for the
	// engine to refuse, naming the native engine.
	spec := "gguf:" + ggufTestdata("llamak.gguf")
	tu = DefaultTuning()
	if r, err := tu.ResolvedForEngine(spec, EngineNative); err != nil || r.BaseStorage != StorageQuant {
		t.Errorf("auto on the native engine: %q, %v; want quant", r.BaseStorage, err)
	}
	if r, err := tu.ResolvedForEngine(spec, EngineGoMLX); err != nil || r.BaseStorage != cpu {
		t.Errorf("auto on gomlx: %q, %v; want %q", r.BaseStorage, err, cpu)
	}
	tu.BaseStorage = StorageQuant
	if r, err := tu.ResolvedForEngine(spec, EngineGoMLX); err != nil || r.BaseStorage != StorageQuant {
		t.Errorf("explicit quant on gomlx: %q, %v", r.BaseStorage, err)
	}
	// A policy that only generates keeps the file's blocks on the native
	// engine only, and builds a GoMLX engine from the same file.
	p := openQuantGGUF(t, ggufTestdata("llamak.gguf"), MatmulFP32)
	p.Model.LoRA = nil
	p.ForInference(EngineGoMLX)
	if p.Model.BaseStorage != MatmulFP32 {
		t.Errorf("ForInference(gomlx): base_storage %s, want fp32", p.Model.BaseStorage)
	}
	if _, err := p.NewEngine(EngineGoMLX, 1, nil); err != nil {
		t.Errorf("gomlx engine on a quantized GGUF for inference: %v", err)
	}
	p.ForInference(EngineNative)
	if p.Model.BaseStorage != StorageQuant {
		t.Errorf("ForInference(native): base_storage %s, want quant", p.Model.BaseStorage)
	}
}

// TestGGUFQuantStorage: the tiny llama GGUF (Q8_0 embedding, Q4_0, Q4_1,
// Q8_0, F16 and BF16 projections), llama5 (Q5_0 and IQ4_NL, which load
// as Q8_0 blocks, and Q5_1) and llamak (Q2_K-Q6_K, IQ4_XS and Q5_1, kept
// as the file stores them), opened with base_storage quant keeps each
// block matrix in its format (the others in float32): its
// logits over a prompt of more than 8 tokens and its LoRA gradients are
// those of the float32 base bit for bit (transformers' from the same
// file within 1e-4, as the float32 base's), its decoding within
// native.QuantTolerance of the float32 base's, and a checkpoint records
// quant and reopens its base so. q8_0 quantizes every matrix on load.
func TestGGUFQuantStorage(t *testing.T) {
	for _, name := range []string{"llama", "llama5", "llamak"} {
		t.Run(name, func(t *testing.T) { testGGUFQuantStorage(t, name) })
	}
}

func testGGUFQuantStorage(t *testing.T, name string) {
	path := ggufTestdata(name + ".gguf")
	q := openQuantGGUF(t, path, StorageQuant)
	f := openQuantGGUF(t, path, MatmulFP32)
	qe, err := q.NewEngine(EngineNative, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	fe, err := f.NewEngine(EngineNative, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := qe.(*nativeEngine).m
	file, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	want := map[string]string{}
	w := q.hf.Weights.(*gguf.Weights)
	for _, name := range w.Names() {
		n, _, _ := nativeName(name)
		typ, _ := w.StoredType(name)
		if fmt, ok := gguf.BlockFormat(typ); ok {
			want[n] = fmt
		}
	}
	quantized := 0
	for _, p := range m.Params() {
		if p.Quant != want[p.Name] {
			t.Errorf("%s stored as %q, the file holds %q", p.Name, p.Quant, want[p.Name])
		}
		if p.Quant != "" {
			quantized++
		}
	}
	if quantized == 0 || fe.(*nativeEngine).m.BaseBytes() < 2*m.BaseBytes() {
		t.Errorf("%d matrices in blocks, base %d bytes (float32 %d)", quantized, m.BaseBytes(), fe.(*nativeEngine).m.BaseBytes())
	}
	t.Logf("tiny %s: base stored as %s, %d matrices in blocks, %d bytes (float32: %d)", name, m.BaseStorage(), quantized, m.BaseBytes(), fe.(*nativeEngine).m.BaseBytes())

	ids, tf := transformersLogits(t, name)
	b, idx := positionsBatch(ids)
	ql, _, err := qe.Logits(b, idx)
	if err != nil {
		t.Fatal(err)
	}
	fl, _, err := fe.Logits(b, idx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range fl {
		if math.Float32bits(ql[i]) != math.Float32bits(fl[i]) {
			t.Fatalf("logit %d: %v with the quantized base, %v with the float32 one", i, ql[i], fl[i])
		}
	}
	v := len(ql) / len(ids)
	worst := 0.0
	for i := range tf {
		for j, x := range tf[i] {
			worst = max(worst, math.Abs(float64(ql[i*v+j]-x)))
		}
	}
	if worst > 1e-4 {
		t.Errorf("logits differ from transformers' by %.3g", worst)
	}
	loss := func(logits, _, dLogits, _ []float32) float64 {
		for i := range idx {
			dLogits[i*v+int(ids[(i+1)%len(ids)])] = -1
		}
		return 0
	}
	_, qg, err := qe.Gradients(b, idx, loss)
	if err != nil {
		t.Fatal(err)
	}
	_, fg, err := fe.Gradients(b, idx, loss)
	if err != nil {
		t.Fatal(err)
	}
	for i := range fg {
		for j := range fg[i].F32 {
			if math.Float32bits(qg[i].F32[j]) != math.Float32bits(fg[i].F32[j]) {
				t.Fatalf("gradient %s[%d]: %v with the quantized base, %v with the float32 one", fg[i].Name, j, qg[i].F32[j], fg[i].F32[j])
			}
		}
	}

	// Decoding: the prompt, then tokens one at a time from the blocks.
	toks, err := q.EncodePrompt("Task: tiny (t). Metric: accuracy, higher is better.\nAnswer with Reflection, Thought, Action, Action Input.\n")
	if err != nil || len(toks) < 24 {
		t.Fatalf("prompt of %d tokens: %v", len(toks), err)
	}
	decode := func(e Engine) []float32 {
		d, err := e.NewDecoder(2)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		out, err := d.Prefill([][]int32{toks[:12], toks[:10]})
		if err != nil {
			t.Fatal(err)
		}
		all := append([]float32(nil), out...)
		for _, tok := range toks[12:24] {
			l, err := d.Extend([][]int32{{tok}, {tok}})
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, l...)
		}
		return all
	}
	qd, fd := decode(qe), decode(fe)
	scale, diff := 1.0, 0.0
	for i := range fd {
		scale = max(scale, math.Abs(float64(fd[i])))
		diff = max(diff, math.Abs(float64(qd[i]-fd[i])))
	}
	depth := 4*q.Model.Layers + 1
	if diff/scale > native.QuantTolerance(depth) {
		t.Errorf("decoding from the blocks differs from the float32 base's by %.2g of the largest logit (tolerance %.2g)", diff/scale, native.QuantTolerance(depth))
	}
	t.Logf("decoding from the blocks vs the float32 base: %.2g of the largest logit (tolerance %.2g)", diff/scale, native.QuantTolerance(depth))

	// Int8 activations: the products of the decode steps take int8
	// inputs (per 32 for Q4_0, Q4_1 and Q8_0 blocks on AVX512_VNNI, per
	// 256 for Q4_K, Q5_K and Q6_K: ggml.Format.DotQ8), so the logits move
	// by the inputs' rounding (about 1/254 of a block's largest input).
	if _, err := m.SetQuantActivations(native.ActivationsInt8); err != nil {
		t.Fatal(err)
	}
	id := decode(qe)
	if _, err := m.SetQuantActivations(native.ActivationsFP32); err != nil {
		t.Fatal(err)
	}
	diff8 := 0.0
	for i := range fd {
		diff8 = max(diff8, math.Abs(float64(id[i]-fd[i])))
	}
	// On these tiny random models the rounding moves the largest logit by
	// 2-3% (measured: 0.021-0.029); a wrong min or offset term moves it by
	// 5% to 160%. llamak's K-quant matrices take the int8 form wherever it
	// exists, which moves them at all (float32 inputs: 2.5e-6).
	if diff8/scale > 0.045 {
		t.Errorf("decoding with int8 activations differs from the float32 base's by %.2g of the largest logit (allowed 0.045)", diff8/scale)
	}
	if name == "llamak" && ggml.Q4_K.HasDotQ8() && diff8/scale < 1e-4 {
		t.Errorf("decoding with int8 activations: %.2g of the largest logit from the float32 base's, as with float32 inputs: the K-quants' int8 form did not run", diff8/scale)
	}
	t.Logf("decoding with int8 activations vs the float32 base: %.2g of the largest logit", diff8/scale)

	// A checkpoint records quant and reopens its base so.
	ctx := context.Background()
	st := store.NewLocal(t.TempDir())
	if err := SaveCheckpoint(ctx, st, "ck", 1, qe, Checkpoint{Config: map[string]string{"k": "v"}, Policy: q, State: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	ck, err := LoadCheckpoint(ctx, st, "ck/"+StepFolder(1), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ck.Model.BaseStorage != StorageQuant {
		t.Errorf("model.json records base storage %q, want %q", ck.Model.BaseStorage, StorageQuant)
	}
	rp, err := ck.OpenPolicy("")
	if err != nil {
		t.Fatal(err)
	}
	defer rp.Close()
	re, _, err := ck.Engine(rp, EngineNative, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := re.(*nativeEngine).m.BaseStorage(); got != m.BaseStorage() {
		t.Errorf("reopened base stored as %s, want %s", got, m.BaseStorage())
	}
	rl, _, _ := re.Logits(b, idx)
	for i := range rl {
		if rl[i] != ql[i] {
			t.Fatalf("reopened logit %d: %v, saved engine %v", i, rl[i], ql[i])
		}
	}

	// q8_0: every matrix quantized to Q8_0 on load (the Q8_0 ones kept).
	p8 := openQuantGGUF(t, path, StorageQ8_0)
	e8, err := p8.NewEngine(EngineNative, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := e8.(*nativeEngine).m.BaseStorage(); got != StorageQ8_0 {
		t.Errorf("q8_0: base stored as %s", got)
	}
	l8, _, _ := e8.Logits(b, idx)
	worst = 0
	for i := range tf {
		for j, x := range tf[i] {
			worst = max(worst, math.Abs(float64(l8[i*v+j]-x)))
		}
	}
	scale = 0.0
	for i := range tf {
		for _, x := range tf[i] {
			scale = max(scale, math.Abs(float64(x)))
		}
	}
	t.Logf("q8_0 on load: logits within %.3g of transformers' from the file (largest logit %.3g)", worst, scale)
	if worst > 0.03*scale { // as TestExportRoundTrip bounds a Q8_0 export
		t.Errorf("q8_0 on load: logits differ from transformers' by %.3g, over 3%% of the largest logit %.3g", worst, scale)
	}
}

// TestQuantStorageRefusals: quant needs a GGUF file; the GoMLX engine
// keeps no blocks.
func TestQuantStorageRefusals(t *testing.T) {
	tu := DefaultTuning()
	tu.BaseStorage = StorageQuant
	dir := hfTestdata("ckpt", "qwen3")
	if _, err := OpenHF(dir, hfBudgets(), tu, ""); err == nil || !strings.Contains(err.Error(), "use q8_0") {
		t.Errorf("quant on a Hugging Face folder: %v", err)
	}
	p := openQuantGGUF(t, ggufTestdata("llama.gguf"), StorageQuant)
	if _, err := p.NewEngine(EngineGoMLX, 1, nil); err == nil || !strings.Contains(err.Error(), "native engine") {
		t.Errorf("gomlx with quant: %v", err)
	}
	abs, _ := filepath.Abs(ggufTestdata("llama.gguf"))
	p.ForInference(EngineNative)
	if p.Model.BaseStorage != StorageQuant || p.Source.Base != abs {
		t.Errorf("ForInference keeps %q for a quantized GGUF file", p.Model.BaseStorage)
	}
}
