package env

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/mlerl/mlerl/internal/blobs"
	"github.com/mlerl/mlerl/internal/safefile"
	"github.com/mlerl/mlerl/internal/tasks"
)

// grade scores the workspace's submission.csv with the task's private
// grader. The private files exist on disk only while the grader runs, in a
// folder outside the workspace, so no script ever sees them.
func (e *Env) grade(ctx context.Context) (tasks.Grade, error) {
	sub, err := ReadSubmission(e.dir)
	if err != nil {
		var se *safefile.Error
		if errors.As(err, &se) {
			return tasks.Grade{Reason: submissionReason(se)}, nil
		}
		return tasks.Grade{}, fmt.Errorf("env: read submission: %w", err)
	}
	key := e.s.Spec.PrivateTree + " " + blobs.Hash(sub)
	if g, ok := grades.get(key); ok {
		return g, nil
	}
	if e.private == nil {
		files, _, err := blobs.GetTree(ctx, e.st, e.s.Spec.PrivateTree)
		if err != nil {
			return tasks.Grade{}, fmt.Errorf("task %s private files: %w", e.s.Spec.TaskID, err)
		}
		e.private = files
	}
	if e.cfg.GradeTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.cfg.GradeTimeout)
		defer cancel()
	}
	g, err := Grade(ctx, e.cfg.Python, e.private, sub)
	if err != nil {
		return g, fmt.Errorf("task %s: %w", e.s.Spec.TaskID, err)
	}
	grades.put(key, g)
	return g, nil
}

// MaxSubmissionBytes bounds the submission file the grader reads.
const MaxSubmissionBytes = tasks.MaxSubmissionBytes

// ReadSubmission reads dir's submission.csv as the grader sees it: a
// regular file of its own (one hard link), inside dir, reached without
// following any link, at most MaxSubmissionBytes. A symbolic link (to the
// hidden answers, through /proc/self/cwd, or even to another workspace
// file), a hard link, a FIFO or a device is refused, never opened or
// followed: the host's view of the filesystem is wider than the script's.
func ReadSubmission(dir string) ([]byte, error) {
	return safefile.ReadFile(dir, SubmissionFile, safefile.Options{MaxBytes: MaxSubmissionBytes, SingleLink: true})
}

// submissionReason is the invalid-submission reason for a refused read.
func submissionReason(err *safefile.Error) string {
	if errors.Is(err, safefile.ErrNotExist) {
		return "the script did not write " + SubmissionFile
	}
	return err.Error() + "; the script must write its predictions to " + SubmissionFile + " itself, as a regular file in the workspace"
}

// gradeCache remembers verdicts by (private tree, submission hash), for
// the whole process: a grader is a pure function of the submission file
// and the answers, and one run (a Python start plus pandas and
// scikit-learn imports, 1-3 s) often costs more than a warm execution.
// Re-executions of an unchanged deterministic script, and the many
// restores of one expert state in step-wise RL, hit it.
type gradeCache struct {
	mu   sync.Mutex
	m    map[string]tasks.Grade
	runs atomic.Int64 // grader processes started (for tests and benchmarks)
}

// gradeCacheSize bounds the cache; when full it starts over.
const gradeCacheSize = 1 << 14

var grades = &gradeCache{m: map[string]tasks.Grade{}}

func (c *gradeCache) get(key string) (tasks.Grade, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.m[key]
	return g, ok
}

func (c *gradeCache) put(key string, g tasks.Grade) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= gradeCacheSize {
		clear(c.m)
	}
	c.m[key] = g
}

// Grade runs a task's grader on a submission, as the task-format contract
// says (`python private/grade.py <submission> <answers>`): private is the
// task's private tree (grade.py and answers.csv), written for the run into
// a fresh temporary task folder and removed afterwards. The grader runs in
// the warm grader worker (grade_warm.go), else through tasks.RunGrader. An
// invalid submission is a Grade with Valid false; an error means the
// grader itself misbehaved (crashed, timed out, printed no verdict).
// The suite's own graders run in the worker's process (suiteGrader).
func Grade(ctx context.Context, python string, private blobs.Files, submission []byte) (tasks.Grade, error) {
	return gradeIn(ctx, python, private, submission, suiteGrader(private[tasks.GraderFile].Data))
}

// gradeIn is Grade with the choice of the worker's process (inproc) or a
// forked child made by the caller.
func gradeIn(ctx context.Context, python string, private blobs.Files, submission []byte, inproc bool) (tasks.Grade, error) {
	if _, ok := private[tasks.GraderFile]; !ok {
		return tasks.Grade{}, fmt.Errorf("grade: the private tree has no %s", tasks.GraderFile)
	}
	dir, err := os.MkdirTemp("", "mlerl-grade-")
	if err != nil {
		return tasks.Grade{}, err
	}
	defer os.RemoveAll(dir)
	privDir := filepath.Join(dir, tasks.PrivateDir)
	if err := blobs.WriteDir(privDir, private); err != nil {
		return tasks.Grade{}, fmt.Errorf("grade: %w", err)
	}
	grades.runs.Add(1)
	subPath := filepath.Join(dir, SubmissionFile)
	if err := os.WriteFile(subPath, submission, 0o644); err != nil {
		return tasks.Grade{}, fmt.Errorf("grade: %w", err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, tasks.GradeTimeout)
		defer cancel()
	}
	parts := ""
	if _, ok := private[tasks.PartsFile]; ok {
		parts = filepath.Join(privDir, tasks.PartsFile)
	}
	if g, err, ok := warmGrader(python).grade(ctx, dir, filepath.Join(privDir, tasks.GraderFile), subPath, filepath.Join(privDir, tasks.AnswersFile), parts, inproc); ok {
		if err == nil {
			err = g.CheckParts(filepath.Join(privDir, tasks.GraderFile), parts != "")
		}
		return g, err
	}
	return tasks.RunGrader(ctx, python, privDir, subPath)
}
