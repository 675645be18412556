package env

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/mlerl/mlerl/internal/safefile"
	"github.com/mlerl/mlerl/internal/sandbox"
)

// The workspace quota: what a workspace may hold, the task's files
// included (Config.WorkspaceBytes and WorkspaceFiles, or the task's own
// from task.yaml). Script runs are held to it by the sandbox (a run over
// it is killed and what it added removed); the environment's own writes
// (edits, Copy File) are refused past it; a snapshot over it is refused,
// so that the blob store never keeps a state larger than a workspace may
// be.

// ErrNotKept is wrapped by Snapshot's error when the workspace could not
// be snapshotted: over its quota (ErrSnapshotTooLarge), a folder or file
// that cannot be read, a file changing while it is read, a walk that
// fails. The state is not kept: the caller goes on without a reference to
// it (one line says so), and a stage never stops for it. Errors of the
// blob store itself do not wrap it.
var ErrNotKept = errors.New("the state is not kept")

// ErrSnapshotTooLarge is wrapped by Snapshot's error when the state is
// over the workspace quota; it wraps ErrNotKept.
var ErrSnapshotTooLarge = fmt.Errorf("over the workspace quota (%w)", ErrNotKept)

// notKept wraps a snapshot failure the workspace caused as ErrNotKept.
func notKept(err error) error {
	if err == nil || errors.Is(err, ErrNotKept) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrNotKept, err)
}

// quota is the episode's workspace quota.
func (e *Env) quota() sandbox.WorkspaceQuota {
	q := sandbox.WorkspaceQuota{Bytes: e.cfg.WorkspaceBytes, Files: e.cfg.WorkspaceFiles}
	if e.s.Spec.WorkspaceBytes > 0 {
		q.Bytes = e.s.Spec.WorkspaceBytes
	}
	if e.s.Spec.WorkspaceFiles > 0 {
		q.Files = e.s.Spec.WorkspaceFiles
	}
	return q
}

// quotaKeys names the settings of the quota q, for messages.
func (e *Env) quotaKeys() string {
	if e.s.Spec.WorkspaceBytes > 0 || e.s.Spec.WorkspaceFiles > 0 {
		return fmt.Sprintf("task %s's workspace_bytes / workspace_files in task.yaml", e.s.Spec.TaskID)
	}
	return "env.workspace_bytes / env.workspace_files"
}

// usage measures the workspace, stopping past the quota.
func (e *Env) usage() (sandbox.WorkspaceUsage, error) {
	return sandbox.MeasureWorkspace(e.dir, e.quota())
}

// checkWrite refuses a write of n bytes to rel (replacing old bytes, or a
// new file when old < 0) that would take the workspace past its quota.
// The folders of rel's path that do not exist yet count too, since the
// write creates them: without them a Copy File to "a/a/.../x" made a
// folder chain thousands deep in one step, past the depth and entry
// limits, and every later write and run of the episode was refused.
func (e *Env) checkWrite(rel string, n, old int64) error {
	u, err := e.usage()
	if err != nil {
		return err
	}
	if old < 0 {
		u.Entries++
		old = 0
	}
	u.Bytes += n - old
	parts := strings.Split(rel, "/")
	u.Depth = max(u.Depth, len(parts))
	cur := e.dir
	for i, p := range parts[:len(parts)-1] {
		cur = filepath.Join(cur, p)
		if _, err := os.Lstat(cur); err != nil {
			u.Entries += len(parts) - 1 - i // this folder and those below it
			break
		}
	}
	if why := e.quota().Exceeded(u); why != "" {
		return refuse("writing %s (%s) would leave the workspace with %s, over its quota (%s)", rel, safefile.Bytes(n), why, e.quotaKeys())
	}
	return nil
}

// checkSnapshot refuses a state over the quota: the workspace's files,
// plus extra bytes (the undo backups a snapshot stores too).
func (e *Env) checkSnapshot(extra int64) error {
	q := e.quota()
	u, err := sandbox.MeasureWorkspace(e.dir, q)
	if err != nil {
		return notKept(err)
	}
	u.Bytes += extra
	if why := q.Exceeded(u); why != "" {
		return fmt.Errorf("the workspace holds %s (%s): the state is not kept: %w", why, e.quotaKeys(), ErrSnapshotTooLarge)
	}
	return nil
}

// BlobMeter counts what a stage's snapshots add to the blob store: blobs
// written (not those already there) and their bytes, and the states not
// kept (ErrNotKept: over the quota, or a workspace that could not be
// read). Safe for concurrent use; nil counts nothing.
type BlobMeter struct {
	blobs, bytes, refused atomic.Int64
}

func (m *BlobMeter) add(n int) {
	if m != nil {
		m.blobs.Add(1)
		m.bytes.Add(int64(n))
	}
}

// Counts returns the blobs added, their bytes and the states not kept.
func (m *BlobMeter) Counts() (blobs, bytes, refused int64) {
	if m == nil {
		return 0, 0, 0
	}
	return m.blobs.Load(), m.bytes.Load(), m.refused.Load()
}

// String is a stage's closing line on the blob store: "snapshots added
// 3.2 MiB to the blob store (41 new blobs)", with the states not kept when
// there were any.
func (m *BlobMeter) String() string {
	b, n, refused := m.Counts()
	s := fmt.Sprintf("snapshots added %s to the blob store (%d new blobs)", safefile.Bytes(n), b)
	if refused > 0 {
		s += fmt.Sprintf("; %d states not kept (over the workspace quota, or not readable whole: see the lines above)", refused)
	}
	return s
}
