package catalog

// Tests against the built-in task suite in the repository's tasks/ folder:
// every applicable idea applies to every initial train.py, a sample of
// edited scripts really runs and grades, and every grader rejects bad
// submissions with a reason instead of a traceback.

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

const suiteRoot = "../../tasks"

type suiteTask struct {
	ID        string  `yaml:"id"`
	Title     string  `yaml:"title"`
	Modality  string  `yaml:"modality"`
	TaskType  string  `yaml:"task_type"`
	Metric    string  `yaml:"metric"`
	Direction string  `yaml:"direction"`
	MBest     float64 `yaml:"m_best"`
	MBestSrc  string  `yaml:"m_best_source"`
	TimeLimit float64 `yaml:"time_limit_s"`
	Split     string  `yaml:"split"`
	SplitRule string  `yaml:"split_rule"`
	// The hidden answers' parts (internal/tasks split.go).
	AnswerSplit     string   `yaml:"answer_split"`
	AnswerSplitSeed string   `yaml:"answer_split_seed"`
	MBestPublic     *float64 `yaml:"m_best_public"`
	MBestPrivate    *float64 `yaml:"m_best_private"`

	dir    string
	script string // the initial workspace/train.py
}

func loadSuite(t testing.TB) []*suiteTask {
	t.Helper()
	ents, err := os.ReadDir(suiteRoot)
	if err != nil {
		t.Fatalf("built-in suite: %v", err)
	}
	var out []*suiteTask
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(suiteRoot, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, "task.yaml"))
		if err != nil {
			continue // not a task folder
		}
		var st suiteTask
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&st); err != nil {
			t.Fatalf("%s/task.yaml: %v", dir, err)
		}
		if st.ID != e.Name() {
			t.Fatalf("%s/task.yaml: id %q does not match the folder name", dir, st.ID)
		}
		s, err := os.ReadFile(filepath.Join(dir, "workspace", "train.py"))
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		st.dir, st.script = dir, string(s)
		out = append(out, &st)
	}
	if len(out) < 12 {
		t.Fatalf("built-in suite has %d tasks, want >= 12", len(out))
	}
	return out
}

// graderSettings is the block of grade.py that differs between tasks.
var graderSettings = regexp.MustCompile(`(?s)# === grader settings ===\n.*?# === end grader settings ===\n`)

func TestSuiteShape(t *testing.T) {
	suite := loadSuite(t)
	tpl, err := os.ReadFile(filepath.Join(suiteRoot, "grade_template.py"))
	if err != nil {
		t.Fatal(err)
	}
	common := graderSettings.ReplaceAllString(string(tpl), "")
	heldOut, modsIn, modsOut, metrics := 0, map[string]bool{}, map[string]bool{}, map[string]bool{}
	dirs := map[string]bool{}
	for _, st := range suite {
		if st.Split == "held-out" {
			heldOut++
			modsOut[st.Modality] = true
		} else {
			modsIn[st.Modality] = true
		}
		metrics[st.Metric] = true
		dirs[st.Direction] = true
		g, err := os.ReadFile(filepath.Join(st.dir, "private", "grade.py"))
		if err != nil {
			t.Errorf("%s: %v", st.ID, err)
		} else if graderSettings.ReplaceAllString(string(g), "") != common {
			t.Errorf("%s: private/grade.py differs from tasks/grade_template.py outside its settings: rerun tasks/generate.py", st.ID)
		} else if !strings.Contains(string(g), fmt.Sprintf("METRIC = %q", st.Metric)) && !strings.Contains(string(g), fmt.Sprintf("METRIC = '%s'", st.Metric)) {
			t.Errorf("%s: private/grade.py does not grade metric %s", st.ID, st.Metric)
		}
		if st.MBest == 0 || st.MBestSrc == "" {
			t.Errorf("%s: m_best %v (source %q) is not set", st.ID, st.MBest, st.MBestSrc)
		}
		for _, sec := range Sections {
			if _, _, err := findSection(st.script, sec); err != nil {
				t.Errorf("%s: train.py: %v", st.ID, err)
			}
		}
		if n := strings.Count(st.script, "VAL_METRIC "+st.Metric+" "); n != 1 {
			t.Errorf("%s: train.py prints VAL_METRIC %s %d times, want once", st.ID, st.Metric, n)
		}
	}
	if heldOut*4 < len(suite) || heldOut*2 > len(suite) {
		t.Errorf("%d of %d tasks are held out, want about a third", heldOut, len(suite))
	}
	for m := range modsOut {
		if !modsIn[m] {
			t.Errorf("held-out modality %s has no held-in task to train on", m)
		}
	}
	if len(metrics) < 5 || len(dirs) != 2 {
		t.Errorf("suite uses metrics %v and directions %v, want >= 5 metrics in both directions", metrics, dirs)
	}
}

