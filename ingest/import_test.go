package ingest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/tasks"
	"github.com/mlerl/mlerl/schemas"
)

// writeFiles writes rel -> content under root.
func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// toyCSVs renders toyData as a Kaggle-style split: train.csv with the
// target, test.csv without it, and the answers for test.
func toyCSVs(n int, classify bool, idCol, target string) (train, test, answers string) {
	x, y := toyData(n, 3, classify)
	var tr, te, an strings.Builder
	fmt.Fprintf(&tr, "%s,f1,f2,%s\n", idCol, target)
	fmt.Fprintf(&te, "%s,f1,f2\n", idCol)
	fmt.Fprintf(&an, "%s,%s\n", idCol, target)
	for i := range x {
		label := fmt.Sprintf("%g", y[i])
		if classify {
			label = map[bool]string{true: "True", false: "False"}[y[i] == 1]
		}
		if i < n*4/5 {
			fmt.Fprintf(&tr, "p%04d,%.4f,%.4f,%s\n", i, x[i][0], x[i][1], label)
		} else {
			fmt.Fprintf(&te, "p%04d,%.4f,%.4f\n", i, x[i][0], x[i][1])
			fmt.Fprintf(&an, "p%04d,%s\n", i, label)
		}
	}
	return tr.String(), te.String(), an.String()
}

// toyTitanic returns a tabular competition with a mapped grader and a
// leaderboard as MLE-bench lays it out: its code files (the repository's
// mlebench/competitions/toy-titanic/) and its prepared data (what
// `mlebench prepare` writes under <data>/toy-titanic/prepared/).
func toyTitanic() (code, prepared map[string]string) {
	return toyTitanicOf(toyCSVs(300, true, "PassengerId", "Transported"))
}

// toyTitanicOf is toyTitanic with the given data (see toyCSVs).
func toyTitanicOf(train, test, answers string) (code, prepared map[string]string) {
	sample := "PassengerId,Transported\n"
	for _, line := range strings.Split(strings.TrimSpace(answers), "\n")[1:] {
		sample += strings.Split(line, ",")[0] + ",False\n"
	}
	code = map[string]string{
		"config.yaml": `id: toy-titanic
name: Toy Titanic
competition_type: simple
awards_medals: false
prizes: null
description: mlebench/competitions/toy-titanic/description.md

dataset:
  answers: toy-titanic/prepared/private/test.csv
  sample_submission: toy-titanic/prepared/public/sample_submission.csv

grader:
  name: accuracy
  grade_fn: mlebench.competitions.toy-titanic.grade:grade

preparer: mlebench.competitions.toy-titanic.prepare:prepare
`,
		"description.md":  "# Toy Titanic\n\nPredict whether each passenger was transported.\n",
		"grade.py":        "from mlebench.competitions.utils import prepare_for_accuracy_metric\n",
		"prepare.py":      "from mlebench.utils import read_csv\n",
		"leaderboard.csv": "scoreNullable,teamId,hasTeamName,submissionDate,score,hasScore\n0.99,1,True,2022-01-01,0.99,True\n0.9,2,True,2022-01-01,0.90,True\n0.5,3,True,2022-01-01,0.50,True\n",
	}
	// MLE-bench keeps the test rows' answers in private/test.csv.
	prepared = map[string]string{
		"public/train.csv":             train,
		"public/test.csv":              test,
		"public/sample_submission.csv": sample,
		"private/test.csv":             answers,
	}
	return code, prepared
}

// under prefixes every path of files with dir.
func under(dir string, files map[string]string) map[string]string {
	out := map[string]string{}
	for rel, c := range files {
		out[filepath.Join(dir, rel)] = c
	}
	return out
}

// mleBenchFixture writes two competitions, each with its prepared data in
// its own folder: toy-titanic, and an image one whose grader has no
// mapping and whose leaderboard is a Git LFS pointer.
func mleBenchFixture(t *testing.T) string {
	root := t.TempDir()
	code, prepared := toyTitanic()
	writeFiles(t, filepath.Join(root, "toy-titanic"), code)
	writeFiles(t, filepath.Join(root, "toy-titanic", "prepared"), prepared)
	writeFiles(t, filepath.Join(root, "toy-segmentation"), map[string]string{
		"config.yaml": `id: toy-segmentation
name: Toy Segmentation
competition_type: code
dataset:
  answers: toy-segmentation/prepared/private/test.csv
  sample_submission: toy-segmentation/prepared/public/sample_submission.csv
grader:
  name: dice-hausdorff-combo
  grade_fn: mlebench.competitions.toy-segmentation.grade:grade
`,
		"description.md":                        "# Toy Segmentation\n",
		"leaderboard.csv":                       "version https://git-lfs.github.com/spec/v1\noid sha256:e071\nsize 125841\n",
		"prepared/public/images/0001.png":       "\x89PNG",
		"prepared/public/sample_submission.csv": "id,rle\n1,1 2\n",
		"prepared/private/test.csv":             "id,rle\n1,3 4\n",
	})
	return root
}

