package policy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlerl/mlerl/policy/hf"
)

// TestSmolLM2GreedyMatchesTransformers opens the Hugging Face folder that
// transformers makes from SmolLM2-135M-Instruct's GGUF
// (scripts/smollm2_hf.py, issue 58) as a policy when MLERL_SMOLLM2_HF
// names it (skipped otherwise), encodes each conversation its SOURCE.json
// records with the folder's chat format and tokenizer, and decodes 16
// tokens greedily on the native engine (float32 base): the tokens must be
// transformers' generate(do_sample=False) on the same folder ("What is the
// capital of France?" gives "The capital of France is Paris.").
func TestSmolLM2GreedyMatchesTransformers(t *testing.T) {
	dir := os.Getenv("MLERL_SMOLLM2_HF")
	if dir == "" {
		t.Skip("set MLERL_SMOLLM2_HF to the folder scripts/smollm2_hf.py writes (e.g. .deps/smollm2-hf)")
	}
	tu := DefaultTuning()
	tu.BaseStorage = MatmulFP32
	p, err := OpenHF(dir, Config{Ctx: 256, PromptTokens: 200, ResponseTokens: 16}, tu, "")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	e, err := p.NewEngine(EngineNative, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "SOURCE.json"))
	if err != nil {
		t.Fatal(err)
	}
	var src struct {
		Reference []struct {
			Messages   []hf.Message `json:"messages"`
			PromptIDs  []int        `json:"prompt_ids"`
			GreedyIDs  []int32      `json:"greedy_ids"`
			GreedyText string       `json:"greedy_text"`
		} `json:"reference"`
	}
	if err := json.Unmarshal(b, &src); err != nil || len(src.Reference) == 0 {
		t.Fatalf("SOURCE.json has no reference conversations (%v): rerun scripts/smollm2_hf.py", err)
	}
	for i, r := range src.Reference {
		ids, err := p.hf.EncodeChat(r.Messages, true)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids, r.PromptIDs) {
			t.Fatalf("conversation %d: the prompt's ids differ from apply_chat_template's", i)
		}
		prompt := make([]int32, len(ids))
		for k, id := range ids {
			prompt[k] = int32(id)
		}
		s, err := Generator{Engine: e, Policy: p}.Generate([][]int32{prompt}, GenerateOptions{Temperature: 0, MaxNewTokens: len(r.GreedyIDs)})
		if err != nil {
			t.Fatal(err)
		}
		if got := s[0].Tokens; !slices.Equal(got, r.GreedyIDs) {
			t.Errorf("conversation %d: greedy tokens %v (%q), transformers' %v (%q)", i, got, p.Decode(got), r.GreedyIDs, r.GreedyText)
		}
	}
}
