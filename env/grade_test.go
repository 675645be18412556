package env

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl"
	"github.com/mlerl/mlerl/internal/blobs"
	"github.com/mlerl/mlerl/internal/tasks"
)

// The warm grader gives the verdicts tasks.RunGrader gives.
func TestGradeWarmMatchesCold(t *testing.T) {
	python := testPython(t)
	tests := []struct {
		name    string
		grader  string
		sub     string
		wantErr string
	}{
		{"valid", `import sys, json; print("noise"); print(json.dumps({"valid": True, "score": len(open(sys.argv[1]).read())}))`, "abc", ""},
		{"invalid", `import json; print(json.dumps({"valid": False, "reason": "ids do not match"}))`, "x", ""},
		{"no reason", `print('{"valid": false}')`, "x", ""},
		{"main guard and argv", "import sys, json\ndef main():\n    assert sys.argv[2].endswith('answers.csv')\n    print(json.dumps({'valid': True, 'score': 0.5}))\nif __name__ == '__main__':\n    main()\n", "x", ""},
		{"crash", `raise ValueError("boom")`, "x", "crashed"},
		{"exit status", `import sys; sys.exit(3)`, "x", "crashed"},
		{"no verdict", `print("hello")`, "x", "no JSON line"},
		{"NaN is not JSON", `print('{"valid": true, "score": NaN}')`, "x", "not valid JSON"},
		{"valid without a score", `print('{"valid": true, "score": null}')`, "x", "finite"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			private := blobs.Files{"grade.py": {Data: []byte(tc.grader)}, "answers.csv": {Data: []byte("id,y\n")}}
			warm, werr := Grade(context.Background(), python, private, []byte(tc.sub))
			// The cold reference.
			dir := t.TempDir()
			if err := blobs.WriteDir(filepath.Join(dir, "private"), private); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(dir, "submission.csv"), []byte(tc.sub), 0o644)
			cold, cerr := tasks.RunGrader(context.Background(), python, filepath.Join(dir, "private"), filepath.Join(dir, "submission.csv"))
			if (werr == nil) != (cerr == nil) || !reflect.DeepEqual(warm, cold) {
				t.Fatalf("warm %+v, %v; cold %+v, %v", warm, werr, cold, cerr)
			}
			if tc.wantErr != "" && (werr == nil || !strings.Contains(werr.Error(), tc.wantErr)) {
				t.Fatalf("got error %v, want one mentioning %q", werr, tc.wantErr)
			}
		})
	}
}

// A grader that hangs is stopped at the deadline and the worker recovers.
func TestGradeWarmTimeout(t *testing.T) {
	python := testPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := Grade(ctx, python, blobs.Files{"grade.py": {Data: []byte("import time; time.sleep(60)")}, "answers.csv": {Data: []byte("x")}}, []byte("x"))
	if err == nil || !strings.Contains(err.Error(), "did not finish") {
		t.Fatalf("got %v, want a timeout", err)
	}
	g, err := Grade(context.Background(), python, blobs.Files{"grade.py": {Data: []byte(`print('{"valid": true, "score": 1}')`)}, "answers.csv": {Data: []byte("x")}}, []byte("x"))
	if err != nil || !g.Valid || g.Score != 1 {
		t.Fatalf("after a timeout: got %+v, %v", g, err)
	}
}

