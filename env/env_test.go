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

	"github.com/mlerl/mlerl/internal/llm"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

func TestNonRunningActions(t *testing.T) {
	e, _ := newTestEnv(t, false)
	tests := []struct {
		name     string
		text     string
		contains []string
	}{
		{"list root", act(ListFiles, "."), []string{"data/\n", "test.csv\n", "train.csv\n", "train.py\n"}},
		{"list subfolder", act(ListFiles, "data"), []string{"README.md"}},
		{"understand csv", act(UnderstandFile, "train.csv", "the columns"), []string{"CSV with 2 columns and 20 data rows", "Columns: x, y"}},
		{"understand script", act(UnderstandFile, "train.py", "the model"), []string{"train.py:", "lines.", "   1  \"\"\"Threshold classifier.\"\"\""}},
		{"inspect", act(InspectScriptLines, "train.py", "13", "15"), []string{"(the file ends at line 26)", "# === model ===\nthreshold = 0.0\n# === end model ===\n"}},
		{"inspect past the end is clipped", act(InspectScriptLines, "train.py", "25", "60"), []string{"# === end evaluate ===\n"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := step(t, e, tc.text)
			if r.Outcome != OutcomeSuccess || r.Reward.Total != 0 || r.Action == nil {
				t.Fatalf("got outcome %s reward %v (%s), want success and 0", r.Outcome, r.Reward.Total, r.Detail)
			}
			for _, c := range tc.contains {
				if !strings.Contains(r.Observation, c) {
					t.Errorf("observation lacks %q:\n%s", c, r.Observation)
				}
			}
		})
	}
	if e.Steps() != len(tests) || len(e.History()) != len(tests) {
		t.Errorf("got %d steps and %d history entries, want %d", e.Steps(), len(e.History()), len(tests))
	}
}