// onlyModelSubsFailed reports whether err comes from a sub op on the model
// section: a hyperparameter idea whose parameter the current model lacks.
func onlyModelSubs(i Idea) bool {
	for _, op := range i.Edit.Ops {
		if op.Section != "model" || op.Op != "sub" {
			return false
		}
	}
	return true
}

func TestEveryApplicableIdeaApplies(t *testing.T) {
	for _, st := range loadSuite(t) {
		ideas := ForTask(st.Modality, st.TaskType)
		perCat := map[string]int{}
		var modelIdeas []Idea
		for _, i := range ideas {
			perCat[i.Category]++
			if i.Category == "model" {
				modelIdeas = append(modelIdeas, i)
			}
		}
		for _, c := range []string{"data", "model", "learning"} {
			if perCat[c] < 10 {
				t.Errorf("%s: only %d %s ideas apply, want >= 10", st.ID, perCat[c], c)
			}
		}
		for _, i := range ideas {
			if _, err := Apply(st.script, i.Edit); err != nil {
				if !onlyModelSubs(i) {
					t.Errorf("%s: %s: %v", st.ID, i.ID, err)
					continue
				}
				// A hyperparameter the initial model lacks: the edit must be
				// rejected with a clear error, and must apply once a model
				// idea has introduced such a model.
				if !strings.Contains(err.Error(), "not found in section") {
					t.Errorf("%s: %s: unexpected error %v", st.ID, i.ID, err)
				}
				ok := false
				for _, m := range modelIdeas {
					s, err := Apply(st.script, m.Edit)
					if err != nil {
						continue
					}
					if _, err := Apply(s, i.Edit); err == nil {
						ok = true
						break
					}
				}
				if !ok {
					t.Errorf("%s: %s applies after no model idea: it can never be used on this task", st.ID, i.ID)
				}
			}
		}
	}
}

// python returns the task interpreter or skips the test.
func python(t testing.TB) string {
	t.Helper()
	const p = "/usr/bin/python3"
	if err := exec.Command(p, "-c", "import numpy, pandas, sklearn, scipy").Run(); err != nil {
		t.Skipf("skipping: %s cannot import numpy, pandas, scikit-learn and scipy (%v); `make setup` installs them", p, err)
	}
	return p
}

// runResult is what running one (possibly edited) script produced.
type runResult struct {
	valMetric float64
	score     float64
	// public and private are the scores on the hidden answers' two parts
	// (NaN when the grader gave none).
	public, private float64
	valid           bool
	reason          string
	duration        time.Duration
	err             error
	output          string
	section         string // where a failed script failed: the section of its last train.py line in the traceback
}

var tbLineRe = regexp.MustCompile(`File "[^"]*train\.py", line (\d+)`)

// failedSection names the section of script holding the last train.py
// line of a traceback ("unknown" when the traceback names none, e.g. a
// failure inside a library called at top level without a train.py frame).
func failedSection(script, tb string) string {
	m := tbLineRe.FindAllStringSubmatch(tb, -1)
	if len(m) == 0 {
		return "unknown"
	}
	line, _ := strconv.Atoi(m[len(m)-1][1])
	sec := "outside sections"
	for k, l := range strings.Split(script, "\n") {
		if k+1 > line {
			break
		}
		if mm := sectionLineRe.FindStringSubmatch(l); mm != nil {
			if mm[1] == "" {
				sec = mm[2]
			} else {
				sec = "outside sections"
			}
		}
	}
	return sec
}

var sectionLineRe = regexp.MustCompile(`^# === (end )?(\w+) ===\s*$`)

var valMetricRe = regexp.MustCompile(`(?m)^VAL_METRIC (\S+) (\S+)\s*$`)

