package tokenizer

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/internal/deps"
)

func jsonEqual(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}

// realJSON reads the tokenizer.json behind a testdata/hf key as a map.
func realJSON(t *testing.T, key string) map[string]json.RawMessage {
	t.Helper()
	file := readHFMeta(t).Files[key]
	var data []byte
	if strings.HasPrefix(key, "smollm2") {
		data = readSmolLM2(t, file.PreTokenizer)
	} else {
		p, err := deps.Find(file.Path)
		if err != nil {
			t.Skipf("skipping: %s is not installed: run `make setup` (%v)", file.Path, err)
		}
		if data, err = os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// ggufLike rebuilds a real tokenizer.json as a GGUF reader would from the
// file's metadata: every token, added ones included, in model.vocab by
// index; merges as "a b" strings; the added tokens listed with those ids;
// normalizer, pre-tokenizer and ignore_merges from GGUFPreTokenizer(pre);
// a ByteLevel decoder.
func ggufLike(t *testing.T, real map[string]json.RawMessage, pre string) []byte {
	t.Helper()
	var model struct {
		Vocab  map[string]int  `json:"vocab"`
		Merges json.RawMessage `json:"merges"`
	}
	if err := json.Unmarshal(real["model"], &model); err != nil {
		t.Fatal(err)
	}
	var added []struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	}
	if err := json.Unmarshal(real["added_tokens"], &added); err != nil {
		t.Fatal(err)
	}
	pairs, err := scanMerges(model.Merges)
	if err != nil {
		t.Fatal(err)
	}
	merges := make([]string, len(pairs))
	for i, p := range pairs {
		merges[i] = p[0] + " " + p[1]
	}
	vocab := map[string]int{}
	for s, id := range model.Vocab {
		vocab[s] = id
	}
	var list []any
	for _, a := range added {
		vocab[a.Content] = a.ID // a GGUF lists control tokens among the tokens
		list = append(list, map[string]any{"id": a.ID, "content": a.Content, "special": a.Special,
			"single_word": false, "lstrip": false, "rstrip": false, "normalized": false})
	}
	g, err := GGUFPreTokenizer(pre)
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(map[string]any{
		"added_tokens": list, "normalizer": g.Normalizer, "pre_tokenizer": g.PreTokenizer,
		"decoder": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		"model":   map[string]any{"type": "BPE", "vocab": vocab, "merges": merges, "ignore_merges": g.IgnoreMerges},
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestGGUFPreTokenizer: each tokenizer.ggml.pre value gives its family's
// own normalizer, pre-tokenizer and ignore_merges (the real files'), and
// a tokenizer.json rebuilt from the real vocabularies as a GGUF reader
// would (all tokens in model.vocab, merges as strings) encodes and decodes
// testdata/hf's whole corpus as tokenizers does on the family's own file.
func TestGGUFPreTokenizer(t *testing.T) {
	if _, err := GGUFPreTokenizer("gemma4"); err == nil || !strings.Contains(err.Error(), "smollm") {
		t.Fatalf("unknown pre: error %v, want one listing the known names", err)
	}
	names, texts := hfCorpus(t)
	for _, tt := range []struct{ key, pre string }{
		{"smollm2", "smollm"}, {"qwen3", "qwen2"}, {"qwen2_5", "qwen2"}, {"llama3_1", "llama-bpe"}, {"smollm2-gguf-hf", "gpt2"},
	} {
		t.Run(tt.key, func(t *testing.T) {
			real := realJSON(t, tt.key)
			g, err := GGUFPreTokenizer(tt.pre)
			if err != nil {
				t.Fatal(err)
			}
			if !jsonEqual(t, g.PreTokenizer, real["pre_tokenizer"]) {
				t.Errorf("pre_tokenizer %s, the real file's %s", g.PreTokenizer, real["pre_tokenizer"])
			}
			if !jsonEqual(t, g.Normalizer, real["normalizer"]) {
				t.Errorf("normalizer %s, the real file's %s", g.Normalizer, real["normalizer"])
			}
			var m struct {
				IgnoreMerges bool `json:"ignore_merges"`
			}
			json.Unmarshal(real["model"], &m)
			if m.IgnoreMerges != g.IgnoreMerges {
				t.Errorf("ignore_merges %v, the real file's %v", g.IgnoreMerges, m.IgnoreMerges)
			}
			tok, err := Read(bytes.NewReader(ggufLike(t, real, tt.pre)))
			if err != nil {
				t.Fatal(err)
			}
			want := readJSONLGz[hfRow](t, "testdata/hf/"+tt.key+".jsonl.gz")
			bad := 0
			for i, w := range want {
				got := tok.Encode(texts[i])
				if len(got) != w.N || idsDigest(got) != w.SHA256 {
					if bad++; bad <= 3 {
						t.Errorf("%s: the GGUF-like file gives %d ids, tokenizers %d on the real file", names[i], len(got), w.N)
					}
				}
				wantText := lossyString(texts[i])
				if w.Dec != nil {
					wantText = *w.Dec
				}
				if tok.Decode(got) != wantText {
					if bad++; bad <= 3 {
						t.Errorf("%s: Decode differs", names[i])
					}
				}
			}
		})
	}
}
