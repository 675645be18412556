package env

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mlerl/mlerl/internal/blobs"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/tasks"
)

// BenchmarkStep measures one step: a cheap action, and Execute Script on
// the fixture task (instrument, run, strip markers, grade) through the
// cold and the warm sandbox runner; and a snapshot of the workspace.
//
//	GOEXPERIMENT=simd go test -run XXX -bench Step -benchtime 20x ./env/
func BenchmarkStep(b *testing.B) {
	ctx := context.Background()
	python := realPython(b)
	warm, err := sandbox.NewWarm(ctx, python)
	if err != nil {
		b.Fatal(err)
	}
	defer warm.Close()
	cold := sandbox.NewCold(python)
	defer cold.Close()
	newEnv := func(b *testing.B, runner sandbox.Runner) *Env {
		st := newLocalStore(b)
		cfg := testConfig(b)
		cfg.Python, cfg.Runner, cfg.Instrumenter = python, runner, nil
		cfg.MaxSteps, cfg.MaxTime = 1<<30, 1000*time.Hour
		e, err := New(ctx, cfg, fixture(b, st, false), st)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { e.Close() })
		return e
	}
	cases := []struct {
		name   string
		runner sandbox.Runner
		action string
	}{
		{"inspect", cold, act(InspectScriptLines, "train.py", "1", "26")},
		{"edit_segment", cold, act(EditScriptSegment, "train.py", "14", "14", "threshold = 0.5")},
		{"execute_cold", cold, act(ExecuteScript, "train.py")},
		{"execute_warm", warm, act(ExecuteScript, "train.py")},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			e := newEnv(b, c.runner)
			var exec time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r, err := e.Step(ctx, c.action)
				if err != nil || (r.Outcome != OutcomeSuccess) {
					b.Fatalf("%v %s %s", err, r.Outcome, r.Detail)
				}
				exec += r.ExecDuration
			}
			b.ReportMetric(float64(exec.Milliseconds())/float64(b.N), "exec-ms/op")
		})
	}
	b.Run("snapshot", func(b *testing.B) {
		e := newEnv(b, cold)
		for i := 0; i < b.N; i++ {
			// A changed file each time, so each snapshot is a new tree.
			if _, err := e.Step(ctx, act(EditScriptSegment, "train.py", "14", "14", "threshold = "+time.Now().String()[:26])); err != nil {
				b.Fatal(err)
			}
			if _, err := e.Snapshot(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkStepBuiltin measures Execute Script on a built-in task
// (wine-cultivar: numpy, pandas, scikit-learn) through the cold and the
// warm runner (the verdict comes from the grade cache after the first
// run), and one uncached grader run.
//
//	GOEXPERIMENT=simd go test -run XXX -bench StepBuiltin -benchtime 5x ./env/
func BenchmarkStepBuiltin(b *testing.B) {
	ctx := context.Background()
	python := realPython(b)
	task, err := tasks.Load(filepath.Join("..", "tasks", "wine-cultivar"))
	if err != nil {
		b.Skip(err)
	}
	st := newLocalStore(b)
	ws, priv, err := tasks.UploadTrees(ctx, st, task)
	if err != nil {
		b.Fatal(err)
	}
	row := task.Row()
	row.WorkspaceTree, row.PrivateTree = ws, priv
	warm, err := sandbox.NewWarm(ctx, python)
	if err != nil {
		b.Fatal(err)
	}
	defer warm.Close()
	cold := sandbox.NewCold(python)
	defer cold.Close()
	for _, c := range []struct {
		name   string
		runner sandbox.Runner
	}{{"execute_cold", cold}, {"execute_warm", warm}} {
		b.Run(c.name, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Python, cfg.Runner, cfg.WorkDir = python, c.runner, b.TempDir()
			cfg.MaxSteps, cfg.MaxTime = 1<<30, 1000*time.Hour
			e, err := New(ctx, cfg, SpecFromTask(row), st)
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			var exec time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r, err := e.Step(ctx, act(ExecuteScript, "train.py"))
				if err != nil || r.Outcome != OutcomeSuccess {
					b.Fatalf("%v %s %s", err, r.Outcome, r.Detail)
				}
				exec += r.ExecDuration
			}
			b.ReportMetric(float64(exec.Milliseconds())/float64(b.N), "exec-ms/op")
		})
	}
	b.Run("grade", func(b *testing.B) {
		private, _, err := blobs.GetTree(ctx, st, priv)
		if err != nil {
			b.Fatal(err)
		}
		sub, err := os.ReadFile(filepath.Join(task.PrivatePath(), tasks.AnswersFile))
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < b.N; i++ {
			if g, err := Grade(ctx, python, private, sub); err != nil || !g.Valid {
				b.Fatalf("%+v %v", g, err)
			}
		}
	})
}
