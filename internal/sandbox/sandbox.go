// Package sandbox runs untrusted Python scripts (the agent's train.py) with
// a wall-clock timeout, memory, process-count and output limits, a scrubbed
// environment and the workspace as working directory, and classifies how
// each run ended.
//
// Start with [FindPython], then [NewWarm] (a warm worker that imports
// numpy/pandas/sklearn once and forks a fresh child per run) or [NewCold]
// (a fresh interpreter per run), and [Runner.Run].
package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"
)

// Limits bound one run. A zero field takes its value from [DefaultLimits].
type Limits struct {
	// Timeout is the wall-clock limit; the whole process group is killed
	// when it passes (outcome timeout).
	Timeout time.Duration
	// MemoryBytes is the address-space limit (RLIMIT_AS) of the script's
	// process; an allocation beyond it fails with MemoryError (outcome oom).
	MemoryBytes int64
	// MaxProcs bounds the processes and threads the script may have at once
	// (a pids cgroup when one can be created, else RLIMIT_NPROC).
	MaxProcs int
	// MaxOutputBytes is how much of stdout and of stderr is kept: the first
	// and the last half of it, with a note of what was left out between.
	MaxOutputBytes int
	// CPUTime is the CPU-time limit (RLIMIT_CPU); zero: Timeout.
	CPUTime time.Duration
	// MaxFileBytes is the largest file the script may write (RLIMIT_FSIZE).
	MaxFileBytes int64
	// KillOutputBytes is how much output (stdout and stderr together) the
	// script may produce before it is killed (outcome output_limit); zero:
	// 64 x MaxOutputBytes.
	KillOutputBytes int64
}

// Request is one script run.
type Request struct {
	// Dir is the workspace: the run's working directory.
	Dir string
	// Script is the path of the script relative to Dir.
	Script string
	// Source, when set, is run instead of Script's file content (the
	// instrumented copy); the script still sees itself as Script.
	Source []byte
	Limits Limits
}

// Outcome classifies how a run ended.
type Outcome string

// Outcome classes.
const (
	Success     Outcome = "success"
	ScriptError Outcome = "script_error"
	Timeout     Outcome = "timeout"
	OOM         Outcome = "oom"
	Killed      Outcome = "killed"
	OutputLimit Outcome = "output_limit"
)

// Result is what a run produced.
type Result struct {
	Outcome   Outcome
	ExitCode  int
	Stdout    string
	Stderr    string
	Truncated bool
	Duration  time.Duration
	// Signal is the signal that ended the script (0: it exited). ExitCode is
	// -1 then.
	Signal int
	// MaxRSSBytes is the script process's peak resident memory (0 when
	// unknown).
	MaxRSSBytes int64
	// Warm reports whether the warm worker ran it (false: a cold process).
	Warm bool
}

// Runner runs scripts.
type Runner interface {
	Run(ctx context.Context, req Request) (Result, error)
	Close() error
}

// checkScript is the import check a task interpreter must pass.
const checkScript = "import numpy, pandas, sklearn"

// FindPython returns an interpreter that imports numpy, pandas and
// scikit-learn: the configured path if given, else /usr/bin/python3, else
// python3 on PATH.
func FindPython(configured string) (string, error) {
	candidates := []string{"/usr/bin/python3", "python3"}
	if configured != "" {
		candidates = []string{configured}
	}
	var tried []string
	for _, c := range candidates {
		p, err := exec.LookPath(c)
		if err != nil {
			tried = append(tried, c+" (not found)")
			continue
		}
		cmd := exec.Command(p, "-c", checkScript)
		cmd.Env = append(os.Environ(), "PYTHONWARNINGS=ignore")
		if out, err := cmd.CombinedOutput(); err != nil {
			tried = append(tried, fmt.Sprintf("%s (%s)", p, lastLine(string(out))))
			continue
		}
		return p, nil
	}
	return "", fmt.Errorf("no Python interpreter that imports numpy, pandas and scikit-learn: tried %v; run `make setup` (installs python3-sklearn and python3-pandas with apt) or set python to an interpreter that has them", tried)
}

func lastLine(s string) string {
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == ' ') {
		s = s[:len(s)-1]
	}
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '\n' {
			return s[i+1:]
		}
	}
	return s
}
