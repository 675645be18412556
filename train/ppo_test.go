package train

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/env/episode"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/policy/native"
	"github.com/mlerl/mlerl/schemas"
)

// setupPPO writes an rl_states dataset and an "SFT" checkpoint holding a
// freshly initialised tiny policy over a byte vocabulary.
func setupPPO(t testing.TB, root string) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	var rows []schemas.RLState
	for i := range 8 {
		rows = append(rows, schemas.RLState{StateID: fmt.Sprint(i), TaskID: "t", Split: schemas.HeldIn,
			Prompt: fmt.Sprintf("s%d", i%4), SnapshotRef: fmt.Sprintf("sha256:%d", i)})
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
	// A vocabulary of a few letters only: the bytes tokenizer's byte
	// fallback would otherwise add all 256 bytes and make "d" rare.
	vocab := policy.NewVocab([]int{'a', 'b', 'c', 'd', 's', '0', '1', '2', '3'})
	cfg := policy.Config{Vocab: vocab.Size(), DModel: 32, Heads: 2, Layers: 1, Ctx: 24, PromptTokens: 16, ResponseTokens: 4}
	eng, err := policy.NewEngine(policy.EngineNative, cfg, policy.InitWeights(cfg, 5))
	if err != nil {
		t.Fatal(err)
	}
	sft := DefaultSFTConfig()
	sft.Tokenizer = "bytes"
	sft.Response = policy.ResponseFull
	if err := policy.SaveCheckpoint(ctx, st, "checkpoints/sft", 0, eng, policy.Checkpoint{Config: sft, Vocab: vocab, State: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
}

func tinyPPOConfig(root string) PPOConfig {
	cfg := DefaultPPOConfig()
	cfg.Data = root
	cfg.Horizon, cfg.GroupSize = 1, 8 // one-step: the reward functions below score one action
	cfg.Updates = 12
	cfg.BatchSize = 32
	cfg.Minibatches = 2
	cfg.UpdateEpochs = 2
	cfg.MaxNewTokens = 2
	cfg.Decode = policy.DecodeFree
	cfg.Reward = RewardFormat
	cfg.GenBatch = 8
	cfg.Workers = 3
	cfg.KLCoef = 0
	cfg.NormAdv = false // a batch where nobody found the reward carries no signal
	cfg.Optim.LR = 1e-2
	return cfg
}

// The best action is known: any action starting with "d" earns 1. The
// initial policy (seed 5) starts about 1 answer in 8 with "d": rare, but
// found in every run's first updates whatever order rewards arrive in.
func pickD(_ context.Context, s schemas.RLState, action string) (Outcome, error) {
	out := Outcome{DurationS: 0.001 * float64(1+len(action))}
	if strings.HasPrefix(action, "d") {
		out.Reward = 1
	}
	return out, nil
}

func TestPPORaisesRewardOnKnownBestAction(t *testing.T) {
	root := t.TempDir()
	setupPPO(t, root)
	var log bytes.Buffer
	// lr 3e-3: the engine's parallel sums make runs differ in their last
	// bits, and at 1e-2 about one run in six drove "d" out instead of in
	// (a rise of 0.06-0.09, or a collapse to 0); at 3e-3 every one of 12
	// runs rose by more than 0.55.
	cfg := tinyPPOConfig(root)
	cfg.Optim.LR = 3e-3
	if err := RunPPOWith(context.Background(), cfg, pickD, &log); err != nil {
		t.Fatalf("%v\nlog:\n%s", err, log.String())
	}
	ms := readMetrics(t, root, "checkpoints/ppo")
	if len(ms) != 12 {
		t.Fatalf("got %d metric lines, want 12", len(ms))
	}
	for _, k := range []string{"losses/policy", "losses/value", "losses/approx_kl", "losses/clipfrac", "losses/entropy",
		"charts/reward_mean", "charts/format_error_rate", "charts/samples_per_s", "charts/stale_fraction"} {
		if _, ok := ms[0][k].(float64); !ok {
			t.Errorf("metric %s missing from %v", k, ms[0])
		}
	}
	avg := func(lines []map[string]any) float64 {
		s := 0.0
		for _, m := range lines {
			s += m["charts/reward_mean"].(float64)
		}
		return s / float64(len(lines))
	}
	first, last := avg(ms[:3]), avg(ms[len(ms)-3:])
	t.Logf("mean reward: first 3 updates %.3f, last 3 %.3f", first, last)
	if !(last > first+0.3) {
		t.Errorf("mean reward went from %.3f to %.3f, want a rise of at least 0.3", first, last)
	}
}

func TestDurationWeightsHandComputed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		dts   []float64
		floor float64
		on    bool
		want  []float64
	}{
		// mean = (1+3+8)/3 = 4
		{"weighted", []float64{1, 3, 8}, 0.5, true, []float64{0.25, 0.75, 2}},
		{"off", []float64{1, 3, 8}, 0.5, false, []float64{1, 1, 1}},
		// A step that ran no script (0.001 s) weighs as the floor, not 0:
		// durations (1, 1, 4), mean 2.
		{"floored", []float64{0.001, 1, 4}, 1, true, []float64{0.5, 0.5, 2}},
		{"all below the floor", []float64{0, 0.2}, 1, true, []float64{1, 1}},
	} {
		got := durationWeights(tc.dts, tc.floor, tc.on)
		for i := range got {
			if math.Abs(got[i]-tc.want[i]) > 1e-9 {
				t.Errorf("%s: got %v want %v", tc.name, got, tc.want)
				break
			}
		}
	}
}

