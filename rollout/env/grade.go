package env

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/mlerl/mlerl/internal/blobs"
)

// GradeResult is the grader's verdict on a submission.
type GradeResult struct {
	Valid  bool    `json:"valid"`
	Score  float64 `json:"score"`
	Reason string  `json:"reason"`
}

// grade scores the workspace's submission.csv with the task's private
// grader. The private files exist on disk only while the grader runs, in a
// folder outside the workspace, so no script ever sees them.
func (e *Env) grade(ctx context.Context) (GradeResult, error) {
	sub, err := os.ReadFile(filepath.Join(e.dir, SubmissionFile))
	if errors.Is(err, fs.ErrNotExist) {
		return GradeResult{Reason: "the script did not write " + SubmissionFile}, nil
	}
	if err != nil {
		return GradeResult{}, fmt.Errorf("env: read submission: %w", err)
	}
	if e.private == nil {
		files, _, err := blobs.GetTree(ctx, e.st, e.s.Spec.PrivateTree)
		if err != nil {
			return GradeResult{}, fmt.Errorf("task %s private files: %w", e.s.Spec.TaskID, err)
		}
		e.private = files
	}
	return Grade(ctx, e.cfg.Python, e.private, sub, e.cfg.GradeTimeout)
}

// Grade runs a task's grader on a submission, following the task-format
// contract: private holds grade.py and answers.csv (the task's private/
// tree); the grader runs as `python3 private/grade.py submission.csv
// private/answers.csv` in a fresh temporary folder and prints one JSON
// line {"valid": true, "score": s} or {"valid": false, "reason": "..."}.
// A non-finite score counts as invalid. An error means the grader itself
// is broken (it crashed, timed out or printed no verdict), not the
// submission.
func Grade(ctx context.Context, python string, private blobs.Files, submission []byte, timeout time.Duration) (GradeResult, error) {
	if _, ok := private["grade.py"]; !ok {
		return GradeResult{}, errors.New("grade: the private tree has no grade.py")
	}
	dir, err := os.MkdirTemp("", "mlerl-grade-")
	if err != nil {
		return GradeResult{}, err
	}
	defer os.RemoveAll(dir)
	if err := blobs.WriteDir(filepath.Join(dir, "private"), private); err != nil {
		return GradeResult{}, fmt.Errorf("grade: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "submission.csv"), submission, 0o644); err != nil {
		return GradeResult{}, fmt.Errorf("grade: %w", err)
	}
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, python, "private/grade.py", "submission.csv", "private/answers.csv")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "PYTHONDONTWRITEBYTECODE=1", "PYTHONWARNINGS=ignore", "LC_ALL=C.UTF-8"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return GradeResult{}, ctx.Err()
		}
		return GradeResult{}, fmt.Errorf("grade: grader failed (%v); the grader must print a verdict and exit 0 for any submission: %s", err, truncate(lastLine(stderr.String()), 300))
	}
	line := lastLine(stdout.String())
	var g GradeResult
	dec := json.NewDecoder(strings.NewReader(line))
	if err := dec.Decode(&g); err != nil {
		return GradeResult{}, fmt.Errorf("grade: the grader's last line %q is not a JSON verdict: %v", truncate(line, 200), err)
	}
	if g.Valid && (math.IsNaN(g.Score) || math.IsInf(g.Score, 0)) {
		return GradeResult{Reason: fmt.Sprintf("the score is %v", g.Score)}, nil
	}
	if !g.Valid && g.Reason == "" {
		g.Reason = "the grader refused it"
	}
	return g, nil
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n\r\t ")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
