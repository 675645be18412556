package ingest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
