package main

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/policy/gguf"
	"github.com/mlerl/mlerl/policy/hf"
)

// tinyGGUF is a tiny GGUF file of policy/gguf's testdata (SmolLM2's
// layout: llama, ChatML, mixed quantizations).
func tinyGGUF(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "policy", "gguf", "testdata", name+".gguf")
}

// TestGGUFThroughTheStages: a GGUF file as the policy of train sft (with
// save_merged), train ppo and evaluate's policy method, then the PPO
// checkpoint written out by `mlerl export gguf` as F32 and Q8_0: the F32
// file computes what the PPO policy computes, and loads back as a policy.
func TestGGUFThroughTheStages(t *testing.T) {
	if testing.Short() {
		t.Skip("trains and evaluates a policy")
	}
	root := tinyRoot(t, 0)
	st := store.NewLocal(root)
	base := tinyGGUF("llama")
	abs, _ := filepath.Abs(base)
	budgets := []string{"--model.ctx=1024", "--model.prompt_tokens=800", "--model.response_tokens=160"}
	merged := filepath.Join(t.TempDir(), "merged")
	sft := append([]string{"train", "sft", "--data", root, "--policy", "gguf:" + base, "--out", "checkpoints/gguf-sft",
		"--epochs=1", "--batch_rows=2", "--lora.rank=4", "--lora.alpha=8", "--base_storage=fp32", "--save_merged", merged}, budgets...)
	if _, err := run(t, sft...); err != nil {
		t.Fatalf("train sft: %v", err)
	}
	sub := latestStep(t, st, "checkpoints/gguf-sft")
	ck, err := policy.LoadCheckpoint(context.Background(), st, sub, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ck.Source == nil || ck.Source.Kind != policy.KindGGUF || ck.Source.Base != abs || ck.Source.FileSHA256 == "" {
		t.Fatalf("sft checkpoint's source %+v: want the GGUF file %s", ck.Source, abs)
	}
	mc, err := hf.Load(merged)
	if err != nil {
		t.Fatalf("merged folder: %v", err)
	}
	ref, err := hf.NewReference(mc.Arch, mc.Weights, nil)
	if err != nil {
		t.Fatal(err)
	}
	compareTinyLogits(t, "the merged folder of a GGUF base", engineOf(t, st, sub), ref)
	mc.Close()

	// A cut file is refused when the stage opens it, and nothing is
	// written.
	cut := filepath.Join(t.TempDir(), "cut.gguf")
	raw, _ := os.ReadFile(base)
	os.WriteFile(cut, raw[:len(raw)-1000], 0o644)
	bad := append([]string{"train", "sft", "--data", root, "--policy", "gguf:" + cut, "--out", "checkpoints/bad"}, budgets...)
	if _, err := run(t, bad...); err == nil || !strings.Contains(err.Error(), "truncated") || strings.Contains(err.Error(), "\n") {
		t.Errorf("train sft on a cut GGUF file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "checkpoints", "bad")); err == nil {
		t.Error("a refused run wrote checkpoints/bad")
	}

	ppo := []string{"train", "ppo", "--data", root, "--sft", "checkpoints/gguf-sft", "--out", "checkpoints/gguf-ppo",
		"--updates=1", "--batch_size=2", "--group_size=1", "--advantage=critic", "--critic_warmup=1", "--gen_batch=2", "--minibatches=1",
		"--horizon=1", "--reward=format", "--checkpoint_every=1", "--max_new_tokens=32", "--base_storage=fp32"}
	if _, err := run(t, ppo...); err != nil {
		t.Fatalf("train ppo: %v", err)
	}
	ppoSub := latestStep(t, st, "checkpoints/gguf-ppo")

	eval := append([]string{"evaluate", "--data", root, "--out", "eval-gguf", "--report", filepath.Join(t.TempDir(), "report"),
		"--methods=policy", "--policy", "gguf:" + base, "--adapter", filepath.Join(root, ppoSub, policy.AdapterFolder),
		"--only=election-vote", "--per_task=1", "--env.max_steps=1", "--max_new_tokens=32", "--workers=1"}, budgets...)
	if _, err := run(t, eval...); err != nil {
		t.Fatalf("evaluate: %v", err)
	}

	out := t.TempDir()
	for _, typ := range []string{"f32", "q8_0"} {
		file := filepath.Join(out, "ppo-"+typ+".gguf")
		if _, err := run(t, "export", "gguf", "--data", root, "--checkpoint", "checkpoints/gguf-ppo", "--out", file, "--type", typ); err != nil {
			t.Fatalf("export gguf %s: %v", typ, err)
		}
		gc, err := gguf.Load(file)
		if err != nil {
			t.Fatal(err)
		}
		if typ == "f32" {
			ref, err := hf.NewReference(gc.Arch, gc.Weights, nil)
			if err != nil {
				t.Fatal(err)
			}
			compareTinyLogits(t, "the exported F32 GGUF", engineOf(t, st, ppoSub), ref)
		}
		gc.Close()
	}
	// The exported file is a policy in its own right.
	p, err := policy.OpenGGUF(filepath.Join(out, "ppo-q8_0.gguf"), policy.Config{Ctx: 1024, PromptTokens: 800, ResponseTokens: 160}, policy.DefaultTuning(), "")
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	if _, err := run(t, "export", "gguf", "--data", root, "--checkpoint", "checkpoints/gguf-ppo", "--out", filepath.Join(out, "ppo-f32.gguf")); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("export over an existing file: %v", err)
	}
}

// TestGGUFRefusals: bad GGUF specs and files, refused in one line naming
// them before anything is written.
func TestGGUFRefusals(t *testing.T) {
	dir := t.TempDir()
	trunc := filepath.Join(dir, "cut.gguf")
	b, err := os.ReadFile(tinyGGUF("llama"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(trunc, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "sft", "--data", dir, "--policy", "gguf:", "--out", "ck"}, "gguf:FILE"},
		{[]string{"evaluate", "--data", dir, "--out", "x", "--methods=policy", "--policy", "gguf:"}, "gguf:FILE"},
		{[]string{"export", "gguf", "--policy", "gguf:" + trunc, "--out", out}, "truncated"},
	} {
		_, err := run(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v, want one line saying %q", c.args, err, c.want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the refusals left %d entries in %s", len(ents), dir)
	}
}

// compareTinyLogits is compareLogits on ids every tiny GGUF vocabulary
// holds.
func compareTinyLogits(t *testing.T, what string, e policy.Engine, ref *hf.Reference) {
	t.Helper()
	toks := []int32{3, 17, 250, 99, 5, 301, 42, 7}
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
