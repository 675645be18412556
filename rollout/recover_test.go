package rollout

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// TestRerunRepairsLostManifests deletes what a user or a broken copy might
// delete after a committed rollout, reruns it, and checks that the rerun
// either restores the same committed state or says exactly what to delete.
func TestRerunRepairsLostManifests(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a rollout")
	}
	ctx := context.Background()
	pristine := t.TempDir()
	setupData(t, pristine)
	cfgFor := func(root string) Config {
		cfg := testConfig(root)
		cfg.PerTask, cfg.Env.MaxSteps = 2, 3
		return cfg
	}
	if err := Run(ctx, cfgFor(pristine)); err != nil {
		t.Fatal(err)
	}
	manifest := func(root, name string) datasets.Manifest {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, name, "v1", datasets.ManifestFile))
		if err != nil {
			t.Fatal(err)
		}
		var m datasets.Manifest
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		m.CreatedAt = time.Time{} // a repair commits anew
		return m
	}
	// The same manifest, but for the root a parent URI names (the copies
	// read their lineage from the pristine root's manifests).
	same := func(got, want datasets.Manifest, root string) bool {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		return strings.ReplaceAll(string(g), root, pristine) == strings.ReplaceAll(string(w), root, pristine)
	}
	copyRoot := func(t *testing.T) string {
		root := t.TempDir()
		if err := os.CopyFS(root, os.DirFS(pristine)); err != nil {
			t.Fatal(err)
		}
		return root
	}
	rm := func(root string, keys ...string) {
		for _, k := range keys {
			if err := os.RemoveAll(filepath.Join(root, filepath.FromSlash(k))); err != nil {
				t.Fatal(err)
			}
		}
	}
	stepParts := func(root string) []string {
		parts, _ := filepath.Glob(filepath.Join(root, "steps", "v1", "*.parquet"))
		return parts
	}

	t.Run("steps manifest lost", func(t *testing.T) {
		root := copyRoot(t)
		want := manifest(root, "steps")
		rm(root, "steps/v1/"+datasets.ManifestFile)
		if err := Run(ctx, cfgFor(root)); err != nil {
			t.Fatal(err)
		}
		if got := manifest(root, "steps"); !same(got, want, root) {
			t.Errorf("repaired manifest differs:\ngot  %+v\nwant %+v", got, want)
		}
		if vs, _ := filepath.Glob(filepath.Join(root, "*", "v2")); len(vs) != 0 {
			t.Errorf("the rerun started new versions: %v", vs)
		}
	})
	t.Run("trajectories manifest lost", func(t *testing.T) {
		root := copyRoot(t)
		want := manifest(root, "trajectories")
		rm(root, "trajectories/v1/"+datasets.ManifestFile)
		if err := Commit(ctx, cfgFor(root)); err != nil {
			t.Fatal(err)
		}
		if got := manifest(root, "trajectories"); !same(got, want, root) {
			t.Errorf("repaired manifest differs:\ngot  %+v\nwant %+v", got, want)
		}
	})
	t.Run("steps gone", func(t *testing.T) {
		root := copyRoot(t)
		rm(root, "steps/v1")
		want := "rollout: this run is committed as trajectories v1, but its steps steps v1 are gone (no part files): delete " +
			root + "/trajectories/v1 and " + root + "/steps/v1, then rerun to roll out again"
		if err := Run(ctx, cfgFor(root)); err == nil || err.Error() != want {
			t.Errorf("got  %v\nwant %s", err, want)
		}
	})
	t.Run("a steps part lost too", func(t *testing.T) {
		root := copyRoot(t)
		part := stepParts(root)[0]
		st := store.NewLocal(root)
		p := &datasets.Pending{St: st, Name: "steps", Version: 1, Schema: schemas.Steps}
		rows, err := datasets.ReadPart[schemas.Step](ctx, p, filepath.Base(part))
		if err != nil || len(rows) == 0 {
			t.Fatalf("part %s: %d rows, %v", part, len(rows), err)
		}
		trajs, _ := readRows(t, root)
		var n int32
		for _, tr := range trajs {
			if tr.TrajectoryID == rows[0].TrajectoryID {
				n = tr.NumSteps
			}
		}
		rm(root, "steps/v1/"+datasets.ManifestFile, "steps/v1/"+filepath.Base(part))
		want := "rollout: this run is committed as trajectories v1, but its steps steps v1 lost their manifest and their part files do not match the trajectories: trajectory " +
			rows[0].TrajectoryID + " has 0 steps, its row says " + itoa(n) + ": delete " + root + "/trajectories/v1 and " + root + "/steps/v1, then rerun to roll out again"
		if err := Run(ctx, cfgFor(root)); err == nil || err.Error() != want {
			t.Errorf("got  %v\nwant %s", err, want)
		}
	})
	t.Run("trajectories gone", func(t *testing.T) {
		root := copyRoot(t)
		rm(root, "trajectories/v1")
		want := "rollout: this run's steps are committed as steps v1, but no trajectories version holds its trajectories (committed, pending, or with a lost manifest): delete " +
			root + "/steps/v1, then rerun to roll out again"
		if err := Run(ctx, cfgFor(root)); err == nil || err.Error() != want {
			t.Errorf("got  %v\nwant %s", err, want)
		}
	})
}

func itoa(n int32) string { b, _ := json.Marshal(n); return string(b) }
