package env

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"
	"golang.org/x/sys/unix"

	"github.com/mlerl/mlerl/internal/blobs"
	"github.com/mlerl/mlerl/internal/safefile"
	"github.com/mlerl/mlerl/internal/sandbox"
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
// references. Only regular files are kept (a symlink or fifo a script
// created is left out; so are empty folders and what a script made
// unreadable). Files unchanged since the last
// snapshot (same size and mtime, older than racyWindow) are not re-read,
// and blobs this Env has seen in the store are not re-uploaded: the blob
// store must not be pruned while an Env lives. A state over the workspace
// quota (its files and undo backups together) is refused, its error
// wrapping [ErrSnapshotTooLarge], before anything is stored. Any other
// failure to read the workspace (a folder that cannot be opened, a file
// that changes while it is read, an error of the walk) is not kept either
// (the error wraps [ErrNotKept]): the workspace is walked by folder
// handles, so paths of any length are snapshotted (and restored). Only
// errors of the blob store are other errors.
func (e *Env) Snapshot(ctx context.Context) (string, error) {
	ref, err := e.snapshot(ctx)
	if errors.Is(err, ErrNotKept) && e.cfg.Blobs != nil {
		e.cfg.Blobs.refused.Add(1)
	}
	return ref, err
}

func (e *Env) snapshot(ctx context.Context) (string, error) {
	var backupBytes int64
	for _, stack := range e.s.Backups {
		for _, b := range stack {
			if b != nil {
				backupBytes += int64(len(*b))
			}
		}
	}
	if err := e.checkSnapshot(backupBytes); err != nil {
		return "", fmt.Errorf("env snapshot: %w", err)
	}
	entries, err := e.putWorkspace(ctx, backupBytes)
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
				if h, err = e.put(ctx, *b); err != nil {
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
	// The same listing blobs.PutTree writes, so equal states give equal refs.
	tree, err := json.Marshal(blobs.Tree{Entries: entries, Meta: meta})
	if err != nil {
		return "", fmt.Errorf("env snapshot: %w", err)
	}
	h, err := e.put(ctx, tree)
	if err != nil {
		return "", fmt.Errorf("env snapshot: %w", err)
	}
	return blobs.Ref(h), nil
}

// hashEntry caches a workspace file's hash by size and modification time.
type hashEntry struct {
	size  int64
	mtime time.Time
	hash  string
}

// racyWindow: a file modified this recently is re-hashed even when its
// size and mtime match (file-system timestamps are coarse, so a same-size
// rewrite within one tick would look unchanged).
const racyWindow = 2 * time.Second

// known reports whether the store is known to hold the blob h.
func (e *Env) known(h string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stored[h]
}

// put stores b unless this Env already knows the store has it.
func (e *Env) put(ctx context.Context, b []byte) (string, error) {
	h := blobs.Hash(b)
	if e.known(h) {
		return h, nil
	}
	_, added, err := blobs.PutNew(ctx, e.st, b)
	if err != nil {
		return "", err
	}
	if added {
		e.cfg.Blobs.add(len(b))
	}
	e.mu.Lock()
	e.stored[h] = true
	e.mu.Unlock()
	return h, nil
}

// Snapshot bounds: a file larger than maxSnapshotFileBytes is left out
// (like a symlink), and at most snapshotReadBytes of file content is held
// in memory at once while a snapshot reads changed files.
const (
	maxSnapshotFileBytes = 512 << 20
	snapshotReadBytes    = 1 << 30
)

// putWorkspace stores the workspace's regular files as blobs and returns
// their tree entries, sorted by path. Symlinks, other non-regular files
// (which a script may create), files over maxSnapshotFileBytes and files
// a script made unreadable are not part of a snapshot; the walk goes by
// folder handles (no path is too long, no link is followed) and files are
// read through internal/safefile, so a file swapped for a link or a FIFO
// after the walk is left out too, never followed or blocked on. Unchanged
// files are neither re-read nor re-uploaded. The walk stops once the
// files, or their bytes with extra, pass the workspace quota (files added
// since checkSnapshot measured). Whatever the workspace makes fail wraps
// ErrNotKept; the store's errors do not.
func (e *Env) putWorkspace(ctx context.Context, extra int64) ([]blobs.Entry, error) {
	if e.stored == nil {
		e.stored = map[string]bool{}
	}
	if e.hashes == nil {
		e.hashes = map[string]hashEntry{}
	}
	now := time.Now()
	var entries []blobs.Entry
	var mtimes []time.Time // as stat'ed before reading: a later change shows
	var toRead []int       // entries whose hash is not known
	q := e.quota()
	total := extra
	err := walkFiles(e.dir, func(rel string, st *unix.Stat_t) error {
		size := st.Size
		if size > maxSnapshotFileBytes {
			return nil
		}
		mtime := time.Unix(st.Mtim.Sec, st.Mtim.Nsec)
		en := blobs.Entry{Path: rel, Mode: st.Mode & 0o777, Size: size}
		if total += size; total > q.Bytes || len(entries) >= q.Files {
			return fmt.Errorf("the workspace grew past its quota while being snapshotted: %w", ErrSnapshotTooLarge)
		}
		if c, ok := e.hashes[rel]; ok && c.size == size && c.mtime.Equal(mtime) && now.Sub(c.mtime) > racyWindow && e.known(c.hash) {
			en.Hash = c.hash
		} else {
			toRead = append(toRead, len(entries))
		}
		entries = append(entries, en)
		mtimes = append(mtimes, mtime)
		return nil
	})
	if err != nil {
		return nil, notKept(err)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	mem := semaphore.NewWeighted(snapshotReadBytes)
	leftOut := make([]bool, len(entries))
	for _, i := range toRead {
		g.Go(func() error {
			rel := entries[i].Path
			if err := mem.Acquire(gctx, max(entries[i].Size, 1)); err != nil {
				return err
			}
			defer mem.Release(max(entries[i].Size, 1))
			b, err := e.ReadFile(rel, maxSnapshotFileBytes)
			var se *safefile.Error
			if errors.As(err, &se) && !errors.Is(err, safefile.ErrTooLarge) {
				leftOut[i] = true // unreadable, or no longer a regular file
				return nil
			}
			if err != nil {
				return notKept(fmt.Errorf("%s: %w", rel, err))
			}
			if int64(len(b)) != entries[i].Size {
				return notKept(fmt.Errorf("%s changed while being snapshotted", rel))
			}
			h, err := e.put(gctx, b)
			entries[i].Hash = h
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	kept := entries[:0]
	e.hashes = make(map[string]hashEntry, len(entries)) // forget deleted files
	for i, en := range entries {
		if leftOut[i] {
			continue
		}
		e.hashes[en.Path] = hashEntry{size: en.Size, mtime: mtimes[i], hash: en.Hash}
		kept = append(kept, en)
	}
	sort.Slice(kept, func(i, j int) bool { return kept[i].Path < kept[j].Path })
	return kept, nil
}

// walkFiles calls each with the slash-separated path and the lstat of
// every regular file under dir, walking by folder handles (openat): a path
// of any length works and no link is followed. A folder that cannot be
// opened for want of permission (a script made it unreadable) is left
// out; one nested deeper than the quota allows, or any other failure, is
// an error.
func walkFiles(dir string, each func(rel string, st *unix.Stat_t) error) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the workspace: %w", err)
	}
	defer unix.Close(fd)
	return walkFolder(fd, "", 1, each)
}

func walkFolder(fd int, rel string, depth int, each func(string, *unix.Stat_t) error) error {
	if depth > sandbox.MaxWorkspaceDepth {
		return fmt.Errorf("%s: folders nested more than %d deep", rel, sandbox.MaxWorkspaceDepth)
	}
	names, err := readDirNames(fd)
	if err != nil {
		return fmt.Errorf("list %s: %w", orDot(rel), err)
	}
	sort.Strings(names)
	for _, name := range names {
		p := name
		if rel != "" {
			p = rel + "/" + name
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed since the listing
			}
			return fmt.Errorf("%s: %w", p, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			if err := each(p, &st); err != nil {
				return err
			}
		case unix.S_IFDIR:
			sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOENT) {
				continue // unreadable (left out), or removed
			}
			if err != nil {
				return fmt.Errorf("folder %s: %w", p, err)
			}
			err = walkFolder(sub, p, depth+1, each)
			unix.Close(sub)
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// readDirNames lists the folder fd (at most maxSnapshotNames names).
func readDirNames(fd int) ([]string, error) {
	buf := make([]byte, 32<<10)
	var names []string
	for {
		n, err := unix.ReadDirent(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
		if len(names) > maxSnapshotNames {
			return nil, fmt.Errorf("more than %d names in one folder", maxSnapshotNames)
		}
	}
}

// maxSnapshotNames bounds one folder's listing (the files quota bounds
// the workspace's; this bounds the walk's memory before it is checked).
const maxSnapshotNames = 1 << 20

func orDot(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

// ErrNotSnapshot is wrapped by Restore's error when the reference names
// something it cannot restore (a file, a task's files, a snapshot of
// another format), as opposed to one that is missing (store.ErrNotFound)
// or a store that fails.
var ErrNotSnapshot = errors.New("not a restorable environment snapshot")

// Restore brings back an environment from a snapshot reference in st, in
// a fresh workspace folder, with cfg's run-time settings (runner, editor,
// limits). Stepping the restored Env continues exactly where the
// snapshotted one was. A malformed reference wraps blobs.ErrBadRef.
func Restore(ctx context.Context, cfg Config, st store.Store, ref string) (*Env, error) {
	files, tree, err := blobs.GetTree(ctx, st, ref)
	if errors.Is(err, blobs.ErrNotTree) {
		return nil, fmt.Errorf("env restore: %s: %w: a blob that is not a tree", ref, ErrNotSnapshot)
	}
	if err != nil {
		return nil, fmt.Errorf("env restore: %w", err)
	}
	var m snapshotMeta
	if err := json.Unmarshal(tree.Meta, &m); err != nil || m.Version == 0 {
		return nil, fmt.Errorf("env restore: %s: %w: a tree without snapshot metadata (a task's files?)", ref, ErrNotSnapshot)
	}
	if m.Version != snapshotVersion {
		return nil, fmt.Errorf("env restore: %s: %w: format version %d, this mlerl reads version %d", ref, ErrNotSnapshot, m.Version, snapshotVersion)
	}
	if err := m.State.Spec.Validate(); err != nil {
		return nil, fmt.Errorf("env restore: %s: %w: its task spec is invalid: %v", ref, ErrNotSnapshot, err)
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
	if err := e.materialise(files, tree); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// StepFrom restores the state ref in a fresh workspace, carries out one
// action there and removes the workspace: one step-wise RL sample (the
// trainer's reward workers and serve-env both use it).
func StepFrom(ctx context.Context, cfg Config, st store.Store, ref, actionText string) (StepResult, error) {
	e, err := Restore(ctx, cfg, st, ref)
	if err != nil {
		return StepResult{}, err
	}
	defer e.Close()
	return e.Step(ctx, actionText)
}
