package env

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/mlerl/mlerl/internal/llm"
	"github.com/mlerl/mlerl/internal/sandbox"
)

const instrNonce = "0123456789abcdef0123456789abcdef"

func instrPython(t *testing.T) string {
	t.Helper()
	py, err := sandbox.FindPython("")
	if err != nil {
		t.Skipf("no task interpreter: %v", err)
	}
	return py
}

var (
	instrRunnerOnce sync.Once
	instrRunner     sandbox.Runner
	instrRunnerErr  error
)

// instrRun runs a script (or its instrumented Source, with the marker
// lines of nonce when it is not empty) in the sandbox's warm worker,
// shared by the tests of this file.
func instrRun(t *testing.T, dir string, source []byte, nonce string) sandbox.Result {
	t.Helper()
	return instrRunLimits(t, dir, source, nonce, sandbox.Limits{Timeout: 60e9})
}

func instrRunLimits(t *testing.T, dir string, source []byte, nonce string, lim sandbox.Limits) sandbox.Result {
	t.Helper()
	py := instrPython(t)
	instrRunnerOnce.Do(func() { instrRunner, instrRunnerErr = sandbox.NewWarm(context.Background(), py) })
	if instrRunnerErr != nil {
		t.Fatal(instrRunnerErr)
	}
	req := sandbox.Request{Dir: dir, Script: "train.py", Source: source, Limits: lim}
	if nonce != "" {
		req.Marks = MarkLines(nonce)
	}
	res, err := instrRunner.Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// stripInserted removes marker lines: what is left must be the original.
func stripInserted(s string) string {
	var b strings.Builder
	for _, l := range instrLines(s) {
		if !strings.HasSuffix(strings.TrimRight(l, "\r\n"), insertedMark) {
			b.WriteString(l)
		}
	}
	return b.String()
}

var markerLineRe = regexp.MustCompile(`(?m)^([ \t]*)__mlerl_mark__\((\d)\)  # mlerl:inserted$`)

// insertedAfter maps each marker to the original-file line it follows.
func insertedAfter(t *testing.T, inst string) map[string]int {
	t.Helper()
	out := map[string]int{}
	orig := 0
	for _, l := range instrLines(inst) {
		if m := markerLineRe.FindStringSubmatch(strings.TrimRight(l, "\r\n")); m != nil {
			out[MarkerNames[m[2][0]-'0']] = orig
			continue
		}
		orig++
	}
	return out
}

const sectionedScript = `#!/usr/bin/env python3
"""A sectioned script like the built-in tasks'."""
# === imports ===
import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression
# === end imports ===

# === data ===
train = pd.read_csv("train.csv")
test = pd.read_csv("test.csv")
X_train, y_train = train[["a", "b"]].values, train["y"].values
X_test, test_ids = test[["a", "b"]].values, test["id"]
print("loaded", len(train), end="")
# === end data ===

# === model ===
model = LogisticRegression(C=1.0)
# === end model ===

# === training ===
model.fit(X_train, y_train)
# === end training ===

# === evaluate ===
pred_train = model.predict(X_train)
print("VAL_METRIC accuracy %.6f" % np.mean(pred_train == y_train))
pred_test = model.predict(X_test)
pd.DataFrame({"id": test_ids, "y": pred_test}).to_csv("submission.csv", index=False)
# === end evaluate ===
`

const heuristicScript = `import sys
import pandas as pd
from sklearn.ensemble import RandomForestClassifier


def main():
    train = pd.read_csv("train.csv")
    test = pd.read_csv("test.csv")
    X, y = train[["a", "b"]], train["y"]
    scaler_note = "none"
    clf = RandomForestClassifier(n_estimators=5, random_state=0)
    for seed in range(2):
        clf.set_params(random_state=seed)
        clf.fit(X, y)
    proba = clf.predict_proba(test[["a", "b"]])[:, 1]
    print("VAL_METRIC accuracy %.6f" % clf.score(X, y))
    sys.stdout.write("no newline at the end of this")
    pd.DataFrame({"id": test["id"], "y": (proba > 0.5).astype(int)}).to_csv("submission.csv", index=False)


if __name__ == "__main__":
    main()
`

// instrWorkspace writes script and a small synthetic data set.
func instrWorkspace(t *testing.T, script string) string {
	t.Helper()
	dir := t.TempDir()
	var train, test strings.Builder
	train.WriteString("a,b,y\n")
	test.WriteString("id,a,b\n")
	for i := 0; i < 60; i++ {
		a, b := float64(i%7)-3, float64(i%5)-2
		y := 0
		if a+0.5*b > 0 {
			y = 1
		}
		fmt.Fprintf(&train, "%g,%g,%d\n", a, b, y)
		fmt.Fprintf(&test, "%d,%g,%g\n", i, b, a)
	}
	for name, body := range map[string]string{"train.py": script, "train.csv": train.String(), "test.csv": test.String()} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestInstrumentPlacement(t *testing.T) {
	py := instrPython(t)
	tests := []struct {
		name   string
		script string
		want   map[string]int // marker -> original line it follows
	}{
		{name: "sections", script: sectionedScript, want: map[string]int{
			MarkerImportsDone: 7, MarkerDataLoaded: 15, MarkerModelDefined: 19, MarkerModelTrained: 23,
			MarkerPredictionsMade: 28, MarkerSubmissionWritten: 29}},
		{name: "heuristics in main", script: heuristicScript, want: map[string]int{
			MarkerImportsDone: 3, MarkerDataLoaded: 8, MarkerModelDefined: 11, MarkerModelTrained: 14,
			MarkerPredictionsMade: 15, MarkerSubmissionWritten: 18}},
		{name: "flat script", script: "import pandas as pd\nfrom sklearn.linear_model import Ridge\ndf = pd.read_csv('train.csv')\nm = Ridge()\nm.fit(df[['a']], df['y'])\np = m.predict(df[['a']])\npd.DataFrame({'y': p}).to_csv('submission.csv')\n",
			want: map[string]int{MarkerImportsDone: 2, MarkerDataLoaded: 3, MarkerModelDefined: 4, MarkerModelTrained: 5, MarkerPredictionsMade: 6, MarkerSubmissionWritten: 7}},
		{name: "one-line if and semicolons get no marker", script: "import os\nif True: df = open('x').read()\nm = Model(); m.fit(1)\n",
			want: map[string]int{MarkerImportsDone: 1}},
		{name: "multi-line statement", script: "import pandas as pd\ndf = pd.read_csv(\n    'train.csv',\n)\nx = 1\n",
			want: map[string]int{MarkerImportsDone: 1, MarkerDataLoaded: 4}},
		{name: "no trailing newline", script: "import os\nx = 1", want: map[string]int{MarkerImportsDone: 1}},
		{name: "crlf", script: "import os\r\ndf = load('x')\r\n", want: map[string]int{MarkerImportsDone: 1, MarkerDataLoaded: 2}},
		{name: "empty", script: "", want: map[string]int{}},
		{name: "footer at a bad indent", script: "# === imports ===\nimport os\nif True:\n    x = 1\n  # === end imports ===\n    y = 2\n", want: map[string]int{MarkerImportsDone: 2}},
		{name: "section marker in a string is not a section", script: "s = '''\n# === end data ===\n'''\n", want: map[string]int{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Instrument(context.Background(), py, []byte(tc.script), instrNonce)
			if err != nil {
				t.Fatalf("Instrument: %v", err)
			}
			if got := insertedAfter(t, string(out)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("markers after lines: got %v want %v\n%s", got, tc.want, out)
			}
			want := tc.script
			if !strings.HasSuffix(want, "\n") && strings.HasSuffix(strings.TrimRight(string(out), "\n"), insertedMark) {
				want += "\n"
			}
			if got := stripInserted(string(out)); got != want {
				t.Errorf("without the markers the script changed:\ngot  %q\nwant %q", got, want)
			}
		})
	}
}

func TestInstrumentErrors(t *testing.T) {
	py := instrPython(t)
	tests := []struct{ name, script, nonce, want string }{
		{name: "syntax error", script: "def f(:\n", nonce: instrNonce, want: "line 1"},
		{name: "short nonce", script: "x = 1\n", nonce: "abc", want: "nonce"},
		{name: "nonce with symbols", script: "x = 1\n", nonce: "abcdefgh\") ; import os", want: "nonce"},
		{name: "not utf-8", script: "x = '\xff'\n", nonce: instrNonce, want: "UTF-8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Instrument(context.Background(), py, []byte(tc.script), tc.nonce)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v want an error mentioning %q", err, tc.want)
			}
		})
	}
	// The helper survives bad input.
	if _, err := Instrument(context.Background(), py, []byte("x = 1\n"), instrNonce); err != nil {
		t.Errorf("after errors: %v", err)
	}
}

