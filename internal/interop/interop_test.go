package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/dataset"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(filepath.Dir(file)))
}

// checkpoint is the tiny random Qwen2 checkpoint policy/hf commits: a
// 640-id BPE with Qwen2.5's chat template, small enough to train on CPU.
func checkpoint() string {
	return filepath.Join(repoRoot(), "policy", "hf", "testdata", "ckpt", "qwen2")
}

// python returns the interop venv's interpreter, or skips the test.
func python(t *testing.T) string {
	t.Helper()
	venv := os.Getenv("MLERL_INTEROP_VENV")
	if venv == "" {
		venv = filepath.Join(repoRoot(), ".deps", "interop")
	} else if !filepath.IsAbs(venv) {
		venv = filepath.Join(repoRoot(), venv)
	}
	py := filepath.Join(venv, "bin", "python")
	if _, err := os.Stat(py); err != nil {
		t.Skipf("skipped: no interop venv at %s (make interop installs it: scripts/setup_interop.sh)", venv)
	}
	return py
}

// demoData returns the data root the checks read (MLERL_INTEROP_DATA, a
// relative path being the repository root's), or skips the test.
func demoData(t *testing.T) string {
	t.Helper()
	d := os.Getenv("MLERL_INTEROP_DATA")
	if d == "" {
		t.Skip("skipped: MLERL_INTEROP_DATA is not set (make interop makes the demo's data root and sets it)")
	}
	return abs(d)
}

// mlerlBin returns the binary the checks run (MLERL_BIN, a relative path
// being the repository root's; default bin/mlerl, which make interop
// builds).
func mlerlBin(t *testing.T) string {
	t.Helper()
	b := abs(os.Getenv("MLERL_BIN"))
	if b == "." {
		b = filepath.Join(repoRoot(), "bin", "mlerl")
	}
	if _, err := os.Stat(b); err != nil {
		t.Fatalf("%s: %v (make build makes it, or set MLERL_BIN)", b, err)
	}
	return b
}

// runPy runs a script of scripts/interop (or the module args name) in
// the venv, offline, and returns its stdout; a failure is fatal with the
// end of its stderr.
func runPy(t *testing.T, env []string, args ...string) []byte {
	t.Helper()
	out, stderr, err := tryPy(t, env, args...)
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, tail(stderr, 30))
	}
	return out
}

// tryPy is runPy returning the failure.
func tryPy(t *testing.T, env []string, args ...string) (stdout, stderr []byte, err error) {
	t.Helper()
	py := python(t)
	if len(args) > 0 && strings.HasSuffix(args[0], ".py") && !filepath.IsAbs(args[0]) {
		args[0] = filepath.Join(repoRoot(), "scripts", "interop", args[0])
	}
	cmd := exec.Command(py, args...)
	cmd.Dir = t.TempDir()
	// Offline: the checkpoint is a local folder, nothing is fetched.
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1", "HF_DATASETS_OFFLINE=1", "TRANSFORMERS_OFFLINE=1",
		"VERL_CACHE="+filepath.Join(cmd.Dir, "verl-cache"), "HF_DATASETS_CACHE="+filepath.Join(cmd.Dir, "hf-datasets"),
		"OMP_NUM_THREADS=1", "TOKENIZERS_PARALLELISM=false", "WANDB_MODE=disabled")
	cmd.Env = append(cmd.Env, env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.Bytes(), e.Bytes(), err
}

// tail returns the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// exported is one export file of the demo's data root with what mlerl's
// stats say of it.
type exported struct {
	Path  string // the file
	Dir   string // its folder (exports/<dataset>/v<N>)
	Stats dataset.ExportStats
}

// exportOf finds file among the exports of the latest version of the
// dataset name and checks that its tokens were counted with the tiny
// checkpoint's tokenizer, as make interop's dataset run does.
func exportOf(t *testing.T, data, name, file string) exported {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	m, err := datasets.ResolveIn(ctx, st, name)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(m.Extra["stats"])
	var s dataset.Stats
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s v%d stats: %v", m.Name, m.Version, err)
	}
	dir := filepath.Join(data, "exports", name, fmt.Sprintf("v%d", m.Version))
	for _, e := range s.Exports {
		if e.File != file {
			continue
		}
		if abs(e.Tokenizer) != checkpoint() {
			t.Fatalf("%s v%d: %s was counted by %q, not the tiny checkpoint's tokenizer: run `mlerl dataset --data %s --export_tokenizer policy/hf/testdata/ckpt/qwen2` (from the repository root)", m.Name, m.Version, file, e.Tokenizer, data)
		}
		return exported{Path: filepath.Join(dir, file), Dir: dir, Stats: e}
	}
	t.Fatalf("%s v%d has no export %s: run `mlerl dataset` with exports on", m.Name, m.Version, file)
	return exported{}
}

// abs resolves p against the repository root (the stage records the path
// as given, relative to where it ran).
func abs(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(repoRoot(), p)
}
