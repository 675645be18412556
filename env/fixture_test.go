package env

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl/internal/blobs"
	"github.com/mlerl/mlerl/internal/llm"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// fixtureScript is a tiny sectioned train.py in plain Python (no numpy,
// so a run costs one interpreter start): a threshold classifier.
const fixtureScript = `"""Threshold classifier."""
# === imports ===
import csv
# === end imports ===
# === data ===
rows = list(csv.DictReader(open("train.csv")))
X_train = [float(r["x"]) for r in rows]
y_train = [int(r["y"]) for r in rows]
test = list(csv.DictReader(open("test.csv")))
X_test = [float(r["x"]) for r in test]
test_ids = [r["id"] for r in test]
# === end data ===
# === model ===
threshold = 0.0
# === end model ===
# === training ===
pass
# === end training ===
# === evaluate ===
acc = sum((x > threshold) == bool(y) for x, y in zip(X_train, y_train)) / len(y_train)
print(f"VAL_METRIC accuracy {acc:.6f}")
with open("submission.csv", "w") as f:
    f.write("id,y\n")
    for i, x in zip(test_ids, X_test):
        f.write(f"{i},{int(x > threshold)}\n")
# === end evaluate ===
`

// fixtureGrader scores accuracy (or error rate with --lower, written into
// the file) and never crashes on a bad submission.
const fixtureGrader = `import csv, json, sys
LOWER = %v
def main():
    try:
        sub = {r["id"]: r["y"] for r in csv.DictReader(open(sys.argv[1]))}
    except Exception as e:
        print(json.dumps({"valid": False, "reason": "cannot read the submission: %%s" %% e}))
        return
    ans = {r["id"]: r["y"] for r in csv.DictReader(open(sys.argv[2]))}
    if set(sub) != set(ans):
        print(json.dumps({"valid": False, "reason": "ids do not match the test set"}))
        return
    acc = sum(sub[k] == ans[k] for k in ans) / len(ans)
    print(json.dumps({"valid": True, "score": 1 - acc if LOWER else acc}))
main()
`

