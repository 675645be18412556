package policy

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/internal/catalog"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/internal/tasks"
	"github.com/mlerl/mlerl/internal/tokenizer"
)

// randomEngine is an engine whose logits are random: what a constrained
// decoder must survive. Only decoding is implemented.
type randomEngine struct {
	Engine
	cfg   Config
	rng   *rand.Rand
	scale float64
}

func (e *randomEngine) Config() Config { return e.cfg }
func (e *randomEngine) NewDecoder(rows int) (Decoder, error) {
	return &randomDecoder{e: e, rows: rows}, nil
}

type randomDecoder struct {
	e    *randomEngine
	rows int
}

func (d *randomDecoder) logits() []float32 {
	out := make([]float32, d.rows*d.e.cfg.Vocab)
	for i := range out {
		out[i] = float32(d.e.rng.NormFloat64() * d.e.scale)
	}
	return out
}
func (d *randomDecoder) Prefill([][]int32) ([]float32, error) { return d.logits(), nil }
func (d *randomDecoder) Extend([][]int32) ([]float32, error)  { return d.logits(), nil }
func (d *randomDecoder) Close()                               {}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// grammarWorld is a built-in task's state and a vocabulary over the Qwen
// tokenizer (the real multi-byte tokens the trie walks).
type grammarWorld struct {
	gen   Generator
	state agents.State
	task  *tasks.Task
}

func newGrammarWorld(t testing.TB) grammarWorld {
	t.Helper()
	qwen, err := tokenizer.Default()
	if err != nil {
		t.Skipf("Qwen tokenizer not installed (make setup): %v", err)
	}
	task, err := tasks.Load(filepath.Join(repoRoot(), "tasks", "wine-cultivar"))
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join(task.WorkspacePath(), "train.py"))
	if err != nil {
		t.Fatal(err)
	}
	var corpus []string
	for _, i := range catalog.All() {
		corpus = append(corpus, i.Text)
	}
	corpus = append(corpus, string(script), GrammarText())
	v := BuildVocab(qwen, corpus, 1)
	st := agents.State{TaskID: task.ID, Title: task.Title, Metric: task.Metric, Direction: task.Direction,
		Script: string(script), Files: []string{"test.csv", "train.csv", "train.py", "valid.csv"},
		Modality: task.Modality, TaskType: task.TaskType, Plan: []string{"Standardise the numeric features with a StandardScaler before the model"}}
	cfg := Config{Vocab: v.Size(), DModel: 8, Heads: 2, Layers: 1, Ctx: 4096, PromptTokens: 16, ResponseTokens: 200}
	return grammarWorld{gen: Generator{Engine: &randomEngine{cfg: cfg}, Policy: NewMLERL(cfg, v, qwen)}, state: st, task: task}
}

// constrainedSamples decodes n responses under random logits.
func (w grammarWorld) constrainedSamples(t testing.TB, seed uint64, n int, oneLine bool, scale float64) []Sample {
	t.Helper()
	w.gen.Engine.(*randomEngine).rng = rand.New(rand.NewPCG(seed, 1))
	w.gen.Engine.(*randomEngine).scale = scale
	gc := NewGrammarContext(w.state, nil, oneLine)
	prompts := make([][]int32, n)
	for i := range prompts {
		prompts[i] = []int32{BosID}
	}
	samples, err := w.gen.Generate(prompts, GenerateOptions{Temperature: 1, Seed: seed,
		Constrain: func(int) Constraint { return w.gen.ActionGrammar(gc) }})
	if err != nil {
		t.Fatal(err)
	}
	return samples
}

// checkResponse parses a constrained response and checks it against what
// the grammar enumerates.
func checkResponse(t testing.TB, w grammarWorld, s Sample) env.Action {
	t.Helper()
	text := w.gen.Policy.Decode(s.Tokens)
	a, err := env.Parse(text)
	if err != nil {
		t.Fatalf("constrained response does not parse: %v\n%s", err, text)
	}
	if !s.Stopped || s.Tokens[len(s.Tokens)-1] != EosID {
		t.Fatalf("constrained response did not end with EOS within the budget:\n%s", text)
	}
	lines := strings.Count(w.state.Script, "\n")
	switch a.Name {
	case env.ExecuteScript, env.UndoEditScript, env.InspectScriptLines, env.EditScriptSegment:
		if a.ScriptName != "train.py" {
			t.Errorf("script %q is not a workspace script", a.ScriptName)
		}
	case env.EditScriptAI:
		if !slices.Contains(NewGrammarContext(w.state, nil, false).Ideas, a.EditInstruction) {
			t.Errorf("instruction %q is not an applicable idea", a.EditInstruction)
		}
	case env.UnderstandFile:
		if !slices.Contains(w.state.Files, a.FileName) {
			t.Errorf("file %q is not in the workspace", a.FileName)
		}
	}
	if a.Name == env.InspectScriptLines && (a.EndLine > lines || a.EndLine-a.StartLine >= env.MaxInspectLines) {
		t.Errorf("inspect %d-%d of a %d-line script", a.StartLine, a.EndLine, lines)
	}
	if a.Name == env.EditScriptSegment && (a.StartLine > lines+1 || a.EndLine > lines) {
		t.Errorf("edit %d-%d of a %d-line script", a.StartLine, a.EndLine, lines)
	}
	return a
}

