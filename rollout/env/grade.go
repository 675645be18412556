package env

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/mlerl/mlerl/internal/blobs"
	"github.com/mlerl/mlerl/internal/tasks"
)

// grade scores the workspace's submission.csv with the task's private
// grader. The private files exist on disk only while the grader runs, in a
// folder outside the workspace, so no script ever sees them.
func (e *Env) grade(ctx context.Context) (tasks.Grade, error) {
	sub, err := os.ReadFile(filepath.Join(e.dir, SubmissionFile))
	if errors.Is(err, fs.ErrNotExist) {
		return tasks.Grade{Reason: "the script did not write " + SubmissionFile}, nil
	}
	if err != nil {
		return tasks.Grade{}, fmt.Errorf("env: read submission: %w", err)
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
	return g, nil
}

// Grade runs a task's grader (internal/tasks.RunGrader, the task-format
// contract) on a submission: private is the task's private tree
// (grade.py and answers.csv), written for the run into a fresh temporary
// task folder and removed afterwards. An invalid submission is a Grade
// with Valid false; an error means the grader itself misbehaved.
func Grade(ctx context.Context, python string, private blobs.Files, submission []byte) (tasks.Grade, error) {
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
	subPath := filepath.Join(dir, SubmissionFile)
	if err := os.WriteFile(subPath, submission, 0o644); err != nil {
		return tasks.Grade{}, fmt.Errorf("grade: %w", err)
	}
	return tasks.RunGrader(ctx, python, privDir, subPath)
}
