package datasets_test

import (
	"context"
	"sync"
	"testing"

	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// Shards of one run start together: concurrent Begins with the same run key
// must all land in one version (a loser of the claim joins it), while a
// different run key gets its own; FindPending finds the shared one and
// never claims.
func TestConcurrentBeginJoinsOneVersion(t *testing.T) {
	ctx := context.Background()
	st := store.NewLocal(t.TempDir())
	if p, err := datasets.FindPending(ctx, st, "steps", schemas.Steps, "run-a"); err != nil || p != nil {
		t.Fatalf("FindPending before any Begin: got %v, %v want nil", p, err)
	}
	const n = 8
	versions := make([]int, n+1)
	var wg sync.WaitGroup
	for i := 0; i <= n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "run-a"
			if i == n {
				key = "run-b"
			}
			p, err := datasets.Begin(ctx, st, "steps", schemas.Steps, key)
			if err != nil {
				t.Error(err)
				return
			}
			versions[i] = p.Version
		}()
	}
	wg.Wait()
	for i := 1; i < n; i++ {
		if versions[i] != versions[0] {
			t.Fatalf("run-a's Begins got versions %v, want one shared version", versions[:n])
		}
	}
	if versions[n] == versions[0] {
		t.Fatalf("run-b got run-a's version %d", versions[0])
	}
	p, err := datasets.FindPending(ctx, st, "steps", schemas.Steps, "run-a")
	if err != nil || p == nil || p.Version != versions[0] {
		t.Fatalf("FindPending(run-a): got %v, %v want v%d", p, err, versions[0])
	}
	if all, _, _ := datasets.Versions(ctx, st, "steps"); len(all) != 2 {
		t.Fatalf("versions %v, want exactly two (one per run key)", all)
	}
}
