package env

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"
	"golang.org/x/sys/unix"

	"github.com/mlerl/mlerl/internal/blobs"
	"github.com/mlerl/mlerl/internal/store"
)

func fakeGCS(t *testing.T) store.Store {
	t.Helper()
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{Host: "127.0.0.1", Port: 0, Scheme: "http", NoListener: false})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: "mlerl-test"})
	st, err := store.OpenGCS(context.Background(), "mlerl-test", "data", srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestSnapshotRoundTrip(t *testing.T) {
	for _, backend := range []string{"local", "fake-gcs"} {
		t.Run(backend, func(t *testing.T) {
			ctx := context.Background()
			var st store.Store
			if backend == "local" {
				st = newLocalStore(t)
			} else {
				st = fakeGCS(t)
			}
			cfg := testConfig(t)
			e, err := New(ctx, cfg, fixture(t, st, false), st)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			step(t, e, act(ExecuteScript, "train.py"))
			step(t, e, act(EditScriptAI, "train.py", "lower the threshold", "train.py")) // no-op: 0.0 is not 0.5
			step(t, e, act(EditScriptAI, "train.py", "raise the threshold", "train.py"))
			step(t, e, act(CopyFile, "train.py", "keep/train_v2.py"))
			ref, err := e.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if again, err := e.Snapshot(ctx); err != nil || again != ref {
				t.Fatalf("a second snapshot of the same state: got %s, %v; want %s", again, err, ref)
			}

			r, err := Restore(ctx, cfg, st, ref)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if r.Dir() == e.Dir() {
				t.Fatal("the restored env shares the workspace folder")
			}
			// The whole state, and every workspace file, comes back.
			if !reflect.DeepEqual(r.s, e.s) {
				t.Fatalf("restored state differs:\ngot  %+v\nwant %+v", r.s, e.s)
			}
			want, _ := blobs.ReadDir(e.Dir())
			got, _ := blobs.ReadDir(r.Dir())
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("restored workspace differs: got %d files, want %d", len(got), len(want))
			}

			// Re-executing from the snapshot gives the identical metric and reward.
			a := step(t, e, act(ExecuteScript, "train.py"))
			b := step(t, r, act(ExecuteScript, "train.py"))
			if a.MetricAfter == nil || b.MetricAfter == nil || *a.MetricAfter != *b.MetricAfter || *a.MetricAfter != 1 {
				t.Fatalf("metrics after re-execution: original %v, restored %v, want both 1", a.MetricAfter, b.MetricAfter)
			}
			if !reflect.DeepEqual(a.Reward, b.Reward) || a.Step != b.Step || !reflect.DeepEqual(a.Markers, b.Markers) {
				t.Fatalf("rewards differ: %+v vs %+v", a.Reward, b.Reward)
			}
			// The undo stack came back: one undo restores the initial script
			// (the no-op edit left no backup), the next has nothing to undo.
			if res := step(t, r, act(UndoEditScript, "train.py")); res.Outcome != OutcomeSuccess {
				t.Fatalf("undo: %s %s", res.Outcome, res.Detail)
			}
			if b, _ := os.ReadFile(filepath.Join(r.Dir(), "train.py")); string(b) != fixtureScript {
				t.Fatalf("after undo train.py is\n%s", b)
			}
			if res := step(t, r, act(UndoEditScript, "train.py")); res.Outcome != OutcomeInvalidAction {
				t.Fatalf("second undo: got %s, want invalid_action", res.Outcome)
			}
		})
	}
}

