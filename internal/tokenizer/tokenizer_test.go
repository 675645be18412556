package tokenizer

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/text/unicode/norm"
)

var (
	qwenOnce sync.Once
	qwenTok  *Tokenizer
	qwenPath string
	qwenErr  error
)

// qwen loads the installed Qwen3 tokenizer once per test binary, or skips
// the test when `make setup` has not been run.
func qwen(tb testing.TB) *Tokenizer {
	tb.Helper()
	qwenOnce.Do(func() {
		if qwenPath, qwenErr = DefaultPath(); qwenErr == nil {
			qwenTok, qwenErr = Load(qwenPath)
		}
	})
	if errors.Is(qwenErr, ErrNotInstalled) {
		tb.Skipf("skipping: the Qwen3 tokenizer.json is not installed (run `make setup`): %v", qwenErr)
	}
	if qwenErr != nil {
		tb.Fatal(qwenErr)
	}
	return qwenTok
}

type goldenCase struct {
	Text string `json:"text"`
	IDs  []int  `json:"ids"`
}

func readGolden(tb testing.TB) []goldenCase {
	tb.Helper()
	f, err := os.Open("testdata/golden.jsonl")
	if err != nil {
		tb.Fatalf("%v (regenerate with `.deps/pyref/bin/python scripts/hf_reference.py`)", err)
	}
	defer f.Close()
	var cases []goldenCase
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for line := 1; sc.Scan(); line++ {
		var c goldenCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			tb.Fatalf("testdata/golden.jsonl line %d: %v", line, err)
		}
		cases = append(cases, c)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return cases
}

// TestGoldenFileMatchesInstalled guards against comparing with ids made
// from another tokenizer.json than the one `make setup` installs.
func TestGoldenFileMatchesInstalled(t *testing.T) {
	qwen(t)
	var meta struct {
		Package string `json:"package"`
		SHA256  string `json:"tokenizer_json_sha256"`
		Strings int    `json:"strings"`
	}
	b, err := os.ReadFile("testdata/golden.meta.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &meta); err != nil {
		t.Fatalf("testdata/golden.meta.json: %v", err)
	}
	data, err := os.ReadFile(qwenPath)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != meta.SHA256 {
		t.Fatalf("%s has sha256 %s, golden ids were made from %s (%s): rerun `make setup` or regenerate with `.deps/pyref/bin/python scripts/hf_reference.py`", qwenPath, got, meta.SHA256, meta.Package)
	}
	if n := len(readGolden(t)); n != meta.Strings {
		t.Fatalf("golden.jsonl has %d strings, golden.meta.json says %d", n, meta.Strings)
	}
}

// TestGolden compares every golden string's ids with those of Hugging
// Face's tokenizers (Rust) on the same tokenizer.json.
func TestGolden(t *testing.T) {
	tok := qwen(t)
	cases := readGolden(t)
	if len(cases) < 300 {
		t.Fatalf("only %d golden strings; want a few hundred", len(cases))
	}
	bad := 0
	for i, c := range cases {
		got := tok.Encode(c.Text)
		if slices.Equal(got, c.IDs) {
			continue
		}
		bad++
		if bad <= 10 {
			at := 0
			for at < min(len(got), len(c.IDs)) && got[at] == c.IDs[at] {
				at++
			}
			t.Errorf("golden line %d: Encode(%q)\n got  %v\n want %v\n first difference at index %d", i+1, c.Text, got, c.IDs, at)
		}
	}
	t.Logf("%d/%d golden strings match the tokenizers reference", len(cases)-bad, len(cases))
}

func TestRoundTrip(t *testing.T) {
	tok := qwen(t)
	for i, c := range readGolden(t) {
		want := c.Text
		if !norm.NFC.IsNormalString(want) {
			want = norm.NFC.String(want) // encoding normalises; decoding cannot undo it
		}
		if got := tok.Decode(tok.Encode(c.Text)); got != want {
			t.Errorf("golden line %d: Decode(Encode(%q)) = %q, want %q", i+1, c.Text, got, want)
		}
		if got := tok.Decode(tok.EncodeOrdinary(c.Text)); got != want {
			t.Errorf("golden line %d: Decode(EncodeOrdinary(%q)) = %q, want %q", i+1, c.Text, got, want)
		}
	}
}

