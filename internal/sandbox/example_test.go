package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/mlerl/mlerl/internal/sandbox"
)

// A runner executes a workspace's train.py with limits; the outcome
// class, not the exit code, is what callers branch on, and a script path
// that leaves the workspace is refused as an error.
func ExampleNew() {
	ctx := context.Background()
	// FindPython("") finds an interpreter with the task libraries (`make
	// setup`); this script needs none.
	python, err := exec.LookPath("python3")
	if err != nil {
		fmt.Println(err)
		return
	}
	ws, _ := os.MkdirTemp("", "workspace-")
	defer os.RemoveAll(ws)
	os.WriteFile(filepath.Join(ws, "train.py"), []byte("print('VAL_METRIC accuracy 0.9')\n"), 0o644)
	os.WriteFile(filepath.Join(ws, "broken.py"), []byte("raise SystemExit('no data')\n"), 0o644)

	// Warm when the worker starts (it needs numpy, pandas and scikit-learn),
	// else a fresh interpreter per run: the results are the same.
	runner := sandbox.New(ctx, python, true, nil)
	defer runner.Close()
	limits := sandbox.Limits{Timeout: time.Minute, MemoryBytes: 4 << 30, MaxProcs: 64, MaxOutputBytes: 1 << 20}
	for _, script := range []string{"train.py", "broken.py", "../elsewhere.py"} {
		res, err := runner.Run(ctx, sandbox.Request{Dir: ws, Script: script, Limits: limits})
		switch {
		case errors.Is(err, sandbox.ErrPathEscape):
			fmt.Printf("%s: refused\n", script)
		case err != nil:
			fmt.Printf("%s: sandbox fault: %v\n", script, err)
		case res.Outcome == sandbox.Success:
			fmt.Printf("%s: %s, %s", script, res.Outcome, res.Stdout)
		default:
			fmt.Printf("%s: %s, exit %d, %s", script, res.Outcome, res.ExitCode, res.Stderr)
		}
	}
	// Output:
	// train.py: success, VAL_METRIC accuracy 0.9
	// broken.py: script_error, exit 1, no data
	// ../elsewhere.py: refused
}
