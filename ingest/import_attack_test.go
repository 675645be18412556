package ingest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/tasks"
)

// TestImportRefusesPublicAnswers: a source whose public data holds the
// hidden answers (a copy of them, or test labels a preparer left in a
// public CSV, reordered, with a byte order mark and padded values) is
// not imported, and the report names the file and how to fix it: a
// script could copy such a file to submission.csv and score perfectly.
// The sample submission (the answers' ids and columns with a constant
// guess) and train.csv (the target, other ids) are not leaks: the plain
// fixtures import (TestImportMLEBench, TestImportMLAgentBench).
func TestImportRefusesPublicAnswers(t *testing.T) {
	_, _, answers := toyCSVs(300, true, "PassengerId", "Transported")
	lines := strings.Split(strings.TrimSpace(answers), "\n")
	// The same labels, rows reversed, an extra column, a BOM, spaces.
	relabelled := "\ufeffnote,PassengerId,Transported\n"
	for i := len(lines) - 1; i >= 1; i-- {
		id, label, _ := strings.Cut(lines[i], ",")
		relabelled += "x," + id + ", " + label + " \n"
	}
	// Every label but one: not the answers (a partial leak is not caught).
	wrongOne := strings.Replace(answers, ",True\n", ",False\n", 1)
	for _, tc := range []struct {
		name, file, content string
		leak                bool
	}{
		{"a copy of the answers", "answers_copy.csv", answers, true},
		{"labels in another layout", "sub/test_labels.csv", relabelled, true},
		{"one label differs", "guess.csv", wrongOne, false},
	} {
		t.Run("mlebench/"+tc.name, func(t *testing.T) {
			src, dst := mleBenchFixture(t), t.TempDir()
			writeFiles(t, filepath.Join(src, "toy-titanic", "prepared", "public"), map[string]string{tc.file: tc.content})
			got, err := ImportMLEBench(src, dst, ImportOptions{})
			if err != nil {
				t.Fatal(err)
			}
			checkLeakRefused(t, got[1], "prepared/public/"+tc.file, tc.leak)
		})
	}
	for _, tc := range []struct {
		name, file string
		leak       bool
	}{
		{"a copy of the answers in env/", "answer.csv", true},
		{"a copy of the answers under another name", "data/labels.txt", true},
	} {
		t.Run("mlagentbench/"+tc.name, func(t *testing.T) {
			train, test, answers := toyCSVs(300, false, "Id", "SalePrice")
			src := mlagentBenchFixtureOf(t, train, test, answers)
			writeFiles(t, filepath.Join(src, "MLAgentBench", "benchmarks", "house-toy", "env"), map[string]string{tc.file: answers})
			got, err := ImportMLAgentBench(src, t.TempDir(), ImportOptions{})
			if err != nil {
				t.Fatal(err)
			}
			checkLeakRefused(t, got[0], "env/"+tc.file, tc.leak)
		})
	}
}

// checkLeakRefused: im was refused for file holding the answers (leak),
// or imported.
func checkLeakRefused(t *testing.T, im Imported, file string, leak bool) {
	t.Helper()
	report := im.Report()
	if !leak {
		if im.Err != nil {
			t.Fatalf("not a leak, but refused:\n%s", report)
		}
		return
	}
	want := file + ": holds the hidden answers"
	if im.Err == nil || !strings.Contains(report, want) || !strings.Contains(report, "remove it from") {
		t.Fatalf("got %v; want the import refused with %q:\n%s", im.Err, want, report)
	}
	if _, err := os.Stat(im.Dir); err == nil {
		t.Errorf("%s was written", im.Dir)
	}
}