// referenceBPE is the slow, obvious merge loop: rescan every adjacent pair,
// apply the lowest-ranked (leftmost on ties), repeat. Bytes without a
// symbol are left out first.
func referenceBPE(t *Tokenizer, word string) []int {
	var syms []int32
	for i := range len(word) {
		if id := t.byteIDs[word[i]]; id >= 0 {
			syms = append(syms, id)
		}
	}
	for {
		best, at := uint64(0), -1
		for i := 0; i+1 < len(syms); i++ {
			v, ok := t.merges[uint64(syms[i])<<32|uint64(syms[i+1])]
			if ok && (at < 0 || v>>32 < best>>32) {
				best, at = v, i
			}
		}
		if at < 0 {
			break
		}
		syms[at] = int32(uint32(best))
		syms = slices.Delete(syms, at+1, at+2)
	}
	out := make([]int, len(syms))
	for i, s := range syms {
		out[i] = int(s)
	}
	return out
}

func TestMergeMatchesReference(t *testing.T) {
	tok := qwen(t)
	rng := rand.New(rand.NewPCG(1, 2))
	parts := []string{"a", "b", "e", "t", "th", "the", "ing", " ", "  ", "\n", "_", "0", "1", "é", "日本", "😀", "'s", "ll", "=", "(", ")", "ab", "ba"}
	words := []string{"", "x", "hello", " the", "aaaaaaaaaaaaaaaaaaaaaaaaaaaa", strings.Repeat(" ", 64), strings.Repeat("ab", 40), "自然言語処理"}
	for range 2000 {
		var b strings.Builder
		for range 1 + rng.IntN(12) {
			b.WriteString(parts[rng.IntN(len(parts))])
		}
		words = append(words, b.String())
	}
	for _, w := range words {
		if w == "" {
			continue
		}
		got := tok.merge(nil, w)
		if want := referenceBPE(tok, w); !slices.Equal(got, want) {
			t.Errorf("merge(%q) = %v, want %v (reference loop)", w, got, want)
		}
	}
}

func TestVocabulary(t *testing.T) {
	tok := qwen(t)
	if got, want := tok.VocabSize(), 151669; got != want {
		t.Errorf("VocabSize() = %d, want %d", got, want)
	}
	tests := []struct {
		token string
		id    int
		added bool
	}{
		{EndOfText, 151643, true},
		{IMStart, 151644, true},
		{IMEnd, 151645, true},
		{"<think>", 151667, true},
		{"Ġ", 220, false}, // space
		{"Ċ", 198, false}, // newline
		{"Hello", 9707, false},
	}
	for _, tt := range tests {
		id, ok := tok.ID(tt.token)
		if !ok || id != tt.id {
			t.Errorf("ID(%q) = %d, %v, want %d, true", tt.token, id, ok, tt.id)
		}
		if s, ok := tok.Token(tt.id); !ok || s != tt.token {
			t.Errorf("Token(%d) = %q, %v, want %q, true", tt.id, s, ok, tt.token)
		}
		if got := tok.IsAdded(tt.id); got != tt.added {
			t.Errorf("IsAdded(%d) = %v, want %v", tt.id, got, tt.added)
		}
	}
	for _, id := range []int{-1, tok.VocabSize(), 1 << 30} {
		if s, ok := tok.Token(id); ok {
			t.Errorf("Token(%d) = %q, true, want false", id, s)
		}
	}
	if _, ok := tok.ID("no such token ∅"); ok {
		t.Errorf("ID of an unknown string: got ok, want false")
	}
	if n := len(tok.AddedTokens()); n != 26 {
		t.Errorf("AddedTokens(): %d tokens, want 26", n)
	}
}

func TestEncodeEdges(t *testing.T) {
	tok := qwen(t)
	tests := []struct {
		name, text string
		want       []int
	}{
		{"empty", "", []int{}},
		{"im_end alone", IMEnd, []int{151645}},
		{"newline", "\n", []int{198}},
		{"space", " ", []int{220}},
		// The reference ids of these come from Hugging Face's tokenizers too.
		{"chat", "<|im_start|>user\nhi<|im_end|>\n", []int{151644, 872, 198, 6023, 151645, 198}},
		{"spaces and tabs", "  a   b\t\tc", []int{220, 264, 256, 293, 197, 1444}},
		{"invalid utf8 as U+FFFD", "a\xffb", tok.Encode("a\uFFFDb")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tok.Encode(tt.text); !slices.Equal(got, tt.want) {
				t.Errorf("Encode(%q) = %v, want %v", tt.text, got, tt.want)
			}
		})
	}
	if got := tok.EncodeOrdinary(IMEnd); slices.Contains(got, 151645) || len(got) < 2 {
		t.Errorf("EncodeOrdinary(%q) = %v, want ordinary tokens only", IMEnd, got)
	}
	if got, want := tok.Count("hello world"), 2; got != want {
		t.Errorf("Count(hello world) = %d, want %d", got, want)
	}
}