func readWS(t *testing.T, e *Env, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.Dir(), name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestEditsAndUndo(t *testing.T) {
	e, _ := newTestEnv(t, false)
	// Edit Script Segment replaces line 14 (threshold = 0.0).
	r := step(t, e, act(EditScriptSegment, "train.py", "14", "14", "threshold = 0.25\nthreshold += 0.25"))
	if r.Outcome != OutcomeSuccess || !strings.Contains(r.Observation, "-threshold = 0.0\n+threshold = 0.25\n+threshold += 0.25\n") {
		t.Fatalf("segment edit: got %s\n%s", r.Outcome, r.Observation)
	}
	if got := readWS(t, e, "train.py"); !strings.Contains(got, "# === model ===\nthreshold = 0.25\nthreshold += 0.25\n# === end model ===") {
		t.Fatalf("segment edit: file is\n%s", got)
	}
	// Insertion (end = start - 1) at the end of the file.
	r = step(t, e, act(EditScriptSegment, "train.py", "28", "27", "print('bye')"))
	if r.Outcome != OutcomeSuccess || !strings.HasSuffix(readWS(t, e, "train.py"), "# === end evaluate ===\nprint('bye')\n") {
		t.Fatalf("append: got %s %s", r.Outcome, r.Detail)
	}
	// Edit Script (AI) into a new file.
	r = step(t, e, act(EditScriptAI, "train.py", "raise the threshold", "train2.py"))
	if r.Outcome != OutcomeSuccess || r.Usage.PromptTokens != 10 {
		t.Fatalf("ai edit: got %s %s usage %+v", r.Outcome, r.Detail, r.Usage)
	}
	if !strings.HasPrefix(r.Observation, "The edited file is saved to train2.py.") || !strings.Contains(r.Observation, "+++ train2.py") {
		t.Fatalf("ai edit observation:\n%s", r.Observation)
	}
	// Invalid edit and editor failure.
	if r = step(t, e, act(EditScriptAI, "train.py", "make it great", "train.py")); r.Outcome != OutcomeInvalidEdit || r.Reward.Total != -1 {
		t.Fatalf("unknown instruction: got %s reward %v", r.Outcome, r.Reward.Total)
	}
	if r = step(t, e, act(EditScriptAI, "train.py", "editor down", "train.py")); r.Outcome != OutcomeEditorError || r.Reward.Total != 0 {
		t.Fatalf("editor failure: got %s reward %v", r.Outcome, r.Reward.Total)
	}
	// Undo, twice, restores the original; a third undo has nothing left.
	step(t, e, act(UndoEditScript, "train.py"))
	if r = step(t, e, act(UndoEditScript, "train.py")); r.Outcome != OutcomeSuccess {
		t.Fatalf("undo: got %s %s", r.Outcome, r.Detail)
	}
	if got := readWS(t, e, "train.py"); got != fixtureScript {
		t.Fatalf("after two undos train.py is\n%s", got)
	}
	if r = step(t, e, act(UndoEditScript, "train.py")); r.Outcome != OutcomeInvalidAction || r.Reward.Total != -1 {
		t.Fatalf("undo with nothing to undo: got %s", r.Outcome)
	}
	// Undo of a file created by an edit removes it.
	if r = step(t, e, act(UndoEditScript, "train2.py")); r.Outcome != OutcomeSuccess {
		t.Fatalf("undo new file: got %s %s", r.Outcome, r.Detail)
	}
	if _, err := os.Stat(filepath.Join(e.Dir(), "train2.py")); !os.IsNotExist(err) {
		t.Fatalf("train2.py still exists after undo: %v", err)
	}
	// Copy File, and undo of the copy.
	if r = step(t, e, act(CopyFile, "train.py", "sub/copy.py")); r.Outcome != OutcomeSuccess || readWS(t, e, "sub/copy.py") != fixtureScript {
		t.Fatalf("copy: got %s %s", r.Outcome, r.Detail)
	}
}

func TestRefusals(t *testing.T) {
	st := newLocalStore(t)
	cfg := testConfig(t)
	cfg.MaxSteps = 100
	e, err := New(context.Background(), cfg, fixture(t, st, false), st)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	outside := filepath.Join(filepath.Dir(e.Dir()), "outside.txt")
	if err := os.WriteFile(outside, []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(e.Dir(), "link.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(e.Dir()), filepath.Join(e.Dir(), "up")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, text, detail string
	}{
		{"parent path", act(UnderstandFile, "../outside.txt", "x"), "outside the workspace"},
		{"parent path in the middle", act(InspectScriptLines, "data/../../outside.txt", "1", "1"), "outside the workspace"},
		{"absolute path", act(InspectScriptLines, outside, "1", "1"), "absolute path"},
		{"absolute path to the answers", act(CopyFile, "/etc/passwd", "p.txt"), "absolute path"},
		{"home path", act(ListFiles, "~"), "absolute path"},
		{"list the parent", act(ListFiles, ".."), "outside the workspace"},
		{"symlinked file", act(UnderstandFile, "link.txt", "x"), "symlink"},
		{"symlinked folder", act(UnderstandFile, "up/outside.txt", "x"), "symlink"},
		{"copy onto a symlink", act(CopyFile, "train.py", "link.txt"), "symlink"},
		{"edit through a symlink", act(EditScriptAI, "train.py", "raise the threshold", "up/evil.py"), "symlink"},
		{"missing file", act(InspectScriptLines, "nope.py", "1", "2"), "does not exist"},
		{"folder as file", act(UnderstandFile, "data", "x"), "not a regular file"},
		{"file as folder", act(ListFiles, "train.py"), "not a folder"},
		{"too many lines", act(InspectScriptLines, "train.py", "1", "101"), "at most 100 lines"},
		{"start past the end", act(InspectScriptLines, "train.py", "40", "41"), "past its end"},
		{"segment past the end", act(EditScriptSegment, "train.py", "20", "40", "x"), "past its end"},
		{"execute a non-script", act(ExecuteScript, "train.csv"), "not a Python script"},
		{"execute a missing script", act(ExecuteScript, "run.py"), "does not exist"},
		{"copy onto itself", act(CopyFile, "train.py", "./train.py"), "same file"},
		{"undo without edits", act(UndoEditScript, "train.py"), "no edit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := step(t, e, tc.text)
			if r.Outcome != OutcomeInvalidAction || r.Reward.Total != -1 {
				t.Fatalf("got outcome %s reward %v (%s), want invalid_action and -1", r.Outcome, r.Reward.Total, r.Detail)
			}
			if !strings.Contains(r.Detail, tc.detail) || !strings.Contains(r.Observation, tc.detail) {
				t.Fatalf("got detail %q, want it to mention %q", r.Detail, tc.detail)
			}
		})
	}
	if got, _ := os.ReadFile(outside); string(got) != "secret\n" {
		t.Fatalf("the file outside the workspace changed: %q", got)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(e.Dir()), "evil.py")); !os.IsNotExist(err) {
		t.Fatal("an edit wrote through a symlink")
	}
}

func TestFormatErrorStep(t *testing.T) {
	e, _ := newTestEnv(t, false)
	r := step(t, e, "Action: Execute Script")
	if r.Outcome != OutcomeFormatError || r.FormatError == nil || r.FormatError.Kind != MissingField || r.Action != nil || r.Reward.Total != -1 {
		t.Fatalf("got %+v", r)
	}
	if !strings.Contains(r.Observation, "could not be parsed") {
		t.Fatalf("observation: %s", r.Observation)
	}
}

