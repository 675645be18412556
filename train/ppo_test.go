package train

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/policy"
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
	if err := RunPPOWith(context.Background(), tinyPPOConfig(root), pickD, &log); err != nil {
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
		name string
		dts  []float64
		on   bool
		want []float64
	}{
		// mean = (1+3+8)/3 = 4
		{"weighted", []float64{1, 3, 8}, true, []float64{0.25, 0.75, 2}},
		{"off", []float64{1, 3, 8}, false, []float64{1, 1, 1}},
		{"all zero", []float64{0, 0}, true, []float64{1, 1}},
		// mean = 0.5: a 60x spread in durations
		{"fast and slow", []float64{0.0164, 0.9836}, true, []float64{0.0328, 1.9672}},
	} {
		got := durationWeights(tc.dts, tc.on)
		for i := range got {
			if math.Abs(got[i]-tc.want[i]) > 1e-9 {
				t.Errorf("%s: got %v want %v", tc.name, got, tc.want)
				break
			}
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

func TestRewardCacheKeysOnNormalisedAction(t *testing.T) {
	calls := 0
	fn := func(_ context.Context, _ schemas.RLState, a string) (Outcome, error) {
		calls++
		return Outcome{Reward: float64(len(a))}, nil
	}
	c := newRewardCache()
	s := schemas.RLState{StateID: "1", SnapshotRef: "sha256:x"}
	ctx := context.Background()
	for _, a := range []string{"Action: List Files", "  Action:   List\nFiles ", "Action: Other"} {
		if _, _, err := c.get(ctx, fn, s, a); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 2 {
		t.Errorf("got %d executions, want 2 (layout-only differences are one action)", calls)
	}
	s2 := s
	s2.SnapshotRef = "sha256:y"
	if _, cached, _ := c.get(ctx, fn, s2, "Action: Other"); cached {
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
// full forward).
func TestPPORatioIsOneOnFirstMinibatch(t *testing.T) {
	cfg := policy.Config{Vocab: 60, DModel: 32, Heads: 2, Layers: 2, Ctx: 64, PromptTokens: 32, ResponseTokens: 24}
	for _, engine := range []string{policy.EngineNative, policy.EngineGoMLX} {
		eng, err := policy.NewEngine(engine, cfg, policy.InitWeights(cfg, 3))
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(4, 4))
		var prompts [][]int32
		for range 6 {
			p := []int32{policy.BosID}
			for range 3 + r.IntN(20) {
				p = append(p, int32(policy.NumSpecial+r.IntN(cfg.Vocab-policy.NumSpecial)))
			}
			prompts = append(prompts, p)
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
		logits, _, err := eng.Logits(mb.batch, mb.idx)
		if err != nil {
			t.Fatal(err)
		}
		worst := 0.0
		for i, lp := range tokenLogProbs(logits, mb.toks, cfg.Vocab) {
			worst = max(worst, math.Abs(math.Exp(float64(lp-mb.toks[i].OldLogP))-1))
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
			free = max(free, math.Abs(math.Exp(float64(lp-tk.OldLogP))-1))
		}
		if free < 0.1 {
			t.Errorf("%s: ignoring the masks changes the ratios by only %.2g: the test does not test masks", engine, free)
		}
	}
}
