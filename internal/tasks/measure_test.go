package tasks

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl/internal/catalog"
	"github.com/mlerl/mlerl/internal/sandbox"
)

// copyRunner stands in for Python: a run "succeeds" (or ends with outcome)
// and its submission is the script itself, so that a grader can score
// what the edits put in.
type copyRunner struct{ outcome sandbox.Outcome }

func (r copyRunner) Run(ctx context.Context, req sandbox.Request) (sandbox.Result, error) {
	b, err := os.ReadFile(filepath.Join(req.Dir, req.Script))
	if err != nil {
		return sandbox.Result{}, err
	}
	if err := os.WriteFile(filepath.Join(req.Dir, SubmissionFile), b, 0o644); err != nil {
		return sandbox.Result{}, err
	}
	out := r.outcome
	if out == "" {
		out = sandbox.Success
	}
	return sandbox.Result{Outcome: out, Stdout: "VAL_METRIC accuracy 0.5\n"}, nil
}

func (copyRunner) Close() error { return nil }

// modelScore grades a "submission" (an edited script) by the model it
// builds: a random forest 0.8, an RBF SVC 0.9, anything else 0.5.
func modelScore(ctx context.Context, privateDir, submission string) (Grade, error) {
	b, err := os.ReadFile(submission)
	if err != nil {
		return Grade{}, err
	}
	switch s := string(b); {
	case strings.Contains(s, "SVC("):
		return Grade{Valid: true, Score: 0.9}, nil
	case strings.Contains(s, "RandomForestClassifier("):
		return Grade{Valid: true, Score: 0.8}, nil
	}
	return Grade{Valid: true, Score: 0.5}, nil
}

const sectionedScript = `# === imports ===
import numpy as np
import pandas as pd
# === end imports ===
# === data ===
X_train = X_valid = X_test = np.zeros((2, 2))
# === end data ===
# === model ===
model = None
# === end model ===
# === training ===
model.fit(X_train, y_train)
# === end training ===
# === evaluate ===
print("VAL_METRIC accuracy 0.5")
# === end evaluate ===
`

func TestMeasure(t *testing.T) {
	dir := writeTask(t, t.TempDir(), "toy", map[string]string{"workspace/train.py": sectionedScript})
	task, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	obviousSVC := "data/standard-scaler + model/svc-rbf-c10"
	// Every combination of the catalog search for the toy task's kind.
	obvious, strong := catalog.Search(task.Modality, task.TaskType)
	n := len(obvious) + len(strong)
	ns := strconv.Itoa(n)
	cases := []struct {
		name    string
		runner  copyRunner
		task    func(*Task)
		mInit   float64
		budget  MeasureBudget
		score   float64
		source  string // the whole m_best_source
		scripts int
		stopped bool
		err     string // a part of the error; "" for none
	}{
		{name: "every combination", mInit: 0.6, score: 0.9, scripts: n,
			source: "measured (catalog search, " + ns + " scripts, 2026-12-01): " + obviousSVC},
		{name: "script budget", mInit: 0.6, budget: MeasureBudget{Scripts: 2}, score: 0.8, scripts: 2, stopped: true,
			source: "measured (catalog search, 2 scripts, 2026-12-01): model/random-forest-n300-dnone"},
		{name: "time budget", mInit: 0.6, budget: MeasureBudget{Time: time.Nanosecond},
			err: "task toy: task.yaml: field m_best: measure: the budget (0 scripts, 1ns) ended the catalog search before any script ran; set m_best (and m_best_source) in task.yaml by hand"},
		{name: "nothing better", mInit: 0.95,
			err: "measure: the best of " + ns + " catalog combinations, 0.9 (" + obviousSVC + "), is not better than the initial script's 0.95 (higher is better)"},
		{name: "lower is better", mInit: 0.6, task: func(t *Task) { t.Metric, t.Direction = "log_loss", "lower" },
			score: 0.5, scripts: n, source: "measured (catalog search, " + ns + " scripts, 2026-12-01): data/standard-scaler"},
		{name: "every script fails", runner: copyRunner{outcome: sandbox.ScriptError}, mInit: 0.6,
			err: "measure: none of the " + ns + " catalog combinations tried ran and wrote a valid submission"},
		{name: "no lists for the kind", mInit: 0.6, task: func(t *Task) { t.Modality = "audio" },
			err: "measure: the catalog search has no edits for audio tasks"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tk := *task
			if c.task != nil {
				c.task(&tk)
			}
			m, err := Measure(context.Background(), c.runner, modelScore, &tk, sectionedScript, Baseline{TestScore: c.mInit}, sandbox.Limits{}, c.budget, day)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %+v, %v; want an error containing %q", m, err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Score != c.score || m.Source != c.source || m.Scripts != c.scripts || m.Stopped != c.stopped || m.Combinations != n {
				t.Errorf("got %+v\nwant score %v, source %q, %d of %d scripts, stopped %v", m, c.score, c.source, c.scripts, n, c.stopped)
			}
		})
	}
}
