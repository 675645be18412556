package main

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/dataset"
	"github.com/mlerl/mlerl/ingest"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/internal/tokenizer"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/policy/hf"
	"github.com/mlerl/mlerl/rollout"
	"github.com/mlerl/mlerl/schemas"
)

// Bring your own model: Hugging Face checkpoint folders as the policy,
// through the stages as a user runs them (the command tree, in process),
// on policy/hf's tiny random checkpoints (transformers wrote them).

// tinyCheckpoint is a tiny Hugging Face checkpoint folder of policy/hf's
// testdata.
func tinyCheckpoint(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "policy", "hf", "testdata", "ckpt", name)
}

// tinyRoot makes a tiny data root: two built-in tasks (one held-in, one
// held-out), their ideas, one scripted-expert trajectory of 4 steps on
// the held-in task, and the dataset stage's examples and states, with
// planVariants edit variants per expert edit. It skips the test where
// the task runtime or the tokenizer is missing.
func tinyRoot(t *testing.T, planVariants int) string {
	t.Helper()
	if _, err := sandbox.FindPython(""); err != nil {
		t.Skipf("no task runtime: %v", err)
	}
	if _, err := tokenizer.Default(); err != nil {
		t.Skipf("no tokenizer: %v", err)
	}
	ctx := context.Background()
	root := t.TempDir()
	_, file, _, _ := runtime.Caller(0)
	tc := ingest.DefaultTasksConfig()
	tc.Data, tc.Suite, tc.Only = root, filepath.Join(filepath.Dir(file), "..", "..", "tasks"), []string{"wine-cultivar", "election-vote"}
	if err := ingest.RunTasks(ctx, tc); err != nil {
		t.Fatal(err)
	}
	ic := ingest.DefaultIdeasConfig()
	ic.Data, ic.K = root, 3
	if err := ingest.RunIdeas(ctx, ic); err != nil {
		t.Fatal(err)
	}
	rc := rollout.DefaultConfig()
	rc.Data, rc.Split, rc.PerTask, rc.Workers = root, schemas.HeldIn, 1, 2
	rc.Env.MaxSteps = 4
	if err := rollout.Run(ctx, rc); err != nil {
		t.Fatal(err)
	}
	dc := dataset.DefaultConfig()
	dc.Data, dc.Exports, dc.PlanVariants = root, false, planVariants
	if err := dataset.Run(ctx, dc); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestBringYourOwnModel: a tiny checkpoint of each architecture (Llama
// with SmolLM2's ChatML, Qwen2, Qwen3) through `train sft --policy hf:DIR`
// (LoRA, a merged folder saved), `train ppo` from that checkpoint (2
// updates, a merged folder saved, then rerun: it resumes done and writes
// its merged folder again) and `evaluate` (1 task; the SFT and PPO checkpoints, and the
// base with the PEFT adapter PPO wrote as method policy). Every
// checkpoint is loaded back: each step's mlerl checkpoint resumes its
// policy, its PEFT adapter read by hf.ReadAdapter gives the reference
// forward the engine's logits, and the merged folder loads as a
// checkpoint with those logits too. Then Qwen3 again on the GoMLX
// engine (byomGomlx).
func TestBringYourOwnModel(t *testing.T) {
	if testing.Short() {
		t.Skip("trains and evaluates three policies")
	}
	root := tinyRoot(t, 0)
	ctx := context.Background()
	st := store.NewLocal(root)
	for _, arch := range []string{"llama", "qwen2", "qwen3"} {
		t.Run(arch, func(t *testing.T) {
			base := tinyCheckpoint(arch)
			merged := filepath.Join(t.TempDir(), "merged")
			budgets := []string{"--model.ctx=1024", "--model.prompt_tokens=800", "--model.response_tokens=160"}
			sft := append([]string{"train", "sft", "--data", root, "--policy", "hf:" + base, "--out", "checkpoints/" + arch + "-sft",
				"--epochs=1", "--batch_rows=2", "--lora.rank=4", "--lora.alpha=8", "--base_storage=fp32", "--save_merged", merged}, budgets...)
			if _, err := run(t, sft...); err != nil {
				t.Fatalf("train sft: %v", err)
			}
			sub := latestStep(t, st, "checkpoints/"+arch+"-sft")
			checkHFCheckpoint(t, st, sub, base)

			// The merged folder is a checkpoint transformers would load: it
			// computes what the SFT policy computes.
			mc, err := hf.Load(merged)
			if err != nil {
				t.Fatalf("merged folder: %v", err)
			}
			defer mc.Close()
			ref, err := hf.NewReference(mc.Arch, mc.Weights, nil)
			if err != nil {
				t.Fatal(err)
			}
			compareLogits(t, "the merged folder", engineOf(t, st, sub), ref)

			ppoMerged := filepath.Join(t.TempDir(), "ppo-merged")
			ppo := []string{"train", "ppo", "--data", root, "--sft", "checkpoints/" + arch + "-sft", "--out", "checkpoints/" + arch + "-ppo",
				"--updates=2", "--batch_size=2", "--group_size=1", "--advantage=critic", "--critic_warmup=1", "--gen_batch=2", "--minibatches=1",
				"--horizon=1", "--reward=format", "--checkpoint_every=1", "--max_new_tokens=64", "--base_storage=fp32", "--save_merged", ppoMerged}
			if _, err := run(t, ppo...); err != nil {
				t.Fatalf("train ppo: %v", err)
			}
			ppoSub := latestStep(t, st, "checkpoints/"+arch+"-ppo")
			if ppoSub != "checkpoints/"+arch+"-ppo/"+policy.StepFolder(2) {
				t.Errorf("ppo's latest checkpoint is %s, want update 2's", ppoSub)
			}
			checkHFCheckpoint(t, st, ppoSub, base)
			// A rerun resumes: the run is done, nothing more to train, and
			// its merged folder is written again over its own.
			if _, err := run(t, ppo...); err != nil {
				t.Fatalf("train ppo again (resume): %v", err)
			}
			pm, err := hf.Load(ppoMerged)
			if err != nil {
				t.Fatalf("ppo's merged folder: %v", err)
			}
			defer pm.Close()
			pref, err := hf.NewReference(pm.Arch, pm.Weights, nil)
			if err != nil {
				t.Fatal(err)
			}
			compareLogits(t, "ppo's merged folder", engineOf(t, st, ppoSub), pref)

			adapter := filepath.Join(root, ppoSub, policy.AdapterFolder)
			out := "eval-" + arch
			eval := append([]string{"evaluate", "--data", root, "--out", out, "--report", filepath.Join(t.TempDir(), "report"),
				"--methods=sft,sft+ppo,policy", "--sft", "checkpoints/" + arch + "-sft", "--ppo", "checkpoints/" + arch + "-ppo",
				"--policy", "hf:" + base, "--adapter", adapter, "--only=election-vote", "--per_task=1", "--env.max_steps=2",
				"--max_new_tokens=64", "--workers=1"}, budgets...)
			if _, err := run(t, eval...); err != nil {
				t.Fatalf("evaluate: %v", err)
			}
			m, err := datasets.Latest(ctx, st, out)
			if err != nil {
				t.Fatal(err)
			}
			rows, err := datasets.ReadAll[schemas.EvalResult](ctx, st, m, schemas.EvalResults)
			if err != nil {
				t.Fatal(err)
			}
			var methods []string
			for _, r := range rows {
				if r.TaskID != "election-vote" || r.Steps < 1 {
					t.Errorf("row %s/%s: task %s, %d steps; want election-vote and at least one step", r.Method, r.TaskID, r.TaskID, r.Steps)
				}
				methods = append(methods, r.Method)
			}
			slices.Sort(methods)
			if want := []string{"policy", "sft", "sft+ppo"}; !slices.Equal(methods, want) {
				t.Errorf("evaluated methods %v, want %v", methods, want)
			}
		})
	}
	t.Run("qwen3-gomlx", func(t *testing.T) { byomGomlx(t, root) })
}

// byomGomlx: the same stages with --engine gomlx (GoMLX's pure-Go
// backend here, XLA on a GPU): the tiny Qwen3 checkpoint through train
// sft, train ppo (1 update) and evaluate (the PPO checkpoint, 1 task).
// What GoMLX trained is a checkpoint like native's: only the adapters
// and value head, and its PEFT adapter gives the reference forward the
// logits of the native engine loading it.
func byomGomlx(t *testing.T, root string) {
	st := store.NewLocal(root)
	base := tinyCheckpoint("qwen3")
	budgets := []string{"--model.ctx=1024", "--model.prompt_tokens=800", "--model.response_tokens=160"}
	sft := append([]string{"train", "sft", "--engine=gomlx", "--data", root, "--policy", "hf:" + base, "--out", "checkpoints/gomlx-sft",
		"--epochs=1", "--batch_rows=2", "--lora.rank=4", "--lora.alpha=8", "--base_storage=fp32"}, budgets...)
	if _, err := run(t, sft...); err != nil {
		t.Fatalf("train sft: %v", err)
	}
	checkHFCheckpoint(t, st, latestStep(t, st, "checkpoints/gomlx-sft"), base)
	ppo := []string{"train", "ppo", "--engine=gomlx", "--data", root, "--sft", "checkpoints/gomlx-sft", "--out", "checkpoints/gomlx-ppo",
		"--updates=1", "--batch_size=2", "--group_size=1", "--advantage=critic", "--critic_warmup=1", "--gen_batch=2", "--minibatches=1",
		"--horizon=1", "--reward=format", "--max_new_tokens=32", "--base_storage=fp32"}
	if _, err := run(t, ppo...); err != nil {
		t.Fatalf("train ppo: %v", err)
	}
	checkHFCheckpoint(t, st, latestStep(t, st, "checkpoints/gomlx-ppo"), base)
	eval := append([]string{"evaluate", "--engine=gomlx", "--data", root, "--out", "eval-gomlx", "--report", filepath.Join(t.TempDir(), "report"),
		"--methods=sft+ppo", "--ppo", "checkpoints/gomlx-ppo", "--only=election-vote", "--per_task=1", "--env.max_steps=1",
		"--max_new_tokens=32", "--workers=1"}, budgets...)
	if _, err := run(t, eval...); err != nil {
		t.Fatalf("evaluate: %v", err)
	}
}

// latestStep is the latest checkpoint folder of dir.
func latestStep(t *testing.T, st store.Store, dir string) string {
	t.Helper()
	sub, err := policy.LatestCheckpoint(context.Background(), st, dir)
	if err != nil || sub == "" {
		t.Fatalf("no checkpoint in %s: %v", dir, err)
	}
	return sub
}

// engineOf loads a checkpoint's policy and engine, as evaluation does.
func engineOf(t *testing.T, st store.Store, sub string) policy.Engine {
	t.Helper()
	ck, err := policy.LoadCheckpoint(context.Background(), st, sub, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ck.OpenPolicy("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	e, _, err := ck.Engine(p, policy.EngineNative, true)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// checkHFCheckpoint checks a Hugging Face policy's checkpoint step: its
// policy.json names the base, its weights are only what trained, and its
// PEFT adapter gives the reference forward the engine's logits.
func checkHFCheckpoint(t *testing.T, st store.Store, sub, base string) {
	t.Helper()
	ck, err := policy.LoadCheckpoint(context.Background(), st, sub, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(base)
	if ck.Source == nil || ck.Source.Base != abs || ck.Model.LoRA == nil || ck.Model.LoRA.Rank != 4 {
		t.Fatalf("%s: source %+v, lora %+v; want base %s and rank 4", sub, ck.Source, ck.Model.LoRA, abs)
	}
	for _, w := range ck.Weights {
		if !strings.Contains(w.Name, "/lora_") && !strings.HasPrefix(w.Name, "/value_head/") {
			t.Errorf("%s holds base weight %s", sub, w.Name)
		}
	}
	bc, err := hf.Load(base)
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	ad, err := hf.ReadAdapter(filepath.Join(st.URI(""), sub, policy.AdapterFolder), bc.Arch)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := hf.NewReference(bc.Arch, bc.Weights, ad)
	if err != nil {
		t.Fatal(err)
	}
	compareLogits(t, sub+"'s PEFT adapter", engineOf(t, st, sub), ref)
}

// compareLogits compares an engine's logits with the reference's on a
// few tokens, relative to the largest logit.
func compareLogits(t *testing.T, what string, e policy.Engine, ref *hf.Reference) {
	t.Helper()
	toks := []int32{3, 17, 250, 99, 5, 401, 42, 7}
	n := len(toks)
	b := policy.Batch{B: 1, S: n, Tokens: toks, Positions: make([]int32, n), Segments: make([]int32, n)}
	idx := make([]int32, n)
	ids := make([]int, n)
	for i := range n {
		b.Positions[i], b.Segments[i], idx[i], ids[i] = int32(i), 1, int32(i), int(toks[i])
	}
	got, _, err := e.Logits(b, idx)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.Logits(ids)
	if err != nil {
		t.Fatal(err)
	}
	v := len(got) / n
	worst, scale := 0.0, 0.0
	for i := range want {
		for j, w := range want[i] {
			worst, scale = max(worst, math.Abs(float64(got[i*v+j])-w)), max(scale, math.Abs(w))
		}
	}
	if worst > 1e-4*max(scale, 1) {
		t.Errorf("%s: logits differ from the engine's by %g (largest %g)", what, worst, scale)
	}
}

// TestBringYourOwnModelRefusals: the new keys' bad inputs, each refused
// in one line naming the key or file, with nothing written.
func TestBringYourOwnModelRefusals(t *testing.T) {
	qwen := "hf:" + tinyCheckpoint("qwen2")
	data := t.TempDir()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"adapter without a Hugging Face policy", []string{"train", "sft", "--adapter", "x"}, "--adapter \"x\": is a PEFT adapter of a Hugging Face model: it needs policy hf:DIR or gguf:FILE, its base"},
		{"unknown policy", []string{"train", "ppo", "--policy", "gpt2:model"}, "--policy \"gpt2:model\": want mlerl (mlerl's own model), hf:DIR (a Hugging Face checkpoint folder) or gguf:FILE (a GGUF model file)"},
		{"hf: without a folder", []string{"train", "sft", "--policy", "hf:"}, "--policy \"hf:\": names no folder"},
		{"a shape key with a Hugging Face policy", []string{"train", "sft", "--policy", qwen, "--model.layers=2"}, "--model.layers 2: is the shape of mlerl's own model"},
		{"a tokenizer with a Hugging Face policy", []string{"train", "sft", "--policy", qwen, "--tokenizer=bytes"}, "--tokenizer \"bytes\": is mlerl's model's"},
		{"save_merged of mlerl's model", []string{"train", "sft", "--save_merged", "out"}, "--save_merged \"out\": writes a Hugging Face folder: it needs policy hf:DIR"},
		{"lora rank 0", []string{"train", "sft", "--policy", qwen, "--lora.rank=0"}, "--lora.rank 0: must be at least 1 (full_finetune trains every weight instead)"},
		{"bf16 base with full fine-tuning", []string{"train", "ppo", "--policy", qwen, "--full_finetune", "--base_storage=bf16"}, "--base_storage \"bf16\": stores a frozen base"},
		{"evaluate's policy without its method", []string{"evaluate", "--policy", qwen}, "--policy \"" + qwen + "\": is evaluated as method policy: add it to methods"},
		{"method policy without a policy", []string{"evaluate", "--methods=policy"}, "method policy evaluates the Hugging Face folder the policy key names: give --policy hf:DIR"},
		{"evaluate's adapter without a policy", []string{"evaluate", "--adapter", "x"}, "--adapter \"x\": is a PEFT adapter of a Hugging Face model"},
		{"evaluate's mlerl policy", []string{"evaluate", "--policy", "mlerl", "--methods=policy"}, "--policy \"mlerl\": names mlerl's own model, which is evaluated from its checkpoints"},
		{"experiment's adapter without a policy", []string{"experiment", "--adapter", "x"}, "--adapter \"x\": is a PEFT adapter of a Hugging Face model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append(slices.Clone(tt.args), "--data", data, "--print-config")
			_, err := run(t, args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("got  %v\nwant one line containing %q", err, tt.want)
			}
		})
	}
	if ents, _ := os.ReadDir(data); len(ents) > 0 {
		t.Errorf("refused configs wrote %d entries into the data root", len(ents))
	}
}

// TestBringYourOwnModelRunRefusals: what is refused once a stage opens the
// policy (a missing folder, an unsupported architecture, an adapter of
// another base, a save_merged folder in use), each in
// one line, before any checkpoint is written.
func TestBringYourOwnModelRunRefusals(t *testing.T) {
	if testing.Short() {
		t.Skip("makes a data root")
	}
	root := tinyRoot(t, 0)
	mistral := filepath.Join(t.TempDir(), "mistral")
	if err := os.CopyFS(mistral, os.DirFS(tinyCheckpoint("qwen2"))); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(mistral, "config.json")
	b, _ := os.ReadFile(cfgPath)
	os.WriteFile(cfgPath, []byte(strings.Replace(string(b), "Qwen2ForCausalLM", "MistralForCausalLM", 1)), 0o644)
	used := t.TempDir()
	os.WriteFile(filepath.Join(used, "config.json"), []byte("{}"), 0o644)
	qwen, llama := "hf:"+tinyCheckpoint("qwen2"), "hf:"+tinyCheckpoint("llama")
	lora := filepath.Join(tinyCheckpoint("qwen2"), "..", "..", "lora", "qwen2", "adapter")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"missing folder", []string{"train", "sft", "--policy", "hf:/no/such/model"}, "/no/such/model"},
		{"unsupported architecture", []string{"train", "sft", "--policy", "hf:" + mistral}, "config.json"},
		{"adapter of another base", []string{"train", "ppo", "--policy", llama, "--adapter", lora}, "the adapter must be made for"},
		{"save_merged into a folder in use", []string{"train", "sft", "--policy", qwen, "--save_merged", used}, "exists and is not empty"},
		{"evaluate an adapter of another base", []string{"evaluate", "--methods=policy", "--policy", llama, "--adapter", lora, "--out", "eval-bad"}, "the adapter must be made for"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append(slices.Clone(tt.args), "--data", root, "--out", "checkpoints/refused")
			if tt.args[0] == "evaluate" {
				args = append(slices.Clone(tt.args), "--data", root)
			}
			_, err := run(t, args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("got  %v\nwant one line containing %q", err, tt.want)
			}
			for _, dir := range []string{"checkpoints/refused", "eval-bad"} {
				if _, err := os.Stat(filepath.Join(root, dir)); err == nil {
					t.Errorf("%s was written", dir)
				}
			}
		})
	}
}
