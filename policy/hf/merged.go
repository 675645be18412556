package hf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// filesCopied are the tokenizer and generation files a merged folder takes
// from its checkpoint, when there (transformers, PEFT and vLLM read them).
var filesCopied = []string{
	"tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
	"special_tokens_map.json", "generation_config.json",
}

// WriteMerged writes c with ad merged in (W + alpha/r B A on every target;
// ad may be nil to re-save c) as a Hugging Face folder in dir, which must
// not exist or be empty: config.json (c's, with dtype set), one
// model.safetensors in dtype (bf16/f16 rounded to nearest even, as
// PyTorch's .to does), and c's tokenizer and generation files. The merge
// runs in float64 from the stored values, then rounds once. A failure
// leaves nothing behind.
func WriteMerged(dir string, c *Checkpoint, ad *Adapter, dtype DType) error {
	merge, err := MergeFunc(c, ad)
	if err != nil {
		return err
	}
	return WriteModel(dir, c, merge, dtype)
}

// MergeFunc is WriteMerged's weight function, for [WriteModel] or another
// writer (policy/gguf's): a tensor by its Hugging Face name with ad's
// update added (W + alpha/r B A, in float64 from the stored values,
// rounded once); other tensors, and every one when ad is nil, unchanged.
func MergeFunc(c *Checkpoint, ad *Adapter) (func(name string, stored []float32) ([]float32, error), error) {
	if ad != nil {
		if err := ad.Check(c.Arch); err != nil {
			return nil, err
		}
	}
	return func(n string, v []float32) ([]float32, error) {
		if ad != nil {
			if m, ok := ad.Modules[strings.TrimSuffix(n, ".weight")]; ok {
				d := m.scaledDelta(ad.R, ad.Scale())
				for i := range v {
					v[i] = float32(float64(v[i]) + d[i])
				}
			}
		}
		return v, nil
	}, nil
}

// WriteModel writes c as a Hugging Face folder in dir, as WriteMerged
// does, with every tensor (by its Hugging Face name, in the files'
// layout) passed through weight first: a fully fine-tuned model's own
// values replace the checkpoint's there.
func WriteModel(dir string, c *Checkpoint, weight func(name string, stored []float32) ([]float32, error), dtype DType) error {
	if dtype.Size() == 0 {
		return fmt.Errorf("merged dtype %q: want F32, BF16 or F16", dtype)
	}
	cfg, err := mergedConfig(c, dtype)
	if err != nil {
		return err
	}
	var ts []Tensor
	for _, n := range c.Weights.Names() {
		if harmless.MatchString(n) {
			continue
		}
		v, info, err := c.Weights.Float32(n)
		if err != nil {
			return err
		}
		if v, err = weight(n, v); err != nil {
			return err
		}
		if len(v) != info.Elems() {
			return fmt.Errorf("tensor %s: %d values for shape %v", n, len(v), info.Shape)
		}
		ts = append(ts, Tensor{Name: n, DType: dtype, Shape: info.Shape, Data: v})
	}
	return writeFolder(dir, func(tmp string) error {
		if err := os.WriteFile(filepath.Join(tmp, "config.json"), cfg, 0o644); err != nil {
			return err
		}
		if err := writeSafetensorsFile(filepath.Join(tmp, singleFile), ts, map[string]string{"format": "pt"}); err != nil {
			return err
		}
		for _, f := range filesCopied {
			b, err := c.file(f)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(tmp, f), b, 0o644); err != nil {
				return err
			}
		}
		return nil
	})
}

// mergedConfig is c's config.json with its dtype (and torch_dtype, where the
// file has that older key) set to dtype; other fields are kept as written.
func mergedConfig(c *Checkpoint, dtype DType) ([]byte, error) {
	path := c.where("config.json")
	b, err := c.file("config.json")
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	name, _ := json.Marshal(dtype.torchName())
	if _, ok := m["torch_dtype"]; ok {
		m["torch_dtype"] = name
	}
	m["dtype"] = name
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}
