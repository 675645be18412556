package agents

import (
	"fmt"
	"strings"
	"testing"
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
