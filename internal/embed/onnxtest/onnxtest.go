// Package onnxtest writes small, real ONNX models and tokenizer.json files
// for tests of the ONNX embedder: the models are encoded with the protobuf
// wire format (onnx.proto's field numbers), so no Python or exporter is
// needed.
//
// Start with [TokenEmbeddingModel]: last_hidden_state = tanh(E[input_ids])
// * attention_mask, whose mean pooling a test can recompute in Go.
package onnxtest

import (
	"encoding/binary"
	"encoding/json"
	"math"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/mlerl/mlerl/internal/deps"
)

// ONNX TensorProto data types.
const (
	Float = 1
	Int64 = 7
)

func field(num protowire.Number, b []byte) []byte {
	out := protowire.AppendTag(nil, num, protowire.BytesType)
	return protowire.AppendBytes(out, b)
}

func str(num protowire.Number, s string) []byte { return field(num, []byte(s)) }

func varint(num protowire.Number, v int64) []byte {
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

// Graph field builders: each returns one encoded GraphProto field.

// Name is the graph's name.
func Name(s string) []byte { return str(2, s) }

// Node is a NodeProto of op type op.
func Node(op string, inputs, outputs []string, attrs ...[]byte) []byte {
	var b []byte
	for _, in := range inputs {
		b = append(b, str(1, in)...)
	}
	for _, out := range outputs {
		b = append(b, str(2, out)...)
	}
	b = append(b, str(4, op)...)
	for _, a := range attrs {
		b = append(b, field(5, a)...)
	}
	return field(1, b)
}

// IntAttr is an integer attribute for Node.
func IntAttr(name string, v int64) []byte {
	return cat(str(1, name), varint(3, v), varint(20, 2)) // AttributeProto type INT
}

// FloatInitializer is a float32 constant tensor.
func FloatInitializer(name string, dims []int64, data []float32) []byte {
	var b []byte
	for _, d := range dims {
		b = append(b, varint(1, d)...)
	}
	raw := make([]byte, 4*len(data))
	for i, x := range data {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
	}
	return field(5, cat(b, varint(2, Float), str(8, name), field(9, raw)))
}

// Int64Initializer is a 1-d int64 constant tensor.
func Int64Initializer(name string, data []int64) []byte {
	raw := make([]byte, 8*len(data))
	for i, x := range data {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(x))
	}
	return field(5, cat(varint(1, int64(len(data))), varint(2, Int64), str(8, name), field(9, raw)))
}

func valueInfo(name string, elemType int64, dims []any) []byte {
	var shape []byte
	for _, d := range dims {
		switch d := d.(type) {
		case int:
			shape = append(shape, field(1, varint(1, int64(d)))...)
		case string:
			shape = append(shape, field(1, str(2, d))...)
		}
	}
	tensorType := cat(varint(1, elemType), field(2, shape))
	return cat(str(1, name), field(2, field(1, tensorType)))
}

// Input is a graph input tensor; dims are sizes (int) or symbolic names (string).
func Input(name string, elemType int64, dims ...any) []byte {
	return field(11, valueInfo(name, elemType, dims))
}

// Output is a graph output tensor.
func Output(name string, elemType int64, dims ...any) []byte {
	return field(12, valueInfo(name, elemType, dims))
}

// Model wraps graph fields into a ModelProto (IR version 8, opset 13).
func Model(graph ...[]byte) []byte {
	return cat(varint(1, 8), str(2, "mlerl-onnxtest"), field(7, cat(graph...)), field(8, cat(str(1, ""), varint(2, 13))))
}

// TokenEmbeddingModel computes last_hidden_state [batch, seq, dim] =
// tanh(E[input_ids]) * attention_mask for the vocab x dim table E.
func TokenEmbeddingModel(table [][]float32) []byte {
	dim := len(table[0])
	var flat []float32
	for _, r := range table {
		flat = append(flat, r...)
	}
	return Model(
		Name("token-embedding"),
		Node("Gather", []string{"E", "input_ids"}, []string{"emb"}),
		Node("Tanh", []string{"emb"}, []string{"h"}),
		Node("Unsqueeze", []string{"attention_mask", "axes"}, []string{"m3"}),
		Node("Cast", []string{"m3"}, []string{"m3f"}, IntAttr("to", Float)),
		Node("Mul", []string{"h", "m3f"}, []string{"last_hidden_state"}),
		FloatInitializer("E", []int64{int64(len(table)), int64(dim)}, flat),
		Int64Initializer("axes", []int64{2}),
		Input("input_ids", Int64, "batch", "seq"),
		Input("attention_mask", Int64, "batch", "seq"),
		Output("last_hidden_state", Float, "batch", "seq", dim),
	)
}

// Table returns a deterministic vocab x dim embedding table.
func Table(vocab, dim int) [][]float32 {
	t := make([][]float32, vocab)
	for i := range t {
		t[i] = make([]float32, dim)
		for j := range t[i] {
			t[i][j] = float32(math.Sin(float64(i*dim+j)*0.7)) * 1.5
		}
	}
	return t
}

// WordLevelTokenizer returns a tokenizer.json with a lower-casing
// normalizer, the Whitespace pre-tokenizer, a WordLevel model over
// "<unk>" (id 0) then words (ids 1...), and no special tokens.
func WordLevelTokenizer(words []string) []byte {
	vocab := map[string]int{"<unk>": 0}
	for _, w := range words {
		if _, ok := vocab[w]; !ok {
			vocab[w] = len(vocab)
		}
	}
	b, _ := json.Marshal(map[string]any{
		"normalizer":    map[string]string{"type": "Lowercase"},
		"pre_tokenizer": map[string]string{"type": "Whitespace"},
		"model":         map[string]any{"type": "WordLevel", "unk_token": "<unk>", "vocab": vocab},
	})
	return b
}

// Library finds the ONNX Runtime library `make setup` installs,
// onnxruntime/libonnxruntime.so.1 in the deps folder (see deps.Find). ok
// is false when it is not installed.
func Library() (path string, ok bool) {
	p, err := deps.Find("onnxruntime/libonnxruntime.so.1")
	return p, err == nil
}
