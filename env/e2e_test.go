package env

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl/internal/catalog"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/internal/tasks"
)

func realPython(t testing.TB) string {
	t.Helper()
	p, err := sandbox.FindPython("")
	if err != nil {
		t.Skipf("no task interpreter: %v", err)
	}
	return p
}

// An episode on the fixture task through the real sandbox and the real
// static instrumenter, with a snapshot taken mid-episode.
func TestEpisodeRealSandbox(t *testing.T) {
	ctx := context.Background()
	python := realPython(t)
	runner := sandbox.NewCold(python)
	defer runner.Close()
	st := newLocalStore(t)
	cfg := testConfig(t)
	cfg.Python, cfg.Runner, cfg.Instrumenter = python, runner, nil // nil: the static instrumenter
	e, err := New(ctx, cfg, fixture(t, st, false), st)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	r := step(t, e, act(ExecuteScript, "train.py"))
	if r.Outcome != OutcomeSuccess || r.MetricAfter == nil || *r.MetricAfter != 0.5 {
		t.Fatalf("initial run: got %s %v (%s)\n%s", r.Outcome, r.MetricAfter, r.Detail, r.Observation)
	}
	if len(r.Markers) < 4 || r.Markers[0] != "imports_done" || strings.Contains(r.Observation, "@@MLERL") {
		t.Fatalf("markers %v, observation:\n%s", r.Markers, r.Observation)
	}
	step(t, e, act(EditScriptAI, "train.py", "raise the threshold", "train.py"))
	ref, err := e.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r = step(t, e, act(ExecuteScript, "train.py"))
	if r.Outcome != OutcomeSuccess || *r.MetricAfter != 1 || r.Reward.Total != 1 {
		t.Fatalf("after edit: got %s metric %v reward %+v", r.Outcome, r.MetricAfter, r.Reward)
	}
	re, err := Restore(ctx, cfg, st, ref)
	if err != nil {
		t.Fatal(err)
	}
	defer re.Close()
	r2 := step(t, re, act(ExecuteScript, "train.py"))
	if r2.MetricAfter == nil || *r2.MetricAfter != *r.MetricAfter || r2.Reward.Total != r.Reward.Total {
		t.Fatalf("restored re-execution: got %v reward %v, want %v and %v", r2.MetricAfter, r2.Reward.Total, *r.MetricAfter, r.Reward.Total)
	}

	// A crash in the model section keeps the markers reached before it.
	step(t, e, act(EditScriptAI, "train.py", "break the model", "train.py")) // no-op now: threshold is 0.5
	step(t, e, act(EditScriptSegment, "train.py", "14", "14", "threshold = undefined_name"))
	r = step(t, e, act(ExecuteScript, "train.py"))
	if r.Outcome != OutcomeScriptError || len(r.Markers) != 2 || !strings.Contains(r.Observation, "NameError") {
		t.Fatalf("crash: got %s markers %v\n%s", r.Outcome, r.Markers, r.Observation)
	}
	// A script reading the private answers finds nothing to read.
	os.WriteFile(filepath.Join(e.Dir(), "peek.py"), []byte("import glob\nprint(glob.glob('/tmp/mlerl-grade-*/private/*') + glob.glob('../**/answers.csv', recursive=True))\n"), 0o644)
	r = step(t, e, act(ExecuteScript, "peek.py"))
	if !strings.Contains(r.Observation, "[]") {
		t.Fatalf("the script saw private files:\n%s", r.Observation)
	}
}

// One built-in task, end to end: the initial script, then a catalog idea
// carried out by the offline editor, each graded on hidden labels.
func TestBuiltinTaskEpisode(t *testing.T) {
	ctx := context.Background()
	python := realPython(t)
	task, err := tasks.Load(filepath.Join("..", "tasks", "wine-cultivar"))
	if err != nil {
		t.Skipf("built-in task not available: %v", err)
	}
	st := store.NewLocal(t.TempDir())
	ws, priv, err := tasks.UploadTrees(ctx, st, task)
	if err != nil {
		t.Fatal(err)
	}
	row := task.Row()
	row.WorkspaceTree, row.PrivateTree = ws, priv
	spec := SpecFromTask(row)
	script, err := os.ReadFile(filepath.Join(task.WorkspacePath(), "train.py"))
	if err != nil {
		t.Fatal(err)
	}
	var idea *catalog.Idea
	for _, i := range catalog.ForTask(task.Modality, task.TaskType) {
		if _, err := catalog.Apply(string(script), i.Edit); err == nil {
			idea = &i
			break
		}
	}
	if idea == nil {
		t.Fatalf("no catalog idea applies to %s", task.ID)
	}
	runner, err := sandbox.NewWarm(ctx, python)
	if err != nil {
		t.Fatal(err)
	}
	defer runner.Close()
	cfg := DefaultConfig()
	cfg.Python, cfg.WorkDir, cfg.Runner = python, t.TempDir(), runner
	e, err := New(ctx, cfg, spec, st) // offline editor, static instrumenter
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	start := time.Now()
	r := step(t, e, act(ExecuteScript, "train.py"))
	if r.Outcome != OutcomeSuccess || r.MetricAfter == nil || r.ValMetric == nil || len(r.Markers) != 6 {
		t.Fatalf("initial run: got %s %v val %v markers %v (%s)\n%s", r.Outcome, r.MetricAfter, r.ValMetric, r.Markers, r.Detail, r.Observation)
	}
	initial := *r.MetricAfter
	r = step(t, e, act(EditScriptAI, "train.py", idea.Text, "train.py"))
	if r.Outcome != OutcomeSuccess || !strings.Contains(r.Observation, "@@ ") {
		t.Fatalf("edit %s: got %s %s\n%s", idea.ID, r.Outcome, r.Detail, r.Observation)
	}
	r = step(t, e, act(ExecuteScript, "train.py"))
	if r.Outcome != OutcomeSuccess || r.MetricAfter == nil {
		t.Fatalf("after %s: got %s (%s)\n%s", idea.ID, r.Outcome, r.Detail, r.Observation)
	}
	if _, ok := r.Reward.Term(TermImprovement); !ok {
		t.Fatalf("no improvement term after an edit: %+v", r.Reward)
	}
	t.Logf("%s: initial score %.4f, after %q %.4f, reward %+v (%v)", task.ID, initial, idea.ID, *r.MetricAfter, r.Reward.Terms, time.Since(start).Round(time.Millisecond))
}