// Every grader of the built-in suite is its template with only the
// settings changed, so the warm worker runs it in its own process; a
// grader changed anywhere else, or whose settings are more than string
// literals, is not, and runs in a forked child.
func TestSuiteGraderRecognised(t *testing.T) {
	suite := mlerl.Suite()
	graders, err := fs.Glob(suite, "*/private/grade.py")
	if err != nil || len(graders) < 50 {
		t.Fatalf("suite graders: %d, %v", len(graders), err)
	}
	for _, p := range append(graders, "grade_template.py") {
		src, _ := fs.ReadFile(suite, p)
		if !suiteGrader(src) {
			t.Errorf("%s: not recognised as the suite's grader", p)
		}
	}
	src, _ := fs.ReadFile(suite, graders[0])
	orig := string(src)
	set := "METRIC = "
	i := strings.Index(orig, set)
	if i < 0 {
		t.Fatalf("%s has no METRIC setting", graders[0])
	}
	eol := i + strings.IndexByte(orig[i:], '\n')
	replaceSetting := func(v string) string { return orig[:i] + set + v + orig[eol:] }
	for name, s := range map[string]string{
		"code before the settings": strings.Replace(orig, settingsStart, "import os\n"+settingsStart, 1),
		"code after the settings":  strings.Replace(orig, settingsEnd, settingsEnd+"import os\n", 1),
		"a changed body":           strings.Replace(orig, "def main(argv):", "def main(argv):\n    pass", 1),
		"a call as a setting":      replaceSetting("__import__('os').getcwd()"),
		"concatenated strings":     replaceSetting("'acc' + 'uracy'"),
		"an escape":                replaceSetting(`'acc\x75racy'`),
		"a trailing statement":     replaceSetting("'accuracy'; import os"),
		"a lower-case name":        strings.Replace(orig, set, "metric = 'x'\n"+set, 1),
		"an empty settings block":  orig[:strings.Index(orig, settingsStart)+len(settingsStart)] + orig[strings.Index(orig, settingsEnd):],
		"no markers":               strings.Replace(orig, settingsStart, "", 1),
		"an empty file":            "",
	} {
		if suiteGrader([]byte(s)) {
			t.Errorf("%s: recognised as the suite's grader", name)
		}
	}
	for name, v := range map[string]string{"double quotes": `"rmse"`, "a list": `['a', "b"]`, "an empty list": `[]`} {
		if !suiteGrader([]byte(replaceSetting(v))) {
			t.Errorf("a setting of %s: not recognised", name)
		}
	}
}

var tmpPath = regexp.MustCompile(`/\S*/submission\.csv`)

// The suite's graders (one task per metric) give in the warm worker's
// own process the verdicts they give in a forked child (which
// TestGradeWarmMatchesCold holds to a cold `python grade.py`; the
// starting submissions are held to it here too), for good and bad
// submissions, task after task in one worker: no grade leaks into the
// next. A grader that is not the suite's still runs in a forked child,
// with its argv and working folder.
func TestSuiteGraderInProcessMatchesCold(t *testing.T) {
	python := realPython(t)
	suite := mlerl.Suite()
	w := warmGrader(python)
	n, before := 0, w.inproc.Load()
	for _, task := range []string{"wine-cultivar", "affairs-survey", "breast-cancer-diagnosis", "co2-weekly", "diabetes-progression", "scene-tags"} {
		private := blobs.Files{}
		for _, f := range []string{"grade.py", "answers.csv"} {
			b, err := fs.ReadFile(suite, task+"/private/"+f)
			if err != nil {
				t.Fatal(err)
			}
			private[f] = blobs.File{Data: b}
		}
		good, err := fs.ReadFile(suite, task+"/workspace/submission.csv")
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitAfter(string(good), "\n")
		for _, c := range []struct{ name, data string }{
			{"the starting submission", string(good)},
			{"the answers", string(private["answers.csv"].Data)},
			{"a row short", strings.Join(lines[:len(lines)-2], "")},
			{"a repeated id", lines[0] + lines[1] + strings.Join(lines[1:len(lines)-2], "")},
			{"a missing column", "id\n1\n"},
			{"not a number", lines[0] + strings.Repeat("1,x\n", len(lines)-2)},
			{"empty", ""},
			{"binary", "\x00\xff\x01,\"\n\"\x00"},
		} {
			in, ierr := Grade(context.Background(), python, private, []byte(c.data))
			forked, ferr := gradeIn(context.Background(), python, private, []byte(c.data), false)
			n++
			// Reasons name the submission's path: a temporary folder each.
			in.Reason, forked.Reason = tmpPath.ReplaceAllString(in.Reason, "submission.csv"), tmpPath.ReplaceAllString(forked.Reason, "submission.csv")
			if ierr != nil || ferr != nil || !reflect.DeepEqual(in, forked) {
				t.Errorf("%s, %s: in process %+v, %v; forked %+v, %v", task, c.name, in, ierr, forked, ferr)
			}
			if c.name != "the starting submission" {
				continue
			}
			dir := t.TempDir()
			if err := blobs.WriteDir(filepath.Join(dir, "private"), private); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(dir, "submission.csv"), good, 0o644)
			cold, err := tasks.RunGrader(context.Background(), python, filepath.Join(dir, "private"), filepath.Join(dir, "submission.csv"))
			if err != nil || !reflect.DeepEqual(in, cold) || !in.Valid {
				t.Errorf("%s, %s: in process %+v; cold %+v, %v", task, c.name, in, cold, err)
			}
		}
	}
	if got := w.inproc.Load() - before; got != int64(n) {
		t.Errorf("%d of %d suite grades ran in the worker's process", got, n)
	}
	// A hand-written grader after them: forked, with its argv and folder.
	before = w.inproc.Load()
	g, err := Grade(context.Background(), python, blobs.Files{"grade.py": {Data: []byte(
		"import os, sys, json\nassert os.path.basename(os.getcwd()).startswith('mlerl-grade-') and sys.argv[2].endswith('answers.csv')\nprint(json.dumps({'valid': True, 'score': 2}))\n")},
		"answers.csv": {Data: []byte("x")}}, []byte("x"))
	if err != nil || !g.Valid || g.Score != 2 || w.inproc.Load() != before {
		t.Fatalf("a hand-written grader: %+v, %v, in process %d", g, err, w.inproc.Load()-before)
	}
}

