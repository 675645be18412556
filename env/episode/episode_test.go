package episode

import (
	"context"
	"fmt"
	"hash/fnv"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/internal/blobs"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/llm"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

func TestSelectTasks(t *testing.T) {
	all := []schemas.Task{
		{TaskID: "c", Split: schemas.HeldIn}, {TaskID: "a", Split: schemas.HeldOut},
		{TaskID: "b", Split: schemas.HeldIn}, {TaskID: "d", Split: schemas.HeldOut},
	}
	tests := []struct {
		name         string
		splits, only []string
		want         []string
	}{
		{"every split", nil, nil, []string{"a", "b", "c", "d"}},
		{"held-in", []string{schemas.HeldIn}, nil, []string{"b", "c"}},
		{"both splits", []string{schemas.HeldOut, schemas.HeldIn}, nil, []string{"a", "b", "c", "d"}},
		{"only", nil, []string{"d", "b"}, []string{"b", "d"}},
		{"only outside the split", []string{schemas.HeldIn}, []string{"a"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, task := range SelectTasks(all, tc.splits, tc.only) {
				got = append(got, task.TaskID)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// Seed keeps the seeds rollouts and evaluations derived before it was
// shared: FNV-64a of the parts joined with "/", top bit cleared.
func TestSeed(t *testing.T) {
	ref := func(format string, args ...any) int64 {
		h := fnv.New64a()
		fmt.Fprintf(h, format, args...)
		return int64(h.Sum64() & (1<<63 - 1))
	}
	tests := []struct {
		name string
		got  int64
		want int64
	}{
		{"rollout trajectory", Seed(int64(7), "wine-cultivar-0003"), ref("%d/%s", 7, "wine-cultivar-0003")},
		{"evaluation trajectory", Seed("eval", int64(1), "election-vote", 5), ref("eval/%d/%s/%d", 1, "election-vote", 5)},
	}
	for _, tc := range tests {
		if tc.got != tc.want || tc.got < 0 {
			t.Errorf("%s: got %d, want %d", tc.name, tc.got, tc.want)
		}
	}
	if Seed(int64(1), "a") == Seed(int64(2), "a") {
		t.Error("seeds 1 and 2 give the same trajectory seed")
	}
}

func TestRunKey(t *testing.T) {
	tasks := &datasets.Manifest{Name: "tasks", Version: 1}
	ideas := &datasets.Manifest{Name: "ideas", Version: 2}
	type cfg struct {
		Seed int `yaml:"seed"`
	}
	base := RunKey(tasks, ideas, cfg{1})
	if len(base) != 16 || base != RunKey(tasks, ideas, cfg{1}) {
		t.Fatalf("key %q: want 16 hex digits, the same for the same run", base)
	}
	for name, other := range map[string]string{
		"another config":        RunKey(tasks, ideas, cfg{2}),
		"another tasks version": RunKey(&datasets.Manifest{Name: "tasks", Version: 2}, ideas, cfg{1}),
		"an extra line":         RunKey(tasks, ideas, cfg{1}, "sft checkpoints/sft"),
	} {
		if other == base {
			t.Errorf("%s: same key %s", name, base)
		}
	}
}

func TestPromptsOf(t *testing.T) {
	rollout := map[string]any{"full_budget": 5000, "compact_budget": 400, "seed": 1}
	tests := []struct {
		name   string
		m      datasets.Manifest
		want   agents.Prompts
		wantOK bool
	}{
		{"recorded", datasets.Manifest{Extra: map[string]any{PromptsKey: agents.Prompts{FullBudget: 6000, CompactBudget: 448, Counter: agents.CounterQwen3}}},
			agents.Prompts{FullBudget: 6000, CompactBudget: 448, Counter: agents.CounterQwen3}, true},
		{"read back from JSON", datasets.Manifest{Extra: map[string]any{PromptsKey: map[string]any{"full_budget": 6000.0, "compact_budget": 300.0, "token_counter": "approx"}}},
			agents.Prompts{FullBudget: 6000, CompactBudget: 300, Counter: agents.CounterApprox}, true},
		{"older manifest: the rollout config", datasets.Manifest{Producer: datasets.Producer{Config: rollout}},
			agents.Prompts{FullBudget: 5000, CompactBudget: 400}, true},
		{"not a rollout's", datasets.Manifest{Producer: datasets.Producer{Config: map[string]any{"seed": 1}}}, agents.Prompts{}, false},
		{"nothing", datasets.Manifest{}, agents.Prompts{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := PromptsOf(&tc.m)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("got %+v, %v; want %+v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// script answers a fixed list of responses, then Final Answer.
type script []string

func (s *script) Act(context.Context, agents.Observation) (string, llm.Usage, error) {
	if len(*s) == 0 {
		return env.Render(env.Action{Reflection: "-", Thought: "-", Name: env.FinalAnswer, Answer: "done"}), llm.Usage{}, nil
	}
	r := (*s)[0]
	*s = (*s)[1:]
	return r, llm.Usage{}, nil
}

// tinyTask puts a task in st whose train.py scores 0.5 and whose grader
// scores accuracy on two hidden labels.
func tinyTask(t *testing.T, st store.Store) schemas.Task {
	ctx := context.Background()
	ws, err := blobs.PutTree(ctx, st, blobs.Files{
		"train.py": {Data: []byte("open('submission.csv', 'w').write('id,y\\na,1\\nb,1\\n')\n"), Mode: 0o644},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := blobs.PutTree(ctx, st, blobs.Files{
		"grade.py": {Data: []byte(`import csv, json, sys
sub = {r["id"]: r["y"] for r in csv.DictReader(open(sys.argv[1]))}
ans = {r["id"]: r["y"] for r in csv.DictReader(open(sys.argv[2]))}
print(json.dumps({"valid": True, "score": sum(sub.get(k) == v for k, v in ans.items()) / len(ans)}))
`), Mode: 0o644},
		"answers.csv": {Data: []byte("id,y\na,1\nb,0\n"), Mode: 0o644},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return schemas.Task{TaskID: "tiny", Split: schemas.HeldIn, Metric: "accuracy", Direction: schemas.HigherIsBetter,
		MInit: 0.5, MBest: 1, TimeLimitS: 60, WorkspaceTree: ws, PrivateTree: priv}
}

func TestRun(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	ctx := context.Background()
	st := store.NewLocal(t.TempDir())
	cfg := env.DefaultConfig()
	cfg.Python, cfg.WorkDir, cfg.MaxTime = python, t.TempDir(), time.Minute
	cfg, stop, err := Setup(ctx, cfg, llm.Config{}, false, nil)
	if err != nil {
		// Setup wants an interpreter with the task libraries; this task's
		// script needs none.
		t.Logf("Setup: %v; running on plain python3", err)
		cfg.Runner = sandbox.NewCold(python)
		stop = cfg.Runner.Close
	}
	defer stop()
	j := Job{Task: tinyTask(t, st), ID: "tiny-0000", Seed: 3, Plan: []schemas.Idea{{IdeaID: "i1", Text: "predict 0 for b"}}}
	agent := &script{env.Render(env.Action{Reflection: "-", Thought: "-", Name: env.ExecuteScript, ScriptName: "train.py"})}
	ep, err := Run(ctx, st, cfg, agents.NewOptions(agents.DefaultFullBudget, agents.DefaultCompactBudget, cfg.MaxSteps), j, "scripted", agent)
	if err != nil {
		t.Fatal(err)
	}
	tr := ep.Trajectory
	if tr.TrajectoryID != "tiny-0000" || tr.Expert != "scripted" || tr.Seed != 3 || tr.Plan != "predict 0 for b" ||
		!slices.Equal(tr.PlanIdeaIDs, []string{"i1"}) || tr.NumSteps != 2 || tr.EndReason != env.DoneFinalAnswer {
		t.Errorf("trajectory %+v: want tiny-0000 by scripted, seed 3, its plan, 2 steps ending in a final answer", tr)
	}
	if len(ep.Steps) != 2 || ep.Steps[0].Outcome != string(env.OutcomeSuccess) || ep.Steps[0].SnapshotRef == "" {
		t.Errorf("steps %+v: want a successful execution with its snapshot, then the final answer", ep.Steps)
	}
}

// TestSetupEditor: env.editor llm gives the environments an LLM editor on
// the stage's endpoint; without an endpoint, Setup says which key.
func TestSetupEditor(t *testing.T) {
	if _, err := sandbox.FindPython(""); err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	cfg := env.DefaultConfig()
	cfg.EditorKind = env.EditorLLM
	got, stop, err := Setup(ctx, cfg, llm.Config{BaseURL: "http://127.0.0.1:1/v1", Model: "editor"}, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if _, ok := got.Editor.(env.LLMEditor); !ok {
		t.Errorf("got editor %T, want env.LLMEditor", got.Editor)
	}
	if _, _, err := Setup(ctx, cfg, llm.Config{}, false, nil); err == nil || err.Error() != "env.editor llm: llm: no base_url configured" {
		t.Errorf("no endpoint: got %v", err)
	}
	cfg.EditorKind = env.EditorOffline
	got, stop2, err := Setup(ctx, cfg, llm.Config{}, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stop2()
	if got.Editor != nil {
		t.Errorf("offline: got editor %T, want none set (the environment's offline default)", got.Editor)
	}
}

// TestReferenceSplitWarning: a tasks dataset cut by the reference split
// (ingested before its data root had a split key) is named, with how to
// cut it again; keyed, given and unsplit tasks are not.
func TestReferenceSplitWarning(t *testing.T) {
	v := 0.5
	parts := func(id, desc string) schemas.Task {
		return schemas.Task{TaskID: id, AnswerSplit: desc, MInitPublic: &v, MInitPrivate: &v, MBestPublic: &v, MBestPrivate: &v}
	}
	keyed := []schemas.Task{parts("a", "strata-hash-v1 keyed by the data root's secret: 9 public, 9 private"), parts("b", "given: 9 public, 9 private"), {TaskID: "c"}}
	if w := ReferenceSplitWarning("data/tasks/v2", keyed); w != "" {
		t.Errorf("keyed tasks: %s", w)
	}
	old := append(keyed, parts("d", "strata-hash-v1 seed mlerl-answers-v1: 9 public, 9 private"), parts("e", "time-v1: 10 public, 10 private"))
	if w := ReferenceSplitWarning("data/tasks/v1", old); !strings.Contains(w, "data/tasks/v1") || !strings.Contains(w, "d, e") || !strings.Contains(w, "mlerl ingest tasks") {
		t.Errorf("got %q", w)
	}
}
