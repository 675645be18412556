package tasks

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
)

const goodSpec = `id: toy
title: Toy task
modality: tabular
task_type: binary-classification
metric: accuracy
direction: higher
m_best: 0.95
m_best_source: a measured strong script
time_limit_s: 30
split: held-in
answer_split: none
`

// writeTask writes a task folder named id under root with the given files
// (relative path -> content); files mapped to "" are left out.
func writeTask(t *testing.T, root, id string, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(root, id)
	base := map[string]string{
		SpecFile:              strings.Replace(goodSpec, "id: toy", "id: "+id, 1),
		DescriptionFile:       "Predict y.\n",
		"workspace/train.py":  "print('VAL_METRIC accuracy 0.5')\nopen('submission.csv','w').write('id,y\\n1,0\\n')\n",
		"workspace/train.csv": "id,x,y\n1,0.5,1\n",
		"private/answers.csv": "id,y\n1,1\n",
		"private/grade.py":    "import json\nprint(json.dumps({'valid': True, 'score': 0.5}))\n",
	}
	for k, v := range files {
		base[k] = v
	}
	for rel, content := range base {
		if content == "" {
			continue
		}
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadBadInput(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		// want are substrings the error must contain (task, file, field).
		want []string
	}{
		{"good", nil, nil},
		{"malformed yaml", map[string]string{SpecFile: "id: [unclosed\n"}, []string{"task malformed-yaml", "task.yaml", "not valid task YAML"}},
		{"unknown key", map[string]string{SpecFile: goodSpec + "metrc: rmse\n"}, []string{"task.yaml", "metrc", "not a task.yaml field"}},
		{"metric without direction", map[string]string{SpecFile: strings.Replace(goodSpec, "direction: higher\n", "", 1)}, []string{"task.yaml: field direction: missing", "metric accuracy needs a direction"}},
		{"bad direction", map[string]string{SpecFile: strings.Replace(goodSpec, "direction: higher", "direction: up", 1)}, []string{"field direction", `"up"`}},
		{"direction contradicts metric", map[string]string{SpecFile: strings.Replace(goodSpec, "direction: higher", "direction: lower", 1)}, []string{"field direction", "contradicts metric accuracy"}},
		{"missing m_best", map[string]string{SpecFile: strings.Replace(goodSpec, "m_best: 0.95\n", "", 1)}, []string{"field m_best: missing", "or measure to have `mlerl ingest tasks` measure it"}},
		{"m_best a word", map[string]string{SpecFile: strings.Replace(goodSpec, "m_best: 0.95", "m_best: high", 1)}, []string{"task.yaml", `line 7: m_best "high": want a number, or measure`}},
		{"missing m_best_source", map[string]string{SpecFile: strings.Replace(goodSpec, "m_best_source: a measured strong script\n", "", 1)}, []string{"field m_best_source: missing"}},
		{"bad split", map[string]string{SpecFile: strings.Replace(goodSpec, "held-in", "train", 1)}, []string{"field split"}},
		{"zero time limit", map[string]string{SpecFile: strings.Replace(goodSpec, "time_limit_s: 30", "time_limit_s: 0", 1)}, []string{"field time_limit_s"}},
		{"id differs from folder", map[string]string{SpecFile: strings.Replace(goodSpec, "id: toy", "id: other", 1)}, []string{"field id", "folder name"}},
		{"missing grader", map[string]string{"private/grade.py": ""}, []string{"private/grade.py: missing"}},
		{"missing answers", map[string]string{"private/answers.csv": ""}, []string{"private/answers.csv: missing"}},
		{"missing script", map[string]string{"workspace/train.py": ""}, []string{"workspace/train.py: missing"}},
		{"empty description", map[string]string{DescriptionFile: "  \n"}, []string{"description.md: empty"}},
		{"answers leaked", map[string]string{"workspace/labels.csv": "id,y\n1,1\n"}, []string{"workspace", "labels.csv (a copy of private/answers.csv)"}},
		{"negative workspace quota", map[string]string{SpecFile: goodSpec + "workspace_bytes: -1\nworkspace_files: -2\n"}, []string{"field workspace_bytes: -1: want a positive number of bytes", "field workspace_files: -2"}},
		{"workspace quota misspelt", map[string]string{SpecFile: goodSpec + "workspace_mb: 10\n"}, []string{"workspace_mb", "known: id", "workspace_bytes, workspace_files"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := strings.ReplaceAll(c.name, " ", "-")
			files := map[string]string{}
			for k, v := range c.files {
				files[k] = strings.Replace(v, "id: toy", "id: "+id, 1)
			}
			dir := writeTask(t, t.TempDir(), id, files)
			task, err := Load(dir)
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("got error %v, want none", err)
				}
				if task.ID != id || *task.MBest != 0.95 || task.Description != "Predict y.\n" {
					t.Errorf("got %+v", task)
				}
				return
			}
			if err == nil {
				t.Fatalf("got no error, want one containing %q", c.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("got %v, want it to wrap ErrInvalid", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got error %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

// TestLoadWorkspaceQuota: a task's own workspace quota reaches its row.
func TestLoadWorkspaceQuota(t *testing.T) {
	dir := writeTask(t, t.TempDir(), "toy", map[string]string{SpecFile: goodSpec + "workspace_bytes: 5368709120\nworkspace_files: 200000\n"})
	task, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if r := task.Row(); r.WorkspaceBytes != 5<<30 || r.WorkspaceFiles != 200000 {
		t.Errorf("row quota: got %d bytes, %d files", r.WorkspaceBytes, r.WorkspaceFiles)
	}
}

// TestLoadMBestMeasure: `m_best: measure` (or, with MeasureMissingMBest,
// no m_best at all) loads with m_best to be measured and no source yet.
func TestLoadMBestMeasure(t *testing.T) {
	noBest := strings.Replace(goodSpec, "m_best: 0.95\nm_best_source: a measured strong script\n", "", 1)
	cases := []struct {
		name, spec string
		opts       LoadOptions
		measure    bool
		err        string
	}{
		{"m_best: measure", strings.Replace(noBest, "split:", "m_best: measure\nsplit:", 1), LoadOptions{}, true, ""},
		{"missing, with the option", noBest, LoadOptions{MeasureMissingMBest: true}, true, ""},
		{"a number, with the option", goodSpec, LoadOptions{MeasureMissingMBest: true}, false, ""},
		{"missing, without the option", noBest, LoadOptions{}, false, "field m_best: missing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := writeTask(t, t.TempDir(), "toy", map[string]string{SpecFile: c.spec})
			task, err := LoadWith(dir, c.opts)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %v, want an error containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if task.MBestMeasure != c.measure || (task.MBest == nil) != c.measure {
				t.Errorf("got m_best %v, measure %v; want measure %v", task.MBest, task.MBestMeasure, c.measure)
			}
			if r := task.Row(); c.measure && !math.IsNaN(r.MBest) {
				t.Errorf("row of a task still to measure: m_best %v, want NaN", r.MBest)
			}
		})
	}
}

func TestLoadSuite(t *testing.T) {
	root := t.TempDir()
	writeTask(t, root, "b-task", nil)
	writeTask(t, root, "a-task", nil)
	writeTask(t, root, "broken", map[string]string{SpecFile: "id: broken\n"})
	os.MkdirAll(filepath.Join(root, "shared-helpers"), 0o755) // no task.yaml, no workspace: skipped
	good, bad, err := LoadSuite(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(good) != 2 || good[0].ID != "a-task" || good[1].ID != "b-task" {
		t.Errorf("got good %v, want a-task, b-task", good)
	}
	if len(bad) != 1 || !strings.Contains(bad[0].Error(), "task broken: task.yaml: field title: missing") {
		t.Errorf("got bad %v, want one error about broken's title", bad)
	}
}

func TestParseValMetric(t *testing.T) {
	cases := []struct {
		name, out string
		want      float64
		err       string
	}{
		{"one line", "loading\nVAL_METRIC accuracy 0.913200\ndone\n", 0.9132, ""},
		{"none", "training done\n", 0, "printed no line"},
		{"two lines", "VAL_METRIC accuracy 0.9\nVAL_METRIC accuracy 0.8\n", 0, "want exactly one"},
		{"other metric", "VAL_METRIC rmse 3.2\n", 0, "task.yaml's metric is accuracy"},
		{"nan", "VAL_METRIC accuracy nan\n", 0, "not a finite number"},
		{"bad shape", "VAL_METRIC 0.9\n", 0, "want VAL_METRIC <metric> <value>"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseValMetric(c.out, "accuracy")
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, ErrNoMetric) {
					t.Fatalf("got %v, %v; want error containing %q", got, err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %v, %v; want %v", got, err, c.want)
			}
		})
	}
}

func TestRunGrader(t *testing.T) {
	python, err := sandbox.FindPython("")
	if err != nil {
		t.Skip(err)
	}
	runner := sandbox.NewCold(python)
	defer runner.Close()
	cases := []struct {
		name, grader string
		want         Grade
		err          string
	}{
		{"valid", "import json\nprint(json.dumps({'valid': True, 'score': 0.75}))\n", Grade{Valid: true, Score: 0.75}, ""},
		{"invalid", "import json\nprint(json.dumps({'valid': False, 'reason': 'wrong row count'}))\n", Grade{Reason: "wrong row count"}, ""},
		{"args", "import json,sys,os\nprint(json.dumps({'valid': os.path.basename(sys.argv[2]) == 'answers.csv' and os.path.isfile(sys.argv[2]) and os.path.isdir('private'), 'score': 1, 'reason': 'bad args'}))\n", Grade{Valid: true, Score: 1}, ""},
		{"sibling module", "import json,helper\nprint(json.dumps({'valid': True, 'score': helper.X}))\n", Grade{Valid: true, Score: 2}, ""},
		{"crash", "raise ValueError('boom')\n", Grade{}, "crashed"},
		{"no json", "print('score: 0.5')\n", Grade{}, "printed no JSON line"},
		{"valid without score", "print('{\"valid\": true}')\n", Grade{}, "no finite"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := writeTask(t, t.TempDir(), "g", map[string]string{"private/grade.py": c.grader, "private/helper.py": "X = 2\n"})
			direct, derr := RunGrader(context.Background(), python, filepath.Join(dir, PrivateDir), filepath.Join(dir, "nowhere.csv"))
			viaRunner, rerr := RunGraderIn(context.Background(), runner, filepath.Join(dir, PrivateDir), filepath.Join(dir, "nowhere.csv"))
			for _, r := range []struct {
				how string
				got Grade
				err error
			}{{"RunGrader", direct, derr}, {"RunGraderIn", viaRunner, rerr}} {
				if c.err != "" {
					if r.err == nil || !strings.Contains(r.err.Error(), c.err) {
						t.Errorf("%s: got %+v, %v; want error containing %q", r.how, r.got, r.err, c.err)
					}
					continue
				}
				if r.err != nil || r.got != c.want {
					t.Errorf("%s: got %+v, %v; want %+v", r.how, r.got, r.err, c.want)
				}
			}
		})
	}
}

func TestTreesRoundTrip(t *testing.T) {
	dir := writeTask(t, t.TempDir(), "toy", nil)
	task, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	st := store.NewLocal(t.TempDir())
	ctx := context.Background()
	ws, priv, err := UploadTrees(ctx, st, task)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ ref, src string }{{ws, task.WorkspacePath()}, {priv, task.PrivatePath()}} {
		out := filepath.Join(t.TempDir(), "restored")
		if err := Materialize(ctx, st, c.ref, out); err != nil {
			t.Fatal(err)
		}
		want, _ := filesUnder(c.src)
		got, _ := filesUnder(out)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("restored %s: got files %v, want %v", c.ref, got, want)
		}
		for _, f := range want {
			a, _ := os.ReadFile(filepath.Join(c.src, f))
			b, _ := os.ReadFile(filepath.Join(out, f))
			if string(a) != string(b) {
				t.Errorf("restored %s differs", f)
			}
		}
	}
}

func filesUnder(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return err
	})
	return out, err
}

