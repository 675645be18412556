// Package blobs keeps content-addressed file trees in a [store.Store]: each
// file's bytes are stored once under _blobs/sha256/<hash>, and a tree (a
// JSON list of paths, modes and hashes) is itself a blob. Task workspaces
// and environment snapshots are trees, so identical files across thousands
// of snapshots cost nothing extra.
//
// Start with [PutTree] and [GetTree]. A tree reference is "sha256:<hex>".
package blobs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/mlerl/mlerl/internal/store"
)

// Prefix is the folder of the blob store inside a data root.
const Prefix = "_blobs/sha256/"

// Entry is one file of a tree.
type Entry struct {
	Path string `json:"path"` // slash-separated, relative
	Mode uint32 `json:"mode"` // permission bits
	Hash string `json:"hash"` // hex sha256 of the content
	Size int64  `json:"size"`
}

// Tree is a set of files; Meta carries small extra state (a snapshot's
// history, say) stored with the tree.
type Tree struct {
	Entries []Entry         `json:"entries"`
	Meta    json.RawMessage `json:"meta,omitempty"`
}

// Hash returns the hex sha256 of b.
func Hash(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// Ref turns a hash into a reference string.
func Ref(hash string) string { return "sha256:" + hash }

// Errors a caller must tell apart: a malformed reference and a blob that
// is not a tree are the caller's mistakes; a missing blob is
// store.ErrNotFound.
var (
	ErrBadRef  = errors.New("want sha256:<64 hex digits>")
	ErrNotTree = errors.New("not a tree listing")
)

// ParseRef returns the hash of a reference: "sha256:" and 64 lowercase
// hex digits, nothing else (a hash is a store key: "../" must not reach
// one).
func ParseRef(ref string) (string, error) {
	h, ok := strings.CutPrefix(ref, "sha256:")
	if !ok || len(h) != 64 || strings.Trim(h, "0123456789abcdef") != "" {
		return "", fmt.Errorf("blob reference %q: %w", ref, ErrBadRef)
	}
	return h, nil
}

// Exists reports whether the blob a reference names is in st.
func Exists(ctx context.Context, st store.Store, ref string) (bool, error) {
	h, err := ParseRef(ref)
	if err != nil {
		return false, err
	}
	return store.Exists(ctx, st, Prefix+h)
}

// Put stores b (if not already present) and returns its hash.
func Put(ctx context.Context, st store.Store, b []byte) (string, error) {
	h, _, err := PutNew(ctx, st, b)
	return h, err
}

// PutNew is [Put] that also reports whether this call added the blob
// (false: the store had it), so that callers can count what they add.
func PutNew(ctx context.Context, st store.Store, b []byte) (hash string, added bool, err error) {
	h := Hash(b)
	key := Prefix + h
	if ok, err := store.Exists(ctx, st, key); err != nil {
		return "", false, err
	} else if ok {
		return h, false, nil
	}
	err = store.WriteAll(ctx, st, key, b, store.CreateOptions{IfNotExists: true})
	if errors.Is(err, store.ErrExists) {
		return h, false, nil
	}
	if err != nil {
		return "", false, err
	}
	return h, true, nil
}

// Get reads a blob by hash and checks its content against the hash.
func Get(ctx context.Context, st store.Store, hash string) ([]byte, error) {
	b, err := store.ReadAll(ctx, st, Prefix+hash)
	if err != nil {
		return nil, err
	}
	if Hash(b) != hash {
		return nil, fmt.Errorf("%s: content does not match its hash: the blob store is corrupt", st.URI(Prefix+hash))
	}
	return b, nil
}

// Files is an in-memory tree: path -> content and mode.
type Files map[string]File

// File is one file's content and mode.
type File struct {
	Data []byte
	Mode fs.FileMode
}

// PutTree stores the files (in parallel, deduplicated) and the tree
// listing, and returns the tree's reference.
func PutTree(ctx context.Context, st store.Store, files Files, meta json.RawMessage) (string, error) {
	t := Tree{Meta: meta}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for p, f := range files {
		t.Entries = append(t.Entries, Entry{Path: p, Mode: uint32(f.Mode.Perm()), Hash: Hash(f.Data), Size: int64(len(f.Data))})
		g.Go(func() error {
			_, err := Put(gctx, st, f.Data)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return "", err
	}
	sort.Slice(t.Entries, func(i, j int) bool { return t.Entries[i].Path < t.Entries[j].Path })
	b, err := json.Marshal(t)
	if err != nil {
		return "", err
	}
	h, err := Put(ctx, st, b)
	if err != nil {
		return "", err
	}
	return Ref(h), nil
}

// GetTreeListing reads a tree's listing without its file contents.
func GetTreeListing(ctx context.Context, st store.Store, ref string) (*Tree, error) {
	h, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	b, err := Get(ctx, st, h)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", ref, err)
	}
	var t Tree
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("tree %s: %w: %v", ref, ErrNotTree, err)
	}
	return &t, nil
}

// GetTree reads a whole tree.
func GetTree(ctx context.Context, st store.Store, ref string) (Files, *Tree, error) {
	t, err := GetTreeListing(ctx, st, ref)
	if err != nil {
		return nil, nil, err
	}
	files := make(Files, len(t.Entries))
	datas := make([][]byte, len(t.Entries))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, e := range t.Entries {
		g.Go(func() error {
			b, err := Get(gctx, st, e.Hash)
			datas[i] = b
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, fmt.Errorf("tree %s: %w", ref, err)
	}
	for i, e := range t.Entries {
		files[e.Path] = File{Data: datas[i], Mode: fs.FileMode(e.Mode)}
	}
	return files, t, nil
}

// ReadDir loads a local directory as Files (regular files only; symlinks
// are refused so a tree never points outside its folder).
func ReadDir(dir string) (Files, error) {
	files := Files{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%s is a symlink: trees hold regular files only", p)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)] = File{Data: b, Mode: info.Mode().Perm()}
		return nil
	})
	return files, err
}

// WriteDir materialises files under dir (which should be empty; it is
// made when missing). It writes through folder handles (openat), so that
// paths of any length work and no link is followed below dir.
func WriteDir(dir string, files Files) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write tree: %w", err)
	}
	root, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("write tree: %w", &fs.PathError{Op: "open", Path: dir, Err: err})
	}
	defer unix.Close(root)
	for p, f := range files {
		if err := writeAt(root, p, f); err != nil {
			return err
		}
	}
	return nil
}