func TestExecuteAndReward(t *testing.T) {
	for _, lower := range []bool{false, true} {
		name := "higher"
		if lower {
			name = "lower"
		}
		t.Run(name, func(t *testing.T) {
			e, _ := newTestEnv(t, lower)
			score := func(acc float64) float64 {
				if lower {
					return 1 - acc
				}
				return acc
			}
			// The initial script: graded, no edit so no improvement term.
			r := step(t, e, act(ExecuteScript, "train.py"))
			if r.Outcome != OutcomeSuccess || r.MetricAfter == nil || *r.MetricAfter != score(0.5) {
				t.Fatalf("initial run: got %s %v (%s)\n%s", r.Outcome, r.MetricAfter, r.Detail, r.Observation)
			}
			if r.Reward.Total != 0 || r.ValMetric == nil || r.ExecDuration <= 0 {
				t.Fatalf("initial run: reward %v val %v exec %v", r.Reward.Total, r.ValMetric, r.ExecDuration)
			}
			if want := []string{"imports", "data", "model", "training", "evaluate"}; !reflect.DeepEqual(r.Markers, want) {
				t.Fatalf("markers: got %v want %v", r.Markers, want)
			}
			if strings.Contains(r.Observation, "@@MARK") || !strings.Contains(r.Observation, "VAL_METRIC accuracy 0.") {
				t.Fatalf("observation shows markers or lacks the metric line:\n%s", r.Observation)
			}
			// Raise the threshold: 0.5 -> 1.0, the full gap: improvement 1.
			step(t, e, act(EditScriptAI, "train.py", "raise the threshold", "train.py"))
			r = step(t, e, act(ExecuteScript, "train.py"))
			if r.Outcome != OutcomeSuccess || *r.MetricAfter != score(1) || r.MetricBefore != score(0.5) {
				t.Fatalf("after edit: got %s before %v after %v", r.Outcome, r.MetricBefore, r.MetricAfter)
			}
			if v, _ := r.Reward.Term(TermImprovement); math.Abs(v-1) > 1e-9 {
				t.Fatalf("improvement: got %v want 1 (%+v)", v, r.Reward)
			}
			// Lower it to 0.2: 1.0 -> 0.7, a regression of 0.6 of the gap.
			step(t, e, act(EditScriptAI, "train.py", "lower the threshold", "train.py"))
			r = step(t, e, act(ExecuteScript, "train.py"))
			if math.Abs(r.Reward.Total-(-0.6)) > 1e-9 || *r.MetricAfter != score(0.7) {
				t.Fatalf("regression: got reward %v metric %v", r.Reward.Total, *r.MetricAfter)
			}
			if best, ok := e.Best(); !ok || best != score(1) || e.Current() != score(0.7) {
				t.Fatalf("best %v current %v, want %v and %v", best, e.Current(), score(1), score(0.7))
			}
			// Re-running unchanged code earns nothing.
			if r = step(t, e, act(ExecuteScript, "train.py")); r.Reward.Total != 0 || r.Outcome != OutcomeSuccess {
				t.Fatalf("re-run: got %s %v", r.Outcome, r.Reward.Total)
			}
		})
	}
}

