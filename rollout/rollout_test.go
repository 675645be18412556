package rollout

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/env/episode"
	"github.com/mlerl/mlerl/ingest"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

const testTask = "wine-cultivar"

func repoRoot(t testing.TB) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// setupData runs the ingest stage on one built-in task: its tasks dataset
// and an ideas dataset keeping 3 catalog ideas per category.
func setupData(t testing.TB, root string) {
	t.Helper()
	if _, err := sandbox.FindPython(""); err != nil {
		t.Skipf("no task runtime: %v", err)
	}
	ctx := context.Background()
	// One split key for every data root of these tests (a rerun compares
	// two roots): a root gets another's split from a copy of its key.
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(ingest.SplitKeyFile)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, ingest.SplitKeyFile), []byte("726f6c6c6f75742074657374206b6579\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := ingest.DefaultTasksConfig()
	cfg.Data, cfg.Suite, cfg.Only = root, filepath.Join(repoRoot(t), "tasks"), []string{testTask}
	if err := ingest.RunTasks(ctx, cfg); err != nil {
		t.Fatalf("ingest tasks: %v", err)
	}
	ic := ingest.DefaultIdeasConfig()
	ic.Data, ic.K = root, 3
	if err := ingest.RunIdeas(ctx, ic); err != nil {
		t.Fatalf("ingest ideas: %v", err)
	}
}

func testConfig(root string) Config {
	cfg := DefaultConfig()
	cfg.Data, cfg.PerTask, cfg.Workers, cfg.FlushEvery = root, 4, 2, 1
	cfg.Env.MaxSteps = 8
	cfg.Seed = 7
	return cfg
}

func readRows(t testing.TB, root string) ([]schemas.Trajectory, []schemas.Step) {
	t.Helper()
	ctx := context.Background()
	st, _ := store.Open(ctx, root)
	tm, err := datasets.Latest(ctx, st, "trajectories")
	if err != nil {
		t.Fatal(err)
	}
	sm, err := datasets.Latest(ctx, st, "steps")
	if err != nil {
		t.Fatal(err)
	}
	trajs, err := datasets.ReadAll[schemas.Trajectory](ctx, st, tm, schemas.Trajectories)
	if err != nil {
		t.Fatal(err)
	}
	steps, err := datasets.ReadAll[schemas.Step](ctx, st, sm, schemas.Steps)
	if err != nil {
		t.Fatal(err)
	}
	return trajs, steps
}

func TestRolloutEndToEnd(t *testing.T) {
	root := t.TempDir()
	setupData(t, root)
	ctx := context.Background()
	if err := Run(ctx, testConfig(root)); err != nil {
		t.Fatal(err)
	}
	trajs, steps := readRows(t, root)
	if len(trajs) != 4 {
		t.Fatalf("got %d trajectories, want 4", len(trajs))
	}
	per := map[string]int{}
	actions := map[string]int{}
	for _, s := range steps {
		per[s.TrajectoryID]++
		actions[s.ActionName]++
		if s.SnapshotRef == "" || s.State == "" || s.CompactState == "" || s.ActionText == "" || s.Outcome == "" {
			t.Fatalf("step %s/%d lacks a recorded field: %+v", s.TrajectoryID, s.StepIndex, s)
		}
	}
	for _, tr := range trajs {
		if int(tr.NumSteps) != per[tr.TrajectoryID] || tr.NumSteps == 0 || tr.NumSteps > 8 {
			t.Errorf("trajectory %s: num_steps %d, %d step rows (max 8)", tr.TrajectoryID, tr.NumSteps, per[tr.TrajectoryID])
		}
		if len(tr.PlanIdeaIDs) < 1 || len(tr.PlanIdeaIDs) > 3 {
			t.Errorf("trajectory %s: plan of %d ideas, want 1 to 3", tr.TrajectoryID, len(tr.PlanIdeaIDs))
		}
	}
	if actions[env.EditScriptAI] == 0 || actions[env.ExecuteScript] == 0 {
		t.Errorf("the expert never edited or executed: %v", actions)
	}

	// The steps manifest records how the prompts were rendered, which
	// evaluation reads back.
	st, _ := store.Open(ctx, root)
	sm, err := datasets.Latest(ctx, st, "steps")
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(root)
	if p, ok := episode.PromptsOf(sm); !ok || p != promptOptions(cfg).Prompts() || p.Counter == "" || p.Format != agents.CompactFormat {
		t.Errorf("steps manifest prompts %+v (ok %v), want %+v", p, ok, promptOptions(cfg).Prompts())
	}

	// Any recorded state restores exactly: the restored env's history has
	// the step's index and its current score equals the step's metric_before.
	s := steps[len(steps)/2]
	ecfg := env.DefaultConfig()
	ecfg.Runner = sandbox.NewCold("/usr/bin/python3")
	e, err := env.Restore(ctx, ecfg, st, s.SnapshotRef)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Steps() != int(s.StepIndex) || s.MetricBefore == nil || e.Current() != *s.MetricBefore {
		t.Errorf("restored step %d: got steps %d current %v, want steps %d current %v", s.StepIndex, e.Steps(), e.Current(), s.StepIndex, *s.MetricBefore)
	}
}

