package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/storage"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
)

// GCS is a Store in a Google Cloud Storage bucket under a prefix. An object
// becomes visible only when its upload completes on Close; IfNotExists uses
// the DoesNotExist generation precondition. Transient errors (429, 5xx,
// broken connections) are retried with exponential backoff for every
// operation, including the conditional create, which is safe to retry
// because its precondition makes it idempotent.
type GCS struct {
	client *storage.Client
	bucket string
	prefix string
	retry  []storage.RetryOption
}

// GCSOptions adjust [OpenGCSWith]. Start from [DefaultGCSOptions].
type GCSOptions struct {
	// Client talks to GCS; nil creates one with application default
	// credentials, or an unauthenticated one for the emulator named by
	// STORAGE_EMULATOR_HOST (e.g. fake-gcs-server).
	Client *storage.Client
	// RetryInitial and RetryMax bound the exponential backoff between
	// tries of an operation that failed transiently (429, 5xx, a broken
	// connection).
	RetryInitial, RetryMax time.Duration
	// MaxAttempts bounds the tries of one operation, the first included.
	MaxAttempts int
}

// DefaultGCSOptions returns the options [Open] uses for gs:// roots:
// backoff from 500ms up to 30s, at most 10 tries.
func DefaultGCSOptions() GCSOptions {
	return GCSOptions{RetryInitial: 500 * time.Millisecond, RetryMax: 30 * time.Second, MaxAttempts: 10}
}

// OpenGCS returns a Store for gs://bucket/prefix with [DefaultGCSOptions]
// and the given client (nil: application default credentials). The
// bucket must exist.
func OpenGCS(ctx context.Context, bucket, prefix string, client *storage.Client) (*GCS, error) {
	o := DefaultGCSOptions()
	o.Client = client
	return OpenGCSWith(ctx, bucket, prefix, o)
}

// OpenGCSWith returns a Store for gs://bucket/prefix. It checks that the
// bucket exists, so a typo fails here with the bucket's name rather than
// at the first write.
func OpenGCSWith(ctx context.Context, bucket, prefix string, o GCSOptions) (*GCS, error) {
	uri := strings.TrimSuffix("gs://"+bucket+"/"+strings.Trim(prefix, "/"), "/")
	client := o.Client
	if client == nil {
		c, err := defaultClient(ctx)
		if err != nil {
			return nil, fmt.Errorf("store %s: no Google Cloud credentials (%v); run `gcloud auth application-default login`, set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, or set STORAGE_EMULATOR_HOST for an emulator", uri, err)
		}
		client = c
	}
	g := &GCS{client: client, bucket: bucket, prefix: strings.Trim(prefix, "/")}
	g.retry = []storage.RetryOption{storage.WithPolicy(storage.RetryAlways)}
	if o.RetryInitial > 0 {
		g.retry = append(g.retry, storage.WithBackoff(gax.Backoff{Initial: o.RetryInitial, Max: max(o.RetryMax, o.RetryInitial), Multiplier: 2}))
	}
	if o.MaxAttempts > 0 {
		g.retry = append(g.retry, storage.WithMaxAttempts(o.MaxAttempts))
	}
	if _, err := g.bkt().Attrs(ctx); err != nil {
		switch {
		case errors.Is(err, storage.ErrBucketNotExist):
			return nil, fmt.Errorf("store %s: bucket %q does not exist: %w (create it with `gcloud storage buckets create gs://%s`, or fix the URI)", uri, bucket, ErrNotFound, bucket)
		case httpCode(err) == http.StatusForbidden:
			// Object permissions without bucket metadata access: the
			// bucket exists, carry on.
		case httpCode(err) == http.StatusUnauthorized:
			return nil, fmt.Errorf("store %s: not authorised (%v); run `gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS", uri, err)
		default:
			return nil, fmt.Errorf("store %s: %w", uri, err)
		}
	}
	return g, nil
}

// The default clients, one per emulator setting ("" for real GCS): a
// client holds a connection pool, so every gs:// root shares one.
var (
	clientsMu sync.Mutex
	clients   = map[string]*storage.Client{}
)