func TestExecuteFailures(t *testing.T) {
	e, _ := newTestEnv(t, false)
	write := func(name, src string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(e.Dir(), name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A crash in the model section: markers for imports and data only.
	r := step(t, e, act(EditScriptAI, "train.py", "break the model", "train.py"))
	r = step(t, e, act(ExecuteScript, "train.py"))
	if r.Outcome != OutcomeScriptError || !reflect.DeepEqual(r.Markers, []string{"imports", "data"}) || math.Abs(r.Reward.Total-(-0.8)) > 1e-9 {
		t.Fatalf("crash: got %s markers %v reward %v", r.Outcome, r.Markers, r.Reward.Total)
	}
	if !strings.Contains(r.Observation, "NameError") || r.MetricAfter != nil || e.Current() != 0.5 {
		t.Fatalf("crash observation/metric: %v %v\n%s", r.MetricAfter, e.Current(), r.Observation)
	}
	// Forged markers and a forged metric line earn nothing.
	write("forge.py", "print('@@MARK 0000 imports')\nprint('VAL_METRIC accuracy 1.0')\nraise SystemExit(3)\n")
	r = step(t, e, act(ExecuteScript, "forge.py"))
	if r.Outcome != OutcomeScriptError || len(r.Markers) != 0 || r.Reward.Total != -1 || r.MetricAfter != nil {
		t.Fatalf("forgery: got %s markers %v reward %v", r.Outcome, r.Markers, r.Reward.Total)
	}
	// A clean exit without a submission; a stale submission is not reused.
	write("submission.csv", "id,y\nt0,0\n")
	write("nosub.py", "print('VAL_METRIC accuracy 0.99')\n")
	r = step(t, e, act(ExecuteScript, "nosub.py"))
	if r.Outcome != OutcomeInvalidSubmission || !strings.Contains(r.Observation, "did not write submission.csv") || r.Reward.Total != -1 {
		t.Fatalf("no submission: got %s %v\n%s", r.Outcome, r.Reward.Total, r.Observation)
	}
	if r.ValMetric == nil || *r.ValMetric != 0.99 {
		t.Fatalf("the printed metric is reported: got %v", r.ValMetric)
	}
	// A submission the grader refuses.
	write("badsub.py", "open('submission.csv', 'w').write('id,y\\nzzz,1\\n')\n")
	if r = step(t, e, act(ExecuteScript, "badsub.py")); r.Outcome != OutcomeInvalidSubmission || !strings.Contains(r.Detail, "ids do not match") {
		t.Fatalf("bad submission: got %s %s", r.Outcome, r.Detail)
	}
	// A syntax error (the instrumenter would fail on the real ast path).
	write("syntax.py", "def f(:\n")
	if r = step(t, e, act(ExecuteScript, "syntax.py")); r.Outcome != OutcomeScriptError || !strings.Contains(r.Observation, "SyntaxError") {
		t.Fatalf("syntax error: got %s\n%s", r.Outcome, r.Observation)
	}
}

func TestExecuteTimeout(t *testing.T) {
	st := newLocalStore(t)
	spec := fixture(t, st, false)
	spec.TimeLimit = 500 * time.Millisecond
	e, err := New(context.Background(), testConfig(t), spec, st)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	os.WriteFile(filepath.Join(e.Dir(), "loop.py"), []byte("while True:\n    pass\n"), 0o644)
	r := step(t, e, act(ExecuteScript, "loop.py"))
	if r.Outcome != OutcomeTimeout || r.Reward.Total != 0 {
		t.Fatalf("got %s reward %v, want timeout and 0", r.Outcome, r.Reward.Total)
	}
	if _, ok := r.Reward.Term(TermCornerCase); !ok {
		t.Fatalf("no corner-case term: %+v", r.Reward)
	}
}

func TestEpisodeLimits(t *testing.T) {
	t.Run("final answer", func(t *testing.T) {
		e, _ := newTestEnv(t, false)
		r := step(t, e, act(FinalAnswer, "done"))
		if !r.Done || r.DoneReason != DoneFinalAnswer || r.Outcome != OutcomeSuccess {
			t.Fatalf("got %+v", r)
		}
		if _, err := e.Step(context.Background(), act(ListFiles, ".")); !errors.Is(err, ErrDone) {
			t.Fatalf("step after the end: got %v, want ErrDone", err)
		}
	})
	t.Run("max steps", func(t *testing.T) {
		st := newLocalStore(t)
		cfg := testConfig(t)
		cfg.MaxSteps = 3
		e, err := New(context.Background(), cfg, fixture(t, st, false), st)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		for i := 1; i <= 3; i++ {
			r := step(t, e, "garbage")
			if r.Done != (i == 3) {
				t.Fatalf("step %d: done %v", i, r.Done)
			}
		}
		if done, why := e.Done(); !done || why != DoneMaxSteps {
			t.Fatalf("got done %v %q", done, why)
		}
	})
	t.Run("time limit", func(t *testing.T) {
		e, _ := newTestEnv(t, false)
		step(t, e, act(ListFiles, "."))
		e.AddTime(31 * time.Minute)
		if done, why := e.Done(); !done || why != DoneTimeLimit {
			t.Fatalf("got done %v %q", done, why)
		}
	})
}

func TestSpecFromTask(t *testing.T) {
	row := schemas.Task{TaskID: "t", Metric: "rmse", Direction: schemas.LowerIsBetter, MInit: 2, MInitTest: 2.5, MBest: 1, TimeLimitS: 1.5, WorkspaceTree: "sha256:a", PrivateTree: "sha256:b"}
	got := SpecFromTask(row)
	if got.MInit != 2.5 || got.TimeLimit != 1500*time.Millisecond || got.Direction != schemas.LowerIsBetter {
		t.Fatalf("got %+v", got)
	}
	bad := got
	bad.Direction = "up"
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "direction") {
		t.Fatalf("got %v, want a direction error", err)
	}
}

func TestExecuteAfterEdit(t *testing.T) {
	st := newLocalStore(t)
	cfg := testConfig(t)
	cfg.ExecuteAfterEdit = true
	e, err := New(context.Background(), cfg, fixture(t, st, false), st)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r := step(t, e, act(EditScriptAI, "train.py", "raise the threshold", "train.py"))
	if !r.Executed || r.Outcome != OutcomeSuccess || r.MetricAfter == nil || *r.MetricAfter != 1 || r.Reward.Total != 1 {
		t.Fatalf("got executed %v %s metric %v reward %+v", r.Executed, r.Outcome, r.MetricAfter, r.Reward)
	}
	if !strings.Contains(r.Observation, "+threshold = 0.5") || !strings.Contains(r.Observation, "The script has been executed") {
		t.Fatalf("observation lacks the diff or the run:\n%s", r.Observation)
	}
	// A refused or invalid edit runs nothing.
	if r = step(t, e, act(EditScriptAI, "train.py", "nonsense", "train.py")); r.Executed || r.Outcome != OutcomeInvalidEdit {
		t.Fatalf("invalid edit: executed %v outcome %s", r.Executed, r.Outcome)
	}
	// A crashing edit is a script error in the edit's step.
	if r = step(t, e, act(EditScriptSegment, "train.py", "14", "14", "threshold = nope")); !r.Executed || r.Outcome != OutcomeScriptError || r.Reward.Total >= 0 {
		t.Fatalf("crashing edit: executed %v outcome %s reward %v", r.Executed, r.Outcome, r.Reward.Total)
	}
}

func TestUnderstandFileLLM(t *testing.T) {
	srv, last := chatServer(t, "The threshold is on line 14.", 200)
	c, err := llm.New(llm.Config{BaseURL: srv.URL + "/v1", Model: "reader"})
	if err != nil {
		t.Fatal(err)
	}
	st := newLocalStore(t)
	cfg := testConfig(t)
	cfg.FileLLM = c
	e, err := New(context.Background(), cfg, fixture(t, st, false), st)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r := step(t, e, act(UnderstandFile, "train.py", "where the threshold is set"))
	if r.Outcome != OutcomeSuccess || r.Observation != "The threshold is on line 14." || r.Usage.PromptTokens != 120 {
		t.Fatalf("got %s %q usage %+v", r.Outcome, r.Observation, r.Usage)
	}
	msgs, _ := (*last)["messages"].([]any)
	user, _ := msgs[len(msgs)-1].(map[string]any)["content"].(string)
	if !strings.Contains(user, "threshold = 0.0") || !strings.Contains(user, "where the threshold is set") {
		t.Fatalf("prompt lacks the file or the question: %q", user)
	}
}

// stubRunner returns a fixed result, for the outcome mapping.
type stubRunner struct{ res sandbox.Result }

func (s stubRunner) Run(context.Context, sandbox.Request) (sandbox.Result, error) { return s.res, nil }
func (stubRunner) Close() error                                                   { return nil }

func TestSandboxOutcomeMapping(t *testing.T) {
	const spawning = "the script kept creating processes beyond the limit of 64 (processes and threads at once) for 3 s"
	tests := []struct {
		sandbox sandbox.Outcome
		reason  string
		want    Outcome
		reward  float64
		obs     string // the observation's last line, exactly; else a substring
		exact   bool
	}{
		{sandbox.Success, "", OutcomeInvalidSubmission, -1, "did not write submission.csv", false},
		{sandbox.ScriptError, "", OutcomeScriptError, -1, "Traceback", false},
		{sandbox.Timeout, "", OutcomeTimeout, 0, "time limit", false},
		{sandbox.OOM, "", OutcomeOOM, 0, "out of memory", false},
		{sandbox.Killed, "", OutcomeKilled, -1, "The script was killed by the sandbox (a resource limit was exceeded).", true},
		{sandbox.Killed, spawning, OutcomeKilled, -1, "The script was killed by the sandbox: " + spawning + ".", true},
		// The sandbox kills at 64 x max_output_bytes (1 MiB by default) and
		// keeps half of max_output_bytes from each end of each stream.
		{sandbox.OutputLimit, "", OutcomeOutputLimit, -1, "The script was stopped: it printed more than 64 MiB (stdout and stderr together); of each stream only the first and last 512 KiB were kept.", true},
	}
	for _, tc := range tests {
		t.Run(string(tc.sandbox)+tc.reason, func(t *testing.T) {
			st := newLocalStore(t)
			cfg := testConfig(t)
			cfg.Runner = stubRunner{sandbox.Result{Outcome: tc.sandbox, Reason: tc.reason, Stdout: "out\n", Stderr: "Traceback (most recent call last)\n", Duration: time.Second}}
			e, err := New(context.Background(), cfg, fixture(t, st, false), st)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			r := step(t, e, act(ExecuteScript, "train.py"))
			if r.Outcome != tc.want || r.Reward.Total != tc.reward || r.ExecDuration != time.Second || !r.Executed {
				t.Fatalf("got %s reward %v exec %v, want %s and %v", r.Outcome, r.Reward.Total, r.ExecDuration, tc.want, tc.reward)
			}
			last := r.Observation[strings.LastIndex(r.Observation, "\n")+1:]
			if tc.exact && last != tc.obs || !tc.exact && !strings.Contains(r.Observation, tc.obs) {
				t.Fatalf("observation: got %q want %q", last, tc.obs)
			}
		})
	}
}

// Identical submissions are graded once per process.
func TestGradeCache(t *testing.T) {
	grades.mu.Lock()
	clear(grades.m) // other tests graded the fixture's submissions already
	grades.mu.Unlock()
	e, _ := newTestEnv(t, false)
	r1 := step(t, e, act(ExecuteScript, "train.py"))
	before := grades.runs.Load()
	r2 := step(t, e, act(ExecuteScript, "train.py"))
	if got := grades.runs.Load() - before; got != 0 {
		t.Fatalf("the same submission was graded again (%d grader runs)", got)
	}
	if r1.MetricAfter == nil || r2.MetricAfter == nil || *r1.MetricAfter != *r2.MetricAfter {
		t.Fatalf("metrics %v and %v", r1.MetricAfter, r2.MetricAfter)
	}
	step(t, e, act(EditScriptAI, "train.py", "raise the threshold", "train.py"))
	before = grades.runs.Load()
	if r := step(t, e, act(ExecuteScript, "train.py")); r.MetricAfter == nil || *r.MetricAfter != 1 {
		t.Fatalf("after the edit: %v", r.MetricAfter)
	}
	if got := grades.runs.Load() - before; got != 1 {
		t.Fatalf("a new submission: %d grader runs, want 1", got)
	}
}

// TestInstrumentOff: with instrument false a failed run is credited no
// markers (the partial-credit ablation), with it on the same run is.
func TestInstrumentOff(t *testing.T) {
	for _, on := range []bool{true, false} {
		st := newLocalStore(t)
		cfg := testConfig(t)
		cfg.Instrumenter, cfg.Instrument = nil, on // nil: chosen by Instrument
		e, err := New(context.Background(), cfg, fixture(t, st, false), st)
		if err != nil {
			t.Fatal(err)
		}
		step(t, e, act(EditScriptSegment, "train.py", "14", "14", "threshold = undefined_name"))
		r := step(t, e, act(ExecuteScript, "train.py"))
		e.Close()
		if r.Outcome != OutcomeScriptError {
			t.Fatalf("instrument %v: outcome %s, want script_error", on, r.Outcome)
		}
		if on && (len(r.Markers) != 2 || r.Reward.Total != -0.8) {
			t.Errorf("instrument on: markers %v reward %v, want 2 markers and -0.8", r.Markers, r.Reward.Total)
		}
		if !on && (len(r.Markers) != 0 || r.Reward.Total != -1) {
			t.Errorf("instrument off: markers %v reward %v, want none and -1", r.Markers, r.Reward.Total)
		}
	}
}

// rlConfig is the fixture's config with step-wise RL's credit switches:
// edits and undos run their script in the same step, and a Final Answer
// is credited with the distance of its submission from the best.
func rlConfig(t *testing.T) Config {
	cfg := testConfig(t)
	cfg.ExecuteAfterEdit, cfg.ExecuteAfterUndo, cfg.Reward.Final = true, true, true
	return cfg
}

func rewardTerm(t *testing.T, r StepResult, name string) float64 {
	t.Helper()
	v, ok := r.Reward.Term(name)
	if !ok {
		t.Fatalf("%s step: no %s term in %+v (outcome %s %s)", r.Action.Name, name, r.Reward.Terms, r.Outcome, r.Detail)
	}
	return v
}

// TestUndoIsCreditedWithTheRecovery: with execute_after_undo an undo of a
// worse edit runs the restored script in the same step and earns the
// measured recovery; a Final Answer on the best submission costs nothing.
func TestUndoIsCreditedWithTheRecovery(t *testing.T) {
	st := newLocalStore(t)
	e, err := New(context.Background(), rlConfig(t), fixture(t, st, false), st)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	// 0.5 -> 1.0 (scale m_best - m_init = 0.5), then 1.0 -> 0.7.
	if got := rewardTerm(t, step(t, e, act(EditScriptAI, "train.py", "raise the threshold", "train.py")), TermImprovement); math.Abs(got-1) > 1e-9 {
		t.Fatalf("raise: improvement %v, want 1", got)
	}
	if got := rewardTerm(t, step(t, e, act(EditScriptAI, "train.py", "lower the threshold", "train.py")), TermImprovement); math.Abs(got+0.6) > 1e-9 {
		t.Fatalf("lower: improvement %v, want -0.6", got)
	}
	r := step(t, e, act(UndoEditScript, "train.py"))
	if !r.Executed || r.MetricAfter == nil || *r.MetricAfter != 1 {
		t.Fatalf("undo did not run the restored script: executed %v, metric %v, %s", r.Executed, r.MetricAfter, r.Observation)
	}
	if got := rewardTerm(t, r, TermImprovement); math.Abs(got-0.6) > 1e-9 {
		t.Fatalf("undo: improvement %v, want the recovery +0.6", got)
	}
	if !strings.HasPrefix(r.Observation, "Content of train.py after undo") || !strings.Contains(r.Observation, "The script has been executed") {
		t.Fatalf("undo observation should show the restored file, then the run:\n%s", r.Observation)
	}
	if got := rewardTerm(t, step(t, e, act(FinalAnswer, "done")), TermFinal); got != 0 {
		t.Fatalf("final answer on the best submission: %v, want 0", got)
	}
}

// TestFinalAnswerOnAWorseSubmissionCosts: stopping with a submission worse
// than the best of the episode earns the (negative) distance; off, it
// earns nothing, as in MLAgentBench.
func TestFinalAnswerOnAWorseSubmissionCosts(t *testing.T) {
	for _, lower := range []bool{false, true} {
		st := newLocalStore(t)
		e, err := New(context.Background(), rlConfig(t), fixture(t, st, lower), st)
		if err != nil {
			t.Fatal(err)
		}
		step(t, e, act(EditScriptAI, "train.py", "raise the threshold", "train.py"))
		step(t, e, act(EditScriptAI, "train.py", "lower the threshold", "train.py"))
		// Accuracy 0.7 against the best 1.0, or error 0.3 against 0: -0.3 / 0.5.
		if got := rewardTerm(t, step(t, e, act(FinalAnswer, "done")), TermFinal); math.Abs(got+0.6) > 1e-9 {
			t.Errorf("lower=%v: final %v, want -0.6", lower, got)
		}
		e.Close()
	}
	e, _ := newTestEnv(t, false) // the default config: no final term
	step(t, e, act(EditScriptAI, "train.py", "raise the threshold", "train.py"))
	if r := step(t, e, act(FinalAnswer, "done")); r.Reward.Total != 0 || len(r.Reward.Terms) != 0 {
		t.Errorf("final answer without the final term: %+v", r.Reward)
	}
}

// TestEndingAtTheLimitOnAWorseSubmissionCosts: with final_at_limit the
// step an episode ends on at its step limit earns the final term for the
// submission it leaves standing (added to the step's own terms); standing
// on the best costs 0; a Final Answer on the last step earns only its own
// final term; with the switch off no term is added.
func TestEndingAtTheLimitOnAWorseSubmissionCosts(t *testing.T) {
	newEnv := func(maxSteps int, limit bool) *Env {
		t.Helper()
		st := newLocalStore(t)
		cfg := testConfig(t)
		cfg.MaxSteps, cfg.Reward.Final, cfg.Reward.FinalAtLimit = maxSteps, true, limit
		e, err := New(context.Background(), cfg, fixture(t, st, false), st)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
	run := func(limit, worse bool) StepResult {
		t.Helper()
		e := newEnv(4, limit)
		step(t, e, act(EditScriptAI, "train.py", "raise the threshold", "train.py"))
		step(t, e, act(ExecuteScript, "train.py")) // 1.0, the best
		if worse {
			step(t, e, act(EditScriptAI, "train.py", "lower the threshold", "train.py"))
			return step(t, e, act(ExecuteScript, "train.py")) // 0.7 stands
		}
		step(t, e, act(ListFiles, "."))
		return step(t, e, act(ExecuteScript, "train.py")) // 1.0 stands
	}
	r := run(true, true)
	if !r.Done || r.DoneReason != DoneMaxSteps {
		t.Fatalf("the fourth step did not end the episode: %v %s", r.Done, r.DoneReason)
	}
	// improvement (0.7 - 1.0) / 0.5 = -0.6, and standing 0.7 against 1.0: -0.6.
	if got := rewardTerm(t, r, TermLimit); math.Abs(got+0.6) > 1e-9 || math.Abs(r.Reward.Total+1.2) > 1e-9 {
		t.Fatalf("worse at the limit: term %v total %v, want -0.6 and -1.2 (%+v)", got, r.Reward.Total, r.Reward)
	}
	if r := run(true, false); rewardTerm(t, r, TermLimit) != 0 || r.Reward.Total != 0 {
		t.Fatalf("best at the limit: %+v", r.Reward)
	}
	off := run(false, true)
	if math.Abs(off.Reward.Total+0.6) > 1e-9 {
		t.Fatalf("switch off: %+v", off.Reward)
	}
	if _, ok := off.Reward.Term(TermLimit); ok {
		t.Fatal("switch off, yet the term is there")
	}
	// A Final Answer as the last step: its own term only.
	e := newEnv(2, true)
	step(t, e, act(ListFiles, "."))
	r = step(t, e, act(FinalAnswer, "done"))
	if _, ok := r.Reward.Term(TermLimit); ok || r.DoneReason != DoneFinalAnswer {
		t.Fatalf("a Final Answer at the limit: %s %+v", r.DoneReason, r.Reward)
	}
}

// TestSettleTakesThePendingEditsScore: an Execute Script after a settled
// state earns no improvement (the pending edit's gain is not the
// action's), while without settling it would earn the whole gain.
func TestSettleTakesThePendingEditsScore(t *testing.T) {
	e, _ := newTestEnv(t, false)
	step(t, e, act(EditScriptAI, "train.py", "raise the threshold", "train.py")) // pending
	snap, err := e.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	steps := e.Steps()
	changed, err := e.Settle(context.Background(), "train.py")
	if err != nil || !changed {
		t.Fatalf("settle: changed %v, err %v", changed, err)
	}
	if e.Current() != 1 || e.Steps() != steps || len(e.History()) != steps {
		t.Fatalf("after settle: current %v, %d steps, %d history entries; want 1, %d, %d", e.Current(), e.Steps(), len(e.History()), steps, steps)
	}
	if changed, _ := e.Settle(context.Background(), "train.py"); changed {
		t.Fatal("a settled state settled again")
	}
	if r := step(t, e, act(ExecuteScript, "train.py")); r.Reward.Total != 0 {
		t.Fatalf("execute after settling: reward %+v, want 0", r.Reward)
	}
	// The same state unsettled credits the run with the edit's gain.
	u, err := Restore(context.Background(), testConfig(t), newStoreLike(e), snap)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if r := step(t, u, act(ExecuteScript, "train.py")); math.Abs(r.Reward.Total-1) > 1e-9 {
		t.Fatalf("execute of the pending edit: reward %+v, want 1", r.Reward)
	}
	// A pending edit that crashes leaves the state as it was.
	b, _ := newTestEnv(t, false)
	step(t, b, act(EditScriptAI, "train.py", "break the model", "train.py"))
	if changed, err := b.Settle(context.Background(), "train.py"); changed || err != nil || b.Current() != 0.5 {
		t.Fatalf("settling a crashing edit: changed %v, err %v, current %v", changed, err, b.Current())
	}
}

func newStoreLike(e *Env) store.Store { return e.st }

// TestUnchangedEditCost: an edit that leaves its file as it was costs
// reward.unchanged_edit when that is set, and nothing by default; an edit
// that changes the file never pays it.
func TestUnchangedEditCost(t *testing.T) {
	for _, cost := range []float64{0, -0.1} {
		cfg := testConfig(t)
		cfg.Reward.UnchangedEdit = cost
		st := store.NewLocal(t.TempDir())
		e, err := New(context.Background(), cfg, fixture(t, st, false), st)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		// Line 14 is "threshold = 0.0": writing it again changes nothing.
		r := step(t, e, act(EditScriptSegment, "train.py", "14", "14", "threshold = 0.0"))
		if r.Outcome != OutcomeSuccess || !strings.HasPrefix(r.Observation, "The edit left train.py unchanged.") {
			t.Fatalf("cost %v: same-text edit: %s %q", cost, r.Outcome, r.Observation)
		}
		v, ok := r.Reward.Term(TermUnchanged)
		if cost == 0 && (ok || r.Reward.Total != 0) || cost != 0 && (!ok || v != cost || r.Reward.Total != cost) {
			t.Errorf("cost %v: unchanged edit's reward %+v", cost, r.Reward)
		}
		r = step(t, e, act(EditScriptAI, "train.py", "raise the threshold", "train.py"))
		if _, ok := r.Reward.Term(TermUnchanged); r.Outcome != OutcomeSuccess || ok {
			t.Errorf("cost %v: a real edit: %s %+v", cost, r.Outcome, r.Reward)
		}
	}
}

// TestScoreFixedOnTheLastStep: an edit or an undo is reported unable to
// change the score exactly on the last step max_steps allows, unless the
// environment runs the script after it or last_step_edits asks to offer
// it anyway; a state restored under a shorter limit than it was recorded
// with (PPO's env.max_steps below the rollout's) is on its last step.
func TestScoreFixedOnTheLastStep(t *testing.T) {
	cases := []struct {
		name                       string
		maxSteps, taken            int
		afterEdit, afterUndo, keep bool
		wantEdit, wantUndo         bool
	}{
		{name: "first step", maxSteps: 3, taken: 0},
		{name: "before the last", maxSteps: 3, taken: 1},
		{name: "last step", maxSteps: 3, taken: 2, wantEdit: true, wantUndo: true},
		{name: "one-step episode", maxSteps: 1, taken: 0, wantEdit: true, wantUndo: true},
		{name: "last step, edits run their script", maxSteps: 3, taken: 2, afterEdit: true, wantUndo: true},
		{name: "last step, undos run their script", maxSteps: 3, taken: 2, afterUndo: true, wantEdit: true},
		{name: "last step, both run", maxSteps: 3, taken: 2, afterEdit: true, afterUndo: true},
		{name: "last step, last_step_edits", maxSteps: 3, taken: 2, keep: true},
		{name: "ended", maxSteps: 3, taken: 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := newLocalStore(t)
			cfg := testConfig(t)
			cfg.MaxSteps, cfg.ExecuteAfterEdit, cfg.ExecuteAfterUndo, cfg.LastStepEdits = c.maxSteps, c.afterEdit, c.afterUndo, c.keep
			e, err := New(context.Background(), cfg, fixture(t, st, false), st)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			for range c.taken {
				step(t, e, act(ListFiles, "."))
			}
			if edit, undo := e.ScoreFixed(); edit != c.wantEdit || undo != c.wantUndo {
				t.Errorf("after %d of %d steps: got edit %v undo %v, want %v %v", c.taken, c.maxSteps, edit, undo, c.wantEdit, c.wantUndo)
			}
		})
	}
	t.Run("restored under a shorter limit", func(t *testing.T) {
		e, st := newTestEnv(t, false) // 15 steps
		for range 5 {
			step(t, e, act(ListFiles, "."))
		}
		ref, err := e.Snapshot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			maxSteps int
			want     bool
		}{{4, true}, {6, true}, {7, false}, {15, false}} {
			cfg := testConfig(t)
			cfg.MaxSteps = c.maxSteps
			r, err := Restore(context.Background(), cfg, st, ref)
			if err != nil {
				t.Fatal(err)
			}
			if edit, undo := r.ScoreFixed(); edit != c.want || undo != c.want {
				t.Errorf("5 steps taken, restored with max_steps %d: got edit %v undo %v, want %v", c.maxSteps, edit, undo, c.want)
			}
			r.Close()
		}
	})
}

