package train

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/schemas"
)

// TestActionSpan: the span actionSpan finds decodes to the action's name
// on a byte policy and on two Hugging Face tokenizers (Llama's and
// Qwen3's; SmolLM2's where MLERL_SMOLLM2_GGUF names its file), and a response without an Action line has none.
func TestActionSpan(t *testing.T) {
	all := make([]int, 256)
	for i := range all {
		all[i] = i
	}
	budgets := policy.Config{Ctx: 321, PromptTokens: 256, ResponseTokens: 64}
	pols := map[string]*policy.Policy{"bytes": policy.NewMLERL(policy.Config{ResponseTokens: 200}, policy.NewVocab(all), policy.ByteTokenizer{})}
	for _, name := range []string{"llama", "qwen3"} {
		p, err := policy.OpenHF(filepath.Join("..", "policy", "hf", "testdata", "ckpt", name), budgets, policy.DefaultTuning(), "")
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		pols[name] = p
	}
	// The real SmolLM2 tokenizer too, where make real-model fetched it.
	if path := os.Getenv("MLERL_SMOLLM2_GGUF"); path != "" {
		p, err := policy.OpenGGUF(path, budgets, policy.DefaultTuning(), "")
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		pols["smollm2"] = p
	}
	cases := []struct{ response, name string }{
		{TerseResponse("Reflection: x\nThought: y\nAction: Undo Edit Script\nAction Input: {\"script_name\": \"train.py\"}"), "Undo Edit Script"},
		{"Action: Final Answer\nAction Input: {\"final_answer\": \"done\"}", "Final Answer"},
		{"Reflection: -\nThought: -\nAction: Execute Script", "Execute Script"},
		{"Reflection: -\nAction Input: {}", ""},
		{"Reflection: -\nThought: -\nAction:   \nAction Input: {}", ""},
	}
	for pname, pol := range pols {
		for _, c := range cases {
			ids, err := pol.EncodeResponse(c.response)
			if err != nil {
				t.Fatal(err)
			}
			start, end, ok := actionSpan(pol, c.response, ids)
			if c.name == "" {
				if ok {
					t.Errorf("%s: %q: got span %d-%d (%q), want none", pname, c.response, start, end, pol.Decode(ids[start:end]))
				}
				continue
			}
			if !ok {
				t.Errorf("%s: %q: no span, want the tokens of %q", pname, c.response, c.name)
				continue
			}
			if got := strings.TrimSpace(pol.Decode(ids[start:end])); got != c.name {
				t.Errorf("%s: %q: span %d-%d decodes to %q, want %q", pname, c.response, start, end, got, c.name)
			}
		}
	}
}

// TestPackBatchesActionWeight: the targets of an action span are marked
// and weigh ActWeight times the example's weight; the others keep it.
func TestPackBatchesActionWeight(t *testing.T) {
	exs := []encoded{
		{Tokens: []int32{2, 10, 11, 12, 13, 3}, Response: 2, Weight: 0.5, Act: [2]int{3, 5}, ActWeight: 4},
		{Tokens: []int32{2, 14, 15, 3}, Response: 2, Act: [2]int{2, 3}}, // ActWeight 0: 1
	}
	b := packBatches(exs, []int{0, 1}, 2, 8)[0]
	// Row 0: example 0's targets at flat 1..4 are tokens 2..5; tokens 3
	// and 4 (flat 2, 3) are its action. Row 1: example 1's token 2 (flat 9).
	wantW := []float32{0, 0.5, 2, 2, 0.5, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0}
	wantA := []bool{false, false, true, true, false, false, false, false, false, true, false, false, false, false, false, false}
	for i := range wantW {
		if b.Weights[i] != wantW[i] || b.Act[i] != wantA[i] {
			t.Fatalf("flat %d: got weight %v act %v, want %v %v", i, b.Weights[i], b.Act[i], wantW[i], wantA[i])
		}
	}
	_, _, w, act := b.targets()
	if want := []bool{false, true, true, false, true, false}; !slices.Equal(act, want) || len(w) != len(want) {
		t.Errorf("targets: got weights %v act %v, want act %v", w, act, want)
	}
}