// fixture puts the fixture task's trees in st and returns its spec. Test
// points x = i/20 with labels x > 0.5; the initial threshold 0.0 scores
// 0.5 on the test set, threshold 0.2 scores 0.7 and 0.5 scores 1.
func fixture(t testing.TB, st store.Store, lower bool) Spec {
	t.Helper()
	var train, test, ans bytes.Buffer
	train.WriteString("x,y\n")
	test.WriteString("id,x\n")
	ans.WriteString("id,y\n")
	for i := 0; i < 20; i++ {
		x := float64(i) / 20
		y := 0
		if x > 0.5 {
			y = 1
		}
		fmt.Fprintf(&train, "%.3f,%d\n", x+0.01, y)
		fmt.Fprintf(&test, "t%d,%.3f\n", i, x)
		fmt.Fprintf(&ans, "t%d,%d\n", i, y)
	}
	ctx := context.Background()
	ws, err := blobs.PutTree(ctx, st, blobs.Files{
		"train.py":       {Data: []byte(fixtureScript), Mode: 0o644},
		"train.csv":      {Data: train.Bytes(), Mode: 0o644},
		"test.csv":       {Data: test.Bytes(), Mode: 0o644},
		"data/README.md": {Data: []byte("the data\n"), Mode: 0o644},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	lowerPy := "False"
	if lower {
		lowerPy = "True"
	}
	priv, err := blobs.PutTree(ctx, st, blobs.Files{
		"grade.py":    {Data: []byte(fmt.Sprintf(fixtureGrader, lowerPy)), Mode: 0o644},
		"answers.csv": {Data: ans.Bytes(), Mode: 0o644},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := Spec{TaskID: "fixture-threshold", Title: "Threshold", Description: "Classify x.", Modality: "tabular", TaskType: "binary-classification",
		Metric: "accuracy", Direction: schemas.HigherIsBetter, MInit: 0.5, MBest: 1.0, TimeLimit: 20 * time.Second, WorkspaceTree: ws, PrivateTree: priv}
	if lower {
		s.Metric, s.Direction, s.MInit, s.MBest = "error_rate", schemas.LowerIsBetter, 0.5, 0
	}
	return s
}

// procRunner is a minimal cold runner for these tests (the real sandbox
// is tested in internal/sandbox): it runs the source with a timeout in the
// workspace and classifies exit codes.
type procRunner struct{ python string }

func (p procRunner) Run(ctx context.Context, req sandbox.Request) (sandbox.Result, error) {
	src := req.Source
	if src == nil {
		b, err := os.ReadFile(filepath.Join(req.Dir, req.Script))
		if err != nil {
			return sandbox.Result{}, err
		}
		src = b
	}
	f, err := os.CreateTemp("", "run-*.py")
	if err != nil {
		return sandbox.Result{}, err
	}
	defer os.Remove(f.Name())
	f.Write(src)
	f.Close()
	cctx, cancel := context.WithTimeout(ctx, req.Limits.Timeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, p.python, f.Name())
	if req.Marks != nil {
		// The sandbox's marker function, without its guard.
		marks, _ := json.Marshal(req.Marks)
		cmd = exec.CommandContext(cctx, p.python, "-c", `import builtins, json, os, sys
marks = json.loads(sys.argv[2])
builtins.__mlerl_mark__ = lambda k: os.write(1, marks[k].encode())
exec(compile(open(sys.argv[1]).read(), sys.argv[1], "exec"), {"__name__": "__main__"})`, f.Name(), string(marks))
	}
	cmd.Dir = req.Dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err = cmd.Run()
	r := sandbox.Result{Stdout: out.String(), Stderr: errb.String(), Duration: time.Since(start), Outcome: sandbox.Success}
	var ee *exec.ExitError
	switch {
	case cctx.Err() == context.DeadlineExceeded:
		r.Outcome = sandbox.Timeout
	case errors.As(err, &ee):
		r.Outcome, r.ExitCode = sandbox.ScriptError, ee.ExitCode()
	case err != nil:
		return r, err
	}
	return r, nil
}

func (procRunner) Close() error { return nil }

// lineInstrumenter is a stand-in for the static instrumenter: it prints a
// nonce-tagged marker after each section's end line.
type lineInstrumenter struct{}

func (lineInstrumenter) Instrument(_ context.Context, _ string, src []byte, nonce string) ([]byte, error) {
	var out []string
	for _, l := range strings.Split(string(src), "\n") {
		out = append(out, l)
		if name, ok := strings.CutPrefix(l, "# === end "); ok {
			out = append(out, fmt.Sprintf("print('@@MARK %s %s', flush=True)", nonce, strings.TrimSuffix(name, " ===")))
		}
	}
	return []byte(strings.Join(out, "\n")), nil
}

func (lineInstrumenter) ParseMarkers(stdout, nonce string) ([]string, string) {
	var markers, clean []string
	for _, l := range strings.SplitAfter(stdout, "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSuffix(l, "\n"), "@@MARK "+nonce+" "); ok {
			markers = append(markers, name)
			continue
		}
		clean = append(clean, l)
	}
	return markers, strings.Join(clean, "")
}

// mapEditor carries out instructions from a fixed table of replacements.
type mapEditor map[string][2]string

func (m mapEditor) Edit(_ context.Context, script, ins string) (string, llm.Usage, error) {
	r, ok := m[ins]
	if !ok {
		return "", llm.Usage{}, fmt.Errorf("%w: unknown instruction", ErrInvalidEdit)
	}
	if r[0] == "" {
		return "", llm.Usage{}, errors.New("editor backend down")
	}
	return strings.Replace(script, r[0], r[1], 1), llm.Usage{PromptTokens: 10, CompletionTokens: 5}, nil
}

func testPython(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	return p
}

func testConfig(t testing.TB) Config {
	cfg := DefaultConfig()
	cfg.Python = testPython(t)
	cfg.Runner = procRunner{cfg.Python}
	cfg.Instrumenter = lineInstrumenter{}
	cfg.WorkDir = t.TempDir()
	cfg.Editor = mapEditor{
		"raise the threshold": {"threshold = 0.0", "threshold = 0.5"},
		"lower the threshold": {"threshold = 0.5", "threshold = 0.2"},
		"break the model":     {"threshold = 0.0", "threshold = undefined_name"},
		"editor down":         {"", ""},
	}
	return cfg
}

func newTestEnv(t testing.TB, lower bool) (*Env, store.Store) {
	t.Helper()
	st := store.NewLocal(t.TempDir())
	spec := fixture(t, st, lower)
	e, err := New(context.Background(), testConfig(t), spec, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, st
}

func act(name string, args ...string) string {
	var kv []string
	specs := actionArgs[name]
	for i, a := range specs {
		v := args[i]
		if a.kind == argLine {
			kv = append(kv, fmt.Sprintf("%q: %s", a.name, v))
		} else {
			kv = append(kv, fmt.Sprintf("%q: %s", a.name, marshalNoEscape(v)))
		}
	}
	return "Reflection: r\nThought: t\nAction: " + name + "\nAction Input: {" + strings.Join(kv, ", ") + "}"
}

func step(t testing.TB, e *Env, text string) StepResult {
	t.Helper()
	r, err := e.Step(context.Background(), text)
	if err != nil {
		t.Fatalf("Step(%q): %v", text, err)
	}
	return r
}

func newLocalStore(t testing.TB) store.Store { return store.NewLocal(t.TempDir()) }

func (lineInstrumenter) execCacheKind() string { return "line" }