func TestImportMLEBench(t *testing.T) {
	src, dst := mleBenchFixture(t), t.TempDir()
	got, err := ImportMLEBench(src, dst, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != "toy-segmentation" || got[1].ID != "toy-titanic" {
		t.Fatalf("got %+v, want toy-segmentation and toy-titanic", got)
	}
	titanic, err := tasks.Load(got[1].Dir)
	if err != nil {
		t.Fatalf("toy-titanic does not load: %v\n%s", err, got[1].Report())
	}
	want := tasks.Spec{ID: "toy-titanic", Title: "Toy Titanic", Modality: "tabular", TaskType: "binary-classification",
		Metric: "accuracy", Direction: schemas.HigherIsBetter, MBestSource: "MLE-bench leaderboard.csv: top of 3 teams",
		Split: schemas.HeldIn, Source: FromMLEBench, AnswerSplit: tasks.SplitStrataHash, AnswerSplitSeed: tasks.DefaultSplitSeed}
	gotSpec := titanic.Spec
	if *gotSpec.MBest != 0.99 {
		t.Errorf("got m_best %v, want 0.99 (the leaderboard's top)", *gotSpec.MBest)
	}
	gotSpec.MBest, gotSpec.TimeLimitS = nil, nil
	if gotSpec != want {
		t.Errorf("got spec %+v\nwant %+v", gotSpec, want)
	}
	if len(got[1].Missing) != 0 {
		t.Errorf("toy-titanic: got missing %q, want none", got[1].Missing)
	}
	for _, f := range []string{"workspace/train.py", "workspace/train.csv", "workspace/sample_submission.csv", "private/answers.csv", "private/grade.py", "private/grade.json"} {
		if _, err := os.Stat(filepath.Join(got[1].Dir, f)); err != nil {
			t.Errorf("toy-titanic lacks %s", f)
		}
	}
	// The unmapped competition says what to supply, file by file.
	report := got[0].Report()
	for _, w := range []string{
		`MLE-bench grader "dice-hausdorff-combo" has no mapping; set metric and direction`,
		"write private/grade.py",
		"task.yaml m_best and m_best_source: leaderboard.csv has no score column (is it a Git LFS pointer? run `git lfs pull`)",
		"task.yaml modality",
		"workspace/train.py: MLE-bench ships no initial script",
	} {
		if !strings.Contains(report, w) {
			t.Errorf("toy-segmentation report lacks %q:\n%s", w, report)
		}
	}
	// A second import keeps what exists (hand edits survive).
	again, err := ImportMLEBench(src, dst, ImportOptions{})
	if err != nil || !again[1].Kept {
		t.Errorf("got %+v, %v; want the existing folder kept", again, err)
	}
}

// TestImportMLEBenchLayouts: the importer finds competitions at any depth
// below what it is given (MLE-bench's repository root included), skipping
// what is not a competition, and their prepared data where MLE-bench puts
// it; what it cannot find it names, with every place it looked.
func TestImportMLEBenchLayouts(t *testing.T) {
	code, prepared := toyTitanic()
	// MLE-bench's repository: the code in mlebench/competitions/<id>/,
	// other config.yaml files (agents'), version control and dependencies
	// that must not be searched, and a link loop.
	repo := func(root string) {
		writeFiles(t, root, under("mlebench/competitions/toy-titanic", code))
		writeFiles(t, root, map[string]string{
			"mlebench/competitions/__init__.py":                 "",
			"mlebench/competitions/utils.py":                    "def prepare_for_accuracy_metric(): pass\n",
			"agents/aide/config.yaml":                           "aide:\n  start: aide/start.sh\n  kwargs:\n    agent.steps: 500\n",
			"environment/config/container_configs/default.json": "{}\n",
			".git/objects/config.yaml":                          code["config.yaml"],
			"node_modules/x/config.yaml":                        code["config.yaml"],
			"a/b/c/d/e/f/g/h/i/config.yaml":                     strings.Replace(code["config.yaml"], "id: toy-titanic", "id: too-deep", 1),
		})
		if err := os.Symlink(root, filepath.Join(root, "mlebench", "competitions", "loop")); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name   string
		layout func(root, data, cache string) // writes the files
		source string                         // relative to root
		data   bool                           // pass data as --mlebench-data
	}{
		{name: "repository root, data prepared beside it", source: ".", layout: func(root, data, cache string) {
			repo(root)
			writeFiles(t, root, under("data/toy-titanic/prepared", prepared))
		}},
		{name: "competitions folder next to data", source: "competitions", layout: func(root, data, cache string) {
			writeFiles(t, root, under("competitions/toy-titanic", code))
			writeFiles(t, root, under("data/toy-titanic/prepared", prepared))
		}},
		{name: "one competition, data two levels up", source: "competitions/toy-titanic", layout: func(root, data, cache string) {
			writeFiles(t, root, under("competitions/toy-titanic", code))
			writeFiles(t, root, under("data/toy-titanic/prepared", prepared))
		}},
		{name: "repository root, --mlebench-data", source: ".", data: true, layout: func(root, data, cache string) {
			repo(root)
			writeFiles(t, data, under("toy-titanic/prepared", prepared))
		}},
		{name: "repository root, MLE-bench's cache", source: ".", layout: func(root, data, cache string) {
			repo(root)
			writeFiles(t, cache, under("mle-bench/data/toy-titanic/prepared", prepared))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root, data, cache := t.TempDir(), t.TempDir(), t.TempDir()
			t.Setenv("XDG_CACHE_HOME", cache) // os.UserCacheDir
			tc.layout(root, data, cache)
			dataArg := ""
			if tc.data {
				dataArg = data
			}
			got, err := ImportMLEBench(filepath.Join(root, tc.source), t.TempDir(), ImportOptions{MLEBenchData: dataArg})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0].ID != "toy-titanic" || got[0].Err != nil || len(got[0].Missing) != 0 {
				for _, im := range got {
					t.Log(im.Report())
				}
				t.Fatalf("got %d imports, want toy-titanic alone, complete", len(got))
			}
			if b, err := os.ReadFile(filepath.Join(got[0].Dir, "private", "answers.csv")); err != nil || string(b) != prepared["private/test.csv"] {
				t.Errorf("private/answers.csv: got %d bytes, %v want the prepared answers", len(b), err)
			}
		})
	}

	t.Run("no data anywhere", func(t *testing.T) {
		root, data, cache := t.TempDir(), t.TempDir(), t.TempDir()
		t.Setenv("XDG_CACHE_HOME", cache)
		repo(root)
		got, err := ImportMLEBench(root, t.TempDir(), ImportOptions{MLEBenchData: data})
		if err != nil || len(got) != 1 || got[0].Err == nil {
			t.Fatalf("got %+v, %v want toy-titanic not imported", got, err)
		}
		comp := filepath.Join(root, "mlebench", "competitions", "toy-titanic")
		var looked []string
		for _, p := range []string{
			filepath.Join(comp, "prepared"), comp,
			filepath.Join(root, "mlebench", "competitions", "data", "toy-titanic", "prepared"),
			filepath.Join(root, "mlebench", "data", "toy-titanic", "prepared"),
			filepath.Join(root, "data", "toy-titanic", "prepared"),
			filepath.Join(filepath.Dir(root), "data", "toy-titanic", "prepared"),
			filepath.Join(data, "toy-titanic", "prepared"),
			filepath.Join(cache, "mle-bench", "data", "toy-titanic", "prepared"),
		} {
			looked = append(looked, filepath.Join(p, "public"))
		}
		want := "prepared/public/: missing (looked in " + strings.Join(looked, ", ") + "); run MLE-bench's `mlebench prepare -c toy-titanic` and give its data folder with --mlebench-data (`mlebench prepare` writes to ~/.cache/mle-bench/data unless given --data-dir), then import again"
		if got[0].Missing[0] != want {
			t.Errorf("got  %q\nwant %q", got[0].Missing[0], want)
		}
	})

	t.Run("public without private", func(t *testing.T) {
		root := t.TempDir()
		t.Setenv("XDG_CACHE_HOME", t.TempDir())
		writeFiles(t, root, under("competitions/toy-titanic", code))
		writeFiles(t, root, map[string]string{"data/toy-titanic/prepared/public/train.csv": prepared["public/train.csv"]})
		got, err := ImportMLEBench(root, t.TempDir(), ImportOptions{})
		if err != nil || len(got) != 1 || got[0].Err == nil {
			t.Fatalf("got %+v, %v want toy-titanic not imported", got, err)
		}
		want := "prepared/private/test.csv: missing beside " + filepath.Join(root, "data", "toy-titanic", "prepared", "public") + " (config.yaml dataset.answers); run `mlebench prepare -c toy-titanic`, then import again"
		if !slices.Contains(got[0].Missing, want) {
			t.Errorf("got %q\nwant it to hold %q", got[0].Missing, want)
		}
	})

	t.Run("nothing to import", func(t *testing.T) {
		root := t.TempDir()
		writeFiles(t, root, map[string]string{"agents/aide/config.yaml": "aide: {}\n", "node_modules/x/config.yaml": code["config.yaml"]})
		_, err := ImportMLEBench(root, t.TempDir(), ImportOptions{})
		want := "mlebench source " + root + ": no competition folder (one holding a config.yaml with an id and a grader) in it or below it, down to 8 levels (skipping hidden folders, node_modules, __pycache__, site-packages, venv and prepared data; links not followed); give MLE-bench's repository, its mlebench/competitions folder or one competition's folder"
		if err == nil || err.Error() != want {
			t.Errorf("got  %v\nwant %s", err, want)
		}
	})

	t.Run("too many folders", func(t *testing.T) {
		defer func(n int) { searchDirs = n }(searchDirs)
		searchDirs = 5
		root := t.TempDir()
		for i := 0; i < 6; i++ {
			writeFiles(t, root, map[string]string{fmt.Sprintf("d%d/x.txt", i): ""})
		}
		_, err := ImportMLEBench(root, t.TempDir(), ImportOptions{})
		want := "mlebench source: import source " + root + ": more than 5 folders below it (skipping hidden folders, node_modules, __pycache__, site-packages, venv and prepared data; links not followed); give the folder that holds the tasks"
		if err == nil || err.Error() != want {
			t.Errorf("got  %v\nwant %s", err, want)
		}
	})
}

