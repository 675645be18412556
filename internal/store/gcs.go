package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"cloud.google.com/go/storage"
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
}

// OpenGCS returns a Store for gs://bucket/prefix. A nil client is created
// with application default credentials. The bucket must exist.
func OpenGCS(ctx context.Context, bucket, prefix string, client *storage.Client) (*GCS, error) {
	uri := "gs://" + bucket + "/" + prefix
	if client == nil {
		c, err := storage.NewClient(ctx)
		if err != nil {
			return nil, fmt.Errorf("store %s: no Google Cloud credentials (%v); run `gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS", uri, err)
		}
		client = c
	}
	g := &GCS{client: client, bucket: bucket, prefix: strings.Trim(prefix, "/")}
	if _, err := g.bkt().Attrs(ctx); err != nil {
		if errors.Is(err, storage.ErrBucketNotExist) {
			return nil, fmt.Errorf("store %s: bucket %q does not exist: %w (create it, or fix the URI)", uri, bucket, ErrNotFound)
		}
		return nil, fmt.Errorf("store %s: %w", uri, err)
	}
	return g, nil
}

func (g *GCS) bkt() *storage.BucketHandle {
	return g.client.Bucket(g.bucket).Retryer(storage.WithPolicy(storage.RetryAlways))
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
		if isPreconditionFailed(err) {
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

func isPreconditionFailed(err error) bool {
	var code interface{ HTTPCode() int }
	if errors.As(err, &code) && code.HTTPCode() == 412 {
		return true
	}
	return strings.Contains(err.Error(), "412") || strings.Contains(strings.ToLower(err.Error()), "precondition")
}
