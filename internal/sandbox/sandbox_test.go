package sandbox

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	pyOnce sync.Once
	pyPath string
	pyErr  error

	warmOnce sync.Once
	warmRun  Runner
	warmErr  error
)

func python(t testing.TB) string {
	t.Helper()
	pyOnce.Do(func() { pyPath, pyErr = FindPython("") })
	if pyErr != nil {
		t.Skipf("no task interpreter: %v", pyErr)
	}
	return pyPath
}

// runners returns a cold runner and the package's shared warm runner.
func runners(t *testing.T) map[string]Runner {
	t.Helper()
	py := python(t)
	warmOnce.Do(func() { warmRun, warmErr = NewWarm(context.Background(), py) })
	if warmErr != nil {
		t.Fatalf("NewWarm: %v", warmErr)
	}
	cold := NewCold(py)
	t.Cleanup(func() { cold.Close() })
	return map[string]Runner{"cold": cold, "warm": warmRun}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if warmRun != nil {
		warmRun.Close()
	}
	os.Exit(code)
}

// workspace makes a task-like layout: task/workspace (returned) holding
// train.py with script, and task/private/answers.csv holding secret.
func workspace(t *testing.T, script string) (ws, answers string) {
	t.Helper()
	task := t.TempDir()
	ws = filepath.Join(task, "workspace")
	priv := filepath.Join(task, "private")
	for _, d := range []string{ws, priv} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(task, 0o755); err != nil {
		t.Fatal(err)
	}
	answers = filepath.Join(priv, "answers.csv")
	if err := os.WriteFile(answers, []byte("id,label\n1,SECRET-LABEL-42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "train.py"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	return ws, answers
}

func TestOutcomes(t *testing.T) {
	tests := []struct {
		name    string
		script  string
		limits  Limits
		want    Outcome
		code    int
		signal  int
		stdout  string // substring
		stderr  string // substring
		maxTime time.Duration
	}{
		{name: "success", script: "import numpy as np\nprint('VAL_METRIC accuracy', np.mean([1, 0]))\n", want: Success, stdout: "VAL_METRIC accuracy 0.5"},
		{name: "traceback", script: "x = 1\n\nraise ValueError('boom')\n", want: ScriptError, code: 1, stderr: "line 3, in <module>"},
		{name: "exit code", script: "import sys\nsys.exit(3)\n", want: ScriptError, code: 3},
		{name: "exit message", script: "import sys\nsys.exit('bad input')\n", want: ScriptError, code: 1, stderr: "bad input"},
		{name: "syntax error", script: "def f(:\n", want: ScriptError, code: 1, stderr: "SyntaxError"},
		{name: "stdin is empty", script: "input()\n", want: ScriptError, code: 1, stderr: "EOFError"},
		{name: "infinite loop", script: "while True:\n    pass\n", limits: Limits{Timeout: time.Second, CPUTime: time.Minute}, want: Timeout, signal: int(syscall.SIGKILL), maxTime: 5 * time.Second},
		{name: "sleep past timeout", script: "import time\nprint('started', flush=True)\ntime.sleep(60)\n", limits: Limits{Timeout: time.Second}, want: Timeout, stdout: "started", maxTime: 5 * time.Second},
		{name: "cpu limit", script: "while True:\n    pass\n", limits: Limits{Timeout: time.Minute, CPUTime: time.Second}, want: Timeout, signal: int(syscall.SIGXCPU), maxTime: 10 * time.Second},
		{name: "memory hog", script: "b = bytearray(3 << 30)\n", limits: Limits{MemoryBytes: 1 << 30}, want: OOM, code: 1, stderr: "MemoryError"},
		{name: "numpy memory hog", script: "import numpy as np\na = np.ones(1 << 31)\n", limits: Limits{MemoryBytes: 1 << 30}, want: OOM, code: 1, stderr: "Unable to allocate"},
		{name: "growing list", script: "x = []\nwhile True:\n    x.append(' ' * (1 << 20))\n", limits: Limits{MemoryBytes: 600 << 20}, want: OOM, code: 1},
		{name: "killed by signal", script: "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", want: Killed, code: -1, signal: int(syscall.SIGKILL)},
		{name: "segfault", script: "import ctypes\nctypes.string_at(0)\n", want: Killed, code: -1, signal: int(syscall.SIGSEGV)},
		{name: "endless output", script: "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n", limits: Limits{MaxOutputBytes: 4096, KillOutputBytes: 8 << 20}, want: OutputLimit, maxTime: 10 * time.Second},
		{name: "file too large", script: "open('big.bin', 'wb').write(b'0' * (2 << 20))\n", limits: Limits{MaxFileBytes: 1 << 20}, want: ScriptError, code: 1, stderr: "File too large"},
	}
	for rname, r := range runners(t) {
		for _, tc := range tests {
			t.Run(rname+"/"+tc.name, func(t *testing.T) {
				ws, _ := workspace(t, tc.script)
				start := time.Now()
				res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py", Limits: tc.limits})
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				if res.Outcome != tc.want {
					t.Errorf("outcome: got %s want %s (exit %d, signal %d, stderr %q)", res.Outcome, tc.want, res.ExitCode, res.Signal, lastLines(res.Stderr, 3))
				}
				if tc.code != 0 && res.ExitCode != tc.code {
					t.Errorf("exit code: got %d want %d", res.ExitCode, tc.code)
				}
				if tc.signal != 0 && res.Signal != tc.signal {
					t.Errorf("signal: got %d want %d", res.Signal, tc.signal)
				}
				if !strings.Contains(res.Stdout, tc.stdout) {
					t.Errorf("stdout: got %q want it to contain %q", res.Stdout, tc.stdout)
				}
				if !strings.Contains(res.Stderr, tc.stderr) {
					t.Errorf("stderr: got %q want it to contain %q", res.Stderr, tc.stderr)
				}
				if tc.maxTime > 0 && time.Since(start) > tc.maxTime {
					t.Errorf("took %v, want at most %v", time.Since(start), tc.maxTime)
				}
				if rname == "warm" && !res.Warm {
					t.Errorf("warm runner ran it cold")
				}
			})
		}
	}
}

func TestPathRefusals(t *testing.T) {
	ws, answers := workspace(t, "print('ok')\n")
	outside := filepath.Join(filepath.Dir(ws), "outside.py")
	os.WriteFile(outside, []byte("print('escaped')\n"), 0o644)
	if err := os.Symlink(outside, filepath.Join(ws, "link.py")); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(ws, "sub"), 0o755)
	os.WriteFile(filepath.Join(ws, "sub", "inner.py"), []byte("print('inner')\n"), 0o644)
	tests := []struct {
		name, script string
		escape       bool // want ErrPathEscape; else any error unless ok
		ok           bool
	}{
		{name: "relative", script: "train.py", ok: true},
		{name: "subfolder", script: "sub/inner.py", ok: true},
		{name: "dot-dot inside", script: "sub/../train.py", ok: true},
		{name: "dot-dot out", script: "../outside.py", escape: true},
		{name: "dot-dot to answers", script: "../private/answers.csv", escape: true},
		{name: "absolute", script: answers, escape: true},
		{name: "symlink out", script: "link.py", escape: true},
		{name: "empty", script: ""},
		{name: "missing", script: "nope.py"},
		{name: "directory", script: "sub"},
	}
	r := NewCold(python(t))
	defer r.Close()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := r.Run(context.Background(), Request{Dir: ws, Script: tc.script})
			switch {
			case tc.ok && (err != nil || res.Outcome != Success):
				t.Errorf("got %v, %s want success", err, res.Outcome)
			case tc.escape && !errors.Is(err, ErrPathEscape):
				t.Errorf("got %v want ErrPathEscape", err)
			case !tc.ok && err == nil:
				t.Errorf("got no error (outcome %s, stdout %q) want a refusal", res.Outcome, res.Stdout)
			}
		})
	}
}

