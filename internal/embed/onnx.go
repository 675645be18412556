package embed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/mlerl/mlerl/internal/ortenv"
)

// ONNXOptions configure [NewONNX].
type ONNXOptions struct {
	ModelPath     string // model.onnx
	TokenizerPath string // tokenizer.json (see [Tokenizer] for what is supported)
	// LibraryPath is the ONNX Runtime shared library; empty means
	// [DefaultLibraryPath].
	LibraryPath string
	MaxTokens   int // per text, special tokens included; <= 0: 128
	BatchSize   int // texts per model run; <= 0: 64
}

// ErrNoRuntime is wrapped when the ONNX Runtime shared library cannot be
// found or loaded.
var ErrNoRuntime = ortenv.ErrNoRuntime

// ONNX embeds with a local sentence-embedding model run by ONNX Runtime.
//
// The model must take int64 "input_ids" [batch, seq] and may take int64
// "attention_mask" and "token_type_ids" of the same shape (given 1 for real
// tokens, 0 for padding; all zeros); no other inputs. Its embedding comes
// from the first output named "last_hidden_state" or "token_embeddings"
// (float32 [batch, seq, dim], mean-pooled over the attention mask), else
// "sentence_embedding" (float32 [batch, dim], used as is). The result is
// L2-normalised.
type ONNX struct {
	tok       *Tokenizer
	sess      *ort.DynamicAdvancedSession
	inputs    []string // model input names, in the order the session takes them
	output    string
	pooled    bool // the output is already one vector per text
	maxTokens int
	batch     int
	name      string

	mu  sync.Mutex
	dim int
}

// initRuntime loads the ONNX Runtime library once per process
// (ortenv.Init), with how to get one when it cannot.
func initRuntime(path string) error {
	if err := ortenv.Init(path); err != nil {
		return fmt.Errorf("%w: run `make setup`, which installs one (from the npm package onnxruntime-node 1.24 to 1.30), or point embed.onnxruntime_library at a libonnxruntime.so", err)
	}
	return nil
}

// NewONNX loads the tokenizer and the model and checks the model's inputs
// and outputs. The caller calls Close.
func NewONNX(o ONNXOptions) (*ONNX, error) {
	if o.LibraryPath == "" {
		o.LibraryPath = DefaultLibraryPath()
	}
	if o.MaxTokens <= 0 {
		o.MaxTokens = 128
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 64
	}
	tok, err := LoadTokenizer(o.TokenizerPath)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(o.ModelPath); err != nil {
		return nil, fmt.Errorf("onnx model: %w", err)
	}
	if err := initRuntime(o.LibraryPath); err != nil {
		return nil, err
	}
	ins, outs, err := ort.GetInputOutputInfo(o.ModelPath)
	if err != nil {
		return nil, fmt.Errorf("onnx model %s: %w", o.ModelPath, err)
	}
	e := &ONNX{tok: tok, maxTokens: o.MaxTokens, batch: o.BatchSize, name: "onnx:" + modelName(o.ModelPath)}
	if err := e.checkInputs(o.ModelPath, ins); err != nil {
		return nil, err
	}
	if err := e.checkOutputs(o.ModelPath, outs); err != nil {
		return nil, err
	}
	opts, err := ort.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("onnx session options: %w", err)
	}
	defer opts.Destroy()
	e.sess, err = ort.NewDynamicAdvancedSession(o.ModelPath, e.inputs, []string{e.output}, opts)
	if err != nil {
		return nil, fmt.Errorf("onnx model %s: %w", o.ModelPath, err)
	}
	return e, nil
}

// modelName names a model by its file, or by its folder for the usual
// <model>/model.onnx (or <model>/onnx/model.onnx) layout.
func modelName(path string) string {
	base := strings.TrimSuffix(filepath.Base(path), ".onnx")
	if base != "model" {
		return base
	}
	dir := filepath.Dir(path)
	if filepath.Base(dir) == "onnx" {
		dir = filepath.Dir(dir)
	}
	return filepath.Base(dir)
}

func describe(infos []ort.InputOutputInfo) string {
	var s []string
	for _, i := range infos {
		s = append(s, fmt.Sprintf("%s %s %v", i.Name, i.DataType, i.Dimensions))
	}
	return strings.Join(s, "; ")
}

func (e *ONNX) checkInputs(path string, ins []ort.InputOutputInfo) error {
	known := []string{"input_ids", "attention_mask", "token_type_ids"}
	for _, in := range ins {
		if !slices.Contains(known, in.Name) {
			return fmt.Errorf("onnx model %s: unexpected input %q (the model's inputs: %s); a sentence-embedding model takes int64 input_ids and optionally attention_mask and token_type_ids", path, in.Name, describe(ins))
		}
		if in.OrtValueType != ort.ONNXTypeTensor || in.DataType != ort.TensorElementDataTypeInt64 || len(in.Dimensions) != 2 {
			return fmt.Errorf("onnx model %s: input %q is %s %v, want an int64 tensor [batch, seq] (the model's inputs: %s)", path, in.Name, in.DataType, in.Dimensions, describe(ins))
		}
		e.inputs = append(e.inputs, in.Name)
	}
	if !slices.Contains(e.inputs, "input_ids") {
		return fmt.Errorf("onnx model %s: no input_ids input (the model's inputs: %s)", path, describe(ins))
	}
	return nil
}