// TestSFTLossActionNLL: the action statistic is the unweighted NLL of the
// marked targets, and weighting leaves the gradient exact.
func TestSFTLossActionNLL(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const vocab = 5
	logits := randomRows(r, 3*vocab)
	targets, weights, act := []int32{1, 4, 2}, []float32{1, 6, 1}, []bool{false, true, false}
	var st actionNLL
	sftLossStats(targets, weights, act, vocab, &st)(logits, nil, make([]float32, len(logits)), nil)
	row := logits[vocab : 2*vocab]
	z := 0.0
	for _, v := range row {
		z += math.Exp(float64(v))
	}
	want := math.Log(z) - float64(row[4])
	if st.N != 1 || math.Abs(st.Sum-want) > 1e-5 {
		t.Errorf("got action NLL %v over %d, want %v over 1", st.Sum, st.N, want)
	}
	gradCheck(t, "sft action-weighted", sftLossStats(targets, weights, act, vocab, nil), logits, make([]float32, 3))
	if !math.IsNaN((actionNLL{}).Mean()) {
		t.Error("the mean of no action token must be NaN, not 0")
	}
}

// writeDecisionExamples commits examples whose response is an action
// chosen by the prompt's last word, in the terse format.
func writeDecisionExamples(t *testing.T, root string, n int) {
	t.Helper()
	var rows []schemas.SFTExample
	for i := range n {
		prompt, action := "ran: better", "Final Answer\nAction Input: {\"final_answer\": \"ok\"}"
		if i%2 == 1 {
			prompt, action = "ran: worse", "Undo Edit Script\nAction Input: {\"script_name\": \"train.py\"}"
		}
		split := schemas.HeldIn
		if i%5 == 4 {
			split = schemas.HeldOut
		}
		rows = append(rows, schemas.SFTExample{ExampleID: fmt.Sprint(i), TaskID: "t", Split: split,
			Prompt: prompt, Response: "Reflection: -\nThought: -\nAction: " + action})
	}
	commitSFTExamples(t, root, rows)
}

// TestSFTActionWeight: train sft logs the loss of the action names
// (losses/sft_action per update, losses/val_action per epoch), and
// weighting them lowers it against the same run unweighted, at the same
// seed and number of updates; action_weight must be a positive number.
func TestSFTActionWeight(t *testing.T) {
	ctx := context.Background()
	finalAction := func(weight float64) float64 {
		root := t.TempDir()
		writeDecisionExamples(t, root, 40)
		cfg := tinySFTConfig(root)
		cfg.Model.ResponseTokens = 64
		cfg.Model.Ctx = 128
		cfg.ActionWeight = weight
		cfg.Epochs = 2
		var log bytes.Buffer
		if err := runSFT(ctx, cfg, &log); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(log.String(), "have no action name") {
			t.Errorf("weight %v: every response has an Action line, yet the log says:\n%s", weight, log.String())
		}
		var last, val float64
		for _, m := range readMetrics(t, root, cfg.Out) {
			if v, ok := m["losses/sft_action"].(float64); ok {
				last = v
			}
			if v, ok := m["losses/val_action"].(float64); ok {
				val = v
			}
		}
		if last == 0 || val == 0 {
			t.Fatalf("weight %v: no losses/sft_action or losses/val_action in the metrics", weight)
		}
		return val
	}
	plain, weighted := finalAction(1), finalAction(8)
	t.Logf("held-out loss of the action names: %.4f unweighted, %.4f at action_weight 8", plain, weighted)
	if !(weighted < plain) {
		t.Errorf("held-out loss of the action names: %.4f with action_weight 8, %.4f with 1: want it lower when weighted", weighted, plain)
	}
	for _, bad := range []float64{0, -1, math.Inf(1), math.NaN()} {
		cfg := tinySFTConfig(t.TempDir())
		cfg.ActionWeight = bad
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "action_weight") {
			t.Errorf("action_weight %v: got %v, want a refusal naming action_weight", bad, err)
		}
	}
}

