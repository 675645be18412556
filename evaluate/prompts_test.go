package evaluate

import (
	"context"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/env/agents"
)

// Prompts come from the rollout's steps manifest; without a rollout the
// evaluation says how to get one, and steps "" means the default budgets.
func TestReadPrompts(t *testing.T) {
	ctx := context.Background()
	st := tempStore(t)
	cfg := DefaultConfig()
	if _, err := readPrompts(ctx, st, cfg); err == nil || !strings.Contains(err.Error(), "mlerl rollout") {
		t.Errorf("no steps dataset: got %v, want an error that says to roll out first", err)
	}
	cfg.Steps = ""
	pr, err := readPrompts(ctx, st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if pr.prompts.FullBudget != agents.DefaultFullBudget || pr.prompts.CompactBudget != agents.DefaultCompactBudget ||
		pr.prompts.Counter != pr.opts.CountName || pr.opts.MaxSteps != cfg.Env.MaxSteps || pr.steps != "" || len(pr.notes) != 1 {
		t.Errorf("steps \"\": got %+v", pr)
	}
}
