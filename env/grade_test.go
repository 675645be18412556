package env

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

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
