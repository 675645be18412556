package dataset

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/internal/tokenizer"
	"github.com/mlerl/mlerl/schemas"
)

// benchSteps makes n steps shaped like the rollout's: a ~1.8 KB compact
// prompt (mostly shared script lines, a varying history) and a short
// answer, over 10 tasks of 20 trajectories.
func benchSteps(n int) ([]schemas.Step, map[string]schemas.Task) {
	script := strings.Repeat("    model = LogisticRegression(C=1.0, max_iter=200)\n", 30)
	tasks := map[string]schemas.Task{}
	steps := make([]schemas.Step, n)
	for i := range steps {
		task := fmt.Sprintf("task-%02d", i%10)
		tasks[task] = schemas.Task{TaskID: task, Split: schemas.HeldIn, Metric: "accuracy", Direction: schemas.HigherIsBetter}
		prompt := fmt.Sprintf("Task %s (accuracy, higher is better). Best so far: 0.%04d\nLast steps: Execute Script -> success %d\n%s", task, i, i, script)
		steps[i] = schemas.Step{
			TaskID: task, TrajectoryID: fmt.Sprintf("%s-%04d", task, (i/10)%20), StepIndex: int32(i / 200),
			State: prompt + strings.Repeat("Full prompt context line.\n", 100), CompactState: prompt,
			ActionText: fmt.Sprintf("Action: Edit Script (AI)\nAction Input: {\"script_name\": \"train.py\", \"edit_instruction\": \"set C to %d\"}", i),
			ActionName: "Edit Script (AI)", Outcome: outcomeSuccess, SnapshotRef: fmt.Sprintf("sha256:%064d", i),
		}
	}
	return steps, tasks
}

// BenchmarkBuild measures the stage's CPU work per step: Qwen token counts
// of prompt and response, then building SFT examples and RL states.
func BenchmarkBuild(b *testing.B) {
	tok, err := tokenizer.Default()
	if err != nil {
		b.Skip(err)
	}
	steps, tasks := benchSteps(2000)
	b.ResetTimer()
	for range b.N {
		tokens := CountTokens(steps, tok.Count, 0)
		if _, _, err := BuildSFT(steps, tokens, tasks, DefaultSFTOptions()); err != nil {
			b.Fatal(err)
		}
		if _, _, err := BuildRLStates(steps, tasks, DefaultRLOptions()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(steps)*b.N)/b.Elapsed().Seconds(), "steps/s")
}