func (e *ONNX) checkOutputs(path string, outs []ort.InputOutputInfo) error {
	pick := func(names ...string) *ort.InputOutputInfo {
		for _, n := range names {
			for i := range outs {
				if outs[i].Name == n {
					return &outs[i]
				}
			}
		}
		return nil
	}
	want := "a float32 last_hidden_state or token_embeddings [batch, seq, dim], or sentence_embedding [batch, dim]"
	out := pick("last_hidden_state", "token_embeddings")
	rank := 3
	if out == nil {
		out, rank = pick("sentence_embedding"), 2
	}
	if out == nil {
		return fmt.Errorf("onnx model %s: no usable output (the model's outputs: %s); want %s", path, describe(outs), want)
	}
	if out.OrtValueType != ort.ONNXTypeTensor || out.DataType != ort.TensorElementDataTypeFloat || len(out.Dimensions) != rank {
		return fmt.Errorf("onnx model %s: output %q is %s %v; want %s", path, out.Name, out.DataType, out.Dimensions, want)
	}
	e.output, e.pooled = out.Name, rank == 2
	if d := out.Dimensions[rank-1]; d > 0 {
		e.dim = int(d)
	}
	return nil
}

// Dim implements [Embedder]; 0 until the first run when the model's
// output dimension is symbolic.
func (e *ONNX) Dim() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dim
}

// Name implements [Embedder].
func (e *ONNX) Name() string { return e.name }

// Close releases the session (the process-wide runtime stays loaded).
func (e *ONNX) Close() error {
	if e.sess == nil {
		return nil
	}
	err := e.sess.Destroy()
	e.sess = nil
	return err
}

// Embed implements [Embedder].
func (e *ONNX) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, 0, len(texts))
	for lo := 0; lo < len(texts); lo += e.batch {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hi := min(lo+e.batch, len(texts))
		vecs, err := e.run(texts[lo:hi])
		if err != nil {
			return nil, fmt.Errorf("%s: texts %d-%d: %w", e.name, lo, hi-1, err)
		}
		out = append(out, vecs...)
	}
	return out, nil
}

// run embeds one batch: pad to its longest text, run, pool, normalise.
func (e *ONNX) run(texts []string) ([][]float32, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sess == nil {
		return nil, errors.New("embedder is closed")
	}
	enc := make([][]int64, len(texts))
	seq := 1 // a zero-length axis is not worth the runtime's corner cases
	for i, t := range texts {
		enc[i] = e.tok.Encode(t, e.maxTokens)
		seq = max(seq, len(enc[i]))
	}
	b := len(texts)
	ids, mask := make([]int64, b*seq), make([]int64, b*seq)
	for i, row := range enc {
		for j := range seq {
			if j < len(row) {
				ids[i*seq+j], mask[i*seq+j] = row[j], 1
			} else {
				ids[i*seq+j] = e.tok.PadID()
			}
		}
	}
	shape := ort.NewShape(int64(b), int64(seq))
	inputs := make([]ort.Value, len(e.inputs))
	defer func() {
		for _, v := range inputs {
			if v != nil {
				v.Destroy()
			}
		}
	}()
	for k, name := range e.inputs {
		data := make([]int64, b*seq) // token_type_ids: all zeros
		switch name {
		case "input_ids":
			data = ids
		case "attention_mask":
			data = mask
		}
		t, err := ort.NewTensor(shape, data)
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", name, err)
		}
		inputs[k] = t
	}
	outputs := []ort.Value{nil}
	if err := e.sess.Run(inputs, outputs); err != nil {
		return nil, err
	}
	defer outputs[0].Destroy()
	t, ok := outputs[0].(*ort.Tensor[float32])
	if !ok {
		return nil, fmt.Errorf("output %s is %T, want a float32 tensor", e.output, outputs[0])
	}
	dims, data := t.GetShape(), t.GetData()
	var dim int
	switch {
	case e.pooled && len(dims) == 2 && dims[0] == int64(b):
		dim = int(dims[1])
	case !e.pooled && len(dims) == 3 && dims[0] == int64(b) && dims[1] == int64(seq):
		dim = int(dims[2])
	default:
		return nil, fmt.Errorf("output %s has shape %v for a batch of %d texts of %d tokens", e.output, dims, b, seq)
	}
	if e.dim == 0 {
		e.dim = dim
	}
	if dim != e.dim || dim == 0 {
		return nil, fmt.Errorf("output %s has dimension %d, want %d", e.output, dim, e.dim)
	}
	vecs := make([][]float32, b)
	for i := range b {
		v := make([]float32, dim)
		if e.pooled {
			copy(v, data[i*dim:(i+1)*dim])
		} else {
			meanPool(v, data[i*seq*dim:(i+1)*seq*dim], mask[i*seq:(i+1)*seq])
		}
		normalize(v)
		vecs[i] = v
	}
	return vecs, nil
}

// meanPool sets v to the mean of the hidden rows [seq][dim] whose mask is 1
// (zero when no token is real).
func meanPool(v, hidden []float32, mask []int64) {
	dim := len(v)
	var n float32
	for j, m := range mask {
		if m == 0 {
			continue
		}
		n++
		for k, x := range hidden[j*dim : (j+1)*dim] {
			v[k] += x
		}
	}
	if n > 0 {
		for k := range v {
			v[k] /= n
		}
	}
}
