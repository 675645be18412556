package dataset

// Sharing: copy a committed dataset version from one data root to another
// (local <-> gs://), checksums verified, manifest last.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/mlerl/mlerl/internal/blobs"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// ErrConflict is wrapped when the destination already holds the version
// with different content.
var ErrConflict = errors.New("destination holds a different version with the same name and number")

// PublishOptions configure [Publish].
type PublishOptions struct {
	// WithParents publishes the parent versions found in the source root
	// first (recursively), so the lineage resolves at the destination.
	// Default false: the manifest still names its parents by source URI.
	WithParents bool
	// Log, when not nil, receives one line per version.
	Log io.Writer
}

// PublishResult says what [Publish] did for one version.
type PublishResult struct {
	Name    string
	Version int
	// NoOp: the destination already held the same version (same file
	// checksums); only missing blobs and attachments were copied.
	NoOp        bool
	Files       int   // part files copied
	Attachments int   // stats.md and exports copied
	Blobs       int   // blobs copied (snapshot and task trees reachable from the rows)
	Bytes       int64 // bytes copied, all kinds
	Parents     []*PublishResult
}

// Publish copies version (0: the latest) of dataset name from src to dst,
// under the same name and version number:
//
//   - every part file is copied while its sha256 and size are checked
//     against the source manifest, then the whole version is verified
//     again at the destination ([datasets.Verify]);
//   - the attachments listed in the manifest (stats.md, exports) are
//     copied with the same check;
//   - the blobs the rows reference (tasks' workspace and private trees,
//     steps' and rl_states' snapshots, the snapshots of rl_states' verl
//     validation file, and every tree, file and undo backup these reach)
//     are copied, each checked against its hash, so states stay
//     restorable at the destination;
//   - the manifest is written last, byte for byte, with an if-not-exists
//     precondition: until then the version is invisible at dst.
//
// On any mismatch nothing is committed and the part files and attachments
// this call wrote are removed. Publishing a version that dst already holds with the same
// checksums is a no-op (missing blobs are still filled in); with
// different content it fails with an error wrapping [ErrConflict]. A
// version folder at dst that a stage is still writing (it has a pending
// marker) is refused.
func Publish(ctx context.Context, src, dst store.Store, name string, version int, opts PublishOptions) (*PublishResult, error) {
	return publish(ctx, src, dst, name, version, opts, map[string]*PublishResult{})
}

