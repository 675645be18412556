package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// guardMarks are the marker lines of the guard tests: T<k> for marker k.
var guardMarks = []string{"T0-f1a2b3\n", "T1-c4d5e6\n", "T2-a7b8c9\n"}

// guarded builds an instrumented-like source: prefix, then marker 0,
// middle, marker 1 inside a function the script may call or not, marker 2
// at the end.
func guarded(prefix, middle string) string {
	return prefix + "__mlerl_mark__(0)  # mlerl:inserted\n" +
		"def late():\n    x = 1\n    __mlerl_mark__(1)  # mlerl:inserted\n    return x\n" +
		middle + "raise SystemExit(1)\n__mlerl_mark__(2)  # mlerl:inserted\n"
}

// TestGuardHonest: a guarded run prints exactly the markers its own lines
// reach, computes what it did, and cannot import from its workspace.
func TestGuardHonest(t *testing.T) {
	src := guarded("import numpy as np\nimport json\n", "print(json.dumps(late() + int(np.int64(2))))\n")
	for rname, r := range runners(t) {
		t.Run(rname, func(t *testing.T) {
			ws, _ := workspace(t, "print('the file on disk')\n")
			res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py", Source: []byte(src), Marks: guardMarks, Limits: Limits{Timeout: 60 * time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			if want := "T0-f1a2b3\nT1-c4d5e6\n3\n"; res.Stdout != want || res.Outcome != ScriptError || res.ExitCode != 1 {
				t.Errorf("got %s %d %q want exit 1 and %q\n%s", res.Outcome, res.ExitCode, res.Stdout, want, res.Stderr)
			}
		})
	}
}

// TestGuardHonestLibraries: what honest scripts and their libraries do
// that touches frames, code objects, pickles or compiles (logging,
// warnings, tracebacks, inspect.signature, dataclasses, pandas' query,
// joblib's processes, loky pickling a function with a marker in it) runs
// under the guard as without it.
func TestGuardHonestLibraries(t *testing.T) {
	if IsolationLevel(python(t)) == IsolateUserNS {
		t.Skip("no /proc under a user namespace: loky cannot run")
	}
	prefix := `import inspect, logging, traceback, warnings, dataclasses, collections, ast
import numpy as np, pandas as pd
from joblib import Parallel, delayed
from sklearn.linear_model import LogisticRegression
logging.basicConfig(level=logging.INFO)
logging.getLogger("x").info("logged")
warnings.warn("warned")
try:
    1 / 0
except ZeroDivisionError:
    traceback.print_exc()
assert "sample_weight" in inspect.signature(LogisticRegression().fit).parameters
@dataclasses.dataclass
class Cfg:
    c: float = 1.0
P = collections.namedtuple("P", "a b")
df = pd.DataFrame({"a": [1, 2, 3]})
n = len(df.query("a > 1")) + ast.literal_eval("1")
def work(i):
    y = i * 2
    __mlerl_mark__(1)  # mlerl:inserted
    return y
print(n, Cfg().c, P(1, 2).b, Parallel(n_jobs=2)(delayed(work)(i) for i in range(3)))
`
	src := prefix + "__mlerl_mark__(0)  # mlerl:inserted\nprint(work(5))\n"
	for rname, r := range runners(t) {
		t.Run(rname, func(t *testing.T) {
			ws, _ := workspace(t, "x = 1\n")
			res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py", Source: []byte(src), Marks: guardMarks, Limits: Limits{Timeout: 120 * time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			// The workers' markers print nothing (the function travels
			// without the tokens); the process's own do.
			if want := "3 1.0 2 [0, 2, 4]\nT0-f1a2b3\nT1-c4d5e6\n10\n"; res.Outcome != Success || res.Stdout != want {
				t.Errorf("got %s %q %q want success and %q\n%s", res.Outcome, res.Reason, res.Stdout, want, res.Stderr)
			}
		})
	}
}