func TestRunTasksFromMLEBench(t *testing.T) {
	needPython(t)
	cfg := testConfig(t, "")
	cfg.From, cfg.Source = FromMLEBench, mleBenchFixture(t)
	cfg.ImportTo = t.TempDir()
	var log bytes.Buffer
	err := runTasks(context.Background(), cfg, &log, &log)
	if !errors.Is(err, ErrSomeFailed) || !strings.Contains(err.Error(), "1 of 2 tasks failed") {
		t.Fatalf("got %v, want 1 of 2 failed; log:\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "task toy-segmentation: task.yaml: field metric: missing") {
		t.Errorf("log lacks toy-segmentation's metric error:\n%s", log.String())
	}
	_, rows := readTasks(t, cfg.Data)
	if len(rows) != 1 || rows[0].TaskID != "toy-titanic" || rows[0].Source != FromMLEBench || rows[0].MBest != 0.99 {
		t.Fatalf("got rows %+v, want toy-titanic from mlebench", rows)
	}
	if r := rows[0]; r.MInit < 0.6 || r.MInit > 1 || r.MInitValid < 0.6 || r.MInitValid > 1 {
		t.Errorf("got m_init %v, m_init_valid %v, want both in [0.6, 1]", r.MInit, r.MInitValid)
	}
}

// TestRunTasksFromMLEBenchRepository: `mlerl ingest tasks --from mlebench
// <MLE-bench checkout> --mlebench-data <its data folder>` ingests the
// prepared competition.
func TestRunTasksFromMLEBenchRepository(t *testing.T) {
	needPython(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	code, prepared := toyTitanic()
	root, data := t.TempDir(), t.TempDir()
	writeFiles(t, root, under("mlebench/competitions/toy-titanic", code))
	writeFiles(t, root, map[string]string{"agents/dummy/config.yaml": "dummy:\n  start: dummy/start.sh\n"})
	writeFiles(t, data, under("toy-titanic/prepared", prepared))
	cfg := testConfig(t, "")
	cfg.From, cfg.Source, cfg.MLEBenchData, cfg.ImportTo = FromMLEBench, root, data, t.TempDir()
	var log bytes.Buffer
	if err := runTasks(context.Background(), cfg, &log, &log); err != nil {
		t.Fatalf("got %v; log:\n%s", err, log.String())
	}
	_, rows := readTasks(t, cfg.Data)
	if len(rows) != 1 || rows[0].TaskID != "toy-titanic" || rows[0].MInit < 0.6 {
		t.Fatalf("got rows %+v, want toy-titanic with m_init >= 0.6", rows)
	}
}

// mlagentBenchFixture writes a checkout with two MLAgentBench tasks: a
// house-price-like regression scored by MAE in eval.py, and a task whose
// prepare.py has not been run (no answers).
func mlagentBenchFixture(t *testing.T) string {
	train, test, answers := toyCSVs(300, false, "Id", "SalePrice")
	return mlagentBenchFixtureOf(t, train, test, answers)
}

// mlagentBenchFixtureOf is mlagentBenchFixture with house-toy's data.
func mlagentBenchFixtureOf(t *testing.T, train, test, answers string) string {
	root := t.TempDir()
	bench := filepath.Join(root, "MLAgentBench", "benchmarks")
	writeFiles(t, filepath.Join(bench, "house-toy"), map[string]string{
		"env/train.py": `import pandas as pd
from sklearn.ensemble import RandomForestRegressor
home_data = pd.read_csv('train.csv')
# ***********************************************
# In this part of the code, write and train the model on the above dataset to perform the task.
# ***********************************************
print("Validation MAE: {:,.0f}".format(valid_mae))
`,
		"env/train.csv":                train,
		"env/test.csv":                 test,
		"env/data_description.txt":     "f1, f2: measurements\n",
		"scripts/research_problem.txt": "Go through data_description.txt, then fill in train.py to train a model and iterate to improve performance.\n",
		"scripts/eval.py": `import os
import pandas as pd
def get_score(submission_folder="../env"):
    submission = pd.read_csv(os.path.join(submission_folder, "submission.csv"))
    test_data = pd.read_csv(os.path.join(os.path.dirname(__file__), 'answer.csv'))
    mae = sum(abs(submission['SalePrice'] - test_data['SalePrice']))/len(test_data['SalePrice'])
    return mae
`,
		"scripts/prepare.py": "# downloads the data with the kaggle CLI\n",
		"scripts/answer.csv": answers,
	})
	writeFiles(t, filepath.Join(bench, "unprepared"), map[string]string{
		"env/train.py":                 "import torch\n",
		"scripts/research_problem.txt": "Improve the model.\n",
		"scripts/eval.py":              "from sklearn.metrics import accuracy_score\n",
		"scripts/prepare.py":           "# downloads the data\n",
	})
	return root
}

func TestImportMLAgentBench(t *testing.T) {
	got, err := ImportMLAgentBench(mlagentBenchFixture(t), t.TempDir(), ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != "house-toy" || got[1].ID != "unprepared" {
		t.Fatalf("got %+v", got)
	}
	house := got[0]
	spec, err := os.ReadFile(filepath.Join(house.Dir, tasks.SpecFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"metric: mae\n", "direction: lower\n", "task_type: regression\n", "# m_best: <fill in>", "source: mlagentbench\n"} {
		if !strings.Contains(string(spec), w) {
			t.Errorf("house-toy task.yaml lacks %q:\n%s", w, spec)
		}
	}
	for _, f := range []string{"workspace/train.py", "workspace/train_original.py", "workspace/data_description.txt", "private/answers.csv", "private/eval.py", "private/grade.py"} {
		if _, err := os.Stat(filepath.Join(house.Dir, f)); err != nil {
			t.Errorf("house-toy lacks %s", f)
		}
	}
	script, _ := os.ReadFile(filepath.Join(house.Dir, "workspace/train.py"))
	for _, section := range []string{"imports", "data", "model", "training", "evaluate"} {
		if !strings.Contains(string(script), "# === "+section+" ===\n") || !strings.Contains(string(script), "# === end "+section+" ===\n") {
			t.Errorf("generated train.py lacks section %s", section)
		}
	}
	if len(house.Missing) != 1 || !strings.Contains(house.Missing[0], "m_best and m_best_source: MLAgentBench publishes no best score") {
		t.Errorf("house-toy: got missing %q, want only m_best", house.Missing)
	}
	// An unprepared source is not imported (a later import starts afresh).
	report := got[1].Report()
	if got[1].Err == nil || !strings.Contains(report, "not imported") || !strings.Contains(report, "scripts/answer.csv: missing; run the task's scripts/prepare.py") {
		t.Errorf("unprepared: got %v, report:\n%s", got[1].Err, report)
	}
	if _, err := os.Stat(got[1].Dir); err == nil {
		t.Errorf("unprepared: %s was written", got[1].Dir)
	}
}

func TestRunTasksFromMLAgentBench(t *testing.T) {
	needPython(t)
	cfg := testConfig(t, "")
	cfg.From, cfg.Source, cfg.ImportTo = FromMLAgentBench, mlagentBenchFixture(t), t.TempDir()
	cfg.Only = []string{"house-toy"}
	var log bytes.Buffer
	err := runTasks(context.Background(), cfg, &log, &log)
	if !errors.Is(err, ErrSomeFailed) || !strings.Contains(log.String(), "task house-toy: task.yaml: field m_best: missing") {
		t.Fatalf("got %v, want house-toy to fail on m_best; log:\n%s", err, log.String())
	}
	// Supplying what the report asked for makes the same command succeed.
	spec := filepath.Join(cfg.ImportTo, "house-toy", tasks.SpecFile)
	b, _ := os.ReadFile(spec)
	b = bytes.Replace(b, []byte("# m_best: <fill in>\n# m_best_source: <fill in>\n"), []byte("m_best: 0.3\nm_best_source: below the generator's noise level\n"), 1)
	os.WriteFile(spec, b, 0o644)
	log.Reset()
	if err := runTasks(context.Background(), cfg, &log, &log); err != nil {
		t.Fatalf("got %v after adding m_best; log:\n%s", err, log.String())
	}
	_, rows := readTasks(t, cfg.Data)
	if len(rows) != 1 || rows[0].Metric != "mae" || rows[0].Direction != schemas.LowerIsBetter || rows[0].Source != FromMLAgentBench {
		t.Fatalf("got %+v", rows)
	}
	if r := rows[0]; r.MInit < 0.3 || r.MInit > 1.5 {
		t.Errorf("got m_init %v, want a Ridge MAE in [0.3, 1.5] on noise 0.5", r.MInit)
	}
	// The importer recorded the split rule; ingest cut the answers and
	// measured m_init on each part.
	if r := rows[0]; !r.HasParts() || !strings.HasPrefix(r.AnswerSplit, tasks.SplitStrataHash) || *r.MInitPublic == *r.MInitPrivate {
		t.Errorf("got answer_split %q, parts %v; want %s with two different m_init", r.AnswerSplit, r.HasParts(), tasks.SplitStrataHash)
	}
}

// TestGeneratedGrader checks the generated CSV grader: scores against
// hand-computed values and a reason (never a crash) for bad submissions.
func TestGeneratedGrader(t *testing.T) {
	needPython(t)
	python, _ := sandbox.FindPython("")
	cases := []struct {
		name, metric, answers, submission string
		want                              float64
		reason                            string // empty: valid
	}{
		{"accuracy", "accuracy", "id,y\na,cat\nb,dog\nc,cat\nd,dog\n", "id,y\nd,dog\nc,dog\nb,dog\na,cat\n", 0.75, ""},
		{"mae", "mae", "id,y\n1,1.0\n2,2.0\n3,4.0\n", "id,y\n1,1.5\n2,2.0\n3,3.0\n", 0.5, ""},
		{"roc_auc", "roc_auc", "id,y\n1,0\n2,1\n3,0\n4,1\n", "id,y\n1,0.1\n2,0.4\n3,0.35\n4,0.8\n", 1, ""},
		{"log_loss", "log_loss", "id,y\n1,True\n2,False\n", "id,y\n1,0.5\n2,0.5\n", 0.693147, ""},
		{"missing file", "accuracy", "id,y\n1,a\n", "", 0, "no submission file"},
		{"wrong columns", "accuracy", "id,y\n1,a\n", "id,label\n1,a\n", 0, "lacks column(s) y"},
		{"wrong row count", "accuracy", "id,y\n1,a\n2,b\n", "id,y\n1,a\n", 0, "has 1 rows, want 2"},
		{"unknown ids", "accuracy", "id,y\n1,a\n2,b\n", "id,y\n1,a\n7,b\n", 0, "ids not in the test set"},
		{"nan", "rmse", "id,y\n1,1\n2,2\n", "id,y\n1,1\n2,\n", 0, "missing values"},
		{"unparsable", "rmse", "id,y\n1,1\n2,2\n", "id,y\n1,1\n2,abc\n", 0, "non-numeric"},
		{"not a csv", "rmse", "id,y\n1,1\n", "\x00\x01\"unclosed\n", 0, ""},
	}
	grader, _ := templatesFS.ReadFile("templates/grade.py")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			files := map[string]string{
				"private/grade.py":    string(grader),
				"private/grade.json":  fmt.Sprintf(`{"id_column": "id", "target_columns": ["y"], "metric": %q}`, c.metric),
				"private/answers.csv": c.answers,
			}
			if c.submission != "" {
				files["submission.csv"] = c.submission
			}
			writeFiles(t, dir, files)
			g, err := tasks.RunGrader(context.Background(), python, filepath.Join(dir, "private"), filepath.Join(dir, "submission.csv"))
			if err != nil {
				t.Fatalf("grader failed: %v", err)
			}
			switch {
			case c.name == "not a csv":
				if g.Valid {
					t.Errorf("got %+v, want invalid", g)
				}
			case c.reason != "":
				if g.Valid || !strings.Contains(g.Reason, c.reason) {
					t.Errorf("got %+v, want invalid with reason containing %q", g, c.reason)
				}
			case !g.Valid || math.Abs(g.Score-c.want) > 1e-6:
				t.Errorf("got %+v, want score %v", g, c.want)
			}
		})
	}
	// With parts.csv: each part scored on its own rows.
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"private/grade.py":    string(grader),
		"private/grade.json":  `{"id_column": "id", "target_columns": ["y"], "metric": "mae"}`,
		"private/answers.csv": "id,y\n1,1.0\n2,2.0\n3,4.0\n4,0.0\n",
		"private/parts.csv":   "id,part\n1,public\n2,private\n3,private\n4,public\n",
		"submission.csv":      "id,y\n4,1.0\n3,3.0\n2,2.0\n1,1.5\n",
	})
	g, err := tasks.RunGrader(context.Background(), python, filepath.Join(dir, "private"), filepath.Join(dir, "submission.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if !g.Valid || math.Abs(g.Score-0.625) > 1e-9 || g.Public == nil || math.Abs(*g.Public-0.75) > 1e-9 || math.Abs(*g.Private-0.5) > 1e-9 {
		t.Errorf("parts: got %+v (public %s, private %s), want mae 0.625, public 0.75 (ids 1, 4), private 0.5 (ids 2, 3)", g, fmtp(g.Public), fmtp(g.Private))
	}
}