// TestActionAccuracy: an action name counts as right when every one of
// its tokens is its row's most likely, and names are the runs of marked
// targets.
func TestActionAccuracy(t *testing.T) {
	const vocab = 4
	// Five targets: a two-token name (positions 1-2), an unmarked token, a
	// one-token name (position 4). Each row's logits favour token 0 except
	// where set.
	row := func(best int) []float32 {
		r := []float32{1, 0, 0, 0}
		if best != 0 {
			r[0], r[best] = 0, 1
		}
		return r
	}
	targets, act := []int32{2, 3, 1, 0, 2}, []bool{false, true, true, false, true}
	weights := []float32{1, 1, 1, 1, 1}
	tests := []struct {
		name  string
		bests []int
		right int
	}{
		{"both names right", []int{0, 3, 1, 0, 2}, 2},
		{"the first name's second token wrong", []int{0, 3, 2, 0, 2}, 1},
		{"the first name's first token wrong", []int{0, 0, 1, 0, 2}, 1},
		{"none right", []int{2, 1, 3, 1, 0}, 0},
	}
	for _, tt := range tests {
		var logits []float32
		for _, b := range tt.bests {
			logits = append(logits, row(b)...)
		}
		var st actionNLL
		sftLossStats(targets, weights, act, vocab, &st)(logits, nil, make([]float32, len(logits)), nil)
		if st.Names != 2 || st.Right != tt.right || st.N != 3 {
			t.Errorf("%s: %d of %d names right over %d tokens, want %d of 2 over 3", tt.name, st.Right, st.Names, st.N, tt.right)
		}
	}
	// A tie is not a prediction.
	var st actionNLL
	sftLossStats([]int32{1}, []float32{1}, []bool{true}, 2, &st)([]float32{0.5, 0.5}, nil, make([]float32, 2), nil)
	if st.Right != 0 || st.Names != 1 {
		t.Errorf("tie: %d of %d right, want 0 of 1", st.Right, st.Names)
	}
	if !math.IsNaN((actionNLL{}).Accuracy()) {
		t.Error("the accuracy of no action name must be NaN, not 0")
	}
}

// TestSFTValidatesAtMaxSteps: a run stopped by max_steps inside an epoch
// validates the model it leaves, once, also when it is run again.
func TestSFTValidatesAtMaxSteps(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	writeDecisionExamples(t, root, 40)
	cfg := tinySFTConfig(root)
	cfg.Model.ResponseTokens = 64
	cfg.Model.Ctx = 128
	cfg.Epochs = 1
	cfg.MaxSteps = 3 // of about 8 in the epoch
	for run := range 2 {
		var log bytes.Buffer
		if err := runSFT(ctx, cfg, &log); err != nil {
			t.Fatal(err)
		}
		if run == 0 && !strings.Contains(log.String(), "update 3: validation loss") {
			t.Errorf("no validation at max_steps in the log:\n%s", log.String())
		}
	}
	var vals []map[string]any
	for _, m := range readMetrics(t, root, cfg.Out) {
		if _, ok := m["losses/val"]; ok {
			vals = append(vals, m)
		}
	}
	if len(vals) != 1 || vals[0]["step"] != 3.0 {
		t.Fatalf("validation records %v, want one at update 3", vals)
	}
	if a, ok := vals[0]["charts/val_action_accuracy"].(float64); !ok || a < 0 || a > 1 {
		t.Errorf("charts/val_action_accuracy = %v, want a share", vals[0]["charts/val_action_accuracy"])
	}
}
