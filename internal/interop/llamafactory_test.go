package interop

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/dataset"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/policy/hf"
	"github.com/mlerl/mlerl/schemas"
)

// TestLlamaFactoryReadsExport proves that LLaMA-Factory 0.9.5, given the
// export folder as its dataset_dir (dataset_info.json as mlerl wrote it),
// keeps every row of every registered entry, and that for mlerl_sft_policy
// and mlerl_sft the tokens it trains on are the checkpoint's own chat
// template of the system column and human turn followed by the gpt turn
// and its end of turn, token for token: no role dropped or renamed, no
// system prompt lost or replaced, nothing truncated at the cutoff_len
// mlerl's stats declare (each file's longest whole example, which must
// also be LLaMA-Factory's longest). For mlerl_sft_policy it proves more:
// the prompt LLaMA-Factory trains on is, token for token, the prompt
// mlerl's Hugging Face policy reads for the same state (policy.OpenHF on
// the checkpoint, EncodePrompt of the compact prompt), so an adapter
// trained on it is evaluated by `mlerl evaluate --policy hf:` on what it
// learned. For mlerl_sft_tools (tool_format default) it proves every tool
// of the tools column reaches the prompt.
func TestLlamaFactoryReadsExport(t *testing.T) {
	python(t)
	data := demoData(t)
	full := exportOf(t, data, "sft_examples", dataset.ShareGPTFile)
	pol := exportOf(t, data, "sft_examples", dataset.ShareGPTPolicyFile)
	for _, ex := range []exported{full, pol} {
		if ex.Stats.ExampleTokens == nil {
			t.Fatalf("%s: the stats have no whole-example lengths: rebuild with this binary", ex.Path)
		}
	}
	policyName := dataset.LlamaFactoryName + dataset.PolicySuffix
	var prompts []string
	for i, r := range shareGPTRecords(t, pol.Path) {
		if r.System != policy.SystemPrompt {
			t.Fatalf("%s line %d: system %q, want policy.SystemPrompt", pol.Path, i+1, r.System)
		}
		prompts = append(prompts, r.Conversations[0].Value)
	}
	cutoff := map[string]int{dataset.LlamaFactoryName: int(full.Stats.ExampleTokens.Max), policyName: int(pol.Stats.ExampleTokens.Max)}
	spec := map[string]any{"tool_format": "default", "cutoff_len": cutoff, "policy_prompts": map[string]any{policyName: policyPrompts(t, prompts)}}
	out := runPy(t, nil, "lf_dataset.py", checkpoint(), "qwen", full.Dir, jsonFile(t, spec))
	var got struct {
		Datasets map[string]struct {
			FileRows      int `json:"file_rows"`
			Rows          int
			LongestTokens int `json:"longest_tokens"`
		}
	}
	if err := json.Unmarshal(lastLine(out), &got); err != nil {
		t.Fatalf("lf_dataset.py printed %q: %v", out, err)
	}
	for name, ex := range map[string]exported{dataset.LlamaFactoryName: full, dataset.LlamaFactoryName + "_tools": full, policyName: pol} {
		if d, ok := got.Datasets[name]; !ok || d.Rows != ex.Stats.Rows || d.FileRows != ex.Stats.Rows {
			t.Errorf("%s: LLaMA-Factory kept %d of %d rows (registered: %v), the export has %d", name, d.Rows, d.FileRows, ok, ex.Stats.Rows)
		}
	}
	for name, c := range cutoff {
		if l := got.Datasets[name].LongestTokens; l != c {
			t.Errorf("%s: LLaMA-Factory's longest example is %d tokens, mlerl's stats say %d", name, l, c)
		}
	}
	t.Logf("summary: LLaMA-Factory kept all %d rows of %s, %s and %s_tools; prompts equal the checkpoint's chat template, %s's also mlerl's policy prompt; the loss covers the answers; longest %d and %d tokens = the cutoff_len mlerl declares",
		pol.Stats.Rows, policyName, dataset.LlamaFactoryName, dataset.LlamaFactoryName, policyName, cutoff[policyName], cutoff[dataset.LlamaFactoryName])
}