// FuzzConstrainedDecoding: under random logits the constrained decoder
// only ever produces responses that the strict parser accepts, with
// enumerated values from the workspace.
func FuzzConstrainedDecoding(f *testing.F) {
	for seed := range uint64(8) {
		f.Add(seed, seed%2 == 0, 1.0+float64(seed), uint8(seed*40))
	}
	f.Fuzz(func(t *testing.T, seed uint64, oneLine bool, scale float64, budget uint8) {
		if scale < 0 || scale > 100 || scale != scale {
			t.Skip()
		}
		w := newGrammarWorld(t)
		// From a tight budget (every choice constrained by it) to a roomy one.
		w.gen.Engine.(*randomEngine).cfg.ResponseTokens = 40 + int(budget)
		for _, s := range w.constrainedSamples(t, seed, 4, oneLine, scale) {
			checkResponse(t, w, s)
		}
	})
}

// TestConstrainedActionsAreAccepted: constrained responses under random
// logits, carried out in a real environment on the task's workspace, are
// never refused (no format error, no invalid action, no invalid edit).
func TestConstrainedActionsAreAccepted(t *testing.T) {
	w := newGrammarWorld(t)
	w.state.Undoable = []string{} // a fresh workspace: nothing to undo
	python, err := sandbox.FindPython("")
	if err != nil {
		t.Skipf("no task interpreter: %v", err)
	}
	ctx := context.Background()
	st := store.NewLocal(t.TempDir())
	ws, priv, err := tasks.UploadTrees(ctx, st, w.task)
	if err != nil {
		t.Fatal(err)
	}
	spec := env.Spec{TaskID: w.task.ID, Metric: w.task.Metric, Direction: w.task.Direction, Modality: w.task.Modality, TaskType: w.task.TaskType,
		MInit: 0.7, MBest: 1, TimeLimit: time.Minute, WorkspaceTree: ws, PrivateTree: priv}
	ecfg := env.DefaultConfig()
	ecfg.Python, ecfg.Runner, ecfg.WorkDir = python, noRun{}, t.TempDir()
	counts := map[string]int{}
	for seed := range uint64(6) {
		for _, s := range w.constrainedSamples(t, 100+seed, 8, seed%2 == 1, 2) {
			a := checkResponse(t, w, s)
			e, err := env.New(ctx, ecfg, spec, st)
			if err != nil {
				t.Fatal(err)
			}
			r, err := e.Step(ctx, w.gen.Policy.Decode(s.Tokens))
			e.Close()
			if err != nil {
				t.Fatal(err)
			}
			counts[a.Name]++
			switch r.Outcome {
			case env.OutcomeFormatError, env.OutcomeInvalidAction, env.OutcomeInvalidEdit:
				if a.Name == env.CopyFile {
					continue // a copy's destination is free text
				}
				t.Errorf("%s was refused (%s): %s", a.Name, r.Outcome, r.Detail)
			}
		}
	}
	t.Logf("actions: %v", counts)
	if len(counts) < 5 {
		t.Errorf("random logits chose only %d kinds of action: %v", len(counts), counts)
	}
}

// TestUndoOnlyWhenUndoable: Undo Edit Script is offered only when the
// state has an edit to undo, and then only for the edited scripts.
func TestUndoOnlyWhenUndoable(t *testing.T) {
	w := newGrammarWorld(t)
	count := func(undoable []string) (undos int, scripts map[string]bool) {
		w.state.Undoable = undoable
		scripts = map[string]bool{}
		for seed := range uint64(12) {
			for _, s := range w.constrainedSamples(t, 300+seed, 8, seed%2 == 0, 2) {
				if a := checkResponse(t, w, s); a.Name == env.UndoEditScript {
					undos++
					scripts[a.ScriptName] = true
				}
			}
		}
		return undos, scripts
	}
	if n, _ := count([]string{}); n != 0 {
		t.Errorf("nothing to undo, yet %d responses undo", n)
	}
	n, scripts := count([]string{"train.py"})
	if n == 0 || len(scripts) != 1 || !scripts["train.py"] {
		t.Errorf("train.py undoable: %d undos of %v, want some, all of train.py", n, scripts)
	}
}

// noRun is a runner that runs nothing (the acceptance test checks the
// refusals before any execution).
type noRun struct{}

func (noRun) Run(context.Context, sandbox.Request) (sandbox.Result, error) {
	return sandbox.Result{Outcome: sandbox.Success}, nil
}
func (noRun) Close() error { return nil }

