package dataset

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/mlerl/mlerl/internal/blobs"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// fakeGCS starts fake-gcs-server in process and returns a function that
// opens a store under a fresh prefix of its bucket.
func fakeGCS(t *testing.T) func(prefix string) store.Store {
	t.Helper()
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{Host: "127.0.0.1", Port: 0, Scheme: "http"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: "shared"})
	return func(prefix string) store.Store {
		st, err := store.OpenGCS(context.Background(), "shared", prefix, srv.Client())
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
}

// builtFixture is the fixture after the dataset stage ran on it.
func builtFixture(t *testing.T) fixture {
	t.Helper()
	f := newFixture(t)
	if err := run(context.Background(), testRunConfig(f.root), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	return f
}

// checkRestorable reads, with hashes checked, everything a snapshot needs
// to be restored: its tree and files, the task trees its spec names and
// their files, and its undo backups.
func checkRestorable(t *testing.T, st store.Store, ref string) {
	t.Helper()
	ctx := context.Background()
	_, tree, err := blobs.GetTree(ctx, st, ref)
	if err != nil {
		t.Fatalf("snapshot %s at %s: %v", ref, st.URI(""), err)
	}
	var meta struct {
		State struct {
			Spec struct {
				WorkspaceTree string `json:"workspace_tree"`
				PrivateTree   string `json:"private_tree"`
			} `json:"spec"`
		} `json:"state"`
		Backups map[string][]string `json:"backups"`
	}
	if err := json.Unmarshal(tree.Meta, &meta); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{meta.State.Spec.WorkspaceTree, meta.State.Spec.PrivateTree} {
		if _, _, err := blobs.GetTree(ctx, st, r); err != nil {
			t.Errorf("snapshot %s: task tree %s at %s: %v", ref, r, st.URI(""), err)
		}
	}
	for p, hs := range meta.Backups {
		for _, h := range hs {
			if h == "" {
				continue
			}
			if _, err := blobs.Get(ctx, st, h); err != nil {
				t.Errorf("snapshot %s: backup of %s at %s: %v", ref, p, st.URI(""), err)
			}
		}
	}
}

func readStates(t *testing.T, st store.Store) ([]schemas.RLState, *datasets.Manifest) {
	t.Helper()
	ctx := context.Background()
	m, err := datasets.Latest(ctx, st, "rl_states")
	if err != nil {
		t.Fatal(err)
	}
	if err := datasets.Verify(ctx, st, m); err != nil {
		t.Fatal(err)
	}
	rows, err := datasets.ReadAll[schemas.RLState](ctx, st, m, schemas.RLStates)
	if err != nil {
		t.Fatal(err)
	}
	return rows, m
}

func TestPublishPullRoundTrip(t *testing.T) {
	ctx := context.Background()
	f := builtFixture(t)
	gcs := fakeGCS(t)
	shared := gcs("team/mlerl")

	// local -> gs://
	res, err := Publish(ctx, f.st, shared, "rl_states", 0, PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.NoOp || res.Files != 1 || res.Attachments != 3 || res.Blobs == 0 {
		t.Errorf("publish: got %+v, want 1 file, 3 attachments (stats.md, verl training and validation files), some blobs", res)
	}
	want, _ := readStates(t, f.st)
	got, _ := readStates(t, shared)
	if len(got) != len(want) || len(got) == 0 {
		t.Fatalf("published rows: got %d want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].StateID != want[i].StateID || got[i].SnapshotRef != want[i].SnapshotRef || got[i].Prompt != want[i].Prompt {
			t.Fatalf("row %d: got %s/%s want %s/%s", i, got[i].StateID, got[i].SnapshotRef, want[i].StateID, want[i].SnapshotRef)
		}
		checkRestorable(t, shared, got[i].SnapshotRef)
	}
	for _, key := range []string{"rl_states/v1/stats.md", "exports/rl_states/v1/" + VerlTrainFile, "exports/rl_states/v1/" + VerlValFile} {
		if ok, err := store.Exists(ctx, shared, key); err != nil || !ok {
			t.Errorf("%s not published (%v)", key, err)
		}
	}
	// The validation file's states are in no row, and restorable too.
	m, err := datasets.ReadManifest(ctx, f.st, "rl_states", 1)
	if err != nil {
		t.Fatal(err)
	}
	refs := valSnapshotRefs(m)
	if len(refs) == 0 {
		t.Errorf("rl_states manifest lists no validation snapshots")
	}
	for _, r := range refs {
		checkRestorable(t, shared, r)
	}

	// Again: nothing to do.
	res, err = Publish(ctx, f.st, shared, "rl_states", 1, PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.NoOp || res.Files+res.Attachments+res.Blobs != 0 || res.Bytes != 0 {
		t.Errorf("second publish: got %+v, want a no-op copying nothing", res)
	}

	// gs:// -> a fresh local root: byte-identical manifest, restorable states.
	local := store.NewLocal(t.TempDir())
	if _, err := Publish(ctx, shared, local, "rl_states", 1, PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	pulled, _ := readStates(t, local)
	for _, s := range pulled {
		checkRestorable(t, local, s.SnapshotRef)
	}
	a, _ := store.ReadAll(ctx, f.st, "rl_states/v1/"+datasets.ManifestFile)
	b, _ := store.ReadAll(ctx, local, "rl_states/v1/"+datasets.ManifestFile)
	if !bytes.Equal(a, b) {
		t.Errorf("pulled manifest differs from the source's:\n%s\nvs\n%s", b, a)
	}

	// With parents: the lineage resolves at the destination.
	withParents := gcs("with-parents")
	res, err = Publish(ctx, f.st, withParents, "sft_examples", 1, PublishOptions{WithParents: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Parents) != 3 {
		t.Errorf("got %d parents published, want 3 (steps, tasks, ideas)", len(res.Parents))
	}
	sm, err := datasets.Latest(ctx, withParents, "sft_examples")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range sm.Parents {
		pm, err := datasets.ReadManifest(ctx, withParents, p.Name, p.Version)
		if err != nil {
			t.Errorf("parent %s v%d not at the destination: %v", p.Name, p.Version, err)
			continue
		}
		if err := datasets.Verify(ctx, withParents, pm); err != nil {
			t.Error(err)
		}
	}
	steps, err := datasets.ReadAll[schemas.Step](ctx, withParents, mustLatest(t, withParents, "steps"), schemas.Steps)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range steps {
		checkRestorable(t, withParents, s.SnapshotRef)
	}
}

func mustLatest(t *testing.T, st store.Store, name string) *datasets.Manifest {
	t.Helper()
	m, err := datasets.Latest(context.Background(), st, name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// flipByte changes one byte in the middle of a local file.
func flipByte(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestPublishRefuses(t *testing.T) {
	ctx := context.Background()
	gcs := fakeGCS(t)
	tests := []struct {
		name    string
		damage  func(t *testing.T, f fixture, dst store.Store) // before publishing rl_states v1
		wantErr error
		wantMsg string
	}{
		{"corrupted part file", func(t *testing.T, f fixture, _ store.Store) {
			flipByte(t, filepath.Join(f.root, "rl_states", "v1", "part-00000.parquet"))
		}, datasets.ErrCorrupt, "part-00000.parquet: sha256"},
		{"corrupted export", func(t *testing.T, f fixture, _ store.Store) {
			flipByte(t, filepath.Join(f.root, "exports", "rl_states", "v1", VerlTrainFile))
		}, datasets.ErrCorrupt, VerlTrainFile},
		{"corrupted snapshot blob", func(t *testing.T, f fixture, _ store.Store) {
			rows, _ := readStates(t, f.st)
			flipByte(t, filepath.Join(f.root, filepath.FromSlash(blobs.Prefix), strings.TrimPrefix(rows[0].SnapshotRef, "sha256:")))
		}, nil, "does not match its hash"},
		{"other content at the destination", func(t *testing.T, f fixture, dst store.Store) {
			commitRows(t, dst, "rl_states", schemas.RLStates, []schemas.RLState{{StateID: "other", TaskID: "alpha", Split: schemas.HeldIn}})
		}, ErrConflict, "holds other files"},
		{"destination version being written", func(t *testing.T, f fixture, dst store.Store) {
			if _, err := datasets.Begin(ctx, dst, "rl_states", schemas.RLStates, "someone"); err != nil {
				t.Fatal(err)
			}
		}, nil, "a stage is writing this version"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := builtFixture(t)
			dst := gcs("refuse-" + string(rune('a'+i)))
			tt.damage(t, f, dst)
			before, _ := dst.List(ctx, "rl_states/")
			_, err := Publish(ctx, f.st, dst, "rl_states", 1, PublishOptions{})
			if err == nil {
				t.Fatal("published; want a refusal")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("got %v, want an error wrapping %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("got %v, want it to mention %q", err, tt.wantMsg)
			}
			// Nothing committed, no part file left behind by this call.
			after, _ := dst.List(ctx, "rl_states/")
			if len(after) != len(before) {
				t.Errorf("destination rl_states/ had %d objects, now %d: %v", len(before), len(after), after)
			}
			if m, err := datasets.ReadManifest(ctx, dst, "rl_states", 1); err == nil && m.Producer.Command != "fixture" {
				t.Errorf("a manifest was committed at the destination: %+v", m)
			}
		})
	}
}

// TestRunOnBucket runs the stage with a gs:// data root: the fixture's
// inputs are published to fake GCS (with their blobs), the stage reads and
// writes there, and its outputs pull back intact.
func TestRunOnBucket(t *testing.T) {
	ctx := context.Background()
	// The client reads objects by path-style URLs on the emulator host:
	// the fake server must know that host, so it sits behind httptest.
	var handler http.Handler
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	t.Cleanup(ts.Close)
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{NoListener: true, Scheme: "http", ExternalURL: ts.URL, PublicHost: strings.TrimPrefix(ts.URL, "http://")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: "bkt"})
	handler = srv.HTTPHandler()
	t.Setenv("STORAGE_EMULATOR_HOST", ts.URL)
	const root = "gs://bkt/team/data"
	bucket, err := store.Open(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	if _, err := Publish(ctx, f.st, bucket, "steps", 1, PublishOptions{WithParents: true}); err != nil {
		t.Fatal(err)
	}
	if err := run(ctx, testRunConfig(root), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	rows, m := readStates(t, bucket)
	if len(rows) != 14 || !strings.HasPrefix(m.URI, root+"/rl_states/v1/") {
		t.Errorf("got %d rl states at %s, want 14 under %s", len(rows), m.URI, root)
	}
	local := store.NewLocal(t.TempDir())
	for _, name := range []string{"sft_examples", "rl_states"} {
		if _, err := Publish(ctx, bucket, local, name, 1, PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range rows {
		checkRestorable(t, local, s.SnapshotRef)
	}
	if ok, _ := store.Exists(ctx, local, "exports/sft_examples/v1/"+ShareGPTFile); !ok {
		t.Error("the ShareGPT export did not come back with sft_examples")
	}
}
