package serve

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/mlerl/mlerl/env"
)

// The server reads states and snapshots through the store: from a bucket,
// with transient 503s on reads retried.
func TestStepOnGCSWithTransientErrors(t *testing.T) {
	root := fixture(t)
	var (
		mu       sync.Mutex
		reads    int
		injected int
		handler  http.Handler
	)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			mu.Lock()
			reads++
			fail := reads%2 == 1 && injected < 3 // the 1st, 3rd and 5th read
			if fail {
				injected++
			}
			mu.Unlock()
			if fail {
				http.Error(w, "injected fault", http.StatusServiceUnavailable)
				return
			}
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{NoListener: true, Scheme: "http", ExternalURL: ts.URL,
		PublicHost: strings.TrimPrefix(ts.URL, "http://"), Writer: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	handler = srv.HTTPHandler()
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: "bkt"})
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		srv.CreateObject(fakestorage.Object{ObjectAttrs: fakestorage.ObjectAttrs{BucketName: "bkt", Name: "data/" + filepath.ToSlash(rel)}, Content: b})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("STORAGE_EMULATOR_HOST", ts.URL)

	cfg := DefaultConfig()
	cfg.Data = "gs://bkt/data"
	s, err := New(context.Background(), cfg, slogDiscard())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hs := httptest.NewServer(s)
	defer hs.Close()
	var got StepResponse
	if code := post(t, hs.URL, StepRequest{StateID: state1.StateID, Action: act(env.ListFiles, ".")}, &got); code != http.StatusOK || got.Outcome != "success" {
		t.Fatalf("got %d %+v, want 200 success", code, got)
	}
	if s.States() != 2 || injected != 3 {
		t.Fatalf("states %d, injected faults %d: want 2 states loaded through 3 transient faults", s.States(), injected)
	}
}
