package datasets_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// TestLatestSaysWhy checks the message when a name has no committed
// version: each case says what is there instead, and wraps ErrNoDataset.
func TestLatestSaysWhy(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	st := store.NewLocal(root)
	write := func(key, text string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(key))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("tasks/wine/task.yaml", "id: wine\n")
	write("export.parquet", "PAR1")
	// A killed writer's version, and a committed version whose manifest was deleted.
	p, err := datasets.Begin(ctx, st, "steps", schemas.Steps, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := datasets.WritePart(ctx, p, "part-0.parquet", stepRows(0)); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"k", "k2"} {
		q, err := datasets.Begin(ctx, st, "more_steps", schemas.Steps, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := datasets.WritePart(ctx, q, "part-0.parquet", stepRows(1)); err != nil {
			t.Fatal(err)
		}
		if key == "k" {
			if _, err := q.Commit(ctx, datasets.CommitOptions{}); err != nil {
				t.Fatal(err)
			}
			os.Remove(filepath.Join(root, "more_steps", "v1", datasets.ManifestFile))
		}
	}

	cases := []struct{ name, want string }{
		{"nope", root + `/nope: no committed dataset: nothing is there (run the stage that writes "nope" first, or see ` + "`mlerl ls <data root>`)"},
		{"tasks", root + "/tasks is not a dataset: no committed dataset: it holds no v<N> version folders (`mlerl ls <data root>` lists the datasets)"},
		{"export.parquet", root + "/export.parquet is a file, not a dataset (a folder of v<N> version folders): no committed dataset"},
		{"steps", root + `/steps: no committed dataset: v1 is pending (being written, or its writer died); rerun the stage that writes "steps" with the same config to resume or repair it`},
		{"more_steps", root + `/more_steps: no committed dataset: v1 has neither _MANIFEST.json nor _PENDING.json (its manifest was lost?), v2 is pending (being written, or its writer died); rerun the stage that writes "more_steps" with the same config to resume or repair it`},
	}
	for _, c := range cases {
		_, err := datasets.Latest(ctx, st, c.name)
		if !errors.Is(err, datasets.ErrNoDataset) || err.Error() != c.want {
			t.Errorf("%s: got  %v\nwant %s", c.name, err, c.want)
		}
	}
	inc, err := datasets.Uncommitted(ctx, st, "more_steps")
	if err != nil || len(inc) != 2 || inc[0] != (datasets.Incomplete{Version: 1}) || inc[1] != (datasets.Incomplete{Version: 2, Pending: true}) {
		t.Errorf("Uncommitted(more_steps): got %+v, %v", inc, err)
	}
}