// TestInstrumentSameComputation: the instrumented program prints the same
// output (once the markers are removed) and writes the same submission,
// and reaches every marker in order.
func TestInstrumentSameComputation(t *testing.T) {
	py := instrPython(t)
	for _, tc := range []struct{ name, script string }{{"sections", sectionedScript}, {"heuristics", heuristicScript}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := instrWorkspace(t, tc.script)
			plain := instrRun(t, dir, nil, "")
			sub1, err := os.ReadFile(filepath.Join(dir, "submission.csv"))
			if err != nil || plain.Outcome != sandbox.Success {
				t.Fatalf("plain run: %v %s %s", err, plain.Outcome, plain.Stderr)
			}
			os.Remove(filepath.Join(dir, "submission.csv"))
			nonce := NewNonce()
			inst, err := Instrument(context.Background(), py, []byte(tc.script), nonce)
			if err != nil {
				t.Fatal(err)
			}
			res := instrRun(t, dir, inst, nonce)
			sub2, err := os.ReadFile(filepath.Join(dir, "submission.csv"))
			if err != nil || res.Outcome != sandbox.Success {
				t.Fatalf("instrumented run: %v %s %s", err, res.Outcome, res.Stderr)
			}
			markers, clean := ParseMarkers(res.Stdout, nonce)
			if !reflect.DeepEqual(markers, MarkerNames) {
				t.Errorf("markers: got %v want %v", markers, MarkerNames)
			}
			if clean != plain.Stdout {
				t.Errorf("stdout without markers:\ngot  %q\nwant %q", clean, plain.Stdout)
			}
			if string(sub1) != string(sub2) {
				t.Errorf("submissions differ")
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "train.py")); string(b) != tc.script {
				t.Errorf("the workspace script changed")
			}
		})
	}
}

