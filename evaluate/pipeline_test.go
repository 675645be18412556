package evaluate

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl/dataset"
	"github.com/mlerl/mlerl/ingest"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/internal/tokenizer"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/rollout"
	"github.com/mlerl/mlerl/schemas"
	"github.com/mlerl/mlerl/train"
)

// smokeTasks: one held-in and one held-out built-in task.
var smokeTasks = []string{"wine-cultivar", "election-vote"}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// envReward is the environment reward of step-wise PPO, as `mlerl train
// ppo` uses it, on a cold runner.
func envReward(st store.Store) train.RewardFunc {
	ecfg := train.EnvRewardConfig()
	ecfg.ExecuteAfterEdit, ecfg.ExecuteAfterUndo = true, true // one-step credit
	ecfg.Runner = sandbox.NewCold("/usr/bin/python3")
	return train.EnvReward(st, ecfg, true)
}

// TestPipelineSmoke runs the whole pipeline with tiny budgets: ingest
// (tasks, catalog ideas) -> rollout (2 x 5 steps on the held-in task) -> dataset ->
// SFT (a few updates of a tiny model) -> PPO (2 updates) -> evaluate
// (2 trajectories per method, held-out and held-in), and checks the
// eval_results rows and the report.
func TestPipelineSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole pipeline")
	}
	if _, err := sandbox.FindPython(""); err != nil {
		t.Skipf("no task runtime: %v", err)
	}
	if _, err := tokenizer.Default(); err != nil {
		t.Skipf("no tokenizer: %v", err)
	}
	ctx := context.Background()
	root := t.TempDir()
	var stages []string
	mark := time.Now()
	stage := func(name string) {
		stages = append(stages, name+" "+time.Since(mark).Round(time.Millisecond).String())
		mark = time.Now()
	}

	tc := ingest.DefaultTasksConfig()
	tc.Data, tc.Suite, tc.Only = root, filepath.Join(repoRoot(), "tasks"), smokeTasks
	if err := ingest.RunTasks(ctx, tc); err != nil {
		t.Fatalf("ingest tasks: %v", err)
	}
	ic := ingest.DefaultIdeasConfig()
	ic.Data, ic.K = root, 3
	if err := ingest.RunIdeas(ctx, ic); err != nil {
		t.Fatalf("ingest ideas: %v", err)
	}
	stage("ingest")

	rc := rollout.DefaultConfig()
	rc.Data, rc.Split, rc.PerTask, rc.Seed, rc.Workers = root, schemas.HeldIn, 2, 7, 2
	rc.Env.MaxSteps = 5
	if err := rollout.Run(ctx, rc); err != nil {
		t.Fatalf("rollout: %v", err)
	}
	stage("rollout")

	dc := dataset.DefaultConfig()
	dc.Data, dc.Exports = root, false
	if err := dataset.Run(ctx, dc); err != nil {
		t.Fatalf("dataset: %v", err)
	}
	stage("dataset")

	sc := train.DefaultSFTConfig()
	sc.Data = root
	sc.Model = policy.Config{DModel: 32, Heads: 2, Layers: 1, Ctx: 520, PromptTokens: 448, ResponseTokens: 64}
	sc.Epochs, sc.BatchRows, sc.MaxSteps = 1, 2, 4
	if err := train.RunSFT(ctx, sc); err != nil {
		t.Fatalf("train sft: %v", err)
	}
	stage("sft")

	pc := train.DefaultPPOConfig()
	pc.Data, pc.Updates, pc.BatchSize, pc.GroupSize, pc.Minibatches, pc.GenBatch, pc.Workers = root, 2, 4, 2, 1, 4, 2
	// One-step credit (the reward function scores one action): edits and
	// undos run their script in the same step.
	pc.Horizon, pc.Env.ExecuteAfterEdit, pc.Env.ExecuteAfterUndo, pc.SettlePending = 1, true, true, true
	// A learning-curve point before the first update and after the last: 1
	// episode of 2 steps per task.
	pc.Curve.Every, pc.Curve.PerTask, pc.Curve.MaxSteps = 2, 1, 2
	st, _ := store.Open(ctx, root)
	if err := train.RunPPOWith(ctx, pc, envReward(st), io.Discard); err != nil {
		t.Fatalf("train ppo: %v", err)
	}
	b, err := store.ReadAll(ctx, st, "checkpoints/ppo/metrics.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), `"stage":"ppo-curve"`); n != 2 {
		t.Errorf("train ppo wrote %d learning-curve points, want 2 (updates 0 and 2):\n%s", n, b)
	}
	for _, k := range []string{`"curve/held-out/delta_r"`, `"curve/held-in/delta_r"`, `"time/generate_s"`, `"time/execute_s"`, `"time/learn_s"`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("train ppo's metrics lack %s", k)
		}
	}
	// An update that trained has its outcome shares and losses; one that
	// had no group with a signal (this untrained policy's actions often
	// all fail alike) is skipped and has neither.
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if !strings.Contains(line, `"stage":"ppo"`) {
			continue
		}
		trained := !strings.Contains(line, `"skipped":true`)
		for _, k := range []string{`"outcomes/success"`, `"losses/entropy"`} {
			if strings.Contains(line, k) != trained {
				t.Errorf("train ppo: an update (trained %v) has %s %v: %s", trained, k, !trained, line)
			}
		}
	}
	stage("ppo")

	// The episode-wise baseline arm: whole episodes from the initial
	// states, in the environment, prompts rendered as the rollout did.
	ec := train.DefaultPPOConfig()
	ec.Data, ec.Out, ec.Mode, ec.Updates, ec.BatchSize, ec.GroupSize, ec.Minibatches, ec.GenBatch, ec.EpisodeSteps = root, "checkpoints/ppo-episode", train.ModeEpisode, 1, 4, 2, 1, 4, 2
	ec.Env.Python = ""
	if err := train.RunPPO(ctx, ec); err != nil {
		t.Fatalf("train ppo --mode episode: %v", err)
	}
	if _, err := store.ReadAll(ctx, st, "checkpoints/ppo-episode/metrics.jsonl"); err != nil {
		t.Fatalf("episode-wise PPO wrote no metrics: %v", err)
	}
	stage("ppo-episode")

	// Step-wise PPO with 2-step returns (the default): the policy's own
	// continuation from each sampled state, in MLAgentBench's semantics.
	hc := train.DefaultPPOConfig()
	hc.Data, hc.Out, hc.Horizon, hc.Updates, hc.BatchSize, hc.GroupSize, hc.Minibatches, hc.GenBatch = root, "checkpoints/ppo-horizon", 2, 1, 4, 2, 1, 4
	hc.Env.Python = "" // the defaults: MLAgentBench's semantics
	if err := train.RunPPO(ctx, hc); err != nil {
		t.Fatalf("train ppo --horizon 2: %v", err)
	}
	if b, err := store.ReadAll(ctx, st, "checkpoints/ppo-horizon/metrics.jsonl"); err != nil || !strings.Contains(string(b), `"horizon":2`) {
		t.Fatalf("2-step PPO wrote no metrics: %v", err)
	}
	stage("ppo-horizon")
	// The same with every step of the continuations trained (credit all).
	ac := hc
	ac.Out, ac.Credit = "checkpoints/ppo-credit-all", train.CreditAll
	if err := train.RunPPO(ctx, ac); err != nil {
		t.Fatalf("train ppo --credit all: %v", err)
	}
	if b, err := store.ReadAll(ctx, st, "checkpoints/ppo-credit-all/metrics.jsonl"); err != nil || !strings.Contains(string(b), `"horizon":2`) {
		t.Fatalf("credit-all PPO wrote no metrics: %v", err)
	}
	stage("ppo-credit-all")

	cfg := DefaultConfig()
	cfg.Data, cfg.PerTask = root, 2
	cfg.Splits = []string{schemas.HeldOut, schemas.HeldIn}
	cfg.Env.MaxSteps = 3
	var out, log bytes.Buffer
	if err := run(ctx, cfg, &out, &log); err != nil {
		t.Fatalf("evaluate: %v\n%s", err, log.String())
	}
	stage("evaluate")
	t.Logf("stages: %s", strings.Join(stages, ", "))

	m, err := datasets.Latest(ctx, st, schemas.EvalResults.Name)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := datasets.ReadAll[schemas.EvalResult](ctx, st, m, schemas.EvalResults)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{MethodInitial: 1, MethodRandom: 2, MethodExpert: 2, MethodSFT: 2, MethodPPO: 2}
	got := map[string]int{}
	for _, r := range rows {
		got[r.Method+" "+r.TaskID]++
		wantSplit := map[string]string{"wine-cultivar": schemas.HeldIn, "election-vote": schemas.HeldOut}[r.TaskID]
		if r.Split != wantSplit {
			t.Errorf("row %s/%s/%d: split %q, want %q", r.Method, r.TaskID, r.Trajectory, r.Split, wantSplit)
		}
		if r.MInit <= 0 || math.IsNaN(r.FinalScore) {
			t.Errorf("row %s/%s/%d: m_init %v final %v", r.Method, r.TaskID, r.Trajectory, r.MInit, r.FinalScore)
		}
		if r.Method == MethodInitial && (r.FinalScore != r.MInit || r.Steps != 0) {
			t.Errorf("initial on %s: final %v steps %d, want m_init %v and no steps", r.TaskID, r.FinalScore, r.Steps, r.MInit)
		}
		if r.Method != MethodInitial && (r.Steps < 1 || r.Steps > 3 || len(r.Actions) != int(r.Steps) || len(r.Outcomes) != int(r.Steps) ||
			len(r.Answers) != int(r.Steps) || len(r.Feedback) != int(r.Steps)) {
			t.Errorf("%s on %s #%d: %d steps, %d actions, %d outcomes, %d answers, %d feedback lines; want 1..3 steps, one of each per step",
				r.Method, r.TaskID, r.Trajectory, r.Steps, len(r.Actions), len(r.Outcomes), len(r.Answers), len(r.Feedback))
		}
		// Every agent's trajectory records its time split; the scripts it
		// ran took time, and the two parts fit in its wall time.
		if r.Method == MethodInitial && (r.GenerateS != nil || r.WaitS != nil || r.ExecuteS != nil) {
			t.Errorf("initial on %s: generate_s %s wait_s %s execute_s %s, want none (no agent ran)", r.TaskID, secs(r.GenerateS), secs(r.WaitS), secs(r.ExecuteS))
		}
		if r.Method != MethodInitial && (r.GenerateS == nil || r.WaitS == nil || r.ExecuteS == nil || *r.GenerateS < 0 || *r.WaitS < 0 || *r.ExecuteS <= 0 ||
			*r.GenerateS+*r.WaitS+*r.ExecuteS > r.WallS) {
			t.Errorf("%s on %s #%d: generate_s %s wait_s %s execute_s %s wall_s %v, want all set, execute > 0, their sum within the wall",
				r.Method, r.TaskID, r.Trajectory, secs(r.GenerateS), secs(r.WaitS), secs(r.ExecuteS), r.WallS)
		}
		// Only a policy's episodes are answered in lockstep batches.
		if (r.Method == MethodRandom || r.Method == MethodExpert) && r.WaitS != nil && *r.WaitS != 0 {
			t.Errorf("%s on %s #%d: wait_s %v, want 0 (no batch to wait for)", r.Method, r.TaskID, r.Trajectory, *r.WaitS)
		}
		if r.Method == MethodExpert && !strings.Contains(r.Answers[0], "Action: "+r.Actions[0]) {
			t.Errorf("expert on %s #%d: first answer %q does not name its action %q", r.TaskID, r.Trajectory, r.Answers[0], r.Actions[0])
		}
	}
	for _, task := range smokeTasks {
		for method, n := range want {
			if got[method+" "+task] != n {
				t.Errorf("%s on %s: got %d rows, want %d", method, task, got[method+" "+task], n)
			}
		}
	}
	sources, _ := m.Extra["sources"].(map[string]any)
	for _, method := range []string{MethodSFT, MethodPPO} {
		if s, _ := sources[method].(string); !strings.Contains(s, "checkpoints/") {
			t.Errorf("manifest extra sources[%s] = %q, want its checkpoint", method, s)
		}
	}
	if from, _ := m.Extra["prompts_from"].(string); from != "steps v1" {
		t.Errorf("manifest extra prompts_from = %q, want the rollout's steps v1", from)
	}
	if len(m.Parents) != 2 {
		t.Errorf("manifest parents %v: want tasks and ideas", m.Parents)
	}
	// Every headline has the share of the headroom closed (every task has
	// an m_best); the initial script's is 0.
	heads, _ := m.Extra["headline"].([]any)
	for _, h := range heads {
		h, _ := h.(map[string]any)
		room, ok := h["headroom"].(float64)
		if !ok || (h["method"] == MethodInitial && room != 0) {
			t.Errorf("headline %v: headroom %v, want a number (0 for the initial script)", h["method"], h["headroom"])
		}
	}
	if len(heads) == 0 {
		t.Errorf("manifest extra headline is empty")
	}

	// The report and its plots.
	dir := filepath.Join(root, "reports", "eval-v1")
	md, err := os.ReadFile(filepath.Join(dir, ReportFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"## held-out tasks", "## held-in tasks", "| election-vote |", "| sft+ppo |", DeltaPlot, SFTPlot, PPOPlot, "](" + TranscriptsFile + ")"} {
		if !strings.Contains(string(md), s) {
			t.Errorf("report.md lacks %q", s)
		}
	}
	tr, err := os.ReadFile(filepath.Join(dir, TranscriptsFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"## election-vote (held-out): expert, trajectory 0", "## election-vote (held-out): sft+ppo, trajectory 0", "Action Input:"} {
		if !strings.Contains(string(tr), s) {
			t.Errorf("%s lacks %q", TranscriptsFile, s)
		}
	}
	for _, p := range []string{DeltaPlot, SFTPlot, PPOPlot, TimePlot, ActionsPlot, OutcomesPlot} {
		f, err := os.Open(filepath.Join(dir, p))
		if err != nil {
			t.Error(err)
			continue
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil || img.Bounds().Dx() < 400 {
			t.Errorf("%s: not a readable PNG (%v)", p, err)
		}
	}
	if !strings.Contains(out.String(), "HELD-OUT") || !strings.Contains(out.String(), "report: ") {
		t.Errorf("headline output:\n%s", out.String())
	}
}

// secs prints an optional seconds column.
func secs(p *float64) string {
	if p == nil {
		return "absent"
	}
	return fmt.Sprint(*p)
}
