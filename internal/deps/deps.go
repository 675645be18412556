// Package deps finds the files `make setup` installs outside Go (the Qwen
// tokenizer, the ONNX Runtime library) wherever the binary runs from.
//
// Start with [Find]. `make setup` writes them under the checkout's .deps/
// folder; a binary run from another folder finds them through
// $MLERL_DEPS, or through .deps beside the binary (bin/mlerl in the
// checkout, or a copy next to a copied .deps).
package deps

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Env names the environment variable that points at the deps folder.
const Env = "MLERL_DEPS"

// ErrNotFound is wrapped by Find's error.
var ErrNotFound = errors.New("not installed")

// Find returns the path of rel (e.g. "qwen3/tokenizer.json") in the first
// deps folder that holds it, looking in order in $MLERL_DEPS, in .deps in
// the working directory and each of its parents, and in .deps in the
// folder of the running binary and each of its parents. The error wraps
// ErrNotFound and lists every place looked in.
func Find(rel string) (string, error) {
	found := func(p string) bool {
		st, err := os.Stat(p)
		return err == nil && !st.IsDir()
	}
	var tried []string
	if d := os.Getenv(Env); d != "" {
		p := filepath.Join(d, rel)
		if found(p) {
			return p, nil
		}
		tried = append(tried, p+" ($"+Env+")")
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		starts = append(starts, filepath.Dir(exe))
	}
	for _, start := range starts {
		for dir := start; ; dir = filepath.Dir(dir) {
			if p := filepath.Join(dir, ".deps", rel); found(p) {
				return p, nil
			}
			if dir == filepath.Dir(dir) {
				break
			}
		}
		tried = append(tried, filepath.Join(start, ".deps", rel)+" and the same in each parent folder")
	}
	return "", fmt.Errorf("%s %w (looked in %s)", rel, ErrNotFound, strings.Join(tried, "; "))
}
