package env

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl/internal/catalog"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/tasks"
)

// suiteTasks loads the built-in suite, or skips.
func suiteTasks(t *testing.T) []*tasks.Task {
	t.Helper()
	ts, _, err := tasks.LoadSuite("../tasks")
	if err != nil || len(ts) == 0 {
		t.Skipf("no built-in suite in ../tasks: %v", err)
	}
	return ts
}

func ideaByID(t *testing.T, task *tasks.Task, id string) catalog.Idea {
	t.Helper()
	for _, i := range catalog.ForTask(task.Modality, task.TaskType) {
		if i.ID == id {
			return i
		}
	}
	t.Fatalf("%s: no catalog idea %s", task.ID, id)
	return catalog.Idea{}
}

// TestCreditCheckHonestScripts: the credit check refuses none of the
// scripts an honest agent of this project writes: every built-in initial
// script, and each with every catalog idea that applies to it.
func TestCreditCheckHonestScripts(t *testing.T) {
	py := instrPython(t)
	ctx := context.Background()
	n := 0
	for _, task := range suiteTasks(t) {
		src, err := os.ReadFile(filepath.Join(task.WorkspacePath(), "train.py"))
		if err != nil {
			t.Fatal(err)
		}
		if err := CreditCheck(ctx, py, src); err != nil {
			t.Errorf("%s: %v", task.ID, err)
		}
		for _, idea := range catalog.ForTask(task.Modality, task.TaskType) {
			edited, err := catalog.Apply(string(src), idea.Edit)
			if err != nil {
				continue // an idea for another model (see internal/catalog)
			}
			n++
			if err := CreditCheck(ctx, py, []byte(edited)); err != nil {
				t.Errorf("%s + %s: %v", task.ID, idea.ID, err)
			}
		}
	}
	t.Logf("%d edited scripts checked", n)
}

