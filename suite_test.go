package mlerl

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSuiteIsTasksFolder: the embedded suite is tasks/ file for file, byte
// for byte (what go:embed leaves out, dot and underscore names, aside),
// and WriteSuite writes it out the same.
func TestSuiteIsTasksFolder(t *testing.T) {
	want := map[string][]byte{}
	err := filepath.WalkDir("tasks", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel("tasks", p)
			b, err := os.ReadFile(p)
			want[filepath.ToSlash(rel)] = b
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < 100 {
		t.Fatalf("tasks/ holds %d files, want the whole suite", len(want))
	}
	dir := t.TempDir()
	if err := WriteSuite(dir); err != nil {
		t.Fatal(err)
	}
	for name, fsys := range map[string]fs.FS{"Suite()": Suite(), "WriteSuite": os.DirFS(dir)} {
		got := map[string][]byte{}
		err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				got[p], err = fs.ReadFile(fsys, p)
			}
			return err
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for p, b := range want {
			if g, ok := got[p]; !ok {
				t.Errorf("%s lacks %s", name, p)
			} else if !bytes.Equal(g, b) {
				t.Errorf("%s: %s differs from tasks/%s (%d bytes, want %d)", name, p, p, len(g), len(b))
			}
		}
		for p := range got {
			if _, ok := want[p]; !ok {
				t.Errorf("%s holds %s, which tasks/ does not", name, p)
			}
		}
	}
	if err := WriteSuite(dir); err == nil || !strings.Contains(err.Error(), "built-in suite: writing it to "+dir) {
		t.Errorf("second WriteSuite into the same folder: got %v, want an error naming the folder", err)
	}
}

// TestSubsets: the demo subset is today's fifteen tasks, ten held-in and
// five held-out, each a task of the suite; malformed subset files are
// refused with the line.
func TestSubsets(t *testing.T) {
	subsets, err := Subsets()
	if err != nil {
		t.Fatal(err)
	}
	demo := subsets["demo"]
	if len(demo) != 15 {
		t.Fatalf("demo subset: %d tasks, want 15", len(demo))
	}
	split := map[string]int{}
	for _, id := range demo {
		b, err := fs.ReadFile(Suite(), id+"/task.yaml")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if s, ok := strings.CutPrefix(line, "split: "); ok {
				split[s]++
			}
		}
	}
	if split["held-in"] != 10 || split["held-out"] != 5 {
		t.Errorf("demo subset splits %v, want 10 held-in and 5 held-out", split)
	}
	exists := func(id string) bool { return id == "a" || id == "b" }
	for _, c := range []struct{ name, text, want string }{
		{"no colon", "demo a b\n", "line 1"},
		{"bad name", "Demo: a\n", "subset name"},
		{"builtin", "builtin: a\n", "not builtin"},
		{"twice", "x: a\nx: b\n", "defined twice"},
		{"unknown task", "# c\nx: a c\n", `line 2: subset x names "c"`},
		{"repeated task", "x: a a\n", "twice"},
		{"empty", "x:\n", "names no task"},
	} {
		if _, err := parseSubsets([]byte(c.text), exists); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.want)
		}
	}
	got, err := parseSubsets([]byte("# comment\n\nx: a b\ny: b\n"), exists)
	if err != nil || len(got["x"]) != 2 || len(got["y"]) != 1 {
		t.Errorf("got %v, %v; want x: a b and y: b", got, err)
	}
}

// TestGenerateReproducesSuite: tasks/generate.py, run on a copy of tasks/,
// writes every data file, grader, task.yaml and description.md byte for
// byte as committed (where its tools are: Debian's Python packages, and
// Rscript with the R packages for the tasks read from R).
func TestGenerateReproducesSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the suite's regeneration in -short mode")
	}
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import numpy, pandas, sklearn, statsmodels").Run(); err != nil {
		t.Skipf("%s cannot import numpy, pandas, scikit-learn and statsmodels (%v): `make setup` installs them", py, err)
	}
	dir := filepath.Join(t.TempDir(), "tasks")
	if err := os.CopyFS(dir, os.DirFS("tasks")); err != nil {
		t.Fatal(err)
	}
	// What the generator writes is removed first, so that a file it failed
	// to write cannot pass as the committed copy (task.yaml stays: it
	// keeps m_best and the time limit from it; the original fifteen's
	// train.py is hand-written, the others' is generated, and
	// workspace/submission.csv is the initial run's output, not the
	// generator's).
	removed := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		generated := strings.HasSuffix(p, ".csv") || d.Name() == "grade.py" || d.Name() == "description.md"
		if d.Name() == "train.py" {
			spec, _ := os.ReadFile(filepath.Join(dir, strings.Split(rel, "/")[0], "task.yaml"))
			generated = bytes.Contains(spec, []byte("\nsplit_rule: "))
		}
		if strings.Count(rel, "/") >= 1 && d.Name() != "submission.csv" && generated {
			removed++
			return os.Remove(p)
		}
		return nil
	})
	if err != nil || removed < 60 {
		t.Fatalf("removed %d generated files (%v), want the suite's", removed, err)
	}
	// Tasks whose sources are not installed here (Rscript and R's data
	// packages, Debian's fortunes and word lists) are skipped and named;
	// every other task is regenerated and compared.
	cmd := exec.Command(py, filepath.Join(dir, "generate.py"), "--skip-unavailable")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("generate.py: %v\n%s", err, out)
	}
	skipped := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		if id, why, ok := strings.Cut(strings.TrimPrefix(l, "skipped "), ": "); ok && strings.HasPrefix(l, "skipped ") {
			skipped[id] = true
			t.Logf("not regenerated: %s: %s", id, why)
		}
	}
	n := 0
	err = filepath.WalkDir("tasks", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.Contains(p, "__pycache__") {
			return err
		}
		rel, _ := filepath.Rel("tasks", p)
		// parts.csv is not generate.py's: internal/tasks computes it from
		// the answers by task.yaml's rule, and TestSuiteParts checks it.
		if skipped[strings.Split(rel, "/")[0]] || d.Name() == "parts.csv" {
			return nil
		}
		want, _ := os.ReadFile(p)
		got, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			t.Errorf("tasks/%s: regenerated %d bytes differ from the committed %d: rerun tasks/generate.py and commit, or fix what made it nondeterministic", rel, len(got), len(want))
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 100 {
		t.Fatalf("compared %d files, want the whole suite", n)
	}
}
