package train

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"

	"github.com/gomlx/compute"

	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/internal/llm"
	"github.com/mlerl/mlerl/internal/store"
)

// The trained policy as an agent (evaluation): it reads the compact
// rendering of the state (agents.Observation.Compact, the text that the
// sft_examples prompts and rl_states hold), encodes it exactly as SFT and
// PPO do ([BOS] prompt) and samples the action with [Policy.Generate].

// AgentOptions control how a [PolicyAgent] samples.
type AgentOptions struct {
	// Temperature 0 is greedy decoding.
	Temperature float64
	TopP        float64
	// MaxNewTokens bounds one answer (PPO's max_new_tokens: 160).
	MaxNewTokens int
}

// DefaultAgentOptions samples as PPO does by default: temperature 1, top-p
// 1, 160 new tokens.
func DefaultAgentOptions() AgentOptions {
	return AgentOptions{Temperature: 1, TopP: 1, MaxNewTokens: 160}
}

// PolicyAgent is a checkpointed policy as an agents.Factory. One policy is
// shared by every episode; generation is serialised (one prompt at a time),
// so an episode's actions depend only on its seed, its step and what it
// saw, never on which other episodes run at the same time.
type PolicyAgent struct {
	name   string
	policy *Policy
	vocab  *Vocab
	tok    Tokenizer
	opts   AgentOptions
	mu     sync.Mutex
	// Source is the checkpoint folder the policy was read from (its URI).
	Source string
}

// LoadAgent reads the latest checkpoint in dir (a folder of the store st
// such as "checkpoints/sft", as `mlerl train sft|ppo` writes it) as an
// agent named name. The tokenizer is the one the policy was trained with:
// the SFT config's `tokenizer`, found through a PPO config's `sft` folder.
func LoadAgent(ctx context.Context, st store.Store, dir, name string, backend compute.Backend, opts AgentOptions) (*PolicyAgent, error) {
	if opts.MaxNewTokens < 1 {
		return nil, fmt.Errorf("agent %s: max_new_tokens must be at least 1", name)
	}
	sub, err := LatestCheckpoint(ctx, st, dir)
	if err != nil {
		return nil, err
	}
	if sub == "" {
		return nil, fmt.Errorf("agent %s: no checkpoint in %s (run `mlerl train sft` / `mlerl train ppo` first)", name, st.URI(dir))
	}
	var cfg map[string]any
	p, ck, err := LoadCheckpoint(ctx, st, sub, backend, LoadOptions{WeightsOnly: true}, &cfg, nil)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", name, err)
	}
	tokName, err := checkpointTokenizer(ctx, st, sub, cfg)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", name, err)
	}
	tok, err := OpenTokenizer(tokName)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", name, err)
	}
	return &PolicyAgent{name: name, policy: p, vocab: ck.Vocab, tok: tok, opts: opts, Source: st.URI(sub)}, nil
}

// checkpointTokenizer finds the tokenizer name of a checkpoint: an SFT
// config has it; a PPO config names its SFT folder, whose latest config
// has it.
func checkpointTokenizer(ctx context.Context, st store.Store, sub string, cfg map[string]any) (string, error) {
	for range 3 { // PPO -> SFT, at most a short chain
		if t, ok := cfg["Tokenizer"].(string); ok && t != "" {
			return t, nil
		}
		if t, ok := cfg["tokenizer"].(string); ok && t != "" {
			return t, nil
		}
		sft, _ := cfg["SFT"].(string)
		if sft == "" {
			sft, _ = cfg["sft"].(string)
		}
		if sft == "" {
			break
		}
		next, err := LatestCheckpoint(ctx, st, sft)
		if err != nil || next == "" {
			return "", fmt.Errorf("checkpoint %s: its SFT folder %s has no checkpoint to take the tokenizer from (%v)", st.URI(sub), st.URI(sft), err)
		}
		b, err := store.ReadAll(ctx, st, next+"/config.json")
		if err != nil {
			return "", err
		}
		cfg = nil
		if err := json.Unmarshal(b, &cfg); err != nil {
			return "", fmt.Errorf("checkpoint %s: config.json: %w", st.URI(next), err)
		}
		sub = next
	}
	return "", fmt.Errorf("checkpoint %s: its config.json names no tokenizer", st.URI(sub))
}

// NewPolicyAgent wraps a policy already in memory (tests, the trainer).
func NewPolicyAgent(name string, p *Policy, v *Vocab, tok Tokenizer, opts AgentOptions) *PolicyAgent {
	return &PolicyAgent{name: name, policy: p, vocab: v, tok: tok, opts: opts}
}

// Name implements agents.Factory.
func (a *PolicyAgent) Name() string { return a.name }

// Params is the policy's parameter count.
func (a *PolicyAgent) Params() int { return a.policy.NumParams() }

// Episode implements agents.Factory. The plan is not used: the compact
// state the policy reads already shows it.
func (a *PolicyAgent) Episode(plan []string, seed int64) agents.Agent {
	return &policyEpisode{a: a, seed: seed}
}

type policyEpisode struct {
	a    *PolicyAgent
	seed int64
	step int
}

// Act samples one answer for the compact state. The generation seed is
// derived from the episode seed and the step number.
func (e *policyEpisode) Act(ctx context.Context, obs agents.Observation) (string, llm.Usage, error) {
	e.step++
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d", e.seed, e.step)
	texts, usage, err := e.a.ActBatch(ctx, []string{obs.Compact}, h.Sum64())
	if err != nil {
		return "", llm.Usage{}, err
	}
	return texts[0], usage[0], nil
}

// ActBatch samples one answer for each compact state in one batched
// generation (much cheaper per answer than one at a time). The answers
// depend on the seed and on the whole batch, in order: callers that want
// reproducible answers must form the same batches (see evaluate's
// lockstep episodes).
func (a *PolicyAgent) ActBatch(ctx context.Context, states []string, seed uint64) ([]string, []llm.Usage, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	prompts := make([][]int32, len(states))
	for i, s := range states {
		prompts[i] = append([]int32{BosID}, a.vocab.Encode(a.tok, s)...)
	}
	opts := GenerateOptions{Temperature: a.opts.Temperature, TopP: a.opts.TopP, MaxNewTokens: a.opts.MaxNewTokens, Seed: seed}
	a.mu.Lock()
	samples, err := a.policy.Generate(prompts, opts)
	a.mu.Unlock()
	if err != nil {
		return nil, nil, fmt.Errorf("policy %s: %w", a.name, err)
	}
	texts := make([]string, len(samples))
	usage := make([]llm.Usage, len(samples))
	for i, s := range samples {
		act := s.Tokens
		if len(act) > 0 && act[len(act)-1] == EosID {
			act = act[:len(act)-1]
		}
		texts[i] = strings.TrimSpace(a.vocab.Decode(a.tok, act))
		usage[i] = llm.Usage{PromptTokens: int64(len(s.Prompt)), CompletionTokens: int64(len(s.Tokens))}
	}
	return texts, usage, nil
}
