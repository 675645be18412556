// Package sandbox runs untrusted Python scripts (the agent's train.py) with
// a wall-clock timeout, CPU, memory, process-count, file-size and output
// limits, a scrubbed environment and the workspace as working directory,
// and classifies how each run ended.
//
// Start with [FindPython], then [NewWarm] (a warm worker that imports
// numpy/pandas/sklearn once and forks a fresh child per run) or [NewCold]
// (a fresh interpreter per run), and [Runner.Run]. Both run the same
// embedded bootstrap (bootstrap.py), which sandboxes the process before any
// user code runs:
//
//   - Filesystem: see [IsolateRoot], [IsolateUserNS], [IsolateNone] and
//     [IsolationLevel]. Under the first two the script's whole filesystem
//     is read-only system directories, a private /tmp and /dev/shm
//     (512 MiB tmpfs each, gone after the run) and the workspace; the task
//     folder, its private/ answers and grader, the repository and every
//     other workspace do not exist for it. Writes outside the workspace
//     fail (read-only or root-owned) or land in the private /tmp.
//   - Memory: RLIMIT_AS = Limits.MemoryBytes; a failed allocation raises
//     MemoryError (outcome oom). Address space, not resident memory: with
//     OPENBLAS/OMP threads = 1 numpy reserves little, but a warm child
//     starts with the worker's preloaded modules mapped (about 380 MB), so
//     keep the limit at 1 GiB or more. A C extension that aborts on a failed
//     allocation ends as killed.
//   - Processes: a pids cgroup per run (v1 or v2, when the runner can create
//     one: root, or a delegated v2 subtree) with pids.max = MaxProcs; its
//     members are all killed when the run ends, even those that escaped the
//     process group. A run whose forks the limit keeps refusing for 3 s
//     (a fork bomb that survives its failed forks) is killed (outcome
//     killed, Result.Reason says why). Without the cgroup: RLIMIT_NPROC
//     (per uid: the uid's current process count + MaxProcs), which binds
//     for the sandbox uid and for non-root callers but not for root under
//     IsolateNone, and refused forks are not seen (such a run lasts until
//     its Timeout).
//   - CPU: a CPU cgroup per run (v2 cpu.max, v1 cpu.cfs_quota_us) holds
//     all of the run's processes together to Limits.CPUs cores, so that a
//     run cannot load the host's other cores whatever it spawns;
//     Result.CPUTime is what the run used (cgroup accounting) and
//     Result.CPUs the cores it was held to. Without a CPU cgroup
//     (Result.CPUs 0) the rate is not limited: each process may use a
//     whole core up to RLIMIT_CPU = Limits.CPUTime (SIGXCPU: outcome
//     timeout), so a run may load up to MaxProcs cores until its Timeout.
//     A script leaves its cgroups or lifts their limits only by writing
//     cgroup files it owns: never the sandbox uid's case (root's runners)
//     nor under a namespace view (no /sys); only a non-root runner with a
//     delegated v2 subtree and IsolateNone runs scripts as the subtree's
//     owner, and there the limits are advisory.
//   - Memory together: a memory cgroup per run (root, or a delegated v2
//     subtree) holds the run's processes and the pages of its tmpfs mounts
//     to MemoryBytes + the tmpfs sizes + 256 MiB; past it the kernel ends
//     one of them (outcome killed, Result.Reason says so).
//   - Files: RLIMIT_FSIZE = the smaller of MaxFileBytes and WorkspaceBytes
//     (the write fails with EFBIG).
//   - Workspace: at most WorkspaceBytes and WorkspaceFiles files and
//     folders, nested at most MaxWorkspaceDepth deep. Under IsolateRoot
//     and IsolateUserNS ([KernelQuota]) the script writes to a tmpfs of
//     the run's own whose size the kernel enforces (space.go): what it
//     holds there (deleted files still open, reserved space included) is
//     refused past the quota (ENOSPC), and the run's changes reach the
//     workspace only if it ends within its quota. The quota is also
//     measured while the script runs and after it (see quota.go): a run
//     over it is killed (outcome killed, Result.Reason says so) and what
//     it added to the workspace is removed (never copied back).
//   - Time: the runner SIGKILLs the script's process group (and cgroup) at
//     Limits.Timeout (outcome timeout).
//   - Output: stdout and stderr are drained continuously; the first and last
//     MaxOutputBytes/2 of each are kept (Result.Truncated when more came);
//     past KillOutputBytes in all the script is killed (outcome
//     output_limit). The runner's memory per run is bounded by the caps.
//   - Environment: only PATH, HOME (the workspace), TMPDIR, LANG/LC_ALL,
//     PYTHONHASHSEED=0, PYTHONUNBUFFERED, PYTHONDONTWRITEBYTECODE,
//     OMP/OPENBLAS/MKL/NUMEXPR threads = 1, MPLBACKEND=Agg, MPLCONFIGDIR.
//     stdin is /dev/null. sys.argv is [Script], __file__ the script's path,
//     __name__ "__main__", the workspace first on sys.path.
//
// Every run is not dumpable (PR_SET_DUMPABLE 0): no process of the run,
// nor any other process of its uid, can read its memory through /proc or
// ptrace. A guarded run (Request.Marks) is held to more; see [Request].
//
// Refusals (a Script that is absolute, climbs out with "..", or resolves
// through a symlink outside Dir: [ErrPathEscape]) and sandbox faults
// ([ErrSetup]) are errors, never outcomes.
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
	// CPUs is how many cores the run's processes may use together at any
	// moment (a CPU cgroup quota: 0.5 is half a core, 2 two cores); zero
	// or negative: 1; more than the machine has: all of them. Not applied
	// where no CPU cgroup can be created (Result.CPUs is 0 then).
	CPUs float64
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
	// WorkspaceBytes and WorkspaceFiles bound what the workspace may hold
	// (all of it, the task's own files included): bytes, and files and
	// folders. A run over either is killed (outcome killed, Result.Reason
	// says which) and what it added is taken back; see quota.go. Each
	// written file is also capped at WorkspaceBytes (RLIMIT_FSIZE).
	WorkspaceBytes int64
	WorkspaceFiles int
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
	// Marks, when not nil, guards the run for instrumentation markers: the
	// call __mlerl_mark__(k) in Source writes Marks[k] to stdout, but only
	// from the line of Source that makes it. Marks never enter the
	// script's process before their marker runs: the runner answers the
	// marker's socket with its line (control.go). The workspace is not on
	// sys.path and nothing outside the interpreter's folders is imported;
	// and the run is stopped (outcome killed) once the script reads
	// frames, code objects or memory, traces, compiles code, connects to a
	// marker's socket or execs itself. See bootstrap.py's guard.
	Marks  []string
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
	// CPUTime is the CPU time (user and system) the run used: all its
	// processes, those it left behind included, when it had a cgroup that
	// counts; else the script process's and the children it waited for.
	CPUTime time.Duration
	// CPUs is the cores the run was held to (Limits.CPUs), 0 when no CPU
	// cgroup could be made and the rate was not limited.
	CPUs float64
	// Reason says why the sandbox stopped the script when Outcome alone
	// does not ("the script kept creating processes beyond the limit of
	// 64 ..."); empty otherwise.
	Reason string
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

// New returns a warm runner when warm is set and the worker starts, and a
// cold one otherwise; warn (if not nil) is told why the warm worker could
// not start. Stages pick their runner through it.
func New(ctx context.Context, python string, warm bool, warn func(error)) Runner {
	if warm {
		r, err := NewWarm(ctx, python)
		if err == nil {
			return r
		}
		if warn != nil {
			warn(err)
		}
	}
	return NewCold(python)
}