func defaultClient(ctx context.Context) (*storage.Client, error) {
	clientsMu.Lock()
	defer clientsMu.Unlock()
	key := EmulatorHost() + "|" + os.Getenv("GOOGLE_APPLICATION_CREDENTIALS")
	if c, ok := clients[key]; ok {
		return c, nil
	}
	// The client outlives this call's context.
	c, err := storage.NewClient(context.WithoutCancel(ctx))
	if err != nil {
		return nil, err
	}
	clients[key] = c
	return c, nil
}

// EmulatorHost returns STORAGE_EMULATOR_HOST, which the client library
// honours: when set, gs:// roots talk to that emulator without credentials.
func EmulatorHost() string { return os.Getenv("STORAGE_EMULATOR_HOST") }

func (g *GCS) bkt() *storage.BucketHandle {
	return g.client.Bucket(g.bucket).Retryer(g.retry...)
}

func (g *GCS) name(key string) (string, error) {
	c, err := cleanKey(key)
	if err != nil {
		return "", fmt.Errorf("gs://%s/%s: %w", g.bucket, g.prefix, err)
	}
	if g.prefix == "" {
		return c, nil
	}
	return g.prefix + "/" + c, nil
}

// URI implements Store.
func (g *GCS) URI(key string) string {
	p := g.prefix
	if key != "" {
		if p != "" {
			p += "/"
		}
		p += key
	}
	return "gs://" + g.bucket + "/" + p
}

// Ranged reads are served from a small cache of aligned blocks: Parquet
// readers issue many small ReadAts (footer, then pages of every column in
// turn), and one HTTP request per 4 KiB page would be slow and costly.
const (
	gcsBlockSize = 1 << 20 // bytes fetched per ranged request
	gcsMaxBlocks = 32      // blocks kept per open object (32 MiB)
)

type gcsObject struct {
	obj  *storage.ObjectHandle // pinned to the generation opened
	ctx  context.Context
	uri  string
	size int64

	r *storage.Reader // sequential reader, opened on first Read

	mu     sync.Mutex
	blocks map[int64][]byte // block index -> content
	order  []int64          // least recently used first
}

// Read streams the object from where the previous Read stopped.
func (o *gcsObject) Read(p []byte) (int, error) {
	if o.r == nil {
		r, err := o.obj.NewReader(o.ctx)
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", o.uri, err)
		}
		o.r = r
	}
	return o.r.Read(p)
}

func (o *gcsObject) Close() error {
	if o.r != nil {
		return o.r.Close()
	}
	return nil
}

func (o *gcsObject) Size() int64 { return o.size }

// ReadAt implements io.ReaderAt (safe for concurrent use).
func (o *gcsObject) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read %s: negative offset %d", o.uri, off)
	}
	n := 0
	for n < len(p) && off+int64(n) < o.size {
		pos := off + int64(n)
		b, err := o.block(pos / gcsBlockSize)
		if err != nil {
			return n, err
		}
		n += copy(p[n:], b[pos%gcsBlockSize:])
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// block returns block i, fetching it with one ranged request on a miss.
func (o *gcsObject) block(i int64) ([]byte, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if b, ok := o.blocks[i]; ok {
		o.touch(i)
		return b, nil
	}
	start := i * gcsBlockSize
	length := min(gcsBlockSize, o.size-start)
	r, err := o.obj.NewRangeReader(o.ctx, start, length)
	if err != nil {
		return nil, fmt.Errorf("read %s at %d: %w", o.uri, start, err)
	}
	defer r.Close()
	b := make([]byte, length)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("read %s at %d: %w", o.uri, start, err)
	}
	if o.blocks == nil {
		o.blocks = map[int64][]byte{}
	}
	if len(o.order) >= gcsMaxBlocks {
		delete(o.blocks, o.order[0])
		o.order = o.order[1:]
	}
	o.blocks[i] = b
	o.order = append(o.order, i)
	return b, nil
}

func (o *gcsObject) touch(i int64) {
	for j, k := range o.order {
		if k == i {
			o.order = append(append(o.order[:j:j], o.order[j+1:]...), i)
			return
		}
	}
}

// Open implements Store. It fetches the object's attributes (one request);
// content is read lazily.
func (g *GCS) Open(ctx context.Context, key string) (Object, error) {
	n, err := g.name(key)
	if err != nil {
		return nil, err
	}
	obj := g.bkt().Object(n)
	a, err := obj.Attrs(ctx)
	if err != nil {
		if errors.Is(err, storage.ErrObjectNotExist) {
			return nil, fmt.Errorf("%s: %w", g.URI(key), ErrNotFound)
		}
		return nil, fmt.Errorf("open %s: %w", g.URI(key), err)
	}
	// Pin every later read to the generation we saw: a concurrent
	// overwrite cannot mix two versions of the object.
	return &gcsObject{obj: obj.Generation(a.Generation), ctx: ctx, uri: g.URI(key), size: a.Size}, nil
}

