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
	uri := "gs://" + bucket + "/" + strings.Trim(prefix, "/")
	client := o.Client
	if client == nil {
		c, err := storage.NewClient(ctx)
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

type gcsObject struct {
	r    *storage.Reader
	obj  *storage.ObjectHandle
	ctx  context.Context
	size int64
}

func (o *gcsObject) Read(p []byte) (int, error) { return o.r.Read(p) }
func (o *gcsObject) Close() error               { return o.r.Close() }
func (o *gcsObject) Size() int64                { return o.size }

// ReadAt issues a ranged read; it is what Parquet readers use.
func (o *gcsObject) ReadAt(p []byte, off int64) (int, error) {
	if off >= o.size {
		return 0, io.EOF
	}
	n := int64(len(p))
	if off+n > o.size {
		n = o.size - off
	}
	r, err := o.obj.NewRangeReader(o.ctx, off, n)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	got, err := io.ReadFull(r, p[:n])
	if err == nil && got < len(p) {
		err = io.EOF
	}
	return got, err
}

// Open implements Store.
func (g *GCS) Open(ctx context.Context, key string) (Object, error) {
	n, err := g.name(key)
	if err != nil {
		return nil, err
	}
	obj := g.bkt().Object(n)
	r, err := obj.NewReader(ctx)
	if err != nil {
		if errors.Is(err, storage.ErrObjectNotExist) {
			return nil, fmt.Errorf("%s: %w", g.URI(key), ErrNotFound)
		}
		return nil, fmt.Errorf("open %s: %w", g.URI(key), err)
	}
	// Pin later ranged reads to the generation we opened.
	obj = obj.Generation(r.Attrs.Generation)
	return &gcsObject{r: r, obj: obj, ctx: ctx, size: r.Attrs.Size}, nil
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
