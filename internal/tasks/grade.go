package tasks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mlerl/mlerl/internal/blobs"
	"github.com/mlerl/mlerl/internal/safefile"
	"github.com/mlerl/mlerl/internal/sandbox"
)

// GradeTimeout bounds one grader run when ctx has no earlier deadline.
const GradeTimeout = 5 * time.Minute

// Grade is a grader's verdict on one submission.
type Grade struct {
	Valid  bool    `json:"valid"`
	Score  float64 `json:"score"`
	Reason string  `json:"reason,omitempty"`
	// Public and Private are a valid submission's scores on the two parts
	// of the hidden answers, when the grader was given parts.csv (nil
	// otherwise). Score stays the score on all of them.
	Public  *float64 `json:"public,omitempty"`
	Private *float64 `json:"private,omitempty"`
}

// HasParts reports whether g carries both parts' scores.
func (g Grade) HasParts() bool { return g.Public != nil && g.Private != nil }

// checkParts fails when a grader given parts.csv printed a valid verdict
// without both parts' scores: it does not know the third argument.
func (g Grade) checkParts(grader string, gaveParts bool) error {
	if gaveParts && g.Valid && !g.HasParts() {
		return fmt.Errorf("%s was given the hidden answers' parts (%s) but printed no \"public\" and \"private\" scores: a grader called as grade.py <submission> <answers> <parts> must score each part (see tasks/README.md, \"The public and the private part\")", grader, PartsFile)
	}
	return nil
}

// CheckParts fails when a grader given parts.csv printed a valid verdict
// without both parts' scores (for graders run by other packages).
func (g Grade) CheckParts(grader string, gaveParts bool) error {
	return g.checkParts(grader, gaveParts)
}

// RunGrader runs privateDir/grade.py on submissionPath against
// privateDir/answers.csv, from privateDir's parent folder (the task
// folder), as `python grade.py <submission> <answers>`. An invalid
// submission is a Grade with Valid false and its Reason, not an error; the
// error is for a grader that misbehaves: it crashes, times out, prints no
// JSON line or claims a valid non-finite score.
func RunGrader(ctx context.Context, python, privateDir, submissionPath string) (Grade, error) {
	privateDir, err := filepath.Abs(privateDir)
	if err != nil {
		return Grade{}, err
	}
	if submissionPath, err = filepath.Abs(submissionPath); err != nil {
		return Grade{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, GradeTimeout)
	defer cancel()
	grader := filepath.Join(privateDir, GraderFile)
	args := []string{grader, submissionPath, filepath.Join(privateDir, AnswersFile)}
	parts := filepath.Join(privateDir, PartsFile)
	gaveParts := fileExists(parts)
	if gaveParts {
		args = append(args, parts)
	}
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Dir = filepath.Dir(privateDir)
	cmd.Env = append(os.Environ(), "PYTHONWARNINGS=ignore", "PYTHONDONTWRITEBYTECODE=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	if ctx.Err() != nil {
		return Grade{}, fmt.Errorf("%s: did not finish within %s", grader, GradeTimeout)
	}
	if runErr != nil {
		return Grade{}, fmt.Errorf("%s crashed (%v): %s; a grader must print {\"valid\": false, \"reason\": ...} and exit 0 for a bad submission", grader, runErr, LastLines(stderr.String(), 3))
	}
	g, err := ParseGrade(stdout.String())
	if err != nil {
		return Grade{}, fmt.Errorf("%s: %v", grader, err)
	}
	return g, g.checkParts(grader, gaveParts)
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// MaxReasonBytes bounds an invalid verdict's reason as ParseGrade returns
// it: a grader may quote the submission in its reason, and verdicts are
// cached for the whole process (env's grade cache) and shown to the agent,
// so a long reason keeps its head and says it was cut.
const MaxReasonBytes = 2000

// ParseGrade reads a grader's verdict: the last line of out that is a
// JSON object ({"valid": true, "score": 0.91} or {"valid": false,
// "reason": "..."}). A reason longer than MaxReasonBytes is cut.
func ParseGrade(out string) (Grade, error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		line := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var raw struct {
			Valid   *bool    `json:"valid"`
			Score   *float64 `json:"score"`
			Reason  string   `json:"reason"`
			Public  *float64 `json:"public"`
			Private *float64 `json:"private"`
		}
		if err := json.Unmarshal([]byte(line), &raw); err != nil {
			return Grade{}, fmt.Errorf("output line %q is not valid JSON: %v", line, err)
		}
		if raw.Valid == nil {
			return Grade{}, fmt.Errorf("output %q has no \"valid\" key", line)
		}
		g := Grade{Valid: *raw.Valid, Reason: raw.Reason}
		if g.Valid {
			if raw.Score == nil || math.IsNaN(*raw.Score) || math.IsInf(*raw.Score, 0) {
				return Grade{}, fmt.Errorf("output %q says valid but has no finite \"score\"", line)
			}
			g.Score, g.Reason = *raw.Score, ""
			switch {
			case (raw.Public == nil) != (raw.Private == nil):
				return Grade{}, fmt.Errorf("output %q has one of \"public\" and \"private\" without the other (a grader given parts.csv scores both parts)", line)
			case raw.Public != nil && !finite(*raw.Public, *raw.Private):
				return Grade{}, fmt.Errorf("output %q says valid but a part's score is not finite", line)
			}
			g.Public, g.Private = raw.Public, raw.Private
		} else if g.Reason == "" {
			g.Reason = "the grader gave no reason"
		} else if len(g.Reason) > MaxReasonBytes {
			g.Reason = strings.ToValidUTF8(g.Reason[:MaxReasonBytes-len(reasonCut)], "") + reasonCut
		}
		return g, nil
	}
	return Grade{}, fmt.Errorf("printed no JSON line (want {\"valid\": true, \"score\": 0.91} or {\"valid\": false, \"reason\": \"...\"}); output was %q", LastLines(out, 3))
}

func finite(vs ...float64) bool {
	for _, v := range vs {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return false
		}
	}
	return true
}