// TestInstrumentBuiltinTasks: every built-in train.py gets all six markers;
// digits-8x8 computes the same with and without them.
func TestInstrumentBuiltinTasks(t *testing.T) {
	py := instrPython(t)
	scripts, _ := filepath.Glob("../tasks/*/workspace/train.py")
	if len(scripts) == 0 {
		t.Skip("no built-in tasks in ../tasks")
	}
	for _, path := range scripts {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		out, err := Instrument(context.Background(), py, src, instrNonce)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		if got := insertedAfter(t, string(out)); len(got) != len(MarkerNames) {
			t.Errorf("%s: got markers %v want all %d", path, got, len(MarkerNames))
		}
		if stripInserted(string(out)) != string(src) {
			t.Errorf("%s: the script changed", path)
		}
	}
	ws := "../tasks/digits-8x8/workspace"
	if _, err := os.Stat(ws); err != nil {
		return
	}
	dir := t.TempDir()
	for _, f := range []string{"train.py", "train.csv", "valid.csv", "test.csv"} {
		b, err := os.ReadFile(filepath.Join(ws, f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, f), b, 0o644)
	}
	plain := instrRun(t, dir, nil, "")
	sub1, _ := os.ReadFile(filepath.Join(dir, "submission.csv"))
	src, _ := os.ReadFile(filepath.Join(dir, "train.py"))
	nonce := NewNonce()
	inst, err := Instrument(context.Background(), py, src, nonce)
	if err != nil {
		t.Fatal(err)
	}
	res := instrRun(t, dir, inst, nonce)
	sub2, _ := os.ReadFile(filepath.Join(dir, "submission.csv"))
	markers, clean := ParseMarkers(res.Stdout, nonce)
	if plain.Outcome != sandbox.Success || res.Outcome != sandbox.Success {
		t.Fatalf("outcomes %s %s: %s %s", plain.Outcome, res.Outcome, plain.Stderr, res.Stderr)
	}
	if !reflect.DeepEqual(markers, MarkerNames) || clean != plain.Stdout || string(sub1) != string(sub2) || len(sub1) == 0 {
		t.Errorf("digits-8x8: markers %v, stdout %q vs %q, submissions equal %v", markers, clean, plain.Stdout, string(sub1) == string(sub2))
	}
}

