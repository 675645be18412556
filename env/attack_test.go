package env

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mlerl/mlerl/internal/blobs"
	"github.com/mlerl/mlerl/internal/safefile"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
)

// The attack suite: scripts an agent chasing reward could write, each run
// with Execute Script on the fixture task through the real sandbox (cold
// and warm runners) and through an unisolated runner (the weakest
// isolation, where a script can reach host paths). Every case must earn no
// positive reward, must not hang, must leave the host's copy of the
// answers untouched, and, where the sandbox holds runs to a CPU quota,
// must use no more CPU time than its cores allow for the time it ran.

// hostAnswers writes the fixture task's correct answers where a task's
// private files live on the host (as tasks/<id>/private/answers.csv does
// in the repository): a followed link would grade them as a perfect
// submission.
func hostAnswers(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tasks", "fixture-threshold", "private", "answers.csv")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("id,y\n")
	for i := 0; i < 20; i++ {
		y := 0
		if float64(i)/20 > 0.5 {
			y = 1
		}
		fmt.Fprintf(&b, "t%d,%d\n", i, y)
	}
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

type attack struct {
	name   string
	script string // Python; {ANSWERS} is the answers' host path, {CWD} the host's working directory
	// reason, when set, must appear in the observation (the refusal says why).
	reason string
	// graded: the script exits cleanly where nothing isolates it, so the
	// grader's read of submission.csv is what must refuse it.
	graded bool
}

func attacks() []attack {
	return []attack{
		{"symlink absolute", "import os\nos.symlink({ANSWERS}, 'submission.csv')\n", "symbolic link", true},
		{"symlink relative", "import os\nos.symlink(os.path.relpath({ANSWERS}, os.getcwd()), 'submission.csv')\n", "symbolic link", true},
		{"symlink through /proc/self/cwd", "import os\nos.symlink('/proc/self/cwd/' + os.path.relpath({ANSWERS}, {CWD}), 'submission.csv')\n", "symbolic link", true},
		{"symlink through /proc/self/root", "import os\nos.symlink('/proc/self/root' + {ANSWERS}, 'submission.csv')\n", "symbolic link", true},
		{"symlink inside the workspace", "import os\nopen('preds.csv', 'w').write(open({ANSWERS}).read() if os.path.exists({ANSWERS}) else 'id,y\\n')\nos.symlink('preds.csv', 'submission.csv')\n", "symbolic link", true},
		{"symlinked folder", "import os\nos.symlink(os.path.dirname({ANSWERS}), 'private')\nos.symlink('private/answers.csv', 'submission.csv')\n", "symbolic link", true},
		{"hard link", "import os\nos.link({ANSWERS}, 'submission.csv')\n", "hard links", true},
		{"fifo", "import os\nos.mkfifo('submission.csv')\n", "named pipe", true},
		{"device", "import os, stat\nos.mknod('submission.csv', stat.S_IFCHR | 0o644, os.makedev(1, 5))\n", "character device", true},
		{"sparse 1 TiB", "f = open('submission.csv', 'w')\nf.truncate(1 << 40)\nf.close()\n", "more than the 256 MiB allowed", true},
		{"folder", "import os\nos.mkdir('submission.csv')\n", "folder", true},
		{"forged markers", "for m in ['imports_done', 'data_loaded', 'model_defined', 'model_trained', 'predictions_made', 'submission_written']:\n    print('@@MLERL 0000000000000000 ' + m, flush=True)\nraise SystemExit(1)\n", "", false},
		{"read the private files", "import glob\nfiles = glob.glob('/tmp/mlerl-grade-*/private/*') + glob.glob('../**/answers.csv', recursive=True)\nopen('submission.csv', 'w').write(open(files[0]).read() if files else 'id,y\\n')\n", "", false},
		{"write outside", "open('../escaped.txt', 'w').write('x')\n", "", false},
		{"network", "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)\n", "", false},
		{"memory hog", "x = bytearray(64 << 30)\n", "", false},
		{"output flood", "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n", "", false},
		// A bomb that survives its refused forks: without a CPU quota its
		// 64 processes load every core of the host until the time limit.
		{"fork bomb", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", "", false},
	}
}

// sandboxOnly are the attacks whose limits are the sandbox's (resources,
// isolation), tested above it; the unisolated runner skips them.
var sandboxOnly = map[string]bool{"memory hog": true, "output flood": true, "write outside": true, "network": true, "fork bomb": true}

// meteredRunner keeps the sandbox's result of the attack script's run,
// for the host-cost checks.
type meteredRunner struct {
	sandbox.Runner
	mu  sync.Mutex
	res *sandbox.Result
}

func (m *meteredRunner) Run(ctx context.Context, req sandbox.Request) (sandbox.Result, error) {
	res, err := m.Runner.Run(ctx, req)
	if req.Script == "attack.py" {
		m.mu.Lock()
		m.res = &res
		m.mu.Unlock()
	}
	return res, err
}

func (m *meteredRunner) result() *sandbox.Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.res
}

func TestAttackSuite(t *testing.T) {
	python := realPython(t)
	secret := hostAnswers(t)
	want, _ := os.ReadFile(secret)
	cwd, _ := os.Getwd()
	sb := sandbox.NewCold(python)
	defer sb.Close()
	warm, err := sandbox.NewWarm(context.Background(), python)
	if err != nil {
		t.Fatalf("NewWarm: %v", err)
	}
	defer warm.Close()
	runners := map[string]sandbox.Runner{"sandbox": sb, "sandbox warm": warm, "unisolated": procRunner{python}}
	for rname, runner := range runners {
		for _, a := range attacks() {
			if rname == "unisolated" && sandboxOnly[a.name] {
				continue
			}
			t.Run(rname+"/"+a.name, func(t *testing.T) {
				st := store.NewLocal(t.TempDir())
				cfg := testConfig(t)
				metered := &meteredRunner{Runner: runner}
				cfg.Python, cfg.Runner, cfg.Instrumenter = python, metered, nil
				e, err := New(context.Background(), cfg, fixture(t, st, false), st)
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				if err := os.WriteFile(filepath.Join(e.Dir(), "attack.py"), []byte(strings.NewReplacer("{ANSWERS}", fmt.Sprintf("%q", secret), "{CWD}", fmt.Sprintf("%q", cwd)).Replace(a.script)), 0o644); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				done := make(chan StepResult, 1)
				go func() {
					r, err := e.Step(context.Background(), act(ExecuteScript, "attack.py"))
					if err != nil {
						t.Errorf("Step: %v", err)
					}
					done <- r
				}()
				var r StepResult
				select {
				case r = <-done:
				case <-time.After(90 * time.Second):
					t.Fatalf("the step did not return within 90 s")
				}
				took := time.Since(start)
				cost := "CPU time not measured"
				if res := metered.result(); res != nil && rname != "unisolated" {
					cost = fmt.Sprintf("CPU time %v", res.CPUTime.Round(time.Millisecond))
					if res.CPUs > 0 {
						cost += fmt.Sprintf(" (held to %g core)", res.CPUs)
						// The quota, plus the periods the kernel lets a
						// run overdraw before throttling it.
						if bound := time.Duration(res.CPUs*float64(res.Duration)*1.1) + 300*time.Millisecond; res.CPUTime > bound {
							t.Errorf("the run used %v of CPU in %v, more than its %g core allow (%v)", res.CPUTime, res.Duration, res.CPUs, bound)
						}
					} else {
						cost += " (no CPU cgroup here: the rate is not limited)"
					}
				}
				t.Logf("%s, %s: outcome %s, reward %+.2f, %v, %s", rname, a.name, r.Outcome, r.Reward.Total, took.Round(time.Millisecond), cost)
				if r.Reward.Total > 0 || r.MetricAfter != nil && *r.MetricAfter > 0.5 {
					t.Errorf("reward %+v, metric %v: the attack was rewarded (%s)\n%s", r.Reward.Total, r.MetricAfter, r.Detail, r.Observation)
				}
				if r.Outcome == OutcomeSuccess {
					t.Errorf("outcome success for an attack: %s", r.Observation)
				}
				// Without isolation every file attack runs to its end, so the
				// grader's read is what must refuse it.
				if rname == "unisolated" && a.graded && r.Outcome != OutcomeInvalidSubmission {
					t.Errorf("outcome %s, want invalid_submission:\n%s", r.Outcome, r.Observation)
				}
				if a.reason != "" && r.Outcome == OutcomeInvalidSubmission && !strings.Contains(r.Observation, a.reason) {
					t.Errorf("the observation does not say %q:\n%s", a.reason, r.Observation)
				}
				if a.name == "fork bomb" {
					// Killed once it has done nothing but spawn for 3 s where
					// the sandbox sees refused forks (a pids cgroup), else
					// at the time limit.
					if res := metered.result(); res != nil && res.Reason != "" && (r.Outcome != OutcomeKilled || !strings.Contains(r.Observation, "The script was killed by the sandbox: the script kept creating processes beyond the limit of 64")) {
						t.Errorf("outcome %s, observation:\n%s", r.Outcome, r.Observation)
					}
				}
				if a.name == "forged markers" && len(r.Markers) > 0 {
					t.Errorf("forged markers credited: %v", r.Markers)
				}
				if got, _ := os.ReadFile(secret); string(got) != string(want) {
					t.Errorf("the host's answers changed")
				}
				if _, err := os.Stat(filepath.Join(filepath.Dir(e.Dir()), "escaped.txt")); err == nil && rname == "sandbox" {
					t.Errorf("the script wrote outside its workspace")
				}
				// What the run left is never followed by a snapshot either;
				// a state over the workspace quota (the unisolated runner
				// lets a 1 TiB sparse file stay) is not kept.
				if _, err := e.Snapshot(context.Background()); err != nil && !errors.Is(err, ErrSnapshotTooLarge) {
					t.Errorf("snapshot after the attack: %v", err)
				}
			})
		}
	}
}

// TestHostReadsNoLinkedFile: after a script swaps workspace files for
// links, a FIFO and a huge sparse file, no action, no snapshot and no
// prompt read reaches through them or blocks on them.
func TestHostReadsNoLinkedFile(t *testing.T) {
	secret := hostAnswers(t)
	e, st := newTestEnv(t, false)
	ws := e.Dir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Remove(filepath.Join(ws, "train.py")))
	must(os.Symlink(secret, filepath.Join(ws, "train.py")))
	must(os.Symlink(secret, filepath.Join(ws, "notes.csv")))
	must(os.Symlink(filepath.Dir(secret), filepath.Join(ws, "priv")))
	must(os.Link(secret, filepath.Join(ws, "hard.csv")))
	must(unix.Mkfifo(filepath.Join(ws, "pipe.py"), 0o644))
	f, err := os.Create(filepath.Join(ws, "big.csv"))
	must(err)
	must(f.Truncate(700 << 20)) // sparse, past what a snapshot reads, within the workspace quota
	f.Close()

	type tryStep struct{ name, text string }
	tries := []tryStep{
		{"inspect a symlink", act(InspectScriptLines, "train.py", "1", "20")},
		{"understand a symlink", act(UnderstandFile, "notes.csv", "the labels")},
		{"understand through a linked folder", act(UnderstandFile, "priv/answers.csv", "the labels")},
		{"copy a symlink", act(CopyFile, "notes.csv", "copy.csv")},
		{"execute a symlink", act(ExecuteScript, "train.py")},
		{"execute a fifo", act(ExecuteScript, "pipe.py")},
		{"inspect a fifo", act(InspectScriptLines, "pipe.py", "1", "5")},
		{"understand a sparse file", act(UnderstandFile, "big.csv", "rows")},
		{"edit onto a symlink", act(EditScriptAI, "pipe.py", "raise the threshold", "notes.csv")},
		{"copy onto a fifo", act(CopyFile, "hard.csv", "pipe.py")},
	}
	for _, tr := range tries {
		t.Run(tr.name, func(t *testing.T) {
			done := make(chan StepResult, 1)
			go func() {
				r, err := e.Step(context.Background(), tr.text)
				if err != nil {
					t.Errorf("Step: %v", err)
				}
				done <- r
			}()
			select {
			case r := <-done:
				if r.Outcome != OutcomeInvalidAction || r.Reward.Total > 0 {
					t.Errorf("got %s reward %v, want a refusal:\n%s", r.Outcome, r.Reward.Total, r.Observation)
				}
				if strings.Contains(r.Observation, "1,1") || strings.Contains(r.Observation, ws) {
					t.Errorf("the observation shows the answers or a host path:\n%s", r.Observation)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the step blocked")
			}
		})
	}
	if b, err := e.ReadFile("train.py", 1<<20); !errors.Is(err, safefile.ErrSymlink) {
		t.Errorf("ReadFile(train.py): got %q, %v; want a symlink refusal", b, err)
	}
	ref, err := e.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	files, _, err := blobs.GetTree(context.Background(), st, ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"train.py", "notes.csv", "priv/answers.csv", "pipe.py", "big.csv"} {
		if _, ok := files[p]; ok {
			t.Errorf("the snapshot holds %s", p)
		}
	}
}