// reasonCut ends a reason ParseGrade cut to MaxReasonBytes.
const reasonCut = "... (reason cut)"

// ErrNoMetric is wrapped when a script's output has no usable VAL_METRIC line.
var ErrNoMetric = errors.New("no validation metric")

// ParseValMetric finds the line `VAL_METRIC <metric> <value>` in a script's
// stdout. Exactly one such line must name metric; its value must be a
// finite number. Lines naming another metric are an error too, since the
// agent would read the wrong number.
func ParseValMetric(stdout, metric string) (float64, error) {
	var (
		found []float64
		other []string
	)
	for _, line := range strings.Split(stdout, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != ValMetricPrefix {
			continue
		}
		if len(f) != 3 {
			return 0, fmt.Errorf("line %q: want %s <metric> <value>: %w", strings.TrimSpace(line), ValMetricPrefix, ErrNoMetric)
		}
		if f[1] != metric {
			other = append(other, f[1])
			continue
		}
		v, err := strconv.ParseFloat(f[2], 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, fmt.Errorf("line %q: value %q is not a finite number: %w", strings.TrimSpace(line), f[2], ErrNoMetric)
		}
		found = append(found, v)
	}
	switch {
	case len(other) > 0:
		return 0, fmt.Errorf("printed %s %s but task.yaml's metric is %s: %w", ValMetricPrefix, other[0], metric, ErrNoMetric)
	case len(found) == 0:
		return 0, fmt.Errorf("printed no line `%s %s <value>`: %w", ValMetricPrefix, metric, ErrNoMetric)
	case len(found) > 1:
		return 0, fmt.Errorf("printed %d `%s %s` lines, want exactly one: %w", len(found), ValMetricPrefix, metric, ErrNoMetric)
	}
	return found[0], nil
}

// LastLines returns the last n non-empty lines of s, joined by " | "
// ("(no output)" when there are none): a failed run's output in one line.
func LastLines(s string, n int) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 0 {
		return "(no output)"
	}
	return strings.Join(lines, " | ")
}

// graderShim runs private/grade.py as `python3 private/grade.py
// submission.csv private/answers.csv` would, inside a runner's process.
const graderShim = `import os, runpy, sys
sys.argv = ["private/grade.py", "submission.csv", "private/answers.csv"]
if os.path.isfile("private/parts.csv"):
    sys.argv.append("private/parts.csv")
sys.path.insert(0, "private")
runpy.run_path("private/grade.py", run_name="__main__")
`

// MaxSubmissionBytes bounds the submission file a grader is given.
const MaxSubmissionBytes = 256 << 20

// RunGraderIn is RunGrader through a sandbox runner: it copies privateDir
// and the submission (when it exists) into a fresh folder laid out like a
// task folder and runs grade.py there with the runner's limits (a warm
// runner avoids a fresh interpreter's imports per grade). Verdicts and
// errors are those of RunGrader.
func RunGraderIn(ctx context.Context, runner sandbox.Runner, privateDir, submissionPath string) (Grade, error) {
	grader := filepath.Join(privateDir, GraderFile)
	files, err := blobs.ReadDir(privateDir)
	if err != nil {
		return Grade{}, fmt.Errorf("%s: %w", privateDir, err)
	}
	dir, err := os.MkdirTemp("", "mlerl-grade-")
	if err != nil {
		return Grade{}, err
	}
	defer os.RemoveAll(dir)
	if err := blobs.WriteDir(filepath.Join(dir, PrivateDir), files); err != nil {
		return Grade{}, err
	}
	// The submission comes from a script's folder: read without following
	// links (a link to the answers must not be graded as a submission).
	b, err := safefile.ReadFile(filepath.Dir(submissionPath), filepath.Base(submissionPath), safefile.Options{MaxBytes: MaxSubmissionBytes, SingleLink: true})
	var se *safefile.Error
	switch {
	case err == nil:
		if err := os.WriteFile(filepath.Join(dir, SubmissionFile), b, 0o644); err != nil {
			return Grade{}, err
		}
	case errors.Is(err, safefile.ErrNotExist):
	case errors.As(err, &se):
		return Grade{Reason: se.Error() + "; a submission must be a regular file the script writes"}, nil
	default:
		return Grade{}, err
	}
	res, err := runner.Run(ctx, sandbox.Request{Dir: dir, Script: PrivateDir + "/" + GraderFile, Source: []byte(graderShim),
		Limits: sandbox.Limits{Timeout: GradeTimeout}})
	if err != nil {
		return Grade{}, fmt.Errorf("%s: %w", grader, err)
	}
	switch res.Outcome {
	case sandbox.Success:
	case sandbox.Timeout:
		return Grade{}, fmt.Errorf("%s: did not finish within %s", grader, GradeTimeout)
	default:
		return Grade{}, fmt.Errorf("%s crashed (%s, exit %d): %s; a grader must print {\"valid\": false, \"reason\": ...} and exit 0 for a bad submission", grader, res.Outcome, res.ExitCode, LastLines(res.Stderr, 3))
	}
	g, err := ParseGrade(res.Stdout)
	if err != nil {
		return Grade{}, fmt.Errorf("%s: %v", grader, err)
	}
	_, gaveParts := files[PartsFile]
	return g, g.checkParts(grader, gaveParts)
}
