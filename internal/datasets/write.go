package datasets

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// ErrCommitted is wrapped when a write targets a version that is already
// committed.
var ErrCommitted = errors.New("version already committed")

// Pending is a dataset version being written. Part files become visible
// one by one (each is an atomic object); the version becomes visible to
// readers only when Commit writes its manifest.
type Pending struct {
	St      store.Store
	Name    string
	Version int
	Schema  schemas.Info
	// RunKey identifies the run: a rerun with the same key resumes this
	// version instead of starting a new one.
	RunKey string
}

type pendingFile struct {
	Schema    string    `json:"schema"`
	RunKey    string    `json:"run_key"`
	StartedAt time.Time `json:"started_at"`
	// Token tells this claim from another writer's: a create whose
	// response was lost is retried, fails its precondition, and is
	// recognised as ours by reading the token back.
	Token string `json:"token"`
}

// Begin starts (or resumes) a version of dataset name. When an uncommitted
// version with the same runKey exists (a previous run of the same command
// that died before committing), it is resumed: its finished part files are
// kept and [Pending.Parts] lists them so the caller can skip their work.
// Otherwise a new version max+1 is claimed; two concurrent Begins never
// claim the same version.
func Begin(ctx context.Context, st store.Store, name string, schema schemas.Info, runKey string) (*Pending, error) {
	all, committed, err := Versions(ctx, st, name)
	if err != nil {
		return nil, err
	}
	for i := len(all) - 1; i >= 0; i-- {
		v := all[i]
		if committed[v] {
			continue
		}
		b, err := store.ReadAll(ctx, st, Dir(name, v)+"/"+PendingFile)
		if err != nil {
			continue // a folder of stray parts without a pending marker: leave it alone
		}
		var pf pendingFile
		if json.Unmarshal(b, &pf) == nil && pf.RunKey == runKey && pf.Schema == schema.Name {
			return &Pending{St: st, Name: name, Version: v, Schema: schema, RunKey: runKey}, nil
		}
	}
	next := 1
	if len(all) > 0 {
		next = all[len(all)-1] + 1
	}
	token := newToken()
	for tries := 0; tries < 100; tries, next = tries+1, next+1 {
		key := Dir(name, next) + "/" + PendingFile
		b, _ := json.MarshalIndent(pendingFile{Schema: schema.Name, RunKey: runKey, StartedAt: time.Now().UTC(), Token: token}, "", "  ")
		err := store.WriteAll(ctx, st, key, b, store.CreateOptions{IfNotExists: true, ContentType: "application/json"})
		if errors.Is(err, store.ErrExists) {
			var pf pendingFile
			if got, rerr := store.ReadAll(ctx, st, key); rerr == nil && json.Unmarshal(got, &pf) == nil &&
				(pf.Token == token || (pf.RunKey == runKey && pf.Schema == schema.Name)) {
				// Ours, or a concurrent Begin of the same run (another
				// shard of it) claimed it first: join that version.
				return &Pending{St: st, Name: name, Version: next, Schema: schema, RunKey: runKey}, nil
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		return &Pending{St: st, Name: name, Version: next, Schema: schema, RunKey: runKey}, nil
	}
	return nil, fmt.Errorf("%s: could not claim a new version", st.URI(name))
}

func newToken() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Dir returns the version folder key.
func (p *Pending) Dir() string { return Dir(p.Name, p.Version) }

// URI returns the version's URI.
func (p *Pending) URI() string { return p.St.URI(p.Dir()) }

// Parts lists the finished part files (relative names), sorted.
func (p *Pending) Parts(ctx context.Context) ([]string, error) {
	objs, err := p.St.List(ctx, p.Dir()+"/")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, o := range objs {
		rel := strings.TrimPrefix(o.Key, p.Dir()+"/")
		if strings.HasSuffix(rel, ".parquet") {
			out = append(out, rel)
		}
	}
	sort.Strings(out)
	return out, nil
}

// HasPart reports whether part is already finished.
func (p *Pending) HasPart(ctx context.Context, part string) (bool, error) {
	return store.Exists(ctx, p.St, p.Dir()+"/"+part)
}

// PartWriter streams rows of type T into one Parquet part file.
type PartWriter[T any] struct {
	w   store.Writer
	ft  *footerTrimmer
	pw  *parquet.GenericWriter[T]
	uri string
}

// RowGroupRows is the default row-group size: large enough for good
// compression and column scans, small enough to stream.
const RowGroupRows = 8192

// NewPartWriter starts writing part (a name ending in .parquet) of p. The
// file carries the schema name and version in its key-value metadata and is
// zstd-compressed; its string columns carry no page statistics and no
// long min/max (see stats.go). Close commits the part; Abort drops it.
func NewPartWriter[T any](ctx context.Context, p *Pending, part string) (*PartWriter[T], error) {
	if !strings.HasSuffix(part, ".parquet") || strings.Contains(part, "/") {
		return nil, fmt.Errorf("part name %q: want a plain name ending in .parquet", part)
	}
	// A committed version is immutable: never add or replace its files.
	if ok, err := store.Exists(ctx, p.St, p.Dir()+"/"+ManifestFile); err != nil {
		return nil, err
	} else if ok {
		return nil, fmt.Errorf("%s is already committed: %w; start a new version with Begin", p.URI(), ErrCommitted)
	}
	w, err := p.St.Create(ctx, p.Dir()+"/"+part, store.CreateOptions{ContentType: "application/vnd.apache.parquet"})
	if err != nil {
		return nil, err
	}
	ft := &footerTrimmer{w: w}
	opts := append([]parquet.WriterOption{
		parquet.Compression(&parquet.Zstd),
		parquet.MaxRowsPerRowGroup(RowGroupRows),
		parquet.KeyValueMetadata(schemas.MetaSchema, p.Schema.Name),
		parquet.KeyValueMetadata(schemas.MetaVersion, p.Schema.Version),
	}, textColumnOptions(parquet.SchemaOf(new(T)))...)
	pw := parquet.NewGenericWriter[T](ft, opts...)
	return &PartWriter[T]{w: w, ft: ft, pw: pw, uri: p.St.URI(p.Dir() + "/" + part)}, nil
}

// Write appends rows.
func (pw *PartWriter[T]) Write(rows ...T) error {
	if _, err := pw.pw.Write(rows); err != nil {
		return fmt.Errorf("write %s: %w", pw.uri, err)
	}
	return nil
}

// Close flushes and commits the part.
func (pw *PartWriter[T]) Close() error {
	// The last row group goes straight through; only the page index and
	// the footer are held back to be trimmed.
	err := pw.pw.Flush()
	if err == nil {
		pw.ft.closing = true
		err = pw.pw.Close()
	}
	if err == nil {
		err = pw.ft.finish()
	}
	if err != nil {
		pw.w.Abort()
		return fmt.Errorf("write %s: %w", pw.uri, err)
	}
	return pw.w.Close()
}

// Abort drops the part.
func (pw *PartWriter[T]) Abort() error { return pw.w.Abort() }

// WritePart writes rows as one finished part.
func WritePart[T any](ctx context.Context, p *Pending, part string, rows []T) error {
	w, err := NewPartWriter[T](ctx, p, part)
	if err != nil {
		return err
	}
	if err := w.Write(rows...); err != nil {
		w.Abort()
		return err
	}
	return w.Close()
}

// CommitOptions describe a version at commit time.
type CommitOptions struct {
	Producer Producer
	Parents  []Parent
	Extra    map[string]any
}

// Commit checks every part (schema metadata, row count), computes its
// checksum and writes the manifest, which makes the version visible.
// Committing twice is harmless: a second Commit of an already committed
// version returns the existing manifest.
func (p *Pending) Commit(ctx context.Context, opts CommitOptions) (*Manifest, error) {
	if m, err := ReadManifest(ctx, p.St, p.Name, p.Version); err == nil {
		return m, nil
	}
	parts, err := p.Parts(ctx)
	if err != nil {
		return nil, err
	}
	m := &Manifest{
		Name: p.Name, Version: p.Version, Schema: p.Schema.Name, SchemaVersion: p.Schema.Version,
		CreatedAt: time.Now().UTC(), Producer: opts.Producer, Parents: opts.Parents, Extra: opts.Extra,
		RunKey: p.RunKey, Files: []File{},
	}
	if m.Producer.Host == "" {
		m.Producer.Host, _ = os.Hostname()
	}
	for _, part := range parts {
		f, err := checkFile(ctx, p.St, p.Dir()+"/"+part, p.Schema, nil)
		if err != nil {
			return nil, err
		}
		f.Path = part
		m.Files = append(m.Files, f)
		m.Rows += f.Rows
		m.Bytes += f.Bytes
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	key := p.Dir() + "/" + ManifestFile
	err = store.WriteAll(ctx, p.St, key, b, store.CreateOptions{IfNotExists: true, ContentType: "application/json"})
	if errors.Is(err, store.ErrExists) {
		return ReadManifest(ctx, p.St, p.Name, p.Version)
	}
	if err != nil {
		return nil, err
	}
	p.St.Delete(ctx, p.Dir()+"/"+PendingFile)
	m.URI = p.St.URI(key)
	return m, nil
}

// checkFile hashes an object and checks its Parquet footer against
// schema. When want is not nil, a size or checksum mismatch is reported
// before the footer is parsed (the manifest is the authority).
func checkFile(ctx context.Context, st store.Store, key string, schema schemas.Info, want *File) (File, error) {
	o, err := st.Open(ctx, key)
	if err != nil {
		return File{}, err
	}
	defer o.Close()
	h := sha256.New()
	// Sequential reads: one stream on GCS, not a ranged request per buffer.
	n, err := io.Copy(h, o)
	if err != nil {
		return File{}, fmt.Errorf("read %s: %w", st.URI(key), err)
	}
	got := File{Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil))}
	if want != nil && (got.SHA256 != want.SHA256 || got.Bytes != want.Bytes) {
		return got, fmt.Errorf("%s: checksum mismatch: sha256 %s (%d bytes), manifest says %s (%d bytes): %w; the file changed after commit, restore it from a good copy or re-run the stage into a new version", st.URI(key), got.SHA256, got.Bytes, want.SHA256, want.Bytes, ErrCorrupt)
	}
	pf, err := openParquet(st.URI(key), o, schema)
	if err != nil {
		return got, err
	}
	got.Rows = pf.NumRows()
	return got, nil
}

// FindPending returns the uncommitted version of name that [Begin] would
// resume for runKey, or nil when there is none. Unlike Begin it never
// claims a new version: a commit step uses it to find the parts that
// other processes wrote.
func FindPending(ctx context.Context, st store.Store, name string, schema schemas.Info, runKey string) (*Pending, error) {
	all, committed, err := Versions(ctx, st, name)
	if err != nil {
		return nil, err
	}
	for i := len(all) - 1; i >= 0; i-- {
		v := all[i]
		if committed[v] {
			continue
		}
		b, err := store.ReadAll(ctx, st, Dir(name, v)+"/"+PendingFile)
		if err != nil {
			continue
		}
		var pf pendingFile
		if json.Unmarshal(b, &pf) == nil && pf.RunKey == runKey && pf.Schema == schema.Name {
			return &Pending{St: st, Name: name, Version: v, Schema: schema, RunKey: runKey}, nil
		}
	}
	return nil, nil
}
