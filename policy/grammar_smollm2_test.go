package policy

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/internal/catalog"
	"github.com/mlerl/mlerl/internal/tasks"
	"github.com/mlerl/mlerl/internal/tokenizer"
	"github.com/mlerl/mlerl/policy/hf"
)

// Constrained decoding over SmolLM2-135M-Instruct's real vocabulary
// (49,152 ids), which has no token for 21 bytes (0x04, 0x06, 0x13, 0x14,
// 0x16, 0x1d, 0xc0, 0xc1, 0xf1, 0xf2, 0xf5-0xff): the grammar must never
// ask for one of them.

// smolTokenizer reads the SmolLM2 tokenizer.json that internal/tokenizer's
// tests commit (what transformers writes for the GGUF of issue 58).
func smolTokenizer(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot(), "internal", "tokenizer", "testdata", "hf", "smollm2", "tokenizer.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Read(zr)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// smolWorld is grammarWorld with SmolLM2's vocabulary as a Hugging Face
// policy's (model ids are tokenizer ids), a workspace file and an idea
// each holding a byte without a token (0xf1, 0xf2: characters of planes
// 4 and 8), and one file and idea with non-ASCII bytes that it can write.
func smolWorld(t testing.TB) grammarWorld {
	t.Helper()
	tok := smolTokenizer(t)
	eot, _ := tok.ID("<|im_end|>")
	eos, _ := tok.ID("<|endoftext|>")
	p := &Policy{Model: Config{Vocab: 49152, Ctx: 4096, PromptTokens: 16, ResponseTokens: 200},
		Source: &Source{Kind: KindHF}, tok: tok, hf: &hf.Checkpoint{Tokenizer: tok}, eos: int32(eot)}
	p.setStops([]int{eos})
	task, err := tasks.Load(filepath.Join(repoRoot(), "tasks", "wine-cultivar"))
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join(task.WorkspacePath(), "train.py"))
	if err != nil {
		t.Fatal(err)
	}
	st := agents.State{TaskID: task.ID, Title: task.Title, Metric: task.Metric, Direction: task.Direction,
		Script: string(script), Files: []string{"test.csv", "train.csv", "train.py", "valid.csv", "notes_\U00040000.txt", "données.csv"},
		Modality: task.Modality, TaskType: task.TaskType}
	return grammarWorld{gen: Generator{Engine: &randomEngine{cfg: p.Model}, Policy: p}, state: st, task: task}
}

func TestSmolLM2GrammarLeavesOutUnwritableValues(t *testing.T) {
	w := smolWorld(t)
	p := w.gen.Policy
	tables := p.tables()
	missing := 0
	for b := range 256 {
		if !tables.single[b] {
			missing++
		}
	}
	if missing != 21 {
		t.Fatalf("%d bytes without a one-byte token in SmolLM2's vocabulary, want 21", missing)
	}
	gc := NewGrammarContext(w.state, nil, true)
	ideas := catalog.ForTask(w.task.Modality, w.task.TaskType)
	gc.Ideas = []string{ideas[0].Text, "Use the \U00080000 features", ideas[1].Text + " (é)"}
	c := w.gen.ActionGrammar(gc).(*actionConstraint)
	for _, f := range c.g.files {
		if strings.Contains(f, "\U00040000") {
			t.Errorf("the grammar offers %s, which SmolLM2 cannot write", f)
		}
	}
	if !slices.Contains(c.g.files, `"données.csv"`) || len(c.g.files) != 5 {
		t.Errorf("the grammar's files are %v, want the five it can write", c.g.files)
	}
	if len(c.g.ideas) != 2 || slices.ContainsFunc(c.g.ideas, func(s string) bool { return strings.Contains(s, "\U00080000") }) {
		t.Errorf("the grammar's ideas are %v, want the two it can write", c.g.ideas)
	}
	// Nothing written: offering none is not offering any.
	if g := writable(GrammarContext{Ideas: []string{"\U00080000"}}, &tables.single); g.Ideas == nil || len(g.Ideas) != 0 || g.Files != nil {
		t.Errorf("writable kept %v / %v, want an empty non-nil idea list and no file list", g.Ideas, g.Files)
	}
}

// TestSmolLM2ConstrainedDecoding: under random logits over SmolLM2's
// 49,152 ids, constrained responses (both answer forms) always complete
// and parse, name only writable files, and their masks equal the mask by
// definition at every step outside free text.
func TestSmolLM2ConstrainedDecoding(t *testing.T) {
	w := smolWorld(t)
	p := w.gen.Policy
	names := map[string]int{}
	for _, oneLine := range []bool{true, false} {
		for seed := range uint64(3) {
			samples := w.constrainedSamples(t, 40+seed, 4, oneLine, 2)
			gc := NewGrammarContext(w.state, nil, oneLine)
			for i, s := range samples {
				text := p.Decode(s.Tokens)
				a, err := env.Parse(text)
				if err != nil {
					t.Fatalf("sample %d does not parse: %v\n%s", i, err, text)
				}
				if !s.Stopped || s.Tokens[len(s.Tokens)-1] != p.EOS() {
					t.Fatalf("sample %d did not end with the end of turn: %q", i, text)
				}
				if a.FileName != "" && !slices.Contains(w.state.Files, a.FileName) || strings.Contains(a.FileName, "\U00040000") {
					t.Fatalf("sample %d names the file %q", i, a.FileName)
				}
				names[a.Name]++
				c := w.gen.ActionGrammar(gc).(*actionConstraint)
				for k, tok := range s.Tokens {
					got := NewBitset(p.Size())
					if err := c.Allowed(got, 1<<20); err != nil {
						t.Fatal(err)
					}
					if !c.InFreeText() {
						if want := naiveMask(c, p.Size()); !slices.Equal(got, want) {
							t.Fatalf("sample %d token %d (after %q): the mask has %d ids, the definition %d", i, k, c.text, got.Count(), want.Count())
						}
					}
					if !got.Has(tok) {
						t.Fatalf("sample %d token %d %q is outside its own mask", i, k, p.TokenBytes(tok))
					}
					if err := c.Accept(tok); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	t.Logf("actions: %v", names)
}

// TestVocabWithoutSomeByteTokens: a trimmed vocabulary over a tokenizer
// that lacks some bytes keeps the byte tokens it has, and text holding the
// others encodes and decodes without them, as the tokenizer does.
func TestVocabWithoutSomeByteTokens(t *testing.T) {
	tok := smolTokenizer(t)
	v := BuildVocab(tok, []string{"def train(model):"}, 1)
	bytesKept := 0
	for _, id := range v.Ids {
		if len(tok.TokenBytes(id)) == 1 {
			bytesKept++
		}
	}
	if bytesKept != 256-21 {
		t.Fatalf("the vocabulary keeps %d byte tokens, want the 235 SmolLM2 has", bytesKept)
	}
	text := "a\x04b naïve \U00040000 données 日本 ÿ"
	ids, err := v.Encode(tok, text)
	if err != nil {
		t.Fatal(err)
	}
	got := v.Decode(tok, ids)
	want := tok.Decode(tok.Encode(text))
	if got != want || strings.ContainsRune(got, '\x04') {
		t.Fatalf("Decode(Encode(%q)) = %q, want the tokenizer's own %q", text, got, want)
	}
	if !bytes.Contains([]byte(got), []byte("naïve")) {
		t.Fatalf("lost writable text: %q", got)
	}
}
