package embed

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/internal/embed/onnxtest"
)

// The tests below write real ONNX files (internal/embed/onnxtest) and run
// them through ONNX Runtime.

// testLibrary finds the ONNX Runtime library that `make setup` installs.
func testLibrary(t *testing.T) string {
	t.Helper()
	lib, ok := onnxtest.Library()
	if !ok {
		t.Skip("ONNX Runtime library not installed: run `make setup`")
	}
	return lib
}

const testVocab = `{"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "scale": 4, "the": 5, "features": 6, "##s": 7, "use": 8, "a": 9, "random": 10, "forest": 11, ",": 12, "more": 13, "tree": 14, "feature": 15}`

const testTokenizer = `{
  "version": "1.0",
  "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": null, "lowercase": true},
  "pre_tokenizer": {"type": "BertPreTokenizer"},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
    "pair": [],
    "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]}, "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
  "padding": {"pad_id": 0, "pad_token": "[PAD]"},
  "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100, "vocab": ` + testVocab + `}
}`

func writeFiles(t *testing.T, modelBytes []byte) (modelPath, tokPath string) {
	dir := t.TempDir()
	modelPath, tokPath = filepath.Join(dir, "model.onnx"), filepath.Join(dir, "tokenizer.json")
	if err := os.WriteFile(modelPath, modelBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokPath, []byte(testTokenizer), 0o644); err != nil {
		t.Fatal(err)
	}
	return modelPath, tokPath
}

// TestONNXMissingLibrary comes first in this file: once a test has loaded
// the runtime, the process keeps it.
func TestONNXMissingLibrary(t *testing.T) {
	m, tok := writeFiles(t, onnxtest.TokenEmbeddingModel([][]float32{{1}}))
	_, err := NewONNX(ONNXOptions{ModelPath: m, TokenizerPath: tok, LibraryPath: filepath.Join(t.TempDir(), "libonnxruntime.so.1")})
	if !errors.Is(err, ErrNoRuntime) || !strings.Contains(err.Error(), "make setup") {
		t.Errorf("got error %v, want ErrNoRuntime saying `make setup` installs it", err)
	}
}

func TestONNXEmbedderMatchesGo(t *testing.T) {
	lib := testLibrary(t)
	const vocab, dim = 16, 6
	table := onnxtest.Table(vocab, dim)
	m, tokPath := writeFiles(t, onnxtest.TokenEmbeddingModel(table))
	e, err := NewONNX(ONNXOptions{ModelPath: m, TokenizerPath: tokPath, LibraryPath: lib, BatchSize: 2, MaxTokens: 6})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Dim() != dim {
		t.Errorf("got Dim %d want %d", e.Dim(), dim)
	}
	texts := []string{"Scale the features", "Use a random forest, more trees", "", "unknown words only", "feature"}
	got, err := e.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := ParseTokenizer([]byte(testTokenizer))
	for i, text := range texts {
		ids := tok.Encode(text, 6)
		want := make([]float32, dim) // mean of tanh(E[id]) over the tokens, L2-normalised
		for _, id := range ids {
			for j := range want {
				want[j] += float32(math.Tanh(float64(table[id][j]))) / float32(len(ids))
			}
		}
		normalize(want)
		for j := range want {
			if math.Abs(float64(got[i][j]-want[j])) > 1e-5 {
				t.Errorf("text %q: got %v want %v", text, got[i], want)
				break
			}
		}
	}
	if e.Name() != "onnx:"+filepath.Base(filepath.Dir(m)) {
		t.Errorf("got name %q", e.Name())
	}
}

func TestONNXUnexpectedModel(t *testing.T) {
	lib := testLibrary(t)
	tests := []struct {
		name  string
		model []byte
		want  string
	}{
		{
			"image model input",
			onnxtest.Model(onnxtest.Name("g"),
				onnxtest.Node("Identity", []string{"pixel_values"}, []string{"last_hidden_state"}),
				onnxtest.Input("pixel_values", onnxtest.Float, "batch", 3, 4),
				onnxtest.Output("last_hidden_state", onnxtest.Float, "batch", 3, 4)),
			`unexpected input "pixel_values"`,
		},
		{
			"classifier output",
			onnxtest.Model(onnxtest.Name("g"),
				onnxtest.Node("Cast", []string{"input_ids"}, []string{"logits"}, onnxtest.IntAttr("to", onnxtest.Float)),
				onnxtest.Input("input_ids", onnxtest.Int64, "batch", "seq"),
				onnxtest.Output("logits", onnxtest.Float, "batch", "seq")),
			`no usable output (the model's outputs: logits`,
		},
		{
			"float input_ids",
			onnxtest.Model(onnxtest.Name("g"),
				onnxtest.Node("Unsqueeze", []string{"input_ids", "axes"}, []string{"last_hidden_state"}),
				onnxtest.Int64Initializer("axes", []int64{2}),
				onnxtest.Input("input_ids", onnxtest.Float, "batch", "seq"),
				onnxtest.Output("last_hidden_state", onnxtest.Float, "batch", "seq", 1)),
			`input "input_ids" is`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, tok := writeFiles(t, tt.model)
			_, err := NewONNX(ONNXOptions{ModelPath: m, TokenizerPath: tok, LibraryPath: lib})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
