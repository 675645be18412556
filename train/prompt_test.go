package train

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/schemas"
)

// recordingEngine records the prompts its decoders are prefilled with.
type recordingEngine struct {
	policy.Engine
	prompts *[][]int32
}

func (e recordingEngine) NewDecoder(rows int) (policy.Decoder, error) {
	d, err := e.Engine.NewDecoder(rows)
	return recordingDecoder{Decoder: d, prompts: e.prompts}, err
}

type recordingDecoder struct {
	policy.Decoder
	prompts *[][]int32
}

func (d recordingDecoder) Prefill(ps [][]int32) ([]float32, error) {
	*d.prompts = append(*d.prompts, ps...)
	return d.Decoder.Prefill(ps)
}

// TestSamePromptTokensEverywhere: a state reads as the same tokens in SFT,
// in PPO's sampling (and hence its loss, which packs the sampled prompt)
// and in evaluation, also when the prompt must lose history lines to fit.
func TestSamePromptTokensEverywhere(t *testing.T) {
	best := 0.9
	st := agents.State{TaskID: "wine", Title: "Wine", Metric: "accuracy", Direction: "higher", MInit: 0.7, Current: 0.8, Best: &best,
		Plan: []string{"Scale the features"}, Script: strings.Repeat("# === model ===\nmodel = 1\n# === end model ===\n", 3), MaxSteps: 15, Step: 12}
	for i := range 12 {
		m := 0.7 + float64(i)/100
		st.History = append(st.History, agents.Step{ActionName: "Execute Script", Outcome: "success", MetricAfter: &m, Observation: "ran"})
	}
	prompt := agents.Compact(st, 4000, agents.ApproxCounter)
	tok := policy.ByteTokenizer{}
	vocab := policy.BuildVocab(tok, []string{prompt}, 1)
	cfg := policy.Config{Vocab: vocab.Size(), DModel: 16, Heads: 2, Layers: 1, Ctx: 580, PromptTokens: 540, ResponseTokens: 39}
	if len(prompt) <= cfg.PromptTokens {
		t.Fatalf("the test prompt (%d tokens) must need fitting", len(prompt))
	}
	eng, err := policy.NewEngine(policy.EngineNative, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	var seen [][]int32
	rec := recordingEngine{Engine: eng, prompts: &seen}

	ex, err := encodeExample(policy.NewMLERL(cfg, vocab, tok), prompt, "Action: List Files")
	if err != nil {
		t.Fatal(err)
	}
	sftPrompt := ex.Tokens[:ex.Response]

	run := &ppoRun{cfg: PPOConfig{GenBatch: 1, GroupSize: 1, Temperature: 1, TopP: 1, MaxNewTokens: 4}, states: []schemas.RLState{{StateID: "s", Prompt: prompt}},
		policy: rec, pol: policy.NewMLERL(cfg, vocab, tok), rng: rand.New(rand.NewPCG(1, 1))}
	samples, err := run.generate(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	ppoPrompt := samples[0].Samples[0].Prompt

	agent, err := policy.NewPolicyAgent("sft", policy.Generator{Engine: rec, Policy: policy.NewMLERL(cfg, vocab, tok)}, policy.AgentOptions{MaxNewTokens: 4, Decode: policy.DecodeFree})
	if err != nil {
		t.Fatal(err)
	}
	seen = nil
	if _, _, err := agent.ActBatch(context.Background(), []agents.Observation{{Compact: prompt, State: st}}, nil, 1); err != nil {
		t.Fatal(err)
	}
	evalPrompt := seen[0]

	if !slices.Equal(sftPrompt, ppoPrompt) || !slices.Equal(sftPrompt, evalPrompt) {
		t.Fatalf("prompt tokens differ: sft %d, ppo %d, evaluation %d tokens", len(sftPrompt), len(ppoPrompt), len(evalPrompt))
	}
	text := vocab.Decode(tok, sftPrompt)
	for _, keep := range []string{"Task: Wine (wine)", "Score: initial 0.7000", "Plan:\n1. Scale the features", "12. Execute Script", "Answer with Reflection"} {
		if !strings.Contains(text, keep) {
			t.Errorf("the fitted prompt lost %q:\n%s", keep, text)
		}
	}
	if !strings.Contains(text, "earlier steps not shown") || len(sftPrompt) > 1+cfg.PromptTokens || sftPrompt[0] != policy.BosID {
		t.Errorf("fitted prompt: %d tokens (budget %d), BOS first %v, marker shown %v:\n%s", len(sftPrompt), cfg.PromptTokens, sftPrompt[0] == policy.BosID, strings.Contains(text, "earlier steps"), text)
	}
}