func TestMetricMapping(t *testing.T) {
	cases := []struct{ grader, metric, direction string }{
		{"accuracy", "accuracy", schemas.HigherIsBetter},
		{"auc-roc", "roc_auc", schemas.HigherIsBetter},
		{"multi-class-log-loss", "log_loss", schemas.LowerIsBetter},
		{"root-mean-squared-error", "rmse", schemas.LowerIsBetter},
		{"root_mean_squared_error", "rmse", schemas.LowerIsBetter},
		{"mean-absolute-error", "mae", schemas.LowerIsBetter},
		{"macro-f1-score", "f1_macro", schemas.HigherIsBetter},
		{"quadratic-weighted-kappa", "qwk", schemas.HigherIsBetter},
		{"top-1-classification-error", "error_rate", schemas.LowerIsBetter},
		{"mean-column-wise-rmsle", "rmsle", schemas.LowerIsBetter},
		{"dice-hausdorff-combo", "", ""},
	}
	for _, c := range cases {
		m, ok := lookupMetric(c.grader)
		if ok != (c.metric != "") || m.name != c.metric || m.direction != c.direction {
			t.Errorf("%s: got %+v %v, want %s %s", c.grader, m, ok, c.metric, c.direction)
		}
	}
	code := []struct{ src, want string }{
		{"mae = sum(abs(submission['SalePrice'] - test_data['SalePrice']))/len(test_data)", "mae"},
		{"from sklearn.metrics import accuracy_score", "accuracy"},
		{"rmse = np.sqrt(mean_squared_error(y, p))", "rmse"},
		{"f1_score(y, p, average='macro')", "f1_macro"},
		{"roc_auc_score(y, p)", "roc_auc"},
		{"print(time.time() - start)", ""},
	}
	for _, c := range code {
		if got, _ := metricFromCode(c.src); got != c.want {
			t.Errorf("metricFromCode(%q): got %q, want %q", c.src, got, c.want)
		}
	}
}

func TestTaskType(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a.csv": "id,y,z\n1,a,0\n2,b,1\n3,c,0\n"})
	answers := filepath.Join(dir, "a.csv")
	acc, _ := lookupMetric("accuracy")
	ll, _ := lookupMetric("log_loss")
	rmse, _ := lookupMetric("rmse")
	cases := []struct {
		m       metricInfo
		targets []string
		want    string
	}{
		{acc, []string{"y"}, "multiclass-classification"},
		{acc, []string{"z"}, "binary-classification"},
		{acc, []string{"y", "z"}, "multilabel-classification"},
		{ll, []string{"y", "z"}, "multiclass-classification"},
		{rmse, []string{"z"}, "regression"},
	}
	for _, c := range cases {
		if got := taskType(c.m, answers, c.targets); got != c.want {
			t.Errorf("taskType(%s, %v): got %s, want %s", c.m.name, c.targets, got, c.want)
		}
	}
}

// toyNonlinearCSVs is toyCSVs with a target a linear model cannot fit (the
// product of the two features, its sign for classification) and trees
// can: the generated baseline (logistic regression or ridge) leaves room
// that the catalog search finds.
func toyNonlinearCSVs(n int, classify bool, idCol, target string) (train, test, answers string) {
	x, _ := toyData(n, 5, false)
	r := rand.New(rand.NewPCG(11, 13))
	var tr, te, an strings.Builder
	fmt.Fprintf(&tr, "%s,f1,f2,%s\n", idCol, target)
	fmt.Fprintf(&te, "%s,f1,f2\n", idCol)
	fmt.Fprintf(&an, "%s,%s\n", idCol, target)
	for i := range x {
		v := 3*x[i][0]*x[i][1] + 0.3*r.NormFloat64()
		label := fmt.Sprintf("%.4f", v)
		if classify {
			label = map[bool]string{true: "True", false: "False"}[v > 0]
		}
		if i < n*4/5 {
			fmt.Fprintf(&tr, "p%04d,%.4f,%.4f,%s\n", i, x[i][0], x[i][1], label)
		} else {
			fmt.Fprintf(&te, "p%04d,%.4f,%.4f\n", i, x[i][0], x[i][1])
			fmt.Fprintf(&an, "p%04d,%s\n", i, label)
		}
	}
	return tr.String(), te.String(), an.String()
}

var measuredSource = regexp.MustCompile(`^measured \(catalog search, [1-6] scripts, \d{4}-\d{2}-\d{2}\): [a-z]+/\S+`)

