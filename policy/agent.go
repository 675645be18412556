package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"

	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/internal/llm"
	"github.com/mlerl/mlerl/internal/store"
)

// The trained policy as an agent (evaluation): it reads the compact
// rendering of the state (agents.Observation.Compact, the text that the
// sft_examples prompts and rl_states hold), encodes it exactly as SFT and
// PPO do (EncodePrompt) and samples the action.

// AgentOptions control how a [PolicyAgent] samples.
type AgentOptions struct {
	// Temperature 0 is greedy decoding.
	Temperature float64
	TopP        float64
	// MaxNewTokens bounds one answer (0: the model's response_tokens).
	MaxNewTokens int
	// Decode is DecodeConstrained (the action grammar) or DecodeFree.
	Decode string
	// Terse: the policy was trained on terse responses (Action Input on one
	// line), so the grammar asks for that form; LoadAgent reads it from
	// the SFT config. DashThoughts fixes Reflection and Thought to "-" (a
	// policy that PPO trained with free_text force; LoadAgent reads it
	// from the PPO config).
	Terse, DashThoughts bool
	// Checkpoint is which of the folder's checkpoints LoadAgent reads:
	// CheckpointSelected (or "": the one the run selected by its rule,
	// else the latest) or CheckpointLast.
	Checkpoint string
	// Activations is how the native engine multiplies a base kept in
	// quantized blocks: ActivationsFP32 ("" too) or ActivationsInt8
	// (Config.QuantActivations).
	Activations string
}

// Decoding modes.
const (
	DecodeConstrained = "constrained"
	DecodeFree        = "free"
)

// Response styles of SFT targets.
const (
	ResponseFull  = "full"
	ResponseTerse = "terse"
)

// PolicyAgent is a checkpointed policy as an agents.Factory. One engine is
// shared by every episode; generation is serialised, so an episode's
// actions depend only on its seed, its step and what it saw, never on
// which other episodes run at the same time.
type PolicyAgent struct {
	name string
	gen  Generator
	opts AgentOptions
	mu   sync.Mutex
	// Source is the checkpoint folder the policy was read from (its URI).
	Source string
}

// LoadAgent reads a checkpoint in dir (a folder of the store st such as
// "checkpoints/sft", as `mlerl train sft|ppo` writes it; the one
// opts.Checkpoint names, by default the selected one) as an
// agent named name, running on the named engine. The policy is the one
// the checkpoint was trained as (OpenTrained).
func LoadAgent(ctx context.Context, st store.Store, dir, name, engine string, opts AgentOptions) (*PolicyAgent, error) {
	if opts.MaxNewTokens < 0 {
		return nil, fmt.Errorf("agent %s: max_new_tokens %d must not be negative", name, opts.MaxNewTokens)
	}
	tr, err := OpenTrained(ctx, st, dir, opts.Checkpoint)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", name, err)
	}
	tr.Policy.ForInference(engine)
	tr.Policy.Model.QuantActivations = quantActivations(tr.Policy, opts.Activations)
	eng, err := tr.Engine(engine)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", name, err)
	}
	opts.Terse, opts.DashThoughts = tr.Terse, tr.DashThoughts
	a, err := NewPolicyAgent(name, Generator{Engine: eng, Policy: tr.Policy}, opts)
	if err != nil {
		return nil, err
	}
	a.Source = tr.Source
	return a, nil
}

// OpenAgent is the pretrained policy spec names (OpenSpec: a Hugging
// Face folder hf:DIR or a GGUF file gguf:FILE), with the PEFT adapter in the folder adapter when
// not empty, as an agent named name on the named engine: a model
// fine-tuned elsewhere (LLaMA-Factory, TRL), or the base itself prompted
// as it is. budgets are the prompt and response budgets of its prompts.
func OpenAgent(name, spec, adapter string, budgets Config, engine string, opts AgentOptions) (*PolicyAgent, error) {
	if opts.MaxNewTokens < 0 {
		return nil, fmt.Errorf("agent %s: max_new_tokens %d must not be negative", name, opts.MaxNewTokens)
	}
	tu := DefaultTuning()
	tu.BaseStorage = MatmulFP32 // ForInference sets the storage, below: nothing to resolve
	pol, err := OpenSpec(spec, budgets, tu, adapter)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", name, err)
	}
	if adapter == "" {
		pol.Model.LoRA = nil // the base as it is: no adapters to add
	}
	pol.ForInference(engine)
	pol.Model.QuantActivations = quantActivations(pol, opts.Activations)
	eng, err := pol.NewEngine(engine, 0, nil)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", name, err)
	}
	a, err := NewPolicyAgent(name, Generator{Engine: eng, Policy: pol}, opts)
	if err != nil {
		return nil, err
	}
	a.Source = pol.SpecOf()
	if adapter != "" {
		a.Source += " + adapter " + pol.Source.Adapter
	}
	return a, nil
}

// quantActivations is Config.QuantActivations for a policy that only
// generates, asked mode: int8 where its base is kept in quantized blocks,
// else nothing (float32 products).
func quantActivations(p *Policy, mode string) string {
	if mode == ActivationsInt8 && QuantizedStorage(p.Model.BaseStorage) {
		return ActivationsInt8
	}
	return ""
}