func requireIsolation(t *testing.T) {
	if l := IsolationLevel(python(t)); l == IsolateNone {
		t.Skip("no mount namespace here (not root, no unprivileged user namespaces): the filesystem is not isolated")
	}
}

// TestPrivateUnreachable: the hidden labels next to the workspace cannot be
// read, neither through ../private nor by absolute path nor by a symlink
// the script makes.
func TestPrivateUnreachable(t *testing.T) {
	requireIsolation(t)
	for rname, r := range runners(t) {
		t.Run(rname, func(t *testing.T) {
			ws, answers := workspace(t, "")
			script := fmt.Sprintf(`import os
for p in ["../private/answers.csv", %q, "answers_link.csv"]:
    if p == "answers_link.csv":
        os.symlink(%q, p)
    try:
        print("READ", p, open(p).read())
    except OSError as e:
        print("DENIED", p, type(e).__name__)
print("LISTING", os.listdir(".."), os.path.exists(%q))
`, answers, answers, filepath.Dir(answers))
			os.WriteFile(filepath.Join(ws, "train.py"), []byte(script), 0o644)
			res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py"})
			if err != nil || res.Outcome != Success {
				t.Fatalf("got %v %s %s", err, res.Outcome, res.Stderr)
			}
			if strings.Contains(res.Stdout, "SECRET") || strings.Contains(res.Stdout, "READ") {
				t.Errorf("the script read the hidden labels: %s", res.Stdout)
			}
			if got := strings.Count(res.Stdout, "DENIED"); got != 3 {
				t.Errorf("got %d denied reads want 3: %s", got, res.Stdout)
			}
			if !strings.Contains(res.Stdout, "LISTING ['workspace'] False") {
				t.Errorf("the task folder is visible: %s", res.Stdout)
			}
		})
	}
}

