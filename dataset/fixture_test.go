package dataset

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/internal/blobs"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// fixture is a small synthetic data root: a tasks dataset (alpha and beta
// held in, omega held out) with real blob trees, an ideas dataset, and a
// steps dataset whose snapshots are blob trees shaped like the
// environment's (workspace files, spec with task trees, undo backups).
type fixture struct {
	root                   string
	st                     store.Store
	tasksM, ideasM, stepsM *datasets.Manifest
}

var fixtureTasks = []struct{ id, split string }{{"alpha", schemas.HeldIn}, {"beta", schemas.HeldIn}, {"omega", schemas.HeldOut}}

// fixtureOutcomes are the four steps of every trajectory.
var fixtureOutcomes = []struct{ action, outcome string }{
	{"Edit Script (AI)", outcomeSuccess},
	{"", outcomeFormatError},
	{"Inspect Script Lines", outcomeInvalidAction},
	{"Execute Script", "script_error"},
}

func commitRows[T any](t testing.TB, st store.Store, name string, schema schemas.Info, rows []T, parents ...datasets.Parent) *datasets.Manifest {
	t.Helper()
	ctx := context.Background()
	p, err := datasets.Begin(ctx, st, name, schema, "fixture")
	if err != nil {
		t.Fatal(err)
	}
	if err := datasets.WritePart(ctx, p, "part-0.parquet", rows); err != nil {
		t.Fatal(err)
	}
	m, err := p.Commit(ctx, datasets.CommitOptions{Producer: datasets.Producer{Command: "fixture"}, Parents: parents})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// newFixture writes the fixture: per task 2 trajectories of 4 steps. The
// second trajectory's first step repeats the first one's (same state,
// same answer); alpha's last step has an answer of ~3,000 tokens.
func newFixture(t testing.TB) fixture {
	t.Helper()
	ctx := context.Background()
	root := t.TempDir()
	st, err := store.Open(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	var tasks []schemas.Task
	var steps []schemas.Step
	for _, ft := range fixtureTasks {
		ws, err := blobs.PutTree(ctx, st, blobs.Files{
			"train.py":  {Data: []byte("# === imports ===\nimport sys\n# === end imports ===\nprint('VAL_METRIC accuracy 0.5') # " + ft.id + "\n"), Mode: 0o644},
			"train.csv": {Data: []byte("x,y\n1,0\n2,1\n"), Mode: 0o644},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		pv, err := blobs.PutTree(ctx, st, blobs.Files{"answers.csv": {Data: []byte("id,y\n0," + ft.id + "\n"), Mode: 0o644}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, schemas.Task{TaskID: ft.id, Title: strings.ToUpper(ft.id), Modality: "tabular", TaskType: "binary-classification",
			Metric: "accuracy", Direction: schemas.HigherIsBetter, MInit: 0.5, MInitTest: 0.52, MBest: 0.9, MBestSource: "fixture",
			Split: ft.split, TimeLimitS: 60, WorkspaceTree: ws, PrivateTree: pv, Source: "builtin"})
		for tr := 0; tr < 2; tr++ {
			traj := fmt.Sprintf("%s-%04d", ft.id, tr)
			for i, o := range fixtureOutcomes {
				// The first step of every trajectory is the task's initial state.
				variant := fmt.Sprintf("%s traj %d step %d", ft.id, tr, i)
				if i == 0 {
					variant = ft.id + " initial"
				}
				backup, err := blobs.Put(ctx, st, []byte("backup of train.py at "+variant))
				if err != nil {
					t.Fatal(err)
				}
				meta, _ := json.Marshal(map[string]any{
					"version": 1,
					"state":   map[string]any{"spec": map[string]any{"task_id": ft.id, "workspace_tree": ws, "private_tree": pv}, "steps": i},
					"backups": map[string][]string{"train.py": {backup, ""}},
				})
				snap, err := blobs.PutTree(ctx, st, blobs.Files{"train.py": {Data: []byte("# " + variant + "\n"), Mode: 0o644}}, meta)
				if err != nil {
					t.Fatal(err)
				}
				answer := "Action: " + o.action + "\nAction Input: {\"script_name\": \"train.py\"}"
				if o.action == "" {
					answer = "I think I should run it"
				}
				if ft.id == "alpha" && tr == 1 && i == 3 {
					answer += strings.Repeat(" lorem ipsum dolor", 1000)
				}
				prev := 0.5 + 0.01*float64(i)
				steps = append(steps, schemas.Step{
					TaskID: ft.id, TrajectoryID: traj, StepIndex: int32(i),
					State: "FULL PROMPT " + variant, CompactState: "compact " + variant,
					ActionText: answer, ActionName: o.action, Outcome: o.outcome,
					MetricBefore: &prev, Reward: float64(i) * 0.1, ExecS: float64(i), SnapshotRef: snap,
				})
			}
		}
	}
	f := fixture{root: root, st: st}
	f.tasksM = commitRows(t, st, "tasks", schemas.Tasks, tasks)
	f.ideasM = commitRows(t, st, "ideas", schemas.Ideas, []schemas.Idea{{IdeaID: "i1", TaskID: "alpha", Category: "model", Text: "bigger model", Source: "catalog", Embedding: []float32{1}, Kept: true}}, f.tasksM.Ref())
	f.stepsM = commitRows(t, st, "steps", schemas.Steps, steps, f.tasksM.Ref(), f.ideasM.Ref())
	return f
}

// fixtureSteps reads the fixture's steps back, sorted as Run sorts them.
func (f fixture) steps(t testing.TB) ([]schemas.Step, map[string]schemas.Task) {
	t.Helper()
	ctx := context.Background()
	steps, err := datasets.ReadAll[schemas.Step](ctx, f.st, f.stepsM, schemas.Steps)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := datasets.ReadAll[schemas.Task](ctx, f.st, f.tasksM, schemas.Tasks)
	if err != nil {
		t.Fatal(err)
	}
	tasks := map[string]schemas.Task{}
	for _, r := range rows {
		tasks[r.TaskID] = r
	}
	return steps, tasks
}
