package rollout

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/ingest"
	"github.com/mlerl/mlerl/internal/sandbox"
)

// deepPath makes a path of more than 5,000 bytes in the workspace (25
// nested folders of 200-byte names, through folder handles: within the
// workspace quota), as a policy's script may.
const deepPath = `import os as _os
_fd = _os.open('.', _os.O_RDONLY)
for _i in range(25):
    _n = chr(97 + _i) * 200
    try:
        _os.mkdir(_n, dir_fd=_fd)
    except FileExistsError:
        pass
    _nfd = _os.open(_n, _os.O_RDONLY, dir_fd=_fd)
    _os.close(_fd)
    _fd = _nfd
_w = _os.open('deep.txt', _os.O_WRONLY | _os.O_CREAT, 0o644, dir_fd=_fd)
_os.write(_w, b'deep')
_os.close(_w)
`

// TestRolloutPastADeepPath: a rollout whose task script makes a path
// longer than PATH_MAX at every run goes to the end, every step's state
// snapshotted (the snapshots walk by folder handles).
func TestRolloutPastADeepPath(t *testing.T) {
	if _, err := sandbox.FindPython(""); err != nil {
		t.Skipf("no task runtime: %v", err)
	}
	suite := t.TempDir()
	src := filepath.Join(repoRoot(t), "tasks", testTask)
	dst := filepath.Join(suite, testTask)
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dst, "workspace", "train.py")
	b, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(b), "# === data ===\n", "# === data ===\n"+deepPath, 1)
	if text == string(b) {
		t.Fatal("no data section to put the deep path in")
	}
	if err := os.WriteFile(script, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	ctx := context.Background()
	tc := ingest.DefaultTasksConfig()
	tc.Data, tc.Suite, tc.Only = root, suite, []string{testTask}
	if err := ingest.RunTasks(ctx, tc); err != nil {
		t.Fatalf("ingest tasks: %v", err)
	}
	ic := ingest.DefaultIdeasConfig()
	ic.Data, ic.K = root, 3
	if err := ingest.RunIdeas(ctx, ic); err != nil {
		t.Fatalf("ingest ideas: %v", err)
	}
	cfg := testConfig(root)
	cfg.PerTask, cfg.Env.MaxSteps = 2, 4
	if err := Run(ctx, cfg); err != nil {
		t.Fatalf("rollout: %v", err)
	}
	trajs, steps := readRows(t, root)
	if len(trajs) != 2 || len(steps) == 0 {
		t.Fatalf("got %d trajectories and %d steps, want 2 and some", len(trajs), len(steps))
	}
	ran := 0
	for _, s := range steps {
		if s.SnapshotRef == "" {
			t.Errorf("step %s/%d has no snapshot", s.TrajectoryID, s.StepIndex)
		}
		if s.Outcome == "success" {
			ran++
		}
	}
	if ran == 0 {
		t.Errorf("no step ran the script")
	}
}
