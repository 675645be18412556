package dataset

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/ingest"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/internal/tokenizer"
	"github.com/mlerl/mlerl/rollout"
	"github.com/mlerl/mlerl/schemas"
)

// e2eTasks: one held-in and one held-out built-in task.
var e2eTasks = []string{"wine-cultivar", "election-vote"}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// rolledOut runs the ingest stage on the e2e tasks (3 kept catalog ideas
// per category), then rolls out 2 short scripted
// trajectories per task, held-out ones included (rollout split=all).
func rolledOut(t *testing.T) string {
	t.Helper()
	if _, err := sandbox.FindPython(""); err != nil {
		t.Skipf("no task runtime: %v", err)
	}
	if _, err := tokenizer.Default(); err != nil {
		t.Skipf("no tokenizer: %v", err)
	}
	ctx := context.Background()
	root := t.TempDir()
	tc := ingest.DefaultTasksConfig()
	tc.Data, tc.Suite, tc.Only = root, filepath.Join(repoRoot(), "tasks"), e2eTasks
	if err := ingest.RunTasks(ctx, tc); err != nil {
		t.Fatalf("ingest tasks: %v", err)
	}
	ic := ingest.DefaultIdeasConfig()
	ic.Data, ic.K = root, 3
	if err := ingest.RunIdeas(ctx, ic); err != nil {
		t.Fatalf("ingest ideas: %v", err)
	}
	rc := rollout.DefaultConfig()
	rc.Data, rc.Split, rc.PerTask, rc.Seed, rc.Workers = root, "all", 2, 7, 2
	rc.Env.MaxSteps = 6
	if err := rollout.Run(ctx, rc); err != nil {
		t.Fatalf("rollout: %v", err)
	}
	return root
}

// TestDatasetEndToEnd: ingest -> rollout -> dataset on two real tasks,
// then publish rl_states to fake GCS and restore a state from there.
func TestDatasetEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a rollout")
	}
	start := time.Now()
	root := rolledOut(t)
	ctx := context.Background()
	t0 := time.Now()
	var report bytes.Buffer
	if err := run(ctx, testRunConfig(root), &report, io.Discard); err != nil {
		t.Fatal(err)
	}
	t.Logf("setup (ingest + rollout) %s, dataset stage %s", t0.Sub(start).Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	st, _ := store.Open(ctx, root)
	steps, err := datasets.ReadAll[schemas.Step](ctx, st, mustLatest(t, st, "steps"), schemas.Steps)
	if err != nil {
		t.Fatal(err)
	}
	sft, err := datasets.ReadAll[schemas.SFTExample](ctx, st, mustLatest(t, st, "sft_examples"), schemas.SFTExamples)
	if err != nil {
		t.Fatal(err)
	}
	rl, rlM := readStates(t, st)
	var parents []string
	for _, p := range rlM.Parents {
		parents = append(parents, p.Name)
	}
	slices.Sort(parents)
	if want := []string{"ideas", "steps", "tasks", "trajectories"}; !slices.Equal(parents, want) {
		t.Errorf("rl_states lineage: got %v want %v", parents, want)
	}
	if len(sft) == 0 || len(rl) == 0 {
		t.Fatalf("got %d sft examples and %d rl states from %d steps", len(sft), len(rl), len(steps))
	}

	// Token counts are the real tokenizer's.
	tok, _ := tokenizer.Default()
	splits := map[string]int{}
	for _, e := range sft {
		splits[e.Split]++
		if got, want := int(e.PromptTokens), tok.Count(e.Prompt); got != want {
			t.Errorf("example %s: prompt_tokens %d, tokenizer says %d", e.ExampleID, got, want)
		}
		if got, want := int(e.ResponseTokens), tok.Count(e.Response); got != want {
			t.Errorf("example %s: response_tokens %d, tokenizer says %d", e.ExampleID, got, want)
		}
	}
	if splits[schemas.HeldIn] == 0 || splits[schemas.HeldOut] == 0 {
		t.Errorf("sft splits %v: want both held-in (wine-cultivar) and held-out validation (election-vote)", splits)
	}
	heldInSteps := 0
	for _, s := range steps {
		if s.TaskID == "wine-cultivar" {
			heldInSteps++
		}
	}
	for _, s := range rl {
		if s.TaskID != "wine-cultivar" {
			t.Errorf("rl state %s of task %s: want held-in wine-cultivar only", s.StateID, s.TaskID)
		}
	}
	if len(rl) > heldInSteps {
		t.Errorf("%d rl states from %d held-in steps", len(rl), heldInSteps)
	}
	for _, key := range []string{"exports/sft_examples/v1/" + ShareGPTFile, "exports/sft_examples/v1/" + DatasetInfoFile, "exports/rl_states/v1/" + VerlTrainFile, "sft_examples/v1/stats.md", "rl_states/v1/stats.md"} {
		if ok, err := store.Exists(ctx, st, key); err != nil || !ok {
			t.Errorf("%s not written (%v)", key, err)
		}
	}
	if !strings.Contains(report.String(), "| election-vote | held-out |") {
		t.Errorf("report lacks the held-out validation rows:\n%s", report.String())
	}

	// Shared through a bucket, a state restores there exactly.
	shared := fakeGCS(t)("team")
	if _, err := Publish(ctx, st, shared, "rl_states", 1, PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	s := rl[len(rl)/2]
	ecfg := env.DefaultConfig()
	ecfg.Runner = sandbox.NewCold("/usr/bin/python3")
	e, err := env.Restore(ctx, ecfg, shared, s.SnapshotRef)
	if err != nil {
		t.Fatalf("restore %s from the published root: %v", s.StateID, err)
	}
	defer e.Close()
	if e.Steps() != int(s.StepIndex) || s.MetricPrev == nil || e.Current() != *s.MetricPrev {
		t.Errorf("restored state %s: got steps %d current %v, want steps %d current %v", s.StateID, e.Steps(), e.Current(), s.StepIndex, s.MetricPrev)
	}
}
