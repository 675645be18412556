package env

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/mlerl/mlerl/internal/blobs"
	"github.com/mlerl/mlerl/internal/store"
)

// snapshotVersion is bumped when the snapshot meta changes incompatibly.
const snapshotVersion = 1

// snapshotMeta is the state stored with a snapshot's file tree.
type snapshotMeta struct {
	Version int   `json:"version"`
	State   state `json:"state"`
	// Backups maps a file to its undo stack, oldest first: blob hashes, ""
	// where the file did not exist.
	Backups map[string][]string `json:"backups,omitempty"`
}

// Snapshot stores the whole environment state in the store as a
// content-addressed tree (internal/blobs): the workspace files, the undo
// backups (as blobs), the history, the current and best scores, the step
// count, the elapsed time, the done flag and the task spec. Identical
// files are stored once across all snapshots. The returned reference
// ("sha256:...") restores it with [Restore]; equal states give equal
// references.
func (e *Env) Snapshot(ctx context.Context) (string, error) {
	files, err := blobs.ReadDir(e.dir)
	if err != nil {
		return "", fmt.Errorf("env snapshot: %w", err)
	}
	m := snapshotMeta{Version: snapshotVersion, State: e.s, Backups: map[string][]string{}}
	paths := make([]string, 0, len(e.s.Backups))
	for p := range e.s.Backups {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		for _, b := range e.s.Backups[p] {
			h := ""
			if b != nil {
				if h, err = blobs.Put(ctx, e.st, *b); err != nil {
					return "", fmt.Errorf("env snapshot: backup of %s: %w", p, err)
				}
			}
			m.Backups[p] = append(m.Backups[p], h)
		}
	}
	meta, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("env snapshot: %w", err)
	}
	ref, err := blobs.PutTree(ctx, e.st, files, meta)
	if err != nil {
		return "", fmt.Errorf("env snapshot: %w", err)
	}
	return ref, nil
}

// Restore brings back an environment from a snapshot reference in st, in
// a fresh workspace folder, with cfg's run-time settings (runner, editor,
// limits). Stepping the restored Env continues exactly where the
// snapshotted one was.
func Restore(ctx context.Context, cfg Config, st store.Store, ref string) (*Env, error) {
	files, tree, err := blobs.GetTree(ctx, st, ref)
	if err != nil {
		return nil, fmt.Errorf("env restore: %w", err)
	}
	var m snapshotMeta
	if err := json.Unmarshal(tree.Meta, &m); err != nil || m.Version == 0 {
		return nil, fmt.Errorf("env restore: %s is not an environment snapshot (meta: %v)", ref, err)
	}
	if m.Version != snapshotVersion {
		return nil, fmt.Errorf("env restore: snapshot %s has version %d, this mlerl reads version %d", ref, m.Version, snapshotVersion)
	}
	if err := m.State.Spec.Validate(); err != nil {
		return nil, fmt.Errorf("env restore %s: %w", ref, err)
	}
	e := &Env{cfg: cfg, st: st, s: m.State}
	e.s.Backups = map[string][]*[]byte{}
	for p, hs := range m.Backups {
		for _, h := range hs {
			if h == "" {
				e.s.Backups[p] = append(e.s.Backups[p], nil)
				continue
			}
			b, err := blobs.Get(ctx, st, h)
			if err != nil {
				return nil, fmt.Errorf("env restore %s: backup of %s: %w", ref, p, err)
			}
			e.s.Backups[p] = append(e.s.Backups[p], &b)
		}
	}
	if err := e.init(); err != nil {
		return nil, err
	}
	if err := e.materialise(files); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}
