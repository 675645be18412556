package embed

import (
	"slices"
	"strings"
	"testing"
)

func TestTokenizerWordPiece(t *testing.T) {
	tok, err := ParseTokenizer([]byte(testTokenizer))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		text string
		max  int
		want []int64
	}{
		{"Scale the features", 0, []int64{2, 4, 5, 6, 3}},
		{"  SCALE\tthé\nfeature ", 0, []int64{2, 4, 5, 15, 3}}, // lower case, accents stripped
		{"Use a random forest, more trees", 0, []int64{2, 8, 9, 10, 11, 12, 13, 14, 7, 3}},
		{"trees", 0, []int64{2, 14, 7, 3}}, // tree + ##s
		{"treez", 0, []int64{2, 1, 3}},     // one unknown piece: the whole word is [UNK]
		{"", 0, []int64{2, 3}},
		{"Use a random forest", 4, []int64{2, 8, 9, 3}}, // truncated, specials kept
		{"Use a random forest", 1, []int64{2, 3}},
	}
	for _, tt := range tests {
		if got := tok.Encode(tt.text, tt.max); !slices.Equal(got, tt.want) {
			t.Errorf("Encode(%q, %d): got %v want %v", tt.text, tt.max, got, tt.want)
		}
	}
}

func TestTokenizerWordLevel(t *testing.T) {
	tok, err := ParseTokenizer([]byte(`{
  "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]},
  "pre_tokenizer": {"type": "Whitespace"},
  "post_processor": {"type": "BertProcessing", "sep": ["</s>", 1], "cls": ["<s>", 0]},
  "model": {"type": "WordLevel", "unk_token": "<unk>", "vocab": {"<s>": 0, "</s>": 1, "<unk>": 2, "drop": 3, "out": 4, "0": 5, ".": 6, "5": 7, "dropout": 8}}
}`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		text string
		want []int64
	}{
		{"Dropout 0.5", []int64{0, 8, 5, 6, 7, 1}},
		{"drop out!", []int64{0, 3, 4, 2, 1}},
	}
	for _, tt := range tests {
		if got := tok.Encode(tt.text, 0); !slices.Equal(got, tt.want) {
			t.Errorf("Encode(%q): got %v want %v", tt.text, got, tt.want)
		}
	}
}

func TestTokenizerRefusesUnsupported(t *testing.T) {
	tests := []struct {
		name, json, want string
	}{
		{"bpe", `{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}`, `model type "BPE" is not supported`},
		{"byte level", `{"pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "WordLevel", "vocab": {"a": 0}}}`, `pre_tokenizer "ByteLevel" is not supported`},
		{"unk missing", `{"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"a": 0}}}`, `unk_token "[UNK]" is not in the vocabulary`},
		{"empty vocab", `{"model": {"type": "WordLevel", "vocab": {}}}`, `model.vocab`},
		{"not json", `{"model":`, `not a tokenizer.json`},
		{"template without ids", `{"post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "X"}}], "special_tokens": {}}, "model": {"type": "WordLevel", "vocab": {"a": 0}}}`, `special token "X" has no ids`},
	}
	for _, tt := range tests {
		_, err := ParseTokenizer([]byte(tt.json))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got error %v, want one containing %q", tt.name, err, tt.want)
		}
	}
}
