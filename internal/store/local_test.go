package store_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/internal/store"
)

func TestLocal(t *testing.T) {
	testStore(t, store.NewLocal(t.TempDir()))
}

func TestLocalLeavesNoTempFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := store.NewLocal(dir)
	w, _ := st.Create(ctx, "k/v", store.CreateOptions{})
	w.Write([]byte("x"))
	w.Abort()
	store.WriteAll(ctx, st, "k/w", []byte("y"), store.CreateOptions{IfNotExists: true})
	store.WriteAll(ctx, st, "k/w", []byte("z"), store.CreateOptions{IfNotExists: true})
	entries, _ := os.ReadDir(filepath.Join(dir, "k"))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != "w" {
		t.Errorf("files: got %q want %q", got, "w")
	}
	if info, err := os.Stat(filepath.Join(dir, "k", "w")); err != nil || info.Mode().Perm() != 0o644 {
		t.Errorf("mode: got %v, %v want 0644", info.Mode().Perm(), err)
	}
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	cwd, _ := os.Getwd()
	cases := []struct {
		root    string
		wantURI string // URI("k")
		wantErr string
	}{
		{"./data", filepath.Join(cwd, "data", "k"), ""},
		{"rel/../d", filepath.Join(cwd, "d", "k"), ""},
		{"/tmp/x", "/tmp/x/k", ""},
		{"file:///tmp/y", "/tmp/y/k", ""},
		{"s3://bucket/p", "", "unsupported scheme"},
		{"gs:///p", "", "no bucket name"},
	}
	for _, c := range cases {
		t.Run(c.root, func(t *testing.T) {
			st, err := store.Open(ctx, c.root)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), c.root) {
					t.Fatalf("got %v want an error naming %q and saying %q", err, c.root, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := st.URI("k"); got != c.wantURI {
				t.Errorf("URI: got %q want %q", got, c.wantURI)
			}
		})
	}
}
