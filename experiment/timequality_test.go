package experiment

import (
	"math"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/schemas"
)

// TestTimeQuality: per task, r(run time, signed score) over successful
// Execute Script steps only; a lower-is-better metric's sign is flipped.
func TestTimeQuality(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	var rows []schemas.Step
	add := func(task string, s, score float64, outcome env.Outcome) {
		rows = append(rows, schemas.Step{TaskID: task, ActionName: env.ExecuteScript, Outcome: string(outcome), ExecS: s, MetricAfter: f(score)})
	}
	// slow-good: score rises with time; rmse-task: lower is better and
	// the error rises with time (slower is worse).
	for i := range 6 {
		add("slow-good", float64(1+i), 0.5+0.1*float64(i), env.OutcomeSuccess)
		add("rmse-task", float64(1+i), 10+float64(i), env.OutcomeSuccess)
	}
	add("slow-good", 100, 0, env.OutcomeScriptError) // failed: left out
	rows = append(rows, schemas.Step{TaskID: "slow-good", ActionName: env.ListFiles, Outcome: "success", ExecS: 50})
	tq := timeQualityOf(rows, map[string]string{"slow-good": schemas.HigherIsBetter, "rmse-task": schemas.LowerIsBetter})
	if len(tq) != 2 || tq[0].task != "rmse-task" || tq[1].task != "slow-good" {
		t.Fatalf("got %+v", tq)
	}
	if tq[1].runs != 6 || math.Abs(tq[1].corr.r-1) > 1e-9 || tq[1].maxS != 6 {
		t.Errorf("slow-good: %+v, want 6 runs, r = 1, up to 6 s", tq[1])
	}
	if math.Abs(tq[0].corr.r+1) > 1e-9 || !(tq[0].slowQ < tq[0].fastQ) {
		t.Errorf("rmse-task: %+v, want r = -1 (slower is worse once the sign is flipped)", tq[0])
	}
	var b strings.Builder
	writeTimeQuality(&b, tq)
	if !strings.Contains(b.String(), "on 1 of 2 tasks, worse (below 0) on 1") {
		t.Errorf("section:\n%s", b.String())
	}
}
