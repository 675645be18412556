package train

import (
	"context"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/internal/blobs"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/schemas"
)

// snapshotAfterEdit makes a task workspace in st, edits its train.py with
// Edit Script Segment (so that there is an edit to undo) and returns the
// live environment, the snapshot of its state and that of the state
// before the edit.
func snapshotAfterEdit(t *testing.T, st store.Store) (*env.Env, string, string) {
	t.Helper()
	ctx := context.Background()
	script := "# === model ===\nthreshold = 0.0\n# === end model ===\nprint('VAL_METRIC accuracy 0.5')\n"
	ws, err := blobs.PutTree(ctx, st, blobs.Files{"train.py": {Data: []byte(script), Mode: 0o644}, "data/train.csv": {Data: []byte("x,y\n1,0\n"), Mode: 0o644}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := blobs.PutTree(ctx, st, blobs.Files{"grade.py": {Data: []byte("print('{}')\n"), Mode: 0o644}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := env.Spec{TaskID: "wine-cultivar", Title: "Wine", Modality: "tabular", TaskType: "multiclass-classification", Metric: "accuracy",
		Direction: schemas.HigherIsBetter, MInit: 0.5, MBest: 1, TimeLimit: 10 * time.Second, WorkspaceTree: ws, PrivateTree: priv}
	python, err := sandbox.FindPython("")
	if err != nil {
		t.Skipf("no task interpreter: %v", err)
	}
	cfg := env.DefaultConfig()
	cfg.WorkDir, cfg.Python = t.TempDir(), python
	e, err := env.New(ctx, cfg, spec, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	ref0, err := e.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.Step(ctx, "Reflection: -\nThought: -\nAction: Edit Script Segment\nAction Input: {\"script_name\": \"train.py\", \"start_line_number\": 2, \"end_line_number\": 2, \"edit_text\": \"threshold = 0.5\"}")
	if err != nil || r.Outcome != env.OutcomeSuccess {
		t.Fatalf("edit: %v %s %s", err, r.Outcome, r.Detail)
	}
	ref, err := e.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return e, ref, ref0
}

// TestPPOAndEvaluationBuildTheSameGrammar: for the same state, the
// grammar PPO builds from the snapshot equals the one evaluation builds
// from the live environment (the files, the script's lines, the ideas,
// and the scripts Undo may name: PPO used to leave Undoable unknown and
// offer Undo where evaluation did not).
func TestPPOAndEvaluationBuildTheSameGrammar(t *testing.T) {
	st := store.NewLocal(t.TempDir())
	e, ref, ref0 := snapshotAfterEdit(t, st)
	plan := []string{"Scale the features with StandardScaler"}
	live := policy.NewGrammarContext(agents.StateOf(e, plan, 15), plan, true)
	if len(live.Undoable) != 1 || live.Undoable[0] != "train.py" {
		t.Fatalf("evaluation's grammar: Undoable %v, want [train.py]", live.Undoable)
	}
	facts, err := newStateFacts(st, EnvRewardConfig())
	if err != nil {
		t.Skip(err)
	}
	prompt := agents.Compact(agents.StateOf(e, plan, 15), 4000, agents.ApproxCounter)
	got, err := facts.grammar(context.Background(), schemas.RLState{StateID: "s", TaskID: "wine-cultivar", SnapshotRef: ref, Prompt: prompt}, true, false)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, live) {
		t.Fatalf("PPO's grammar context\n%+v\ndiffers from evaluation's\n%+v", got, live)
	}
	// Before the edit there is nothing to undo: both say so (empty, not
	// unknown), and the grammar then does not offer Undo Edit Script.
	got0, err := facts.grammar(context.Background(), schemas.RLState{StateID: "s0", SnapshotRef: ref0}, true, false)
	if err != nil {
		t.Fatal(err)
	}
	if got0.Undoable == nil || len(got0.Undoable) != 0 {
		t.Fatalf("the initial state's Undoable is %#v, want empty (not nil: unknown)", got0.Undoable)
	}
	if strings.Contains(grammarNames(t, got0), env.UndoEditScript) {
		t.Errorf("PPO's grammar offers %s with nothing to undo", env.UndoEditScript)
	}
}

// grammarNames samples the action names a grammar lets through: the
// choices after "Action: " (by walking a byte vocabulary's masks).
func grammarNames(t *testing.T, gc policy.GrammarContext) string {
	t.Helper()
	var ids []int
	for c := 0; c < 256; c++ {
		ids = append(ids, c)
	}
	vocab := policy.NewVocab(ids)
	gen := policy.Generator{Policy: policy.NewMLERL(policy.Config{Vocab: vocab.Size()}, vocab, policy.ByteTokenizer{})}
	var names []string
	for _, name := range env.ActionNames() {
		c := gen.ActionGrammar(gc)
		text := "Reflection: -\nThought: -\nAction: " + name + "\n"
		ok := true
		for _, b := range []byte(text) {
			mask := policy.NewBitset(vocab.Size())
			if err := c.Allowed(mask, 1000); err != nil { // a budget that never binds: every action fits
				t.Fatal(err)
			}
			id, err := vocab.Encode(policy.ByteTokenizer{}, string([]byte{b}))
			if err != nil || len(id) != 1 || !mask.Has(id[0]) {
				ok = false
				break
			}
			if err := c.Accept(id[0]); err != nil {
				ok = false
				break
			}
		}
		if ok {
			names = append(names, name)
		}
	}
	return strings.Join(names, ", ")
}

// TestFreeTextIsLeftOutOfTheLoss: under the action grammar, tokens the
// policy writes inside Reflection, Thought or a free argument are marked
// free; with free_text mask they take no part in the loss (no gradient
// reaches their logits), with train they do; with force the grammar
// writes "-" for Reflection and Thought and the policy samples none.
func TestFreeTextIsLeftOutOfTheLoss(t *testing.T) {
	var ids []int
	for c := 32; c < 127; c++ {
		ids = append(ids, c)
	}
	ids = append(ids, '\n')
	vocab := policy.NewVocab(ids)
	cfg := policy.Config{Vocab: vocab.Size(), DModel: 32, Heads: 2, Layers: 1, Ctx: 160, PromptTokens: 20, ResponseTokens: 130}
	eng, err := policy.NewEngine(policy.EngineNative, cfg, policy.InitWeights(cfg, 3))
	if err != nil {
		t.Fatal(err)
	}
	gen := policy.Generator{Engine: eng, Policy: policy.NewMLERL(cfg, vocab, policy.ByteTokenizer{})}
	gc := policy.GrammarContext{Files: []string{"train.py"}, Undoable: []string{}, OneLine: true}
	prompt, err := policy.EncodePrompt(vocab, policy.ByteTokenizer{}, cfg, "state")
	if err != nil {
		t.Fatal(err)
	}
	sampleWith := func(gc policy.GrammarContext) []policy.Sample {
		out, err := gen.Generate([][]int32{prompt, prompt, prompt, prompt}, policy.GenerateOptions{Temperature: 1, MaxNewTokens: 120, Seed: 5,
			Constrain: func(int) policy.Constraint { return gen.ActionGrammar(gc) }})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	samples := sampleWith(gc)
	var batch []*sample
	free := 0
	for _, s := range samples {
		text := vocab.Decode(policy.ByteTokenizer{}, s.Tokens)
		refl := strings.TrimPrefix(strings.SplitN(text, "\n", 2)[0], "Reflection: ")
		n := 0
		for k := range s.Tokens {
			if s.IsFree(k) {
				n++
			}
		}
		if n < len(refl) {
			t.Fatalf("%q: %d free tokens, fewer than its Reflection's %d characters", text, n, len(refl))
		}
		free += n
		batch = append(batch, &sample{Prompt: s.Prompt, Action: s.Tokens, LogP: s.LogProbs, Masks: s.Masks, Free: s.Free})
	}
	for _, mode := range []string{FreeTextMask, FreeTextTrain} {
		run := &ppoRun{cfg: PPOConfig{FreeText: mode}, policy: eng}
		mb := run.pack(batch)
		for i := range mb.toks {
			mb.toks[i].Advantage, mb.toks[i].Weight = 1, 1
		}
		logits, _, err := eng.Logits(mb.batch, mb.idx)
		if err != nil {
			t.Fatal(err)
		}
		dl := make([]float32, len(logits))
		var st ppoStats
		ppoLoss(mb.toks, nil, nil, ppoCoefs{ClipCoef: 0.2, KLCoef: 0.1}, cfg.Vocab, &st)(logits, nil, dl, nil)
		skipped, graded := 0, 0
		for i, tk := range mb.toks {
			g := 0.0
			for _, x := range dl[i*cfg.Vocab : (i+1)*cfg.Vocab] {
				g += float64(x * x)
			}
			switch {
			case tk.Free && mode == FreeTextMask:
				if !tk.Skip || g != 0 {
					t.Fatalf("mask: a free token is in the loss (skip %v, |grad|^2 %g)", tk.Skip, g)
				}
				skipped++
			case tk.Free && mode == FreeTextTrain && g > 0:
				graded++
			}
		}
		if mode == FreeTextMask && (skipped != free || st[metricEntropyFree] <= 0) {
			t.Errorf("mask: %d of %d free tokens skipped, free-text entropy %v", skipped, free, st[metricEntropyFree])
		}
		if mode == FreeTextTrain && graded == 0 {
			t.Errorf("train: no free token has a gradient")
		}
	}
	gc.DashThoughts = true
	for _, s := range sampleWith(gc) {
		text := vocab.Decode(policy.ByteTokenizer{}, s.Tokens)
		if !strings.HasPrefix(text, "Reflection: -\nThought: -\nAction: ") {
			t.Errorf("force: response %q", text)
		}
		for k, tok := range s.Tokens {
			if s.IsFree(k) && strings.Index(text, "Action Input") > len(vocab.Decode(policy.ByteTokenizer{}, s.Tokens[:k+1])) {
				t.Errorf("force: token %d (%q) before the action input is free text", k, vocab.Decode(policy.ByteTokenizer{}, []int32{tok}))
			}
		}
	}
}

// TestLearnerReadsTheSamplersLastStepMasks: a state on the last step of
// PPO's environment (an expert state restored under a shorter
// env.max_steps than the rollout's, as run 15's recipe does) is sampled
// through the sampler's own path (ppoRun.generate): its grammar offers no
// edit and no undo, no sampled action is one, the masks the learner packs
// are the sampler's, and the log-probabilities the learner recomputes
// under them equal the sampler's (ratio 1). The masks are where the last
// step shows: after "Action: E" only Execute Script is left, where a
// grammar without the flag would still offer Edit.
func TestLearnerReadsTheSamplersLastStepMasks(t *testing.T) {
	st := store.NewLocal(t.TempDir())
	_, ref, _ := snapshotAfterEdit(t, st) // 1 step taken, an edit to undo
	state := schemas.RLState{StateID: "s", TaskID: "wine-cultivar", SnapshotRef: ref, Prompt: "state"}
	ctx := context.Background()
	for _, c := range []struct {
		maxSteps int
		want     bool
	}{{2, true}, {3, false}, {15, false}} {
		ecfg := EnvRewardConfig()
		ecfg.MaxSteps = c.maxSteps
		facts, err := newStateFacts(st, ecfg)
		if err != nil {
			t.Skip(err)
		}
		gc, err := facts.grammar(ctx, state, true, true)
		if err != nil {
			t.Fatal(err)
		}
		if gc.NoEdit != c.want || gc.NoUndo != c.want {
			t.Errorf("env.max_steps %d after 1 step: got NoEdit %v NoUndo %v, want %v", c.maxSteps, gc.NoEdit, gc.NoUndo, c.want)
		}
	}

	ecfg := EnvRewardConfig()
	ecfg.MaxSteps = 2
	facts, err := newStateFacts(st, ecfg)
	if err != nil {
		t.Skip(err)
	}
	gc, err := facts.grammar(ctx, state, true, true)
	if err != nil {
		t.Fatal(err)
	}
	if names := grammarNames(t, gc); strings.Contains(names, "Edit Script") || strings.Contains(names, env.UndoEditScript) {
		t.Errorf("the last step's grammar offers %s", names)
	}
	var ids []int
	for c := 32; c < 127; c++ {
		ids = append(ids, c)
	}
	ids = append(ids, '\n')
	vocab := policy.NewVocab(ids)
	mcfg := policy.Config{Vocab: vocab.Size(), DModel: 32, Heads: 2, Layers: 1, Ctx: 160, PromptTokens: 20, ResponseTokens: 130}
	eng, err := policy.NewEngine(policy.EngineNative, mcfg, policy.InitWeights(mcfg, 11))
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultPPOConfig()
	cfg.GroupSize, cfg.GenBatch, cfg.MaxNewTokens, cfg.FreeText, cfg.Seed = 8, 64, 120, FreeTextForce, 3
	r := &ppoRun{cfg: cfg, states: []schemas.RLState{state}, policy: eng, pol: policy.NewMLERL(mcfg, vocab, policy.ByteTokenizer{}), oneLine: true,
		facts: facts, rng: rand.New(rand.NewPCG(1, 2))}
	groups, err := r.generate(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var batch []*sample
	for _, g := range groups {
		batch = append(batch, g.Samples...)
	}
	id := func(b byte) int32 {
		v, err := vocab.Encode(policy.ByteTokenizer{}, string([]byte{b}))
		if err != nil || len(v) != 1 {
			t.Fatalf("byte %q: %v %v", b, v, err)
		}
		return v[0]
	}
	actions := map[string]int{}
	checked := 0
	for _, s := range batch {
		a, err := env.Parse(s.Text)
		if err != nil {
			t.Fatalf("a constrained action does not parse: %v\n%s", err, s.Text)
		}
		actions[a.Name]++
		if !s.LastStep {
			t.Errorf("a sample of the last step is not marked LastStep")
		}
		switch a.Name {
		case env.EditScriptAI, env.EditScriptSegment, env.UndoEditScript:
			t.Errorf("the sampler drew %s on the last step", a.Name)
		}
		// One byte a token: the token after "Action: E" is at the
		// prefix's length, and only 'x' (Execute) may follow.
		if i := strings.Index(s.Text, "Action: E"); i >= 0 {
			at := i + len("Action: E")
			if m := s.Masks[at]; m.Has(id('d')) || !m.Has(id('x')) {
				t.Errorf("after %q the mask allows 'd' %v, 'x' %v; want only 'x'", s.Text[:at], m.Has(id('d')), m.Has(id('x')))
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatalf("no sampled action starts with E (%v): the fixture checks no withheld choice; change the seed", actions)
	}
	mb := r.pack(batch)
	logits, _, err := eng.Logits(mb.batch, mb.idx)
	if err != nil {
		t.Fatal(err)
	}
	lps := tokenLogProbs(logits, mb.toks, mcfg.Vocab)
	for j, s := range batch {
		for k := range s.Action {
			tk := mb.toks[mb.valueAt[j]+k]
			if !slices.Equal(tk.Mask, s.Masks[k]) {
				t.Fatalf("sample %d token %d: the learner's mask is not the sampler's", j, k)
			}
			if d := math.Abs(lps[mb.valueAt[j]+k] - float64(s.LogP[k])); d > 1e-4 {
				t.Errorf("sample %d token %d: the learner's log-probability differs from the sampler's by %.2g", j, k, d)
			}
		}
	}
	if got := outcomeShares(batch)["states/last_step"]; math.Abs(got-1) > 1e-9 {
		t.Errorf("states/last_step %v, want 1", got)
	}
	t.Logf("actions drawn on the last step: %v", actions)
}
