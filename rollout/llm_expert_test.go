package rollout

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mlerl/mlerl/env"
)

// TestLLMExpertEndToEnd rolls out the LLM expert against an httptest server
// speaking the chat-completions API. The fake model reads the prompt it is
// sent and answers like a (terse) engineer: apply the first plan idea, run
// the script, then give the final answer; its first answer is malformed, as
// real models' sometimes are.
func TestLLMExpertEndToEnd(t *testing.T) {
	root := t.TempDir()
	setupData(t, root)
	var calls, sawPlan atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		var req struct {
			Model    string `json:"model"`
			Messages []struct{ Role, Content string }
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) != 2 {
			http.Error(w, "bad request", 400)
			return
		}
		p := req.Messages[1].Content
		if !strings.Contains(p, "Research Problem") || !strings.Contains(p, "Edit Script (AI)") {
			t.Errorf("the prompt lacks the task or the tools:\n%s", p)
		}
		n := calls.Add(1)
		// The plan's first idea, as the prompt lists it.
		idea := ""
		if i := strings.Index(p, "\n1. "); i >= 0 {
			idea = strings.SplitN(p[i+4:], "\n", 2)[0]
			sawPlan.Add(1)
		}
		steps := strings.Count(p, "\nStep ")
		var answer string
		switch {
		case n == 1:
			answer = "Thought: I will run it.\nAction: Execute Script"
		case steps <= 1:
			answer = env.Render(env.Action{Reflection: "Start.", Thought: "Apply the first idea.", Name: env.EditScriptAI, ScriptName: "train.py", EditInstruction: idea, SaveName: "train.py"})
		case steps == 2:
			answer = env.Render(env.Action{Reflection: "Edited.", Thought: "Measure it.", Name: env.ExecuteScript, ScriptName: "train.py"})
		default:
			answer = env.Render(env.Action{Reflection: "Done.", Thought: "Submit.", Name: env.FinalAnswer, Answer: "done"})
		}
		json.NewEncoder(w).Encode(map[string]any{
			"id": "c", "object": "chat.completion", "model": req.Model,
			"choices": []map[string]any{{"index": 0, "message": map[string]string{"role": "assistant", "content": answer}, "finish_reason": "stop"}},
			"usage":   map[string]int{"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050},
		})
	}))
	defer srv.Close()

	cfg := testConfig(root)
	cfg.PerTask, cfg.Workers = 2, 1
	cfg.Expert = "llm"
	cfg.LLM.BaseURL, cfg.LLM.Model = srv.URL+"/v1", "fake-expert"
	cfg.LLM.PromptPrice, cfg.LLM.CompletionPrice = 1, 2
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	trajs, steps := readRows(t, root)
	if len(trajs) != 2 {
		t.Fatalf("got %d trajectories, want 2", len(trajs))
	}
	outcomes := map[string]int{}
	for _, s := range steps {
		outcomes[s.Outcome]++
		if s.PromptTokens < 1000 || s.CostUSD <= 0 {
			t.Errorf("step %s/%d: tokens %d cost %v, want the endpoint's usage accounted", s.TrajectoryID, s.StepIndex, s.PromptTokens, s.CostUSD)
		}
	}
	for _, tr := range trajs {
		if tr.Expert != "llm:fake-expert" || tr.Tokens == 0 || tr.CostUSD <= 0 || tr.EndReason != env.DoneFinalAnswer {
			t.Errorf("trajectory %+v: want expert llm:fake-expert, tokens and cost, ended by its final answer", tr)
		}
	}
	if outcomes[string(env.OutcomeFormatError)] != 1 || outcomes[string(env.OutcomeSuccess)] < 4 {
		t.Errorf("outcomes %v: want the one malformed answer and the rest carried out", outcomes)
	}
	if sawPlan.Load() == 0 {
		t.Error("the prompts never listed the plan")
	}
}