// TestRunTasksMeasureMBest: an MLE-bench competition whose leaderboard.csv
// is a Git LFS pointer (a plain clone) and an MLAgentBench task (which
// publishes no best score), each in its repository's layout, import and
// ingest with --m_best measure and no hand edit: the catalog search
// measures m_best on the generated baseline, and the row says how. A
// leaderboard that is there still gives m_best.
func TestRunTasksMeasureMBest(t *testing.T) {
	needPython(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	const lfsPointer = "version https://git-lfs.github.com/spec/v1\noid sha256:e071\nsize 125841\n"
	cases := []struct {
		name   string
		setup  func(cfg *TasksConfig)
		id     string
		source *regexp.Regexp // of m_best_source
	}{
		{"mlebench, leaderboard a Git LFS pointer", func(cfg *TasksConfig) {
			code, prepared := toyTitanicOf(toyNonlinearCSVs(300, true, "PassengerId", "Transported"))
			code["leaderboard.csv"] = lfsPointer
			root, data := t.TempDir(), t.TempDir()
			writeFiles(t, root, under("mlebench/competitions/toy-titanic", code))
			writeFiles(t, data, under("toy-titanic/prepared", prepared))
			cfg.From, cfg.Source, cfg.MLEBenchData = FromMLEBench, root, data
		}, "toy-titanic", measuredSource},
		{"mlagentbench", func(cfg *TasksConfig) {
			train, test, answers := toyNonlinearCSVs(300, false, "Id", "SalePrice")
			cfg.From, cfg.Source, cfg.Only = FromMLAgentBench, mlagentBenchFixtureOf(t, train, test, answers), []string{"house-toy"}
		}, "house-toy", measuredSource},
		{"mlebench, leaderboard present", func(cfg *TasksConfig) {
			code, prepared := toyTitanic()
			root := t.TempDir()
			writeFiles(t, root, under("competitions/toy-titanic", code))
			writeFiles(t, root, under("data/toy-titanic/prepared", prepared))
			cfg.From, cfg.Source = FromMLEBench, root
		}, "toy-titanic", regexp.MustCompile(`^MLE-bench leaderboard.csv: top of 3 teams$`)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(t, "")
			cfg.ImportTo, cfg.MBest, cfg.MeasureScripts = t.TempDir(), "measure", 6
			c.setup(&cfg)
			var log bytes.Buffer
			if err := runTasks(context.Background(), cfg, &log, &log); err != nil {
				t.Fatalf("got %v; log:\n%s", err, log.String())
			}
			_, rows := readTasks(t, cfg.Data)
			if len(rows) != 1 || rows[0].TaskID != c.id {
				t.Fatalf("got rows %+v, want %s", rows, c.id)
			}
			r := rows[0]
			if !c.source.MatchString(r.MBestSource) {
				t.Errorf("got m_best_source %q, want it to match %s", r.MBestSource, c.source)
			}
			better := r.MBest > r.MInit
			if r.Direction == schemas.LowerIsBetter {
				better = r.MBest < r.MInit
			}
			if !better {
				t.Errorf("got m_best %v, m_init %v (%s is better): m_best must be better", r.MBest, r.MInit, r.Direction)
			}
			measured := strings.HasPrefix(r.MBestSource, "measured")
			spec, _ := os.ReadFile(filepath.Join(cfg.ImportTo, c.id, tasks.SpecFile))
			if strings.Contains(string(spec), "\nm_best: measure\n") != measured {
				t.Errorf("imported task.yaml says m_best: measure: %v, want %v:\n%s", !measured, measured, spec)
			}
			if note := "m_best " + strconv.FormatFloat(r.MBest, 'g', -1, 64) + " measured by the catalog search"; strings.Contains(log.String(), note) != measured {
				t.Errorf("log mentions %q: %v, want %v; log:\n%s", note, !measured, measured, log.String())
			}
		})
	}
}

// TestMeasureMBestInTaskYAML: `m_best: measure` in task.yaml asks for the
// search without the flag; a task the search has no edits for, and a
// train.py without sections, are refused in one line each that says to
// set m_best by hand (internal/tasks TestMeasure has the other cases).
func TestMeasureMBestInTaskYAML(t *testing.T) {
	needPython(t)
	suite := t.TempDir()
	measure := func(id string) string {
		dir := fixtureTask(t, suite, id, "rmse")
		replaceIn(dir, tasks.SpecFile, "m_best: 0.3\nm_best_source: noise level of the generator\n", "m_best: measure\n")
		return dir
	}
	nonlinear := measure("toy-nonlinear")
	train, test, answers := toyNonlinearCSVs(300, false, "id", "target")
	write(nonlinear, "workspace/train.csv", train)
	write(nonlinear, "workspace/test.csv", test)
	write(nonlinear, "private/answers.csv", answers)
	audio := measure("toy-audio")
	replaceIn(audio, tasks.SpecFile, "modality: tabular", "modality: audio")
	unsectioned := measure("toy-unsectioned")
	replaceIn(unsectioned, "workspace/train.py", "# === model ===\n", "")

	cfg := testConfig(t, suite)
	cfg.MeasureScripts = 5
	var log bytes.Buffer
	err := runTasks(context.Background(), cfg, &log, &log)
	if !errors.Is(err, ErrSomeFailed) || !strings.Contains(err.Error(), "2 of 3 tasks failed") {
		t.Fatalf("got %v, want 2 of 3 failed; log:\n%s", err, log.String())
	}
	for _, want := range []string{
		"task toy-audio: task.yaml: field m_best: measure: the catalog search has no edits for audio tasks (it knows tabular, image, text, time-series and graph ones); set m_best (and m_best_source) in task.yaml by hand",
		"task toy-unsectioned: task.yaml: field m_best: measure: the catalog search edits the sections of workspace/train.py, and section \"model\" not found (the script has no \"# === model ===\" line); set m_best by hand",
	} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
	_, rows := readTasks(t, cfg.Data)
	if len(rows) != 1 || rows[0].TaskID != "toy-nonlinear" || !measuredSource.MatchString(rows[0].MBestSource) || !(rows[0].MBest < rows[0].MInit) {
		t.Fatalf("got rows %+v, want toy-nonlinear with a measured m_best below m_init", rows)
	}
}

// standInMLEBench writes, under root, a stand-in for MLE-bench's package
// with the real one's module layout (mlebench.grade_helpers'
// InvalidSubmissionError, mlebench.competitions.utils, and toy-titanic's
// grade module named by config.yaml's grade_fn), for PYTHONPATH. Its
// grade function appends a line to $MLEBENCH_STANDIN_LOG, so a test can
// tell it ran, and has two columns that make it misbehave: "nan" returns
// NaN, "boom" raises KeyError.
func standInMLEBench(t *testing.T, root string) {
	writeFiles(t, root, map[string]string{
		"mlebench/__init__.py":              "",
		"mlebench/grade_helpers.py":         "class InvalidSubmissionError(Exception):\n    pass\n",
		"mlebench/competitions/__init__.py": "",
		"mlebench/competitions/utils.py": `from mlebench.grade_helpers import InvalidSubmissionError


def prepare_for_accuracy_metric(submission, answers, target_column, id_column):
    for c in (id_column, target_column):
        if c not in submission.columns:
            raise InvalidSubmissionError("Submission is missing the column %s" % c)
    if len(submission) != len(answers):
        raise InvalidSubmissionError("Submission has %d rows, the answers %d" % (len(submission), len(answers)))
    sub = submission.sort_values(id_column).reset_index(drop=True)
    ans = answers.sort_values(id_column).reset_index(drop=True)
    if (sub[id_column].astype(str).values != ans[id_column].astype(str).values).any():
        raise InvalidSubmissionError("Submission ids do not match the answers")
    return {"y_true": ans[target_column].astype(str), "y_pred": sub[target_column].astype(str)}
`,
		"mlebench/competitions/toy-titanic/grade.py": `import os

from sklearn.metrics import accuracy_score

from mlebench.competitions.utils import prepare_for_accuracy_metric


def grade(submission, answers):
    log = os.environ.get("MLEBENCH_STANDIN_LOG")
    if log:
        with open(log, "a") as f:
            f.write("graded\n")
    if "nan" in submission.columns:
        return float("nan")
    if "boom" in submission.columns:
        raise KeyError("boom")
    return accuracy_score(**prepare_for_accuracy_metric(submission, answers, "Transported", "PassengerId"))
`,
	})
}