// guardAttacks are scripts that try to print a marker they did not reach.
// Each must print no marker line but the first (reached before the
// attack), and end killed by the guard when want says so.
var guardAttacks = []struct {
	name, prefix, middle string
	killed               string // part of the reason, "" when the attack simply fails
}{
	{"frame code constants", "import sys\n", "print(sys._getframe().f_code.co_consts)\n", "sys._getframe"},
	{"function code object", "", "print(late.__code__.co_consts)\n", "reading __code__"},
	{"generator frame", "", "g = (i for i in [1])\nprint(g.gi_frame.f_back)\n", "reading gi_frame"},
	{"traceback frame", "", "try:\n    1/0\nexcept Exception as e:\n    print(e.__traceback__.tb_frame.f_code)\n", "reading tb_frame"},
	{"format string", "", "print('{0.gi_code.co_consts}'.format(i for i in [1]))\n", "reading gi_code"},
	{"attrgetter", "import operator, traceback\n", "print([operator.attrgetter('f_code')(f) for f, _ in traceback.walk_stack(None)])\n", "reading f_code"},
	{"gc scan", "import gc\n", "print([o for o in gc.get_objects() if 'Marker' in type(o).__name__])\n", "gc.get_objects"},
	{"call the marker", "", "__mlerl_mark__(2)\n", "called from elsewhere"},
	{"call it through globals", "", "globals()['__mlerl_mark__'](2)\n", "called from elsewhere"},
	{"call it from a thread", "import threading\n", "t = threading.Thread(target=lambda: __mlerl_mark__(2))\nt.start()\nt.join()\n", "called from elsewhere"},
	{"call it from a forked child", "import os\n", "pid = os.fork()\nif pid == 0:\n    __mlerl_mark__(2)\n    os._exit(0)\nos.waitpid(pid, 0)\n", ""},
	{"eval", "", "eval('__mlerl' + '_mark__(2)')\n", "compile"},
	{"exec a code object", "", "exec(compile('print(1)', 'x', 'exec'))\n", "compile"},
	{"settrace jump", "import sys\n", "sys.settrace(lambda *a: None)\n", "sys.settrace"},
	{"own memory", "", "f = open('/proc/self/mem', 'rb')\n", "open /proc/self/mem"},
	{"ctypes write", "import ctypes\n", "ctypes.CDLL(None).write(1, b'T2-a7b8c9\\n', 10)\n", "ctypes"},
	{"pickle gadget", "import pickle\n", "pickle.loads(b\"cbuiltins\\neval\\n(S'1'\\ntR.\")\n", "unpickling builtins.eval"},
	{"import from the workspace", "", "open('evil.py', 'w').write('print(\"ran\")')\nimport evil\n", ""},
	{"import from /tmp", "import sys\n", "open('/tmp/evil2.py', 'w').write('print(\"ran\")')\nsys.path.insert(0, '/tmp')\nimport evil2\n", ""},
	{"child reads the parent's memory", "import subprocess, sys, os\n",
		"print(subprocess.run([sys.executable, '-c', 'import os\\ntry:\\n    open(\"/proc/%d/mem\" % os.getppid(), \"rb\")\\n    print(\"OPENED\")\\nexcept OSError as e:\\n    print(\"refused\")'], capture_output=True, text=True).stdout)\n", ""},
	{"own memory map", "", "print(open('/proc/self/maps').read()[:100])\n", "open /proc/self/maps"},
	{"own memory, relative", "import os\n", "os.chdir('/proc/self')\nprint(open('maps').read()[:100])\n", "open maps"},
	{"own memory, double slash", "", "print(open('//proc/self/maps').read()[:100])\n", "open //proc/self/maps"},
	// numpy reads any address a dict-backed object's __array_interface__
	// key names; the bytes of x (SECRETS!) must not come back.
	{"numpy over an address, through a Bunch", "import numpy as np\nfrom sklearn.utils import Bunch\n",
		"x = np.frombuffer(b'SECRETS!', dtype=np.uint8).copy()\nb = Bunch()\nb['__array_' + 'interface__'] = {'data': (x.__array_interface__['data'][0], True), 'shape': (8,), 'typestr': '|u1', 'version': 3}\nprint(np.asarray(b).tolist())\n", ""},
	{"numpy over an address, through an OptimizeResult", "import numpy as np\nfrom scipy.optimize import OptimizeResult\n",
		"x = np.frombuffer(b'SECRETS!', dtype=np.uint8).copy()\nb = OptimizeResult()\nb['__array_' + 'interface__'] = {'data': (x.__array_interface__['data'][0], True), 'shape': (8,), 'typestr': '|u1', 'version': 3}\nprint(np.asarray(b).tolist())\n", ""},
	{"pickled function", "import pickle\nfrom joblib.externals import cloudpickle\n", "print(cloudpickle.dumps(late))\n", ""},
	// Libraries that read their callers' frames: pandas' eval and query
	// resolve @names in the frame level= names (the runner's own frames
	// above the script's), inspect.stack hands out every frame. What they
	// find of the guard is the markers' socket names, never a token; a
	// connection to one from elsewhere than the marker stops the run.
	{"pandas reads the runner's locals", "import pandas as pd\nimport socket\n", `df = pd.DataFrame({'a': [1]})
found = []
for lvl in range(10):
    for expr in ('@marks', '@names', '@cfg', '@source', '@compiled'):
        try:
            found.append(df.eval(expr, level=lvl))
        except Exception:
            pass
print(found)
for v in found:
    for n in (v if isinstance(v, list) else []):
        s = socket.socket(socket.AF_UNIX)
        s.connect(n)
        print(s.recv(100))
`, "connecting to a marker's socket from elsewhere"},
	{"every frame's locals", "import inspect\n", "print([repr(f.frame.f_locals) for f in inspect.stack()])\n", ""},
	{"a marker's socket from another process", "import subprocess, sys, inspect\n", `names = []
for f in inspect.stack():
    names += f.frame.f_locals.get('marks') or []
code = 'import socket, sys\nfor n in sys.argv[1:]:\n    s = socket.socket(socket.AF_UNIX)\n    s.connect(bytes.fromhex(n))\n    print("got", s.recv(100))'
r = subprocess.run([sys.executable, '-c', code] + [n.hex() for n in names], capture_output=True, text=True)
print(len(names), r.stdout, r.stderr)
`, ""},
	{"exec in place", "import os, sys\n", "os.execv(sys.executable, [sys.executable, '-c', 'print(1)'])\n", "os.exec"},
}