// job is one edited script to run in a copy of a task's workspace.
type job struct {
	st     *suiteTask
	script string
}

// prepare copies the task's workspace data into dir and writes script as
// train.py there.
func prepare(st *suiteTask, script, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(filepath.Join(st.dir, "workspace"))
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() || e.Name() == "submission.csv" || e.Name() == "train.py" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(st.dir, "workspace", e.Name()))
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644)
		}
		if err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "train.py"), []byte(script), 0o644)
}

// batchDriver runs, in one interpreter (process start and imports cost
// about a second each on this machine), a sequence of train.py scripts and
// graders given as JSON lines on stdin: {"kind": "run", "dir": ...} runs
// dir/train.py with dir as working directory; {"kind": "grade", "dir":
// <task folder>, "sub": <submission>} runs private/grade.py as __main__
// (with private/parts.csv as its third argument when the task has one).
// Each answers one JSON line: what the code printed, its exit code and any
// traceback that escaped.
const batchDriver = `import contextlib, io, json, os, runpy, sys, time, traceback
for line in sys.stdin:
    c = json.loads(line)
    os.chdir(c["dir"])
    if c["kind"] == "run":
        path, argv = "train.py", ["train.py"]
    else:
        path, argv = "private/grade.py", ["private/grade.py", c["sub"], "private/answers.csv"]
        if os.path.isfile("private/parts.csv"):
            argv.append("private/parts.csv")
    sys.argv = argv
    out, code, tb, t0 = io.StringIO(), None, "", time.time()
    with contextlib.redirect_stdout(out):
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as e:
            code = e.code
        except BaseException:
            tb = traceback.format_exc()
    print(json.dumps({"out": out.getvalue(), "code": code, "tb": tb, "secs": time.time() - t0}), flush=True)
`

type driverResult struct {
	Out  string  `json:"out"`
	Code any     `json:"code"`
	TB   string  `json:"tb"`
	Secs float64 `json:"secs"`
}

// runBatch runs requests (maps with kind, dir, sub) through batchDriver.
func runBatch(py string, reqs []map[string]string) ([]driverResult, error) {
	var in bytes.Buffer
	for _, r := range reqs {
		b, _ := json.Marshal(r)
		in.Write(append(b, '\n'))
	}
	cmd := exec.Command(py, "-c", batchDriver)
	cmd.Stdin = &in
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1", "MKL_NUM_THREADS=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("python driver: %v: %s", err, tail(stderr.String(), 2000))
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(reqs) {
		return nil, fmt.Errorf("python driver: got %d results, want %d", len(lines), len(reqs))
	}
	res := make([]driverResult, len(lines))
	for k, l := range lines {
		if err := json.Unmarshal([]byte(l), &res[k]); err != nil {
			return nil, fmt.Errorf("python driver line %q: %v", l, err)
		}
	}
	return res, nil
}

// runJobs runs each job's script in its own copy of the workspace (under
// tmp) and grades the submission, all in one interpreter.
func runJobs(py string, jobs []job, tmp string) ([]runResult, error) {
	results := make([]runResult, len(jobs))
	var reqs []map[string]string
	for k, j := range jobs {
		dir := filepath.Join(tmp, fmt.Sprintf("job%d-%s", k, j.st.ID))
		if err := prepare(j.st, j.script, dir); err != nil {
			return nil, err
		}
		taskDir, _ := filepath.Abs(j.st.dir)
		reqs = append(reqs,
			map[string]string{"kind": "run", "dir": dir},
			map[string]string{"kind": "grade", "dir": taskDir, "sub": filepath.Join(dir, "submission.csv")})
	}
	out, err := runBatch(py, reqs)
	if err != nil {
		return nil, err
	}
	for k, j := range jobs {
		run, gr := out[2*k], out[2*k+1]
		r := &results[k]
		r.duration = time.Duration(run.Secs * float64(time.Second))
		r.output = run.Out
		if run.TB != "" || (run.Code != nil && run.Code != float64(0)) {
			r.err = fmt.Errorf("train.py failed (exit %v):\n%s%s", run.Code, tail(run.Out, 800), tail(run.TB, 2000))
			r.section = failedSection(j.script, run.TB)
			continue
		}
		m := valMetricRe.FindAllStringSubmatch(run.Out, -1)
		if len(m) != 1 || m[0][1] != j.st.Metric {
			r.err = fmt.Errorf("train.py printed %d VAL_METRIC lines (want one for %s):\n%s", len(m), j.st.Metric, tail(run.Out, 800))
			continue
		}
		r.valMetric, _ = strconv.ParseFloat(m[0][2], 64)
		var g gradeResult
		if gr.TB != "" || json.Unmarshal([]byte(strings.TrimSpace(gr.Out)), &g) != nil {
			r.err = fmt.Errorf("grade.py: printed %q, traceback %s", gr.Out, gr.TB)
			continue
		}
		r.valid, r.score, r.reason = g.Valid, g.Score, g.Reason
		r.public, r.private = math.NaN(), math.NaN()
		if g.Public != nil && g.Private != nil {
			r.public, r.private = *g.Public, *g.Private
		}
	}
	return results, nil
}