// TestHonestCreditUnchanged: the catalog's edits that fail on real data
// earn, run through the sandbox with their markers, the partial credit
// they earned before (the same markers: the checks add no refusal and
// move no marker), and an initial script reaches all six.
func TestHonestCreditUnchanged(t *testing.T) {
	if testing.Short() {
		t.Skip("runs scikit-learn scripts")
	}
	py := instrPython(t)
	byID := map[string]*tasks.Task{}
	for _, task := range suiteTasks(t) {
		byID[task.ID] = task
	}
	cases := []struct {
		task    string
		ideas   []string
		markers []string
		outcome sandbox.Outcome
	}{
		// Fails in training: a logistic regression cannot take the NaNs.
		{"pima-diabetes", []string{"data/standard-scaler", "model/logreg-c1"}, MarkerNames[:3], sandbox.ScriptError},
		// Fails in the data section: the rows are not square images.
		{"satellite-landcover", []string{"data/augment-shift-4"}, MarkerNames[:1], sandbox.ScriptError},
		{"glass-type", nil, MarkerNames, sandbox.Success},
	}
	for _, c := range cases {
		t.Run(c.task, func(t *testing.T) {
			task := byID[c.task]
			if task == nil {
				t.Skipf("no task %s in the suite", c.task)
			}
			dir := t.TempDir()
			files, err := tasks.ReadTree(task.WorkspacePath())
			if err != nil {
				t.Fatal(err)
			}
			for name, f := range files {
				p := filepath.Join(dir, filepath.FromSlash(name))
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.WriteFile(p, f.Data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			script := string(files["train.py"].Data)
			for _, id := range c.ideas {
				if script, err = catalog.Apply(script, ideaByID(t, task, id).Edit); err != nil {
					t.Fatal(err)
				}
			}
			nonce := NewNonce()
			inst, err := Instrument(context.Background(), py, []byte(script), nonce)
			if err != nil {
				t.Fatal(err)
			}
			res := instrRunLimits(t, dir, inst, nonce, sandbox.Limits{Timeout: 5 * time.Minute})
			markers, _ := ParseMarkers(res.Stdout, nonce)
			if res.Outcome != c.outcome || !reflect.DeepEqual(markers, c.markers) {
				t.Errorf("got %s with markers %v, want %s with %v\n%s", res.Outcome, markers, c.outcome, c.markers, res.Stderr)
			}
			if c.outcome != sandbox.Success {
				r := ComputeReward(DefaultRewardConfig(), RewardInput{Outcome: OutcomeScriptError, Executed: true, Markers: len(markers)})
				if want := -1 + 0.1*float64(len(c.markers)); math.Abs(r.Total-want) > 1e-9 {
					t.Errorf("reward %v want %v", r.Total, want)
				}
			}
		})
	}
}

// TestGuardEveryIdea (MLERL_SMOKE=1; MLERL_SMOKE_TASKS=id1,id2 picks the
// tasks, else one of each kind): every applicable catalog idea, applied to
// a task's initial script, runs instrumented under the sandbox's guard
// without the guard stopping it, so that no honest edit loses its credit
// to the guard. About 2 s per idea.
func TestGuardEveryIdea(t *testing.T) {
	if os.Getenv("MLERL_SMOKE") == "" {
		t.Skip("set MLERL_SMOKE=1 to run every catalog idea under the guard")
	}
	py := instrPython(t)
	runner, err := sandbox.NewWarm(context.Background(), py)
	if err != nil {
		t.Fatal(err)
	}
	defer runner.Close()
	want := map[string]bool{}
	for _, id := range strings.Split(os.Getenv("MLERL_SMOKE_TASKS"), ",") {
		if id != "" {
			want[id] = true
		}
	}
	kinds := map[string]bool{}
	for _, task := range suiteTasks(t) {
		kind := task.Modality + "/" + task.TaskType
		if len(want) > 0 && !want[task.ID] || len(want) == 0 && kinds[kind] {
			continue
		}
		kinds[kind] = true
		files, err := tasks.ReadTree(task.WorkspacePath())
		if err != nil {
			t.Fatal(err)
		}
		for _, idea := range catalog.ForTask(task.Modality, task.TaskType) {
			script, err := catalog.Apply(string(files["train.py"].Data), idea.Edit)
			if err != nil {
				continue
			}
			dir := t.TempDir()
			for name, f := range files {
				p := filepath.Join(dir, filepath.FromSlash(name))
				os.MkdirAll(filepath.Dir(p), 0o755)
				os.WriteFile(p, f.Data, 0o644)
			}
			nonce := NewNonce()
			inst, err := Instrument(context.Background(), py, []byte(script), nonce)
			if err != nil {
				t.Errorf("%s + %s: %v", task.ID, idea.ID, err)
				continue
			}
			res, err := runner.Run(context.Background(), sandbox.Request{Dir: dir, Script: "train.py", Source: inst, Marks: MarkLines(nonce), Limits: sandbox.Limits{Timeout: 10 * time.Minute}})
			if err != nil {
				t.Fatal(err)
			}
			markers, _ := ParseMarkers(res.Stdout, nonce)
			if res.Outcome == sandbox.Killed || strings.Contains(res.Stderr, "mlerl sandbox") {
				t.Errorf("%s + %s: %s %s\n%s", task.ID, idea.ID, res.Outcome, res.Reason, res.Stderr)
			}
			t.Logf("%s + %s: %s, %d markers, %v", task.ID, idea.ID, res.Outcome, len(markers), res.Duration.Round(time.Millisecond))
		}
	}
}

// TestCreditCheck: what the credit check refuses (every way a script
// could reach frames, code objects, strings run as code or attributes
// named at run time), and honest code it lets through.
func TestCreditCheck(t *testing.T) {
	py := instrPython(t)
	tests := []struct {
		name, script, why string // why: part of the refusal ("" allowed)
	}{
		{"frames", "import sys\nsys._getframe()\n", "line 2: _getframe"},
		{"getattr of a computed name", "import sys\ngetattr(sys, '_get' + 'frame')()\n", "getattr with a name computed"},
		{"getattr of a denied literal", "getattr(f, 'f_code')\n", "getattr with a name computed"},
		{"getattr passed around", "import functools\nfunctools.reduce(getattr, ['gi_frame'], g)\n", "getattr with a name"},
		{"setattr on a module", "import os\nsetattr(os, 'write', print)\n", "setattr on a module"},
		{"eval", "eval('1')\n", "eval"},
		{"exec", "exec('x = 1')\n", "exec"},
		{"compile", "compile('1', 'x', 'eval')\n", "compile"},
		{"__import__", "__import__('gc')\n", "__import__"},
		{"__builtins__", "b = __builtins__\n", "__builtins__"},
		{"globals as a dict", "g = globals()\nprint(g)\n", "globals() other than"},
		{"globals with a dunder key", "globals()['__mlerl_mark__'](5)\n", "globals() other than"},
		{"the marker function", "__mlerl_mark__(5)\n", "__mlerl_mark__"},
		{"vars", "vars(x)\n", "vars"},
		{"locals", "locals()\n", "locals"},
		{"code object", "f.__code__\n", "__code__"},
		{"closure", "f.__closure__[0].cell_contents\n", "cell_contents"},
		{"subclasses", "().__class__.__base__.__subclasses__()\n", "__subclasses__"},
		{"generator frame", "g.gi_frame\n", "gi_frame"},
		{"traceback frame", "e.__traceback__\n", "__traceback__"},
		{"exc_info", "import sys\nsys.exc_info()\n", "exc_info"},
		{"sys.modules", "import sys\nsys.modules['gc']\n", "modules"},
		{"sys through another module", "import warnings\nwarnings.sys\n", "sys"},
		{"settrace through threading", "import threading\nthreading.settrace(print)\n", "settrace"},
		{"inspect's frames", "import inspect\ninspect.currentframe()\n", "currentframe"},
		{"inspect star", "from inspect import *\n", "import *"},
		{"gc", "import gc\n", "import gc"},
		{"ctypes", "import ctypes\n", "import ctypes"},
		{"dis", "import dis\n", "import dis"},
		{"importlib", "import importlib\n", "import importlib"},
		{"a local module", "import helpers\n", "import helpers"},
		{"a relative import", "from . import x\n", "relative import"},
		{"cloudpickle", "from joblib.externals import cloudpickle\n", "cloudpickle"},
		{"joblib.load", "import joblib\njoblib.load('m.pkl')\n", "joblib.load"},
		{"read_pickle", "import pandas as pd\npd.read_pickle('x')\n", "read_pickle"},
		{"numpy pickles", "import numpy as np\nnp.load('x.npy', allow_pickle=True)\n", "allow_pickle"},
		{"pandas eval", "import pandas as pd\npd.eval('1 + 1')\n", "eval"},
		{"query of a computed string", "q = 'a > 1'\ndf.query(q)\n", "query() on a string computed"},
		{"format of a computed template", "t = '{0.x' + '}'\nt.format(1)\n", "str.format on a string computed"},
		{"format of a name bound twice", "t = '{0.x}'\nt = input()\nt.format(1)\n", "str.format on a string computed"},
		{"format naming a frame", "'{0.gi_frame.f_code}'.format(g)\n", "a string naming gi_frame"},
		{"format, a denied dunder after an allowed one", "'{0.__class__.__init__.__globals__}'.format(x)\n", "__globals__"},
		{"logging {-style", "import logging\nlogging.basicConfig(format='{message}', style='{')\n", "{-style"},
		{"attrgetter", "import operator\noperator.attrgetter('x')\n", "attrgetter"},
		{"type with three arguments", "A = type('A', (), {})\n", "type() with three arguments"},
		{"__getattr__ of a class", "class A:\n    def __getattr__(self, n):\n        return 1\n", "__getattr__"},
		{"array interface", "class A:\n    __array_interface__ = {}\n", "__array_interface__"},
		{"Namespace", "import argparse\nargparse.Namespace(**d)\n", "Namespace"},
		{"match on a frame", "match f:\n    case object(f_code=c):\n        pass\n", "f_code"},
		{"own memory by name", "open('/proc/self/mem', 'rb')\n", "/proc/"},
		{"utf-7", "# coding: utf-7\nx = 1\n", "coding declaration"},
		// Honest code.
		{"a sectioned script", sectionedScript, ""},
		{"a script with main", heuristicScript, ""},
		{"the built-in pattern", "final_model = globals().get('final_model', model)\nx = globals()['model']\n", ""},
		{"literal getattr", "p = getattr(model, 'predict_proba', None)\nok = hasattr(model, 'coef_')\n", ""},
		{"model names", "print(type(model).__name__, model.__class__.__name__)\n", ""},
		{"inspect.signature", "import inspect\nok = 'sample_weight' in inspect.signature(model.fit).parameters\n", ""},
		{"logging and tracebacks", "import logging, traceback\nlogging.info('x', exc_info=True)\ntry:\n    pass\nexcept Exception:\n    traceback.print_exc()\n", ""},
		{"literal format and query", "print('{:.4f}'.format(x))\ndf.query('a > 1')\n", ""},
		{"joblib and numpy", "from joblib import Parallel, delayed\nimport numpy as np\nnp.load('x.npy')\n", ""},
		{"a class", "class M:\n    def __init__(self):\n        super().__init__()\n    def __call__(self, x):\n        return x\n", ""},
		{"main guard", "if __name__ == '__main__':\n    print(__file__)\n", ""},
		{"a named template", "MSG = 'accuracy {:.3f}'\nprint(MSG.format(0.5))\n", ""},
		{"pandas type checks", "import pandas as pd\nok = pd.api.types.is_numeric_dtype(df['a'])\n", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CreditCheck(context.Background(), py, []byte(tc.script))
			var nc *NoCreditError
			switch {
			case tc.why == "" && err != nil:
				t.Errorf("refused honest code: %v", err)
			case tc.why != "" && (!errors.As(err, &nc) || !strings.Contains(nc.Why, tc.why)):
				t.Errorf("got %v, want a refusal naming %q", err, tc.why)
			}
		})
	}
}
