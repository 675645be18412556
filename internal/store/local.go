package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Local is a Store on the local filesystem. Writes go to a temporary file
// beside the target and are renamed (or hard-linked, for IfNotExists) into
// place on Close, so readers never see a partial object.
type Local struct {
	root string
}

// NewLocal returns a Store rooted at dir. The root is made absolute, so
// the URIs recorded in manifests (lineage) do not depend on the working
// directory of the process that wrote them.
func NewLocal(dir string) *Local {
	if dir == "" {
		dir = "."
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return &Local{root: filepath.Clean(dir)}
}

// Root returns the directory the store is rooted at.
func (l *Local) Root() string { return l.root }

func (l *Local) path(key string) (string, error) {
	c, err := cleanKey(key)
	if err != nil {
		return "", fmt.Errorf("%s: %w", l.root, err)
	}
	return filepath.Join(l.root, filepath.FromSlash(c)), nil
}

// URI implements Store.
func (l *Local) URI(key string) string {
	if key == "" {
		return l.root
	}
	return filepath.Join(l.root, filepath.FromSlash(key))
}

type localObject struct {
	*os.File
	size int64
}

func (o localObject) Size() int64 { return o.size }

// Open implements Store.
func (l *Local) Open(ctx context.Context, key string) (Object, error) {
	p, err := l.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: %w", p, ErrNotFound)
		}
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if st.IsDir() {
		f.Close()
		return nil, fmt.Errorf("%s is a directory, not an object: %w", p, ErrNotFound)
	}
	return localObject{File: f, size: st.Size()}, nil
}

type localWriter struct {
	f      *os.File
	target string
	opts   CreateOptions
	done   bool
}

func (w *localWriter) Write(p []byte) (int, error) { return w.f.Write(p) }

func (w *localWriter) Abort() error {
	if w.done {
		return nil
	}
	w.done = true
	w.f.Close()
	return os.Remove(w.f.Name())
}

func (w *localWriter) Close() error {
	if w.done {
		return errors.New("store: writer already closed")
	}
	w.done = true
	tmp := w.f.Name()
	// CreateTemp makes 0600 files; committed objects are ordinary files.
	if err := w.f.Chmod(0o644); err != nil {
		w.f.Close()
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", w.target, err)
	}
	if err := w.f.Sync(); err != nil {
		w.f.Close()
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", w.target, err)
	}
	if err := w.f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", w.target, err)
	}
	if w.opts.IfNotExists {
		// A hard link fails if the target exists: an atomic create-exclusive.
		err := os.Link(tmp, w.target)
		os.Remove(tmp)
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s: %w", w.target, ErrExists)
		}
		if err != nil {
			return fmt.Errorf("commit %s: %w", w.target, err)
		}
		return nil
	}
	if err := os.Rename(tmp, w.target); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("commit %s: %w", w.target, err)
	}
	return nil
}

// Create implements Store.
func (l *Local) Create(ctx context.Context, key string, opts CreateOptions) (Writer, error) {
	p, err := l.path(key)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", p, err)
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-"+filepath.Base(p)+"-*")
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", p, err)
	}
	return &localWriter{f: f, target: p, opts: opts}, nil
}

// List implements Store. Temporary files of unfinished writes are skipped.
func (l *Local) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	var out []ObjectInfo
	// Walk from the deepest directory the prefix names.
	dir := l.root
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		dir = filepath.Join(l.root, filepath.FromSlash(prefix[:i]))
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return fs.SkipDir
			}
			return err
		}
		if d.IsDir() || strings.HasPrefix(d.Name(), ".tmp-") {
			return nil
		}
		rel, err := filepath.Rel(l.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // deleted while we walked
		}
		if err != nil {
			return err
		}
		out = append(out, ObjectInfo{Key: key, Size: info.Size(), ModTime: info.ModTime()})
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list %s: %w", l.URI(prefix), err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Stat implements Store.
func (l *Local) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	p, err := l.path(key)
	if err != nil {
		return ObjectInfo{}, err
	}
	st, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return ObjectInfo{}, fmt.Errorf("%s: %w", p, ErrNotFound)
		}
		return ObjectInfo{}, err
	}
	if st.IsDir() {
		return ObjectInfo{}, fmt.Errorf("%s is a directory: %w", p, ErrNotFound)
	}
	return ObjectInfo{Key: key, Size: st.Size(), ModTime: st.ModTime()}, nil
}

// Delete implements Store.
func (l *Local) Delete(ctx context.Context, key string) error {
	p, err := l.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", p, err)
	}
	return nil
}

// Dirs implements DirLister.
func (l *Local) Dirs(ctx context.Context, prefix string) ([]string, error) {
	dir := l.root
	if prefix != "" {
		p, err := l.path(strings.TrimSuffix(prefix, "/"))
		if err != nil {
			return nil, err
		}
		dir = p
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", l.URI(prefix), err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil // os.ReadDir sorts by name
}