// publish is Publish; done holds the versions this call tree already
// handled, so a parent shared by several children is copied once.
func publish(ctx context.Context, src, dst store.Store, name string, version int, opts PublishOptions, done map[string]*PublishResult) (*PublishResult, error) {
	if r, ok := done[datasets.Dir(name, version)]; ok && version != 0 {
		return r, nil
	}
	var m *datasets.Manifest
	var err error
	if version == 0 {
		m, err = datasets.Latest(ctx, src, name)
	} else {
		m, err = datasets.ReadManifest(ctx, src, name, version)
	}
	if err != nil {
		return nil, err
	}
	res := &PublishResult{Name: m.Name, Version: m.Version}
	dir := datasets.Dir(m.Name, m.Version)
	manifestKey := dir + "/" + datasets.ManifestFile
	raw, err := store.ReadAll(ctx, src, manifestKey)
	if err != nil {
		return nil, err
	}
	atts, err := attachmentsOf(m)
	if err != nil {
		return nil, err
	}

	if opts.WithParents {
		for _, p := range m.Parents {
			if _, err := datasets.ReadManifest(ctx, src, p.Name, p.Version); err != nil {
				continue // not in this root: its URI still names it
			}
			pr, err := publish(ctx, src, dst, p.Name, p.Version, opts, done)
			if err != nil {
				return nil, fmt.Errorf("parent %s v%d of %s v%d: %w", p.Name, p.Version, m.Name, m.Version, err)
			}
			res.Parents = append(res.Parents, pr)
		}
	}

	// Already there?
	have, err := datasets.ReadManifest(ctx, dst, m.Name, m.Version)
	switch {
	case err == nil:
		if !sameFiles(m, have) {
			return nil, fmt.Errorf("%s v%d: %s holds other files (created %s by %q) than %s: %w; publish under another root, or delete the destination version if it is yours",
				m.Name, m.Version, dst.URI(dir), have.CreatedAt.Format("2006-01-02 15:04"), have.Producer.Command, src.URI(dir), ErrConflict)
		}
		res.NoOp = true
	case errors.Is(err, datasets.ErrNoDataset):
		if ok, err := store.Exists(ctx, dst, dir+"/"+datasets.PendingFile); err != nil {
			return nil, err
		} else if ok {
			return nil, fmt.Errorf("%s: a stage is writing this version at the destination (it has %s); publish after it commits, or to another root", dst.URI(dir), datasets.PendingFile)
		}
	default:
		return nil, err
	}

	// Copy; on any failure before the manifest lands, remove the part
	// files and attachments this call wrote (blobs stay: they are
	// content-addressed, checked, and may be shared by other versions).
	var written []string
	err = func() error {
		if !res.NoOp {
			for _, f := range m.Files {
				key := dir + "/" + f.Path
				n, err := copyChecked(ctx, src, dst, key, f.SHA256, f.Bytes)
				if err != nil {
					return err
				}
				written = append(written, key)
				res.Files++
				res.Bytes += n
			}
			if err := datasets.Verify(ctx, dst, m); err != nil {
				return fmt.Errorf("after copying to %s: %w", dst.URI(dir), err)
			}
		}
		for _, a := range atts {
			if ok, err := sameObject(ctx, dst, a); err != nil {
				return err
			} else if ok {
				continue
			}
			n, err := copyChecked(ctx, src, dst, a.Key, a.SHA256, a.Bytes)
			if err != nil {
				return err
			}
			written = append(written, a.Key)
			res.Attachments++
			res.Bytes += n
		}
		refs, err := blobRefs(ctx, src, m)
		if err != nil {
			return err
		}
		nb, bb, err := copyBlobClosure(ctx, src, dst, refs)
		res.Blobs, res.Bytes = nb, res.Bytes+bb
		if err != nil {
			return err
		}
		if res.NoOp {
			return nil
		}
		err = store.WriteAll(ctx, dst, manifestKey, raw, store.CreateOptions{IfNotExists: true, ContentType: "application/json"})
		if errors.Is(err, store.ErrExists) { // published concurrently: fine if it is the same
			if got, rerr := datasets.ReadManifest(ctx, dst, m.Name, m.Version); rerr != nil || !sameFiles(m, got) {
				return fmt.Errorf("%s v%d appeared at %s while publishing, with other files: %w", m.Name, m.Version, dst.URI(dir), ErrConflict)
			}
			written = nil // theirs now
			return nil
		}
		return err
	}()
	if err != nil {
		for _, k := range written {
			dst.Delete(ctx, k)
		}
		return nil, fmt.Errorf("%s v%d -> %s: nothing committed: %w", m.Name, m.Version, dst.URI(dir), err)
	}
	done[dir] = res
	if opts.Log != nil {
		state := "published"
		if res.NoOp {
			state = "already at the destination"
		}
		fmt.Fprintf(opts.Log, "%s v%d: %s (%d files, %d attachments, %d blobs, %d bytes copied) -> %s\n",
			m.Name, m.Version, state, res.Files, res.Attachments, res.Blobs, res.Bytes, dst.URI(dir))
	}
	return res, nil
}

// sameFiles reports whether two manifests list the same part files.
func sameFiles(a, b *datasets.Manifest) bool {
	if a.Schema != b.Schema || len(a.Files) != len(b.Files) || a.Rows != b.Rows {
		return false
	}
	for i := range a.Files {
		if a.Files[i] != b.Files[i] {
			return false
		}
	}
	return true
}

