package sandbox_test

import (
	"context"
	"fmt"
	"time"

	"github.com/mlerl/mlerl/internal/sandbox"
)

// A warm runner executes a workspace's train.py with limits; the outcome
// class, not the exit code, is what callers branch on.
func ExampleNewWarm() {
	ctx := context.Background()
	python, err := sandbox.FindPython("")
	if err != nil {
		fmt.Println(err) // `make setup` installs numpy, pandas and scikit-learn
		return
	}
	runner, err := sandbox.NewWarm(ctx, python)
	if err != nil {
		runner = sandbox.NewCold(python) // no worker: a fresh interpreter per run
	}
	defer runner.Close()
	res, err := runner.Run(ctx, sandbox.Request{
		Dir:    "/tmp/episode-1/workspace",
		Script: "train.py",
		Limits: sandbox.Limits{Timeout: time.Minute, MemoryBytes: 4 << 30, MaxProcs: 64, MaxOutputBytes: 1 << 20},
	})
	switch {
	case err != nil:
		fmt.Println("refused or sandbox fault:", err)
	case res.Outcome == sandbox.Success:
		fmt.Print(res.Stdout)
	default:
		fmt.Println(res.Outcome, res.Stderr)
	}
}