type gradeResult struct {
	Valid   bool     `json:"valid"`
	Score   float64  `json:"score"`
	Reason  string   `json:"reason"`
	Public  *float64 `json:"public"`
	Private *float64 `json:"private"`
}

func grade(ctx context.Context, py string, st *suiteTask, submission string) (gradeResult, error) {
	var g gradeResult
	cmd := exec.CommandContext(ctx, py, "private/grade.py", submission, "private/answers.csv")
	cmd.Dir = st.dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return g, fmt.Errorf("grade.py: %v: %s", err, stderr.String())
	}
	if stderr.Len() > 0 {
		return g, fmt.Errorf("grade.py wrote to stderr: %s", stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 1 {
		return g, fmt.Errorf("grade.py printed %d lines, want 1: %q", len(lines), out)
	}
	if err := json.Unmarshal([]byte(lines[0]), &g); err != nil {
		return g, fmt.Errorf("grade.py output %q: %v", lines[0], err)
	}
	return g, nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

func taskByID(t testing.TB, suite []*suiteTask, id string) *suiteTask {
	t.Helper()
	for _, st := range suite {
		if st.ID == id {
			return st
		}
	}
	t.Fatalf("task %s is not in the built-in suite", id)
	return nil
}

// applyIDs applies catalog ideas, in order, to a script.
func applyIDs(script string, ids ...string) (string, error) {
	for _, id := range ids {
		i, ok := Lookup(id)
		if !ok {
			return "", fmt.Errorf("no catalog idea %q", id)
		}
		var err error
		if script, err = Apply(script, i.Edit); err != nil {
			return "", fmt.Errorf("%s: %w", id, err)
		}
	}
	return script, nil
}

// parallel runs f(0..n-1) on up to two goroutines (the machine is shared).
func parallel(n int, f func(k int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	for k := 0; k < n; k++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(k int) {
			defer wg.Done()
			defer func() { <-sem }()
			f(k)
		}(k)
	}
	wg.Wait()
}

// TestEditedScriptsRun runs a small sample of edited scripts: single ideas
// of each category and 3-idea compositions (data, then model, then learning).
func TestEditedScriptsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping Python runs in -short mode")
	}
	py := python(t)
	suite := loadSuite(t)
	cases := []struct {
		task string
		ids  []string
	}{
		{"digits-8x8", []string{"data/standard-scaler", "model/svc-rbf-c10", "learning/refit-train-valid"}},
		{"co2-weekly", []string{"data/fourier-2", "model/ridge-alpha1", "learning/target-standardize"}},
		{"support-tickets", []string{"data/tfidf-ngram1-2-mindf1-sublinear", "model/text-logreg-c10", "learning/calibrate-sigmoid"}},
		{"paper-topics-graph", []string{"data/neighbor-mean-2hop"}},
		{"scene-tags", []string{"model/ml-random-forest-n200", "learning/n-estimators-50"}},
		{"breast-cancer-diagnosis", []string{"learning/max-iter-2000"}},
		{"health-visits", []string{"data/log1p-skewed", "model/hist-gradient-boosting-poisson", "learning/early-stopping-hgb"}},
	}
	edits := make([]edited, len(cases))
	for k, c := range cases {
		edits[k] = edited{c.task, c.ids}
	}
	results := runEdited(t, py, suite, edits)
	for k, c := range cases {
		r := results[k]
		if r.err != nil {
			t.Errorf("%s + %v: %v", c.task, c.ids, r.err)
			continue
		}
		if !r.valid {
			t.Errorf("%s + %v: grader rejected the submission: %s", c.task, c.ids, r.reason)
			continue
		}
		t.Logf("%s + %v: VAL_METRIC %.4f, test score %.4f (%.1fs)", c.task, c.ids, r.valMetric, r.score, r.duration.Seconds())
	}
}