// A submission built to cost the grader, not to be graded, gets a quick
// invalid verdict with a short reason from the suite's graders: pandas
// takes time quadratic in a header's repeated names (200,000 of them, a
// 400 KB file, ran for many minutes, past any grade timeout, and a grader
// that does not finish fails the step, and with it a training batch),
// makes a first row wider than the header an index of as many levels (a
// minute for 400,000 fields, gigabytes for millions), read every row of
// a long file before checking the row count, and quoted ids and values
// whole in reasons (a 4 MiB value made a 4 MiB verdict, kept in the grade
// cache).
func TestSuiteGraderRefusesCostlySubmissions(t *testing.T) {
	python := realPython(t)
	suite := mlerl.Suite()
	private := blobs.Files{}
	for _, f := range []string{"grade.py", "answers.csv"} {
		b, err := fs.ReadFile(suite, "diamond-prices/private/"+f)
		if err != nil {
			t.Fatal(err)
		}
		private[f] = blobs.File{Data: b}
	}
	answers := string(private["answers.csv"].Data)
	lines := strings.SplitAfter(answers, "\n") // "id,price\n", "<id>,<price>\n"..., ""
	rows := len(lines) - 2
	longValue := lines[:2:2] // the second row's price 4 MiB long
	longValue = append(append(longValue, strings.Split(lines[2], ",")[0]+","+strings.Repeat("x", 4<<20)+"\n"), lines[3:]...)
	longID := strings.Repeat("\u00e9", 1<<20) // 2 MiB, twice, after the first row
	longIDs := append(append(lines[:2:2], longID+",1\n", longID+",1\n"), lines[4:]...)
	for _, c := range []struct{ name, sub, reason string }{
		{"repeated names", strings.Repeat("a,", 200000) + "a\n1,2\n", "more than the 1000 allowed"},
		{"empty names", strings.Repeat(",", 2<<20) + "\n1,2\n", "does not end within"},
		{"blank lines, then a wide header", strings.Repeat("\n", 2<<20) + strings.Repeat("a,", 5000) + "a\n", "does not end within"},
		{"a quoted newline, then a wide header", "\"\n\"," + strings.Repeat(",", 2000) + "\n1,2\n", "more than the 1000 allowed"},
		{"a first row wider than the header", "id,price\n" + strings.Repeat("a,", 400000) + "a\n", "first row has 400001 fields"},
		{"a long first row", "id,price\n1," + strings.Repeat("x", 2<<20) + "\n", "first row does not end within"},
		{"far too many rows", answers + strings.Repeat(lines[1], 1<<20), fmt.Sprintf("more than %d rows", rows)},
		{"a long value", strings.Join(longValue, ""), "is not a number"},
		{"a long repeated id", strings.Join(longIDs, ""), "repeats id"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			g, err := Grade(ctx, python, private, []byte(c.sub))
			if err != nil || g.Valid || !strings.Contains(g.Reason, c.reason) || len(g.Reason) > 500 {
				t.Fatalf("got %+.300v, %v; want invalid, a reason of at most 500 bytes saying %q", g, err, c.reason)
			}
		})
	}
	// A header as wide as the limit is read as before.
	sub := "id,price," + strings.Repeat("x,", 997) + "x\n" + strings.ReplaceAll(strings.Join(lines[1:], ""), "\n", ","+strings.Repeat("0,", 997)+"0\n")
	if g, err := Grade(context.Background(), python, private, []byte(sub)); err != nil || !g.Valid || g.Score != 0 {
		t.Fatalf("the answers with 998 more columns: got %+v, %v; want valid, score 0", g, err)
	}
}