// canonical renders the rows that must not depend on timing or crashes.
func canonical(trajs []schemas.Trajectory, steps []schemas.Step) []string {
	var out []string
	for _, t := range trajs {
		fm := "nil"
		if t.FinalMetric != nil {
			fm = fmt.Sprintf("%.6f", *t.FinalMetric)
		}
		out = append(out, fmt.Sprintf("T %s %s %d %s %.6f", t.TrajectoryID, strings.Join(t.PlanIdeaIDs, ","), t.NumSteps, fm, t.TotalReward))
	}
	for _, s := range steps {
		ma := "nil"
		if s.MetricAfter != nil {
			ma = fmt.Sprintf("%.6f", *s.MetricAfter)
		}
		out = append(out, fmt.Sprintf("S %s %02d %q %s %s %.6f", s.TrajectoryID, s.StepIndex, s.ActionText, s.Outcome, ma, s.Reward))
	}
	sort.Strings(out)
	return out
}

func TestRolloutResumesAfterSIGKILL(t *testing.T) {
	if root := os.Getenv("MLERL_ROLLOUT_CHILD"); root != "" {
		cfg := testConfig(root)
		cfg.Workers = 1
		afterPartFlush = func(written int) {
			if written >= 2 { // some, not all: the kill lands mid-run
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}
		if err := Run(context.Background(), cfg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	if testing.Short() {
		t.Skip("runs three rollouts")
	}
	killed, clean := t.TempDir(), t.TempDir()
	setupData(t, killed)
	setupData(t, clean)

	// A child process runs the rollout and SIGKILLs itself once two
	// trajectories (of more) are flushed.
	cmd := exec.Command(os.Args[0], "-test.run", "^TestRolloutResumesAfterSIGKILL$")
	cmd.Env = append(os.Environ(), "MLERL_ROLLOUT_CHILD="+killed)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: got %v, want death by SIGKILL; output:\n%s", err, out)
	}
	ctx := context.Background()
	st, _ := store.Open(ctx, killed)
	if m, err := datasets.Latest(ctx, st, "trajectories"); err == nil {
		t.Fatalf("the child was killed mid-run, yet trajectories v%d is committed", m.Version)
	}
	if parts, _ := filepath.Glob(filepath.Join(killed, "trajectories", "v*", "shard-*.parquet")); len(parts) == 0 {
		t.Fatal("the killed child left no part to resume from")
	}

	// Rerun: it resumes the pending version.
	cfg := testConfig(killed)
	cfg.Workers = 1
	if err := Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	cfg = testConfig(clean)
	cfg.Workers = 1
	if err := Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	got := canonical(readRows(t, killed))
	want := canonical(readRows(t, clean))
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("resumed rollout differs from an uninterrupted one:\ngot  %d rows\nwant %d rows\nfirst got:  %v\nfirst want: %v", len(got), len(want), head(got), head(want))
	}
}

func head(s []string) []string {
	if len(s) > 5 {
		return s[:5]
	}
	return s
}