// TestGraders runs every task's initial script, checks that its grader
// accepts the submission, then feeds the grader broken variants of it.
func TestGraders(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping Python runs in -short mode")
	}
	py := python(t)
	suite := loadSuite(t)
	tmp := t.TempDir()
	var jobs []job
	for _, st := range suite {
		jobs = append(jobs, job{st, st.script})
	}
	results, err := runJobs(py, jobs, tmp)
	if err != nil {
		t.Fatal(err)
	}
	type badCase struct {
		task, name, path string
	}
	var bad []badCase
	for k, st := range suite {
		r := results[k]
		if r.err != nil || !r.valid {
			t.Errorf("%s: initial script: err %v, valid %v (%s)", st.ID, r.err, r.valid, r.reason)
			continue
		}
		sub := filepath.Join(tmp, fmt.Sprintf("job%d-%s", k, st.ID), "submission.csv")
		variants, err := brokenSubmissions(sub, st.Metric)
		if err != nil {
			t.Fatalf("%s: %v", st.ID, err)
		}
		names := make([]string, 0, len(variants))
		for n := range variants {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			p := filepath.Join(tmp, st.ID+"-"+n+".csv")
			if variants[n] != nil {
				if err := os.WriteFile(p, variants[n], 0o644); err != nil {
					t.Fatal(err)
				}
			}
			bad = append(bad, badCase{st.ID, n, p})
		}
	}
	var reqs []map[string]string
	for _, c := range bad {
		dir, _ := filepath.Abs(filepath.Join(suiteRoot, c.task))
		reqs = append(reqs, map[string]string{"kind": "grade", "dir": dir, "sub": c.path})
	}
	out, err := runBatch(py, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for k, c := range bad {
		res := out[k]
		var g gradeResult
		switch {
		case res.TB != "":
			t.Errorf("%s %s: grader raised:\n%s", c.task, c.name, res.TB)
		case res.Code != nil && res.Code != float64(0):
			t.Errorf("%s %s: grader exited %v, want 0", c.task, c.name, res.Code)
		case strings.Count(strings.TrimSpace(res.Out), "\n") != 0:
			t.Errorf("%s %s: grader printed %q, want one line", c.task, c.name, res.Out)
		case json.Unmarshal([]byte(res.Out), &g) != nil:
			t.Errorf("%s %s: grader printed %q, not JSON", c.task, c.name, res.Out)
		case g.Valid || g.Reason == "":
			t.Errorf("%s %s: got valid=%v reason=%q, want invalid with a reason", c.task, c.name, g.Valid, g.Reason)
		}
	}
	// One bad case through a real process: exit status 0, nothing on stderr.
	g, err := grade(context.Background(), py, suite[0], filepath.Join(tmp, "does-not-exist.csv"))
	if err != nil || g.Valid || !strings.Contains(g.Reason, "does not exist") {
		t.Errorf("%s missing file: got %+v, %v; want invalid, exit 0, reason naming the missing file", suite[0].ID, g, err)
	}
}

