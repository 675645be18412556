package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Index file and single-file names, as transformers writes them.
const (
	singleFile = "model.safetensors"
	indexFile  = "model.safetensors.index.json"
)

// Tensors are a checkpoint's weights by their Hugging Face names, in the
// files' layout, read lazily: safetensors files ([Weights]), or a GGUF
// file's tensors converted (policy/gguf). Close it when done.
type Tensors interface {
	// Names returns every tensor's name, sorted.
	Names() []string
	// Info describes a tensor: its shape as transformers holds it.
	Info(name string) (TensorInfo, bool)
	// Float32 returns a tensor as float32, row-major in Info's shape.
	Float32(name string) ([]float32, TensorInfo, error)
	Close() error
}

// Weights is a checkpoint's tensors: one model.safetensors, or the shards
// that model.safetensors.index.json's weight_map names. Tensors are read
// lazily. Close it when done.
type Weights struct {
	files []*File
	where map[string]*File
}

// OpenWeights opens dir's model.safetensors, or its sharded set when only
// the index is there. Every shard is checked as [OpenFile] does, and the
// index must name every tensor of the shards exactly once and nothing else.
func OpenWeights(dir string) (*Weights, error) {
	single := filepath.Join(dir, singleFile)
	if _, err := os.Stat(single); err == nil {
		f, err := OpenFile(single)
		if err != nil {
			return nil, err
		}
		w := &Weights{files: []*File{f}, where: map[string]*File{}}
		for n := range f.tensors {
			w.where[n] = f
		}
		return w, nil
	}
	idxPath := filepath.Join(dir, indexFile)
	raw, err := os.ReadFile(idxPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: neither %s nor %s is there: a Hugging Face checkpoint folder holds its weights in safetensors (convert a pytorch_model.bin with save_pretrained(..., safe_serialization=True))", dir, singleFile, indexFile)
	}
	if err != nil {
		return nil, err
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, fmt.Errorf("%s: %w", idxPath, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("%s: weight_map is empty or missing", idxPath)
	}
	shards := map[string]bool{}
	for name, shard := range idx.WeightMap {
		if shard == "" || strings.ContainsAny(shard, `/\`) || shard == "." || shard == ".." {
			return nil, fmt.Errorf("%s: weight_map[%q] is %q: want a file name in the same folder", idxPath, name, shard)
		}
		shards[shard] = true
	}
	names := make([]string, 0, len(shards))
	for s := range shards {
		names = append(names, s)
	}
	sort.Strings(names)
	w := &Weights{where: map[string]*File{}}
	for _, s := range names {
		f, err := OpenFile(filepath.Join(dir, s))
		if err != nil {
			w.Close()
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("%s names shard %s, which is missing: copy every shard of the checkpoint", idxPath, s)
			}
			return nil, err
		}
		w.files = append(w.files, f)
		for n := range f.tensors {
			if other, dup := w.where[n]; dup {
				w.Close()
				return nil, fmt.Errorf("%s: tensor %q is in both %s and %s", dir, n, filepath.Base(other.Path), s)
			}
			if idx.WeightMap[n] != s {
				w.Close()
				return nil, fmt.Errorf("%s: shard %s holds tensor %q, which %s maps to %q", dir, s, n, indexFile, idx.WeightMap[n])
			}
			w.where[n] = f
		}
	}
	for n, s := range idx.WeightMap {
		if w.where[n] == nil {
			w.Close()
			return nil, fmt.Errorf("%s maps tensor %q to %s, which does not hold it", idxPath, n, s)
		}
	}
	return w, nil
}

// Close closes every file.
func (w *Weights) Close() error {
	var first error
	for _, f := range w.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Names returns every tensor's name, sorted.
func (w *Weights) Names() []string {
	out := make([]string, 0, len(w.where))
	for n := range w.where {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Info describes a tensor.
func (w *Weights) Info(name string) (TensorInfo, bool) {
	f, ok := w.where[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Info(name)
}

// Float32 returns a tensor converted to float32, row-major, in the shape
// stored (Linear weights [out, in], as transformers keeps them).
func (w *Weights) Float32(name string) ([]float32, TensorInfo, error) {
	f, ok := w.where[name]
	if !ok {
		return nil, TensorInfo{}, fmt.Errorf("tensor %q: %w", name, ErrNoTensor)
	}
	return f.Float32(name)
}

// Raw returns a tensor's stored bytes.
func (w *Weights) Raw(name string) ([]byte, TensorInfo, error) {
	f, ok := w.where[name]
	if !ok {
		return nil, TensorInfo{}, fmt.Errorf("tensor %q: %w", name, ErrNoTensor)
	}
	return f.Raw(name)
}

// BF16 returns a BF16 tensor's raw 16-bit values.
func (w *Weights) BF16(name string) ([]uint16, TensorInfo, error) {
	f, ok := w.where[name]
	if !ok {
		return nil, TensorInfo{}, fmt.Errorf("tensor %q: %w", name, ErrNoTensor)
	}
	return f.BF16(name)
}
