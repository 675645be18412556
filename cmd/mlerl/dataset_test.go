package main

import (
	"context"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
)

func TestDatasetCommand(t *testing.T) {
	// The parent runs the stage; its flags are the stage config's.
	out, err := run(t, "dataset", "--print-config", "--max_tokens", "77")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "max_tokens: 77") || !strings.Contains(out, "error_steps: drop-refused") {
		t.Errorf("dataset --print-config: got\n%s\nwant max_tokens 77 and the default error_steps", out)
	}
	if _, err := run(t, "dataset", "bogus"); err == nil || !strings.Contains(err.Error(), `unknown command "bogus"`) {
		t.Errorf("dataset bogus: got %v, want an unknown-command error", err)
	}

	// publish, then pull back into a third root.
	src := fixture(t)
	shared, back := t.TempDir(), t.TempDir()
	out, err = run(t, "dataset", "publish", src+"/steps/v1", shared)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "steps v1: published (2 files") {
		t.Errorf("publish: got %q", out)
	}
	out, err = run(t, "dataset", "publish", src+"/steps", shared)
	if err != nil || !strings.Contains(out, "nothing to do") {
		t.Errorf("second publish: got %q, %v; want nothing to do", out, err)
	}
	if _, err := run(t, "dataset", "pull", shared+"/steps/v1", back); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st := store.NewLocal(back)
	m, err := datasets.ReadManifest(ctx, st, "steps", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := datasets.Verify(ctx, st, m); err != nil || m.Rows != 6 {
		t.Errorf("pulled steps v1: %d rows, verify: %v; want 6 rows, verified", m.Rows, err)
	}
	if _, err := run(t, "dataset", "pull", src+"/nope", back); err == nil || !strings.Contains(err.Error(), "no committed dataset") {
		t.Errorf("pull of a missing dataset: got %v", err)
	}
	if _, err := run(t, "dataset", "publish", src+"/steps"); err == nil {
		t.Error("publish with one argument: want a usage error")
	}
}
