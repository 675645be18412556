package train

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/policy/hf"
	"github.com/mlerl/mlerl/policy/native"
)

// Hugging Face policies with a frozen base stored in bfloat16, through
// the stages, on every CPU: the storage and the products are named, not
// left to auto, and a machine without AVX512_BF16 runs them on native's
// plain-Go bf16 kernel.

// tinyHF is policy/hf's tiny checkpoint folder name (Qwen2: 2 layers of
// width 32, heads of 8 values, a 640-id vocabulary, float32 weights).
func tinyHF(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "policy", "hf", "testdata", "ckpt", name)
}

// tinyHFDepth is the longest chain of bf16 products from the tiny Qwen2's
// input to a logit with adapters on every target (native.BF16Tolerance):
// q, o, gate and down through their adapters (two products each; heads
// of 8 values keep the attention's products in float32), then the LM
// head.
const tinyHFDepth = 8*2 + 1

// TestSFTOnBF16Base: train sft of a Hugging Face policy with LoRA on a
// bfloat16 base and bf16 products logs and records them (the checkpoint's
// model.json and config.json; a resumed run keeps them, whatever its
// base_storage says), and --save_merged writes the merged folder
// from the base folder's own float32 weights plus the trained adapters'
// update: the reference forward on it gives the logits of the trained
// adapters on a float32 base to float32 rounding, and the logits of the
// engine that trained them (bf16 base and products) within
// native.BF16Tolerance. With MLERL_SFT_ROUNDTRIP_DIR set, the adapter,
// the merged folder and the engines' logits go there for
// `scripts/hf_reference.py check DIR` (PEFT and transformers).
func TestSFTOnBF16Base(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	writeSFTExamples(t, root, 16)
	merged := filepath.Join(t.TempDir(), "merged")
	cfg := DefaultSFTConfig()
	cfg.Data, cfg.Policy, cfg.Response = root, "hf:"+tinyHF("qwen2"), policy.ResponseFull
	cfg.Model.Ctx, cfg.Model.PromptTokens, cfg.Model.ResponseTokens = 256, 160, 32
	cfg.Tuning.LoRA.Rank, cfg.Tuning.LoRA.Alpha = 4, 8
	cfg.Tuning.BaseStorage, cfg.Matmul = policy.MatmulBF16, policy.MatmulBF16
	cfg.Optim.LR, cfg.Optim.WarmupSteps = 2e-2, 0
	cfg.Epochs, cfg.BatchRows, cfg.SaveMerged, cfg.MaxSteps = 1, 2, merged, 1
	var log bytes.Buffer
	if err := runSFT(ctx, cfg, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	// Resumed with base_storage fp32 asked for, the run keeps the storage
	// its checkpoint's model.json recorded, and its config.json says so.
	cfg.MaxSteps, cfg.Tuning.BaseStorage = 0, policy.MatmulFP32
	if err := runSFT(ctx, cfg, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	for _, want := range []string{"base bf16", "(bf16 products)", "wrote the merged model"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the log does not say %q:\n%s", want, log.String())
		}
	}
	st := store.NewLocal(root)
	sub, err := policy.LatestCheckpoint(ctx, st, cfg.Out)
	if err != nil || sub == "" {
		t.Fatalf("no checkpoint (%v)", err)
	}
	var saved SFTConfig
	ck, err := policy.LoadCheckpoint(ctx, st, sub, &saved, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ck.Model.BaseStorage != policy.MatmulBF16 || saved.Tuning.BaseStorage != policy.MatmulBF16 || saved.Matmul != policy.MatmulBF16 {
		t.Errorf("model.json base storage %q, config.json base_storage %q and matmul %q; want bf16 each",
			ck.Model.BaseStorage, saved.Tuning.BaseStorage, saved.Matmul)
	}

	ids, half, full, want := mergedLogits(t, ck, merged)
	moved := relDiff(folderLogits(t, tinyHF("qwen2"), ids), want)
	dFull, dHalf := relDiff(full, want), relDiff(half, want)
	tol := native.BF16Tolerance(tinyHFDepth)
	t.Logf("merged folder vs the adapters on a float32 base %.3g, vs the bf16 engine that trained them %.3g (allowed %.3g); the adapters moved the logits by %.3g",
		dFull, dHalf, tol, moved)
	if moved < 1e-3 {
		t.Fatalf("training moved the logits by %.3g only: the merge would check nothing", moved)
	}
	if dFull > 1e-4 {
		t.Errorf("the merged folder's logits differ from the trained adapters' on the float32 base by %.3g: not merged from the folder's float32 weights", dFull)
	}
	if dHalf > tol {
		t.Errorf("the merged folder's logits differ from the bf16 engine's by %.3g, more than bf16's %.3g", dHalf, tol)
	}

	if dir := os.Getenv("MLERL_SFT_ROUNDTRIP_DIR"); dir != "" {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.CopyFS(filepath.Join(dir, "adapter"), os.DirFS(filepath.Join(root, sub, policy.AdapterFolder))); err != nil {
			t.Fatal(err)
		}
		if err := os.CopyFS(filepath.Join(dir, "merged"), os.DirFS(merged)); err != nil {
			t.Fatal(err)
		}
		out, _ := json.Marshal(map[string]any{"checkpoint": "ckpt/qwen2", "input_ids": [][]int{ids},
			"logits": [][][]float64{half}, "tolerance": tol, "merged_tolerance": tol, "logits_fp32": [][][]float64{full}})
		if err := os.WriteFile(filepath.Join(dir, "go_logits.json"), out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPPOOnBF16BaseKLStartsAtZero: train ppo from a Hugging Face folder
// with fresh adapters on a bfloat16 base: the policy and the frozen
// reference are built alike from the resolved config (logged, and
// recorded in the checkpoint), so before the first update moves the
// policy its KL to the reference is exactly 0; its --save_merged folder
// is merged from the folder's float32 weights, as train sft's.
func TestPPOOnBF16BaseKLStartsAtZero(t *testing.T) {
	root := t.TempDir()
	setupPPO(t, root)
	cfg := tinyPPOConfig(root)
	cfg.Policy = "hf:" + tinyHF("qwen2")
	cfg.Budgets = policy.Budgets{Ctx: 256, PromptTokens: 160, ResponseTokens: 8}
	cfg.Tuning.LoRA.Rank, cfg.Tuning.LoRA.Alpha, cfg.Tuning.BaseStorage = 4, 8, policy.MatmulBF16
	// One minibatch and one epoch: the loss is computed once, before
	// the step that moves the policy.
	cfg.Updates, cfg.Minibatches, cfg.UpdateEpochs = 1, 1, 1
	cfg.KLCoef, cfg.Optim.LR, cfg.MaxNewTokens = 0.1, 1e-12, 4
	cfg.SaveMerged = filepath.Join(t.TempDir(), "merged")
	var log bytes.Buffer
	if err := RunPPOWith(context.Background(), cfg, pickD, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "base bf16") {
		t.Errorf("the log does not say the base is stored in bf16:\n%s", log.String())
	}
	m := readMetrics(t, root, cfg.Out)[0]
	if kl := m["losses/kl_ref"].(float64); kl != 0 || m["losses/decision_tokens"].(float64) == 0 {
		t.Errorf("kl_ref %g over %v decision tokens, want exactly 0 before the policy moves", kl, m["losses/decision_tokens"])
	}
	st := store.NewLocal(root)
	sub, err := policy.LatestCheckpoint(context.Background(), st, cfg.Out)
	if err != nil || sub == "" {
		t.Fatalf("no checkpoint (%v)", err)
	}
	var saved PPOConfig
	ck, err := policy.LoadCheckpoint(context.Background(), st, sub, &saved, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ck.Model.BaseStorage != policy.MatmulBF16 || saved.Tuning.BaseStorage != policy.MatmulBF16 {
		t.Errorf("model.json base storage %q, config.json base_storage %q; want bf16", ck.Model.BaseStorage, saved.Tuning.BaseStorage)
	}
	// --save_merged from a bf16 base, as train sft's (TestSFTOnBF16Base).
	_, half, full, want := mergedLogits(t, ck, cfg.SaveMerged)
	tol := native.BF16Tolerance(tinyHFDepth)
	if d := relDiff(full, want); d > 1e-4 {
		t.Errorf("ppo's merged folder differs from its adapters on a float32 base by %.3g", d)
	}
	if d := relDiff(half, want); d > tol {
		t.Errorf("ppo's merged folder differs from its bf16 engine by %.3g, more than bf16's %.3g", d, tol)
	}
}

// hfToks are 24 token ids of the tiny checkpoints: more positions than
// native's 8-row cut-off, so a bf16 engine's products run in bf16 as in
// training.
var hfToks = []int32{601, 453, 301, 198, 82, 66, 262, 68, 280, 518, 602, 198, 601, 463, 596, 365, 47, 75, 365, 529, 16, 13, 260, 81}

// mergedLogits returns hfToks as ids and the logits at each of them of:
// the checkpoint ck's adapters on its base stored in bf16 with bf16
// products (as a bf16 run trained them), the same on a float32 base with
// float32 products, and the reference forward of the merged folder.
func mergedLogits(t *testing.T, ck *policy.Checkpoint, merged string) (ids []int, half, full, ref [][]float64) {
	t.Helper()
	for _, id := range hfToks {
		ids = append(ids, int(id))
	}
	engine := func(storage string) [][]float64 {
		pol, err := ck.OpenPolicy("")
		if err != nil {
			t.Fatal(err)
		}
		defer pol.Close()
		pol.Model.BaseStorage = storage
		e, _, err := ck.Engine(pol, policy.EngineNative, false)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		if _, err := policy.SetMatmul(e, storage); err != nil {
			t.Fatal(err)
		}
		n := len(hfToks)
		b := policy.Batch{B: 1, S: n, Tokens: hfToks, Positions: make([]int32, n), Segments: make([]int32, n)}
		idx := make([]int32, n)
		for i := range n {
			b.Positions[i], b.Segments[i], idx[i] = int32(i), 1, int32(i)
		}
		got, _, err := e.Logits(b, idx)
		if err != nil {
			t.Fatal(err)
		}
		v := len(got) / n
		out := make([][]float64, n)
		for i := range out {
			for _, x := range got[i*v : (i+1)*v] {
				out[i] = append(out[i], float64(x))
			}
		}
		return out
	}
	return ids, engine(policy.MatmulBF16), engine(policy.MatmulFP32), folderLogits(t, merged, ids)
}

// folderLogits is the reference forward's logits of the Hugging Face
// folder dir at each position of ids.
func folderLogits(t *testing.T, dir string, ids []int) [][]float64 {
	t.Helper()
	c, err := hf.Load(dir)
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	defer c.Close()
	ref, err := hf.NewReference(c.Arch, c.Weights, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := ref.Logits(ids)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// relDiff is max |a - b| / max(max |b|, 1).
func relDiff(a, b [][]float64) float64 {
	worst, scale := 0.0, 1.0
	for i := range b {
		for j, w := range b[i] {
			worst, scale = max(worst, math.Abs(a[i][j]-w)), max(scale, math.Abs(w))
		}
	}
	return worst / scale
}
