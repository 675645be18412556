package train

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/gomlx/compute"

	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/internal/store"
)

// agentCheckpoints saves one tiny policy as an SFT checkpoint (bytes
// tokenizer) and as a PPO checkpoint whose config points at the SFT one.
func agentCheckpoints(t *testing.T) (store.Store, *Policy, *Vocab) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	vocab := BuildVocab(ByteTokenizer{}, []string{"Action: List Files\nAction Input: {}"}, 1)
	cfg := ModelConfig{Vocab: vocab.Size(), DModel: 32, Heads: 2, Layers: 1, Ctx: 64}
	pol, err := NewPolicy(compute.MustNew(), cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pol.Generate([][]int32{{BosID}}, GenerateOptions{MaxNewTokens: 1}); err != nil {
		t.Fatal(err) // builds the graphs, which creates the variables
	}
	sft := DefaultSFTConfig()
	sft.Tokenizer = "bytes"
	if err := SaveCheckpoint(ctx, st, "checkpoints/sft", 4, pol, Checkpoint{Config: sft, Model: cfg, Vocab: vocab, State: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	ppo := DefaultPPOConfig()
	if err := SaveCheckpoint(ctx, st, "checkpoints/ppo", 2, pol, Checkpoint{Config: ppo, Model: cfg, Vocab: vocab, State: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	return st, pol, vocab
}

func TestPolicyAgent(t *testing.T) {
	ctx := context.Background()
	st, pol, vocab := agentCheckpoints(t)
	opts := AgentOptions{Temperature: 1, TopP: 1, MaxNewTokens: 12}
	obs := agents.Observation{Compact: "Task: list the files"}
	act := func(f agents.Factory, seed int64, steps int) []string {
		a := f.Episode(nil, seed)
		var out []string
		for range steps {
			text, usage, err := a.Act(ctx, obs)
			if err != nil {
				t.Fatal(err)
			}
			if usage.CompletionTokens < 1 || usage.PromptTokens < 2 {
				t.Errorf("usage %+v: want the prompt and completion token counts", usage)
			}
			out = append(out, text)
		}
		return out
	}
	for _, dir := range []string{"checkpoints/sft", "checkpoints/ppo"} {
		t.Run(dir, func(t *testing.T) {
			f, err := LoadAgent(ctx, st, dir, "p", compute.MustNew(), opts)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(f.Source, dir+"/step-") {
				t.Errorf("source %q: want the latest step folder of %s", f.Source, dir)
			}
			a, b := act(f, 7, 3), act(f, 7, 3)
			if strings.Join(a, "\x00") != strings.Join(b, "\x00") {
				t.Errorf("seed 7 twice: got %q then %q, want the same answers", a, b)
			}
			// The loaded policy answers as the in-memory one does.
			mem := NewPolicyAgent("m", pol, vocab, ByteTokenizer{}, opts)
			if c := act(mem, 7, 3); strings.Join(a, "\x00") != strings.Join(c, "\x00") {
				t.Errorf("loaded %q, in memory %q: want the same answers", a, c)
			}
		})
	}
	// A batch is reproducible for a seed and answers every state.
	f0 := NewPolicyAgent("m", pol, vocab, ByteTokenizer{}, opts)
	states := []string{"Task: a", "Task: bb", "Task: ccc"}
	b1, u1, err := f0.ActBatch(ctx, states, 9)
	if err != nil {
		t.Fatal(err)
	}
	b2, _, _ := f0.ActBatch(ctx, states, 9)
	if len(b1) != 3 || len(u1) != 3 || strings.Join(b1, "\x00") != strings.Join(b2, "\x00") {
		t.Errorf("batch of 3 twice with seed 9: got %q then %q, want 3 equal answers", b1, b2)
	}
	// Different seeds (or steps) sample differently at temperature 1.
	f := NewPolicyAgent("m", pol, vocab, ByteTokenizer{}, opts)
	seen := map[string]bool{}
	for seed := range int64(6) {
		for _, s := range act(f, seed, 2) {
			seen[s] = true
		}
	}
	if len(seen) < 2 {
		t.Errorf("12 sampled answers gave %d distinct texts: want seeds to matter", len(seen))
	}
}

func TestLoadAgentErrors(t *testing.T) {
	ctx := context.Background()
	st, _, _ := agentCheckpoints(t)
	tests := []struct {
		name, dir string
		opts      AgentOptions
		want      string
	}{
		{"no checkpoint", "checkpoints/none", DefaultAgentOptions(), "run `mlerl train sft`"},
		{"no tokens", "checkpoints/sft", AgentOptions{}, "max_new_tokens"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadAgent(ctx, st, tc.dir, "x", compute.MustNew(), tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// BenchmarkPolicyAgentAct: answers of the demo model (vocab 4k, a
// 300-token prompt, up to 160 new tokens) on the current backend, one at
// a time and 8 in a batch.
func BenchmarkPolicyAgentAct(b *testing.B) {
	for _, batch := range []int{1, 8} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) { benchAct(b, batch) })
	}
}

func benchAct(b *testing.B, batch int) {
	ids := make([]int, 4096)
	for i := range ids {
		ids[i] = i
	}
	vocab := NewVocab(ids)
	cfg := DemoModelConfig()
	cfg.Vocab = vocab.Size()
	backend, err := NewBackend()
	if err != nil {
		b.Fatal(err)
	}
	pol, err := NewPolicy(backend, cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	f := NewPolicyAgent("demo", pol, vocab, ByteTokenizer{}, DefaultAgentOptions())
	obs := agents.Observation{Compact: strings.Repeat("state ", 50)}
	states := make([]string, batch)
	for i := range states {
		states[i] = obs.Compact
	}
	if _, _, err := f.ActBatch(context.Background(), states, 0); err != nil { // compiles the graphs
		b.Fatal(err)
	}
	b.ResetTimer()
	tokens := 0
	for i := range b.N {
		_, us, err := f.ActBatch(context.Background(), states, uint64(i))
		if err != nil {
			b.Fatal(err)
		}
		for _, u := range us {
			tokens += int(u.CompletionTokens)
		}
	}
	b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
}