func TestDecodePartial(t *testing.T) {
	tok := qwen(t)
	ids := tok.Encode("日本")
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(tok.Decode([]int{id}))
	}
	if got := b.String(); got != "日本" {
		t.Errorf("concatenated per-token Decode = %q, want %q", got, "日本")
	}
	if got := tok.Decode([]int{-5, 1 << 30}); got != "" {
		t.Errorf("Decode(unknown ids) = %q, want empty", got)
	}
}

func TestChat(t *testing.T) {
	tok := qwen(t)
	msgs := []Message{
		{Role: "system", Content: "You improve ML scripts."},
		{Role: "user", Content: "Task: digits.\nBest so far: 0.95"},
		{Role: "assistant", Content: "Action: Execute Script\nAction Input: {\"script_name\": \"train.py\"}"},
	}
	const want = "<|im_start|>system\nYou improve ML scripts.<|im_end|>\n" +
		"<|im_start|>user\nTask: digits.\nBest so far: 0.95<|im_end|>\n" +
		"<|im_start|>assistant\nAction: Execute Script\nAction Input: {\"script_name\": \"train.py\"}<|im_end|>\n" +
		"<|im_start|>assistant\n"
	text := FormatChat(msgs, true)
	if text != want {
		t.Fatalf("FormatChat = %q, want %q", text, want)
	}
	if got, want := tok.EncodeChat(msgs, true), tok.Encode(text); !slices.Equal(got, want) {
		t.Errorf("EncodeChat = %v, want Encode(FormatChat) = %v", got, want)
	}
	if got := FormatChat(nil, false); got != "" {
		t.Errorf("FormatChat(nil, false) = %q, want empty", got)
	}
	// A message that quotes a control token cannot close its turn.
	ids := tok.EncodeChat([]Message{{Role: "user", Content: "say <|im_end|> now"}}, false)
	if n := strings.Count(tok.Decode(ids), IMEnd); n != 2 {
		t.Errorf("decoded chat holds %d %s, want 2 (one quoted, one closing)", n, IMEnd)
	}
	ends := 0
	for _, id := range ids {
		if id == 151645 {
			ends++
		}
	}
	if ends != 1 {
		t.Errorf("EncodeChat gave %d <|im_end|> ids, want 1: quoted text must stay ordinary", ends)
	}
}

func TestDefaultPathMissing(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("MLERL_DEPS", filepath.Join(dir, "nothing"))
	t.Chdir(dir)
	_, err := DefaultPath()
	if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "make setup") {
		t.Fatalf("DefaultPath() error = %v, want ErrNotInstalled saying `make setup`", err)
	}
	if _, err := Load(filepath.Join(dir, "tokenizer.json")); !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("Load(missing) error = %v, want ErrNotInstalled", err)
	}
}

func TestDefaultPathFromParent(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, ".deps", "qwen3", "tokenizer.json")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "a", "b")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MLERL_DEPS", "")
	t.Chdir(sub)
	got, err := DefaultPath()
	if err != nil || got != p {
		t.Fatalf("DefaultPath() = %q, %v, want %q", got, err, p)
	}
}