// TestWritesOutside: writes outside the workspace fail or land in a
// private /tmp that vanishes; the host is unchanged.
func TestWritesOutside(t *testing.T) {
	requireIsolation(t)
	hostDir := t.TempDir()
	os.Chmod(hostDir, 0o777)
	for rname, r := range runners(t) {
		t.Run(rname, func(t *testing.T) {
			ws, _ := workspace(t, "")
			targets := []string{"../escape.txt", filepath.Join(hostDir, "escape.txt"), "/usr/escape.txt", "/etc/escape.txt", "/escape.txt"}
			var b strings.Builder
			b.WriteString("import os\nfor p in " + pyList(targets) + ":\n    try:\n        open(p, 'w').write('x')\n        print('WROTE', p)\n    except OSError as e:\n        print('REFUSED', p, type(e).__name__)\n")
			b.WriteString("open('/tmp/scratch.txt', 'w').write('tmp ok')\nprint(open('/tmp/scratch.txt').read())\nopen('submission.csv', 'w').write('id,y\\n')\n")
			os.WriteFile(filepath.Join(ws, "train.py"), []byte(b.String()), 0o644)
			res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py"})
			if err != nil || res.Outcome != Success {
				t.Fatalf("got %v %s %s", err, res.Outcome, res.Stderr)
			}
			if strings.Contains(res.Stdout, "WROTE") {
				t.Errorf("a write outside the workspace succeeded: %s", res.Stdout)
			}
			for _, p := range []string{filepath.Join(filepath.Dir(ws), "escape.txt"), filepath.Join(hostDir, "escape.txt"), "/usr/escape.txt", "/etc/escape.txt", "/escape.txt", "/tmp/scratch.txt"} {
				if _, err := os.Stat(p); err == nil {
					os.Remove(p)
					t.Errorf("%s exists on the host", p)
				}
			}
			if !strings.Contains(res.Stdout, "tmp ok") {
				t.Errorf("private /tmp unusable: %s", res.Stdout)
			}
			if _, err := os.Stat(filepath.Join(ws, "submission.csv")); err != nil {
				t.Errorf("submission not written in the workspace: %v", err)
			}
			// Afterwards the workspace and what the script wrote belong to
			// the workspace's owner again.
			filepath.WalkDir(ws, func(p string, d os.DirEntry, err error) error {
				var st syscall.Stat_t
				if err == nil && syscall.Lstat(p, &st) == nil && int(st.Uid) != os.Geteuid() {
					t.Errorf("%s belongs to uid %d after the run, want %d", p, st.Uid, os.Geteuid())
				}
				return nil
			})
		})
	}
}

func pyList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func TestScrubbedEnvironment(t *testing.T) {
	t.Setenv("MLERL_TEST_SECRET", "leak")
	for rname, r := range runners(t) {
		t.Run(rname, func(t *testing.T) {
			ws, _ := workspace(t, "import os, sys\nprint(sorted(os.environ))\nprint('HOME', os.environ['HOME'])\nprint('ARGV', sys.argv, os.path.basename(__file__), __name__)\nprint('CWD', os.getcwd())\n")
			res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py"})
			if err != nil || res.Outcome != Success {
				t.Fatalf("got %v %s %s", err, res.Outcome, res.Stderr)
			}
			for _, want := range []string{"HOME " + ws, "ARGV ['train.py'] train.py __main__", "CWD " + ws, "'OPENBLAS_NUM_THREADS'", "'PYTHONHASHSEED'"} {
				if !strings.Contains(res.Stdout, want) {
					t.Errorf("stdout %q lacks %q", res.Stdout, want)
				}
			}
			if strings.Contains(res.Stdout, "MLERL_TEST_SECRET") {
				t.Errorf("the caller's environment leaked: %s", res.Stdout)
			}
		})
	}
}

// TestForkBomb: a fork bomb is contained and leaves no process behind.
func TestForkBomb(t *testing.T) {
	cg := newCgroups()
	defer cg.close()
	if (cg == nil || !cg.has(func(h *hierarchy) bool { return h.pids })) && (os.Geteuid() == 0 && IsolationLevel(python(t)) == IsolateNone) {
		t.Skip("root without a pids cgroup or a uid to drop to: nothing bounds the process count")
	}
	for rname, r := range runners(t) {
		t.Run(rname, func(t *testing.T) {
			ws, _ := workspace(t, "import os\nprint('uid', os.getuid(), flush=True)\nwhile True:\n    os.fork()\n")
			start := time.Now()
			res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py", Limits: Limits{Timeout: 5 * time.Second, MaxProcs: 32}})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if res.Outcome != ScriptError && res.Outcome != Killed && res.Outcome != Timeout {
				t.Errorf("outcome: got %s want script_error, killed or timeout", res.Outcome)
			}
			if d := time.Since(start); d > 15*time.Second {
				t.Errorf("took %v", d)
			}
			if IsolationLevel(python(t)) == IsolateRoot {
				uid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(strings.SplitN(res.Stdout, "\n", 2)[0], "uid")))
				if err != nil || uid < 1_000_000 {
					t.Fatalf("the bomb ran as uid %q", res.Stdout)
				}
				time.Sleep(100 * time.Millisecond)
				if n := countUID(uid); n > 0 {
					t.Errorf("%d processes of uid %d survive the run", n, uid)
				}
			}
		})
	}
}

func countUID(uid int) int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat("/proc/"+e.Name(), &st) == nil && int(st.Uid) == uid {
			b, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
			if !strings.Contains(string(b), ") Z ") {
				n++
			}
		}
	}
	return n
}