type gcsWriter struct {
	w      *storage.Writer
	cancel context.CancelFunc
	uri    string
	done   bool
}

func (w *gcsWriter) Write(p []byte) (int, error) { return w.w.Write(p) }

func (w *gcsWriter) Close() error {
	if w.done {
		return errors.New("store: writer already closed")
	}
	w.done = true
	defer w.cancel()
	if err := w.w.Close(); err != nil {
		if httpCode(err) == http.StatusPreconditionFailed {
			return fmt.Errorf("%s: %w", w.uri, ErrExists)
		}
		return fmt.Errorf("commit %s: %w", w.uri, err)
	}
	return nil
}

// Abort cancels the upload's context, which abandons it without creating
// the object.
func (w *gcsWriter) Abort() error {
	if w.done {
		return nil
	}
	w.done = true
	w.cancel()
	w.w.Close()
	return nil
}

// Create implements Store.
func (g *GCS) Create(ctx context.Context, key string, opts CreateOptions) (Writer, error) {
	n, err := g.name(key)
	if err != nil {
		return nil, err
	}
	obj := g.bkt().Object(n)
	if opts.IfNotExists {
		obj = obj.If(storage.Conditions{DoesNotExist: true})
	}
	cctx, cancel := context.WithCancel(ctx)
	w := obj.NewWriter(cctx)
	w.ContentType = opts.ContentType
	return &gcsWriter{w: w, cancel: cancel, uri: g.URI(key)}, nil
}

// List implements Store.
func (g *GCS) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	full := prefix
	if g.prefix != "" {
		full = g.prefix + "/" + prefix
	}
	it := g.bkt().Objects(ctx, &storage.Query{Prefix: full})
	var out []ObjectInfo
	for {
		a, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", g.URI(prefix), err)
		}
		key := a.Name
		if g.prefix != "" {
			key = strings.TrimPrefix(key, g.prefix+"/")
		}
		out = append(out, ObjectInfo{Key: key, Size: a.Size, ModTime: a.Updated})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Stat implements Store.
func (g *GCS) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	n, err := g.name(key)
	if err != nil {
		return ObjectInfo{}, err
	}
	a, err := g.bkt().Object(n).Attrs(ctx)
	if err != nil {
		if errors.Is(err, storage.ErrObjectNotExist) {
			return ObjectInfo{}, fmt.Errorf("%s: %w", g.URI(key), ErrNotFound)
		}
		return ObjectInfo{}, fmt.Errorf("stat %s: %w", g.URI(key), err)
	}
	return ObjectInfo{Key: key, Size: a.Size, ModTime: a.Updated}, nil
}

// Delete implements Store.
func (g *GCS) Delete(ctx context.Context, key string) error {
	n, err := g.name(key)
	if err != nil {
		return err
	}
	err = g.bkt().Object(n).Delete(ctx)
	if err != nil && !errors.Is(err, storage.ErrObjectNotExist) {
		return fmt.Errorf("delete %s: %w", g.URI(key), err)
	}
	return nil
}

// httpCode returns the HTTP status of a GCS error, or 0.
func httpCode(err error) int {
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		return ge.Code
	}
	return 0
}

// Dirs implements DirLister with a delimiter query: one request per
// thousand folders, whatever lies below them.
func (g *GCS) Dirs(ctx context.Context, prefix string) ([]string, error) {
	full := prefix
	if g.prefix != "" {
		full = g.prefix + "/" + prefix
	}
	q := &storage.Query{Prefix: full, Delimiter: "/"}
	if err := q.SetAttrSelection([]string{"Name"}); err != nil {
		return nil, err
	}
	it := g.bkt().Objects(ctx, q)
	var out []string
	for {
		a, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", g.URI(prefix), err)
		}
		if a.Prefix != "" {
			out = append(out, strings.TrimSuffix(strings.TrimPrefix(a.Prefix, full), "/"))
		}
	}
	sort.Strings(out)
	return out, nil
}