// TestGeneratedGraderRefusesCostlySubmissions: the grader an import
// writes runs outside the sandbox, and a grader that crashes or does not
// finish fails the step (and with it a training batch). A submission
// built to cost it gets a quick invalid verdict with a short reason: a
// header of 200,000 repeated names (pandas' time is quadratic in them:
// past 30 s before), 6,000 distinct labels for an mcc or qwk task (a
// dense 6,000 x 6,000 confusion matrix; 20,000 asked for 3 GiB), and far
// more rows than the answers.
func TestGeneratedGraderRefusesCostlySubmissions(t *testing.T) {
	needPython(t)
	python, _ := sandbox.FindPython("")
	grader, _ := templatesFS.ReadFile("templates/grade.py")
	const n = 6000
	var answers, distinct, long strings.Builder
	answers.WriteString("id,y\n")
	distinct.WriteString("id,y\n")
	long.WriteString("id,y\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&answers, "%d,%d\n", i, i%3)
		fmt.Fprintf(&distinct, "%d,%d\n", i, i)
	}
	for i := 0; i < 50*n; i++ {
		fmt.Fprintf(&long, "%d,0\n", i)
	}
	for _, c := range []struct{ name, metric, sub, reason string }{
		{"repeated names", "accuracy", strings.Repeat("a,", 200000) + "a\n1,2\n", "more than the 1000 allowed"},
		{"a first row past the header bytes", "accuracy", "id,y\n1," + strings.Repeat("x", 2<<20) + "\n", "first row does not end within"},
		{"distinct labels, mcc", "mcc", distinct.String(), "6000 distinct labels, more than the 1000 allowed"},
		{"distinct labels, qwk", "qwk", distinct.String(), "6000 distinct labels, more than the 1000 allowed"},
		{"far too many rows", "accuracy", long.String(), fmt.Sprintf("more than %d rows", n)},
		{"the answers, mcc", "mcc", answers.String(), ""},
		{"the answers, qwk", "qwk", answers.String(), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, err := gradeSubmission(t, python, c.name, map[string]string{
				"private/grade.py":    string(grader),
				"private/grade.json":  fmt.Sprintf(`{"id_column": "id", "target_columns": ["y"], "metric": %q}`, c.metric),
				"private/answers.csv": answers.String(),
				"submission.csv":      c.sub,
			})
			if c.reason == "" {
				if err != nil || !g.Valid || g.Score != 1 {
					t.Fatalf("got %+v, %v; want valid, score 1", g, err)
				}
				return
			}
			if err != nil || g.Valid || !strings.Contains(g.Reason, c.reason) || len(g.Reason) > 500 {
				t.Fatalf("got %+.300v, %v; want invalid, a reason of at most 500 bytes saying %q", g, err, c.reason)
			}
		})
	}
}

// TestMLEBenchGraderRefusesCostlyHeaders: the same for the grader
// --grader mlebench writes (MLE-bench's own grade function, behind it):
// a header of 200,000 repeated names or a first row past 1 MiB is an
// invalid verdict within seconds, before pandas reads the file; the
// stand-in grade function still scores a plain submission.
func TestMLEBenchGraderRefusesCostlyHeaders(t *testing.T) {
	needPython(t)
	python, _ := sandbox.FindPython("")
	pkg := t.TempDir()
	standInMLEBench(t, pkg)
	t.Setenv("PYTHONPATH", pkg)
	src, _ := templatesFS.ReadFile("templates/grade_mlebench.py")
	for _, c := range []struct{ name, sub, reason string }{
		{"repeated names", strings.Repeat("a,", 200000) + "a\n1,2\n", "header has 200001 fields, more than the 1000 allowed"},
		{"a first row past the header bytes", "PassengerId,Transported\na," + strings.Repeat("x", 2<<20) + "\n", "first row does not end within"},
		{"a plain submission", "PassengerId,Transported\nc,True\na,False\nb,False\n", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, err := gradeSubmission(t, python, c.name, map[string]string{
				"private/grade.py":    string(src),
				"private/grade.json":  `{"competition": "toy-titanic", "grade_fn": "mlebench.competitions.toy-titanic.grade:grade", "answers": "csv"}`,
				"private/answers.csv": "PassengerId,Transported\na,True\nb,False\nc,True\n",
				"submission.csv":      c.sub,
			})
			if c.reason == "" {
				if err != nil || !g.Valid || g.Score != 0.66667 {
					t.Fatalf("got %+v, %v; want valid, 0.66667", g, err)
				}
				return
			}
			if err != nil || g.Valid || !strings.Contains(g.Reason, c.reason) || len(g.Reason) > 500 {
				t.Fatalf("got %+.300v, %v; want invalid, a reason of at most 500 bytes saying %q", g, err, c.reason)
			}
		})
	}
}

// gradeSubmission writes files (a task's private/ folder and
// submission.csv) into a fresh folder, runs its grader on the submission
// with 20 s to answer, and logs what it said and how long it took.
func gradeSubmission(t *testing.T, python, name string, files map[string]string) (tasks.Grade, error) {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, files)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	g, err := tasks.RunGrader(ctx, python, filepath.Join(dir, "private"), filepath.Join(dir, "submission.csv"))
	t.Logf("%s: %+.200v, %v in %v", name, g, err, time.Since(start).Round(time.Millisecond))
	return g, err
}