// TestJumpForwardAndBudget: fixed text costs no sampling, and a tight
// budget still ends in a complete response.
func TestJumpForwardAndBudget(t *testing.T) {
	w := newGrammarWorld(t)
	for _, s := range w.constrainedSamples(t, 7, 4, false, 1) {
		if s.Forced == 0 {
			t.Errorf("no token was forced in %q", w.gen.Policy.Decode(s.Tokens))
		}
	}
	w.gen.Engine.(*randomEngine).cfg.ResponseTokens = 40
	for _, s := range w.constrainedSamples(t, 8, 4, true, 5) {
		if len(s.Tokens) > 40 {
			t.Errorf("%d tokens, budget 40", len(s.Tokens))
		}
		checkResponse(t, w, s)
	}
}

// TestGrammarTokenizesLikeTheTokenizer: a forced field name after a
// sampled token is tokenised as the tokenizer would tokenise the whole
// text.
func TestGrammarTokenizesLikeTheTokenizer(t *testing.T) {
	w := newGrammarWorld(t)
	c := w.gen.ActionGrammar(NewGrammarContext(w.state, nil, true)).(*actionConstraint)
	forced, err := c.Forced(100)
	if err != nil {
		t.Fatal(err)
	}
	// Forced tokens are a prefix of how the tokenizer splits a whole
	// response, and the mask then allows the tokenizer's next token (the
	// space goes with what follows it: ":" then " -").
	whole, _ := w.gen.Policy.Encode("Reflection: -\nThought: -\nAction: List Files\n")
	if len(forced) == 0 || len(forced) >= len(whole) || !slices.Equal(forced, whole[:len(forced)]) {
		t.Fatalf("first forced tokens %v, want a prefix of the tokenizer's %v", forced, whole)
	}
	for _, tok := range forced {
		if err := c.Accept(tok); err != nil {
			t.Fatal(err)
		}
	}
	mask := NewBitset(w.gen.Policy.Size())
	if err := c.Allowed(mask, 100); err != nil {
		t.Fatal(err)
	}
	if !mask.Has(whole[len(forced)]) {
		t.Errorf("the tokenizer's next token %q is not allowed after the forced %q", w.gen.Policy.Decode(whole[len(forced):len(forced)+1]), w.gen.Policy.Decode(forced))
	}
	space, _ := w.gen.Policy.Encode(" ")
	for _, tok := range space {
		if err := c.Accept(tok); err != nil {
			t.Fatal(err)
		}
	}
	mask = NewBitset(w.gen.Policy.Size())
	if err := c.Allowed(mask, 100); err != nil {
		t.Fatal(err)
	}
	if mask.Has(EosID) || mask.Count() < 100 {
		t.Errorf("free text after Reflection: allows %d tokens (EOS %v)", mask.Count(), mask.Has(EosID))
	}
	nl, _ := w.gen.Policy.Encode("\n")
	if mask.Has(nl[0]) {
		t.Error("an empty Reflection may not end")
	}
}

// TestGrammarOffersNoIdeaThatChangesNothing: an idea already applied (a
// replace op applied again would leave the script as it is) is not
// offered; when no idea would change the script, Edit Script (AI) is not
// offered at all; an unknown script (no state) still allows any
// instruction.
func TestGrammarOffersNoIdeaThatChangesNothing(t *testing.T) {
	w := newGrammarWorld(t)
	before := NewGrammarContext(w.state, nil, true)
	var applied catalog.Idea
	for _, text := range before.Ideas {
		idea, _ := catalog.Lookup(text)
		out, err := catalog.Apply(w.state.Script, idea.Edit)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := catalog.Apply(out, idea.Edit); err == nil && again == out {
			applied = idea
			w.state.Script = out
			break
		}
	}
	if applied.ID == "" {
		t.Fatal("no offered idea is idempotent on wine-cultivar's script; the fixture needs another task")
	}
	after := NewGrammarContext(w.state, nil, true)
	if slices.Contains(after.Ideas, applied.Text) || !slices.Contains(before.Ideas, applied.Text) {
		t.Fatalf("%s: offered before %v, after it was applied %v", applied.ID, slices.Contains(before.Ideas, applied.Text), slices.Contains(after.Ideas, applied.Text))
	}
	offers := func(gc GrammarContext, action string) bool {
		for _, a := range newGrammar(gc).head[len(newGrammar(gc).head)-1].options {
			if strings.TrimSuffix(a, "\n") == action {
				return true
			}
		}
		return false
	}
	if !offers(after, env.EditScriptAI) {
		t.Fatal("Edit Script (AI) not offered though ideas remain")
	}
	none := after
	none.Ideas = []string{}
	if offers(none, env.EditScriptAI) || !offers(none, env.ExecuteScript) {
		t.Fatal("with no idea that changes the script, Edit Script (AI) is still offered (or Execute Script is not)")
	}
	if gc := NewGrammarContext(agents.State{}, nil, true); gc.Ideas != nil || !offers(gc, env.EditScriptAI) {
		t.Fatal("without a script, any instruction should be allowed")
	}
}