// TestNoAcceptedSampleWeighsZero: whatever the steps' durations (refused
// answers, Inspect, Final Answer take milliseconds), every weight is
// positive and the weights average 1.
func TestNoAcceptedSampleWeighsZero(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		n := 1 + r.IntN(40)
		d := make([]float64, n)
		for i := range d {
			if r.IntN(2) == 0 {
				d[i] = r.ExpFloat64() * 5
			}
		}
		w := durationWeights(d, DefaultPPOConfig().MinDurationS, true)
		sum := 0.0
		for i, x := range w {
			if !(x > 0) {
				t.Fatalf("durations %v: weight %d is %v", d, i, x)
			}
			sum += x
		}
		if math.Abs(sum/float64(n)-1) > 1e-9 {
			t.Fatalf("durations %v: weights average %v", d, sum/float64(n))
		}
	}
}

// TestGroupAdvantagesLeaveOneOut against a hand-computed group: rewards
// (1, 0, 0, -1): each sample's baseline is the mean of the other three.
func TestGroupAdvantagesLeaveOneOut(t *testing.T) {
	mk := func(rs ...float64) *group {
		g := &group{}
		for _, r := range rs {
			g.Samples = append(g.Samples, &sample{Out: Outcome{Reward: r}})
		}
		return g
	}
	// 1 - (0+0-1)/3 = 4/3; 0 - (1+0-1)/3 = 0; 0; -1 - (1+0+0)/3 = -4/3.
	// Second group (0.5, 0.1): 0.5 - 0.1 = 0.4, 0.1 - 0.5 = -0.4.
	got := groupAdvantages([]*group{mk(1, 0, 0, -1), mk(0.5, 0.1)}, false)
	want := []float64{4.0 / 3, 0, 0, -4.0 / 3, 0.4, -0.4}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	// Divided by the group's std: (1, 0, 0, -1) has std sqrt(1/2).
	got = groupAdvantages([]*group{mk(1, 0, 0, -1)}, true)
	if s := math.Sqrt(0.5); math.Abs(got[0]-4.0/3/s) > 1e-6 || math.Abs(got[3]+4.0/3/s) > 1e-6 {
		t.Errorf("with group_std: got %v", got)
	}
	// A leave-one-out advantage sums to 0 over its group.
	sum := 0.0
	for _, a := range groupAdvantages([]*group{mk(0.3, -1, 0.7, 0.2, 0.2)}, false) {
		sum += a
	}
	if math.Abs(sum) > 1e-12 {
		t.Errorf("advantages of a group sum to %v, want 0", sum)
	}
}

