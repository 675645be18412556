package env

import (
	"context"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
)

// Scripts written to the reward rather than to the task, as a policy that
// writes its own code could: they fill the disk, flood the workspace with
// files or print the partial-credit markers of stages they never reach.
// Each runs with Execute Script on the fixture task through the real
// sandbox (the warm worker), the static instrumenter and a small quota
// (20 MiB, 500 files and folders), with the default reward (error -1,
// +0.1 per marker).

var (
	hostileOnce   sync.Once
	hostileRunner sandbox.Runner
	hostileErr    error
)

// hostileQuota is the workspace quota of these tests.
var hostileQuota = sandbox.WorkspaceQuota{Bytes: 20 << 20, Files: 500}

// hostileEnv is a fresh episode of the fixture task with the real sandbox
// and instrumenter, its workspace held to hostileQuota.
func hostileEnv(t *testing.T) (*Env, string) {
	t.Helper()
	python := realPython(t)
	hostileOnce.Do(func() { hostileRunner, hostileErr = sandbox.NewWarm(context.Background(), python) })
	if hostileErr != nil {
		t.Fatal(hostileErr)
	}
	root := t.TempDir()
	st := store.NewLocal(root)
	cfg := testConfig(t)
	cfg.Python, cfg.Runner, cfg.Instrumenter = python, hostileRunner, nil
	cfg.WorkspaceBytes, cfg.WorkspaceFiles = hostileQuota.Bytes, hostileQuota.Files
	cfg.Blobs = &BlobMeter{}
	e, err := New(context.Background(), cfg, fixture(t, st, false), st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, root
}

// treeBytes sums the sizes of the files under dir.
func treeBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// hostFree is the free space of the file system holding dir.
func hostFree(t *testing.T, dir string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// runHostile runs script as attack.py, and fails the test when the free
// space of the disk under the workspace fell by more than 256 MiB during
// the step (well above a 20 MiB quota, well below the gigabytes the
// scripts try for; other processes share the disk).
func runHostile(t *testing.T, e *Env, script string) StepResult {
	t.Helper()
	if err := os.WriteFile(filepath.Join(e.Dir(), "attack.py"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	free := hostFree(t, e.Dir())
	low := free
	stop := make(chan struct{})
	var sampled sync.WaitGroup
	sampled.Add(1)
	go func() {
		defer sampled.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				low = min(low, hostFree(t, e.Dir()))
			}
		}
	}()
	defer func() {
		close(stop)
		sampled.Wait()
		if free-low > 256<<20 {
			t.Errorf("the host's free space fell by %d MiB during the step", (free-low)>>20)
		}
	}()
	done := make(chan StepResult, 1)
	go func() {
		r, err := e.Step(context.Background(), act(ExecuteScript, "attack.py"))
		if err != nil {
			t.Errorf("Step: %v", err)
		}
		done <- r
	}()
	select {
	case r := <-done:
		return r
	case <-time.After(90 * time.Second):
		t.Fatal("the step did not return within 90 s")
	}
	return StepResult{}
}

// checkCaps: the workspace and what a snapshot adds to the blob store stay
// within the quota after the step.
func checkCaps(t *testing.T, e *Env, root string) {
	t.Helper()
	time.Sleep(300 * time.Millisecond) // anything the run left behind would go on writing
	u, err := sandbox.MeasureWorkspace(e.Dir(), sandbox.WorkspaceQuota{})
	if err != nil {
		t.Fatal(err)
	}
	if why := hostileQuota.Exceeded(u); why != "" {
		t.Errorf("the workspace holds %+v after the run: %s", u, why)
	}
	before := treeBytes(root)
	_, err = e.Snapshot(context.Background())
	if err != nil && !errors.Is(err, ErrSnapshotTooLarge) {
		t.Fatalf("snapshot: %v", err)
	}
	if grew := treeBytes(root) - before; grew > hostileQuota.Bytes {
		t.Errorf("the snapshot added %d bytes to the blob store, more than the %d-byte quota", grew, hostileQuota.Bytes)
	}
}

func TestHostileScripts(t *testing.T) {
	tests := []struct {
		name, script string
		outcomes     []Outcome // any of these
		markers      []string
		noCredit     bool   // the credit check refuses it: no markers, the observation says why
		observation  string // part of the observation (alternatives split by "|")
		// refusable: the kernel may refuse the script space before it is
		// measured over its quota (its workspace is a tmpfs of its own:
		// sandbox.KernelQuota); it then fails on ENOSPC, which is as good.
		refusable bool
	}{
		// The disk: what the issue saw (ten files of 1 GiB), at 1/250 scale.
		{name: "ten files", script: "import os\nfor i in range(10):\n    open('f%d.bin' % i, 'wb').write(b'x' * (4 << 20))\n",
			outcomes: []Outcome{OutcomeKilled}, markers: []string{MarkerImportsDone}, observation: "quota: more than 20 MiB", refusable: true},
		{name: "file flood", script: "import os\nos.mkdir('flood')\nfor i in range(150000):\n    open('flood/%d' % i, 'w').close()\n",
			outcomes: []Outcome{OutcomeKilled}, markers: []string{MarkerImportsDone}, observation: "more than 500 files and folders", refusable: true},
		// Its 500th folder meets the files quota (or, in a tmpfs of its
		// own, the kernel's inode limit) or its 65th level the depth limit
		// first, whichever a measurement sees first.
		{name: "deep tree", script: "import os\nfor i in range(3000):\n    os.mkdir('d')\n    os.chdir('d')\n",
			outcomes: []Outcome{OutcomeKilled}, markers: []string{MarkerImportsDone}, observation: "nested more than 64 deep|more than 500 files and folders", refusable: true},
		{name: "sparse files", script: "import os\nfor i in range(3):\n    with open('s%d' % i, 'wb') as f:\n        f.truncate(15 << 20)\n",
			outcomes: []Outcome{OutcomeKilled}, markers: []string{MarkerImportsDone}, observation: "more than 20 MiB"},
		{name: "hard links", script: "import os\nopen('a', 'w').write('x')\nfor i in range(2000):\n    os.link('a', 'l%d' % i)\n",
			outcomes: []Outcome{OutcomeKilled}, markers: []string{MarkerImportsDone}, observation: "more than 500 files"},
		{name: "deleted files held open", script: "import os, time\nfs = []\nfor i in range(3):\n    f = open('h%d' % i, 'wb')\n    os.unlink('h%d' % i)\n    f.write(b'x' * (10 << 20))\n    f.flush()\n    fs.append(f)\ntime.sleep(20)\n",
			outcomes: []Outcome{OutcomeKilled}, markers: []string{MarkerImportsDone}, observation: "grew past its quota", refusable: true},
		{name: "a child writes after the parent exits", script: "import os, time\nif os.fork() == 0:\n    os.setsid()\n    for i in range(60):\n        open('c%d.bin' % i, 'wb').write(b'x' * (1 << 20))\n    os._exit(0)\ntime.sleep(0.5)\n",
			outcomes: []Outcome{OutcomeKilled, OutcomeInvalidSubmission}, markers: []string{MarkerImportsDone}},
		// What no walk of the workspace sees: deleted files whose
		// descriptors are in flight in a socket's queue, and space reserved
		// past the files' sizes (FALLOC_FL_KEEP_SIZE, which the per-file
		// size limit does not bound; ctypes: no partial credit), 2 GiB
		// tried for, what is got kept while waiting. The host's disk is
		// checked by runHostile.
		{name: "deleted files in a socket's queue", script: "import os, socket, time\na, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)\ntry:\n    for i in range(128):\n        fd = os.open('q%d' % i, os.O_CREAT | os.O_RDWR)\n        os.unlink('q%d' % i)\n        socket.send_fds(a, [b'x'], [fd])\n        for j in range(16):\n            os.write(fd, b'x' * (1 << 20))\n        os.close(fd)\nexcept OSError:\n    pass\ntime.sleep(20)\n",
			outcomes: []Outcome{OutcomeKilled}, markers: []string{MarkerImportsDone}, observation: "grew past its quota", refusable: true},
		{name: "reservations past the file size", script: "import ctypes, os, time\nlibc = ctypes.CDLL(None)\nlibc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]\nfor i in range(2048):\n    fd = os.open('r%d' % i, os.O_CREAT | os.O_RDWR)\n    if libc.fallocate(fd, 1, 0, 1 << 20) != 0:\n        break\ntime.sleep(20)\n",
			outcomes: []Outcome{OutcomeKilled}, noCredit: true, observation: "grew past its quota"},
		{name: "/dev/shm and /tmp stay bounded", script: "import os\nf = open('/dev/shm/big', 'wb')\nfor i in range(700):\n    f.write(b'x' * (1 << 20))\n",
			outcomes: []Outcome{OutcomeScriptError}, markers: []string{MarkerImportsDone}},
		// Partial credit: the forger, which finds the markers in its
		// own code and prints all six, and its variants.
		// The stages after the exit are never reached: they are there for
		// the instrumenter to put all six markers in the code (which the
		// old instrumenter's constants then gave away: -0.4).
		{name: "self-inspecting forger", script: "import sys\nimport pandas as pd\nfor c in sys._getframe().f_code.co_consts:\n    if isinstance(c, bytes) and b'@@MLERL' in c:\n        sys.stdout.buffer.write(c)\nsys.stdout.flush()\nif len(sys.argv) < 9:\n    raise SystemExit(1)\n" + deadStages,
			outcomes: []Outcome{OutcomeScriptError}, noCredit: true, observation: "No partial credit for this run, line 3: "},
		{name: "obfuscated forger", script: "m = __builtins__\nf = getattr(m, 'ev' + 'al')\nf(\"print('x')\")\nraise SystemExit(1)\n",
			outcomes: []Outcome{OutcomeScriptError}, noCredit: true, observation: "No partial credit"},
		{name: "gc forger", script: "import gc\nprint(len(gc.get_objects()))\nraise SystemExit(1)\n",
			outcomes: []Outcome{OutcomeScriptError}, noCredit: true, observation: "No partial credit for this run, line 1: import gc"},
		{name: "format-string forger", script: "g = (x for x in [1])\nprint('{0.gi_frame.f_back.f_code.co_consts}'.format(g))\nraise SystemExit(1)\n",
			outcomes: []Outcome{OutcomeScriptError}, noCredit: true, observation: "No partial credit"},
		// Checked as UTF-8, run as UTF-7: "+AAo-" is a newline there, so
		// the interpreter would see a second line the check does not.
		{name: "coding declaration", script: "# -*- coding: utf-7 -*-\nx = 1 #+AAo-import gc\nraise SystemExit(1)\n",
			outcomes: []Outcome{OutcomeScriptError}, noCredit: true, observation: "coding declaration (utf-7)"},
		{name: "ctypes writer", script: "import ctypes\nctypes.CDLL(None).write(1, b'x', 1)\nraise SystemExit(1)\n",
			outcomes: []Outcome{OutcomeScriptError}, noCredit: true, observation: "No partial credit"},
		{name: "guessed tokens from threads", script: "import threading, secrets\nnames = ['imports_done', 'data_loaded', 'model_defined', 'model_trained', 'predictions_made', 'submission_written']\nts = [threading.Thread(target=lambda n=n: print('@@MLERL %s %s@@' % (secrets.token_hex(16), n), flush=True)) for n in names]\nfor t in ts:\n    t.start()\nfor t in ts:\n    t.join()\nraise SystemExit(1)\n",
			outcomes: []Outcome{OutcomeScriptError}},
		{name: "the instrumented text from disk", script: "import re, os\nsrc = ''.join(open(f).read() for f in os.listdir('.') if f.endswith('.py'))\nprint(re.findall(r'@@MLERL \\w+ \\w+@@', src), re.findall('mlerl' + '_mark', src))\nraise SystemExit(1)\n",
			outcomes: []Outcome{OutcomeScriptError}, markers: []string{MarkerImportsDone}, observation: "[] []"},
		// The forger: a data-frame query with a constant
		// expression resolves @names in the frame level= names, the
		// runner's own above the script's; the names it finds there are
		// the markers' sockets, not their lines (the old bootstrap kept
		// the lines there: all six markers, -0.4).
		{name: "a query reads the runner's frames", script: "import re\nimport pandas as pd\ndf = pd.DataFrame({'a': [1]})\nfound = set()\nfor lvl in range(1, 12):\n    try:\n        df.query('@marks', level=lvl)\n    except Exception as e:\n        found.update(re.findall(r'@@MLERL \\w+ \\w+@@', str(e)))\n    try:\n        df.query('@cfg', level=lvl)\n    except Exception as e:\n        found.update(re.findall(r'@@MLERL \\w+ \\w+@@', str(e)))\nfor f in sorted(found):\n    print(f)\nif len(found) < 9:\n    raise SystemExit(1)\n" + deadStages,
			outcomes: []Outcome{OutcomeScriptError}, markers: []string{MarkerImportsDone}},
		{name: "its own memory, path computed", script: "import os\np = '/pr' + 'oc/' + str(os.getpid()) + '/m' + 'em'\nf = open(p, 'rb')\nprint(f.read(1))\n",
			outcomes: []Outcome{OutcomeKilled}, markers: []string{MarkerImportsDone}, observation: "stopped the script: open /proc/"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if strings.HasPrefix(tc.name, "deleted") && os.Geteuid() != 0 {
				t.Skip("only root sees into a run's open files (its processes are not dumpable)")
			}
			e, root := hostileEnv(t)
			r := runHostile(t, e, tc.script)
			t.Logf("%s, reward %+.2f, markers %v: %s", r.Outcome, r.Reward.Total, r.Markers, r.Detail)
			want, obs := tc.outcomes, tc.observation
			if tc.refusable && r.Outcome == OutcomeScriptError && strings.Contains(r.Observation, "No space left on device") {
				want, obs = []Outcome{OutcomeScriptError}, "No space left on device"
			}
			if !contains(want, r.Outcome) {
				t.Errorf("outcome %s, want one of %v:\n%s", r.Outcome, want, r.Observation)
			}
			if !reflect.DeepEqual(r.Markers, tc.markers) {
				t.Errorf("markers: got %v want %v\n%s", r.Markers, tc.markers, r.Observation)
			}
			// A failed run earns -1 plus 0.1 per marker it reached.
			if want := -1 + 0.1*float64(len(tc.markers)); math.Abs(r.Reward.Total-want) > 1e-9 {
				t.Errorf("reward %v want %v", r.Reward.Total, want)
			}
			if got := strings.Contains(r.Observation, "No partial credit"); got != tc.noCredit {
				t.Errorf("no-credit note: got %v want %v:\n%s", got, tc.noCredit, r.Observation)
			}
			if !containsAny(r.Observation, strings.Split(obs, "|")) {
				t.Errorf("the observation lacks %q:\n%s", obs, r.Observation)
			}
			if m := markerTextRe.FindString(r.Observation); m != "" && !strings.Contains(tc.name, "guessed") {
				t.Errorf("the observation shows a marker line %q:\n%s", m, r.Observation)
			}
			checkCaps(t, e, root)
		})
	}
}

// TestMarkersFromAnEarlierRun: markers a script captured in one run (its
// stdout sent to a file) earn nothing when printed in the next: each run
// has its own tokens, and a wrong one voids the run's markers.
func TestMarkersFromAnEarlierRun(t *testing.T) {
	e, _ := hostileEnv(t)
	capture := "import os\nfd = os.open('captured.txt', os.O_WRONLY | os.O_CREAT, 0o644)\nos.dup2(fd, 1)\nimport pandas as pd\ndf = pd.read_csv('train.csv')\nraise SystemExit(1)\n"
	r := runHostile(t, e, capture)
	if r.Markers != nil {
		t.Fatalf("the capturing run's markers went to its file, got %v", r.Markers)
	}
	captured, err := e.ReadFile("captured.txt", 1<<20)
	if err != nil || !strings.Contains(string(captured), "@@MLERL ") {
		t.Fatalf("captured %q, %v: want the first run's marker lines", captured, err)
	}
	r = runHostile(t, e, "import os\nprint(open('captured.txt').read())\nraise SystemExit(1)\n")
	if r.Markers != nil || r.Reward.Total != -1 {
		t.Errorf("replayed markers: got %v, reward %v; want none and -1", r.Markers, r.Reward.Total)
	}
}

// TestHonestFailingCredit: an honest script that fails where it fails
// earns what it earned before tokens, the guard and the credit check: the
// fixture's model broken by an edit fails in the model section, after
// imports_done and data_loaded (-0.8), through the real sandbox.
func TestHonestFailingCredit(t *testing.T) {
	e, _ := hostileEnv(t)
	if r := step(t, e, act(EditScriptAI, "train.py", "break the model", "train.py")); r.Outcome != OutcomeSuccess {
		t.Fatalf("edit: %s %s", r.Outcome, r.Observation)
	}
	r := step(t, e, act(ExecuteScript, "train.py"))
	if want := []string{MarkerImportsDone, MarkerDataLoaded}; r.Outcome != OutcomeScriptError || !reflect.DeepEqual(r.Markers, want) || math.Abs(r.Reward.Total+0.8) > 1e-9 {
		t.Errorf("got %s %v %v, want script_error %v -0.8\n%s", r.Outcome, r.Markers, r.Reward.Total, want, r.Observation)
	}
	if strings.Contains(r.Observation, "No partial credit") {
		t.Errorf("an honest script was refused credit:\n%s", r.Observation)
	}
}

// deadStages is every stage of a training script, never reached by the
// scripts that end with it (they exit first, on a condition the compiler
// cannot see through: code after a bare raise would be dropped).
const deadStages = "df = pd.read_csv('train.csv')\nmodel = Model()\nmodel.fit(df, df)\np = model.predict(df)\npd.DataFrame(p).to_csv('submission.csv')\n"

// markerTextRe matches a marker line.
var markerTextRe = regexp.MustCompile(`@@MLERL [0-9a-f]{32} \w+@@`)

func containsAny(s string, parts []string) bool {
	for _, p := range parts {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

func contains[T comparable](list []T, v T) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// TestQuotaRefusals: the environment's own writes are held to the quota
// (a Copy File past it is refused), a snapshot of a state over it is
// refused and stores nothing, and the stage's meter counts what
// snapshots add and the states refused.
func TestQuotaRefusals(t *testing.T) {
	root := t.TempDir()
	st := store.NewLocal(root)
	cfg := testConfig(t)
	cfg.WorkspaceBytes, cfg.WorkspaceFiles = 4<<20, 50
	cfg.Blobs = &BlobMeter{}
	e, err := New(context.Background(), cfg, fixture(t, st, false), st)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, err := e.Snapshot(context.Background()); err != nil {
		t.Fatal(err)
	}
	if blobs, bytes, refused := cfg.Blobs.Counts(); blobs == 0 || bytes == 0 || refused != 0 {
		t.Errorf("after the first snapshot the meter counts %d blobs, %d bytes, %d refused", blobs, bytes, refused)
	}
	if err := os.WriteFile(filepath.Join(e.Dir(), "big.csv"), make([]byte, 1500<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := step(t, e, act(CopyFile, "big.csv", "big2.csv")); r.Outcome != OutcomeSuccess {
		t.Fatalf("a copy within the quota: %s %s", r.Outcome, r.Observation)
	}
	r := step(t, e, act(CopyFile, "big.csv", "big3.csv"))
	if r.Outcome != OutcomeInvalidAction || !strings.Contains(r.Observation, "over its quota (env.workspace_bytes / env.workspace_files)") {
		t.Errorf("a copy past the quota: got %s\n%s", r.Outcome, r.Observation)
	}
	// What no action can do, a process left behind could: the state is
	// over the quota, and is not kept.
	if err := os.WriteFile(filepath.Join(e.Dir(), "big3.csv"), make([]byte, 1500<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	_, blobBytes, _ := cfg.Blobs.Counts()
	before := treeBytes(root)
	_, err = e.Snapshot(context.Background())
	if !errors.Is(err, ErrSnapshotTooLarge) || !strings.Contains(err.Error(), "the state is not kept") {
		t.Errorf("snapshot over the quota: got %v", err)
	}
	if grew := treeBytes(root) - before; grew != 0 {
		t.Errorf("the refused snapshot stored %d bytes", grew)
	}
	if _, b, refused := cfg.Blobs.Counts(); refused != 1 || b != blobBytes {
		t.Errorf("meter after the refusal: %d bytes (was %d), %d refused", b, blobBytes, refused)
	}
	if s := cfg.Blobs.String(); !strings.Contains(s, "snapshots added") || !strings.Contains(s, "1 states not kept") {
		t.Errorf("closing line %q", s)
	}
}

// TestTaskOverItsQuota: an episode whose task files alone are over the
// quota does not start, and says which setting to raise.
func TestTaskOverItsQuota(t *testing.T) {
	st := store.NewLocal(t.TempDir())
	cfg := testConfig(t)
	cfg.WorkspaceFiles = 2
	_, err := New(context.Background(), cfg, fixture(t, st, false), st)
	if err == nil || !strings.Contains(err.Error(), "more than 2 files and folders, over the quota: raise env.workspace_bytes / env.workspace_files") {
		t.Errorf("got %v", err)
	}
	spec := fixture(t, st, false)
	spec.WorkspaceFiles = 100 // the task's own quota wins
	e, err := New(context.Background(), cfg, spec, st)
	if err != nil {
		t.Fatalf("with the task's own quota: %v", err)
	}
	e.Close()
}
