package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/mlerl/mlerl"

// stages are the top folders of the pipeline's stages.
var stages = []string{"ingest", "rollout", "dataset", "train", "evaluate", "serve", "experiment"}

// shared are the top folders of what the stages share.
var shared = []string{"internal", "env", "policy", "schemas"}

// pkg is what the import rules read of `go list -json`.
type pkg struct {
	ImportPath string
	Deps       []string // every package it imports, directly or not (tests aside)
	Error      *struct{ Err string }
}

// top returns the first folder of a module package's path ("" for a
// package outside the module).
func top(path string) string {
	rest, ok := strings.CutPrefix(path, module+"/")
	if !ok {
		return ""
	}
	first, _, _ := strings.Cut(rest, "/")
	return first
}

// violations lists the imports that break the rules: a stage depends on
// another stage, or a shared package on any stage.
func violations(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		from := top(p.ImportPath)
		switch {
		case slices.Contains(stages, from):
			for _, d := range p.Deps {
				if to := top(d); slices.Contains(stages, to) && to != from {
					out = append(out, fmt.Sprintf("stage %s depends on stage %s (directly or through another package): move what they share to env/, policy/ or internal/", p.ImportPath, d))
				}
			}
		case slices.Contains(shared, from):
			for _, d := range p.Deps {
				if slices.Contains(stages, top(d)) {
					out = append(out, fmt.Sprintf("shared package %s depends on stage %s: a shared package must not depend on a stage", p.ImportPath, d))
				}
			}
		}
	}
	return out
}

// listPackages runs `go list -json` over the module.
func listPackages(t *testing.T) []pkg {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	cmd := exec.Command(goBin, "list", "-e", "-json=ImportPath,Deps,Error", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Error != nil {
			t.Errorf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func TestImportGraph(t *testing.T) {
	pkgs := listPackages(t)
	seen := map[string]bool{}
	for _, p := range pkgs {
		seen[top(p.ImportPath)] = true
	}
	for _, want := range append(slices.Clone(stages), shared...) {
		if !seen[want] {
			t.Errorf("go list found no package under %s/: is the module layout the one these rules name?", want)
		}
	}
	for _, v := range violations(pkgs) {
		t.Error(v)
	}
}

// The rules themselves, on a made-up graph.
func TestViolations(t *testing.T) {
	m := func(p string) string { return module + "/" + p }
	pkgs := []pkg{
		{ImportPath: m("rollout"), Deps: []string{m("env/episode"), m("internal/store"), "fmt"}},
		{ImportPath: m("evaluate"), Deps: []string{m("policy"), m("rollout")}},
		{ImportPath: m("train/sub"), Deps: []string{m("train")}},
		{ImportPath: m("internal/x"), Deps: []string{m("dataset")}},
		{ImportPath: m("env"), Deps: []string{m("internal/store")}},
		{ImportPath: m("cmd/mlerl"), Deps: []string{m("rollout"), m("evaluate")}},
	}
	got := violations(pkgs)
	want := []string{"stage " + m("evaluate") + " depends on stage " + m("rollout"), "shared package " + m("internal/x") + " depends on stage " + m("dataset")}
	if len(got) != len(want) {
		t.Fatalf("got %d violations %q, want %d", len(got), got, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("violation %d: got %q, want it to start %q", i, got[i], want[i])
		}
	}
}
