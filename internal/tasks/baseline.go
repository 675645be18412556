package tasks

import (
	"context"
	"fmt"
	"math"
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
	// ValMetric is the VAL_METRIC value the script printed (what the agent
	// reads); NaN for a task's original script that prints none.
	ValMetric float64
	// TestScore is the grader's score of its submission on the hidden labels.
	TestScore float64
	// Duration is the script's wall time.
	Duration time.Duration
}

// GradeFunc grades the submission file at submission with the grader and
// answers in privateDir (a task's private/ folder): [RunGrader] run
// directly, [RunGraderIn] through a runner, or the environment's warm
// grader. A bad submission is a Grade with Valid false, not an error.
type GradeFunc func(ctx context.Context, privateDir, submission string) (Grade, error)

// run is one run of a train.py in a fresh copy of a task's workspace, and
// the grader's verdict on what it wrote.
type run struct {
	res       sandbox.Result
	valMetric float64
	valErr    error // no usable VAL_METRIC line
	submitted bool  // the script wrote submission.csv
	grade     Grade
}

// runScript copies t's workspace into a fresh temporary folder, with
// script as train.py when it is not nil, runs train.py there through
// runner with limits (Timeout defaults to the task's time_limit_s), reads
// its VAL_METRIC line and, when it succeeded and wrote submission.csv,
// grades that with grade (nil: [RunGraderIn] through runner). The folder
// is removed. The error is for what is not the script's fault: the
// workspace cannot be read, the runner or the grader fails.
func runScript(ctx context.Context, runner sandbox.Runner, grade GradeFunc, t *Task, script []byte, limits sandbox.Limits) (run, error) {
	files, err := ReadTree(t.WorkspacePath())
	if err != nil {
		return run{}, &Error{Task: t.ID, File: WorkspaceDir, Msg: err.Error()}
	}
	if script != nil {
		files[ScriptFile] = blobs.File{Data: script, Mode: 0o644}
	}
	dir, err := os.MkdirTemp("", "mlerl-baseline-"+t.ID+"-")
	if err != nil {
		return run{}, err
	}
	defer os.RemoveAll(dir)
	if err := blobs.WriteDir(dir, files); err != nil {
		return run{}, err
	}
	if limits.Timeout == 0 {
		limits.Timeout = time.Duration(*t.TimeLimitS * float64(time.Second))
	}
	if t.WorkspaceBytes > 0 {
		limits.WorkspaceBytes = t.WorkspaceBytes
	}
	if t.WorkspaceFiles > 0 {
		limits.WorkspaceFiles = int(t.WorkspaceFiles)
	}
	var r run
	if r.res, err = runner.Run(ctx, sandbox.Request{Dir: dir, Script: ScriptFile, Limits: limits}); err != nil {
		return run{}, fmt.Errorf("task %s: run %s/%s: %w", t.ID, WorkspaceDir, ScriptFile, err)
	}
	if r.res.Outcome != sandbox.Success {
		return r, nil
	}
	r.valMetric, r.valErr = ParseValMetric(r.res.Stdout, t.Metric)
	sub := filepath.Join(dir, SubmissionFile)
	if _, err := os.Stat(sub); err != nil {
		return r, nil
	}
	r.submitted = true
	if grade == nil {
		grade = func(ctx context.Context, privateDir, submission string) (Grade, error) {
			return RunGraderIn(ctx, runner, privateDir, submission)
		}
	}
	if r.grade, err = grade(ctx, t.PrivatePath(), sub); err != nil {
		return run{}, &Error{Task: t.ID, File: PrivateDir + "/" + GraderFile, Msg: err.Error()}
	}
	return r, nil
}

// RunBaseline runs t's initial train.py in a fresh copy of its workspace
// through runner with limits (Timeout defaults to the task's
// time_limit_s), reads its VAL_METRIC line and grades its submission.csv
// with the task's private grader through grade (nil: [RunGraderIn] with
// the same runner, in a separate folder: the script never sees private/).
// A script that crashes, times out, prints no metric or writes no valid
// submission gives an *Error naming the file at fault, and so does an
// m_best that is not better than the graded score (unless m_best is
// still to be measured).
func RunBaseline(ctx context.Context, runner sandbox.Runner, grade GradeFunc, t *Task, limits sandbox.Limits) (Baseline, error) {
	script := WorkspaceDir + "/" + ScriptFile
	fail := func(file, field, format string, args ...any) (Baseline, error) {
		return Baseline{}, &Error{Task: t.ID, File: file, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	r, err := runScript(ctx, runner, grade, t, nil, limits)
	if err != nil {
		return Baseline{}, err
	}
	// The benchmark's own script (initial: original) is run as it is; it
	// need not print VAL_METRIC, but it must run and submit.
	original, hint := t.Initial == schemas.InitialOriginal, ""
	if original {
		hint = "; it is the benchmark's own script (task.yaml initial: original), which must run as it is to measure m_init: complete it, or import the task with --initial generated"
	}
	res := r.res
	switch res.Outcome {
	case sandbox.Success:
	case sandbox.Timeout:
		return fail(script, "", "did not finish within time_limit_s=%g s (ran %s): make the baseline faster or raise time_limit_s in task.yaml", *t.TimeLimitS, res.Duration.Round(time.Millisecond))
	case sandbox.ScriptError:
		if m := missingFileRe.FindStringSubmatch(res.Stderr); m != nil {
			return fail(script, "", "reads a missing data file %q (exit %d): add it to workspace/ or fix the path", m[1], res.ExitCode)
		}
		return fail(script, "", "crashed (exit %d): %s%s", res.ExitCode, LastLines(res.Stderr, 3), hint)
	default:
		return fail(script, "", "ended with %s (exit %d): %s", res.Outcome, res.ExitCode, LastLines(res.Stderr, 3))
	}
	switch {
	case r.valErr != nil && original:
		r.valMetric = math.NaN() // the agent reads the script's own output
	case r.valErr != nil:
		return fail(script, ValMetricPrefix, "%v", r.valErr)
	}
	if !r.submitted {
		return fail(script, "", "wrote no %s in its working directory%s", SubmissionFile, hint)
	}
	if !r.grade.Valid {
		return fail(PrivateDir+"/"+GraderFile, "", "rejected the initial script's %s: %s (fix train.py's submission or the grader)", SubmissionFile, r.grade.Reason)
	}
	if t.MBest != nil {
		if err := checkHeadroom(t, r.grade.Score); err != nil {
			return Baseline{}, err
		}
	}
	return Baseline{ValMetric: r.valMetric, TestScore: r.grade.Score, Duration: res.Duration}, nil
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