// TestMLEBenchGrader runs the grader --grader mlebench writes against the
// stand-in package: the grade function's score (rounded as MLE-bench
// rounds it), its InvalidSubmissionError and other exceptions, a NaN and a
// missing file as invalid verdicts with a reason, and an interpreter
// without the package as a broken grader environment (exit 2).
func TestMLEBenchGrader(t *testing.T) {
	needPython(t)
	python, _ := sandbox.FindPython("")
	pkg := t.TempDir()
	standInMLEBench(t, pkg)
	src, _ := templatesFS.ReadFile("templates/grade_mlebench.py")
	answers := "PassengerId,Transported\na,True\nb,False\nc,True\n"
	cases := []struct {
		name, submission string
		want             float64
		reason           string // empty: valid
	}{
		{"score", "PassengerId,Transported\nc,True\na,False\nb,False\n", 0.66667, ""},
		{"invalid submission", "PassengerId,label\na,True\nb,False\nc,True\n", 0, "invalid submission (Submission is missing the column Transported)"},
		{"empty file", "\n", 0, "invalid submission (Submission is missing the column PassengerId)"},
		{"grade function raises", "PassengerId,Transported,boom\na,True,1\nb,False,1\nc,True,1\n", 0, "toy-titanic's grade function failed on the submission: KeyError: 'boom'"},
		{"grade function returns nan", "PassengerId,Transported,nan\na,True,1\nb,False,1\nc,True,1\n", 0, "the grade function returned nan"},
		{"no file", "", 0, "no submission file submission.csv"},
	}
	dirFor := func(t *testing.T, submission string) string {
		dir := t.TempDir()
		files := map[string]string{
			"private/grade.py":    string(src),
			"private/grade.json":  `{"competition": "toy-titanic", "grade_fn": "mlebench.competitions.toy-titanic.grade:grade", "answers": "csv"}`,
			"private/answers.csv": answers,
		}
		if submission != "" {
			files["submission.csv"] = submission
		}
		writeFiles(t, dir, files)
		return dir
	}
	t.Setenv("PYTHONPATH", pkg)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := dirFor(t, c.submission)
			g, err := tasks.RunGrader(context.Background(), python, filepath.Join(dir, "private"), filepath.Join(dir, "submission.csv"))
			if err != nil {
				t.Fatalf("grader failed: %v", err)
			}
			if c.reason != "" {
				if g.Valid || g.Reason != c.reason {
					t.Errorf("got %+v, want invalid with reason %q", g, c.reason)
				}
			} else if !g.Valid || g.Score != c.want {
				t.Errorf("got %+v, want score %v", g, c.want)
			}
		})
	}
	// With parts.csv, the grade function scores each part's answers and
	// the submission's rows with those ids.
	t.Run("parts", func(t *testing.T) {
		dir := dirFor(t, "PassengerId,Transported\nc,True\na,False\nb,False\n")
		writeFiles(t, dir, map[string]string{"private/parts.csv": "id,part\na,public\nb,private\nc,private\n"})
		g, err := tasks.RunGrader(context.Background(), python, filepath.Join(dir, "private"), filepath.Join(dir, "submission.csv"))
		if err != nil {
			t.Fatal(err)
		}
		if !g.Valid || g.Score != 0.66667 || g.Public == nil || *g.Public != 0 || *g.Private != 1 {
			t.Errorf("got %+v (public %v, private %v), want 0.66667 with public 0 (a wrong) and private 1 (b, c right)", g, fmtp(g.Public), fmtp(g.Private))
		}
		writeFiles(t, dir, map[string]string{"private/parts.csv": "id,part\nb,public\na,private\nc,private\n"})
		if _, err := tasks.RunGrader(context.Background(), python, filepath.Join(dir, "private"), filepath.Join(dir, "submission.csv")); err == nil || !strings.Contains(err.Error(), "does not list the answers' ids") {
			t.Errorf("parts in another order: got %v, want the grader to refuse them (exit 2)", err)
		}
	})
	t.Run("mlebench not installed", func(t *testing.T) {
		t.Setenv("PYTHONPATH", t.TempDir())
		dir := dirFor(t, cases[0].submission)
		_, err := tasks.RunGrader(context.Background(), python, filepath.Join(dir, "private"), filepath.Join(dir, "submission.csv"))
		if err == nil || !strings.Contains(err.Error(), "exit status 2") || !strings.Contains(err.Error(), "mlebench grader: cannot import mlebench.competitions.toy-titanic.grade:grade from the mlebench package") {
			t.Errorf("got %v, want exit 2 saying mlebench cannot be imported", err)
		}
	})
}

// TestRunTasksMLEBenchGrader: `ingest tasks --from mlebench --grader
// mlebench` on a competition in MLE-bench's layout writes MLE-bench's own
// grader, and the stage grades the initial script with the competition's
// grade function (the stand-in package on PYTHONPATH says it ran); with
// no mlebench importable, the stage refuses to start, in one line.
func TestRunTasksMLEBenchGrader(t *testing.T) {
	needPython(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	code, prepared := toyTitanic()
	root := t.TempDir()
	writeFiles(t, root, under("mlebench/competitions/toy-titanic", code))
	writeFiles(t, root, under("data/toy-titanic/prepared", prepared))
	cfg := testConfig(t, "")
	cfg.From, cfg.Source, cfg.ImportTo, cfg.Grader = FromMLEBench, root, t.TempDir(), GraderMLEBench
	// The environment's warm grader is one process per interpreter path,
	// started with the environment of its time: a path of its own gives
	// this test one that sees the PYTHONPATH set below.
	python, _ := sandbox.FindPython("")
	cfg.Python = filepath.Join(t.TempDir(), "python3")
	if err := os.Symlink(python, cfg.Python); err != nil {
		t.Fatal(err)
	}

	t.Setenv("PYTHONPATH", t.TempDir())
	var log bytes.Buffer
	err := runTasks(context.Background(), cfg, &log, &log)
	if err == nil || !strings.HasPrefix(err.Error(), "ingest tasks: --grader mlebench: ") || !strings.Contains(err.Error(), "cannot import the mlebench package (ModuleNotFoundError: No module named 'mlebench'): install MLE-bench's package") {
		t.Fatalf("without mlebench: got %v", err)
	}

	pkg := t.TempDir()
	standInMLEBench(t, pkg)
	t.Setenv("PYTHONPATH", pkg)
	calls := filepath.Join(t.TempDir(), "calls")
	t.Setenv("MLEBENCH_STANDIN_LOG", calls)
	if err := runTasks(context.Background(), cfg, &log, &log); err != nil {
		t.Fatalf("got %v; log:\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "private/grade.py: MLE-bench's own grader, calling mlebench.competitions.toy-titanic.grade:grade through the mlebench package") {
		t.Errorf("the import log does not say which grader it wrote:\n%s", log.String())
	}
	if b, err := os.ReadFile(calls); err != nil || !strings.Contains(string(b), "graded") {
		t.Errorf("the competition's grade function did not run (%v)", err)
	}
	_, rows := readTasks(t, cfg.Data)
	if len(rows) != 1 || rows[0].MInit < 0.6 || rows[0].MInit > 1 || rows[0].MBest != 0.99 {
		t.Fatalf("got rows %+v, want toy-titanic with m_init in [0.6, 1] and the leaderboard's m_best", rows)
	}
}

// runnableOriginal is an MLAgentBench-style train.py (no sections, no
// VAL_METRIC line) that runs as it is.
const runnableOriginal = `import pandas as pd
from sklearn.ensemble import RandomForestRegressor
from sklearn.metrics import mean_absolute_error
from sklearn.model_selection import train_test_split

home_data = pd.read_csv('train.csv')
y = home_data.SalePrice
features = ['f1', 'f2']
train_X, valid_X, train_y, valid_y = train_test_split(home_data[features], y, random_state=1)
model = RandomForestRegressor(n_estimators=20, random_state=1).fit(train_X, train_y)
print("Validation MAE: {:,.2f}".format(mean_absolute_error(valid_y, model.predict(valid_X))))
test_data = pd.read_csv('test.csv')
pd.DataFrame({'Id': test_data.Id, 'SalePrice': model.predict(test_data[features])}).to_csv('submission.csv', index=False)
`

// TestRunTasksInitialOriginal: --initial original keeps MLAgentBench's
// own train.py as the initial script (m_init is its graded submission; it
// prints no VAL_METRIC), records initial: original in task.yaml and the
// row, and --m_best measure searches the generated sectioned copy in
// private/. An original that does not run as it is (MLAgentBench's
// templates leave the model to be written) is refused saying what to do.
func TestRunTasksInitialOriginal(t *testing.T) {
	needPython(t)
	t.Run("runs as it is", func(t *testing.T) {
		src := mlagentBenchFixture(t)
		writeFiles(t, filepath.Join(src, "MLAgentBench", "benchmarks", "house-toy"), map[string]string{"env/train.py": runnableOriginal})
		cfg := testConfig(t, "")
		cfg.From, cfg.Source, cfg.ImportTo, cfg.Only = FromMLAgentBench, src, t.TempDir(), []string{"house-toy"}
		cfg.Initial, cfg.MBest, cfg.MeasureScripts = schemas.InitialOriginal, "measure", 4
		var log bytes.Buffer
		if err := runTasks(context.Background(), cfg, &log, &log); err != nil {
			t.Fatalf("got %v; log:\n%s", err, log.String())
		}
		_, rows := readTasks(t, cfg.Data)
		if len(rows) != 1 {
			t.Fatalf("got %d rows", len(rows))
		}
		r := rows[0]
		if r.Initial != schemas.InitialOriginal || !math.IsNaN(r.MInitValid) || !(r.MInit > 0) || !(r.MBest < r.MInit) || !measuredSource.MatchString(r.MBestSource) {
			t.Errorf("got initial %q, m_init_valid %v, m_init %v, m_best %v (%s); want original, NaN, a graded MAE, a measured m_best below it", r.Initial, r.MInitValid, r.MInit, r.MBest, r.MBestSource)
		}
		dir := filepath.Join(cfg.ImportTo, "house-toy")
		if b, _ := os.ReadFile(filepath.Join(dir, "workspace", "train.py")); string(b) != runnableOriginal {
			t.Errorf("workspace/train.py is not MLAgentBench's own:\n%s", b)
		}
		if _, err := os.Stat(filepath.Join(dir, "workspace", "train_original.py")); err == nil {
			t.Error("workspace/train_original.py written: the original is train.py itself")
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "private", sectionedFile)); !strings.Contains(string(b), "# === end evaluate ===") {
			t.Errorf("private/%s is not the sectioned baseline", sectionedFile)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, tasks.SpecFile)); !strings.Contains(string(b), "\ninitial: original\n") {
			t.Errorf("task.yaml does not say initial: original:\n%s", b)
		}
	})
	t.Run("does not run", func(t *testing.T) {
		cfg := testConfig(t, "")
		cfg.From, cfg.Source, cfg.ImportTo, cfg.Only = FromMLAgentBench, mlagentBenchFixture(t), t.TempDir(), []string{"house-toy"}
		cfg.Initial, cfg.MBest = schemas.InitialOriginal, "measure"
		var log bytes.Buffer
		err := runTasks(context.Background(), cfg, &log, &log)
		want := "; it is the benchmark's own script (task.yaml initial: original), which must run as it is to measure m_init: complete it, or import the task with --initial generated"
		if !errors.Is(err, ErrSomeFailed) || !strings.Contains(log.String(), "task house-toy: workspace/train.py: crashed (exit 1): ") || !strings.Contains(log.String(), want) {
			t.Errorf("got %v; log:\n%s", err, log.String())
		}
	})
}

