package dataset

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/policy/hf"
	"github.com/mlerl/mlerl/schemas"
)

// policyPromptCheckpoints are the tiny checkpoints of policy/hf/testdata,
// one per chat format mlerl renders: Qwen2.5's ChatML with a default
// system prompt, SmolLM2's ChatML, Llama 3.1's header with its date, and
// Qwen3's ChatML with its think blocks (the tiny Qwen3 with Qwen3's own
// template, from policy/hf/testdata/chat).
func policyPromptCheckpoints(t *testing.T) map[string]string {
	t.Helper()
	ckpt := filepath.Join(repoRoot(), "policy", "hf", "testdata", "ckpt")
	qwen3 := filepath.Join(t.TempDir(), "qwen3-chat")
	if err := os.CopyFS(qwen3, os.DirFS(filepath.Join(ckpt, "qwen3"))); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(repoRoot(), "policy", "hf", "testdata", "chat", "qwen3.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct{ Template string }
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(qwen3, "chat_template.jinja"), []byte(c.Template), 0o644); err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"qwen2":      filepath.Join(ckpt, "qwen2"),
		"llama":      filepath.Join(ckpt, "llama"),
		"llama3":     filepath.Join(ckpt, "llama3"),
		"qwen3-chat": qwen3,
	}
}

// TestPolicyPromptIsThePolicys proves that the exports' policy prompt
// (sharegpt_policy.jsonl, which dataset_info.json registers as
// mlerl_sft_policy, and verl's default prompt form) is the prompt mlerl
// gives a Hugging Face policy, token for token, for each chat format
// mlerl renders. The trainers render an export's messages with the
// checkpoint's chat template (LLaMA-Factory's template for the system
// column and human turn, verl's apply_chat_template on the prompt
// column); hf.Checkpoint.EncodeChat is that template (checked against
// apply_chat_template on policy/hf/testdata/chat), and the policy's own
// EncodePrompt is what `mlerl evaluate --policy hf:DIR` and `train sft`
// with --policy hf: read. So:
//
//   - the template's rendering of the export's prompt with the
//     generation prompt is the policy's prompt (Qwen3: the policy's adds
//     the empty think block enable_thinking false adds, which
//     LLaMA-Factory's qwen3 template and verl add with that option);
//   - the template's rendering of the whole conversation (what a
//     supervised trainer trains on) starts with the policy's prompt
//     followed by the policy's encoding of the answer: the model learns
//     to answer the tokens it will be prompted with, as mlerl's own SFT
//     of the policy would have it.
//
// The full prompt (mlerl_sft) fails the first check: the reason the
// policy's file exists.
func TestPolicyPromptIsThePolicys(t *testing.T) {
	rows := sftRows()
	// A compact prompt as the renderer writes it, over several lines.
	rows = append(rows, schemas.SFTExample{
		ExampleID: "ex-2", TaskID: "digits", Split: schemas.HeldIn, TrajectoryID: "tr-2", StepIndex: 1,
		Prompt: "Task: digits. Metric: accuracy, higher is better.\nScore: initial 0.91, current 0.91, best none yet. Step 2 of 6.\nPlan:\n1. Scale the features\n" +
			"Script train.py (editable sections):\n# === model ===\nmodel = LogisticRegression(C=1.0)\n# === end model ===\nRecent steps:\n1. List Files -> success, reward 0.00: train.py\n" +
			"Answer with Reflection, Thought, Action, Action Input.\n",
		FullPrompt: renderedFull("Research Problem (digits): improve accuracy.\nStep 1:\nAction: List Files"),
		Response:   "Reflection: the script runs.\nThought: scale.\nAction: Edit Script (AI)\nAction Input: {\"script_name\": \"train.py\", \"edit_instruction\": \"Scale the features\"}",
	})
	states := rlRows()
	for name, dir := range policyPromptCheckpoints(t) {
		t.Run(name, func(t *testing.T) {
			p, err := policy.OpenHF(dir, policy.Config{Ctx: 480, PromptTokens: 400, ResponseTokens: 64}, policy.DefaultTuning(), "")
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ck, err := hf.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			render := func(msgs []ChatMessage, gen bool) []int32 {
				t.Helper()
				m := make([]hf.Message, len(msgs))
				for i, c := range msgs {
					m[i] = hf.Message{Role: c.Role, Content: c.Content}
				}
				ids, err := ck.EncodeChat(m, gen)
				if err != nil {
					t.Fatal(err)
				}
				out := make([]int32, len(ids))
				for i, id := range ids {
					out[i] = int32(id)
				}
				return out
			}
			thinkOff := func(ids []int32) []int32 { // enable_thinking false
				if ck.Chat.Kind != hf.ChatMLQwen3 {
					return ids
				}
				open, _ := ck.Tokenizer.ID("<think>")
				end, _ := ck.Tokenizer.ID("</think>")
				nl := func() []int32 {
					var o []int32
					for _, id := range ck.Tokenizer.EncodeOrdinary("\n\n") {
						o = append(o, int32(id))
					}
					return o
				}
				return slices.Concat(ids, []int32{int32(open)}, nl(), []int32{int32(end)}, nl())
			}
			opts := DefaultShareGPTOptions()
			opts.Prompt = PromptPolicy
			for _, ex := range rows {
				rec, err := ShareGPT(ex, opts)
				if err != nil {
					t.Fatal(err)
				}
				want, err := p.EncodePrompt(ex.Prompt)
				if err != nil {
					t.Fatal(err)
				}
				if full := render(rec.PromptMessages(), true); len(full) >= 400 {
					t.Fatalf("%s: the prompt is %d tokens, over the policy's budget: EncodePrompt shortened it", ex.ExampleID, len(full))
				}
				if got := thinkOff(render(rec.PromptMessages(), true)); !slices.Equal(got, want) {
					t.Errorf("%s: the template renders the export's prompt as\n%v\nthe policy reads\n%v", ex.ExampleID, got, want)
				}
				resp, err := p.EncodeResponse(ex.Response)
				if err != nil {
					t.Fatal(err)
				}
				whole := render(append(rec.PromptMessages(), ChatMessage{Role: "assistant", Content: rec.Conversations[1].Value}), false)
				if want := slices.Concat(want, resp); len(whole) < len(want) || !slices.Equal(whole[:len(want)], want) {
					t.Errorf("%s: the conversation the trainer trains on\n%v\ndoes not start with the policy's prompt and answer\n%v", ex.ExampleID, whole, want)
				}
				fullRec, err := ShareGPT(ex, DefaultShareGPTOptions())
				if err != nil {
					t.Fatal(err)
				}
				if slices.Equal(thinkOff(render(fullRec.PromptMessages(), true)), want) {
					t.Errorf("%s: the full prompt renders as the policy's: the check proves nothing", ex.ExampleID)
				}
			}
			for i, s := range states {
				r, err := Verl(s, int64(i), DefaultVerlOptions())
				if err != nil {
					t.Fatal(err)
				}
				want, err := p.EncodePrompt(s.Prompt)
				if err != nil {
					t.Fatal(err)
				}
				if got := thinkOff(render(r.Prompt, true)); !slices.Equal(got, want) {
					t.Errorf("verl row %d: apply_chat_template renders\n%v\nthe policy reads\n%v", i, got, want)
				}
			}
		})
	}
}