// TestLargeOutput: 64 MiB of output is drained and cut to the cap, the end
// survives, and the runner's memory stays bounded.
func TestLargeOutput(t *testing.T) {
	for rname, r := range runners(t) {
		t.Run(rname, func(t *testing.T) {
			ws, _ := workspace(t, "import sys\nline = 'y' * 1023 + '\\n'\nfor i in range(64 * 1024):\n    sys.stdout.write(line)\nprint('VAL_METRIC accuracy 0.5')\n")
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py", Limits: Limits{MaxOutputBytes: 64 << 10, KillOutputBytes: 1 << 30}})
			runtime.ReadMemStats(&after)
			if err != nil || res.Outcome != Success {
				t.Fatalf("got %v %s %s", err, res.Outcome, res.Stderr)
			}
			if !res.Truncated {
				t.Errorf("Truncated: got false want true")
			}
			if len(res.Stdout) > 70<<10 {
				t.Errorf("kept %d bytes want about 64 KiB", len(res.Stdout))
			}
			if !strings.HasSuffix(res.Stdout, "VAL_METRIC accuracy 0.5\n") || !strings.Contains(res.Stdout, "bytes of output left out") {
				t.Errorf("stdout does not keep its end and a note: ...%q", res.Stdout[len(res.Stdout)-200:])
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
				t.Errorf("the runner allocated %d MiB for 64 MiB of output", grew>>20)
			}
		})
	}
}

func TestSourceRunsInsteadOfFile(t *testing.T) {
	for rname, r := range runners(t) {
		t.Run(rname, func(t *testing.T) {
			ws, _ := workspace(t, "print('file')\nx = 1\nraise ValueError('on line 3')\n")
			src := "print('file')\nprint('marker')  # mlerl:inserted\nx = 1\nprint('marker')  # mlerl:inserted\nraise ValueError('on line 3')\n"
			res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py", Source: []byte(src)})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Count(res.Stdout, "marker"); got != 2 {
				t.Errorf("got %d marker lines want 2 (the Source ran?)", got)
			}
			// Tracebacks name the agent's file and its own line numbers.
			if !strings.Contains(res.Stderr, `train.py", line 3, in <module>`) || !strings.Contains(res.Stderr, "raise ValueError('on line 3')") {
				t.Errorf("traceback does not point at the file's line 3: %s", res.Stderr)
			}
			b, _ := os.ReadFile(filepath.Join(ws, "train.py"))
			if strings.Contains(string(b), "marker") {
				t.Errorf("the instrumented source reached the workspace")
			}
		})
	}
}

func TestCancel(t *testing.T) {
	for rname, r := range runners(t) {
		t.Run(rname, func(t *testing.T) {
			ws, _ := workspace(t, "import time\ntime.sleep(30)\n")
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := r.Run(ctx, Request{Dir: ws, Script: "train.py"})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("got %v want context.DeadlineExceeded", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v after cancel", d)
			}
		})
	}
}

func TestWarmConcurrent(t *testing.T) {
	r := runners(t)["warm"]
	const n = 6
	var wg sync.WaitGroup
	errs := make([]string, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ws, _ := workspace(t, fmt.Sprintf("import time, numpy as np\ntime.sleep(0.3)\nopen('submission.csv', 'w').write('%d')\nprint('run %d', np.random.rand() < 2)\n", i, i))
			res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py"})
			b, _ := os.ReadFile(filepath.Join(ws, "submission.csv"))
			switch {
			case err != nil:
				errs[i] = err.Error()
			case res.Outcome != Success || res.Stdout != fmt.Sprintf("run %d True\n", i) || string(b) != strconv.Itoa(i) || !res.Warm:
				errs[i] = fmt.Sprintf("got %s %q %q warm=%v", res.Outcome, res.Stdout, b, res.Warm)
			}
		}(i)
	}
	wg.Wait()
	for i, e := range errs {
		if e != "" {
			t.Errorf("run %d: %s", i, e)
		}
	}
}

func TestWarmReseedsRandom(t *testing.T) {
	r := runners(t)["warm"]
	ws, _ := workspace(t, "import numpy as np\nprint(np.random.rand())\n")
	seen := map[string]bool{}
	for i := 0; i < 3; i++ {
		res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py"})
		if err != nil || res.Outcome != Success {
			t.Fatalf("got %v %s", err, res.Outcome)
		}
		seen[res.Stdout] = true
	}
	if len(seen) != 3 {
		t.Errorf("got %d distinct unseeded draws in 3 runs want 3", len(seen))
	}
}