// TestEpisodeGroupAdvantages: each step's baseline is the mean return of
// the group's other episodes at the same step; a step no other episode
// reached gets 0.
func TestEpisodeGroupAdvantages(t *testing.T) {
	g := &group{}
	add := func(ep, step int) { g.Samples = append(g.Samples, &sample{Episode: ep, Step: step}) }
	add(0, 0)
	add(0, 1)
	add(1, 0)
	add(2, 0)
	add(2, 1)
	add(2, 2)
	returns := []float64{2, 1, 0, -1, 3, 5}
	got := episodeGroupAdvantages([]*group{g}, returns)
	// step 0: 2 - (0-1)/2 = 2.5; 0 - (2-1)/2 = -0.5; -1 - (2+0)/2 = -2.
	// step 1: 1 - 3 = -2; 3 - 1 = 2. step 2: alone, 0.
	want := []float64{2.5, -2, -0.5, -2, 2, 0}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

func TestOneStepAdvantagesMatchReferenceLoop(t *testing.T) {
	rewards := []float64{1, -1, 0, 0.5, -10}
	values := []float64{0.2, 0.1, -0.3, 0.5, -2}
	// Reference: a one-step episode's GAE with any gamma and lambda is its
	// single TD error, r + gamma*V(terminal)=0 - V(s).
	for _, norm := range []bool{false, true} {
		var want []float64
		for i := range rewards {
			delta := rewards[i] + 0.99*0 - values[i]
			want = append(want, delta)
		}
		if norm {
			var mean, variance float64
			for _, w := range want {
				mean += w / float64(len(want))
			}
			for _, w := range want {
				variance += (w - mean) * (w - mean) / float64(len(want)-1)
			}
			for i := range want {
				want[i] = (want[i] - mean) / (math.Sqrt(variance) + 1e-8)
			}
		}
		adv, ret := oneStepAdvantages(rewards, values, norm)
		for i := range want {
			if math.Abs(adv[i]-want[i]) > 1e-12 || ret[i] != rewards[i] {
				t.Errorf("norm=%v sample %d: got adv %v ret %v, want %v %v", norm, i, adv[i], ret[i], want[i], rewards[i])
			}
		}
	}
}

// TestRewardCacheKeysOnTheParsedAction: answers that differ in
// Reflection, Thought or layout are the same action, executed once; a
// different argument or another snapshot is another key.
func TestRewardCacheKeysOnTheParsedAction(t *testing.T) {
	calls := 0
	fn := func(_ context.Context, _ schemas.RLState, a string) (Outcome, error) {
		calls++
		return Outcome{Reward: float64(len(a))}, nil
	}
	c := newRewardCache()
	s := schemas.RLState{StateID: "1", SnapshotRef: "sha256:x"}
	ctx := context.Background()
	for _, a := range []string{
		"Reflection: -\nThought: -\nAction: Execute Script\nAction Input: {\"script_name\": \"train.py\"}",
		"Reflection: the score fell\nThought: run it again\nAction: Execute Script\nAction Input: {\n    \"script_name\": \"train.py\"\n}",
		"Reflection: -\nThought: -\nAction: Execute Script\nAction Input: {\"script_name\": \"other.py\"}",
		"not an answer", "  not   an\nanswer ",
	} {
		if _, _, err := c.get(ctx, fn, s, a); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 3 {
		t.Errorf("got %d executions, want 3 (Reflection, Thought and layout do not make another action)", calls)
	}
	s2 := s
	s2.SnapshotRef = "sha256:y"
	if _, cached, _ := c.get(ctx, fn, s2, "not an answer"); cached {
		t.Errorf("another snapshot hit the cache")
	}
}

// A PPO run stopped after its last update resumes from the checkpoint with
// the saved weights, optimizer state, policy version and data position.
func TestPPOResumesFromCheckpoint(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	setupPPO(t, root)
	cfg := tinyPPOConfig(root)
	cfg.Updates, cfg.CheckpointEvery = 2, 2
	if err := RunPPOWith(ctx, cfg, pickD, io.Discard); err != nil {
		t.Fatal(err)
	}
	st, _ := store.Open(ctx, root)
	latest, err := policy.LatestCheckpoint(ctx, st, cfg.Out)
	if err != nil {
		t.Fatal(err)
	}
	var saved ppoState
	ck, err := policy.LoadCheckpoint(ctx, st, latest, nil, &saved)
	if err != nil {
		t.Fatal(err)
	}
	if saved.Update != 2 || saved.Drawn == 0 || len(saved.RNG) == 0 {
		t.Fatalf("saved state %+v: want update 2, states drawn and an RNG state", saved)
	}
	if ck.OptimizerEngine != policy.EngineNative || len(ck.Optimizer) == 0 {
		t.Fatalf("the checkpoint holds no optimiser state (engine %q)", ck.OptimizerEngine)
	}
	cfg.Updates = 4
	if err := RunPPOWith(ctx, cfg, pickD, io.Discard); err != nil {
		t.Fatal(err)
	}
	ms := readMetrics(t, root, cfg.Out)
	if len(ms) != 4 {
		t.Fatalf("got %d metric lines after resuming, want 4 (2 before, 2 after)", len(ms))
	}
	for i, m := range ms {
		if got := m["step"].(float64); got != float64(i+1) {
			t.Errorf("metrics line %d: step %v, want %d", i, got, i+1)
		}
	}
	var resumed ppoState
	latest, _ = policy.LatestCheckpoint(ctx, st, cfg.Out)
	if _, err := policy.LoadCheckpoint(ctx, st, latest, nil, &resumed); err != nil {
		t.Fatal(err)
	}
	if resumed.Update != 4 || resumed.Drawn <= saved.Drawn {
		t.Errorf("after resuming: got update %d drawn %d, want 4 and more than %d", resumed.Update, resumed.Drawn, saved.Drawn)
	}
}

// maskConstraint allows a seeded random part of the vocabulary at each
// step and forces nothing: masks without a grammar.
type maskConstraint struct {
	r     *rand.Rand
	vocab int
}

func (c *maskConstraint) Allowed(m policy.Bitset, _ int) error {
	for id := policy.NumSpecial; id < c.vocab; id++ {
		if c.r.IntN(3) == 0 {
			m.Set(int32(id))
		}
	}
	m.Set(int32(policy.NumSpecial))
	return nil
}
func (c *maskConstraint) Accept(int32) error          { return nil }
func (c *maskConstraint) Forced(int) ([]int32, error) { return nil, nil }

// TestPPORatioIsOneOnFirstMinibatch: before any update the policy is the
// behaviour policy, so recomputing each action token's log-probability
// under the mask it was sampled with gives an importance ratio of 1 (the
// sampling went through the KV cache, the recomputation through a packed
// forward with each prompt once and its samples' actions attending it:
// groups of 3 samples of one prompt, as step-wise PPO draws them).
func TestPPORatioIsOneOnFirstMinibatch(t *testing.T) {
	cfg := policy.Config{Vocab: 60, DModel: 32, Heads: 2, Layers: 2, Ctx: 64, PromptTokens: 32, ResponseTokens: 24}
	for _, engine := range []string{policy.EngineNative, policy.EngineGoMLX} {
		eng, err := policy.NewEngine(engine, cfg, policy.InitWeights(cfg, 3))
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(4, 4))
		var prompts [][]int32
		for range 4 {
			p := []int32{policy.BosID}
			for range 3 + r.IntN(20) {
				p = append(p, int32(policy.NumSpecial+r.IntN(cfg.Vocab-policy.NumSpecial)))
			}
			prompts = append(prompts, p, p, p)
		}
		gen := policy.Generator{Engine: eng}
		samples, err := gen.Generate(prompts, policy.GenerateOptions{Temperature: 1, MaxNewTokens: 20, Seed: 9,
			Constrain: func(i int) policy.Constraint {
				return &maskConstraint{r: rand.New(rand.NewPCG(uint64(i), 1)), vocab: cfg.Vocab}
			}})
		if err != nil {
			t.Fatal(err)
		}
		batch := make([]*sample, len(samples))
		for i, s := range samples {
			if s.Masks == nil {
				t.Fatal("constrained samples carry no masks")
			}
			batch[i] = &sample{Prompt: s.Prompt, Action: s.Tokens, LogP: s.LogProbs, Masks: s.Masks}
		}
		run := &ppoRun{policy: eng}
		mb := run.pack(batch)
		if mb.batch.B != 4 {
			t.Fatalf("%s: %d rows for 4 distinct prompts, want one row per prompt", engine, mb.batch.B)
		}
		logits, _, err := eng.Logits(mb.batch, mb.idx)
		if err != nil {
			t.Fatal(err)
		}
		worst := 0.0
		for i, lp := range tokenLogProbs(logits, mb.toks, cfg.Vocab) {
			worst = max(worst, math.Abs(math.Exp(lp-mb.toks[i].OldLogP)-1))
		}
		if worst > 1e-4 {
			t.Errorf("%s: the first minibatch's ratios differ from 1 by up to %.2g", engine, worst)
		}
		// Without the masks the ratio is not 1: the masks matter.
		free := 0.0
		for i := range mb.toks {
			tk := mb.toks[i]
			tk.Mask = nil
			lp := tokenLogProbs(logits[i*cfg.Vocab:(i+1)*cfg.Vocab], []ppoToken{tk}, cfg.Vocab)[0]
			free = max(free, math.Abs(math.Exp(lp-tk.OldLogP)-1))
		}
		if free < 0.1 {
			t.Errorf("%s: ignoring the masks changes the ratios by only %.2g: the test does not test masks", engine, free)
		}
	}
}

// TestStateTasksNest: the pools of 3, 6 and 10 tasks are nested prefixes
// of one fixed order, whatever order the states come in.
func TestStateTasksNest(t *testing.T) {
	var states []schemas.RLState
	for i := range 40 {
		states = append(states, schemas.RLState{StateID: fmt.Sprint(i), TaskID: fmt.Sprintf("task-%02d", (i*7)%10)})
	}
	tasks := func(n int) map[string]bool {
		got, err := restrictTasks(states, n, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, s := range got {
			out[s.TaskID] = true
		}
		return out
	}
	t3, t6, t10 := tasks(3), tasks(6), tasks(10)
	if len(t3) != 3 || len(t6) != 6 || len(t10) != 10 {
		t.Fatalf("got %d, %d, %d tasks", len(t3), len(t6), len(t10))
	}
	for id := range t3 {
		if !t6[id] {
			t.Errorf("task %s is in the 3-task pool but not the 6-task pool", id)
		}
	}
	a, b := TaskOrder([]string{"b", "a", "c", "a"}), TaskOrder([]string{"c", "a", "b"})
	if !slices.Equal(a, b) || len(a) != 3 {
		t.Errorf("task order depends on the input order: %v vs %v", a, b)
	}
	if _, err := restrictTasks(states, 11, io.Discard); err == nil || !strings.Contains(err.Error(), "has 10 held-in tasks") {
		t.Errorf("11 of 10 tasks: %v", err)
	}
}

// TestKLToTheReferenceStartsAtZero: the reference's log-probabilities,
// computed once per update and matched to each sample's tokens, equal the
// policy's before it moves, so the KL term of a (near) zero-learning-rate
// update is 0; misassigned, they would not be.
func TestKLToTheReferenceStartsAtZero(t *testing.T) {
	root := t.TempDir()
	setupPPO(t, root)
	cfg := tinyPPOConfig(root)
	cfg.Updates, cfg.KLCoef, cfg.Optim.LR, cfg.MaxNewTokens = 1, 0.1, 1e-12, 4
	if err := RunPPOWith(context.Background(), cfg, pickD, io.Discard); err != nil {
		t.Fatal(err)
	}
	m := readMetrics(t, root, cfg.Out)[0]
	if kl := m["losses/kl_ref"].(float64); kl > 1e-6 || m["losses/decision_tokens"].(float64) == 0 {
		t.Errorf("kl_ref %g over %v decision tokens, want 0 before the policy moves", kl, m["losses/decision_tokens"])
	}
}

// continuationGroups are two groups of n-step episodes and their returns
// G_t in flatten order. Group 1: episodes of 2, 1 and 2 steps, G = (0.5,
// 0.2 | 0 | 1, 0.4). Group 2: two one-step episodes with equal returns,
// no signal.
func continuationGroups() ([]*group, []float64) {
	mk := func(steps ...int) *group {
		g := &group{}
		for ep, n := range steps {
			for s := range n {
				g.Samples = append(g.Samples, &sample{Episode: ep, Step: s})
			}
		}
		return g
	}
	return []*group{mk(2, 1, 2), mk(1, 1)}, []float64{0.5, 0.2, 0, 1, 0.4, -1, -1}
}

// TestFirstActionsCreditTheContinuation: with horizon > 1 only the
// episodes' first actions are trained, each credited with its G_0, and a
// group whose G_0 are all equal is dropped.
func TestFirstActionsCreditTheContinuation(t *testing.T) {
	groups, returns := continuationGroups()
	kept, rets, dropped := firstActions(groups, returns, true)
	if len(kept) != 1 || len(dropped) != 1 || len(kept[0].Samples) != 3 {
		t.Fatalf("kept %d groups (%d flat), want 1 of 3 first actions and 1 flat", len(kept), len(dropped))
	}
	want := []float64{0.5, 0, 1}
	for i, s := range kept[0].Samples {
		if s.Step != 0 || s.ret() != want[i] || rets[i] != want[i] {
			t.Errorf("sample %d: step %d credited %v (returns %v), want step 0 and %v", i, s.Step, s.ret(), rets, want[i])
		}
	}
	// The flat group's first actions are what the update records as
	// dropped (samples/used false).
	if d := flatten(dropped); dropped[0] != groups[1] || len(d) != 2 || d[0].Step != 0 || d[1].Step != 0 || d[0].Episode != 0 || d[1].Episode != 1 {
		t.Errorf("dropped %v, want the flat group's two first actions", d)
	}
	// 0.5 - (0+1)/2 = 0; 0 - 0.75 = -0.75; 1 - 0.25 = 0.75.
	adv := groupAdvantages(kept, false)
	for i, w := range []float64{0, -0.75, 0.75} {
		if math.Abs(adv[i]-w) > 1e-12 {
			t.Fatalf("advantages %v, want [0 -0.75 0.75]", adv)
		}
	}
}

// TestTrajectoryCreditTrainsEveryStep: credit all gives each step of an
// episode its episode's leave-one-out A_0, and drops flat groups.
func TestTrajectoryCreditTrainsEveryStep(t *testing.T) {
	// G_0 = 0.5, 0, 1, so A_0 = 0, -0.75, 0.75 for episodes of 2, 1 and 2
	// steps; the second group is dropped.
	groups, returns := continuationGroups()
	kept, adv, credit, dropped := trajectoryCredit(groups, returns, false)
	if len(kept) != 1 || len(dropped) != 1 || len(kept[0].Samples) != 5 {
		t.Fatalf("kept %d groups (%d flat), want 1 of 5 samples and 1 flat", len(kept), len(dropped))
	}
	for i, w := range []float64{0, 0, -0.75, 0.75, 0.75} {
		if math.Abs(adv[i]-w) > 1e-12 {
			t.Fatalf("advantages %v, want [0 0 -0.75 0.75 0.75]", adv)
		}
	}
	if len(credit) != 3 || credit[0] != 0.5 || credit[1] != 0 || credit[2] != 1 {
		t.Errorf("credit %v, want the episodes' G_0 [0.5 0 1]", credit)
	}
	// The second steps are trained: they are in the kept group with their
	// own G_1 recorded.
	if s := kept[0].Samples[1]; s.Step != 1 || s.ret() != 0.2 {
		t.Errorf("second sample: step %d credited %v, want step 1 with G_1 0.2", s.Step, s.ret())
	}
	// Dropped: every step of the flat group (credit all records them all).
	if d := flatten(dropped); dropped[0] != groups[1] || len(d) != 2 || d[0].Episode != 0 || d[1].Episode != 1 {
		t.Errorf("dropped %v, want the flat group's two samples", d)
	}
	// With group_std the advantages are divided by the G_0 spread.
	groups, returns = continuationGroups()
	_, adv, _, _ = trajectoryCredit(groups[:1], returns[:5], true)
	if sd := math.Sqrt((0.0 + 0.25 + 0.25) / 3); math.Abs(adv[3]-0.75/sd) > 1e-6 {
		t.Errorf("with group_std: %v, want 0.75/%.3f at the third episode", adv, sd)
	}
}

// TestCurveRecordSkipsUndefinedGains: a task whose m_init is 0 has no
// relative gain; its point is left out (a NaN would make the whole
// metrics line unwritable as JSON), the others are kept.
func TestCurveRecordSkipsUndefinedGains(t *testing.T) {
	jobs := []episode.Job{
		{Task: schemas.Task{TaskID: "a", Split: schemas.HeldIn, Direction: schemas.HigherIsBetter, MInit: 0.5, MBest: 0.9}},
		{Task: schemas.Task{TaskID: "z", Split: schemas.HeldIn, Direction: schemas.LowerIsBetter, MInit: 0}},
	}
	rec := curveRecord(jobs, []float64{0.6, 0.1}, []int{2, 2}, []int{2, 2})
	if h, ok := rec["curve/held-in/headroom"].(float64); !ok || math.Abs(h-0.25) > 1e-12 {
		t.Errorf("held-in headroom %v, want 0.25 ((0.6 - 0.5) / (0.9 - 0.5))", rec["curve/held-in/headroom"])
	}
	if _, err := json.Marshal(rec); err != nil {
		t.Fatalf("the curve point does not marshal: %v", err)
	}
	if d := rec["curve/held-in/delta_r"].(float64); math.Abs(d-0.2) > 1e-12 || rec["curve/held-in/tasks"] != 1 {
		t.Errorf("held-in delta_r %v over %v tasks, want 0.2 over 1", d, rec["curve/held-in/tasks"])
	}
}

// Live episodes reach the workers one per group in turn, so that two
// episodes of a group (same state, often the same run) do not start side
// by side.
func TestAcrossGroups(t *testing.T) {
	for _, tc := range []struct {
		live []int
		k    int
		want []int
	}{
		{[]int{0, 1, 2, 3, 4, 5, 6, 7}, 4, []int{0, 4, 1, 5, 2, 6, 3, 7}},
		{[]int{1, 2, 3, 5, 6}, 4, []int{1, 5, 2, 6, 3}},
		{[]int{0, 1, 2, 3, 4, 5}, 2, []int{0, 2, 4, 1, 3, 5}},
		{[]int{0, 1, 2}, 1, []int{0, 1, 2}},
		{nil, 4, []int{}},
	} {
		got := acrossGroups(tc.live, tc.k)
		if !slices.Equal(got, tc.want) {
			t.Errorf("acrossGroups(%v, %d) = %v, want %v", tc.live, tc.k, got, tc.want)
		}
	}
}

// TestPPOSaveMergedNeedsAHuggingFacePolicy: save_merged writes a Hugging
// Face folder, which mlerl's own model has no form for. A PPO run from
// an SFT checkpoint of mlerl's own model refuses it before any update,
// naming the key, and leaves the folder and the run's checkpoints alone.
func TestPPOSaveMergedNeedsAHuggingFacePolicy(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	setupPPO(t, root)
	cfg := tinyPPOConfig(root)
	cfg.Updates = 1
	cfg.SaveMerged = filepath.Join(t.TempDir(), "merged")
	err := RunPPOWith(ctx, cfg, pickD, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "save_merged") || !strings.Contains(err.Error(), "mlerl's own model") {
		t.Fatalf("got %v, want a refusal naming save_merged and mlerl's own model", err)
	}
	if _, err := os.Stat(cfg.SaveMerged); !os.IsNotExist(err) {
		t.Errorf("the refused run touched %s (%v)", cfg.SaveMerged, err)
	}
	st, _ := store.Open(ctx, root)
	if latest, err := policy.LatestCheckpoint(ctx, st, cfg.Out); err == nil && latest != "" {
		t.Errorf("the refused run wrote checkpoint %s", latest)
	}
}

// TestPPOBF16LogProbTolerance states how far bf16 products move the
// learner's log-probabilities from those the float32 sampler drew with:
// a logit through a chain of depth bf16 products is within
// native.BF16Tolerance(depth) of float32's, relative to the largest
// logit, and a log-probability (a logit minus the log-sum-exp of the
// allowed ones) moves by at most twice that. Checked token by token on
// the samples of TestPPORatioIsOneOnFirstMinibatch's model with its
// dense products in bf16 (its heads of 16 values keep the attention in
// float32): depth 4 per layer (q, out, ffn in, ffn out) and the LM head.
// The ratio exp(learner - sampler) is then off 1 before any update, which
// is what old_logp recompute removes (TestPPOBF16RatioStartsAtOne).
func TestPPOBF16LogProbTolerance(t *testing.T) {
	cfg := policy.Config{Vocab: 60, DModel: 32, Heads: 2, Layers: 2, Ctx: 64, PromptTokens: 32, ResponseTokens: 24}
	const depth = 4*2 + 1
	eng, err := policy.NewEngine(policy.EngineNative, cfg, policy.InitWeights(cfg, 3))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := policy.SetMatmul(eng, policy.MatmulBF16); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(4, 4))
	var prompts [][]int32
	for range 4 {
		p := []int32{policy.BosID}
		for range 3 + r.IntN(20) {
			p = append(p, int32(policy.NumSpecial+r.IntN(cfg.Vocab-policy.NumSpecial)))
		}
		prompts = append(prompts, p, p, p)
	}
	gen := policy.Generator{Engine: eng} // decodes in float32 whatever the products' precision
	samples, err := gen.Generate(prompts, policy.GenerateOptions{Temperature: 1, MaxNewTokens: 20, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	batch := make([]*sample, len(samples))
	for i, s := range samples {
		batch[i] = &sample{Prompt: s.Prompt, Action: s.Tokens, LogP: s.LogProbs}
	}
	run := &ppoRun{policy: eng}
	mb := run.pack(batch)
	logits, _, err := eng.Logits(mb.batch, mb.idx)
	if err != nil {
		t.Fatal(err)
	}
	scale := 0.0
	for _, z := range logits {
		scale = max(scale, math.Abs(float64(z)))
	}
	tol := 2 * native.BF16Tolerance(depth) * scale
	worst := 0.0
	for i, lp := range tokenLogProbs(logits, mb.toks, cfg.Vocab) {
		worst = max(worst, math.Abs(lp-mb.toks[i].OldLogP))
	}
	t.Logf("largest |log ratio| %.3g over %d tokens; tolerance %.3g (2 x BF16Tolerance(%d) %.3g x largest logit %.3g)", worst, len(mb.toks), tol, depth, native.BF16Tolerance(depth), scale)
	if worst > tol {
		t.Errorf("bf16 products moved a log-probability by %.3g, more than the stated %.3g", worst, tol)
	}
	if worst < 1e-5 {
		t.Errorf("bf16 products moved no log-probability by more than %.2g: the products ran in float32", worst)
	}
}

// TestPPOBF16RatioStartsAtOne: train ppo with bf16 products on a Hugging
// Face policy (a bf16 base, fresh adapters). With old_logp recompute the
// behaviour log-probabilities are the learner's own, so the first
// minibatch's ratios are exactly 1 (approx_kl and clipfrac read 0 before
// the step moves the policy), and the update records how far they were
// from the sampler's (behaviour_logp_gap); with old_logp sampler the
// float32 sampler's log-probabilities make approx_kl positive from the
// start.
func TestPPOBF16RatioStartsAtOne(t *testing.T) {
	for _, old := range []string{OldLogPRecompute, OldLogPSampler} {
		t.Run(old, func(t *testing.T) {
			root := t.TempDir()
			setupPPO(t, root)
			cfg := tinyPPOConfig(root)
			cfg.Policy = "hf:" + tinyHF("qwen2")
			cfg.Budgets = policy.Budgets{Ctx: 256, PromptTokens: 160, ResponseTokens: 8}
			cfg.Tuning.LoRA.Rank, cfg.Tuning.LoRA.Alpha, cfg.Tuning.BaseStorage = 4, 8, policy.MatmulBF16
			cfg.Matmul, cfg.OldLogP = policy.MatmulBF16, old
			// One minibatch and one epoch: the loss is computed once,
			// before the step that moves the policy.
			cfg.Updates, cfg.Minibatches, cfg.UpdateEpochs = 1, 1, 1
			cfg.Optim.LR, cfg.MaxNewTokens = 1e-12, 4
			var log bytes.Buffer
			if err := RunPPOWith(context.Background(), cfg, pickD, &log); err != nil {
				t.Fatalf("%v\n%s", err, log.String())
			}
			if want := "learner and reference products bf16 (the sampler decodes in float32); behaviour log-probabilities: " + old; !strings.Contains(log.String(), want) {
				t.Errorf("the log does not say %q:\n%s", want, log.String())
			}
			m := readMetrics(t, root, cfg.Out)[0]
			akl, clip := m["losses/approx_kl"].(float64), m["losses/clipfrac"].(float64)
			gap, measured := m["losses/behaviour_logp_gap"].(float64)
			switch old {
			case OldLogPRecompute:
				if akl != 0 || clip != 0 {
					t.Errorf("approx_kl %g, clipfrac %g: want exactly 0 with the learner's own log-probabilities", akl, clip)
				}
				if !measured || !(gap > 0) || m["losses/behaviour_logp_gap_max"].(float64) < gap {
					t.Errorf("behaviour_logp_gap %v (max %v): want the sampler's float32 log-probabilities measured against the bf16 learner's", m["losses/behaviour_logp_gap"], m["losses/behaviour_logp_gap_max"])
				}
			case OldLogPSampler:
				if !(akl > 0) {
					t.Errorf("approx_kl %g with the sampler's float32 log-probabilities and bf16 products: want > 0", akl)
				}
				if measured {
					t.Errorf("behaviour_logp_gap %g recorded without old_logp recompute", gap)
				}
			}
		})
	}
}
