package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// faultyGCS is fake-gcs-server behind an HTTP front that can fail requests
// with 503, before they reach the server or after (a lost response).
type faultyGCS struct {
	srv *fakestorage.Server
	url string // what STORAGE_EMULATOR_HOST points at

	mu     sync.Mutex
	before map[string]int // kind -> requests still to fail before the server sees them
	after  map[string]int // kind -> requests to run, then answer 503
	served map[string]int // kind -> 503s served
	seen   map[string]int // kind -> requests seen
}

// requestKind classifies a JSON/XML API request.
func requestKind(r *http.Request) string {
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/upload/"):
		return "upload"
	case r.Method == http.MethodDelete:
		return "delete"
	case r.Method != http.MethodGet:
		return "other"
	case r.URL.Query().Get("alt") == "media" || !strings.HasPrefix(p, "/storage/v1/"):
		return "read"
	case strings.HasSuffix(p, "/o"):
		return "list"
	case strings.Contains(p, "/o/"):
		return "stat"
	default:
		return "bucket"
	}
}

// newFaultyGCS starts the fake server with bucket "bkt" and points
// STORAGE_EMULATOR_HOST at it.
func newFaultyGCS(t testing.TB) *faultyGCS {
	f := &faultyGCS{before: map[string]int{}, after: map[string]int{}, served: map[string]int{}, seen: map[string]int{}}
	var inner http.Handler
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind := requestKind(r)
		f.mu.Lock()
		f.seen[kind]++
		fail := f.before[kind] > 0
		lose := !fail && f.after[kind] > 0
		if fail {
			f.before[kind]--
			f.served[kind]++
		}
		if lose {
			f.after[kind]--
			f.served[kind]++
		}
		f.mu.Unlock()
		if fail {
			http.Error(w, "injected fault", http.StatusServiceUnavailable)
			return
		}
		if lose {
			inner.ServeHTTP(httptest.NewRecorder(), r)
			http.Error(w, "injected fault after the server acted", http.StatusServiceUnavailable)
			return
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{NoListener: true, Scheme: "http", ExternalURL: ts.URL, PublicHost: strings.TrimPrefix(ts.URL, "http://"), Writer: discard{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: "bkt"})
	inner = srv.HTTPHandler()
	f.srv, f.url = srv, ts.URL
	t.Setenv("STORAGE_EMULATOR_HOST", ts.URL)
	return f
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func (f *faultyGCS) inject(before, after map[string]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.served)
	clear(f.seen)
	for k, n := range before {
		f.before[k] = n
	}
	for k, n := range after {
		f.after[k] = n
	}
}

func (f *faultyGCS) counts() (served, seen map[string]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps(f.served), maps(f.seen)
}

func maps(m map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// openFast opens gs://bkt/<prefix> with millisecond backoff.
func openFast(t testing.TB, prefix string, attempts int) *store.GCS {
	t.Helper()
	st, err := store.OpenGCSWith(context.Background(), "bkt", prefix, store.GCSOptions{RetryInitial: time.Millisecond, RetryMax: 5 * time.Millisecond, MaxAttempts: attempts})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestGCS(t *testing.T) {
	newFaultyGCS(t)
	t.Run("no prefix", func(t *testing.T) { testStore(t, openFast(t, "", 5)) })
	t.Run("prefix", func(t *testing.T) { testStore(t, openFast(t, "team/data", 5)) })
}

func TestGCSURIs(t *testing.T) {
	newFaultyGCS(t)
	st, err := store.Open(context.Background(), "gs://bkt/p/q/")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.URI("steps/v1"), "gs://bkt/p/q/steps/v1"; got != want {
		t.Errorf("URI: got %q want %q", got, want)
	}
}

func TestGCSMissingBucket(t *testing.T) {
	newFaultyGCS(t)
	_, err := store.Open(context.Background(), "gs://no-such-bucket/data")
	if err == nil || !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), `bucket "no-such-bucket" does not exist`) || !strings.Contains(err.Error(), "gs://no-such-bucket/data") {
		t.Fatalf("got %v want ErrNotFound naming the bucket and URI", err)
	}
}

func TestGCSNoCredentials(t *testing.T) {
	t.Setenv("STORAGE_EMULATOR_HOST", "")
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", filepath.Join(t.TempDir(), "missing.json"))
	_, err := store.Open(context.Background(), "gs://bkt/data")
	if err == nil || !strings.Contains(err.Error(), "credentials") || !strings.Contains(err.Error(), "gs://bkt/data") {
		t.Fatalf("got %v want an error about credentials naming the URI", err)
	}
}

// TestGCSRetries injects 503s into each kind of request and checks that
// the operation still succeeds, and that the faults were really served.
func TestGCSRetries(t *testing.T) {
	ctx := context.Background()
	f := newFaultyGCS(t)
	st := openFast(t, "retry", 6)
	if err := store.WriteAll(ctx, st, "seed", []byte("0123456789"), store.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		kind string
		op   func() error
	}{
		{"upload", func() error {
			return store.WriteAll(ctx, st, "up/obj", []byte("payload"), store.CreateOptions{IfNotExists: true})
		}},
		{"read", func() error {
			b, err := store.ReadAll(ctx, st, "seed")
			if err == nil && string(b) != "0123456789" {
				err = fmt.Errorf("read %q", b)
			}
			return err
		}},
		{"stat", func() error {
			info, err := st.Stat(ctx, "seed")
			if err == nil && info.Size != 10 {
				err = fmt.Errorf("size %d", info.Size)
			}
			return err
		}},
		{"list", func() error {
			objs, err := st.List(ctx, "")
			if err == nil && len(objs) == 0 {
				err = errors.New("empty list")
			}
			return err
		}},
		{"delete", func() error { return st.Delete(ctx, "up/obj") }},
		{"bucket", func() error {
			_, err := store.OpenGCSWith(ctx, "bkt", "x", store.GCSOptions{RetryInitial: time.Millisecond, MaxAttempts: 6})
			return err
		}},
	}
	for _, c := range cases {
		t.Run(c.kind, func(t *testing.T) {
			f.inject(map[string]int{c.kind: 3}, nil)
			if err := c.op(); err != nil {
				t.Fatalf("with 3 injected 503s: %v", err)
			}
			if served, _ := f.counts(); served[c.kind] != 3 {
				t.Errorf("503s served to %s: got %d want 3", c.kind, served[c.kind])
			}
		})
	}
	t.Run("ranged read", func(t *testing.T) {
		o, err := st.Open(ctx, "seed")
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		f.inject(map[string]int{"read": 2}, nil)
		buf := make([]byte, 4)
		if n, err := o.ReadAt(buf, 3); err != nil || string(buf[:n]) != "3456" {
			t.Fatalf("ReadAt: got %q, %v", buf[:n], err)
		}
		if served, _ := f.counts(); served["read"] != 2 {
			t.Errorf("503s served: got %d want 2", served["read"])
		}
	})
	t.Run("gives up with the URI", func(t *testing.T) {
		f.inject(map[string]int{"stat": 100}, nil)
		defer f.inject(map[string]int{"stat": 0}, nil)
		_, err := st.Stat(ctx, "seed")
		if err == nil || !strings.Contains(err.Error(), "gs://bkt/retry/seed") {
			t.Fatalf("got %v want an error naming gs://bkt/retry/seed", err)
		}
		if _, seen := f.counts(); seen["stat"] != 6 {
			t.Errorf("tries: got %d want 6 (MaxAttempts)", seen["stat"])
		}
	})
	t.Run("conditional create whose response is lost", func(t *testing.T) {
		// The server creates the object but the client sees a 503; its
		// retry then fails the precondition. Store reports ErrExists
		// (the object is there); datasets recognise their own claim.
		f.inject(nil, map[string]int{"upload": 1})
		err := store.WriteAll(ctx, st, "lost/obj", []byte("v"), store.CreateOptions{IfNotExists: true})
		if !errors.Is(err, store.ErrExists) {
			t.Fatalf("got %v want ErrExists", err)
		}
		if b, _ := store.ReadAll(ctx, st, "lost/obj"); string(b) != "v" {
			t.Errorf("content: got %q want v", b)
		}
		f.inject(nil, map[string]int{"upload": 1})
		p, err := datasets.Begin(ctx, st, "steps", schemas.Steps, "run")
		if err != nil || p.Version != 1 {
			t.Fatalf("Begin with a lost claim response: got %v, %v want v1", p, err)
		}
		if err := datasets.WritePart(ctx, p, "part-0.parquet", []schemas.Step{{TaskID: "t"}}); err != nil {
			t.Fatal(err)
		}
		f.inject(nil, map[string]int{"upload": 1})
		m, err := p.Commit(ctx, datasets.CommitOptions{})
		if err != nil || m.Version != 1 || m.Rows != 1 {
			t.Fatalf("Commit with a lost manifest response: got %v, %v", m, err)
		}
	})
}

// TestGCSDataset writes, commits, reads and verifies a whole dataset on
// the fake server through gs:// URIs, as a stage would.
func TestGCSDataset(t *testing.T) {
	ctx := context.Background()
	newFaultyGCS(t)
	st, err := store.Open(ctx, "gs://bkt/runs/a")
	if err != nil {
		t.Fatal(err)
	}
	p, err := datasets.Begin(ctx, st, "steps", schemas.Steps, "k")
	if err != nil {
		t.Fatal(err)
	}
	var want []schemas.Step
	for i := range 3 {
		var rows []schemas.Step
		for j := range 500 {
			rows = append(rows, schemas.Step{TaskID: "task", TrajectoryID: fmt.Sprint(i), StepIndex: int32(j), State: strings.Repeat("state ", 50)})
		}
		want = append(want, rows...)
		if err := datasets.WritePart(ctx, p, fmt.Sprintf("part-%d.parquet", i), rows); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := datasets.Resolve(ctx, "gs://bkt/runs/a/steps"); !errors.Is(err, datasets.ErrNoDataset) {
		t.Fatalf("before Commit: got %v want ErrNoDataset", err)
	}
	if _, err := p.Commit(ctx, datasets.CommitOptions{Producer: datasets.NewProducer(nil)}); err != nil {
		t.Fatal(err)
	}
	st2, m, err := datasets.Resolve(ctx, "gs://bkt/runs/a/steps")
	if err != nil {
		t.Fatal(err)
	}
	if m.URI != "gs://bkt/runs/a/steps/v1/_MANIFEST.json" || m.Rows != int64(len(want)) {
		t.Errorf("manifest: got %s with %d rows", m.URI, m.Rows)
	}
	got, err := datasets.ReadAll[schemas.Step](ctx, st2, m, schemas.Steps)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || got[700].StepIndex != want[700].StepIndex || got[1499].State != want[1499].State {
		t.Errorf("rows: got %d want %d", len(got), len(want))
	}
	var arrowRows int64
	if err := datasets.EachRecord(ctx, st2, m, schemas.Steps, nil, func(r arrow.Record) error { arrowRows += r.NumRows(); return nil }); err != nil {
		t.Fatal(err)
	}
	if arrowRows != int64(len(want)) {
		t.Errorf("arrow rows: got %d want %d", arrowRows, len(want))
	}
	if err := datasets.Verify(ctx, st2, m); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	// Damage a part behind the manifest's back: Verify names it.
	key := "runs/a/steps/v1/part-1.parquet"
	b, err := store.ReadAll(ctx, st, "steps/v1/part-1.parquet")
	if err != nil {
		t.Fatal(err)
	}
	b[200] ^= 1
	if err := store.WriteAll(ctx, st, "steps/v1/part-1.parquet", b, store.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := datasets.Verify(ctx, st2, m); err == nil || !strings.Contains(err.Error(), "gs://bkt/"+key) || !errors.Is(err, datasets.ErrCorrupt) {
		t.Errorf("Verify after damage: got %v want ErrCorrupt naming gs://bkt/%s", err, key)
	}
}

// TestGCSRangedReads checks random ReadAts across block boundaries
// against the content, and that blocks are fetched once each.
func TestGCSRangedReads(t *testing.T) {
	ctx := context.Background()
	f := newFaultyGCS(t)
	st := openFast(t, "", 3)
	data := make([]byte, 2<<20+12345) // three 1 MiB blocks, the last partial
	r := rand.New(rand.NewPCG(3, 4))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	if err := store.WriteAll(ctx, st, "big", data, store.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	o, err := st.Open(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	f.inject(nil, nil)
	for i := range 300 {
		off := r.Int64N(int64(len(data)) + 10)
		buf := make([]byte, r.IntN(300<<10)+1)
		n, err := o.ReadAt(buf, off)
		want := data[min(off, int64(len(data))):min(off+int64(len(buf)), int64(len(data)))]
		if string(buf[:n]) != string(want) {
			t.Fatalf("read %d: ReadAt(%d bytes, %d): got %d bytes that differ", i, len(buf), off, n)
		}
		if wantEOF := off+int64(len(buf)) > int64(len(data)); (err != nil) != wantEOF {
			t.Fatalf("read %d: ReadAt(%d bytes, %d): err %v, want EOF %v", i, len(buf), off, err, wantEOF)
		}
	}
	if _, seen := f.counts(); seen["read"] != 3 {
		t.Errorf("ranged requests for 300 reads of a 3-block object: got %d want 3", seen["read"])
	}
}