// writeAt writes f at the slash-separated path p under the folder root,
// making its folders (0755).
func writeAt(root int, p string, f File) error {
	parts := strings.Split(p, "/")
	for _, c := range parts {
		if c == "" || c == "." || c == ".." || strings.ContainsRune(c, 0) {
			return fmt.Errorf("tree path %q escapes its folder", p)
		}
	}
	fd := root
	defer func() {
		if fd != root {
			unix.Close(fd)
		}
	}()
	for i, c := range parts[:len(parts)-1] {
		if err := unix.Mkdirat(fd, c, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("write tree: %w", &fs.PathError{Op: "mkdir", Path: strings.Join(parts[:i+1], "/"), Err: err})
		}
		next, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("write tree: %w", &fs.PathError{Op: "open", Path: strings.Join(parts[:i+1], "/"), Err: err})
		}
		if fd != root {
			unix.Close(fd)
		}
		fd = next
	}
	mode := f.Mode.Perm()
	if mode == 0 {
		mode = 0o644
	}
	wfd, err := unix.Openat(fd, parts[len(parts)-1], unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(mode))
	if err != nil {
		return fmt.Errorf("write tree: %w", &fs.PathError{Op: "open", Path: p, Err: err})
	}
	w := os.NewFile(uintptr(wfd), p)
	_, err = w.Write(f.Data)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write tree: %w", err)
	}
	return nil
}