// TestBuiltinSuiteLoads checks every folder of the repository's built-in
// suite against the format (no scripts are run here).
func TestBuiltinSuiteLoads(t *testing.T) {
	suite := filepath.Join("..", "..", "tasks")
	if _, err := os.Stat(suite); err != nil {
		t.Skip("no built-in suite")
	}
	good, bad, err := LoadSuite(suite)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range bad {
		t.Error(e)
	}
	held := map[string]int{}
	for _, task := range good {
		held[task.Split]++
	}
	t.Logf("%d tasks: %v", len(good), held)
}

// A reason is cut to MaxReasonBytes, on a rune boundary, and says so: a
// grader may quote the submission in it at any length.
func TestParseGradeCutsLongReason(t *testing.T) {
	long := strings.Repeat("\u00e9", 1<<20)
	for _, c := range []struct {
		name, out string
		want      Grade
	}{
		{"short", `{"valid": false, "reason": "ids differ"}`, Grade{Reason: "ids differ"}},
		{"at the limit", `{"valid": false, "reason": "` + strings.Repeat("x", MaxReasonBytes) + `"}`, Grade{Reason: strings.Repeat("x", MaxReasonBytes)}},
		{"valid", `{"valid": true, "score": 0.5, "reason": "` + long + `"}`, Grade{Valid: true, Score: 0.5}},
	} {
		if g, err := ParseGrade(c.out); err != nil || g != c.want {
			t.Errorf("%s: got %+.100v, %v; want %+v", c.name, g, err, c.want)
		}
	}
	g, err := ParseGrade(`{"valid": false, "reason": "id ` + long + ` is unknown"}` + "\n")
	if err != nil || g.Valid || len(g.Reason) > MaxReasonBytes || !utf8.ValidString(g.Reason) ||
		!strings.HasPrefix(g.Reason, "id \u00e9\u00e9") || !strings.HasSuffix(g.Reason, reasonCut) {
		t.Fatalf("got a reason of %d bytes (%.40q...), %v; want at most %d, valid UTF-8, its head kept, ending %q", len(g.Reason), g.Reason, err, MaxReasonBytes, reasonCut)
	}
}
