package dataset

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/schemas"
)

// TestBuildValStates: a held-out task the rollout visited gives its
// expert states; one it did not gives initial states, restorable, with
// the plans a rollout would sample.
func TestBuildValStates(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	steps, tasks := f.steps(t)
	ideas := []schemas.Idea{
		{IdeaID: "o1", TaskID: "omega", Category: "model", Text: "try gradient boosting", Kept: true, Rank: 0},
		{IdeaID: "o2", TaskID: "omega", Category: "data", Text: "standardise the features", Kept: true, Rank: 0},
		{IdeaID: "o3", TaskID: "omega", Category: "learning", Text: "tune the learning rate", Kept: true, Rank: 0},
	}
	rs := RolloutSettings{Seed: 7, FullBudget: 3000, CompactBudget: 448, MaxSteps: 6}

	// Rolled out: omega's expert states, no initial state.
	val, c, err := BuildValStates(ctx, f.st, steps, tasks, ValOptions{PerTask: 3, Rollout: rs, Ideas: ideas})
	if err != nil {
		t.Fatal(err)
	}
	if c.Tasks != 1 || c.Initial != 0 || c.Rolled == 0 || len(val) != c.Rolled {
		t.Fatalf("counts %+v for %d states: want omega's expert states only", c, len(val))
	}
	for _, s := range val {
		if s.TaskID != "omega" || s.Split != schemas.HeldOut || s.TrajectoryID == "" || s.ExpertAction == "" {
			t.Errorf("state %+v: want an expert state of held-out omega", s)
		}
	}

	// Not rolled out: initial states.
	heldIn := slices.DeleteFunc(slices.Clone(steps), func(s schemas.Step) bool { return s.TaskID == "omega" })
	val, c, err = BuildValStates(ctx, f.st, heldIn, tasks, ValOptions{PerTask: 3, Rollout: rs, Ideas: ideas})
	if err != nil {
		t.Fatal(err)
	}
	if c.Rolled != 0 || c.Initial+c.Duplicate != 3 || len(val) != c.Initial || len(val) == 0 {
		t.Fatalf("counts %+v for %d states: want 3 initial states of omega (less duplicates)", c, len(val))
	}
	pools := agents.BuildPools(ideas)["omega"]
	for i, s := range val {
		if s.TaskID != "omega" || s.Split != schemas.HeldOut || s.StepIndex != 0 || s.TrajectoryID != "" || s.MetricPrev == nil || *s.MetricPrev != s.MInit {
			t.Errorf("initial state %+v: want omega at step 0, metric_prev = m_init", s)
		}
		if !strings.Contains(s.Prompt, "Step 1 of 6") || !strings.Contains(s.FullPrompt, "Research Problem (omega") {
			t.Errorf("initial state %s: prompts do not show the rollout's settings:\n%s\n%s", s.StateID, s.Prompt, s.FullPrompt)
		}
		// The plan a rollout with seed 7 samples for trajectory omega-000i.
		id := strings.TrimSuffix(s.StateID, "/00")
		plan, _ := agents.SamplePlan(rand.New(rand.NewPCG(uint64(agents.TrajectorySeed(rs.Seed, id)), 1)), pools)
		for _, p := range plan {
			if !strings.Contains(s.Prompt, p.Text) {
				t.Errorf("initial state %d (%s) lacks its plan's idea %q:\n%s", i, s.StateID, p.Text, s.Prompt)
			}
		}
		// Restorable: the fresh workspace, no step taken.
		cfg := env.DefaultConfig()
		cfg.Runner = sandbox.NewCold("/usr/bin/python3")
		cfg.Python = "/usr/bin/python3"
		e, err := env.Restore(ctx, cfg, f.st, s.SnapshotRef)
		if err != nil {
			t.Fatalf("restore %s: %v", s.StateID, err)
		}
		script, _ := e.ReadFile("train.py", 1<<20)
		if e.Steps() != 0 || e.Current() != s.MInit || !strings.Contains(string(script), "# omega") {
			t.Errorf("restored %s: steps %d current %v train.py %q, want the task's fresh workspace", s.StateID, e.Steps(), e.Current(), script)
		}
		e.Close()
	}
	if val[0].SnapshotRef != val[len(val)-1].SnapshotRef {
		t.Errorf("initial states of one task have different snapshots: %s, %s", val[0].SnapshotRef, val[len(val)-1].SnapshotRef)
	}
}

func TestRolloutSettingsOf(t *testing.T) {
	cfg := map[string]any{"seed": 7, "full_budget": 3000, "compact_budget": 400, "env": map[string]any{"max_steps": 6}, "per_task": 2}
	tests := []struct {
		name   string
		config any
		want   RolloutSettings
		ok     bool
	}{
		{"rollout config", cfg, RolloutSettings{Seed: 7, FullBudget: 3000, CompactBudget: 400, MaxSteps: 6}, true},
		{"no config", nil, DefaultRolloutSettings(), false},
		{"another stage's config", map[string]any{"seed": 3}, DefaultRolloutSettings(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := RolloutSettingsOf(&datasets.Manifest{Producer: datasets.Producer{Config: tt.config}})
			if got != tt.want || ok != tt.ok {
				t.Errorf("got %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}