// TestImportHostileSources: a source tree is not trusted to be tidy. A
// named pipe never hangs the import, no symbolic link leads it to copy a
// file from outside the folder it copies (the host's files, or the hidden
// answers into the public data), a config.yaml id never names a path, and
// two sources with one task id are told apart; each such fault is named in
// its task's report (not imported, or a MISSING line) while the other
// tasks import as usual.
func TestImportHostileSources(t *testing.T) {
	const secret = "HOST-SECRET"
	link := func(t *testing.T, target, name string) {
		t.Helper()
		os.Remove(name)
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, name); err != nil {
			t.Fatal(err)
		}
	}
	fifo := func(t *testing.T, name string) {
		t.Helper()
		os.Remove(name)
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mkfifo(name, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, prepared := toyTitanic()
	// The competition is competitions/toy-titanic (data in prepared/), the
	// MLAgentBench task MLAgentBench/benchmarks/house-toy; outside holds
	// the host's files, none of which may reach the task folders.
	const comp, house = "competitions/toy-titanic", "MLAgentBench/benchmarks/house-toy"
	hostAnswers := "PassengerId,Transported\n" + secret + ",True\n"
	cases := []struct {
		name   string
		from   string
		layout func(t *testing.T, root, outside string)
		source string            // the task checked, relative to the source root
		err    string            // in its report when it is not imported
		report string            // else in its report ("": imported with nothing missing)
		has    map[string]string // file of the task folder -> a line it holds
	}{
		{name: "config.yaml elsewhere is a named pipe", from: FromMLEBench, source: comp, layout: func(t *testing.T, root, outside string) {
			fifo(t, filepath.Join(root, "agents", "aide", "config.yaml"))
		}},
		{name: "description.md links to a host file", from: FromMLEBench, source: comp, layout: func(t *testing.T, root, outside string) {
			link(t, filepath.Join(outside, "secret.txt"), filepath.Join(root, comp, "description.md"))
		}, report: "description.md is a symbolic link to " + "OUTSIDE/secret.txt, outside"},
		{name: "leaderboard.csv is a named pipe", from: FromMLEBench, source: comp, layout: func(t *testing.T, root, outside string) {
			fifo(t, filepath.Join(root, comp, "leaderboard.csv"))
		}, report: "leaderboard.csv is a named pipe (FIFO), not a regular file"},
		{name: "a leaderboard with a byte order mark and a NaN", from: FromMLEBench, source: comp, layout: func(t *testing.T, root, outside string) {
			writeFiles(t, filepath.Join(root, comp), map[string]string{"leaderboard.csv": "\ufeffscore,teamId\nnan,0\n0.99,1\n0.9,2\n0.5,3\n,4\n"})
		}, has: map[string]string{"task.yaml": "m_best: 0.99\nm_best_source: 'MLE-bench leaderboard.csv: top of 3 teams'\n"}},
		{name: "train.csv is a named pipe", from: FromMLEBench, source: comp, layout: func(t *testing.T, root, outside string) {
			fifo(t, filepath.Join(root, comp, "prepared", "public", "train.csv"))
		}, err: "prepared/public/: train.csv (a named pipe (FIFO)) not copied"},
		{name: "a public file links to the hidden answers", from: FromMLEBench, source: comp, layout: func(t *testing.T, root, outside string) {
			link(t, "../private/test.csv", filepath.Join(root, comp, "prepared", "public", "leak.csv"))
		}, err: "leak.csv (a symbolic link to ../private/test.csv, outside the folder) not copied"},
		{name: "public files link in a loop", from: FromMLEBench, source: comp, layout: func(t *testing.T, root, outside string) {
			link(t, "b.csv", filepath.Join(root, comp, "prepared", "public", "a.csv"))
			link(t, "a.csv", filepath.Join(root, comp, "prepared", "public", "b.csv"))
		}, err: "a.csv (a symbolic link that leads nowhere"},
		{name: "a public file links inside the folder", from: FromMLEBench, source: comp, layout: func(t *testing.T, root, outside string) {
			link(t, "train.csv", filepath.Join(root, comp, "prepared", "public", "train_copy.csv"))
		}, has: map[string]string{"workspace/train_copy.csv": "PassengerId,f1,f2,Transported\n"}},
		{name: "public/ links to a host folder", from: FromMLEBench, source: comp, layout: func(t *testing.T, root, outside string) {
			pub := filepath.Join(root, comp, "prepared", "public")
			writeFiles(t, filepath.Join(outside, "public"), map[string]string{"train.csv": prepared["public/train.csv"], "test.csv": prepared["public/test.csv"],
				"sample_submission.csv": prepared["public/sample_submission.csv"], "secret.txt": secret})
			os.RemoveAll(pub)
			link(t, filepath.Join(outside, "public"), pub)
		}, err: "prepared/public/: " + "ROOT/" + comp + "/prepared/public is a symbolic link to OUTSIDE/public"},
		{name: "the answers link to a host file", from: FromMLEBench, source: comp, layout: func(t *testing.T, root, outside string) {
			link(t, filepath.Join(outside, "answers.csv"), filepath.Join(root, comp, "prepared", "private", "test.csv"))
		}, err: "prepared/private/test.csv is a symbolic link to OUTSIDE/answers.csv, outside"},
		{name: "config.yaml id climbs out to a host folder", from: FromMLEBench, source: comp, layout: func(t *testing.T, root, outside string) {
			os.RemoveAll(filepath.Join(root, comp, "prepared"))
			writeFiles(t, filepath.Join(outside, "victim", "prepared"), map[string]string{
				"public/train.csv": prepared["public/train.csv"], "public/test.csv": prepared["public/test.csv"],
				"public/sample_submission.csv": prepared["public/sample_submission.csv"], "public/secret.txt": secret,
				"private/test.csv": prepared["private/test.csv"]})
			up, _ := filepath.Rel(filepath.Join(root, "competitions", "data"), filepath.Join(outside, "victim"))
			writeFiles(t, filepath.Join(root, comp), map[string]string{"config.yaml": strings.Replace(code["config.yaml"], "id: toy-titanic", "id: "+up, 1)})
		}, err: "config.yaml id \"../"},
		{name: "config.yaml id and folder give no task id", from: FromMLEBench, source: "competitions/日本語", layout: func(t *testing.T, root, outside string) {
			writeFiles(t, filepath.Join(root, "competitions", "日本語"), under("prepared", prepared))
			writeFiles(t, filepath.Join(root, "competitions", "日本語"), map[string]string{"config.yaml": strings.Replace(code["config.yaml"], "id: toy-titanic", "id: 日本語", 1)})
		}, err: "config.yaml id \"日本語\" and the folder's name give no task id"},
		{name: "the same competition twice", from: FromMLEBench, source: "competitions/zz-copy", layout: func(t *testing.T, root, outside string) {
			writeFiles(t, filepath.Join(root, "competitions", "zz-copy"), code)
			writeFiles(t, filepath.Join(root, "competitions", "zz-copy", "prepared"), prepared)
		}, err: "task id toy-titanic is also the id of ROOT/" + comp},
		{name: "ids equal once lower-cased", from: FromMLEBench, source: comp, layout: func(t *testing.T, root, outside string) {
			writeFiles(t, filepath.Join(root, "competitions", "Toy-Titanic"), map[string]string{"config.yaml": strings.Replace(code["config.yaml"], "id: toy-titanic", "id: Toy-Titanic", 1)})
			writeFiles(t, filepath.Join(root, "competitions", "Toy-Titanic", "prepared"), prepared)
		}, err: "task id toy-titanic is also the id of ROOT/competitions/Toy-Titanic"},

		{name: "env/ links to a host folder", from: FromMLAgentBench, source: house, layout: func(t *testing.T, root, outside string) {
			env := filepath.Join(root, house, "env")
			os.Rename(env, filepath.Join(outside, "env"))
			writeFiles(t, filepath.Join(outside, "env"), map[string]string{"secret.txt": secret})
			link(t, filepath.Join(outside, "env"), env)
		}, err: "env/: ROOT/" + house + "/env is a symbolic link to OUTSIDE/env"},
		{name: "eval.py is a named pipe", from: FromMLAgentBench, source: house, layout: func(t *testing.T, root, outside string) {
			fifo(t, filepath.Join(root, house, "scripts", "eval.py"))
		}, report: "scripts/eval.py is a named pipe (FIFO), not a regular file"},
		{name: "the answers link to a host file", from: FromMLAgentBench, source: house, layout: func(t *testing.T, root, outside string) {
			link(t, filepath.Join(outside, "answers.csv"), filepath.Join(root, house, "scripts", "answer.csv"))
		}, err: "scripts/answer.csv is a symbolic link to OUTSIDE/answers.csv, outside"},
		{name: "research_problem.txt links to a host file", from: FromMLAgentBench, source: house, layout: func(t *testing.T, root, outside string) {
			link(t, filepath.Join(outside, "secret.txt"), filepath.Join(root, house, "scripts", "research_problem.txt"))
		}, err: "scripts/research_problem.txt is a symbolic link to OUTSIDE/secret.txt"},
		{name: "folder names that give one id", from: FromMLAgentBench, source: house, layout: func(t *testing.T, root, outside string) {
			src := filepath.Join(root, house)
			if err := os.CopyFS(filepath.Join(root, "MLAgentBench", "benchmarks", "House Toy"), os.DirFS(src)); err != nil {
				t.Fatal(err)
			}
		}, err: "task id house-toy is also the id of ROOT/MLAgentBench/benchmarks/House Toy"},
	}
	for _, tc := range cases {
		t.Run(tc.from+": "+tc.name, func(t *testing.T) {
			t.Setenv("XDG_CACHE_HOME", t.TempDir())
			outside, dst := t.TempDir(), t.TempDir()
			writeFiles(t, outside, map[string]string{"secret.txt": secret + "\n", "answers.csv": hostAnswers})
			var root string
			if tc.from == FromMLEBench {
				root = t.TempDir()
				writeFiles(t, filepath.Join(root, comp), code)
				writeFiles(t, filepath.Join(root, comp, "prepared"), prepared)
			} else {
				root = mlagentBenchFixture(t)
			}
			tc.layout(t, root, outside)
			type result struct {
				got []Imported
				err error
			}
			done := make(chan result, 1)
			go func() {
				got, err := Import(tc.from, root, dst, ImportOptions{})
				done <- result{got, err}
			}()
			var res result
			select {
			case res = <-done:
			case <-time.After(time.Minute):
				t.Fatal("the import hangs")
			}
			if res.err != nil {
				t.Fatal(res.err)
			}
			expand := strings.NewReplacer("ROOT", root, "OUTSIDE", outside)
			var im *Imported
			for i := range res.got {
				if res.got[i].Source == filepath.Join(root, tc.source) {
					im = &res.got[i]
				}
			}
			if im == nil {
				t.Fatalf("%s not among the imports %+v", tc.source, res.got)
			}
			report := im.Report()
			switch {
			case tc.err != "":
				if im.Err == nil || !strings.Contains(report, expand.Replace(tc.err)) {
					t.Errorf("got report\n%s\nwant %s not imported, with %q", report, tc.source, expand.Replace(tc.err))
				}
			case im.Err != nil || tc.report == "" && strings.Contains(report, "MISSING"):
				t.Errorf("got report\n%s\nwant %s imported with nothing missing", report, tc.source)
			case !strings.Contains(report, expand.Replace(tc.report)):
				t.Errorf("got report\n%s\nwant it to hold %q", report, expand.Replace(tc.report))
			}
			for rel, line := range tc.has {
				if b, err := os.ReadFile(filepath.Join(im.Dir, rel)); err != nil || !strings.Contains(string(b), line) {
					t.Errorf("%s: got %q, %v; want it to hold %q", rel, b, err, line)
				}
			}
			// Nothing of the host's reached any task folder.
			filepath.WalkDir(dst, func(p string, e fs.DirEntry, err error) error {
				if err == nil && e.Type().IsRegular() {
					if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(secret)) {
						t.Errorf("%s holds the host's secret", p)
					}
				}
				return nil
			})
		})
	}
}

