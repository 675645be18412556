// Package mlerl holds what the mlerl binary carries of its repository so
// that it works from any folder: the built-in task suite (tasks/), embedded.
//
// Start with [Suite], the suite as a file system, and [WriteSuite], which
// writes it out as task folders for the ingest stage (`mlerl ingest tasks`
// with its default `--suite builtin`). The code of the stages is in the
// subpackages; see README.md for where to read it.
package mlerl

import (
	"bufio"
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"
)

// suiteFS is tasks/ as committed: every task folder, generate.py,
// grade_template.py and README.md (files whose names start with "." or
// "_", such as .gitignore and __pycache__, are left out by go:embed).
//
//go:embed tasks
var suiteFS embed.FS

// Suite returns the built-in task suite embedded in the binary: the
// content of the repository's tasks/ folder when the binary was built,
// with the task folders at its root.
func Suite() fs.FS {
	sub, err := fs.Sub(suiteFS, "tasks")
	if err != nil {
		panic(err) // "tasks" is a valid path: cannot happen
	}
	return sub
}

// WriteSuite writes the embedded suite into dir, which must not hold any
// of its files yet (an empty or missing folder), as the task folders
// internal/tasks.LoadSuite reads.
func WriteSuite(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("built-in suite: %w", err)
	}
	if err := os.CopyFS(dir, Suite()); err != nil {
		return fmt.Errorf("built-in suite: writing it to %s: %w", dir, err)
	}
	return nil
}

// SubsetsFile is the file of the suite that names its subsets.
const SubsetsFile = "suites.txt"

// subsetName is what a subset may be called: not a path, not "builtin".
var subsetName = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// Subsets returns the named subsets of the built-in suite (tasks/suites.txt:
// one "NAME: id id ..." line each), each id checked to be a task folder of
// the suite. An error names the line and what is wrong with it.
func Subsets() (map[string][]string, error) {
	b, err := fs.ReadFile(Suite(), SubsetsFile)
	if err != nil {
		return nil, fmt.Errorf("built-in suite: %w", err)
	}
	return parseSubsets(b, func(id string) bool {
		_, err := fs.Stat(Suite(), id+"/task.yaml")
		return err == nil
	})
}

// parseSubsets reads a subsets file; exists says whether a task id is in
// the suite.
func parseSubsets(b []byte, exists func(string) bool) (map[string][]string, error) {
	out := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, ids, ok := strings.Cut(line, ":")
		name = strings.TrimSpace(name)
		switch {
		case !ok:
			return nil, fmt.Errorf("tasks/%s line %d: want \"NAME: task-id task-id ...\"", SubsetsFile, n)
		case !subsetName.MatchString(name) || name == "builtin":
			return nil, fmt.Errorf("tasks/%s line %d: subset name %q: want lower-case letters, digits and dashes, not builtin", SubsetsFile, n, name)
		case out[name] != nil:
			return nil, fmt.Errorf("tasks/%s line %d: subset %s is defined twice", SubsetsFile, n, name)
		}
		seen := map[string]bool{}
		for _, id := range strings.Fields(ids) {
			if !exists(id) {
				return nil, fmt.Errorf("tasks/%s line %d: subset %s names %q, which is not a task of the suite", SubsetsFile, n, name, id)
			}
			if seen[id] {
				return nil, fmt.Errorf("tasks/%s line %d: subset %s names %q twice", SubsetsFile, n, name, id)
			}
			seen[id] = true
			out[name] = append(out[name], id)
		}
		if len(out[name]) == 0 {
			return nil, fmt.Errorf("tasks/%s line %d: subset %s names no task", SubsetsFile, n, name)
		}
	}
	return out, sc.Err()
}
