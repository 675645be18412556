package agents

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/env"
)

func state(steps int) State {
	best := 0.91
	s := State{
		TaskID: "wine-cultivar", Title: "Wine cultivar", Description: "Predict the cultivar.",
		Metric: "accuracy", Direction: "higher", MInit: 0.8, Current: 0.9, Best: &best,
		Plan:     []string{"Standardise the features", "Use a random forest"},
		Script:   "import numpy as np\n# === data ===\nX = 1\n# === end data ===\n# === model ===\nmodel = LogisticRegression(max_iter=50)\n# === end model ===\n# === evaluate ===\nprint(1)\n# === end evaluate ===\n",
		MaxSteps: 15, Step: steps,
	}
	for i := 0; i < steps; i++ {
		m := 0.8 + float64(i)/100
		s.History = append(s.History, Step{ActionName: "Execute Script", ActionText: fmt.Sprintf("Action: Execute Script %d", i), Observation: strings.Repeat("output line\n", 20), Outcome: "success", MetricAfter: &m, Reward: 0.1})
	}
	return s
}

func TestCompactFitsBudgetAndKeepsNewest(t *testing.T) {
	for _, tc := range []struct {
		name   string
		steps  int
		budget int
	}{{"empty history", 0, 300}, {"short", 3, 300}, {"long history, small budget", 14, 200}, {"long history, big budget", 14, 2000}} {
		t.Run(tc.name, func(t *testing.T) {
			p := Compact(state(tc.steps), tc.budget, ApproxCounter)
			if got := ApproxCounter(p); got > tc.budget+8 {
				t.Errorf("got %d tokens, want at most about %d:\n%s", got, tc.budget, p)
			}
			if tc.steps > 0 && !strings.Contains(p, fmt.Sprintf("%d. Execute Script", tc.steps)) {
				t.Errorf("newest step %d missing:\n%s", tc.steps, p)
			}
			if strings.Contains(p, "print(1)") {
				t.Errorf("evaluate section should not be shown:\n%s", p)
			}
			if again := Compact(state(tc.steps), tc.budget, ApproxCounter); again != p {
				t.Error("rendering is not deterministic")
			}
		})
	}
}

func TestFullHasToolsPlanAndFormat(t *testing.T) {
	p := Full(state(2), 4000, ApproxCounter)
	for _, want := range []string{"Edit Script (AI)", "Research Problem", "Standardise the features", "Step 2:", "Action Input:"} {
		if !strings.Contains(p, want) {
			t.Errorf("full prompt lacks %q", want)
		}
	}
	small := Full(state(14), 900, ApproxCounter)
	if strings.Contains(small, "Step 1:\n") || !strings.Contains(small, "Step 14:") {
		t.Errorf("a tight budget should drop the oldest steps first and keep the newest:\n%s", small)
	}
}

func TestRefitCompact(t *testing.T) {
	full := Compact(state(14), 4000, ApproxCounter)
	under := func(n int) func(string) bool { return func(s string) bool { return ApproxCounter(s) <= n } }
	if got, ok := RefitCompact(full, under(1<<20)); !ok || got != full {
		t.Fatal("a prompt that fits must come back unchanged")
	}
	for _, budget := range []int{400, 250, 150} {
		got, ok := RefitCompact(full, under(budget))
		if !ok || ApproxCounter(got) > budget {
			t.Fatalf("budget %d: got %d tokens, ok %v:\n%s", budget, ApproxCounter(got), ok, got)
		}
		for _, keep := range []string{"Task: Wine cultivar (wine-cultivar)", "Score: initial 0.8000", "Plan:\n1. Standardise the features\n2. Use a random forest\n", "Answer with Reflection, Thought, Action, Action Input.\n"} {
			if !strings.Contains(got, keep) {
				t.Errorf("budget %d: lost %q:\n%s", budget, keep, got)
			}
		}
		// History goes first, oldest first: the newest step survives as long
		// as any step does, and the marker counts what went.
		kept := strings.Count(got, ". Execute Script -> ")
		if kept > 0 && !strings.Contains(got, "14. Execute Script") {
			t.Errorf("budget %d: the newest step was dropped before older ones:\n%s", budget, got)
		}
		if kept < 14 && !strings.Contains(got, fmt.Sprintf("(%d earlier steps not shown)\n", 14-kept)) {
			t.Errorf("budget %d: %d steps kept, the marker does not count the %d dropped:\n%s", budget, kept, 14-kept, got)
		}
		if kept > 0 && strings.Contains(got, "more lines)") {
			t.Errorf("budget %d: script lines dropped while history remained:\n%s", budget, got)
		}
	}
	// Refitting a refitted prompt adds to the markers instead of resetting them.
	once, _ := RefitCompact(full, under(300))
	twice, _ := RefitCompact(once, under(200))
	direct, _ := RefitCompact(full, under(200))
	if twice != direct {
		t.Errorf("refit in two steps:\n%s\nwant as in one step:\n%s", twice, direct)
	}
	if _, ok := RefitCompact("not a compact prompt", under(2)); ok {
		t.Error("text that is not a compact prompt and does not fit: want ok false")
	}
	tiny, ok := RefitCompact(full, under(10))
	if ok || !strings.Contains(tiny, "Plan:") {
		t.Errorf("an impossible budget: want ok false and the header kept, got %v:\n%s", ok, tiny)
	}
}