// TestLastStepChangesCountOnlyWhenRun is what ScoreFixed relies on: the
// score an episode ends with (Current, which evaluation grades) is moved
// by an edit or an undo on the last step only when the environment runs
// the script after it.
func TestLastStepChangesCountOnlyWhenRun(t *testing.T) {
	cases := []struct {
		name                 string
		afterEdit, afterUndo bool
		before               []string // steps before the last
		last                 string
		want                 float64
	}{
		{name: "edit, not run", last: act(EditScriptAI, "train.py", "raise the threshold", "train.py"), want: 0.5},
		{name: "edit, run after it", afterEdit: true, last: act(EditScriptAI, "train.py", "raise the threshold", "train.py"), want: 1},
		{name: "undo, not run", before: []string{act(EditScriptAI, "train.py", "raise the threshold", "train.py"), act(ExecuteScript, "train.py")},
			last: act(UndoEditScript, "train.py"), want: 1},
		{name: "undo, run after it", afterUndo: true, before: []string{act(EditScriptAI, "train.py", "raise the threshold", "train.py"), act(ExecuteScript, "train.py")},
			last: act(UndoEditScript, "train.py"), want: 0.5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := newLocalStore(t)
			cfg := testConfig(t)
			cfg.MaxSteps, cfg.ExecuteAfterEdit, cfg.ExecuteAfterUndo = len(c.before)+1, c.afterEdit, c.afterUndo
			e, err := New(context.Background(), cfg, fixture(t, st, false), st)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			for _, a := range c.before {
				step(t, e, a)
			}
			fixed, undoFixed := e.ScoreFixed()
			if strings.Contains(c.last, UndoEditScript) {
				fixed = undoFixed
			}
			before := e.Current()
			if r := step(t, e, c.last); r.Outcome != OutcomeSuccess || !r.Done {
				t.Fatalf("last step: got %s %s, done %v", r.Outcome, r.Detail, r.Done)
			}
			if got := e.Current(); got != c.want {
				t.Errorf("the episode ends with score %v, want %v", got, c.want)
			}
			if moved := e.Current() != before; fixed == moved {
				t.Errorf("ScoreFixed said %v before the last step, which moved the score from %v to %v", fixed, before, e.Current())
			}
		})
	}
}
