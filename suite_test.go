package mlerl

import (
	"bytes"
	"io/fs"
	"os"
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
