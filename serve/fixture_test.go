package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/ingest"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

const testTask = "wine-cultivar"

var (
	fixtureOnce sync.Once
	fixtureDir  string
	fixtureErr  error
	// The two states of the fixture: the task's initial state, and the
	// state after one List Files step.
	state0, state1 schemas.RLState
	// fixtureTask is the fixture's tasks row (its trees are not snapshots).
	fixtureTask schemas.Task
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fixtureDir != "" {
		os.RemoveAll(fixtureDir)
	}
	os.Exit(code)
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// fixture returns a data root holding one ingested task and an rl_states
// dataset of two restorable states, built once per test binary (tests
// only read it).
func fixture(t testing.TB) string {
	t.Helper()
	if _, err := sandbox.FindPython(""); err != nil {
		t.Skipf("no task runtime: %v", err)
	}
	fixtureOnce.Do(func() { fixtureDir, fixtureErr = buildFixture() })
	if fixtureErr != nil {
		t.Fatal(fixtureErr)
	}
	return fixtureDir
}

func buildFixture() (string, error) {
	ctx := context.Background()
	root, err := os.MkdirTemp("", "serve-fixture-")
	if err != nil {
		return "", err
	}
	cfg := ingest.DefaultTasksConfig()
	cfg.Data, cfg.Suite, cfg.Only = root, filepath.Join(repoRoot(), "tasks"), []string{testTask}
	if err := ingest.RunTasks(ctx, cfg); err != nil {
		return root, fmt.Errorf("ingest tasks: %w", err)
	}
	st, err := store.Open(ctx, root)
	if err != nil {
		return root, err
	}
	tm, err := datasets.Latest(ctx, st, "tasks")
	if err != nil {
		return root, err
	}
	tasks, err := datasets.ReadAll[schemas.Task](ctx, st, tm, schemas.Tasks)
	if err != nil || len(tasks) != 1 {
		return root, fmt.Errorf("tasks: %v, %d rows", err, len(tasks))
	}
	task := tasks[0]
	fixtureTask = task
	ecfg := env.DefaultConfig()
	ecfg.Runner = sandbox.NewCold("/usr/bin/python3")
	e, err := env.New(ctx, ecfg, env.SpecFromTask(task), st)
	if err != nil {
		return root, err
	}
	defer e.Close()
	row := func(id string, step int32) (schemas.RLState, error) {
		ref, err := e.Snapshot(ctx)
		if err != nil {
			return schemas.RLState{}, err
		}
		cur := e.Current()
		return schemas.RLState{StateID: id, TaskID: task.TaskID, Split: task.Split, TrajectoryID: "fixture-0000", StepIndex: step,
			Prompt: "compact prompt", FullPrompt: "full prompt", SnapshotRef: ref, Metric: task.Metric, Direction: task.Direction,
			MInit: task.MInit, MBest: task.MBest, MetricPrev: &cur}, nil
	}
	if state0, err = row("fixture-0000-00", 0); err != nil {
		return root, err
	}
	if _, err := e.Step(ctx, act(env.ListFiles, ".")); err != nil {
		return root, err
	}
	if state1, err = row("fixture-0000-01", 1); err != nil {
		return root, err
	}
	p, err := datasets.Begin(ctx, st, "rl_states", schemas.RLStates, "fixture")
	if err != nil {
		return root, err
	}
	if err := datasets.WritePart(ctx, p, "part-0.parquet", []schemas.RLState{state0, state1}); err != nil {
		return root, err
	}
	_, err = p.Commit(ctx, datasets.CommitOptions{Parents: []datasets.Parent{tm.Ref()}})
	return root, err
}

// act renders an action the way a policy answers.
func act(name string, args ...string) string {
	a := env.Action{Reflection: "r", Thought: "t", Name: name}
	switch name {
	case env.ListFiles:
		a.DirPath = args[0]
	case env.ExecuteScript:
		a.ScriptName = args[0]
	case env.FinalAnswer:
		a.Answer = args[0]
	default:
		panic("act: add " + name)
	}
	return env.Render(a)
}

// testServer starts a Server on the fixture behind httptest, with cold
// script runs unless mod turns warm on; its access log goes to the
// returned buffer.
func testServer(t testing.TB, mod func(*Config)) (*Server, *httptest.Server, *syncBuffer) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Data = fixture(t)
	cfg.Concurrency = 2
	cfg.Warm = false // starting the warm worker costs seconds; tests that run scripts turn it on
	if mod != nil {
		mod(&cfg)
	}
	logs := &syncBuffer{}
	s, err := New(context.Background(), cfg, slog.New(slog.NewJSONHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() {
		ts.Close()
		s.Close()
	})
	return s, ts, logs
}

// post sends body to /v1/step and decodes the answer into out.
func post(t testing.TB, url string, body any, out any) int {
	t.Helper()
	var b []byte
	switch v := body.(type) {
	case string:
		b = []byte(v)
	default:
		b, _ = json.Marshal(v)
	}
	resp, err := http.Post(url+"/v1/step", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json (body %s)", ct, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("answer %s: %v", raw, err)
		}
	}
	return resp.StatusCode
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func slogDiscard() *slog.Logger { return slog.New(slog.NewJSONHandler(io.Discard, nil)) }