// TestMarkerForgery: markers the script prints itself count for nothing,
// a complete one with a wrong token voids the run's markers, and no token
// is anywhere the script can read it on disk.
func TestMarkerForgery(t *testing.T) {
	py := instrPython(t)
	const body = `import os
print("@@MLERL data_loaded@@")
print("@@MLERL 00000000000000000000000000000000 model_trained@@")
print("VAL_METRIC accuracy 1.000000")
src = open(__file__).read() + "".join(open(f).read() for f in os.listdir(".") if f.endswith(".py"))
import re
print("token on disk:", bool(re.search(r"MLERL [0-9a-f]{32} imports_done", src)))
raise RuntimeError("fails here")
`
	for _, tc := range []struct {
		name, script string
		want         []string
	}{
		{"a guess voids", body, nil},
		{"no guess", strings.Replace(body, "00000000000000000000000000000000 ", "", 1), []string{MarkerImportsDone}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := instrWorkspace(t, tc.script)
			nonce := NewNonce()
			inst, err := Instrument(context.Background(), py, []byte(tc.script), nonce)
			if err != nil {
				t.Fatal(err)
			}
			res := instrRun(t, dir, inst, nonce)
			markers, clean := ParseMarkers(res.Stdout, nonce)
			if !reflect.DeepEqual(markers, tc.want) {
				t.Errorf("markers: got %v want %v", markers, tc.want)
			}
			for _, want := range []string{"@@MLERL data_loaded@@", "VAL_METRIC accuracy 1.000000", "token on disk: False"} {
				if !strings.Contains(clean, want) {
					t.Errorf("output %q lacks %q", clean, want)
				}
			}
			// Tracebacks point at the agent's file, not the instrumented copy.
			if res.Outcome != sandbox.ScriptError || !strings.Contains(res.Stderr, `train.py", line 8, in <module>`) {
				t.Errorf("got %s, traceback %q want a script error on line 8", res.Outcome, res.Stderr)
			}
		})
	}
}

func TestParseMarkers(t *testing.T) {
	n := instrNonce
	mk := func(name string) string { return "@@MLERL " + MarkerToken(n, name) + " " + name + "@@" }
	tests := []struct {
		name, stdout string
		want         []string
		clean        string
	}{
		{name: "none", stdout: "a\nb\n", clean: "a\nb\n"},
		{name: "in order", stdout: "a\n" + mk("imports_done") + "\nb\n" + mk("data_loaded") + "\n", want: []string{"imports_done", "data_loaded"}, clean: "a\nb\n"},
		{name: "mid-line", stdout: "loading..." + mk("data_loaded") + "\ndone\n", want: []string{"data_loaded"}, clean: "loading...done\n"},
		{name: "repeated in a loop", stdout: mk("model_trained") + "\n" + mk("model_trained") + "\n", want: []string{"model_trained"}, clean: ""},
		{name: "no token", stdout: "@@MLERL data_loaded@@\n" + mk("imports_done") + "\n", want: []string{"imports_done"}, clean: "@@MLERL data_loaded@@\n"},
		{name: "the nonce is not a token", stdout: "@@MLERL " + n + " data_loaded@@\n", clean: "@@MLERL " + n + " data_loaded@@\n"},
		{name: "a guessed token voids the run", stdout: mk("imports_done") + "\n@@MLERL ffffffffffffffffffffffffffffffff data_loaded@@\n", clean: "@@MLERL ffffffffffffffffffffffffffffffff data_loaded@@\n"},
		{name: "another marker's token voids the run", stdout: mk("imports_done") + "\n@@MLERL " + MarkerToken(n, "imports_done") + " data_loaded@@\n", clean: "@@MLERL " + MarkerToken(n, "imports_done") + " data_loaded@@\n"},
		{name: "unknown name", stdout: "@@MLERL " + MarkerToken(n, "reward_max") + " reward_max@@\n", clean: "@@MLERL " + MarkerToken(n, "reward_max") + " reward_max@@\n"},
		{name: "cut at the end", stdout: "x\n" + mk("model_trained")[:30], clean: "x\n" + mk("model_trained")[:30]},
		{name: "at the end without newline", stdout: mk("submission_written"), want: []string{"submission_written"}, clean: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, clean := ParseMarkers(tc.stdout, n)
			if !reflect.DeepEqual(got, tc.want) || clean != tc.clean {
				t.Errorf("got %v %q want %v %q", got, clean, tc.want, tc.clean)
			}
		})
	}
	if got, clean := ParseMarkers("@@MLERL  data_loaded@@\n", ""); got != nil || clean != "@@MLERL  data_loaded@@\n" {
		t.Errorf("empty nonce: got %v %q", got, clean)
	}
	if a, b := MarkerToken(n, "imports_done"), MarkerToken(NewNonce(), "imports_done"); a == b || len(a) != 32 || strings.Contains(a, n[:8]) {
		t.Errorf("tokens %s and %s of two nonces", a, b)
	}
}