func TestRestoreErrors(t *testing.T) {
	ctx := context.Background()
	st := newLocalStore(t)
	plain, err := blobs.PutTree(ctx, st, blobs.Files{"a.txt": {Data: []byte("a")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The error says whose mistake it is (serve-env answers 400, 404 or
	// 422 by it).
	tests := []struct {
		name, ref string
		want      error
	}{
		{"not a reference", "train.py", blobs.ErrBadRef},
		{"missing tree", "sha256:" + blobs.Hash([]byte("nothing")), store.ErrNotFound},
		{"a file, not a tree", blobs.Ref(blobs.Hash([]byte("a"))), ErrNotSnapshot},
		{"a tree that is not a snapshot", plain, ErrNotSnapshot},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := Restore(ctx, testConfig(t), st, tc.ref)
			if err == nil {
				e.Close()
				t.Fatalf("Restore(%q) succeeded", tc.ref)
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("got %v want an error wrapping %v", err, tc.want)
			}
		})
	}
}

// Files a script leaves behind: symlinks and fifos are not snapshotted,
// and a same-size rewrite right after a snapshot is seen by the next one.
func TestSnapshotWorkspaceChanges(t *testing.T) {
	ctx := context.Background()
	e, st := newTestEnv(t, false)
	dir := e.Dir()
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	ref1, err := e.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	files, _, err := blobs.GetTree(ctx, st, ref1)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := files["link"]; ok {
		t.Fatal("the symlink was snapshotted")
	}
	if _, ok := files["fifo"]; ok {
		t.Fatal("the fifo was snapshotted")
	}
	if err := os.WriteFile(filepath.Join(dir, "train.csv"), []byte(strings.Repeat("9", len(files["train.csv"].Data))), 0o644); err != nil {
		t.Fatal(err)
	}
	ref2, err := e.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ref2 == ref1 {
		t.Fatal("a same-size rewrite did not change the snapshot")
	}
	r, err := Restore(ctx, testConfig(t), st, ref2)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if b, _ := os.ReadFile(filepath.Join(r.Dir(), "train.csv")); !strings.HasPrefix(string(b), "9999") {
		t.Fatalf("restored train.csv starts %q", b[:4])
	}
	// Unchanged files keep their hashes (and a snapshot of the same state
	// the same reference) when the cache is used.
	old := time.Now().Add(-time.Hour)
	for _, f := range []string{"train.csv", "train.py", "test.csv", "data/README.md"} {
		os.Chtimes(filepath.Join(dir, f), old, old)
	}
	a, _ := e.Snapshot(ctx)
	b, _ := e.Snapshot(ctx)
	if a != b || a != ref2 {
		t.Fatalf("snapshots of an unchanged state: %s, %s, want %s", a, b, ref2)
	}
}

func TestSnapshotUnreadableFiles(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads every file")
	}
	e, st := newTestEnv(t, false)
	os.WriteFile(filepath.Join(e.Dir(), "locked.txt"), []byte("x"), 0o000)
	os.Mkdir(filepath.Join(e.Dir(), "locked"), 0o000)
	defer os.Chmod(filepath.Join(e.Dir(), "locked"), 0o755)
	ref, err := e.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	files, _, err := blobs.GetTree(context.Background(), st, ref)
	if err != nil || len(files) != 4 {
		t.Fatalf("got %d files, %v; want the 4 readable ones", len(files), err)
	}
}

// longPath makes levels nested folders of 200-byte names under dir
// (through folder handles: the deepest path is longer than PATH_MAX) with
// a file named name holding content at the bottom, and returns its path
// relative to dir.
func longPath(t *testing.T, dir string, levels int, name, content string) string {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	var rel []string
	for i := 0; i < levels; i++ {
		n := strings.Repeat(string(rune('a'+i%26)), 200)
		if err := unix.Mkdirat(fd, n, 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd, rel = next, append(rel, n)
	}
	defer unix.Close(fd)
	wfd, err := unix.Openat(fd, name, unix.O_WRONLY|unix.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	unix.Write(wfd, []byte(content))
	unix.Close(wfd)
	return strings.Join(append(rel, name), "/")
}

// TestSnapshotLongPaths: a path longer than PATH_MAX (nested long folder
// names, within the quota) is snapshotted and restored: the walk and the
// restore go by folder handles.
func TestSnapshotLongPaths(t *testing.T) {
	ctx := context.Background()
	e, st := newTestEnv(t, false)
	rel := longPath(t, e.Dir(), 25, "deep.txt", "at the bottom")
	if len(rel) < 5000 {
		t.Fatalf("path of %d bytes", len(rel))
	}
	ref, err := e.Snapshot(ctx)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	r, err := Restore(ctx, testConfig(t), st, ref)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	defer r.Close()
	if b, err := r.ReadFile(rel, 1<<10); err != nil || string(b) != "at the bottom" {
		t.Errorf("restored %d-byte path: %q, %v", len(rel), b, err)
	}
}

// TestSnapshotChangingFile: a file growing while the workspace is
// snapshotted makes a state that is not kept (ErrNotKept, counted by the
// meter), never another error.
func TestSnapshotChangingFile(t *testing.T) {
	ctx := context.Background()
	e, _ := newTestEnv(t, false)
	meter := &BlobMeter{}
	e.cfg.Blobs = meter
	path := filepath.Join(e.Dir(), "growing.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			f.Write([]byte("x"))
			if i%4096 == 0 {
				f.Truncate(0)
			}
		}
	}()
	notKeptN := 0
	for i := 0; i < 200 && notKeptN == 0; i++ {
		_, err := e.Snapshot(ctx)
		switch {
		case errors.Is(err, ErrNotKept):
			notKeptN++
		case err != nil:
			t.Fatalf("snapshot %d: %v (want ErrNotKept or success)", i, err)
		}
	}
	close(stop)
	<-done
	if _, _, n := meter.Counts(); int(n) != notKeptN {
		t.Errorf("the meter counts %d states not kept, %d seen", n, notKeptN)
	}
	t.Logf("%d snapshots not kept while the file grew", notKeptN)
}
