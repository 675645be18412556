// Package mlerl holds what the mlerl binary carries of its repository so
// that it works from any folder: the built-in task suite (tasks/), embedded.
//
// Start with [Suite], the suite as a file system, and [WriteSuite], which
// writes it out as task folders for the ingest stage (`mlerl ingest tasks`
// with its default `--suite builtin`). The code of the stages is in the
// subpackages; see README.md for where to read it.
package mlerl

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
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