func TestGuardAttacks(t *testing.T) {
	for rname, r := range runners(t) {
		for _, a := range guardAttacks {
			t.Run(rname+"/"+a.name, func(t *testing.T) {
				ws, _ := workspace(t, "x = 1\n")
				src := guarded(a.prefix, a.middle)
				res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py", Source: []byte(src), Marks: guardMarks, Limits: Limits{Timeout: 60 * time.Second}})
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s %q %q", res.Outcome, res.Reason, res.Stdout)
				all := res.Stdout + res.Stderr
				for _, m := range guardMarks[1:] {
					if strings.Contains(all, strings.TrimSpace(m)) || strings.Contains(all, strings.TrimSpace(m)[3:]) {
						t.Errorf("the output holds %q, a marker the script did not reach:\n%s", m, all)
					}
				}
				if !strings.HasPrefix(res.Stdout, guardMarks[0]) {
					t.Errorf("marker 0, reached, is missing: %q", res.Stdout)
				}
				if strings.Contains(all, "OPENED") || strings.Contains(all, "\nran") || strings.Contains(all, "83, 69, 67") {
					t.Errorf("the attack ran:\n%s", all)
				}
				if a.killed != "" && (res.Outcome != Killed || !strings.Contains(res.Reason, a.killed)) {
					t.Errorf("got %s %q want killed by the guard for %q\n%s", res.Outcome, res.Reason, a.killed, res.Stderr)
				}
				if a.killed == "" && res.Outcome == Success {
					t.Errorf("the attack succeeded: %s", all)
				}
			})
		}
	}
}

// TestGuardOffByDefault: without Marks, scripts import from their
// workspace and introspect as before.
func TestGuardOffByDefault(t *testing.T) {
	for rname, r := range runners(t) {
		t.Run(rname, func(t *testing.T) {
			ws, _ := workspace(t, "import helper, sys\nprint(helper.X, sys._getframe().f_code.co_name)\n")
			if err := os.WriteFile(filepath.Join(ws, "helper.py"), []byte("X = 41 + 1\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py", Limits: Limits{Timeout: 60 * time.Second}})
			if err != nil || res.Stdout != "42 <module>\n" {
				t.Errorf("got %q %v\n%s", res.Stdout, err, res.Stderr)
			}
		})
	}
}

// TestGuardLevels: the markers' sockets work at every isolation level the
// machine has (the listeners are made in the run's network namespace,
// the host's under IsolateNone), cold and warm alike.
func TestGuardLevels(t *testing.T) {
	py := python(t)
	levels := []string{IsolateNone}
	if probe(py, IsolateUserNS, false) == nil {
		levels = append(levels, IsolateUserNS)
	}
	src := guarded("import json\n", "print(json.dumps(late()))\n")
	for _, level := range levels {
		t.Run(level, func(t *testing.T) {
			h, err := newHost(py)
			if err != nil {
				t.Fatal(err)
			}
			h.isolation = level
			h.space = h.space && level != IsolateNone
			r := &coldRunner{h: h}
			defer r.Close()
			ws, _ := workspace(t, "x = 1\n")
			res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py", Source: []byte(src), Marks: guardMarks, Limits: Limits{Timeout: 60 * time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			if want := "T0-f1a2b3\nT1-c4d5e6\n1\n"; res.Stdout != want || res.Outcome != ScriptError {
				t.Errorf("got %s %q want exit 1 and %q\n%s", res.Outcome, res.Stdout, want, res.Stderr)
			}
		})
	}
}