// tinyJSON is a minimal valid byte-level BPE tokenizer.json: the 256 byte
// symbols, one merge ("a" + "b" -> "ab") and one added token.
func tinyJSON(edit func(m map[string]any)) string {
	vocab := map[string]any{}
	for b := range 256 {
		vocab[string(byteToRune[b])] = b
	}
	vocab["ab"] = 256
	m := map[string]any{
		"added_tokens": []any{map[string]any{"id": 257, "content": "<|x|>", "special": true}},
		"normalizer":   map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\s+|\S+`}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false},
		}},
		"model": map[string]any{"type": "BPE", "vocab": vocab, "merges": []any{[]any{"a", "b"}}},
	}
	if edit != nil {
		edit(m)
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func TestReadTiny(t *testing.T) {
	tok, err := Read(strings.NewReader(tinyJSON(nil)))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tok.Encode("ab a<|x|>"), []int{256, 32, 97, 257}; !slices.Equal(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
	// Old "a b" merge layout.
	tok, err = Read(strings.NewReader(tinyJSON(func(m map[string]any) {
		m["model"].(map[string]any)["merges"] = []any{"a b"}
	})))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tok.Encode("ab"), []int{256}; !slices.Equal(got, want) {
		t.Errorf("Encode with string merges = %v, want %v", got, want)
	}
}

// TestReadLayouts covers the pre-tokenizer layouts and model flags beyond
// Qwen's: no normalizer, ignore_merges (Llama 3), Digits and GPT-2's
// ByteLevel regex (SmolLM2's kind).
func TestReadLayouts(t *testing.T) {
	withVocab := func(extra map[string]int, merges []any) func(m map[string]any) {
		return func(m map[string]any) {
			v := m["model"].(map[string]any)["vocab"].(map[string]any)
			for k, id := range extra {
				v[k] = id
			}
			m["model"].(map[string]any)["merges"] = merges
			// tokenizers numbers the added token after the vocabulary's entries.
			m["added_tokens"].([]any)[0].(map[string]any)["id"] = len(v)
		}
	}
	tests := []struct {
		name string
		edit func(m map[string]any)
		text string
		want []int
	}{
		{"nfc composes", nil, "e\u0301", []int{0xC3, 0xA9}},
		{"no normalizer keeps the combining mark", func(m map[string]any) { m["normalizer"] = nil }, "e\u0301", []int{'e', 0xCC, 0x81}},
		// "abc" is a vocabulary entry that no merge sequence reaches ("a"+"b"
		// makes "ab", and no "ab"+"c" merge): only ignore_merges gives it.
		{"merges without ignore_merges", withVocab(map[string]int{"abc": 300}, []any{[]any{"a", "b"}}), "abc", []int{256, 'c'}},
		{"ignore_merges takes the whole word", func(m map[string]any) {
			withVocab(map[string]int{"abc": 300}, []any{[]any{"a", "b"}})(m)
			m["model"].(map[string]any)["ignore_merges"] = true
		}, "abc abx", []int{300, 32, 256, 'x'}},
		{"ignore_merges never yields an added token", func(m map[string]any) {
			m["model"].(map[string]any)["ignore_merges"] = true
		}, "<|x|>", []int{257}},
		{"digits individually", func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Digits", "individual_digits": true},
				map[string]any{"type": "ByteLevel", "use_regex": true, "add_prefix_space": false}}}
			withVocab(map[string]int{"12": 300, "Ġab": 301}, []any{[]any{"1", "2"}, []any{"Ġ", "ab"}, []any{"a", "b"}})(m)
		}, "12 ab", []int{'1', '2', 301}},
		{"gpt2 regex keeps the space with the word", func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "ByteLevel", "add_prefix_space": false}
			withVocab(map[string]int{"12": 300, "Ġab": 301}, []any{[]any{"1", "2"}, []any{"Ġ", "ab"}, []any{"a", "b"}})(m)
		}, "12 ab", []int{300, 301}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := Read(strings.NewReader(tinyJSON(tt.edit)))
			if err != nil {
				t.Fatal(err)
			}
			if got := tok.Encode(tt.text); !slices.Equal(got, tt.want) {
				t.Errorf("Encode(%q) got %v, want %v", tt.text, got, tt.want)
			}
		})
	}
}

func TestReadErrors(t *testing.T) {
	model := func(m map[string]any) map[string]any { return m["model"].(map[string]any) }
	tests := []struct {
		name string
		edit func(m map[string]any)
		want string
	}{
		{"not json", nil, "parse tokenizer.json"},
		{"wordpiece", func(m map[string]any) { model(m)["type"] = "WordPiece" }, "only BPE"},
		{"nfkc", func(m map[string]any) { m["normalizer"] = map[string]any{"type": "NFKC"} }, "only NFC"},
		{"no pre-tokenizer", func(m map[string]any) { delete(m, "pre_tokenizer") }, "pre_tokenizer"},
		{"unknown merge", func(m map[string]any) { model(m)["merges"] = []any{[]any{"a", "zz"}} }, "merges[0]"},
		{"bad merge string", func(m map[string]any) { model(m)["merges"] = []any{"ab"} }, "no space"},
		{"missing byte", func(m map[string]any) { delete(model(m)["vocab"].(map[string]any), "Ġ") }, "byte 0x20"},
		{"lstrip", func(m map[string]any) {
			m["added_tokens"] = []any{map[string]any{"id": 257, "content": "<|x|>", "lstrip": true}}
		}, "lstrip"},
		{"byte fallback", func(m map[string]any) { model(m)["byte_fallback"] = true }, "byte_fallback"},
		{"metaspace", func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Metaspace"}, map[string]any{"type": "ByteLevel", "use_regex": false}}}
		}, `type "Metaspace" is not supported`},
		{"bytelevel not last", func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "ByteLevel", "use_regex": false}, map[string]any{"type": "Digits"}}}
		}, "last step must be ByteLevel"},
		{"split removed", func(m map[string]any) {
			m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["behavior"] = "Removed"
		}, `behavior "Removed"`},
		{"prefix space", func(m map[string]any) {
			m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[1].(map[string]any)["add_prefix_space"] = true
		}, "add_prefix_space"},
		{"nothing splits", func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "ByteLevel", "use_regex": false}
		}, "no splitting step"},
		{"decoder", func(m map[string]any) { m["decoder"] = map[string]any{"type": "Metaspace"} }, `decoder.type is "Metaspace"`},
		{"dropout", func(m map[string]any) { model(m)["dropout"] = 0.1 }, "dropout"},
		{"missing ascii byte", func(m map[string]any) { delete(model(m)["vocab"].(map[string]any), "A") }, "byte 0x41"},
		{"unk with a missing byte", func(m map[string]any) {
			delete(model(m)["vocab"].(map[string]any), string(byteToRune[0xff]))
			model(m)["unk_token"] = "<unk>"
		}, "unk_token"},
		{"huge vocab id", func(m map[string]any) { model(m)["vocab"].(map[string]any)["zz"] = 1 << 40 }, "far past"},
		{"huge added id", func(m map[string]any) {
			m["added_tokens"] = []any{map[string]any{"id": 1 << 40, "content": "<|x|>"}}
		}, "far past"},
		{"added id collides", func(m map[string]any) {
			v := model(m)["vocab"].(map[string]any)
			delete(v, "ab")
			v["zz"] = 258
			m["added_tokens"] = []any{map[string]any{"id": 257, "content": "<|x|>"}, map[string]any{"id": 258, "content": "<|y|>"}}
		}, "renumber"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := "{not json"
			if tt.edit != nil {
				in = tinyJSON(tt.edit)
			}
			_, err := Read(strings.NewReader(in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Read error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := qwen(t)
	cases := readGolden(t)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < len(cases); i += 4 {
				if got := tok.Encode(cases[i].Text); !slices.Equal(got, cases[i].IDs) {
					t.Errorf("concurrent Encode(%q) differs from the golden ids", cases[i].Text)
				}
			}
		}()
	}
	wg.Wait()
}

// pythonSample returns about n bytes of Python from the golden strings.
func pythonSample(tb testing.TB, n int) string {
	var b strings.Builder
	for b.Len() < n {
		for _, c := range readGolden(tb) {
			if strings.Contains(c.Text, "def ") || strings.Contains(c.Text, "import ") || strings.Contains(c.Text, "model.fit") {
				b.WriteString(c.Text)
				b.WriteByte('\n')
			}
		}
	}
	return b.String()[:n]
}

// BenchmarkEncode measures tokens/s on ~8 KB of Python code (pre-token
// cache warm, as when encoding many prompts).
func BenchmarkEncode(b *testing.B) {
	tok := qwen(b)
	text := pythonSample(b, 8<<10)
	n := len(tok.Encode(text))
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	c0 := cpuTime()
	for b.Loop() {
		tok.Encode(text)
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(float64(n*b.N)/(cpuTime()-c0).Seconds(), "tokens/cpu-s")
}

// BenchmarkEncodeCold is BenchmarkEncode with the pre-token cache cleared
// before every call.
func BenchmarkEncodeCold(b *testing.B) {
	tok := qwen(b)
	text := pythonSample(b, 8<<10)
	n := len(tok.Encode(text))
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	c0 := cpuTime()
	for b.Loop() {
		tok.cacheMu.Lock()
		clear(tok.cache)
		tok.cacheMu.Unlock()
		tok.Encode(text)
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(float64(n*b.N)/(cpuTime()-c0).Seconds(), "tokens/cpu-s")
}

// cpuTime is the process's user+system CPU time: unlike wall time, it
// hardly moves when other processes share the cores.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkLoad measures reading tokenizer.json (wall and CPU time) and
// the heap it keeps.
func BenchmarkLoad(b *testing.B) {
	qwen(b)
	var heap uint64
	start, cpu := time.Now(), time.Duration(0)
	for b.Loop() {
		c0 := cpuTime()
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		tok, err := Load(qwenPath)
		if err != nil {
			b.Fatal(err)
		}
		cpu += cpuTime() - c0
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap = after.HeapAlloc - before.HeapAlloc
		runtime.KeepAlive(tok)
	}
	b.ReportMetric(float64(time.Since(start).Milliseconds())/float64(b.N), "ms/load")
	b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/load")
	b.ReportMetric(float64(heap)/(1<<20), "MB-kept")
}

// TestByteTokens: every byte has a one-byte token in Qwen's vocabulary,
// and byte tokens and TokenBytes round-trip through DecodeBytes.
func TestByteTokens(t *testing.T) {
	tok := qwen(t)
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	ids := tok.ByteTokens(all)
	if got := tok.DecodeBytes(ids); string(got) != string(all) {
		t.Fatalf("DecodeBytes(ByteTokens(all bytes)) lost bytes: got %d bytes", len(got))
	}
	for _, id := range tok.Encode("def train(model):\n    return 'héllo' ✓") {
		if got, want := string(tok.TokenBytes(id)), tok.Decode([]int{id}); got != want {
			t.Errorf("TokenBytes(%d) = %q, want %q", id, got, want)
		}
	}
	if tok.TokenBytes(-1) != nil || tok.TokenBytes(1<<30) != nil {
		t.Error("TokenBytes of an unknown id: want nil")
	}
}

// TestTiny runs testdata/hf/tiny.jsonl: small files that pin what
// Hugging Face's tokenizers does where the real files never go (normalized
// added tokens matched after the raw ones, in their normalised form; bytes
// without a symbol left out with their neighbours merging across; added
// tokens outside the byte alphabet decoded as written), and the files whose
// added-token ids tokenizers would renumber, which Read refuses naming the
// id tokenizers gives.
func TestTiny(t *testing.T) {
	type tinyRow struct {
		Name       string          `json:"name"`
		JSON       json.RawMessage `json:"json"`
		Text       string          `json:"text"`
		IDs        []int           `json:"ids"`
		Decoded    string          `json:"decoded"`
		Renumbered map[string]int  `json:"renumbered"`
	}
	b, err := os.ReadFile("testdata/hf/tiny.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		var r tinyRow
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		n++
		t.Run(r.Name, func(t *testing.T) {
			tok, err := Read(strings.NewReader(string(r.JSON)))
			if r.Renumbered != nil {
				if err == nil {
					t.Fatalf("Read accepted a file whose added-token ids tokenizers renumbers to %v", r.Renumbered)
				}
				found := false
				for _, id := range r.Renumbered {
					found = found || strings.Contains(err.Error(), fmt.Sprintf("gives it id %d", id))
				}
				if !found {
					t.Fatalf("Read error %q does not name the id tokenizers gives (%v)", err, r.Renumbered)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := tok.Encode(r.Text)
			if !slices.Equal(got, r.IDs) {
				t.Errorf("Encode(%q) = %v, want %v", r.Text, got, r.IDs)
			}
			if d := tok.Decode(got); d != r.Decoded {
				t.Errorf("Decode(%v) = %q, want %q", got, d, r.Decoded)
			}
		})
	}
	if n < 10 {
		t.Fatalf("tiny.jsonl has %d cases", n)
	}
}

// TestLossy checks the U+FFFD replacement of ill-formed UTF-8 against
// the maximal-subpart examples of the Unicode standard (Table 3-8) and
// Python's bytes.decode("utf-8", "replace").
func TestLossy(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", ""},
		{"abc", "abc"},
		{"\xe6\x97", "\uFFFD"},
		{"\xe6\x97a", "\uFFFDa"},
		{"\xe6\x97\xa5", "日"},
		{"\xc0\xaf", "\uFFFD\uFFFD"},
		{"\xe0\x80\x80", "\uFFFD\uFFFD\uFFFD"},
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"},
		{"\xf4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"},
		{"\xf0\x9f\x98", "\uFFFD"},
		{"\xf0\x9f\x98\xf0\x9f\x98\x80", "\uFFFD😀"},
		{"\x80\x80", "\uFFFD\uFFFD"},
		{"\xff\xfe", "\uFFFD\uFFFD"},
		{"\xc3\xc3\xa9", "\uFFFDé"},
		// Table 3-8: "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"
		{"a\xf1\x80\x80\xe1\x80\xc2b\x80c\x80\xbfd", "a\uFFFD\uFFFD\uFFFDb\uFFFDc\uFFFD\uFFFDd"},
	} {
		if got := lossyString(tt.in); got != tt.want {
			t.Errorf("lossyString(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