// TestImportFromWorkingFolder: `mlerl ingest tasks --from mlebench .` in
// a checkout finds its tasks as any other folder would (the search once
// cut the first character off the paths below ".").
func TestImportFromWorkingFolder(t *testing.T) {
	code, prepared := toyTitanic()
	cases := []struct {
		name, from string
		layout     func(t *testing.T, root string) string // returns the folder to run in
		want       []string                               // the ids imported
	}{
		{name: "MLE-bench repository", from: FromMLEBench, layout: func(t *testing.T, root string) string {
			writeFiles(t, root, under("mlebench/competitions/toy-titanic", code))
			writeFiles(t, root, under("data/toy-titanic/prepared", prepared))
			return root
		}, want: []string{"toy-titanic"}},
		{name: "MLAgentBench benchmarks folder", from: FromMLAgentBench, layout: func(t *testing.T, root string) string {
			return filepath.Join(mlagentBenchFixture(t), "MLAgentBench", "benchmarks")
		}, want: []string{"house-toy", "unprepared"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("XDG_CACHE_HOME", t.TempDir())
			t.Chdir(tc.layout(t, t.TempDir()))
			got, err := Import(tc.from, ".", t.TempDir(), ImportOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, im := range got {
				ids = append(ids, im.ID)
			}
			if !slices.Equal(ids, tc.want) || got[0].Err != nil {
				t.Fatalf("got %q (%s), want %q imported", ids, got[0].Report(), tc.want)
			}
		})
	}
}

// TestImportMLEBenchBadConfig: given one competition's folder whose
// config.yaml is not a competition's, the error says what is wrong with
// it (and a named pipe in its place does not hang the import).
func TestImportMLEBenchBadConfig(t *testing.T) {
	code, _ := toyTitanic()
	cases := []struct {
		name   string
		config string // "FIFO": a named pipe
		want   string
	}{
		{"not YAML", "id: toy-titanic\ngrader: [accuracy\n", "its own config.yaml is not valid YAML: yaml: line 1: did not find expected"},
		{"empty", "", "its own config.yaml has no id"},
		{"no id", strings.Replace(code["config.yaml"], "id: toy-titanic\n", "", 1), "its own config.yaml has no id"},
		{"no grader", "id: toy-titanic\nname: Toy\n", "its own config.yaml has neither grader.name nor dataset.answers"},
		{"a named pipe", "FIFO", "its own config.yaml cannot be read: config.yaml is a named pipe (FIFO), not a regular file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.config == "FIFO" {
				if err := unix.Mkfifo(filepath.Join(dir, "config.yaml"), 0o644); err != nil {
					t.Fatal(err)
				}
			} else {
				writeFiles(t, dir, map[string]string{"config.yaml": tc.config})
			}
			done := make(chan error, 1)
			go func() {
				_, err := ImportMLEBench(dir, t.TempDir(), ImportOptions{})
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "mlebench source "+dir+": no competition folder (one holding a config.yaml with an id and a grader) in it ("+tc.want) {
					t.Errorf("got %v\nwant it to hold %q", err, tc.want)
				}
			case <-time.After(time.Minute):
				t.Fatal("the import hangs")
			}
		})
	}
}

func fmtp(p *float64) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}