// ForInference sets how a policy that only generates on the named engine
// stores its weights: on the native engine a GGUF file's quantized
// blocks as they are (quant: decoding multiplies by them, reading a
// fraction of float32's bytes per token), else (and on GoMLX, which
// keeps no blocks) a float32 base (decoding reads float32 weights; a
// bf16 base would be widened at every prefill); no recomputation, no
// dropout.
func (p *Policy) ForInference(engine string) {
	if p.Kind() != KindHF {
		return
	}
	storage := MatmulFP32
	if p.Source.Kind == KindGGUF && engine != EngineGoMLX {
		if q, err := QuantizedGGUF(p.Source.Base); err == nil && q {
			storage = StorageQuant
		}
	}
	p.Model.BaseStorage, p.Model.Recompute = storage, false
	if p.Model.LoRA != nil {
		lo := *p.Model.LoRA
		lo.Dropout = 0
		p.Model.LoRA = &lo
	}
}

// sftSetting finds a setting of the SFT run behind a checkpoint (its
// tokenizer, its response style): an SFT config has it; a PPO config
// names its SFT folder, whose latest config has it.
func sftSetting(ctx context.Context, st store.Store, sub string, cfg map[string]any, key string) (string, error) {
	for range 3 { // PPO -> SFT, at most a short chain
		// config.json holds the stage config with Go field names
		// ("Tokenizer"); older or hand-written ones may use the YAML key.
		for _, k := range []string{key, strings.ToUpper(key[:1]) + key[1:]} {
			if t, ok := cfg[k].(string); ok && t != "" {
				return t, nil
			}
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
	return "", fmt.Errorf("checkpoint %s: its config.json has no %s", st.URI(sub), key)
}

// NewPolicyAgent wraps a policy already in memory (tests, the trainer).
func NewPolicyAgent(name string, gen Generator, opts AgentOptions) (*PolicyAgent, error) {
	if opts.Decode == "" {
		opts.Decode = DecodeConstrained
	}
	if opts.Decode != DecodeConstrained && opts.Decode != DecodeFree {
		return nil, fmt.Errorf("agent %s: decode %q: want %s or %s", name, opts.Decode, DecodeConstrained, DecodeFree)
	}
	return &PolicyAgent{name: name, gen: gen, opts: opts}, nil
}

// Name implements agents.Factory.
func (a *PolicyAgent) Name() string { return a.name }

// Params is the policy's parameter count.
func (a *PolicyAgent) Params() int { return a.gen.Engine.Config().NumParams() }

// Episode implements agents.Factory. The plan's ideas are what an Edit
// Script (AI) instruction may say under constrained decoding.
func (a *PolicyAgent) Episode(plan []string, seed int64) agents.Agent {
	return &policyEpisode{a: a, seed: seed, plan: plan}
}

type policyEpisode struct {
	a    *PolicyAgent
	seed int64
	plan []string
	step int
}

// Act samples one answer for the compact state. The generation seed is
// derived from the episode seed and the step number.
func (e *policyEpisode) Act(ctx context.Context, obs agents.Observation) (string, llm.Usage, error) {
	e.step++
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d", e.seed, e.step)
	texts, usage, err := e.a.ActBatch(ctx, []agents.Observation{obs}, [][]string{e.plan}, h.Sum64())
	if err != nil {
		return "", llm.Usage{}, err
	}
	return texts[0], usage[0], nil
}

// ActBatch samples one answer for each observation in one batched
// generation (much cheaper per answer than one at a time); plans[i] is
// observation i's action plan. The answers depend on the seed and on the
// whole batch, in order: callers that want reproducible answers must
// form the same batches (see evaluate's lockstep episodes).
func (a *PolicyAgent) ActBatch(ctx context.Context, obs []agents.Observation, plans [][]string, seed uint64) ([]string, []llm.Usage, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	prompts := make([][]int32, len(obs))
	for i, o := range obs {
		p, err := a.gen.Policy.EncodePrompt(o.Compact)
		if err != nil {
			return nil, nil, fmt.Errorf("policy %s: %w", a.name, err)
		}
		prompts[i] = p
	}
	opts := GenerateOptions{Temperature: a.opts.Temperature, TopP: a.opts.TopP, MaxNewTokens: a.opts.MaxNewTokens, Seed: seed}
	if a.opts.Decode == DecodeConstrained {
		opts.Constrain = func(i int) Constraint {
			var plan []string
			if i < len(plans) {
				plan = plans[i]
			}
			gc := NewGrammarContext(obs[i].State, plan, a.opts.Terse)
			gc.DashThoughts = a.opts.DashThoughts
			return a.gen.ActionGrammar(gc)
		}
	}
	a.mu.Lock()
	samples, err := a.gen.Generate(prompts, opts)
	a.mu.Unlock()
	if err != nil {
		return nil, nil, fmt.Errorf("policy %s: %w", a.name, err)
	}
	texts := make([]string, len(samples))
	usage := make([]llm.Usage, len(samples))
	for i, s := range samples {
		texts[i] = strings.TrimSpace(a.gen.Policy.Decode(s.Tokens))
		usage[i] = llm.Usage{PromptTokens: int64(len(s.Prompt)), CompletionTokens: int64(len(s.Tokens))}
	}
	return texts, usage, nil
}
