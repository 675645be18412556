package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	"github.com/mlerl/mlerl/internal/deps"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/policy"
)

// generateRef is one case of policy/hf/testdata/ref/generate*.json
// (scripts/hf_reference.py generate): transformers' greedy generate() on
// a prompt rendered by apply_chat_template (chat) or taken raw.
type generateRef struct {
	Chat     bool    `json:"chat"`
	Prompt   string  `json:"prompt"`
	PromptID []int32 `json:"prompt_ids"`
	IDs      []int32 `json:"ids"`
	Text     string  `json:"text"`
	Gap      float64 `json:"min_top2_gap"`
}

func hfTestdataPath(parts ...string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(append([]string{filepath.Dir(file), "..", "..", "policy", "hf", "testdata"}, parts...)...)
}

// generateJSON runs `mlerl generate ... --json` and returns what it
// printed.
func generateJSON(t *testing.T, args ...string) generated {
	t.Helper()
	out, err := run(t, append([]string{"generate", "--json"}, args...)...)
	if err != nil {
		t.Fatalf("mlerl generate %s: %v", strings.Join(args, " "), err)
	}
	var g generated
	if err := json.Unmarshal([]byte(out), &g); err != nil {
		t.Fatalf("--json printed %q: %v", out, err)
	}
	return g
}

// checkGenerated compares a generation with transformers'.
func checkGenerated(t *testing.T, g generated, ref generateRef) {
	t.Helper()
	if !slices.Equal(g.Prompt, ref.PromptID) {
		t.Fatalf("prompt ids differ from transformers' (apply_chat_template %v):\n got  %v\n want %v", ref.Chat, g.Prompt, ref.PromptID)
	}
	if !slices.Equal(g.IDs, ref.IDs) {
		t.Errorf("greedy ids differ from transformers' generate(do_sample=False) (smallest top-2 gap %.3g):\n got  %v\n want %v", ref.Gap, g.IDs, ref.IDs)
	}
	// transformers' text where it is valid UTF-8 (random tiny models
	// split characters, which Python and Go replace differently).
	if !strings.ContainsRune(ref.Text, '\uFFFD') && g.Text != ref.Text {
		t.Errorf("text got %q, want transformers' %q", g.Text, ref.Text)
	}
}