// TestWarmWorkerDeath: when the worker dies (before or during a run), runs
// still succeed through cold processes, and the worker comes back.
func TestWarmWorkerDeath(t *testing.T) {
	py := python(t)
	r, err := NewWarm(context.Background(), py)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	wr := r.(*warmRunner)
	kill := func() {
		wr.mu.Lock()
		w := wr.w
		wr.mu.Unlock()
		w.cmd.Process.Kill()
		<-w.exited
	}
	ws, _ := workspace(t, "import time\ntime.sleep(0.5)\nprint('done')\n")

	// Death during a run: the run is re-run cold.
	go func() {
		time.Sleep(200 * time.Millisecond)
		kill()
	}()
	res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py"})
	if err != nil || res.Outcome != Success || res.Stdout != "done\n" || res.Warm {
		t.Fatalf("run during death: got %v %s %q warm=%v want a cold success", err, res.Outcome, res.Stdout, res.Warm)
	}
	// The worker restarts in the background; runs are warm again.
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py"})
		if err != nil || res.Outcome != Success {
			t.Fatalf("run after death: got %v %s %s", err, res.Outcome, res.Stderr)
		}
		if res.Warm {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the warm worker did not come back within 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	wr.mu.Lock()
	starts := wr.starts
	wr.mu.Unlock()
	if starts != 2 {
		t.Errorf("worker starts: got %d want 2", starts)
	}
}

func TestCapture(t *testing.T) {
	tests := []struct {
		name   string
		writes []string
		max    int
		want   string
		trunc  bool
	}{
		{name: "fits", writes: []string{"abc", "def"}, max: 10, want: "abcdef"},
		{name: "exactly", writes: []string{"abcdefghij"}, max: 10, want: "abcdefghij"},
		{name: "head and tail", writes: []string{"abcdefghijklmnop"}, max: 10, want: "abcde\n[... 6 bytes of output left out ...]\nlmnop", trunc: true},
		{name: "many small", writes: strings.Split("abcdefghijklmnopqrstuvwxyz", ""), max: 8, want: "abcd\n[... 18 bytes of output left out ...]\nwxyz", trunc: true},
		{name: "big then small", writes: []string{"abcdefghijklmnopqrstuvwxy", "z"}, max: 8, want: "abcd\n[... 18 bytes of output left out ...]\nwxyz", trunc: true},
		{name: "markers in the middle kept", writes: []string{"head", "\nxx\n@@MLERL n data_", "loaded@@\nyy\n", "zz\n@@MLERL n model_trained@@\n", "0123456789"}, max: 8,
			want: "head\n[... 66 bytes of output left out ...]\n@@MLERL n data_loaded@@\n@@MLERL n model_trained@@\n6789", trunc: true},
		{name: "long lines not kept", writes: []string{"head", strings.Repeat("@@MLERL ", 100) + "\n", "0123456789"}, max: 8,
			want: "head\n[... 807 bytes of output left out ...]\n6789", trunc: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCapture(tc.max, nil)
			for _, w := range tc.writes {
				c.Write([]byte(w))
			}
			got, trunc := c.result()
			if got != tc.want || trunc != tc.trunc {
				t.Errorf("got %q, %v want %q, %v", got, trunc, tc.want, tc.trunc)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name             string
		timedOut, output bool
		code, signal     int
		stderr           string
		want             Outcome
	}{
		{name: "ok", want: Success},
		{name: "error", code: 1, stderr: "Traceback...\nValueError: x\n", want: ScriptError},
		{name: "memory", code: 1, stderr: "Traceback...\nMemoryError\n", want: OOM},
		{name: "numpy memory", code: 1, stderr: "Traceback...\nnumpy.core._exceptions._ArrayMemoryError: Unable to allocate 16.0 GiB\n", want: OOM},
		{name: "memory mentioned earlier", code: 1, stderr: "MemoryError\nline\nline\nline\nValueError: x\n", want: ScriptError},
		{name: "timeout wins over signal", timedOut: true, signal: 9, want: Timeout},
		{name: "cpu", signal: int(syscall.SIGXCPU), want: Timeout},
		{name: "output wins", output: true, timedOut: true, signal: 9, want: OutputLimit},
		{name: "signal", signal: 11, code: -1, want: Killed},
	}
	for _, tc := range tests {
		if got := classify(tc.timedOut, tc.output, tc.code, tc.signal, tc.stderr); got != tc.want {
			t.Errorf("%s: got %s want %s", tc.name, got, tc.want)
		}
	}
}

// TestUserNamespaceView runs the private-labels attack under the
// user-namespace view (what a non-root runner gets) wherever user
// namespaces work, root or not.
func TestUserNamespaceView(t *testing.T) {
	py := python(t)
	if err := probe(py, IsolateUserNS, false); err != nil {
		t.Skipf("user namespaces unavailable here: %v", err)
	}
	h, err := newHost(py)
	if err != nil {
		t.Fatal(err)
	}
	h.isolation = IsolateUserNS
	r := &coldRunner{h: h}
	defer r.Close()
	ws, answers := workspace(t, "")
	script := fmt.Sprintf("import os\nfor p in ['../private/answers.csv', %q]:\n    try:\n        print('READ', open(p).read())\n    except OSError as e:\n        print('DENIED', type(e).__name__)\nprint(sorted(os.listdir('/')))\nopen('submission.csv', 'w').write('ok')\n", answers)
	os.WriteFile(filepath.Join(ws, "train.py"), []byte(script), 0o644)
	res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py"})
	if err != nil || res.Outcome != Success {
		t.Fatalf("got %v %s %s", err, res.Outcome, res.Stderr)
	}
	if strings.Contains(res.Stdout, "SECRET") || strings.Count(res.Stdout, "DENIED") != 2 {
		t.Errorf("the hidden labels were reachable: %s", res.Stdout)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "submission.csv")); err != nil || string(b) != "ok" {
		t.Errorf("workspace not writable: %v", err)
	}
}

// TestUserNamespaceSpace: under IsolateUserNS a child that is not root
// (uid 65534, without cgroups: what a non-root caller's runs are) mounts
// its workspace tmpfs and overlay in its user namespace; the kernel holds
// it to its quota, and what a run within it wrote is copied back.
func TestUserNamespaceSpace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs its child as another user: needs root (a non-root caller's own runs are the other tests)")
	}
	py := python(t)
	h, err := newHost(py)
	if err != nil {
		t.Fatal(err)
	}
	h.isolation, h.space, h.cg = IsolateUserNS, true, nil
	h.runAs = &syscall.Credential{Uid: 65534, Gid: 65534}
	r := &coldRunner{h: h}
	defer r.Close()
	lim := Limits{Timeout: 60 * time.Second, WorkspaceBytes: 20 << 20, WorkspaceFiles: 500}
	run := func(script string) (string, Result) {
		ws, _ := workspace(t, script)
		mustWrite(t, filepath.Join(ws, "data", "train.csv"), 1000)
		if err := chownTree(ws, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Dir(filepath.Dir(ws)), 0o755) // t.TempDir's own folder
		res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py", Limits: lim})
		if err != nil {
			t.Fatalf("%v (is overlay with userxattr on tmpfs available? Linux 6.6 or later)", err)
		}
		return ws, res
	}
	ws, res := run("import os, shutil\nprint(os.getuid())\nopen('out.bin', 'wb').write(b'x' * (1 << 20))\nshutil.rmtree('data')\nos.mkdir('data')\nopen('data/new.csv', 'w').write('a')\n")
	if res.Outcome != Success || res.Stdout != "65534\n" {
		t.Fatalf("got %s %q %q", res.Outcome, res.Stdout, res.Stderr)
	}
	var got []string
	filepath.WalkDir(ws, func(p string, d os.DirEntry, err error) error {
		if rel, _ := filepath.Rel(ws, p); p != ws {
			got = append(got, rel)
		}
		return nil
	})
	if want := "data data/new.csv out.bin train.py"; strings.Join(got, " ") != want {
		t.Errorf("the workspace after the run: %v want %s", got, want)
	}
	// Its capabilities in its user namespace are gone: it cannot mount a
	// tmpfs of its own over the workspace (EPERM), nor remount anything.
	_, res = run("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nprint(libc.mount(b'tmpfs', os.getcwd().encode(), b'tmpfs', 0, None), ctypes.get_errno())\n")
	if res.Outcome != Success || res.Stdout != "-1 1\n" {
		t.Errorf("mounting a tmpfs over the workspace: got %s %q %q, want EPERM", res.Outcome, res.Stdout, res.Stderr)
	}
	_, res = run("import os\nfs = []\ntry:\n    for i in range(8):\n        f = open('h%d' % i, 'wb')\n        os.unlink('h%d' % i)\n        f.write(b'x' * (8 << 20))\n        f.flush()\n        fs.append(f)\nexcept OSError as e:\n    print(e)\nimport time\ntime.sleep(30)\n")
	if res.Outcome != Killed || !strings.Contains(res.Reason, "quota") {
		t.Errorf("holding 64 MiB of deleted files in a 20 MiB quota: got %s %q %q", res.Outcome, res.Reason, res.Stdout)
	}
}

// TestProcessesInvisible: a run sees only its own processes in /proc (so
// joblib/psutil work) and nothing of the host's or a concurrent run's.
func TestProcessesInvisible(t *testing.T) {
	if IsolationLevel(python(t)) != IsolateRoot {
		t.Skip("a private /proc needs root (IsolateRoot)")
	}
	r := runners(t)["warm"]
	other, _ := workspace(t, "import time\ntime.sleep(3)\n")
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(context.Background(), Request{Dir: other, Script: "train.py"})
	}()
	time.Sleep(500 * time.Millisecond)
	ws, _ := workspace(t, `import os
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print("PIDS", pids == [os.getpid()], len(pids))
try:
    import psutil
    print("RSS", psutil.Process().memory_info().rss > 0)
except ImportError:
    print("RSS", open("/proc/self/statm").read().split()[1] != "0")
print("INIT", os.path.exists("/proc/1/root"))
`)
	res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py"})
	<-done
	if err != nil || res.Outcome != Success {
		t.Fatalf("got %v %s %s", err, res.Outcome, res.Stderr)
	}
	if want := "PIDS True 1\nRSS True\nINIT False\n"; res.Stdout != want {
		t.Errorf("got %q want %q", res.Stdout, want)
	}
}

