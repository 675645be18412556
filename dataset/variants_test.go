package dataset

import (
	"context"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// variantWorld renders expert steps the way the rollout does: prompts by
// env/agents from a state, the answer by env.Render.
type variantWorld struct{ count agents.Counter }

func (w variantWorld) step(traj string, index int, plan []string, history []agents.Step, a env.Action, outcome string) schemas.Step {
	st := agents.State{TaskID: "wine-cultivar", Title: "Wine", Description: "Classify wines.", Metric: "accuracy", Direction: "higher",
		MInit: 0.7, Current: 0.7, Plan: plan, Script: "# === model ===\nmodel = Tree()\n# === end model ===\n",
		History: history, Step: len(history), MaxSteps: 8}
	text := env.Render(a)
	return schemas.Step{TaskID: st.TaskID, TrajectoryID: traj, StepIndex: int32(index),
		State: agents.Full(st, 6000, w.count), CompactState: agents.Compact(st, 448, w.count), Plan: plan,
		ActionText: text, ActionName: a.Name, ActionInput: a.Input(), Outcome: outcome, Observation: "The edited file is saved to train.py.",
		Reward: 0.3, SnapshotRef: "sha256:abc"}
}

func mustParse(t *testing.T, text string) env.Action {
	t.Helper()
	a, err := env.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func edit(idea string) env.Action {
	return env.Action{Reflection: "The script scored 0.7.", Thought: "Next idea from the plan: " + agents.LowerFirst(idea) + ".",
		Name: env.EditScriptAI, ScriptName: "train.py", EditInstruction: idea, SaveName: "train.py"}
}

func TestPlanVariants(t *testing.T) {
	w := variantWorld{count: wordCount}
	planA := []string{"Use k-nearest neighbours with k=31", `Weight classes by "balanced" frequency`, "Standardise the features"}
	planB := []string{"Standardise the features", "Bag 50 trees", "Use an RBF SVC (C=10)"}
	ran := []agents.Step{{ActionName: env.ExecuteScript, Outcome: "success", Observation: "score 0.7"},
		{ActionName: env.EditScriptAI, Outcome: "success", Observation: "The edited file is saved"}}
	steps := []schemas.Step{
		w.step("t0", 0, planA, nil, env.Action{Name: env.ListFiles, DirPath: "."}, "success"),
		w.step("t0", 1, planA, ran[:1], edit(planA[0]), "success"),
		w.step("t0", 3, planA, ran, edit(planA[1]), "success"),                    // the second entry, after one edit
		w.step("t1", 1, planB, ran[:1], edit(planB[0]), "invalid_edit"),           // refused: no variants
		w.step("t1", 2, planB, ran[:1], edit("Something not planned"), "success"), // not a plan entry
	}
	pool := []string{planA[0], planA[1], planA[2], planB[1], planB[2]} // every idea the task's plans show

	got, c := PlanVariants(steps, 3, 7)
	if want := (VariantCounts{Edits: 3, Made: 4, NotPlan: 1}); c != want {
		t.Fatalf("counts %+v, want %+v", c, want)
	}
	for i, v := range got {
		src, history := steps[1], ran[:1]
		if i >= 2 {
			src, history = steps[2], ran
		}
		k := slices.Index(src.Plan, mustParse(t, src.ActionText).EditInstruction)
		a, err := env.Parse(v.ActionText)
		if err != nil {
			t.Fatalf("variant %d does not parse: %v\n%s", i, err, v.ActionText)
		}
		idea := v.Plan[k]
		switch {
		case a.EditInstruction != idea || a.Name != env.EditScriptAI || a.ScriptName != "train.py" || a.SaveName != "train.py":
			t.Errorf("variant %d: answer %+v, want an edit of train.py with plan entry %d %q", i, a, k+1, idea)
		case !strings.Contains(a.Thought, agents.LowerFirst(idea)) || strings.Contains(v.ActionText, src.Plan[k]) || strings.Contains(v.ActionText, agents.LowerFirst(src.Plan[k])):
			t.Errorf("variant %d: thought %q should name %q and the answer should not name %q", i, a.Thought, idea, src.Plan[k])
		case slices.Contains(src.Plan, idea) || !slices.Contains(pool, idea):
			t.Errorf("variant %d: swapped-in idea %q is in the plan already, or not one of the task's ideas", i, idea)
		case v.TrajectoryID != fmt.Sprintf("%s~v%d", src.TrajectoryID, i%2+1) || v.StepIndex != src.StepIndex:
			t.Errorf("variant %d: id %s/%d", i, v.TrajectoryID, v.StepIndex)
		case v.SnapshotRef != "" || v.Observation != "" || v.Reward != 0:
			t.Errorf("variant %d keeps what followed the real edit: snapshot %q observation %q reward %v", i, v.SnapshotRef, v.Observation, v.Reward)
		case !reflect.DeepEqual(v.Plan[:k], src.Plan[:k]) || !reflect.DeepEqual(v.Plan[k+1:], src.Plan[k+1:]):
			t.Errorf("variant %d: plan %q from %q: only entry %d may change", i, v.Plan, src.Plan, k+1)
		}
		// The prompts are the ones the renderer makes for the variant's
		// plan: the same state with that one entry swapped.
		st := agents.State{TaskID: "wine-cultivar", Title: "Wine", Description: "Classify wines.", Metric: "accuracy", Direction: "higher",
			MInit: 0.7, Current: 0.7, Plan: v.Plan, Script: "# === model ===\nmodel = Tree()\n# === end model ===\n", History: history, Step: len(history), MaxSteps: 8}
		if want := agents.Compact(st, 448, wordCount); v.CompactState != want {
			t.Errorf("variant %d compact prompt:\n%s\nwant\n%s", i, v.CompactState, want)
		}
		if want := agents.Full(st, 6000, wordCount); v.State != want {
			t.Errorf("variant %d full prompt differs from the renderer's", i)
		}
	}

	// As SFT examples, an edit and its variants share one unit of weight;
	// the other examples have none (1).
	all := append(slices.Clone(steps), got...)
	tasks := map[string]schemas.Task{"wine-cultivar": {TaskID: "wine-cultivar", Split: schemas.HeldIn}}
	exs, _, err := BuildSFT(all, wordTokens(all), tasks, DefaultSFTOptions())
	if err != nil {
		t.Fatal(err)
	}
	weighVariants(exs)
	sum := map[string]float64{}
	for _, e := range exs {
		src, _ := variantSource(e.TrajectoryID)
		id := fmt.Sprintf("%s/%d", src, e.StepIndex)
		if e.Weight == nil {
			sum[id]++
		} else {
			sum[id] += *e.Weight
		}
	}
	if want := map[string]float64{"t0/0": 1, "t0/1": 1, "t0/3": 1, "t1/2": 1}; !reflect.DeepEqual(sum, want) {
		t.Errorf("weight per expert step %v, want %v", sum, want)
	}
	if exs[1].Weight == nil || *exs[1].Weight != 1.0/3 {
		t.Errorf("edit t0/1 with two variants: weight %v, want 1/3", exs[1].Weight)
	}

	// The same seed draws the same variants; n 0 makes none.
	if again, _ := PlanVariants(steps, 3, 7); !reflect.DeepEqual(again, got) {
		t.Error("PlanVariants is not deterministic for a seed")
	}
	if none, c := PlanVariants(steps, 0, 7); none != nil || c != (VariantCounts{}) {
		t.Errorf("n=0: %d variants, counts %+v", len(none), c)
	}
}

// TestShareGPTLeavesVariantsOut: the ShareGPT export holds the expert's
// own held-in examples, not their plan variants (it has no weights, and an
// LLM copies from its plan without them).
func TestShareGPTLeavesVariantsOut(t *testing.T) {
	w := variantWorld{count: wordCount}
	plan := []string{"Use k-nearest neighbours with k=31", "Standardise the features"}
	steps := []schemas.Step{w.step("t0", 1, plan, nil, edit(plan[0]), "success"), w.step("t1", 1, []string{"Bag 50 trees"}, nil, edit("Bag 50 trees"), "success")}
	variants, _ := PlanVariants(steps, 1, 1)
	all := append(slices.Clone(steps), variants...)
	tasks := map[string]schemas.Task{"wine-cultivar": {TaskID: "wine-cultivar", Split: schemas.HeldIn}}
	exs, _, err := BuildSFT(all, wordTokens(all), tasks, DefaultSFTOptions())
	if err != nil || len(exs) != 4 {
		t.Fatalf("%d examples (%v), want 2 expert edits and 2 variants", len(exs), err)
	}
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, extra, _, err := exportConfig{count: QwenChat(wordCount), log: io.Discard}.sft(ctx, st, "exports/sft_examples/v1", exs)
	if err != nil {
		t.Fatal(err)
	}
	b, err := store.ReadAll(ctx, st, "exports/sft_examples/v1/"+ShareGPTFile)
	if err != nil {
		t.Fatal(err)
	}
	recs := readShareGPT(t, b)
	if extra["sharegpt_rows"] != 2 || len(recs) != 2 {
		t.Errorf("ShareGPT export: %v rows, %d records; want the 2 expert examples", extra["sharegpt_rows"], len(recs))
	}
}