// TestGenerateMatchesTransformers: `mlerl generate --temperature 0` on
// each tiny checkpoint folder gives transformers' greedy generate()
// token for token, from a chat-rendered user turn (SmolLM2's template
// with its default system prompt, Llama 3.1's, Qwen2.5's, Qwen3's) and
// from raw text; it stops where transformers stops (Qwen3's <|im_end|>)
// and, like transformers, draws padding rows and control tokens too. The
// text mode streams the same answer.
func TestGenerateMatchesTransformers(t *testing.T) {
	var refs struct {
		MaxNew      int                      `json:"max_new_tokens"`
		Checkpoints map[string][]generateRef `json:"checkpoints"`
	}
	b, err := os.ReadFile(hfTestdataPath("ref", "generate.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &refs); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"llama", "llama3", "qwen2", "qwen3"} {
		for _, ref := range refs.Checkpoints[name] {
			mode := map[bool]string{true: "chat", false: "raw"}[ref.Chat]
			t.Run(name+"/"+mode, func(t *testing.T) {
				args := []string{"--policy", "hf:" + hfTestdataPath("ckpt", name), "--prompt", ref.Prompt,
					"--max_new_tokens", strconv.Itoa(refs.MaxNew), "--chat=" + strconv.FormatBool(ref.Chat)}
				g := generateJSON(t, args...)
				checkGenerated(t, g, ref)
				if g.Stopped != (len(ref.IDs) < refs.MaxNew) {
					t.Errorf("stopped %v after %d of %d tokens", g.Stopped, len(g.IDs), refs.MaxNew)
				}
				out, err := run(t, append([]string{"generate"}, args...)...)
				if err != nil {
					t.Fatal(err)
				}
				if want := g.Text + "\n"; perByteValid(out) != want {
					t.Errorf("streamed %q, --json's text is %q", out, want)
				}
			})
		}
	}
}

// TestGenerateRealModel: SmolLM2-135M-Instruct (`make real-model`) answers
// as transformers does with the same weights: greedy, token for token,
// its ChatML prompt with SmolLM2's default system prompt. It runs the
// forms of the model this machine has: the GGUF file (`make real-model`)
// on every case, and the Hugging Face folder transformers wrote from it
// ($MLERL_DEPS/smollm2-hf, scripts/smollm2_hf.py) on the first. Skipped
// without them.
func TestGenerateRealModel(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 135M-parameter model")
	}
	var refs struct {
		GGUF   string        `json:"gguf"`
		MaxNew int           `json:"max_new_tokens"`
		Cases  []generateRef `json:"cases"`
	}
	b, err := os.ReadFile(hfTestdataPath("ref", "generate-smollm2.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &refs); err != nil {
		t.Fatal(err)
	}
	var specs []string
	if w, err := deps.Find("smollm2-hf/model.safetensors"); err == nil {
		specs = append(specs, "hf:"+filepath.Dir(w))
	}
	if f, err := deps.Find(refs.GGUF); err == nil {
		specs = append(specs, "gguf:"+f)
	}
	if len(specs) == 0 {
		t.Skip("the real model is not in the dependency folder (make real-model)")
	}
	for _, spec := range specs {
		for i, ref := range refs.Cases {
			if strings.HasPrefix(spec, "hf:") && i > 0 {
				// The folder's first case shows it reads as the file does;
				// the rest would repeat the file's (a model load each).
				continue
			}
			t.Run(strings.SplitN(spec, ":", 2)[0]+"/"+strconv.Itoa(i), func(t *testing.T) {
				args := []string{"generate", "--json", "--policy", spec, "--prompt", ref.Prompt, "--max_new_tokens", strconv.Itoa(refs.MaxNew), "--chat=" + strconv.FormatBool(ref.Chat)}
				out, err := run(t, args...)
				if err != nil {
					t.Fatal(err)
				}
				var g generated
				if err := json.Unmarshal([]byte(out), &g); err != nil {
					t.Fatalf("--json printed %q: %v", out, err)
				}
				checkGenerated(t, g, ref)
			})
		}
	}
}

// TestGenerateCheckpoint: --checkpoint reads a checkpoint of mlerl train
// (here a Hugging Face policy's with fresh adapters, whose B is zero:
// the base's answer) from the data root, by its folder (the latest step)
// or one step folder.
func TestGenerateCheckpoint(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	st := store.NewLocal(root)
	tu := policy.DefaultTuning()
	tu.LoRA.Rank, tu.LoRA.Alpha, tu.BaseStorage = 4, 8, policy.MatmulFP32
	pol, err := policy.OpenHF(hfTestdataPath("ckpt", "llama"), policy.Config{Ctx: 480, PromptTokens: 400, ResponseTokens: 64}, tu, "")
	if err != nil {
		t.Fatal(err)
	}
	defer pol.Close()
	eng, err := pol.NewEngine(policy.EngineNative, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if err := policy.SaveCheckpoint(ctx, st, "checkpoints/sft", 7, eng, policy.Checkpoint{Config: map[string]any{"Response": "full"}, Policy: pol}); err != nil {
		t.Fatal(err)
	}
	var refs struct {
		Checkpoints map[string][]generateRef `json:"checkpoints"`
	}
	b, _ := os.ReadFile(hfTestdataPath("ref", "generate.json"))
	if err := json.Unmarshal(b, &refs); err != nil {
		t.Fatal(err)
	}
	ref := refs.Checkpoints["llama"][0]
	for _, dir := range []string{"checkpoints/sft", "checkpoints/sft/" + policy.StepFolder(7)} {
		g := generateJSON(t, "--data", root, "--checkpoint", dir, "--prompt", ref.Prompt, "--max_new_tokens", "20")
		checkGenerated(t, g, ref)
		if want := st.URI("checkpoints/sft/" + policy.StepFolder(7)); g.Model != want {
			t.Errorf("--checkpoint %s: model %q, want %q", dir, g.Model, want)
		}
	}
}

// TestGenerateRefusals: each bad flag or input is one line naming it,
// before any model is read.
func TestGenerateRefusals(t *testing.T) {
	llama := "hf:" + hfTestdataPath("ckpt", "llama")
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.txt")
	os.WriteFile(empty, nil, 0o644)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	long := filepath.Join(dir, "long.txt")
	os.WriteFile(long, []byte(strings.Repeat("model accuracy ", 400)), 0o644)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no model", []string{"--prompt", "hi"}, "generate: policy \"\": is empty: name the model (hf:DIR or gguf:FILE), or give checkpoint"},
		{"two models", []string{"--policy", llama, "--checkpoint", "checkpoints/sft", "--prompt", "hi"}, "--checkpoint \"checkpoints/sft\": names a model, and so does policy"},
		{"adapter without policy", []string{"--checkpoint", "checkpoints/sft", "--adapter", "a", "--prompt", "hi"}, "--adapter \"a\": is a PEFT adapter of a pretrained model"},
		{"mlerl's own model", []string{"--policy", "mlerl", "--prompt", "hi"}, "--policy \"mlerl\": names mlerl's own model, whose weights are in its checkpoints"},
		{"unknown spec", []string{"--policy", "qwen", "--prompt", "hi"}, "--policy \"qwen\": want mlerl"},
		{"no prompt", []string{"--policy", llama}, "generate: prompt \"\": is empty"},
		{"two prompts", []string{"--policy", llama, "--prompt", "hi", "--prompt_file", empty}, "--prompt_file"},
		{"no new tokens", []string{"--policy", llama, "--prompt", "hi", "--max_new_tokens", "0"}, "--max_new_tokens 0: must be at least 1"},
		{"negative temperature", []string{"--policy", llama, "--prompt", "hi", "--temperature", "-1"}, "--temperature -1: must be a number >= 0"},
		{"top_p 0", []string{"--policy", llama, "--prompt", "hi", "--top_p", "0"}, "--top_p 0: must be in (0, 1]"},
		{"bad which", []string{"--data", dir, "--checkpoint", "checkpoints/sft", "--which", "best", "--prompt", "hi"}, "--which \"best\": want selected or last"},
		{"stage prompt raw", []string{"--policy", llama, "--prompt", "hi", "--stage_prompt", "--chat=false"}, "--stage_prompt true: renders the prompt in the chat format"},
		{"bad engine", []string{"--policy", llama, "--prompt", "hi", "--engine", "torch"}, "--engine \"torch\": want native or gomlx"},
		{"missing folder", []string{"--policy", "hf:" + filepath.Join(dir, "nope"), "--prompt", "hi"}, "no such file or directory"},
		{"missing prompt file", []string{"--policy", llama, "--prompt_file", filepath.Join(dir, "nope.txt")}, "prompt_file: stat"},
		{"empty prompt file", []string{"--policy", llama, "--prompt_file", empty}, "empty.txt is empty"},
		{"a FIFO as the prompt file", []string{"--policy", llama, "--prompt_file", fifo}, "is not a regular file"},
		{"a folder as the prompt file", []string{"--policy", llama, "--prompt_file", dir}, "is not a regular file"},
		{"prompt past the positions", []string{"--policy", "hf:" + hfTestdataPath("ckpt", "llama3"), "--prompt_file", long}, "past config.json's max_position_embeddings 512"},
		{"no checkpoint", []string{"--data", dir, "--checkpoint", "checkpoints/sft", "--prompt", "hi"}, "checkpoint checkpoints/sft: no checkpoint in"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := os.ReadDir(dir)
			out, err := run(t, append([]string{"generate"}, tt.args...)...)
			if err == nil {
				t.Fatalf("got no error (output %q), want one containing %q", out, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("got  %q\nwant one line containing %q", err, tt.want)
			}
			if out != "" {
				t.Errorf("a refused run printed %q", out)
			}
			if after, _ := os.ReadDir(dir); len(after) != len(before) {
				t.Errorf("a refused run wrote into %s", dir)
			}
		})
	}
}

