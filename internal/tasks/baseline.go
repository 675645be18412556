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
	// Public and Private are its scores on the two parts of the hidden
	// labels (parts.csv; nil when the grader gave none).
	Public, Private *float64
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
	// redraw grades the same submission on another draw of a keyed
	// split (nil unless the task's parts are keyed).
	redraw func(draw int) (Grade, error)
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
	gradeParts := func() (Grade, error) {
		privateDir, cleanup, err := t.privateForGrading()
		if err != nil {
			return Grade{}, err
		}
		defer cleanup()
		g, err := grade(ctx, privateDir, sub)
		if err != nil {
			return Grade{}, &Error{Task: t.ID, File: PrivateDir + "/" + GraderFile, Msg: err.Error()}
		}
		if t.Parts != nil && g.Valid && !g.HasParts() {
			return Grade{}, &Error{Task: t.ID, File: PrivateDir + "/" + GraderFile, Msg: "gave no public and private scores for the hidden answers' parts: a grader called as grade.py <submission> <answers> <parts> must print them (see tasks/README.md, \"The public and the private part\")"}
		}
		return g, nil
	}
	if r.grade, err = gradeParts(); err != nil {
		return run{}, err
	}
	if t.PartsKeyed && script == nil {
		// The submission stays until runScript returns: RunBaseline may
		// grade it on another draw of the keyed split.
		r.redraw = func(draw int) (Grade, error) {
			if err := t.drawParts(draw); err != nil {
				return Grade{}, err
			}
			return gradeParts()
		}
		g, err := r.redrawn(t)
		if err != nil {
			return run{}, err
		}
		r.grade = g
	}
	return r, nil
}

// redrawn draws the keyed split again (t.SplitDraw 1, 2... up to
// SplitDraws) while the first draw leaves m_best, which both parts take,
// not better than the initial script's score on a part: rewards and
// reported headroom scale by that gap. It returns the grade on the draw
// kept (the first that leaves both parts headroom, else the first).
func (r *run) redrawn(t *Task) (Grade, error) {
	g := r.grade
	if t.MBest == nil || !g.Valid || !g.HasParts() {
		return g, nil
	}
	lacks := func(g Grade) bool {
		pub, priv := t.PartBests()
		return !better(t.Direction, pub, *g.Public) || !better(t.Direction, priv, *g.Private)
	}
	for draw := 1; draw < SplitDraws && lacks(g); draw++ {
		next, err := r.redraw(draw)
		if err != nil {
			return Grade{}, err
		}
		if !lacks(next) {
			return next, nil
		}
	}
	if lacks(g) && t.SplitDraw != 0 {
		if err := t.drawParts(0); err != nil { // none does: the first, and its error
			return Grade{}, err
		}
	}
	return g, nil
}

// drawParts sets t's parts to draw of its keyed split.
func (t *Task) drawParts(draw int) error {
	answers, err := os.ReadFile(filepath.Join(t.PrivatePath(), AnswersFile))
	if err != nil {
		return &Error{Task: t.ID, File: PrivateDir + "/" + AnswersFile, Msg: err.Error()}
	}
	parts, err := SplitAnswersKeyed(answers, t.SplitRuleOrDefault(), t.ID, draw, t.splitKey, t.TaskType, t.Metric)
	if err != nil {
		return &Error{Task: t.ID, File: PrivateDir + "/" + AnswersFile, Field: "answer_split", Msg: err.Error()}
	}
	c, err := CountParts(answers, parts, t.Metric)
	if err != nil {
		return &Error{Task: t.ID, File: PrivateDir + "/" + PartsFile, Msg: err.Error()}
	}
	t.Parts, t.PartRows, t.SplitDraw = parts, c, draw
	return nil
}

// privateForGrading returns a folder holding the task's private files as
// graders get them: the task's own private/ when its parts.csv is there
// (or it has no parts), else a temporary copy with the computed parts.csv
// beside them, removed by cleanup.
func (t *Task) privateForGrading() (dir string, cleanup func(), err error) {
	if !t.PartsComputed {
		return t.PrivatePath(), func() {}, nil
	}
	files, err := t.PrivateFiles()
	if err != nil {
		return "", nil, err
	}
	tmp, err := os.MkdirTemp("", "mlerl-private-"+t.ID+"-")
	if err != nil {
		return "", nil, err
	}
	dir = filepath.Join(tmp, PrivateDir)
	if err := blobs.WriteDir(dir, files); err != nil {
		os.RemoveAll(tmp)
		return "", nil, err
	}
	return dir, func() { os.RemoveAll(tmp) }, nil
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
		if err := checkHeadroom(t, "m_best", *t.MBest, r.grade.Score, "graded score"); err != nil {
			return Baseline{}, err
		}
		if r.grade.HasParts() {
			pub, priv := t.PartBests()
			field := func(key string, set *float64) string {
				if set == nil {
					return "m_best" // no per-part value: the part takes m_best
				}
				return key
			}
			if err := checkHeadroom(t, field("m_best_public", t.MBestPublic), pub, *r.grade.Public, "score on the public part of the hidden answers"); err != nil {
				return Baseline{}, err
			}
			if err := checkHeadroom(t, field("m_best_private", t.MBestPrivate), priv, *r.grade.Private, "score on the private part of the hidden answers"); err != nil {
				return Baseline{}, err
			}
		}
	}
	return Baseline{ValMetric: r.valMetric, TestScore: r.grade.Score, Public: r.grade.Public, Private: r.grade.Private, Duration: res.Duration}, nil
}

// PartBests returns m_best on the public and the private part: task.yaml's
// m_best_public and m_best_private, each m_best when absent. t.MBest must
// be set.
func (t *Task) PartBests() (public, private float64) {
	public, private = *t.MBest, *t.MBest
	if t.MBestPublic != nil {
		public = *t.MBestPublic
	}
	if t.MBestPrivate != nil {
		private = *t.MBestPrivate
	}
	return public, private
}

// checkHeadroom fails when m_best is not strictly better than the initial
// score: rewards scale improvements by m_best - m_init, so the gap must be
// real.
func checkHeadroom(t *Task, field string, best, mInit float64, what string) error {
	better := best > mInit
	if t.Direction == schemas.LowerIsBetter {
		better = best < mInit
	}
	if better {
		return nil
	}
	return &Error{Task: t.ID, File: SpecFile, Field: field, Msg: fmt.Sprintf("%g is not better than the initial script's %s %g (%s is better): rewards scale by m_best - m_init, so set %s to the best known score (or weaken the baseline)", best, what, mInit, t.Direction, field)}
}

var missingFileRe = regexp.MustCompile(`(?:FileNotFoundError|No such file or directory)[^\n]*?'([^'\n]+)'`)

func relTo(base, p string) string {
	r, err := filepath.Rel(base, p)
	if err != nil {
		return p
	}
	return filepath.ToSlash(r)
}