func TestNewNonce(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		n := NewNonce()
		if !nonceRe.MatchString(n) || len(n) != 32 || seen[n] {
			t.Fatalf("nonce %q (repeat %v)", n, seen[n])
		}
		seen[n] = true
	}
}

func TestCheckInserted(t *testing.T) {
	orig := "import os\nx = 1\nif x:\n    y = 2\n"
	mk := func(indent, name string) string { return markerLine(indent, name) + "\n" }
	tests := []struct {
		name, got, want, err string
	}{
		{name: "inserted prints", got: "import os\nprint(\"@@MLERL " + instrNonce + " imports_done@@\")\nx = 1\nif x:\n    y = 2\n    print('@@MLERL " + instrNonce + " data_loaded@@', flush=True)\n",
			want: "import os\n" + mk("", "imports_done") + "x = 1\nif x:\n    y = 2\n" + mk("    ", "data_loaded")},
		{name: "unchanged", got: orig, want: orig},
		{name: "no final newline", got: strings.TrimSuffix(orig, "\n"), want: orig},
		{name: "changed line", got: "import os\nx = 2\nif x:\n    y = 2\n", err: `line 2 is "x = 2"`},
		{name: "extra code", got: "import os\nimport shutil\nx = 1\nif x:\n    y = 2\n", err: `line 2 is "import shutil"`},
		{name: "dropped lines", got: "import os\nx = 1\n", err: "dropped"},
		{name: "wrong nonce", got: "import os\nprint(\"@@MLERL ffffffffffffffff imports_done@@\")\nx = 1\nif x:\n    y = 2\n", err: "nonce"},
		{name: "unknown marker", got: "import os\nprint(\"@@MLERL " + instrNonce + " reward@@\")\nx = 1\nif x:\n    y = 2\n", err: "unknown marker"},
		{name: "print with more code", got: "import os\nprint(\"@@MLERL " + instrNonce + " imports_done@@\"); os.system('x')\nx = 1\nif x:\n    y = 2\n", err: "line 2"},
		{name: "appended line", got: orig + "os.remove('submission.csv')\n", err: "not a marker print"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := CheckInserted([]byte(orig), []byte(tc.got), instrNonce)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("got %v want an error mentioning %q", err, tc.err)
				}
				return
			}
			if err != nil || string(out) != tc.want {
				t.Errorf("got %q, %v want %q", out, err, tc.want)
			}
		})
	}
}