// TestJoblibProcesses: process-based parallelism (joblib's loky, a
// multiprocessing pool) works inside the sandbox.
func TestJoblibProcesses(t *testing.T) {
	if IsolationLevel(python(t)) == IsolateUserNS {
		t.Skip("no /proc under a user namespace: loky cannot run")
	}
	r := runners(t)["warm"]
	ws, _ := workspace(t, `import multiprocessing as mp
from joblib import Parallel, delayed
print(Parallel(n_jobs=2)(delayed(abs)(-i) for i in range(4)))
with mp.Pool(2) as p:
    print(p.map(abs, [-1, -2]))
`)
	res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py", Limits: Limits{Timeout: time.Minute}})
	if err != nil || res.Outcome != Success || res.Stdout != "[0, 1, 2, 3]\n[1, 2]\n" {
		t.Errorf("got %v %s %q %s", err, res.Outcome, res.Stdout, lastLines(res.Stderr, 5))
	}
}

// TestNoNetwork: the script cannot reach a service on the host's loopback
// (where an object-store emulator or an LLM endpoint may listen), but its
// own loopback works.
func TestNoNetwork(t *testing.T) {
	requireIsolation(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HOST-SECRET\n"))
			c.Close()
		}
	}()
	for rname, r := range runners(t) {
		t.Run(rname, func(t *testing.T) {
			ws, _ := workspace(t, fmt.Sprintf(`import socket
try:
    print("HOST", socket.create_connection(("127.0.0.1", %d), timeout=2).recv(100))
except OSError as e:
    print("HOST refused", type(e).__name__)
try:
    socket.create_connection(("8.8.8.8", 53), timeout=2)
    print("OUTSIDE reachable")
except OSError as e:
    print("OUTSIDE refused", type(e).__name__)
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen()
c = socket.create_connection(srv.getsockname())
print("LOCAL ok")
`, ln.Addr().(*net.TCPAddr).Port))
			res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py"})
			if err != nil || res.Outcome != Success {
				t.Fatalf("got %v %s %s", err, res.Outcome, res.Stderr)
			}
			if strings.Contains(res.Stdout, "SECRET") || strings.Contains(res.Stdout, "reachable") || !strings.Contains(res.Stdout, "LOCAL ok") {
				t.Errorf("got %q", res.Stdout)
			}
		})
	}
}

