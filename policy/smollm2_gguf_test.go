package policy

import (
	"encoding/json"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestSmolLM2GGUF runs the real SmolLM2-135M-Instruct Q4_1 file (opt-in:
// MLERL_SMOLLM2_GGUF names it) as a policy on the native engine: the
// chat-rendered question gives transformers' ids, and greedy decoding
// gives transformers' generate(do_sample=False) continuation token for
// token (policy/gguf/testdata/smollm2.json, from scripts/gguf_reference.py
// smollm2). It logs the time to open the file and build the engine, the
// decoding speed and the process's peak memory.
func TestSmolLM2GGUF(t *testing.T) {
	path := os.Getenv("MLERL_SMOLLM2_GGUF")
	if path == "" {
		t.Skip("MLERL_SMOLLM2_GGUF not set")
	}
	raw, err := os.ReadFile(ggufTestdata("smollm2.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		IDs, Greedy []int32
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p, err := OpenGGUF(path, Config{Ctx: 1024, PromptTokens: 800, ResponseTokens: 160}, DefaultTuning(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	opened := time.Since(start)
	p.Model.LoRA = nil
	p.ForInference(EngineNative)
	start = time.Now()
	e, err := p.NewEngine(EngineNative, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	built := time.Since(start)
	prompt, err := p.UserTurn("What is the capital of France?")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(prompt, ref.IDs) {
		t.Fatalf("chat-rendered prompt %v, transformers' %v", prompt, ref.IDs)
	}
	start = time.Now()
	out, err := Generator{Engine: e, Policy: p}.Generate([][]int32{prompt}, GenerateOptions{MaxNewTokens: 24})
	if err != nil {
		t.Fatal(err)
	}
	gen := time.Since(start)
	if !slices.Equal(out[0].Tokens, ref.Greedy) {
		t.Errorf("greedy continuation %v (%q), transformers' %v", out[0].Tokens, p.Decode(out[0].Tokens), ref.Greedy)
	}
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	t.Logf("opened (read, checked, hashed) in %v, native engine built (every tensor dequantized) in %v; %d tokens in %v (%.1f tok/s, prefill included); answer %q; peak RSS %.2f GiB",
		opened.Round(time.Millisecond), built.Round(time.Millisecond), len(out[0].Tokens), gen.Round(time.Millisecond),
		float64(len(out[0].Tokens))/gen.Seconds(), p.Decode(out[0].Tokens), float64(ru.Maxrss)/(1<<20))
}