// instrChatServer answers every chat-completions request with answer.
func instrChatServer(t *testing.T, answer func(prompt string) string) *llm.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		var req struct {
			Messages []llm.Message `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{
			"choices": []map[string]any{{"message": map[string]string{"role": "assistant", "content": answer(req.Messages[len(req.Messages)-1].Content)}, "finish_reason": "stop"}},
			"usage":   map[string]int{"prompt_tokens": 10, "completion_tokens": 20},
		})
	}))
	t.Cleanup(srv.Close)
	c, err := llm.New(llm.Config{BaseURL: srv.URL + "/v1", Model: "test", MaxRetries: 0})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestLLMInstrumenter(t *testing.T) {
	py := instrPython(t)
	script := "import os\nx = 1\nprint(x)\n"
	nonceRe := regexp.MustCompile(`Nonce: (\w+)`)
	good := func(p string) string {
		n := nonceRe.FindStringSubmatch(p)[1]
		return "Here it is:\n```python\nimport os\nprint(\"@@MLERL " + n + " imports_done@@\")\nx = 1\nprint(x)\n```\n"
	}
	tampered := func(p string) string {
		n := nonceRe.FindStringSubmatch(p)[1]
		return "```python\nimport os\nprint(\"@@MLERL " + n + " imports_done@@\")\nx = 2\nprint(x)\n```\n"
	}
	broken := func(p string) string {
		n := nonceRe.FindStringSubmatch(p)[1]
		return "```python\nimport os\nx = 1\n    print(\"@@MLERL " + n + " imports_done@@\")\nprint(x)\n```\n"
	}
	tests := []struct {
		name     string
		answer   func(string) string
		fallback bool
		markers  []string
		err      string
	}{
		{name: "accepted", answer: good, markers: []string{MarkerImportsDone}},
		{name: "changed line rejected", answer: tampered, err: `line 3 is "x = 2"`},
		{name: "changed line, static fallback", answer: tampered, fallback: true, markers: []string{MarkerImportsDone}},
		{name: "does not compile", answer: broken, err: "does not compile"},
		{name: "no code block", answer: func(string) string { return "I cannot do that." }, err: "no code block"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			li := LLMInstrumenter{Client: instrChatServer(t, tc.answer), Fallback: tc.fallback}
			nonce := NewNonce()
			out, err := li.Instrument(context.Background(), py, []byte(script), nonce)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v want an error mentioning %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if stripInserted(string(out)) != script {
				t.Errorf("script changed: %q", out)
			}
			dir := instrWorkspace(t, script)
			res := instrRun(t, dir, out, nonce)
			markers, clean := ParseMarkers(res.Stdout, nonce)
			if !reflect.DeepEqual(markers, tc.markers) || clean != "1\n" {
				t.Errorf("got markers %v output %q want %v %q", markers, clean, tc.markers, "1\n")
			}
		})
	}
}

// TestMarkersSurviveTruncation: markers reached while the script floods
// its output are still found in the truncated output.
func TestMarkersSurviveTruncation(t *testing.T) {
	py := instrPython(t)
	script := "import pandas as pd\nfor i in range(3000):\n    print('epoch', i, 'x' * 500)\ndf = pd.read_csv('train.csv')\nfor i in range(3000):\n    print('epoch', i, 'y' * 500)\nprint('VAL_METRIC accuracy 0.5')\n"
	dir := instrWorkspace(t, script)
	nonce := NewNonce()
	inst, err := Instrument(context.Background(), py, []byte(script), nonce)
	if err != nil {
		t.Fatal(err)
	}
	res := instrRunLimits(t, dir, inst, nonce, sandbox.Limits{Timeout: 60e9, MaxOutputBytes: 8192, KillOutputBytes: 64 << 20})
	markers, clean := ParseMarkers(res.Stdout, nonce)
	if !res.Truncated || !reflect.DeepEqual(markers, []string{MarkerImportsDone, MarkerDataLoaded}) || !strings.HasSuffix(clean, "VAL_METRIC accuracy 0.5\n") {
		t.Errorf("got truncated=%v markers %v, output ending %q", res.Truncated, markers, clean[max(0, len(clean)-100):])
	}
}

// FuzzParseMarkers: a marker written anywhere into output that does not
// carry a marker line is found, and removing it gives back exactly the
// output.
func FuzzParseMarkers(f *testing.F) {
	f.Add("hello\nworld\n", uint(3), uint8(1))
	f.Add("", uint(0), uint8(0))
	f.Add("@@MLERL x data_loaded@@\n@@MLERL", uint(7), uint8(5))
	f.Add("no newline", uint(100), uint8(2))
	f.Fuzz(func(t *testing.T, text string, pos uint, which uint8) {
		if strings.Contains(text, "@@MLERL ") {
			return
		}
		name := MarkerNames[int(which)%len(MarkerNames)]
		p := int(pos % uint(len(text)+1))
		out := text[:p] + MarkLines(instrNonce)[int(which)%len(MarkerNames)] + text[p:]
		markers, clean := ParseMarkers(out, instrNonce)
		if !reflect.DeepEqual(markers, []string{name}) || clean != text {
			t.Errorf("ParseMarkers(%q): got %v %q want [%s] %q", out, markers, clean, name, text)
		}
		if m, c := ParseMarkers(text, instrNonce); m != nil || c != text {
			t.Errorf("ParseMarkers(%q) without markers: got %v %q", text, m, c)
		}
	})
}