// policyPrompts returns, for each compact prompt, the token ids mlerl's
// Hugging Face policy on the tiny checkpoint reads (policy.EncodePrompt:
// the system message and the prompt through the checkpoint's chat
// template, with the generation prompt), with a prompt budget no demo
// prompt reaches, so that none is shortened.
func policyPrompts(t *testing.T, prompts []string) [][]int32 {
	t.Helper()
	p, err := policy.OpenHF(checkpoint(), policy.Config{Ctx: 4096, PromptTokens: 4000, ResponseTokens: 64}, policy.DefaultTuning(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	out := make([][]int32, len(prompts))
	for i, s := range prompts {
		if out[i], err = p.EncodePrompt(s); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// shareGPTRecords reads a ShareGPT export.
func shareGPTRecords(t *testing.T, path string) []dataset.ShareGPTRecord {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []dataset.ShareGPTRecord
	for i, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var r dataset.ShareGPTRecord
		if err := json.Unmarshal(line, &r); err != nil || len(r.Conversations) != 2 {
			t.Fatalf("%s line %d: %v (%d turns)", path, i+1, err, len(r.Conversations))
		}
		out = append(out, r)
	}
	return out
}

// jsonFile writes v as JSON to a file of the test's temporary folder and
// returns its path.
func jsonFile(t *testing.T, v any) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "spec.json")
	if err := os.WriteFile(path, []byte(jsonText(v)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// loraDir is where TestLlamaFactoryTrainsLoRA leaves the adapter
// LLaMA-Factory wrote, for TestEvaluateLlamaFactoryAdapter.
func loraDir(data string) string { return filepath.Join(data, "interop", "llamafactory-lora") }

// TestLlamaFactoryTrainsLoRA proves that `llamafactory-cli train` runs
// supervised LoRA training on CPU on the unedited export (its folder as
// dataset_dir, dataset mlerl_sft_policy, the prompt mlerl gives the
// policy, cutoff_len from mlerl's stats) for
// three steps with finite losses, and that the adapter it wrote is one
// mlerl reads: policy/hf's ReadAdapter accepts it for the base checkpoint,
// it is not the untrained zero update, and the Reference forward pass with
// it gives the logits PEFT gives (so an evaluation in mlerl runs the model
// LLaMA-Factory trained).
func TestLlamaFactoryTrainsLoRA(t *testing.T) {
	py := python(t)
	data := demoData(t)
	ex := exportOf(t, data, "sft_examples", dataset.ShareGPTPolicyFile)
	out := loraDir(data)
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`model_name_or_path: %s
stage: sft
do_train: true
finetuning_type: lora
lora_target: all
lora_rank: 4
lora_alpha: 8
dataset: %s
dataset_dir: %s
template: qwen
cutoff_len: %d
preprocessing_num_workers: 1
overwrite_cache: true
output_dir: %s
per_device_train_batch_size: 1
gradient_accumulation_steps: 1
learning_rate: 1.0e-2
max_steps: 3
logging_steps: 1
save_strategy: "no"
report_to: none
bf16: false
`, checkpoint(), dataset.LlamaFactoryName+dataset.PolicySuffix, ex.Dir, int(ex.Stats.ExampleTokens.Max), out)
	yaml := filepath.Join(t.TempDir(), "lora.yaml")
	if err := os.WriteFile(yaml, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cli := filepath.Join(filepath.Dir(py), "llamafactory-cli")
	cmd := exec.Command(cli, "train", yaml)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1", "HF_DATASETS_OFFLINE=1", "OMP_NUM_THREADS=1", "WANDB_MODE=disabled",
		"HF_DATASETS_CACHE="+filepath.Join(cmd.Dir, "hf-datasets"))
	if log, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("llamafactory-cli train: %v\n%s", err, tail(log, 40))
	}
	losses := trainerLosses(t, filepath.Join(out, "trainer_log.jsonl"))
	if len(losses) != 3 {
		t.Fatalf("trainer_log.jsonl has %d steps with a loss, want 3", len(losses))
	}

	// mlerl reads the adapter as PEFT applies it.
	c, err := hf.Load(checkpoint())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ad, err := hf.ReadAdapter(out, c.Arch)
	if err != nil {
		t.Fatalf("policy/hf cannot read the adapter LLaMA-Factory wrote: %v", err)
	}
	trained := 0.0
	for _, m := range ad.Modules {
		for _, b := range m.B {
			trained = max(trained, math.Abs(float64(b)))
		}
	}
	if trained == 0 {
		t.Fatalf("every lora_B is zero: the adapter is the untrained one")
	}
	ids, err := c.EncodeChat([]hf.Message{{Role: "user", Content: "Task: improve train.py. Score: initial 0.66."}}, true)
	if err != nil {
		t.Fatal(err)
	}
	var peft [][]float64
	if err := json.Unmarshal(runPy(t, nil, "peft_logits.py", checkpoint(), out, jsonText(ids)), &peft); err != nil {
		t.Fatal(err)
	}
	withAd, err := hf.NewReference(c.Arch, c.Weights, ad)
	if err != nil {
		t.Fatal(err)
	}
	base, err := hf.NewReference(c.Arch, c.Weights, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := withAd.Logits(ids)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := base.Logits(ids)
	if err != nil {
		t.Fatal(err)
	}
	agree, moved := maxDiff(got, peft), maxDiff(plain, peft)
	// float32 PEFT against the float64 reference on a 32-wide model.
	if agree > 1e-4 || moved < 100*agree {
		t.Fatalf("logits with the adapter: max |mlerl - PEFT| %.3g (want <= 1e-4); without it %.3g (want far more: the adapter must matter)", agree, moved)
	}
	t.Logf("summary: llamafactory-cli trained LoRA r%d on %s for 3 steps (loss %.3f -> %.3f); policy/hf reads the adapter, logits equal PEFT's within %.1g (the adapter moves them %.2g)",
		ad.R, dataset.LlamaFactoryName+dataset.PolicySuffix, losses[0], losses[2], agree, moved)
}

// TestEvaluateLlamaFactoryAdapter proves that mlerl evaluates the adapter
// LLaMA-Factory wrote on the tiny base as it is, with no conversion:
// `mlerl evaluate --methods policy --policy hf:BASE --adapter DIR --only
// TASK` loads it (policy/hf reads LLaMA-Factory's adapter_config.json and
// tensors, checked against the base) and writes one eval_results row of
// method policy for the held-out task, with at least one step taken. Its
// model.prompt_tokens covers twice the longest prompt of the verl
// validation file (the held-out tasks' states in the policy's prompt,
// counted with this checkpoint), so the policy reads its prompts whole,
// as LLaMA-Factory trained it on them (TestLlamaFactoryReadsExport). The
// tiny random model learns nothing in three steps: the row's score and
// actions are reported, not judged.
func TestEvaluateLlamaFactoryAdapter(t *testing.T) {
	python(t)
	data := demoData(t)
	bin := mlerlBin(t)
	lora := loraDir(data)
	if _, err := os.Stat(filepath.Join(lora, hf.AdapterConfigFile)); err != nil {
		t.Skipf("skipped: no LLaMA-Factory adapter at %s (TestLlamaFactoryTrainsLoRA writes it)", lora)
	}
	task := heldOutTask(t, data)
	const promptTokens, responseTokens = 2048, 64
	if val := exportOf(t, data, "rl_states", dataset.VerlValFile).Stats; val.Prompt != dataset.PromptPolicy || 2*int(val.PromptTokens.Max) > promptTokens {
		t.Fatalf("%s: prompt form %s, longest prompt %.0f tokens: want the policy's, at most half of model.prompt_tokens %d", dataset.VerlValFile, val.Prompt, val.PromptTokens.Max, promptTokens)
	}
	cmd := exec.Command(bin, "evaluate", "--data", data, "--methods", "policy", "--policy", "hf:"+checkpoint(), "--adapter", lora,
		"--only", task, "--per_task", "1", "--env.max_steps", "3", "--max_new_tokens", "64", "--workers", "1",
		"--model.prompt_tokens", fmt.Sprint(promptTokens), "--model.response_tokens", fmt.Sprint(responseTokens), "--model.ctx", fmt.Sprint(promptTokens+responseTokens+1),
		"--out", "eval_interop", "--report", t.TempDir())
	if log, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, tail(log, 30))
	}
	ctx := context.Background()
	st, err := store.Open(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	m, err := datasets.ResolveIn(ctx, st, "eval_interop")
	if err != nil {
		t.Fatalf("evaluate wrote no eval_interop dataset: %v", err)
	}
	rows, err := datasets.ReadAll[schemas.EvalResult](ctx, st, m, schemas.EvalResults)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("eval_interop v%d has %d rows, want 1 (one trajectory of one task)", m.Version, len(rows))
	}
	r := rows[0]
	if r.Method != "policy" || r.TaskID != task || r.Steps < 1 || len(r.Actions) != int(r.Steps) {
		t.Fatalf("row: method %q, task %q, %d steps, %d actions; want policy, %s, at least one step, one action per step", r.Method, r.TaskID, r.Steps, len(r.Actions), task)
	}
	t.Logf("summary: mlerl evaluate ran the tiny base with LLaMA-Factory's adapter on %s: eval_interop v%d, 1 row, %s %.4f -> %.4f in %d steps (%s)",
		task, m.Version, r.Metric, r.MInit, r.FinalScore, r.Steps, strings.Join(r.Actions, ", "))
}

// heldOutTask is the first held-out task of the demo's verl validation
// file.
func heldOutTask(t *testing.T, data string) string {
	t.Helper()
	ex := exportOf(t, data, "rl_states", dataset.VerlValFile)
	rows := verlRows(t, ex.Path)
	if len(rows) == 0 {
		t.Fatalf("%s is empty", ex.Path)
	}
	return rows[0].ExtraInfo.TaskID
}

// trainerLosses reads the losses LLaMA-Factory logged per step.
func trainerLosses(t *testing.T, path string) []float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []float64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var rec struct{ Loss *float64 }
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if rec.Loss != nil {
			if math.IsNaN(*rec.Loss) || math.IsInf(*rec.Loss, 0) {
				t.Fatalf("%s: loss %v", path, *rec.Loss)
			}
			out = append(out, *rec.Loss)
		}
	}
	return out
}

func maxDiff(a, b [][]float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return math.Inf(1)
		}
		for j := range a[i] {
			d = max(d, math.Abs(a[i][j]-b[i][j]))
		}
	}
	return d
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// lastLine is the last non-empty line of a script's output (its JSON;
// libraries print before it).
func lastLine(b []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return lines[len(lines)-1]
}
