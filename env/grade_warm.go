package env

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mlerl/mlerl/internal/tasks"
)

// The warm grader: a grader run is a Python start plus numpy, pandas and
// scikit-learn imports (1-3 s), more than a warm script execution. One
// worker process per interpreter imports them once and forks a child per
// grade (grade_worker.py). Graders are the tasks' own trusted code, so the
// child is not sandboxed; it runs in the grading folder, which holds only
// the private files and the submission. When the worker cannot start, or
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
	failed error // the worker cannot start with this interpreter
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

// grade runs the grader in dir. ok is false when the worker could not do
// it (the caller then runs the grader cold).
func (w *gradeWorker) grade(ctx context.Context, dir, grader, submission, answers string) (g tasks.Grade, err error, ok bool) {
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
	req, _ := json.Marshal(map[string]string{"dir": dir, "grader": grader, "submission": submission, "answers": answers})
	if _, err := w.stdin.Write(append(req, '\n')); err != nil {
		w.stop()
		return g, nil, false
	}
	type reply struct {
		Status int `json:"status"`
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