// TestEndlessOutput: a script that would print gigabytes is killed after
// KillOutputBytes (256 MiB here) with outcome output_limit, and the runner
// keeps only its caps in memory while draining it.
func TestEndlessOutput(t *testing.T) {
	for rname, r := range runners(t) {
		t.Run(rname, func(t *testing.T) {
			ws, _ := workspace(t, "import sys\nchunk = 'z' * (1 << 20)\nwhile True:\n    sys.stdout.write(chunk)\n")
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py", Limits: Limits{MaxOutputBytes: 64 << 10, KillOutputBytes: 256 << 20, Timeout: time.Minute}})
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != OutputLimit || !res.Truncated || len(res.Stdout) > 70<<10 {
				t.Errorf("got %s truncated=%v kept %d bytes want output_limit, truncated, about 64 KiB", res.Outcome, res.Truncated, len(res.Stdout))
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
				t.Errorf("the runner allocated %d MiB while draining 256 MiB", grew>>20)
			}
		})
	}
}

// has reports whether one of the runner's hierarchies offers what ok
// tests for.
func (g *cgroups) has(ok func(*hierarchy) bool) bool {
	if g == nil {
		return false
	}
	for _, h := range g.hs {
		if ok(h) {
			return true
		}
	}
	return false
}

// requireCPUCgroup skips where no CPU cgroup can be made: the rate is not
// limited there (the package doc says what still is).
func requireCPUCgroup(t *testing.T) {
	t.Helper()
	cg := newCgroups()
	defer cg.close()
	if !cg.has(func(h *hierarchy) bool { return h.cpu }) || !cg.has(func(h *hierarchy) bool { return h.acct }) {
		t.Skip("no writable CPU cgroup here: the CPU rate of a run is not limited")
	}
}

// cpuBound is the most CPU time a run held to cpus cores may use in wall:
// the quota plus a little for the periods the kernel lets a run overdraw
// before throttling it.
func cpuBound(cpus float64, wall time.Duration) time.Duration {
	return time.Duration(cpus*float64(wall)*1.1) + 300*time.Millisecond
}

// TestCPULimit: five processes that spin use Limits.CPUs cores together,
// not one core each, and the run's CPU time is counted over all of them.
func TestCPULimit(t *testing.T) {
	requireCPUCgroup(t)
	script := "import os\nfor _ in range(4):\n    if os.fork() == 0:\n        break\nwhile True:\n    pass\n"
	for rname, r := range runners(t) {
		for _, cpus := range []float64{0.5, 1} {
			t.Run(fmt.Sprintf("%s/%g", rname, cpus), func(t *testing.T) {
				ws, _ := workspace(t, script)
				start := time.Now()
				res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py", Limits: Limits{Timeout: 3 * time.Second, CPUs: cpus}})
				wall := time.Since(start)
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				t.Logf("%s, cpus %g: %s after %v, CPU time %v", rname, cpus, res.Outcome, wall.Round(time.Millisecond), res.CPUTime.Round(time.Millisecond))
				if res.Outcome != Timeout {
					t.Errorf("outcome: got %s want timeout", res.Outcome)
				}
				if res.CPUs != cpus {
					t.Errorf("Result.CPUs: got %g want %g", res.CPUs, cpus)
				}
				if b := cpuBound(cpus, wall); res.CPUTime > b || res.CPUTime < 100*time.Millisecond {
					t.Errorf("CPU time: got %v want between 0.1 s and %v (%g cores for %v)", res.CPUTime, b, cpus, wall.Round(time.Millisecond))
				}
			})
		}
	}
}