// perByteValid replaces each byte of s that is not part of a valid UTF-8
// sequence with U+FFFD, as encoding/json writes such bytes (--json's
// text beside the streamed bytes).
func perByteValid(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// TestGenerateInterrupted: a signal (the context cancelled) stops a
// generation between two tokens with the interrupted line, which says
// how far it got and that nothing was written.
func TestGenerateInterrupted(t *testing.T) {
	cfg := defaultGenerateConfig()
	cfg.Policy, cfg.Prompt, cfg.MaxNewTokens = "hf:"+hfTestdataPath("ckpt", "llama"), "hi", 20
	ctx, cancel := context.WithCancel(context.Background())
	var out, log strings.Builder
	w := cancelAfter{Writer: &out, n: 1, cancel: cancel}
	err := runGenerate(ctx, cfg, nil, &w, &log)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "mlerl generate: interrupted after ") ||
		!strings.Contains(err.Error(), "/20 new tokens; nothing was written") {
		t.Fatalf("got %v, want the interrupted line", err)
	}
	if strings.Contains(err.Error(), "after 20/20") {
		t.Errorf("%v: the generation ran to its end", err)
	}
}

// cancelAfter cancels its context once n writes went through.
type cancelAfter struct {
	io.Writer
	n      int
	cancel func()
}

func (c *cancelAfter) Write(p []byte) (int, error) {
	if c.n--; c.n <= 0 {
		c.cancel()
	}
	return c.Writer.Write(p)
}

// TestGenerateStagePrompt: --stage_prompt renders the prompt as the
// stages render a state's compact prompt (Policy.EncodePrompt: mlerl's
// system message before the user turn), not as one bare user turn.
func TestGenerateStagePrompt(t *testing.T) {
	dir := hfTestdataPath("ckpt", "llama")
	text := "Task: wine-cultivar. Improve train.py."
	g := generateJSON(t, "--policy", "hf:"+dir, "--prompt", text, "--max_new_tokens", "4", "--stage_prompt")
	pol, err := policy.OpenHF(dir, policy.Config{Ctx: 2048, PromptTokens: 2000, ResponseTokens: 8}, policy.DefaultTuning(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer pol.Close()
	want, err := pol.EncodePrompt(text)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.Prompt, want) {
		t.Errorf("--stage_prompt's prompt ids are not EncodePrompt's:\n got  %v\n want %v", g.Prompt, want)
	}
	if bare, _ := pol.UserTurn(text); slices.Equal(g.Prompt, bare) {
		t.Error("--stage_prompt rendered a bare user turn")
	}
	if !strings.Contains(pol.Decode(g.Prompt), policy.SystemPrompt) {
		t.Errorf("the prompt %q lacks mlerl's system message", pol.Decode(g.Prompt))
	}
}
