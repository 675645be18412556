package tasks

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/mlerl/mlerl/internal/blobs"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/schemas"
)

// Baseline is what one run of a task's initial script measured.
type Baseline struct {
	// ValMetric is the VAL_METRIC value the script printed (what the agent reads).
	ValMetric float64
	// TestScore is the grader's score of its submission on the hidden labels.
	TestScore float64
	// Duration is the script's wall time.
	Duration time.Duration
}

// RunBaseline copies t's workspace into a fresh temporary folder, runs
// train.py there through runner with limits (Timeout defaults to the task's
// time_limit_s), reads its VAL_METRIC line and grades its submission.csv
// with the task's private grader (through the same runner, in a separate
// folder: the script never sees private/).
// A script that crashes, times out, prints no metric or writes no valid
// submission gives an *Error naming the file at fault. The temporary folder
// is removed.
func RunBaseline(ctx context.Context, runner sandbox.Runner, t *Task, limits sandbox.Limits) (Baseline, error) {
	script := WorkspaceDir + "/" + ScriptFile
	fail := func(file, field, format string, args ...any) (Baseline, error) {
		return Baseline{}, &Error{Task: t.ID, File: file, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	files, err := ReadTree(t.WorkspacePath())
	if err != nil {
		return fail(WorkspaceDir, "", "%v", err)
	}
	dir, err := os.MkdirTemp("", "mlerl-baseline-"+t.ID+"-")
	if err != nil {
		return Baseline{}, err
	}
	defer os.RemoveAll(dir)
	if err := blobs.WriteDir(dir, files); err != nil {
		return Baseline{}, err
	}
	if limits.Timeout == 0 {
		limits.Timeout = time.Duration(*t.TimeLimitS * float64(time.Second))
	}
	res, err := runner.Run(ctx, sandbox.Request{Dir: dir, Script: ScriptFile, Limits: limits})
	if err != nil {
		return Baseline{}, fmt.Errorf("task %s: run %s: %w", t.ID, script, err)
	}
	switch res.Outcome {
	case sandbox.Success:
	case sandbox.Timeout:
		return fail(script, "", "did not finish within time_limit_s=%g s (ran %s): make the baseline faster or raise time_limit_s in task.yaml", *t.TimeLimitS, res.Duration.Round(time.Millisecond))
	case sandbox.ScriptError:
		if m := missingFileRe.FindStringSubmatch(res.Stderr); m != nil {
			return fail(script, "", "reads a missing data file %q (exit %d): add it to workspace/ or fix the path", m[1], res.ExitCode)
		}
		return fail(script, "", "crashed (exit %d): %s", res.ExitCode, LastLines(res.Stderr, 3))
	default:
		return fail(script, "", "ended with %s (exit %d): %s", res.Outcome, res.ExitCode, LastLines(res.Stderr, 3))
	}
	val, err := ParseValMetric(res.Stdout, t.Metric)
	if err != nil {
		return fail(script, ValMetricPrefix, "%v", err)
	}
	sub := filepath.Join(dir, SubmissionFile)
	if _, err := os.Stat(sub); err != nil {
		return fail(script, "", "wrote no %s in its working directory", SubmissionFile)
	}
	g, err := RunGraderIn(ctx, runner, t.PrivatePath(), sub)
	if err != nil {
		return fail(PrivateDir+"/"+GraderFile, "", "%v", err)
	}
	if !g.Valid {
		return fail(PrivateDir+"/"+GraderFile, "", "rejected the initial script's %s: %s (fix train.py's submission or the grader)", SubmissionFile, g.Reason)
	}
	if err := checkHeadroom(t, g.Score); err != nil {
		return Baseline{}, err
	}
	return Baseline{ValMetric: val, TestScore: g.Score, Duration: res.Duration}, nil
}

// checkHeadroom fails when m_best is not strictly better than the initial
// score: rewards scale improvements by m_best - m_init, so the gap must be
// real.
func checkHeadroom(t *Task, mInit float64) error {
	best := *t.MBest
	better := best > mInit
	if t.Direction == schemas.LowerIsBetter {
		better = best < mInit
	}
	if better {
		return nil
	}
	return &Error{Task: t.ID, File: SpecFile, Field: "m_best", Msg: fmt.Sprintf("%g is not better than the initial script's graded score %g (%s is better): rewards scale by m_best - m_init, so set m_best to the best known score (or weaken the baseline)", best, mInit, t.Direction)}
}

var missingFileRe = regexp.MustCompile(`(?:FileNotFoundError|No such file or directory)[^\n]*?'([^'\n]+)'`)

func relTo(base, p string) string {
	r, err := filepath.Rel(base, p)
	if err != nil {
		return p
	}
	return filepath.ToSlash(r)
}
