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