// TestSpawnOnly: a fork bomb that survives its refused forks (the bomb a
// pids limit alone leaves spinning until the timeout) is killed after
// spawnKillAfter with a reason, held to its CPU quota meanwhile, and
// leaves no process behind; a script that meets the limit once and goes
// on is not.
func TestSpawnOnly(t *testing.T) {
	cg := newCgroups()
	defer cg.close()
	if !cg.has(func(h *hierarchy) bool { return h.pids }) {
		t.Skip("no pids cgroup here: refused forks are not seen")
	}
	const bomb = "import os\nprint('uid', os.getuid(), flush=True)\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
	const pool = "import threading, time\nstop = threading.Event()\nts = []\ntry:\n    for _ in range(100):\n        t = threading.Thread(target=stop.wait)\n        t.start()\n        ts.append(t)\nexcept RuntimeError as e:\n    print('refused after', len(ts), flush=True)\nstop.set()\nfor t in ts:\n    t.join()\ntime.sleep(0.5)\nprint('done')\n"
	for rname, r := range runners(t) {
		t.Run(rname+"/bomb", func(t *testing.T) {
			ws, _ := workspace(t, bomb)
			start := time.Now()
			res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py", Limits: Limits{Timeout: 30 * time.Second, MaxProcs: 32}})
			wall := time.Since(start)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			t.Logf("%s: %s after %v, CPU time %v (held to %g cores)", rname, res.Outcome, wall.Round(time.Millisecond), res.CPUTime.Round(time.Millisecond), res.CPUs)
			want := "the script kept creating processes beyond the limit of 32 (processes and threads at once) for 3 s"
			if res.Outcome != Killed || res.Reason != want {
				t.Errorf("got %s, reason %q want killed, %q", res.Outcome, res.Reason, want)
			}
			if wall > spawnKillAfter+5*time.Second {
				t.Errorf("took %v, want about %v", wall, spawnKillAfter)
			}
			if res.CPUs > 0 && res.CPUTime > cpuBound(res.CPUs, wall) {
				t.Errorf("CPU time %v over %g cores x %v", res.CPUTime, res.CPUs, wall.Round(time.Millisecond))
			}
			if IsolationLevel(python(t)) == IsolateRoot {
				uid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(strings.SplitN(res.Stdout, "\n", 2)[0], "uid")))
				if err != nil || uid < 1_000_000 {
					t.Fatalf("the bomb ran as uid %q", res.Stdout)
				}
				time.Sleep(100 * time.Millisecond)
				if n := countUID(uid); n > 0 {
					t.Errorf("%d processes of uid %d survive the run", n, uid)
				}
			}
		})
		t.Run(rname+"/pool too large", func(t *testing.T) {
			ws, _ := workspace(t, pool)
			res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py", Limits: Limits{Timeout: 30 * time.Second, MaxProcs: 16}})
			if err != nil || res.Outcome != Success || res.Reason != "" || !strings.HasSuffix(res.Stdout, "done\n") {
				t.Errorf("got %v %s %q %q want a success", err, res.Outcome, res.Reason, res.Stdout)
			}
		})
	}
}

// TestCgroupEscape: a script that tries to leave its cgroups or lift their
// limits (join the parent's or the root's cgroup.procs, write its own
// cpu.max, cfs quota or pids.max) fails, and stays held to its quota.
func TestCgroupEscape(t *testing.T) {
	requireCPUCgroup(t)
	script := `import os
paths = []
try:
    own = [l.rstrip("\n").split(":", 2) for l in open("/proc/self/cgroup")]
except OSError as e:
    print("no /proc/self/cgroup:", type(e).__name__)
    own = [("0", c, "/") for c in ("pids", "cpu", "cpuacct", "")]
for _, ctls, path in own:
    for c in ctls.split(",") if ctls else [""]:
        base = "/sys/fs/cgroup/" + c if c else "/sys/fs/cgroup"
        for d in {base, base + os.path.dirname(path), base + os.path.dirname(os.path.dirname(path))}:
            paths.append((d + "/cgroup.procs", str(os.getpid())))
        for f, v in (("cpu.max", "max"), ("cpu.cfs_quota_us", "-1"), ("pids.max", "max")):
            paths.append((base + path + "/" + f, v))
for p, v in paths:
    try:
        with open(p, "w") as f:
            f.write(v)
        print("WROTE", p, flush=True)
    except OSError:
        pass
print("tried", len(paths), flush=True)
for _ in range(3):
    if os.fork() == 0:
        break
while True:
    pass
`
	rs := runners(t)
	// Unisolated, the script sees the host's /sys/fs/cgroup: only the
	// files' owners (root) may write them.
	h, err := newHost(python(t))
	if err != nil {
		t.Fatal(err)
	}
	h.isolation = IsolateNone
	rs["cold unisolated"] = &coldRunner{h: h}
	defer rs["cold unisolated"].Close()
	for rname, r := range rs {
		t.Run(rname, func(t *testing.T) {
			ws, _ := workspace(t, script)
			start := time.Now()
			res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py", Limits: Limits{Timeout: 3 * time.Second, CPUs: 0.5}})
			wall := time.Since(start)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			t.Logf("%s: %s after %v, CPU time %v; stdout %q", rname, res.Outcome, wall.Round(time.Millisecond), res.CPUTime.Round(time.Millisecond), res.Stdout)
			if strings.Contains(res.Stdout, "WROTE") || !strings.Contains(res.Stdout, "tried") {
				t.Errorf("the script reached its cgroups: %s %s", res.Stdout, lastLines(res.Stderr, 3))
			}
			if b := cpuBound(0.5, wall); res.CPUTime > b {
				t.Errorf("CPU time: got %v want at most %v", res.CPUTime, b)
			}
		})
	}
}

func TestCPUsDefaults(t *testing.T) {
	n := float64(runtime.NumCPU())
	for _, c := range []struct{ in, want float64 }{{0, 1}, {-2, 1}, {math.NaN(), 1}, {0.25, min(0.25, n)}, {math.Inf(1), n}, {1e12, n}} {
		if got := (Limits{CPUs: c.in}).withDefaults().CPUs; got != c.want {
			t.Errorf("CPUs %v: got %v want %v", c.in, got, c.want)
		}
	}
}
