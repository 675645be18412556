package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/internal/tasks"
	"github.com/mlerl/mlerl/schemas"
)

func needPython(t *testing.T) {
	t.Helper()
	if _, err := sandbox.FindPython(""); err != nil {
		t.Skip(err)
	}
}

// toyData generates n rows of a deterministic tabular problem: two
// features, a binary label (classification) or a noisy linear target.
func toyData(n int, seed uint64, classify bool) (features [][2]float64, target []float64) {
	r := rand.New(rand.NewPCG(seed, 7))
	for i := 0; i < n; i++ {
		x := [2]float64{r.NormFloat64(), r.NormFloat64()}
		y := 3*x[0] - 2*x[1] + 0.5*r.NormFloat64()
		if classify {
			y = 0
			if 3*x[0]-2*x[1]+r.NormFloat64() > 0 {
				y = 1
			}
		}
		features = append(features, x)
		target = append(target, y)
	}
	return features, target
}

// fixtureTask writes a small, complete task folder: train/test CSVs, a
// sectioned train.py (the generated tabular baseline), answers and the
// generated CSV grader.
func fixtureTask(t *testing.T, root, id, metric string) string {
	t.Helper()
	m, ok := lookupMetric(metric)
	if !ok {
		t.Fatalf("metric %s unknown", metric)
	}
	x, y := toyData(300, uint64(len(id)), m.classify)
	var train, test, answers bytes.Buffer
	train.WriteString("id,x1,x2,target\n")
	test.WriteString("id,x1,x2\n")
	answers.WriteString("id,target\n")
	for i := range x {
		if i < 240 {
			fmt.Fprintf(&train, "%d,%.4f,%.4f,%g\n", i, x[i][0], x[i][1], y[i])
		} else {
			fmt.Fprintf(&test, "%d,%.4f,%.4f\n", i, x[i][0], x[i][1])
			fmt.Fprintf(&answers, "%d,%g\n", i, y[i])
		}
	}
	script, err := tabularBaseline(metric, "target", "id", "train.csv", "test.csv", m.classify)
	if err != nil {
		t.Fatal(err)
	}
	grader, _ := templatesFS.ReadFile("templates/grade.py")
	gradeCfg, _ := json.Marshal(map[string]any{"id_column": "id", "target_columns": []string{"target"}, "metric": metric})
	taskType := "regression"
	if m.classify {
		taskType = "binary-classification"
	}
	mBest := 0.99
	if m.direction == schemas.LowerIsBetter {
		mBest = 0.3
	}
	files := map[string][]byte{
		tasks.SpecFile: []byte(fmt.Sprintf("id: %s\ntitle: Toy %s\nmodality: tabular\ntask_type: %s\nmetric: %s\ndirection: %s\nm_best: %g\nm_best_source: noise level of the generator\ntime_limit_s: 60\nsplit: held-in\n",
			id, metric, taskType, metric, m.direction, mBest)),
		tasks.DescriptionFile: []byte("Predict target from x1 and x2.\n"),
		"workspace/train.py":  script,
		"workspace/train.csv": train.Bytes(),
		"workspace/test.csv":  test.Bytes(),
		"private/answers.csv": answers.Bytes(),
		"private/grade.py":    grader,
		"private/grade.json":  gradeCfg,
	}
	dir := filepath.Join(root, id)
	for rel, b := range files {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func testConfig(t *testing.T, suite string) TasksConfig {
	cfg := DefaultTasksConfig()
	cfg.Data = t.TempDir()
	cfg.Suite = suite
	cfg.Workers = 2
	writeTestKey(t, cfg.Data)
	return cfg
}

// testSplitKey is the split key of the tests' data roots: a fixed one, so
// that the toy tasks' parts (and whether a near-perfect baseline leaves
// both parts headroom) are the same at every run.
const testSplitKey = "6d6c65726c20696e676573742074657374732073706c6974206b657920763031"

func writeTestKey(t *testing.T, root string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(SplitKeyFile)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, SplitKeyFile), []byte(testSplitKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// readTasks reads the latest tasks dataset of a data root.
func readTasks(t *testing.T, root string) (*datasets.Manifest, []schemas.Task) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	m, err := datasets.Latest(ctx, st, schemas.Tasks.Name)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := datasets.ReadAll[schemas.Task](ctx, st, m, schemas.Tasks)
	if err != nil {
		t.Fatal(err)
	}
	return m, rows
}

func TestRunTasksEndToEnd(t *testing.T) {
	needPython(t)
	suite := t.TempDir()
	fixtureTask(t, suite, "toy-clf", "accuracy")
	fixtureTask(t, suite, "toy-reg", "rmse")
	cfg := testConfig(t, suite)
	var log bytes.Buffer
	if err := runTasks(context.Background(), cfg, &log, &log); err != nil {
		t.Fatalf("got %v, want success; log:\n%s", err, log.String())
	}
	m, rows := readTasks(t, cfg.Data)
	if len(rows) != 2 || rows[0].TaskID != "toy-clf" || rows[1].TaskID != "toy-reg" {
		t.Fatalf("got rows %+v, want toy-clf and toy-reg", rows)
	}
	// The generator's noise bounds what a linear model reaches on it.
	ranges := map[string][2]float64{"toy-clf": {0.6, 1}, "toy-reg": {0.3, 1.5}}
	st, _ := store.Open(context.Background(), cfg.Data)
	for _, r := range rows {
		want := ranges[r.TaskID]
		if r.MInit < want[0] || r.MInit > want[1] || r.MInitValid < want[0] || r.MInitValid > want[1] {
			t.Errorf("%s: got m_init %v, m_init_valid %v, want both in %v", r.TaskID, r.MInit, r.MInitValid, want)
		}
		if r.BaselineDurationS <= 0 || r.Source != FromBuiltin || r.Split != schemas.HeldIn || r.TimeLimitS != 60 {
			t.Errorf("%s: got %+v", r.TaskID, r)
		}
		// The trees restore to folders that run and grade like the originals.
		ws, priv := t.TempDir(), filepath.Join(t.TempDir(), "private")
		if err := tasks.Materialize(context.Background(), st, r.WorkspaceTree, ws); err != nil {
			t.Fatal(err)
		}
		if err := tasks.Materialize(context.Background(), st, r.PrivateTree, priv); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{filepath.Join(ws, "train.py"), filepath.Join(ws, "test.csv"), filepath.Join(priv, "answers.csv"), filepath.Join(priv, "grade.py")} {
			if _, err := os.Stat(f); err != nil {
				t.Errorf("%s: restored tree lacks %s", r.TaskID, f)
			}
		}
		if _, err := os.Stat(filepath.Join(ws, "answers.csv")); err == nil {
			t.Errorf("%s: workspace tree holds answers.csv", r.TaskID)
		}
	}
	if pc, _ := m.Producer.Config.(map[string]any); pc["suite"] != suite {
		t.Errorf("got manifest config %v, want the resolved config with suite %s", m.Producer.Config, suite)
	}
	if m.Producer.Command != "mlerl ingest tasks" || m.Extra["failures"] == nil {
		t.Errorf("got manifest producer %+v extra %v", m.Producer, m.Extra)
	}
	if !strings.Contains(log.String(), "toy-reg") || !strings.Contains(log.String(), "M_INIT") {
		t.Errorf("summary table missing from log:\n%s", log.String())
	}
}

func TestRunTasksBadInput(t *testing.T) {
	needPython(t)
	const okScript = "print('VAL_METRIC accuracy 0.5')\nopen('submission.csv', 'w').write('id,target\\n1,1\\n')\n"
	cases := []struct {
		name string
		edit func(dir string)
		want []string // substrings of the one error naming this task
	}{
		{"malformed-yaml", func(dir string) { write(dir, tasks.SpecFile, "id: malformed-yaml\ntitle: [oops\n") },
			[]string{"task malformed-yaml: task.yaml", "not valid task YAML"}},
		{"no-direction", func(dir string) { replaceIn(dir, tasks.SpecFile, "direction: higher\n", "") },
			[]string{"task no-direction: task.yaml: field direction: missing"}},
		{"no-grader", func(dir string) { os.Remove(filepath.Join(dir, "private/grade.py")) },
			[]string{"task no-grader: private/grade.py: missing"}},
		{"missing-data", func(dir string) {
			write(dir, "workspace/train.py", "import pandas as pd\npd.read_csv('features.csv')\n"+okScript)
		}, []string{"task missing-data: workspace/train.py", `missing data file "features.csv"`}},
		{"crash", func(dir string) { write(dir, "workspace/train.py", "raise RuntimeError('diverged')\n") },
			[]string{"task crash: workspace/train.py", "crashed (exit 1)", "RuntimeError: diverged"}},
		{"no-metric", func(dir string) { write(dir, "workspace/train.py", "print('done')\n") },
			[]string{"task no-metric: workspace/train.py: field VAL_METRIC", "printed no line `VAL_METRIC accuracy"}},
		{"no-headroom", func(dir string) { replaceIn(dir, tasks.SpecFile, "m_best: 0.99", "m_best: 0.2") },
			[]string{"task no-headroom: task.yaml: field m_best: 0.2 is not better than the initial script's graded score"}},
		{"bad-submission", func(dir string) {
			write(dir, "workspace/train.py", "print('VAL_METRIC accuracy 0.5')\nopen('submission.csv','w').write('id\\n1\\n')\n")
		},
			[]string{"task bad-submission: private/grade.py", "rejected the initial script's submission.csv", "lacks column(s) target"}},
	}
	suite := t.TempDir()
	fixtureTask(t, suite, "good", "accuracy")
	for _, c := range cases {
		c.edit(fixtureTask(t, suite, c.name, "accuracy"))
	}
	cfg := testConfig(t, suite)
	// Something committed before must stay as it was.
	before := testConfig(t, t.TempDir())
	before.Data = cfg.Data
	beforeSuite := t.TempDir()
	fixtureTask(t, beforeSuite, "earlier", "accuracy")
	before.Suite = beforeSuite
	if err := runTasks(context.Background(), before, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}

	var log bytes.Buffer
	err := runTasks(context.Background(), cfg, &log, &log)
	if !errors.Is(err, ErrSomeFailed) || !strings.Contains(err.Error(), fmt.Sprintf("%d of %d tasks failed", len(cases), len(cases)+1)) {
		t.Fatalf("got error %v, want %d of %d tasks failed", err, len(cases), len(cases)+1)
	}
	for _, c := range cases {
		for _, w := range c.want {
			if !strings.Contains(log.String(), w) {
				t.Errorf("%s: log lacks %q", c.name, w)
			}
		}
	}
	m, rows := readTasks(t, cfg.Data)
	if m.Version != 2 || len(rows) != 1 || rows[0].TaskID != "good" {
		t.Errorf("got v%d with %d rows, want v2 holding only good", m.Version, len(rows))
	}
	fl, _ := json.Marshal(m.Extra["failures"])
	for _, c := range cases {
		if !strings.Contains(string(fl), `"task":"`+c.name+`"`) {
			t.Errorf("manifest failures %s lack %s", fl, c.name)
		}
	}
	st, _ := store.Open(context.Background(), cfg.Data)
	v1, err := datasets.ReadManifest(context.Background(), st, schemas.Tasks.Name, 1)
	if err != nil || v1.Rows != 1 {
		t.Errorf("v1 changed: %v %+v", err, v1)
	}
	if t.Failed() {
		t.Log(log.String())
	}
}

func TestSelectTasksOnly(t *testing.T) {
	mk := func(id string) *tasks.Task { return &tasks.Task{Spec: tasks.Spec{ID: id}, Dir: "/x/" + id} }
	loaded := []*tasks.Task{mk("a"), mk("b"), mk("a")}
	got, fails, err := selectTasks(loaded, nil, []string{"a"})
	if err != nil || len(got) != 1 || got[0].ID != "a" || len(fails) != 1 || !strings.Contains(fails[0].err.Error(), "ids must be unique") {
		t.Errorf("got %v %v %v, want a kept and a duplicate failure", got, fails, err)
	}
	if _, _, err := selectTasks(loaded, nil, []string{"zzz"}); err == nil || !strings.Contains(err.Error(), `no task "zzz"`) {
		t.Errorf("got %v, want an error naming zzz", err)
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		edit func(*TasksConfig)
		err  string // the whole message; "" for valid
	}{
		{"default", func(*TasksConfig) {}, ""},
		{"import", func(c *TasksConfig) { c.From, c.Source = FromMLEBench, "comps" }, ""},
		{"unknown from", func(c *TasksConfig) { c.From = "kaggle" }, `from "kaggle": want builtin, mlebench or mlagentbench`},
		{"import without source", func(c *TasksConfig) { c.From = FromMLEBench }, `from "mlebench": needs a source folder (the command's argument or --source)`},
		{"source without from", func(c *TasksConfig) { c.Source = "x" }, `source "x": given but from is builtin (add --from mlebench or --from mlagentbench)`},
		{"no suite", func(c *TasksConfig) { c.Suite = "" }, `suite "": nothing to ingest with from builtin (set suite, or from mlebench|mlagentbench with a source)`},
		{"empty only", func(c *TasksConfig) { c.Only = []string{""} }, `only [""]: item 1 is empty: want task ids`},
		{"data", func(c *TasksConfig) { c.Data = "" }, `data "": must name the data root (a folder or gs://bucket/prefix)`},
		{"workers", func(c *TasksConfig) { c.Workers = -2 }, "workers -2: must not be negative (0: one per CPU core)"},
		{"timeout", func(c *TasksConfig) { c.Timeout = -time.Second }, "timeout -1s: must not be negative (0: each task's time_limit_s)"},
		{"memory_mb", func(c *TasksConfig) { c.MemoryMB = -1 }, "memory_mb -1: must not be negative (0: the sandbox's default)"},
		{"m_best measure", func(c *TasksConfig) { c.MBest = "measure" }, ""},
		{"mlebench grader", func(c *TasksConfig) { c.From, c.Source, c.Grader = FromMLEBench, "comps", GraderMLEBench }, ""},
		{"mlebench grader without an import", func(c *TasksConfig) { c.Grader = GraderMLEBench }, `grader "mlebench": is for MLE-bench imports (add --from mlebench)`},
		{"unknown grader", func(c *TasksConfig) { c.Grader = "official" }, `grader "official": want csv or mlebench`},
		{"original initial", func(c *TasksConfig) { c.From, c.Source, c.Initial = FromMLAgentBench, "bench", "original" }, ""},
		{"original initial without MLAgentBench", func(c *TasksConfig) { c.From, c.Source, c.Initial = FromMLEBench, "comps", "original" }, `initial "original": is for MLAgentBench imports, whose tasks ship a train.py (add --from mlagentbench)`},
		{"unknown initial", func(c *TasksConfig) { c.Initial = "mine" }, `initial "mine": want generated or original`},
		{"m_best value", func(c *TasksConfig) { c.MBest = "0.9" }, `m_best "0.9": want measure (measure a missing m_best with the catalog search) or empty`},
		{"measure_scripts", func(c *TasksConfig) { c.MeasureScripts = -1 }, "measure_scripts -1: must not be negative (0: every combination)"},
		{"measure_time", func(c *TasksConfig) { c.MeasureTime = -time.Second }, "measure_time -1s: must not be negative (0: no limit)"},
	}
	for _, c := range cases {
		cfg := DefaultTasksConfig()
		c.edit(&cfg)
		cfg.Derive()
		got := ""
		if err := cfg.Validate(); err != nil {
			got = err.Error()
		}
		if got != c.err {
			t.Errorf("%s: got %q want %q", c.name, got, c.err)
		}
	}
}

func write(dir, rel, content string) {
	os.WriteFile(filepath.Join(dir, rel), []byte(content), 0o644)
}

func replaceIn(dir, rel, old, new string) {
	b, _ := os.ReadFile(filepath.Join(dir, rel))
	write(dir, rel, strings.Replace(string(b), old, new, 1))
}

// TestBuiltinSuiteSubset ingests two tasks of the repository's built-in
// suite (the whole suite is `make ingest`).
func TestBuiltinSuiteSubset(t *testing.T) {
	needPython(t)
	suite := filepath.Join("..", "tasks")
	good, _, err := tasks.LoadSuite(suite)
	if err != nil || len(good) < 2 {
		t.Skipf("no built-in suite at %s (%v)", suite, err)
	}
	cfg := testConfig(t, suite)
	cfg.Only = []string{good[0].ID, good[len(good)-1].ID}
	var log bytes.Buffer
	if err := runTasks(context.Background(), cfg, &log, &log); err != nil {
		t.Fatalf("got %v; log:\n%s", err, log.String())
	}
	_, rows := readTasks(t, cfg.Data)
	if len(rows) != 2 {
		t.Fatalf("got %d rows, want 2", len(rows))
	}
	for _, r := range rows {
		// Headroom: the initial score must be strictly worse than m_best.
		worse := r.MInit < r.MBest
		if r.Direction == schemas.LowerIsBetter {
			worse = r.MInit > r.MBest
		}
		if !worse || r.WorkspaceTree == "" || r.PrivateTree == "" || r.Description == "" {
			t.Errorf("%s: got m_init %v, m_best %v (%s is better), trees %q %q", r.TaskID, r.MInit, r.MBest, r.Direction, r.WorkspaceTree, r.PrivateTree)
		}
	}
}

// TestEmbeddedSuite: the default suite is the one embedded in the binary,
// whatever the working directory holds (here: nothing), and its temporary
// folder is gone afterwards.
func TestEmbeddedSuite(t *testing.T) {
	needPython(t)
	t.Chdir(t.TempDir())
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	cfg := DefaultTasksConfig()
	if cfg.Suite != SuiteBuiltin {
		t.Fatalf("default suite %q, want %q", cfg.Suite, SuiteBuiltin)
	}
	cfg.Data, cfg.Workers, cfg.Only = "./d", 2, []string{"wine-cultivar"}
	var log bytes.Buffer
	if err := runTasks(context.Background(), cfg, &log, &log); err != nil {
		t.Fatalf("got %v; log:\n%s", err, log.String())
	}
	_, rows := readTasks(t, "./d")
	if len(rows) != 1 || rows[0].TaskID != "wine-cultivar" || rows[0].Source != FromBuiltin || rows[0].MInit <= 0 {
		t.Fatalf("got %+v, want wine-cultivar from the built-in suite", rows)
	}
	left, _ := filepath.Glob(filepath.Join(tmp, "mlerl-suite-*"))
	if len(left) != 0 {
		t.Errorf("the suite's temporary folder is left: %v", left)
	}
	// A named subset of the embedded suite ingests its tasks only (Only
	// narrows it further); an unknown name is a folder.
	cfg.Suite, cfg.Only, cfg.Data = "demo", []string{"wine-cultivar", "digits-8x8"}, "./d2"
	log.Reset()
	if err := runTasks(context.Background(), cfg, &log, &log); err != nil {
		t.Fatalf("suite demo: got %v; log:\n%s", err, log.String())
	}
	if _, rows = readTasks(t, "./d2"); len(rows) != 2 || !strings.Contains(log.String(), "suite demo: 15 of the built-in suite's tasks") {
		t.Errorf("suite demo with only 2: got %d rows, log:\n%s", len(rows), log.String())
	}
	cfg.Only = nil
	// A folder is still a folder: one that does not exist says what to set.
	cfg.Suite = "tasks"
	err := runTasks(context.Background(), cfg, &log, &log)
	if err == nil || !strings.Contains(err.Error(), "task suite tasks: open tasks: no such file or directory (set suite to builtin for the suite embedded in this binary") {
		t.Errorf("suite tasks in an empty folder: got %v", err)
	}
}

// BenchmarkIngestBuiltinSuite times a whole ingest of the built-in suite
// (every baseline run and graded, trees uploaded, dataset committed).
func BenchmarkIngestBuiltinSuite(b *testing.B) {
	suite := filepath.Join("..", "tasks")
	if _, _, err := tasks.LoadSuite(suite); err != nil {
		b.Skip(err)
	}
	for i := 0; i < b.N; i++ {
		cfg := DefaultTasksConfig()
		cfg.Suite, cfg.Data = suite, b.TempDir()
		if err := runTasks(context.Background(), cfg, io.Discard, io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}
