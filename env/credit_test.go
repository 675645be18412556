package env

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl/internal/catalog"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/tasks"
)

// suiteTasks loads the built-in suite, or skips.
func suiteTasks(t *testing.T) []*tasks.Task {
	t.Helper()
	ts, _, err := tasks.LoadSuite("../tasks")
	if err != nil || len(ts) == 0 {
		t.Skipf("no built-in suite in ../tasks: %v", err)
	}
	return ts
}

func ideaByID(t *testing.T, task *tasks.Task, id string) catalog.Idea {
	t.Helper()
	for _, i := range catalog.ForTask(task.Modality, task.TaskType) {
		if i.ID == id {
			return i
		}
	}
	t.Fatalf("%s: no catalog idea %s", task.ID, id)
	return catalog.Idea{}
}

// TestCreditCheckHonestScripts: the credit check refuses none of the
// scripts an honest agent of this project writes: every built-in initial
// script, and each with every catalog idea that applies to it.
func TestCreditCheckHonestScripts(t *testing.T) {
	py := instrPython(t)
	ctx := context.Background()
	n := 0
	for _, task := range suiteTasks(t) {
		src, err := os.ReadFile(filepath.Join(task.WorkspacePath(), "train.py"))
		if err != nil {
			t.Fatal(err)
		}
		if err := CreditCheck(ctx, py, src); err != nil {
			t.Errorf("%s: %v", task.ID, err)
		}
		for _, idea := range catalog.ForTask(task.Modality, task.TaskType) {
			edited, err := catalog.Apply(string(src), idea.Edit)
			if err != nil {
				continue // an idea for another model (see internal/catalog)
			}
			n++
			if err := CreditCheck(ctx, py, []byte(edited)); err != nil {
				t.Errorf("%s + %s: %v", task.ID, idea.ID, err)
			}
		}
	}
	t.Logf("%d edited scripts checked", n)
}

// TestHonestCreditUnchanged: the catalog's edits that fail on real data
// earn, run through the sandbox with their markers, the partial credit
// they earned before (the same markers: the checks add no refusal and
// move no marker), and an initial script reaches all six.
func TestHonestCreditUnchanged(t *testing.T) {
	if testing.Short() {
		t.Skip("runs scikit-learn scripts")
	}
	py := instrPython(t)
	byID := map[string]*tasks.Task{}
	for _, task := range suiteTasks(t) {
		byID[task.ID] = task
	}
	cases := []struct {
		task    string
		ideas   []string
		markers []string
		outcome sandbox.Outcome
	}{
		// Fails in training: a logistic regression cannot take the NaNs.
		{"pima-diabetes", []string{"data/standard-scaler", "model/logreg-c1"}, MarkerNames[:3], sandbox.ScriptError},
		// Fails in the data section: the rows are not square images.
		{"satellite-landcover", []string{"data/augment-shift-4"}, MarkerNames[:1], sandbox.ScriptError},
		{"glass-type", nil, MarkerNames, sandbox.Success},
	}
	for _, c := range cases {
		t.Run(c.task, func(t *testing.T) {
			task := byID[c.task]
			if task == nil {
				t.Skipf("no task %s in the suite", c.task)
			}
			dir := t.TempDir()
			files, err := tasks.ReadTree(task.WorkspacePath())
			if err != nil {
				t.Fatal(err)
			}
			for name, f := range files {
				p := filepath.Join(dir, filepath.FromSlash(name))
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.WriteFile(p, f.Data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			script := string(files["train.py"].Data)
			for _, id := range c.ideas {
				if script, err = catalog.Apply(script, ideaByID(t, task, id).Edit); err != nil {
					t.Fatal(err)
				}
			}
			nonce := NewNonce()
			inst, err := Instrument(context.Background(), py, []byte(script), nonce)
			if err != nil {
				t.Fatal(err)
			}
			res := instrRunLimits(t, dir, inst, nonce, sandbox.Limits{Timeout: 5 * time.Minute})
			markers, _ := ParseMarkers(res.Stdout, nonce)
			if res.Outcome != c.outcome || !reflect.DeepEqual(markers, c.markers) {
				t.Errorf("got %s with markers %v, want %s with %v\n%s", res.Outcome, markers, c.outcome, c.markers, res.Stderr)
			}
			if c.outcome != sandbox.Success {
				r := ComputeReward(DefaultRewardConfig(), RewardInput{Outcome: OutcomeScriptError, Executed: true, Markers: len(markers)})
				if want := -1 + 0.1*float64(len(c.markers)); math.Abs(r.Total-want) > 1e-9 {
					t.Errorf("reward %v want %v", r.Total, want)
				}
			}
		})
	}
}

// TestGuardEveryIdea (MLERL_SMOKE=1; MLERL_SMOKE_TASKS=id1,id2 picks the
// tasks, else one of each kind): every applicable catalog idea, applied to
// a task's initial script, runs instrumented under the sandbox's guard
// without the guard stopping it, so that no honest edit loses its credit
// to the guard. About 2 s per idea.
func TestGuardEveryIdea(t *testing.T) {
	if os.Getenv("MLERL_SMOKE") == "" {
		t.Skip("set MLERL_SMOKE=1 to run every catalog idea under the guard")
	}
	py := instrPython(t)
	runner, err := sandbox.NewWarm(context.Background(), py)
	if err != nil {
		t.Fatal(err)
	}
	defer runner.Close()
	want := map[string]bool{}
	for _, id := range strings.Split(os.Getenv("MLERL_SMOKE_TASKS"), ",") {
		if id != "" {
			want[id] = true
		}
	}
	kinds := map[string]bool{}
	for _, task := range suiteTasks(t) {
		kind := task.Modality + "/" + task.TaskType
		if len(want) > 0 && !want[task.ID] || len(want) == 0 && kinds[kind] {
			continue
		}
		kinds[kind] = true
		files, err := tasks.ReadTree(task.WorkspacePath())
		if err != nil {
			t.Fatal(err)
		}
		for _, idea := range catalog.ForTask(task.Modality, task.TaskType) {
			script, err := catalog.Apply(string(files["train.py"].Data), idea.Edit)
			if err != nil {
				continue
			}
			dir := t.TempDir()
			for name, f := range files {
				p := filepath.Join(dir, filepath.FromSlash(name))
				os.MkdirAll(filepath.Dir(p), 0o755)
				os.WriteFile(p, f.Data, 0o644)
			}
			nonce := NewNonce()
			inst, err := Instrument(context.Background(), py, []byte(script), nonce)
			if err != nil {
				t.Errorf("%s + %s: %v", task.ID, idea.ID, err)
				continue
			}
			res, err := runner.Run(context.Background(), sandbox.Request{Dir: dir, Script: "train.py", Source: inst, Marks: MarkLines(nonce), Limits: sandbox.Limits{Timeout: 10 * time.Minute}})
			if err != nil {
				t.Fatal(err)
			}
			markers, _ := ParseMarkers(res.Stdout, nonce)
			if res.Outcome == sandbox.Killed || strings.Contains(res.Stderr, "mlerl sandbox") {
				t.Errorf("%s + %s: %s %s\n%s", task.ID, idea.ID, res.Outcome, res.Reason, res.Stderr)
			}
			t.Logf("%s + %s: %s, %d markers, %v", task.ID, idea.ID, res.Outcome, len(markers), res.Duration.Round(time.Millisecond))
		}
	}
}
