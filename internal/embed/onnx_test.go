package embed

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// The tests below write real ONNX files with the protobuf wire format
// (onnx.proto field numbers) and run them through ONNX Runtime.

func pbBytes(num protowire.Number, b []byte) []byte {
	out := protowire.AppendTag(nil, num, protowire.BytesType)
	return protowire.AppendBytes(out, b)
}

func pbString(num protowire.Number, s string) []byte { return pbBytes(num, []byte(s)) }

func pbInt(num protowire.Number, v int64) []byte {
	out := protowire.AppendTag(nil, num, protowire.VarintType)
	return protowire.AppendVarint(out, uint64(v))
}

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// ONNX TensorProto data types.
const (
	onnxFloat = 1
	onnxInt64 = 7
)

// valueInfo is a ValueInfoProto: a tensor of elemType whose dims are
// numbers or symbolic names.
func valueInfo(name string, elemType int64, dims ...any) []byte {
	var shape []byte
	for _, d := range dims {
		switch d := d.(type) {
		case int:
			shape = append(shape, pbBytes(1, pbInt(1, int64(d)))...)
		case string:
			shape = append(shape, pbBytes(1, pbString(2, d))...)
		}
	}
	tensorType := cat(pbInt(1, elemType), pbBytes(2, shape))
	return cat(pbString(1, name), pbBytes(2, pbBytes(1, tensorType)))
}

func node(op string, inputs, outputs []string, attrs ...[]byte) []byte {
	var b []byte
	for _, in := range inputs {
		b = append(b, pbString(1, in)...)
	}
	for _, out := range outputs {
		b = append(b, pbString(2, out)...)
	}
	b = append(b, pbString(4, op)...)
	for _, a := range attrs {
		b = append(b, pbBytes(5, a)...)
	}
	return b
}

func intAttr(name string, v int64) []byte {
	return cat(pbString(1, name), pbInt(3, v), pbInt(20, 2)) // type INT
}

func floatInitializer(name string, dims []int64, data []float32) []byte {
	var b []byte
	for _, d := range dims {
		b = append(b, pbInt(1, d)...)
	}
	raw := make([]byte, 4*len(data))
	for i, x := range data {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
	}
	return cat(b, pbInt(2, onnxFloat), pbString(8, name), pbBytes(9, raw))
}

func int64Initializer(name string, data []int64) []byte {
	raw := make([]byte, 8*len(data))
	for i, x := range data {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(x))
	}
	return cat(pbInt(1, int64(len(data))), pbInt(2, onnxInt64), pbString(8, name), pbBytes(9, raw))
}

// model wraps graph fields into a ModelProto (IR 8, opset 13).
func model(graph ...[]byte) []byte {
	return cat(pbInt(1, 8), pbString(2, "mlerl-test"), pbBytes(7, cat(graph...)), pbBytes(8, cat(pbString(1, ""), pbInt(2, 13))))
}

// embeddingModel computes last_hidden_state = tanh(E[input_ids]) *
// attention_mask for a vocab x dim table E.
func embeddingModel(table [][]float32) []byte {
	dim := len(table[0])
	var flat []float32
	for _, r := range table {
		flat = append(flat, r...)
	}
	return model(
		pbString(2, "token-embedding"),
		pbBytes(1, node("Gather", []string{"E", "input_ids"}, []string{"emb"})),
		pbBytes(1, node("Tanh", []string{"emb"}, []string{"h"})),
		pbBytes(1, node("Unsqueeze", []string{"attention_mask", "axes"}, []string{"m3"})),
		pbBytes(1, node("Cast", []string{"m3"}, []string{"m3f"}, intAttr("to", onnxFloat))),
		pbBytes(1, node("Mul", []string{"h", "m3f"}, []string{"last_hidden_state"})),
		pbBytes(5, floatInitializer("E", []int64{int64(len(table)), int64(dim)}, flat)),
		pbBytes(5, int64Initializer("axes", []int64{2})),
		pbBytes(11, valueInfo("input_ids", onnxInt64, "batch", "seq")),
		pbBytes(11, valueInfo("attention_mask", onnxInt64, "batch", "seq")),
		pbBytes(12, valueInfo("last_hidden_state", onnxFloat, "batch", "seq", dim)),
	)
}

// testLibrary finds the ONNX Runtime library that `make setup` installs.
func testLibrary(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("MLERL_DEPS"); d != "" {
		return filepath.Join(d, "onnxruntime", "libonnxruntime.so.1")
	}
	dir, _ := os.Getwd()
	for ; dir != filepath.Dir(dir); dir = filepath.Dir(dir) {
		p := filepath.Join(dir, ".deps", "onnxruntime", "libonnxruntime.so.1")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skip("ONNX Runtime library not installed: run `make setup`")
	return ""
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
	m, tok := writeFiles(t, embeddingModel([][]float32{{1}}))
	_, err := NewONNX(ONNXOptions{ModelPath: m, TokenizerPath: tok, LibraryPath: filepath.Join(t.TempDir(), "libonnxruntime.so.1")})
	if !errors.Is(err, ErrNoRuntime) || !strings.Contains(err.Error(), "make setup") {
		t.Errorf("got error %v, want ErrNoRuntime saying `make setup` installs it", err)
	}
}

func TestONNXEmbedderMatchesGo(t *testing.T) {
	lib := testLibrary(t)
	const vocab, dim = 16, 6
	table := make([][]float32, vocab)
	for i := range table {
		table[i] = make([]float32, dim)
		for j := range table[i] {
			table[i][j] = float32(math.Sin(float64(i*dim+j)*0.7)) * 1.5
		}
	}
	m, tokPath := writeFiles(t, embeddingModel(table))
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
			model(pbString(2, "g"),
				pbBytes(1, node("Identity", []string{"pixel_values"}, []string{"last_hidden_state"})),
				pbBytes(11, valueInfo("pixel_values", onnxFloat, "batch", 3, 4)),
				pbBytes(12, valueInfo("last_hidden_state", onnxFloat, "batch", 3, 4))),
			`unexpected input "pixel_values"`,
		},
		{
			"classifier output",
			model(pbString(2, "g"),
				pbBytes(1, node("Cast", []string{"input_ids"}, []string{"logits"}, intAttr("to", onnxFloat))),
				pbBytes(11, valueInfo("input_ids", onnxInt64, "batch", "seq")),
				pbBytes(12, valueInfo("logits", onnxFloat, "batch", "seq"))),
			`no usable output (the model's outputs: logits`,
		},
		{
			"float input_ids",
			model(pbString(2, "g"),
				pbBytes(1, node("Unsqueeze", []string{"input_ids", "axes"}, []string{"last_hidden_state"})),
				pbBytes(5, int64Initializer("axes", []int64{2})),
				pbBytes(11, valueInfo("input_ids", onnxFloat, "batch", "seq")),
				pbBytes(12, valueInfo("last_hidden_state", onnxFloat, "batch", "seq", 1))),
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
