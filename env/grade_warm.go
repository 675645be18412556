package env

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mlerl/mlerl"
	"github.com/mlerl/mlerl/internal/tasks"
)

// The warm grader: a grader run is a Python start plus numpy, pandas and
// scikit-learn imports (1-3 s), more than a warm script execution. One
// worker process per interpreter imports them once and forks a child per
// grade (grade_worker.py), or runs the built-in suite's graders in its own
// process (suiteGrader). Graders are the tasks' own trusted code, so they
// are not sandboxed; they run in the grading folder, which holds only the
// private files and the submission. When the worker cannot start, or
// dies, grading falls back to tasks.RunGrader.

//go:embed grade_worker.py
var gradeWorkerPy string

// gradeWorkerStart bounds the worker's start (imports).
const gradeWorkerStart = 60 * time.Second

type gradeWorker struct {
	python string

	mu     sync.Mutex // one grade at a time
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	failed error        // the worker cannot start with this interpreter
	inproc atomic.Int64 // grades the worker ran in its own process
}

var gradeWorkers sync.Map // python path -> *gradeWorker

func warmGrader(python string) *gradeWorker {
	w, _ := gradeWorkers.LoadOrStore(python, &gradeWorker{python: python})
	return w.(*gradeWorker)
}

func (w *gradeWorker) start() error {
	cmd := exec.Command(w.python, "-c", gradeWorkerPy)
	// One BLAS thread: the worker forks, and graders compute small metrics.
	cmd.Env = append(os.Environ(), "PYTHONWARNINGS=ignore", "PYTHONDONTWRITEBYTECODE=1",
		"OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr strings.Builder
	cmd.Stderr = &limitedWriter{w: &stderr, n: 4096}
	if err := cmd.Start(); err != nil {
		return err
	}
	out := bufio.NewReader(stdout)
	ready := make(chan error, 1)
	go func() {
		line, err := out.ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("unexpected first line %q", line)
		}
		ready <- err
	}()
	select {
	case err = <-ready:
	case <-time.After(gradeWorkerStart):
		err = fmt.Errorf("not ready within %v", gradeWorkerStart)
	}
	if err != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		return fmt.Errorf("warm grader %s: %v: %s", w.python, err, strings.TrimSpace(stderr.String()))
	}
	w.cmd, w.stdin, w.out = cmd, stdin, out
	return nil
}

func (w *gradeWorker) stop() {
	if w.cmd == nil {
		return
	}
	syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
	w.stdin.Close()
	w.cmd.Wait()
	w.cmd, w.stdin, w.out = nil, nil, nil
}

// grade runs the grader in dir, in the worker's own process when inproc
// (suiteGrader), in a forked child otherwise, with parts (the hidden
// answers' parts.csv, "" for none) as its third argument. ok is false when the worker
// could not do it (the caller then runs the grader cold).
func (w *gradeWorker) grade(ctx context.Context, dir, grader, submission, answers, parts string, inproc bool) (g tasks.Grade, err error, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed != nil {
		return g, nil, false
	}
	if w.cmd == nil {
		if err := w.start(); err != nil {
			w.failed = err
			return g, nil, false
		}
	}
	req, _ := json.Marshal(map[string]any{"dir": dir, "grader": grader, "submission": submission, "answers": answers, "parts": parts, "inproc": inproc})
	if _, err := w.stdin.Write(append(req, '\n')); err != nil {
		w.stop()
		return g, nil, false
	}
	type reply struct {
		Status int  `json:"status"`
		InProc bool `json:"inproc"`
	}
	done := make(chan error, 1)
	var rep reply
	go func() {
		line, err := w.out.ReadString('\n')
		if err == nil {
			err = json.Unmarshal([]byte(line), &rep)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			w.stop()
			return g, nil, false
		}
	case <-ctx.Done():
		w.stop() // kills the grader child too (same process group)
		return g, fmt.Errorf("%s: did not finish: %w", grader, ctx.Err()), true
	}
	if rep.InProc {
		w.inproc.Add(1)
	}
	stdout, _ := os.ReadFile(filepath.Join(dir, ".grade_stdout"))
	stderr, _ := os.ReadFile(filepath.Join(dir, ".grade_stderr"))
	if rep.Status != 0 {
		return g, fmt.Errorf("%s crashed (exit status %d): %s; a grader must print {\"valid\": false, \"reason\": ...} and exit 0 for a bad submission", grader, rep.Status, tasks.LastLines(string(stderr), 3)), true
	}
	g, err = tasks.ParseGrade(string(stdout))
	if err != nil {
		return g, fmt.Errorf("%s: %v", grader, err), true
	}
	return g, nil, true
}

// suiteGrader reports whether grader is the built-in suite's grader
// template (tasks/grade_template.py, which tasks/generate.py copies into
// every task) with nothing changed but its settings block, each setting a
// string or a list of strings. That grader is a pure function of the
// submission and answers files: it imports numpy, pandas and scikit-learn,
// reads the two files and prints its verdict, and keeps no state between
// runs, so the warm worker runs it in its own process. Any other grader
// (an imported task's, a hand-written one) runs in a forked child, as
// every grader did before: a fork of the worker costs 60-100 ms of
// copy-on-write page faults against about 5 ms for the grade itself.
func suiteGrader(src []byte) bool {
	head, settings, tail, ok := splitGrader(src)
	if !ok {
		return false
	}
	t := gradeTemplate()
	if t.head == "" || head != t.head || tail != t.tail {
		return false
	}
	for _, line := range strings.Split(strings.TrimSuffix(settings, "\n"), "\n") {
		if !settingLine.MatchString(line) {
			return false
		}
	}
	return true
}

const (
	settingsStart = "# === grader settings ===\n"
	settingsEnd   = "# === end grader settings ===\n"
)

// settingLine is one setting of the template: NAME = 'text', "text", or
// a list of such strings (no escapes, no expressions).
var settingLine = regexp.MustCompile(`^[A-Z][A-Z0-9_]* = (?:` + pyStr + `|\[(?:` + pyStr + `(?:, ` + pyStr + `)*)?\])$`)

const pyStr = `(?:"[^"\\\n]*"|'[^'\\\n]*')`

// splitGrader cuts a grader's source at the settings markers: what comes
// before the settings block (markers included), the block's lines, and
// what comes after.
func splitGrader(src []byte) (head, settings, tail string, ok bool) {
	s := string(src)
	i := strings.Index(s, settingsStart)
	if i < 0 {
		return "", "", "", false
	}
	j := strings.Index(s[i:], settingsEnd)
	if j < 0 {
		return "", "", "", false
	}
	j += i
	return s[:i+len(settingsStart)], s[i+len(settingsStart) : j], s[j:], true
}

// gradeTemplate is the embedded suite's grade_template.py, cut by
// splitGrader (empty when the suite has none: then no grader is the
// suite's).
var gradeTemplate = sync.OnceValue(func() (t struct{ head, tail string }) {
	src, err := fs.ReadFile(mlerl.Suite(), "grade_template.py")
	if err != nil {
		return t
	}
	if head, _, tail, ok := splitGrader(src); ok {
		t.head, t.tail = head, tail
	}
	return t
})

type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
