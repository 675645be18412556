package train

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/internal/blobs"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/schemas"
)

// deepPathScript makes a path of more than 5,000 bytes in its workspace
// (25 nested folders of 200-byte names, through folder handles: within the
// workspace quota) and writes a submission: what a policy's script may do,
// which every snapshot of that workspace then has to walk.
const deepPathScript = `import os
fd = os.open('.', os.O_RDONLY)
for i in range(25):
    n = chr(97 + i) * 200
    try:
        os.mkdir(n, dir_fd=fd)
    except FileExistsError:
        pass
    nfd = os.open(n, os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = nfd
w = os.open('deep.txt', os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
os.write(w, b'deep')
open('submission.csv', 'w').write('id,y\na,1\nb,1\n')
`

// TestPPOPastADeepPath: step-wise PPO with 2-step continuations and own
// states (each snapshotted) from a state whose script makes a path longer
// than PATH_MAX runs to the end: the snapshots walk and restore by folder
// handles, and one that could not be kept would be left out, never stop
// the stage.
func TestPPOPastADeepPath(t *testing.T) {
	python, err := sandbox.FindPython("")
	if err != nil {
		t.Skipf("no task runtime: %v", err)
	}
	ctx := context.Background()
	root := t.TempDir()
	st, err := store.Open(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	// A tiny "SFT" policy over every byte, whose prompts fit a state's.
	all := make([]int, 256)
	for i := range all {
		all[i] = i
	}
	vocab := policy.NewVocab(all)
	pcfg := policy.Config{Vocab: vocab.Size(), DModel: 16, Heads: 2, Layers: 1, Ctx: 1040, PromptTokens: 1024, ResponseTokens: 4}
	eng, err := policy.NewEngine(policy.EngineNative, pcfg, policy.InitWeights(pcfg, 5))
	if err != nil {
		t.Fatal(err)
	}
	sft := DefaultSFTConfig()
	sft.Tokenizer, sft.Response = "bytes", policy.ResponseFull
	if err := policy.SaveCheckpoint(ctx, st, "checkpoints/sft", 0, eng, policy.Checkpoint{Config: sft, Vocab: vocab, State: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	ws, err := blobs.PutTree(ctx, st, blobs.Files{"train.py": {Data: []byte(deepPathScript), Mode: 0o644}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := blobs.PutTree(ctx, st, blobs.Files{
		"grade.py":    {Data: []byte("import csv, json, sys\nsub = {r['id']: r['y'] for r in csv.DictReader(open(sys.argv[1]))}\nans = {r['id']: r['y'] for r in csv.DictReader(open(sys.argv[2]))}\nprint(json.dumps({'valid': True, 'score': sum(sub.get(k) == v for k, v in ans.items()) / len(ans)}))\n"), Mode: 0o644},
		"answers.csv": {Data: []byte("id,y\na,1\nb,0\n"), Mode: 0o644},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	task := schemas.Task{TaskID: "deep", Split: schemas.HeldIn, Metric: "accuracy", Direction: schemas.HigherIsBetter,
		MInit: 0.5, MBest: 1, TimeLimitS: 60, WorkspaceTree: ws, PrivateTree: priv}

	// The start state: the script has run once, the deep path is there.
	ecfg := EnvRewardConfig()
	ecfg.Python, ecfg.WorkDir, ecfg.MaxTime = python, t.TempDir(), 10*time.Minute
	ecfg.Runner = sandbox.NewCold(python)
	defer ecfg.Runner.Close()
	e, err := env.New(ctx, ecfg, env.SpecFromTask(task), st)
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.Step(ctx, env.Render(env.Action{Reflection: "-", Thought: "-", Name: env.ExecuteScript, ScriptName: "train.py"}))
	if err != nil || r.Outcome != env.OutcomeSuccess {
		t.Fatalf("the deep-path script: %v %s %s", err, r.Outcome, r.Observation)
	}
	ref, err := e.Snapshot(ctx)
	if err != nil {
		t.Fatalf("snapshot of a workspace with a deep path: %v", err)
	}
	opts := agents.NewOptions(agents.DefaultFullBudget, agents.DefaultCompactBudget, ecfg.MaxSteps)
	prompt := agents.Compact(agents.StateOf(e, []string{"predict 0 for b"}, opts.MaxSteps), opts.CompactBudget, opts.Count)
	e.Close()
	var rows []schemas.RLState
	for i := range 2 {
		rows = append(rows, schemas.RLState{StateID: "deep-" + string(rune('0'+i)), TaskID: "deep", Split: schemas.HeldIn,
			TrajectoryID: "deep-0000", StepIndex: 1, Prompt: prompt, SnapshotRef: ref, Metric: "accuracy",
			Direction: schemas.HigherIsBetter, MInit: 0.5, MBest: 1})
	}
	p, err := datasets.Begin(ctx, st, schemas.RLStates.Name, schemas.RLStates, "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := datasets.WritePart(ctx, p, "part-00000.parquet", rows); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Commit(ctx, datasets.CommitOptions{}); err != nil {
		t.Fatal(err)
	}

	cfg := DefaultPPOConfig()
	cfg.Data, cfg.Updates, cfg.BatchSize, cfg.GroupSize, cfg.Minibatches, cfg.GenBatch, cfg.Workers = root, 2, 4, 2, 1, 4, 2
	cfg.Horizon, cfg.MaxNewTokens, cfg.Decode = 2, 2, policy.DecodeFree
	cfg.OwnStates = OwnStatesConfig{Mix: 0.5, Refresh: 1, PoolSize: 4}
	cfg.Env.Python, cfg.Env.WorkDir = python, t.TempDir()
	if err := RunPPO(ctx, cfg); err != nil {
		t.Fatalf("train ppo: %v", err)
	}
	b, err := store.ReadAll(ctx, st, "checkpoints/ppo/metrics.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	updates, pooled := 0, 0.0
	for _, l := range lines {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["stage"] == "ppo" {
			updates++
			if n, ok := m["own/pool"].(float64); ok {
				pooled = max(pooled, n)
			}
		}
	}
	if updates != cfg.Updates {
		t.Errorf("train ppo wrote %d updates, want %d:\n%s", updates, cfg.Updates, b)
	}
	// Own states were snapshotted (deep path and all) and pooled.
	if pooled == 0 {
		t.Errorf("no own state was pooled:\n%s", b)
	}
}
