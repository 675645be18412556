// Package docs holds the repository's documents and the published runs'
// records; its tests check what a reader of a clone relies on: that every
// relative link of every committed Markdown file resolves
// (links_test.go), and that no committed script, config or document names
// a folder of the machine it was written on (paths_test.go), so that
// each run reproduces from a clone into a folder its user names.
package docs

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// root is the repository root, seen from this package's folder.
const root = ".."

// committed returns the repository's committed files, slash-separated
// and relative to the root: `git ls-files` (what a clone holds: a local
// data/ folder or a scratch note is not the test's business), or, in a
// copy without git (a source archive), every file but those the root
// .gitignore leaves out. Only regular files: one listed but deleted from
// the work tree, or a committed symlink, is left out.
func committed(t *testing.T) []string {
	t.Helper()
	var files []string
	if out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output(); err == nil && len(out) > 0 {
		for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
			if fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(f))); err == nil && fi.Mode().IsRegular() {
				files = append(files, f)
			}
		}
		return files
	}
	ignored := gitignored(t)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		if d.Name() == ".git" || ignored(rel, d.IsDir()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// gitignored reads the root .gitignore's patterns well enough for the
// fallback walk: "/x/" and "/x" at the root, "x/" and "*.y" anywhere.
func gitignored(t *testing.T) func(rel string, dir bool) bool {
	t.Helper()
	f, err := os.Open(filepath.Join(root, ".gitignore"))
	if err != nil {
		t.Fatalf("no git and no .gitignore to tell committed files from local ones: %v", err)
	}
	defer f.Close()
	var pats []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			pats = append(pats, l)
		}
	}
	return func(rel string, dir bool) bool {
		for _, p := range pats {
			onlyDir := strings.HasSuffix(p, "/")
			p = strings.TrimSuffix(p, "/")
			if onlyDir && !dir {
				continue
			}
			name := path.Base(rel)
			if strings.HasPrefix(p, "/") {
				name, p = rel, p[1:]
			}
			if ok, _ := path.Match(p, name); ok {
				return true
			}
		}
		return false
	}
}

// text reads a committed file as text; ok is false for a binary file (a
// NUL byte in its first 8 KiB: plots, parquet).
func text(t *testing.T, rel string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.IndexByte(b[:min(len(b), 8192)], 0) >= 0 {
		return "", false
	}
	return string(b), true
}
