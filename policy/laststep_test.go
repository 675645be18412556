package policy

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/internal/tasks"
	"github.com/mlerl/mlerl/schemas"
)

// lastStepWorld is grammarWorld's task as a live environment (scripts
// are not run: noRun), so that states come from env.Env as every stage
// reads them (agents.StateOf).
type lastStepWorld struct {
	grammarWorld
	st   store.Store
	spec env.Spec
	ecfg env.Config
}

func newLastStepWorld(t *testing.T) lastStepWorld {
	t.Helper()
	w := lastStepWorld{grammarWorld: newGrammarWorld(t)}
	python, err := sandbox.FindPython("")
	if err != nil {
		t.Skipf("no task interpreter: %v", err)
	}
	w.st = store.NewLocal(t.TempDir())
	ws, priv, err := tasks.UploadTrees(context.Background(), w.st, w.task)
	if err != nil {
		t.Fatal(err)
	}
	w.spec = env.Spec{TaskID: w.task.ID, Metric: w.task.Metric, Direction: w.task.Direction, Modality: w.task.Modality, TaskType: w.task.TaskType,
		MInit: 0.7, MBest: 1, TimeLimit: time.Minute, WorkspaceTree: ws, PrivateTree: priv}
	w.ecfg = env.DefaultConfig()
	w.ecfg.Python, w.ecfg.Runner, w.ecfg.WorkDir = python, noRun{}, t.TempDir()
	return w
}

// env starts an episode under cfg and takes the given steps in it.
func (w lastStepWorld) env(t *testing.T, cfg env.Config, steps ...string) *env.Env {
	t.Helper()
	e, err := env.New(context.Background(), cfg, w.spec, w.st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	for _, s := range steps {
		if r, err := e.Step(context.Background(), s); err != nil || !env.Accepted(r.Outcome) {
			t.Fatalf("step %q: %v %s %s", s, err, r.Outcome, r.Detail)
		}
	}
	return e
}

// editPlanIdea is Edit Script (AI) of the first idea the grammar offers
// on the initial script (one the offline editor carries out).
func (w lastStepWorld) editPlanIdea(t *testing.T) string {
	ideas := NewGrammarContext(w.state, nil, true).Ideas
	if len(ideas) == 0 {
		t.Fatal("no applicable idea on wine-cultivar's script")
	}
	return env.Render(env.Action{Reflection: "-", Thought: "-", Name: env.EditScriptAI, ScriptName: "train.py", EditInstruction: ideas[0], SaveName: "train.py"})
}

// offered lists the action names a grammar context offers.
func offered(gc GrammarContext) []string {
	var out []string
	for _, a := range newGrammar(gc).head[len(newGrammar(gc).head)-1].options {
		out = append(out, strings.TrimSuffix(a, "\n"))
	}
	return out
}

// TestGrammarWithholdsChangesOnTheLastStep: after an edit (so that there
// is one to undo), the grammar of the state the environment reports
// offers both edits and the undo before the last step, and neither on
// it, unless the environment runs the script after them or
// last_step_edits offers them anyway.
func TestGrammarWithholdsChangesOnTheLastStep(t *testing.T) {
	w := newLastStepWorld(t)
	list := env.Render(env.Action{Reflection: "-", Thought: "-", Name: env.ListFiles, DirPath: "."})
	changes := []string{env.EditScriptAI, env.EditScriptSegment, env.UndoEditScript}
	cases := []struct {
		name                       string
		maxSteps                   int
		afterEdit, afterUndo, keep bool
		want                       []string // of changes, in that order
	}{
		{name: "before the last step", maxSteps: 4, want: changes},
		{name: "last step", maxSteps: 3},
		{name: "last step, edits run their script", maxSteps: 3, afterEdit: true, want: changes[:2]},
		{name: "last step, undos run their script", maxSteps: 3, afterUndo: true, want: changes[2:]},
		{name: "last step, last_step_edits", maxSteps: 3, keep: true, want: changes},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := w.ecfg
			cfg.MaxSteps, cfg.ExecuteAfterEdit, cfg.ExecuteAfterUndo, cfg.LastStepEdits = c.maxSteps, c.afterEdit, c.afterUndo, c.keep
			e := w.env(t, cfg, w.editPlanIdea(t), list)
			gc := NewGrammarContext(agents.StateOf(e, w.state.Plan, 15), w.state.Plan, true)
			names := offered(gc)
			var got []string
			for _, a := range changes {
				if slices.Contains(names, a) {
					got = append(got, a)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("offered %v of the changes, want %v (all offered: %v)", got, c.want, names)
			}
			for _, a := range []string{env.ExecuteScript, env.FinalAnswer, env.ListFiles} {
				if !slices.Contains(names, a) {
					t.Errorf("%s is not offered (offered: %v)", a, names)
				}
			}
		})
	}
}

// TestPolicyChangesNothingOnTheLastStep: a policy under the grammar
// (random logits: every action it is offered gets drawn) never edits
// in a one-step environment, nor edits or undoes on the last step of a
// two-step one after an edit; with last_step_edits the same episodes do.
func TestPolicyChangesNothingOnTheLastStep(t *testing.T) {
	w := newLastStepWorld(t)
	w.gen.Engine.(*randomEngine).rng = rand.New(rand.NewPCG(49, 1))
	w.gen.Engine.(*randomEngine).scale = 2
	w.gen.Engine.(*randomEngine).cfg.PromptTokens = 2048 // the random logits read no prompt, but it must fit
	w.gen.Policy.Model.PromptTokens = 2048
	agent, err := NewPolicyAgent("policy", w.gen, AgentOptions{Temperature: 1, Terse: true})
	if err != nil {
		t.Fatal(err)
	}
	opts := agents.Options{FullBudget: 4000, CompactBudget: 400, Count: agents.ApproxCounter, MaxSteps: 15}
	// changes plays episodes of at most maxSteps steps, the first ones
	// given, and counts the policy's edits and undos by name.
	changes := func(t *testing.T, maxSteps int, keep bool, first ...string) map[string]int {
		counts := map[string]int{}
		for seed := range int64(24) {
			cfg := w.ecfg
			cfg.MaxSteps, cfg.LastStepEdits = maxSteps, keep
			e := w.env(t, cfg, first...)
			ep, err := agents.RunEpisode(context.Background(), e, agent.Episode(w.state.Plan, seed),
				schemas.Trajectory{TaskID: w.task.ID, TrajectoryID: "t"}, w.state.Plan, opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(ep.Steps) != maxSteps-len(first) {
				t.Fatalf("%d policy steps, want %d", len(ep.Steps), maxSteps-len(first))
			}
			for _, s := range ep.Steps {
				switch s.ActionName {
				case env.EditScriptAI, env.EditScriptSegment, env.UndoEditScript:
					counts[s.ActionName]++
				}
			}
		}
		return counts
	}
	for _, c := range []struct {
		name     string
		maxSteps int
		first    []string
	}{
		{name: "one-step environment", maxSteps: 1},
		{name: "last step after an edit", maxSteps: 2, first: []string{w.editPlanIdea(t)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := changes(t, c.maxSteps, false, c.first...); len(got) > 0 {
				t.Errorf("the policy changed the script on the last step: %v", got)
			}
			// The same episodes with last_step_edits draw changes: the
			// grammar, not chance, kept them out above.
			got := changes(t, c.maxSteps, true, c.first...)
			if got[env.EditScriptAI]+got[env.EditScriptSegment] == 0 || c.first != nil && got[env.UndoEditScript] == 0 {
				t.Errorf("with last_step_edits: %v, want edits (and undos after an edit)", got)
			}
		})
	}
}
