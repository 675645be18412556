package policy

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlerl/mlerl/policy/gguf"
)

// TestLlamaCppMixes opens llama.cpp's quantization mixes of
// SmolLM2-135M-Instruct, and one of them cut into shards (opt-in:
// MLERL_GGUF_MIXES names, as an absolute path, the folder
// scripts/gguf_mixes.sh writes them to), on the native engine the way
// `mlerl generate` does: base storage auto (a mix's Q8_0 and Q4_0
// matrices kept in their blocks, Q5_0 and IQ4_NL as Q8_0 blocks, the
// rest dequantized) and fp32. It checks each against
// policy/gguf/testdata/mixes.json (transformers on the same file): the
// file's bytes, its tensor types, the chat-rendered prompt and the
// greedy answer, token for token.
func TestLlamaCppMixes(t *testing.T) {
	dir := os.Getenv("MLERL_GGUF_MIXES")
	if dir == "" {
		t.Skip("MLERL_GGUF_MIXES not set (scripts/gguf_mixes.sh sets it)")
	}
	raw, err := os.ReadFile(ggufTestdata("mixes.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Files map[string]struct {
			SHA256         string
			Types          map[string]int
			Prompt, Greedy []int32
			Text           string
		}
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Files) == 0 {
		t.Fatal("mixes.json lists no file")
	}
	for _, name := range slices.Sorted(maps.Keys(ref.Files)) {
		want := ref.Files[name]
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			if got, err := fileSHA256(path); err != nil || got != want.SHA256 {
				t.Fatalf("%s has sha256 %s (%v), mixes.json's was made from %s: run scripts/gguf_mixes.sh again", path, got, err, want.SHA256)
			}
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			types := map[string]int{}
			for _, ti := range f.Tensors {
				types[ti.Type.String()]++
			}
			f.Close()
			if !maps.Equal(types, want.Types) {
				t.Errorf("tensor types %v, gguf's reader %v", types, want.Types)
			}
			storage, err := ResolveBaseStorage(MatmulAuto, "gguf:"+path)
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range []string{storage, MatmulFP32} {
				p, err := OpenGGUF(path, Config{Ctx: 256, PromptTokens: 128, ResponseTokens: 32}, DefaultTuning(), "")
				if err != nil {
					t.Fatal(err)
				}
				p.Model.LoRA = nil
				p.ForInference(EngineNative)
				p.Model.BaseStorage = st // ForInference picks quant for a file with blocks
				e, err := p.NewEngine(EngineNative, 0, nil)
				if err != nil {
					p.Close()
					t.Fatal(err)
				}
				prompt, err := p.UserTurn("What is the capital of France?")
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(prompt, want.Prompt) {
					t.Errorf("%s: chat-rendered prompt %v, transformers' %v", st, prompt, want.Prompt)
				}
				out, err := Generator{Engine: e, Policy: p}.Generate([][]int32{prompt}, GenerateOptions{MaxNewTokens: len(want.Greedy)})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(out[0].Tokens, want.Greedy) {
					t.Errorf("%s: greedy answer %v (%q), transformers' %v (%q)", st, out[0].Tokens, p.Decode(out[0].Tokens), want.Greedy, want.Text)
				} else {
					m := e.(*nativeEngine).m
					bytes := m.BaseBytes() // a base that is not frozen is float32 weights
					if bytes == 0 {
						bytes = 4 * m.NumParams()
					}
					t.Logf("%s (%s, base %.1f MB): %q, transformers' tokens", st, m.BaseStorage(), float64(bytes)/1e6, p.Decode(out[0].Tokens))
				}
				p.Close()
			}
		})
	}
}
