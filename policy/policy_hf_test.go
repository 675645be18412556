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
	"github.com/mlerl/mlerl/policy/hf"
)

// The tiny Hugging Face checkpoints of policy/hf/testdata (random weights
// saved by transformers, scripts/hf_reference.py) as policies.

func hfTestdata(parts ...string) string {
	return filepath.Join(append([]string{"hf", "testdata"}, parts...)...)
}

// hfBudgets are budgets every tiny checkpoint holds (llama3's has 512
// positions; its tiny tokenizer takes a token per two or three bytes).
func hfBudgets() Config { return Config{Ctx: 480, PromptTokens: 400, ResponseTokens: 64} }

// qwen3Chat is a copy of the tiny Qwen3 checkpoint with Qwen3's own chat
// template (the tiny one carries Qwen2.5's), from hf/testdata/chat.
func qwen3Chat(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "qwen3-chat")
	if err := os.CopyFS(dir, os.DirFS(hfTestdata("ckpt", "qwen3"))); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(hfTestdata("chat", "qwen3.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct{ Template string }
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte(c.Template), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// openTiny opens a tiny checkpoint as a policy with LoRA (rank 4 on every
// target) and a float32 base, so that its bits do not depend on the CPU.
func openTiny(t testing.TB, name, adapter string) *Policy {
	t.Helper()
	tu := DefaultTuning()
	tu.LoRA.Rank, tu.LoRA.Alpha, tu.BaseStorage = 4, 8, MatmulFP32
	dir := hfTestdata("ckpt", name)
	if name == "qwen3-chat" {
		dir = qwen3Chat(t)
	}
	p, err := OpenHF(dir, hfBudgets(), tu, adapter)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// positionsBatch is one row of tokens, every position asked for.
func positionsBatch(toks []int32) (Batch, []int32) {
	n := len(toks)
	b := Batch{B: 1, S: n, Tokens: slices.Clone(toks), Positions: make([]int32, n), Segments: make([]int32, n)}
	idx := make([]int32, n)
	for i := range n {
		b.Positions[i], b.Segments[i], idx[i] = int32(i), 1, int32(i)
	}
	return b, idx
}

// checkLogits compares an engine's logits at every position of toks with
// the float64 reference's, relative to the largest logit.
func checkLogits(t *testing.T, what string, e Engine, ref *hf.Reference, toks []int32) {
	t.Helper()
	b, idx := positionsBatch(toks)
	got, _, err := e.Logits(b, idx)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int, len(toks))
	for i, id := range toks {
		ids[i] = int(id)
	}
	want, err := ref.Logits(ids)
	if err != nil {
		t.Fatal(err)
	}
	v := len(got) / len(toks)
	worst, scale := 0.0, 0.0
	for i := range want {
		for j, w := range want[i] {
			worst = max(worst, math.Abs(float64(got[i*v+j])-w))
			scale = max(scale, math.Abs(w))
		}
	}
	if worst > 1e-4*max(scale, 1) {
		t.Errorf("%s: logits differ from the reference by %g (largest logit %g)", what, worst, scale)
	}
}

// TestHFPolicyLogits: a policy opened from each tiny checkpoint (Llama
// with ChatML, Llama 3.1 in bf16, Qwen2, a sharded Qwen2, Qwen3) runs on
// the native engine with the reference forward's logits (fresh LoRA
// adapters change nothing: B is zero), on the chat-rendered prompt.
func TestHFPolicyLogits(t *testing.T) {
	for _, name := range []string{"llama", "llama3", "qwen2", "qwen2-sharded", "qwen3"} {
		t.Run(name, func(t *testing.T) {
			p := openTiny(t, name, "")
			e, err := p.NewEngine(EngineNative, 7, nil)
			if err != nil {
				t.Fatal(err)
			}
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

// TestHFPolicyText: prompts are the chat format's rendering of the system
// message and the compact prompt with the generation prompt (Qwen3's
// empty think block after it; the tiny Qwen3 checkpoint carries
// Qwen2.5's template, qwen3-chat Qwen3's own), responses end with the end-of-turn id,
// decoding drops it, and generation stops at every stop id of the
// checkpoint.
func TestHFPolicyText(t *testing.T) {
	tests := []struct {
		name, start, end, eot string
	}{
		{"llama", "<|im_start|>system\n" + SystemPrompt + "<|im_end|>\n<|im_start|>user\nTask: x", "<|im_start|>assistant\n", "<|im_end|>"},
		{"llama3", "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n" + SystemPrompt + "<|eot_id|>", "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>"},
		{"qwen2", "<|im_start|>system\n" + SystemPrompt + "<|im_end|>\n<|im_start|>user\nTask: x", "<|im_start|>assistant\n", "<|im_end|>"},
		{"qwen3", "<|im_start|>system\n" + SystemPrompt + "<|im_end|>\n<|im_start|>user\nTask: x", "<|im_start|>assistant\n", "<|im_end|>"},
		{"qwen3-chat", "<|im_start|>system\n" + SystemPrompt + "<|im_end|>\n<|im_start|>user\nTask: x", "<|im_start|>assistant\n<think>\n\n</think>\n\n", "<|im_end|>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := openTiny(t, tt.name, "")
			ids, err := p.EncodePrompt("Task: x\n")
			if err != nil {
				t.Fatal(err)
			}
			var text strings.Builder
			for _, id := range ids {
				text.WriteString(p.hf.Tokenizer.Decode([]int{int(id)}))
			}
			if got := text.String(); !strings.HasPrefix(got, tt.start) || !strings.HasSuffix(got, tt.end) {
				t.Errorf("prompt:\ngot  %q\nwant %q ... %q", got, tt.start, tt.end)
			}
			resp, err := p.EncodeResponse("Action: List Files")
			if err != nil {
				t.Fatal(err)
			}
			if eot, _ := p.hf.Tokenizer.ID(tt.eot); resp[len(resp)-1] != int32(eot) || p.EOS() != int32(eot) || !p.IsStop(int32(eot)) {
				t.Errorf("response ends with %d, EOS %d: want the end of turn %s (%d), a stop id", resp[len(resp)-1], p.EOS(), tt.eot, eot)
			}
			if got := p.Decode(resp); got != "Action: List Files" {
				t.Errorf("decode: got %q want %q", got, "Action: List Files")
			}
			for _, id := range p.hf.StopIDs() {
				if !p.IsStop(int32(id)) || !p.FreeMask().Has(int32(id)) {
					t.Errorf("checkpoint stop id %d: stop %v, in the free mask %v: want both", id, p.IsStop(int32(id)), p.FreeMask().Has(int32(id)))
				}
			}
			if n := p.Size(); n > p.hf.Tokenizer.VocabSize() && p.FreeMask().Has(int32(n-1)) {
				t.Errorf("padding row %d is in the free mask", n-1)
			}
		})
	}
}

// TestHFAdapterRoundTrip: a PEFT adapter (written by PEFT) loaded with
// the policy gives the reference forward's logits with that adapter; the
// adapter the engine then holds, written by mlerl in PEFT's layout and
// read back, is the same adapter, bit for bit.
func TestHFAdapterRoundTrip(t *testing.T) {
	for _, name := range []string{"qwen2", "qwen3"} {
		t.Run(name, func(t *testing.T) {
			dir := hfTestdata("lora", name, "adapter")
			p := openTiny(t, name, dir)
			e, err := p.NewEngine(EngineNative, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			peft, err := hf.ReadAdapter(dir, p.hf.Arch)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := hf.NewReference(p.hf.Arch, p.hf.Weights, peft)
			if err != nil {
				t.Fatal(err)
			}
			toks := []int32{1, 5, 9, 33, 101, 7, 250, 3}
			checkLogits(t, name+" with PEFT's adapter", e, ref, toks)

			ws, err := TrainableWeights(e)
			if err != nil {
				t.Fatal(err)
			}
			ad, err := p.Adapter(ws)
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "adapter")
			if err := hf.WriteAdapter(out, ad); err != nil {
				t.Fatal(err)
			}
			back, err := hf.ReadAdapter(out, p.hf.Arch)
			if err != nil {
				t.Fatal(err)
			}
			if back.R != peft.R || back.Alpha != peft.Alpha || !slices.Equal(back.Targets, peft.Targets) || len(back.Modules) != len(peft.Modules) {
				t.Fatalf("written adapter: r %d alpha %g targets %v, %d modules; want PEFT's r %d alpha %g targets %v, %d modules",
					back.R, back.Alpha, back.Targets, len(back.Modules), peft.R, peft.Alpha, peft.Targets, len(peft.Modules))
			}
			for path, m := range peft.Modules {
				if !slices.Equal(back.Modules[path].A, m.A) || !slices.Equal(back.Modules[path].B, m.B) {
					t.Errorf("module %s: the written adapter's A or B differs from PEFT's", path)
				}
			}
		})
	}
}

// TestHFCheckpointRoundTrip: a checkpoint of a Hugging Face policy after a
// training step holds policy.json, the trainable tensors only and the
// adapter in PEFT's layout; loaded back, its policy is the same base and
// its engine the same logits, and the PEFT adapter read by hf.ReadAdapter
// gives those logits in the reference forward, as does the merged folder
// the policy writes.
func TestHFCheckpointRoundTrip(t *testing.T) {
	ctx := context.Background()
	p := openTiny(t, "qwen2", "")
	e, err := p.NewEngine(EngineNative, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.SetOptim(OptimConfig{LR: 1e-2, Beta1: 0.9, Beta2: 0.99, ClipNorm: 1})
	toks := []int32{601, 453, 301, 198, 82, 66, 262, 68, 280, 518, 602}
	b, idx := positionsBatch(toks)
	// One step of a loss that moves every adapter (B leaves zero).
	loss := func(logits, _, dLogits, _ []float32) float64 {
		v := len(logits) / len(idx)
		for i := range idx {
			dLogits[i*v+int(toks[(i+1)%len(toks)])] = -1
		}
		return 0
	}
	if _, _, err := e.TrainStep(b, idx, loss, 1e-2); err != nil {
		t.Fatal(err)
	}
	st := store.NewLocal(t.TempDir())
	if err := SaveCheckpoint(ctx, st, "ck", 1, e, Checkpoint{Config: map[string]string{"k": "v"}, Policy: p, State: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"policy.json", "model.json", "adapter/adapter_config.json", "adapter/adapter_model.safetensors"} {
		if _, err := store.ReadAll(ctx, st, "ck/"+StepFolder(1)+"/"+f); err != nil {
			t.Errorf("checkpoint file %s: %v", f, err)
		}
	}
	if _, err := store.ReadAll(ctx, st, "ck/"+StepFolder(1)+"/vocab.json"); err == nil {
		t.Errorf("a Hugging Face policy's checkpoint has a vocab.json")
	}
	ck, err := LoadCheckpoint(ctx, st, "ck/"+StepFolder(1), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ck.Weights {
		if !strings.Contains(w.Name, "lora_") && !strings.HasPrefix(w.Name, "/value_head/") {
			t.Errorf("checkpoint holds base weight %s: want only what trains", w.Name)
		}
	}
	q, err := ck.OpenPolicy("")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if *q.Source != *p.Source {
		t.Errorf("reopened source:\ngot  %+v\nwant %+v", *q.Source, *p.Source)
	}
	e2, resumed, err := ck.Engine(q, EngineNative, true)
	if err != nil || !resumed {
		t.Fatalf("engine: resumed %v, %v", resumed, err)
	}
	b, idx = positionsBatch(toks)
	want, _, _ := e.Logits(b, idx)
	got, _, _ := e2.Logits(b, idx)
	if !slices.Equal(got, want) {
		t.Errorf("the reloaded engine's logits differ from the saved one's")
	}
	root := filepath.Join(st.URI(""), "ck", StepFolder(1), AdapterFolder)
	ad, err := hf.ReadAdapter(root, p.hf.Arch)
	if err != nil {
		t.Fatal(err)
	}
	if ad.BaseModel != p.Source.Base {
		t.Errorf("adapter base_model_name_or_path %q, want %q", ad.BaseModel, p.Source.Base)
	}
	ref, err := hf.NewReference(p.hf.Arch, p.hf.Weights, ad)
	if err != nil {
		t.Fatal(err)
	}
	checkLogits(t, "the checkpoint's PEFT adapter", e, ref, toks)

	// The merged folder: the base with the trained adapters folded in.
	// With MLERL_POLICY_ROUNDTRIP_DIR set, the adapter, the merged folder
	// and the engine's logits go there for `scripts/hf_reference.py check
	// DIR`, which loads them with PEFT and transformers.
	dir := os.Getenv("MLERL_POLICY_ROUNDTRIP_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(dir, "adapter"), os.DirFS(root)); err != nil {
		t.Fatal(err)
	}
	ws, err := TrainableWeights(e)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WriteMerged(filepath.Join(dir, "merged"), ws); err != nil {
		t.Fatal(err)
	}
	mc, err := hf.Load(filepath.Join(dir, "merged"))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	mref, err := hf.NewReference(mc.Arch, mc.Weights, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkLogits(t, "the merged folder", e, mref, toks)
	b, idx = positionsBatch(toks)
	logits, _, _ := e.Logits(b, idx)
	v := len(logits) / len(toks)
	rows := make([][]float64, len(toks))
	ids := make([]int, len(toks))
	for i := range rows {
		ids[i] = int(toks[i])
		for _, l := range logits[i*v : (i+1)*v] {
			rows[i] = append(rows[i], float64(l))
		}
	}
	out, _ := json.Marshal(map[string]any{"checkpoint": "ckpt/qwen2", "input_ids": [][]int{ids}, "logits": [][][]float64{rows}})
	if err := os.WriteFile(filepath.Join(dir, "go_logits.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestHFBadInput: what OpenHF and a checkpoint's reopening refuse, each in
// one line naming the file or key and the fix.
func TestHFBadInput(t *testing.T) {
	copyCkpt := func(t *testing.T, name string, edit func(dir string)) string {
		dir := filepath.Join(t.TempDir(), name)
		if err := os.CopyFS(dir, os.DirFS(hfTestdata("ckpt", name))); err != nil {
			t.Fatal(err)
		}
		edit(dir)
		return dir
	}
	rewrite := func(path, old, new string) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tu := DefaultTuning()
	tests := []struct {
		name    string
		dir     func(t *testing.T) string
		budgets Config
		tuning  Tuning
		adapter string
		want    string
	}{
		{"missing folder", func(*testing.T) string { return "no/such/folder" }, hfBudgets(), tu, "", "no such file or directory"},
		{"unsupported architecture", func(t *testing.T) string {
			return copyCkpt(t, "qwen2", func(d string) {
				rewrite(filepath.Join(d, "config.json"), "Qwen2ForCausalLM", "MistralForCausalLM")
			})
		}, hfBudgets(), tu, "", "config.json"},
		{"context past the model's positions", func(*testing.T) string { return hfTestdata("ckpt", "llama3") },
			Config{Ctx: 1024, PromptTokens: 800, ResponseTokens: 64}, tu, "", "model.ctx 1024 exceeds config.json's max_position_embeddings 512"},
		{"adapter for another base", func(*testing.T) string { return hfTestdata("ckpt", "llama") }, hfBudgets(), tu,
			hfTestdata("lora", "qwen2", "adapter"), "the adapter must be made for"},
		{"adapter and full fine-tuning", func(*testing.T) string { return hfTestdata("ckpt", "qwen2") }, hfBudgets(),
			Tuning{FullFinetune: true, BaseStorage: MatmulAuto}, hfTestdata("lora", "qwen2", "adapter"), "drop one of --adapter and --full_finetune"},
		{"missing adapter", func(*testing.T) string { return hfTestdata("ckpt", "qwen2") }, hfBudgets(), tu, "no/adapter", "adapter_config.json is missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tt.dir(t)
			var before []string
			filepath.WalkDir(filepath.Dir(dir), func(p string, _ os.DirEntry, _ error) error { before = append(before, p); return nil })
			p, err := OpenHF(dir, tt.budgets, tt.tuning, tt.adapter)
			if err == nil {
				p.Close()
				t.Fatalf("got no error, want one containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("got  %q\nwant one line containing %q", err, tt.want)
			}
			var after []string
			filepath.WalkDir(filepath.Dir(dir), func(p string, _ os.DirEntry, _ error) error { after = append(after, p); return nil })
			if !slices.Equal(before, after) {
				t.Errorf("the folder changed: %v -> %v", before, after)
			}
		})
	}

	// An adapter refused for its own options is not a base mismatch: only
	// the latter names the base it must be made for.
	for _, opt := range []struct{ key, value string }{{"use_rslora", "true"}, {"use_dora", "true"}, {"layers_to_transform", "[0]"}} {
		t.Run("adapter with "+opt.key, func(t *testing.T) {
			ad := filepath.Join(t.TempDir(), "adapter")
			if err := os.CopyFS(ad, os.DirFS(hfTestdata("lora", "qwen2", "adapter"))); err != nil {
				t.Fatal(err)
			}
			cfgPath := filepath.Join(ad, "adapter_config.json")
			var cfg map[string]any
			b, _ := os.ReadFile(cfgPath)
			if err := json.Unmarshal(b, &cfg); err != nil {
				t.Fatal(err)
			}
			var v any
			json.Unmarshal([]byte(opt.value), &v)
			cfg[opt.key] = v
			b, _ = json.Marshal(cfg)
			os.WriteFile(cfgPath, b, 0o644)
			p, err := OpenHF(hfTestdata("ckpt", "qwen2"), hfBudgets(), tu, ad)
			if err == nil {
				p.Close()
				t.Fatal("got no error")
			}
			if want := fmt.Sprintf("field %q is %s: a PEFT option mlerl does not implement", opt.key, opt.value); !strings.Contains(err.Error(), want) {
				t.Errorf("got %q, want it to contain %q", err, want)
			}
			if strings.Contains(err.Error(), "must be made for") {
				t.Errorf("got %q: it blames the base for the adapter's own option", err)
			}
		})
	}

	t.Run("base changed since training", func(t *testing.T) {
		dir := copyCkpt(t, "qwen2", func(string) {})
		p, err := OpenHF(dir, hfBudgets(), tu, "")
		if err != nil {
			t.Fatal(err)
		}
		p.Close()
		rewrite(filepath.Join(dir, "config.json"), `"rms_norm_eps": 1e-06`, `"rms_norm_eps": 1e-05`)
		ck := &Checkpoint{Dir: "ck/step-1", Model: p.Model, Source: p.Source}
		_, err = ck.OpenPolicy("")
		if err == nil || !strings.Contains(err.Error(), "config.json has changed since the checkpoint was trained on it") {
			t.Errorf("got %v, want the changed config.json named", err)
		}
	})
}

// spikeEngine puts one id's logit far above the rest at every step.
type spikeEngine struct {
	randomEngine
	ids []int32 // the ids to spike, step by step (the last one after)
}

func (e *spikeEngine) NewDecoder(rows int) (Decoder, error) {
	return &spikeDecoder{e: e, rows: rows}, nil
}

type spikeDecoder struct {
	e          *spikeEngine
	rows, step int
}

func (d *spikeDecoder) logits() []float32 {
	v := d.e.cfg.Vocab
	out := make([]float32, d.rows*v)
	id := d.e.ids[min(d.step, len(d.e.ids)-1)]
	for r := range d.rows {
		out[r*v+int(id)] = 50
	}
	d.step++
	return out
}
func (d *spikeDecoder) Prefill([][]int32) ([]float32, error) { return d.logits(), nil }
func (d *spikeDecoder) Extend([][]int32) ([]float32, error)  { return d.logits(), nil }
func (d *spikeDecoder) Close()                               {}

// TestHFFreeDecoding: free decoding of a Hugging Face policy stops at any
// of the checkpoint's stop ids (not only its end of turn), and never draws
// an embedding row no tokenizer id reaches, however large its logit.
func TestHFFreeDecoding(t *testing.T) {
	p := openTiny(t, "qwen2", "")
	prompt, err := p.EncodePrompt("Task: x\n")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := p.hf.Tokenizer.ID("A")
	eos, _ := p.hf.Tokenizer.ID("<|endoftext|>")
	pad := int32(p.Size() - 1) // qwen2's 640 rows hold 605 ids
	if p.hf.Tokenizer.VocabSize() >= p.Size() {
		t.Fatalf("the tiny checkpoint has no padding rows (%d ids in %d rows)", p.hf.Tokenizer.VocabSize(), p.Size())
	}
	tests := []struct {
		name  string
		spike []int32
		want  []int32
	}{
		{"stops at <|endoftext|>", []int32{int32(a), int32(eos)}, []int32{int32(a), int32(eos)}},
		{"stops at the end of turn", []int32{int32(a), int32(a), p.EOS()}, []int32{int32(a), int32(a), p.EOS()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gen := Generator{Engine: &spikeEngine{randomEngine: randomEngine{cfg: p.Model}, ids: tt.spike}, Policy: p}
			out, err := gen.Generate([][]int32{prompt}, GenerateOptions{Temperature: 1, MaxNewTokens: 10})
			if err != nil {
				t.Fatal(err)
			}
			if got := out[0].Tokens; !slices.Equal(got, tt.want) || !out[0].Stopped {
				t.Errorf("got %v (stopped %v), want %v and stopped", got, out[0].Stopped, tt.want)
			}
		})
	}
	gen := Generator{Engine: &spikeEngine{randomEngine: randomEngine{cfg: p.Model}, ids: []int32{pad}}, Policy: p}
	out, err := gen.Generate([][]int32{prompt}, GenerateOptions{Temperature: 1, MaxNewTokens: 20, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range out[0].Tokens {
		if p.TokenBytes(tok) == nil && !p.IsStop(tok) {
			t.Errorf("drew id %d, which stands for no text and is no stop (padding row %d spiked)", tok, pad)
		}
	}
}