// brokenSubmissions derives invalid submissions from a valid one; a nil
// content means "do not write the file" (missing file).
func brokenSubmissions(path, metric string) (map[string][]byte, error) {
	f, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rows, err := csv.NewReader(bytes.NewReader(f)).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(rows) < 3 {
		return nil, fmt.Errorf("%s: only %d rows", path, len(rows))
	}
	write := func(rows [][]string) []byte {
		var b bytes.Buffer
		w := csv.NewWriter(&b)
		_ = w.WriteAll(rows)
		return b.Bytes()
	}
	clone := func() [][]string {
		out := make([][]string, len(rows))
		for k, r := range rows {
			out[k] = append([]string(nil), r...)
		}
		return out
	}
	v := map[string][]byte{"missing-file": nil, "empty-file": {}}
	r := clone()
	r[0][len(r[0])-1] = "wrong_column"
	v["wrong-columns"] = write(r)
	v["too-few-rows"] = write(clone()[:len(rows)-1])
	r = clone()
	v["too-many-rows"] = write(append(r, r[1]))
	r = clone()
	r[1][1] = "nan"
	v["nan-value"] = write(r)
	r = clone()
	r[1][0] = "no-such-id"
	v["unknown-id"] = write(r)
	r = clone()
	r[2][0] = r[1][0]
	v["duplicate-id"] = write(r)
	if metric != "accuracy" && metric != "f1_macro" || len(rows[0]) > 2 {
		r = clone()
		r[1][1] = "abc"
		v["unparsable-value"] = write(r)
	}
	return v, nil
}

// TestRealDataFailures: on real data, an edit the data cannot take fails
// where it should, and the catalog's fix for it runs: pima-diabetes keeps
// its missing values (its initial boosting model takes NaN), so swapping
// in a logistic regression fails in the training section, and imputing
// first fixes it; satellite-landcover's rows are not raw square images,
// so shift augmentation fails in the data section.
func TestRealDataFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping Python runs in -short mode")
	}
	py := python(t)
	suite := loadSuite(t)
	cases := []struct {
		task    string
		ids     []string
		failsIn string // "" when it must run and be graded
	}{
		{"pima-diabetes", []string{"data/standard-scaler", "model/logreg-c1"}, "training"},
		{"pima-diabetes", []string{"data/impute-median", "data/standard-scaler", "model/logreg-c1"}, ""},
		{"satellite-landcover", []string{"data/augment-shift-4"}, "data"},
		{"soybean-disease", []string{"data/onehot-low-cardinality-12", "model/logreg-c1"}, ""},
	}
	edits := make([]edited, len(cases))
	for k, c := range cases {
		edits[k] = edited{c.task, c.ids}
	}
	results := runEdited(t, py, suite, edits)
	for k, c := range cases {
		r := results[k]
		switch {
		case c.failsIn == "" && (r.err != nil || !r.valid):
			t.Errorf("%s + %v: want a graded run, got %v %s", c.task, c.ids, r.err, r.reason)
		case c.failsIn != "" && r.err == nil:
			t.Errorf("%s + %v: want a failure in %s, it ran (score %.4f)", c.task, c.ids, c.failsIn, r.score)
		case c.failsIn != "" && r.section != c.failsIn:
			t.Errorf("%s + %v: failed in section %q, want %q:\n%v", c.task, c.ids, r.section, c.failsIn, r.err)
		}
	}
}

func TestFailedSection(t *testing.T) {
	script := "# === imports ===\nimport x\n# === end imports ===\n\n# === data ===\na = 1\nb = 2\n# === end data ===\nprint(3)\n"
	for _, c := range []struct{ tb, want string }{
		{"Traceback (most recent call last):\n  File \"/w/train.py\", line 7, in <module>\nKeyError", "data"},
		{"  File \"<frozen runpy>\", line 88\n  File \"train.py\", line 2, in <module>\n  File \"/usr/lib/x.py\", line 9\nValueError", "imports"},
		{"  File \"train.py\", line 9, in <module>\nNameError", "outside sections"},
		{"MemoryError", "unknown"},
	} {
		if got := failedSection(script, c.tb); got != c.want {
			t.Errorf("failedSection(%q) = %q, want %q", c.tb, got, c.want)
		}
	}
}

// edited is a task and the catalog ideas applied, in order, to its
// initial script.
type edited struct {
	task string
	ids  []string
}

// runEdited applies each edit list to its task's initial script and runs
// the edited scripts (graded), in one batch interpreter.
func runEdited(t *testing.T, py string, suite []*suiteTask, edits []edited) []runResult {
	t.Helper()
	var jobs []job
	for _, e := range edits {
		st := taskByID(t, suite, e.task)
		s, err := applyIDs(st.script, e.ids...)
		if err != nil {
			t.Fatalf("%s + %v: %v", e.task, e.ids, err)
		}
		jobs = append(jobs, job{st, s})
	}
	results, err := runJobs(py, jobs, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return results
}
