// Package store is mlerl's one edge to object storage: a small [Store]
// interface with a local-filesystem backend and a Google Cloud Storage
// backend. Everything else reads and writes streams through it.
//
// Start with [Open], which turns a root URI ("./data", "file:///x",
// "gs://bucket/prefix") into a Store. Keys are slash-separated paths relative
// to that root.
//
// Writes are atomic: an object written with [Store.Create] becomes visible
// only when its Writer's Close succeeds; Abort (or a crash) leaves nothing
// behind that readers can see. With [CreateOptions.IfNotExists] two writers
// can never both commit the same key.
package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"
)

// Sentinel errors, wrapped with the URI they concern.
var (
	ErrNotFound = errors.New("not found")
	ErrExists   = errors.New("already exists")
)

// Store is an object store rooted at one URI.
type Store interface {
	// Open opens the object at key for reading. The caller closes it.
	Open(ctx context.Context, key string) (Object, error)
	// Create starts writing the object at key. Nothing is visible until the
	// returned Writer's Close returns nil.
	Create(ctx context.Context, key string, opts CreateOptions) (Writer, error)
	// List returns the objects whose keys start with prefix, sorted by key.
	List(ctx context.Context, prefix string) ([]ObjectInfo, error)
	// Stat returns an object's attributes, or an error wrapping ErrNotFound.
	Stat(ctx context.Context, key string) (ObjectInfo, error)
	// Delete removes an object; deleting a missing object is not an error.
	Delete(ctx context.Context, key string) error
	// URI returns the full URI of key, for messages and manifests.
	URI(key string) string
}

// Object is an open object: sequential and random-access reads.
type Object interface {
	io.ReadCloser
	io.ReaderAt
	Size() int64
}

// Writer writes one object. Close commits it; Abort discards it. After
// either, the Writer is spent.
type Writer interface {
	io.Writer
	Close() error
	Abort() error
}

// CreateOptions adjust Create.
type CreateOptions struct {
	// IfNotExists makes Close fail with an error wrapping ErrExists when the
	// key already exists (a GCS generation precondition, a hard link locally).
	IfNotExists bool
	// ContentType is recorded where the backend supports it.
	ContentType string
}

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Key     string
	Size    int64
	ModTime time.Time
}

// Open returns the Store for a root URI: a local path or file:// URI, or
// gs://bucket[/prefix]. Local roots are created on first write.
func Open(ctx context.Context, root string) (Store, error) {
	switch {
	case strings.HasPrefix(root, "gs://"):
		bucket, prefix, _ := strings.Cut(strings.TrimPrefix(root, "gs://"), "/")
		if bucket == "" {
			return nil, fmt.Errorf("store %q: no bucket name (want gs://bucket/prefix)", root)
		}
		return OpenGCS(ctx, bucket, prefix, nil)
	case strings.HasPrefix(root, "file://"):
		return NewLocal(strings.TrimPrefix(root, "file://")), nil
	case strings.Contains(root, "://"):
		return nil, fmt.Errorf("store %q: unsupported scheme (use a local path, file:// or gs://)", root)
	default:
		return NewLocal(root), nil
	}
}

// ReadAll reads a whole object.
func ReadAll(ctx context.Context, s Store, key string) ([]byte, error) {
	o, err := s.Open(ctx, key)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	b, err := io.ReadAll(o)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.URI(key), err)
	}
	return b, nil
}

// WriteAll writes a whole object atomically.
func WriteAll(ctx context.Context, s Store, key string, data []byte, opts CreateOptions) error {
	w, err := s.Create(ctx, key, opts)
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		w.Abort()
		return fmt.Errorf("write %s: %w", s.URI(key), err)
	}
	return w.Close()
}

// Exists reports whether key exists.
func Exists(ctx context.Context, s Store, key string) (bool, error) {
	_, err := s.Stat(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// DirLister is implemented by stores that can list one level of folders
// without listing every object below them.
type DirLister interface {
	// Dirs returns the names of the folders directly under prefix (""
	// or a key ending in "/"), sorted, without the prefix or a trailing "/".
	Dirs(ctx context.Context, prefix string) ([]string, error)
}

// Dirs lists the folders directly under prefix ("" or ending in "/"),
// sorted. It uses the store's DirLister when it has one (a delimiter query
// on GCS), otherwise it lists every object below prefix.
func Dirs(ctx context.Context, s Store, prefix string) ([]string, error) {
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	if d, ok := s.(DirLister); ok {
		return d.Dirs(ctx, prefix)
	}
	objs, err := s.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, o := range objs {
		rest := strings.TrimPrefix(o.Key, prefix)
		if name, _, ok := strings.Cut(rest, "/"); ok && (len(out) == 0 || out[len(out)-1] != name) {
			out = append(out, name)
		}
	}
	return out, nil
}

// cleanKey validates a key: relative, slash-separated, without "..".
func cleanKey(key string) (string, error) {
	if key == "" {
		return "", errors.New("empty key")
	}
	c := path.Clean(key)
	if strings.HasPrefix(c, "/") || c == ".." || strings.HasPrefix(c, "../") || c == "." {
		return "", fmt.Errorf("key %q escapes the store root", key)
	}
	return c, nil
}