func TestPlanFromCompact(t *testing.T) {
	got := PlanFromCompact(Compact(state(3), 2000, ApproxCounter))
	want := []string{"Standardise the features", "Use a random forest"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := PlanFromCompact("Task: x\nAnswer with Reflection, Thought, Action, Action Input.\n"); got != nil {
		t.Errorf("no plan: got %q", got)
	}
}

// TestFullInstructions: every full prompt is the tool list, the state and
// the answer format, so exports can move the fixed parts to a system
// message and lose nothing.
func TestFullInstructions(t *testing.T) {
	tools, format := FullInstructions()
	for _, steps := range []int{0, 2, 14} {
		p := Full(state(steps), 900, ApproxCounter)
		if !strings.HasPrefix(p, tools) || !strings.HasSuffix(p, format) || len(p) <= len(tools)+len(format) {
			t.Errorf("%d steps: the full prompt is not tools + state + format:\n%s", steps, p)
		}
		if mid := p[len(tools) : len(p)-len(format)]; !strings.HasPrefix(mid, "\nResearch Problem") {
			t.Errorf("%d steps: the state starts %q, want the research problem", steps, mid[:min(40, len(mid))])
		}
	}
	for _, name := range env.ActionNames() {
		if !strings.Contains(tools, "- "+name+": ") {
			t.Errorf("tool list lacks %s", name)
		}
	}
}

func TestTools(t *testing.T) {
	tools := Tools()
	if len(tools) != len(env.ActionNames()) {
		t.Fatalf("%d tools, want one per action (%d)", len(tools), len(env.ActionNames()))
	}
	for i, tool := range tools {
		name := env.ActionNames()[i]
		props, _ := tool.Parameters["properties"].(map[string]any)
		required, _ := tool.Parameters["required"].([]string)
		if tool.Name != name || tool.Description == "" || tool.Parameters["type"] != "object" || len(props) != len(env.ActionArgs(name)) || !slices.Equal(required, env.ActionArgs(name)) {
			t.Errorf("tool %d = %+v, want %s with its arguments %v required", i, tool, name, env.ActionArgs(name))
		}
	}
	inspect := tools[2].Parameters["properties"].(map[string]any)
	if got := inspect["start_line_number"].(map[string]any)["type"]; got != "integer" {
		t.Errorf("start_line_number type %v, want integer", got)
	}
	if got := inspect["script_name"].(map[string]any)["type"]; got != "string" {
		t.Errorf("script_name type %v, want string", got)
	}
}

// TestCompactMarksAWorseScore: the compact prompt says when the current
// score is worse than the best, in the metric's direction.
func TestCompactMarksAWorseScore(t *testing.T) {
	for _, c := range []struct {
		dir           string
		current, best float64
		worse         bool
	}{
		{"higher", 0.80, 0.91, true},
		{"higher", 0.91, 0.91, false},
		{"higher", 0.95, 0.91, false},
		{"lower", 82.4, 55.9, true},
		{"lower", 55.9, 55.9, false},
		{"lower", 40.0, 55.9, false},
	} {
		s := state(0)
		s.Direction, s.Current, s.Best = c.dir, c.current, &c.best
		s.MInit = 0.5 // worse than every best here (TestCompactFormats: an initial score above the best)
		if c.dir == "lower" {
			s.MInit = 100
		}
		got := strings.Contains(Compact(s, 2000, ApproxCounter), fmt.Sprintf("current %.4f (worse than the best), best %.4f.", c.current, c.best))
		if got != c.worse {
			t.Errorf("%s is better, current %v, best %v: marked worse %v, want %v", c.dir, c.current, c.best, got, c.worse)
		}
	}
	s := state(0)
	s.Best = nil
	if strings.Contains(Compact(s, 2000, ApproxCounter), "worse") {
		t.Error("no best yet: nothing to be worse than")
	}
}
