package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/internal/deps"
	"github.com/mlerl/mlerl/internal/sandbox"
)

// TestOutsideCheckout runs the binary as a user who copied it into a
// folder of their own runs it: from that folder, with nothing of the
// checkout reachable (no tasks/, no .deps, no MLERL_DEPS), `ingest tasks`
// ingests the embedded suite, `ingest ideas` and a one-task scripted
// rollout run, and their datasets are committed. The binary is this test
// binary (it runs main when MLERL_TEST_RUN_MAIN is set), which carries
// the same embedded suite as bin/mlerl.
func TestOutsideCheckout(t *testing.T) {
	if testing.Short() {
		t.Skip("runs baselines and a rollout")
	}
	if _, err := sandbox.FindPython(""); err != nil {
		t.Skipf("no task runtime: %v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "mlerl")
	copyExecutable(t, exe, bin)

	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, deps.Env+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, mainEnv+"=1")
	mlerl := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir, cmd.Env = dir, env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("mlerl %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		return out.String()
	}
	const task = "wine-cultivar"
	// The whole suite is loaded and checked; one task is measured, to keep
	// the test short (`make ingest` runs them all).
	out := mlerl("ingest", "tasks", "--data", "./d", "--only", task, "--workers", "2")
	if !strings.Contains(out, "suite: builtin") {
		t.Errorf("the resolved config does not say the suite is the embedded one:\n%s", out)
	}
	mlerl("ingest", "ideas", "--data", "./d", "--only", task)
	out = mlerl("rollout", "--data", "./d", "--per_task", "1", "--only", task, "--env.max_steps", "4", "--workers", "1")
	for _, ds := range []string{"tasks", "ideas", "trajectories", "steps"} {
		if _, err := os.Stat(filepath.Join(dir, "d", ds, "v1", "_MANIFEST.json")); err != nil {
			t.Errorf("%s: no committed version (%v); rollout said:\n%s", ds, err, out)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("the folder holds %v, want only the binary and the data root d", names)
	}
}

func copyExecutable(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