// attachmentsOf reads Extra["attachments"] (absent: none).
func attachmentsOf(m *datasets.Manifest) ([]Attachment, error) {
	v, ok := m.Extra["attachments"]
	if !ok {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %v", m.URI, errNoAttachments, err)
	}
	var out []Attachment
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", m.URI, errNoAttachments, err)
	}
	for _, a := range out {
		if a.Key == "" || len(a.SHA256) != 64 {
			return nil, fmt.Errorf("%s: attachment %+v: %w", m.URI, a, errNoAttachments)
		}
	}
	return out, nil
}

// sameObject reports whether dst already holds a with the right checksum.
func sameObject(ctx context.Context, dst store.Store, a Attachment) (bool, error) {
	o, err := dst.Open(ctx, a.Key)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	defer o.Close()
	h := sha256.New()
	n, err := io.Copy(h, o)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", dst.URI(a.Key), err)
	}
	return n == a.Bytes && hex.EncodeToString(h.Sum(nil)) == a.SHA256, nil
}

// copyChecked streams key from src to dst, hashing on the way; a size or
// checksum mismatch aborts the upload (nothing lands at dst) and names
// the source object.
func copyChecked(ctx context.Context, src, dst store.Store, key, sha string, size int64) (int64, error) {
	in, err := src.Open(ctx, key)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	w, err := dst.Create(ctx, key, store.CreateOptions{})
	if err != nil {
		return 0, err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), in)
	if err != nil {
		w.Abort()
		return n, fmt.Errorf("copy %s to %s: %w", src.URI(key), dst.URI(key), err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sha || n != size {
		w.Abort()
		return n, fmt.Errorf("%s: sha256 %s (%d bytes), the manifest says %s (%d bytes): %w; the source changed after commit: restore it from a good copy or re-run the stage into a new version",
			src.URI(key), got, n, sha, size, datasets.ErrCorrupt)
	}
	return n, w.Close()
}

// refColumns names, per schema, the columns holding blob tree references.
var refColumns = map[string]func(ctx context.Context, st store.Store, m *datasets.Manifest, add func(string)) error{
	schemas.Tasks.Name: func(ctx context.Context, st store.Store, m *datasets.Manifest, add func(string)) error {
		return datasets.Each(ctx, st, m, schemas.Tasks, func(rows []schemas.Task) error {
			for _, r := range rows {
				add(r.WorkspaceTree)
				add(r.PrivateTree)
			}
			return nil
		})
	},
	schemas.Steps.Name: func(ctx context.Context, st store.Store, m *datasets.Manifest, add func(string)) error {
		return datasets.Each(ctx, st, m, schemas.Steps, func(rows []schemas.Step) error {
			for _, r := range rows {
				add(r.SnapshotRef)
				add(r.SnapshotAfter)
			}
			return nil
		})
	},
	schemas.RLStates.Name: func(ctx context.Context, st store.Store, m *datasets.Manifest, add func(string)) error {
		// The verl validation file's snapshots: held-out states, in no row.
		for _, r := range valSnapshotRefs(m) {
			add(r)
		}
		return datasets.Each(ctx, st, m, schemas.RLStates, func(rows []schemas.RLState) error {
			for _, r := range rows {
				add(r.SnapshotRef)
			}
			return nil
		})
	},
}

// valSnapshotRefs returns the snapshot references of the verl validation
// file exported with an rl_states version (Extra["exports"], key
// verl_val_snapshot_refs).
func valSnapshotRefs(m *datasets.Manifest) []string {
	ex, _ := m.Extra["exports"].(map[string]any)
	var out []string
	switch refs := ex[valSnapshotRefsKey].(type) {
	case []string: // a manifest this process built
		out = refs
	case []any: // read back from JSON
		for _, r := range refs {
			if s, ok := r.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// blobRefs lists the distinct blob references in m's rows.
func blobRefs(ctx context.Context, st store.Store, m *datasets.Manifest) ([]string, error) {
	fn, ok := refColumns[m.Schema]
	if !ok {
		return nil, nil
	}
	seen := map[string]bool{}
	var out []string
	err := fn(ctx, st, m, func(ref string) {
		if ref != "" && !seen[ref] {
			seen[ref] = true
			out = append(out, ref)
		}
	})
	return out, err
}

var (
	refRe  = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	hashRe = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// copyBlobClosure copies the blobs of refs and everything they reach: a
// reference is a blob; when that blob is a tree listing, its entries'
// blobs are reached, and so are, inside its meta, every "sha256:<hex>"
// string (a snapshot's workspace and private task trees) and every hash
// listed under a "backups" key (a snapshot's undo stack). Each blob is
// read with its hash checked ([blobs.Get]); one already at dst is not
// copied again (blobs are immutable and content-addressed).
func copyBlobClosure(ctx context.Context, src, dst store.Store, refs []string) (int, int64, error) {
	seen := map[string]bool{}
	var level []reach
	for _, r := range refs {
		if !refRe.MatchString(r) {
			return 0, 0, fmt.Errorf("blob reference %q: want sha256:<64 hex digits>", r)
		}
		if h := r[len("sha256:"):]; !seen[h] {
			seen[h] = true
			level = append(level, reach{h, true})
		}
	}
	var copied, written atomic.Int64
	// Breadth first: one level of the reference graph at a time, in parallel.
	for len(level) > 0 {
		found := make([][]reach, len(level))
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(16)
		for i, r := range level {
			g.Go(func() error {
				key := blobs.Prefix + r.hash
				exists, err := store.Exists(gctx, dst, key)
				if err != nil {
					return err
				}
				var b []byte
				if !exists || r.tree {
					if b, err = blobs.Get(gctx, src, r.hash); err != nil {
						return err
					}
				}
				if !exists {
					err := store.WriteAll(gctx, dst, key, b, store.CreateOptions{IfNotExists: true})
					if err != nil && !errors.Is(err, store.ErrExists) {
						return err
					}
					copied.Add(1)
					written.Add(int64(len(b)))
				}
				if r.tree {
					found[i] = reached(b)
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return int(copied.Load()), written.Load(), err
		}
		level = level[:0:0]
		for _, rs := range found {
			for _, r := range rs {
				if !seen[r.hash] {
					seen[r.hash] = true
					level = append(level, r)
				}
			}
		}
	}
	return int(copied.Load()), written.Load(), nil
}

type reach struct {
	hash string
	tree bool // may be a tree listing: look inside
}

// reached lists what a blob references when it is a tree listing; any
// other blob (a file's bytes) references nothing.
func reached(b []byte) []reach {
	var t blobs.Tree
	if !bytes.HasPrefix(bytes.TrimSpace(b), []byte("{")) || json.Unmarshal(b, &t) != nil || t.Entries == nil {
		return nil
	}
	var out []reach
	for _, e := range t.Entries {
		out = append(out, reach{e.Hash, false})
	}
	if len(t.Meta) > 0 {
		var meta any
		if json.Unmarshal(t.Meta, &meta) == nil {
			walkMeta(meta, false, func(r reach) { out = append(out, r) })
		}
	}
	return out
}

// walkMeta finds references in a tree's meta: "sha256:<hex>" strings
// anywhere, and bare hashes below a "backups" key.
func walkMeta(v any, inBackups bool, add func(reach)) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			walkMeta(x, inBackups || k == "backups", add)
		}
	case []any:
		for _, x := range v {
			walkMeta(x, inBackups, add)
		}
	case string:
		switch {
		case refRe.MatchString(v):
			add(reach{v[len("sha256:"):], true})
		case inBackups && hashRe.MatchString(v):
			add(reach{v, false})
		}
	}
}
