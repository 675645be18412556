package agents

import (
	"context"
	"strings"

	"github.com/mlerl/mlerl/internal/llm"
)

// LLM is an expert behind an OpenAI-compatible chat-completions endpoint.
// Each step it reads the full MLAgentBench-style prompt (task description,
// the actions, the plan, recent history within the token budget) and
// answers in the Reflection / Thought / Action / Action Input format; the
// environment's strict parser judges the answer.
type LLM struct {
	Client      *llm.Client
	Temperature float64
	MaxTokens   int
}

// Name implements Factory.
func (l LLM) Name() string { return "llm:" + l.Client.Model() }

// Episode implements Factory.
func (l LLM) Episode(plan []string, seed int64) Agent {
	return &llmAgent{l: l, seed: seed}
}

type llmAgent struct {
	l    LLM
	seed int64
}

const systemPrompt = "You are an expert machine-learning engineer improving a training script step by step. " +
	"Answer with exactly the fields Reflection, Thought, Action and Action Input, and nothing else."

func (a *llmAgent) Act(ctx context.Context, obs Observation) (string, llm.Usage, error) {
	t := a.l.Temperature
	seed := a.seed + int64(obs.State.Step)
	maxTok := a.l.MaxTokens
	if maxTok == 0 {
		maxTok = 1024
	}
	resp, err := a.l.Client.Chat(ctx, llm.ChatRequest{
		Messages:    []llm.Message{{Role: "system", Content: systemPrompt}, {Role: "user", Content: obs.Full}},
		Temperature: &t, MaxTokens: maxTok, Seed: &seed,
		// Stop before the model invents the observation.
		Stop: []string{"\nObservation:"},
	})
	if err != nil {
		return "", llm.Usage{}, err
	}
	return strings.TrimSpace(resp.Content), resp.Usage, nil
}
