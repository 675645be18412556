package policy

import (
	"fmt"
	"os"
	"strings"

	"github.com/mlerl/mlerl/policy/gguf"
	"github.com/mlerl/mlerl/policy/native"
)

// Precisions: of the native engine's training products (train sft's
// matmul) and of a LoRA model's frozen base (base_storage). The native
// engine takes fp32 or bf16 only; auto is resolved here, once, where a
// stage builds its model (the stages' configs resolve it as they are
// loaded, so that the printed config and every checkpoint's config.json
// and model.json say what ran), and nowhere below: policy/native never
// chooses a precision from the CPU, and a test that builds a model names
// the precision it checks.
const (
	MatmulAuto = "auto" // bf16 where the CPU's bf16 products outrun float32 (AutoPrecision), else fp32
	MatmulFP32 = native.MatmulFP32
	MatmulBF16 = native.MatmulBF16
)

// AutoPrecisionEnv names the environment variable that forces what auto
// resolves to on this machine: bf16 or fp32 (unset or empty: the CPU
// decides, AutoPrecision). make test runs the packages that build models
// with auto once more with each value forced, so that a test which
// silently depends on the CPU it was written on fails on every machine;
// forcing bf16 where the CPU lacks AVX512_BF16 runs native's plain-Go
// bf16 kernel (the same sums, many times slower: for tests).
const AutoPrecisionEnv = "MLERL_AUTO_PRECISION"

// AutoPrecision is what auto means here: AutoPrecisionEnv's value when
// set, else bf16 where the native engine's bf16 products outrun its
// float32 ones (native.BF16Faster: AMX's tiles, or AMD's AVX512_BF16;
// Intel's AVX512_BF16 without the tiles is slower than float32) and fp32
// elsewhere. It is the one place that reads the variable.
func AutoPrecision() (string, error) {
	switch v := strings.ToLower(strings.TrimSpace(os.Getenv(AutoPrecisionEnv))); v {
	case "":
		if native.BF16Faster() {
			return MatmulBF16, nil
		}
		return MatmulFP32, nil
	case MatmulBF16, MatmulFP32:
		return v, nil
	default:
		return "", fmt.Errorf("%s=%q: want %s or %s (unset: %s where the CPU's bf16 products outrun float32, else %s)", AutoPrecisionEnv, v, MatmulBF16, MatmulFP32, MatmulBF16, MatmulFP32)
	}
}

// ResolvePrecision resolves a precision key's value: auto (or "", the
// value of configs written before the key existed) to AutoPrecision, fp32
// and bf16 as they are (any case); anything else is an error naming the
// valid values.
func ResolvePrecision(mode string) (string, error) {
	switch m := strings.ToLower(strings.TrimSpace(mode)); m {
	case MatmulAuto, "":
		return AutoPrecision()
	case MatmulFP32, MatmulBF16:
		return m, nil
	}
	return "", fmt.Errorf("precision %q: want %s, %s or %s", mode, MatmulAuto, MatmulFP32, MatmulBF16)
}

// ResolveMatmul resolves the precision of an engine's training products:
// on the native engine as ResolvePrecision does; other engines compute in
// their own precision, which auto (and fp32) names: fp32; bf16 there is
// an error.
func ResolveMatmul(engine, mode string) (string, error) {
	if engine == EngineNative {
		return ResolvePrecision(mode)
	}
	switch strings.ToLower(strings.TrimSpace(mode)) {
	case MatmulAuto, MatmulFP32, "":
		return MatmulFP32, nil
	}
	return "", fmt.Errorf("matmul %q: the %s engine computes in its own precision (auto or fp32; bf16 products are the %s engine's)", mode, engine, EngineNative)
}

// SetMatmul sets the precision of e's training products (auto resolved
// by ResolveMatmul) and returns the one it computes in: fp32 or bf16.
func SetMatmul(e Engine, mode string) (string, error) {
	r, err := ResolveMatmul(e.Name(), mode)
	if err != nil {
		return "", fmt.Errorf("policy: %w", err)
	}
	if s, ok := e.(interface{ SetMatmul(string) (string, error) }); ok {
		return s.SetMatmul(r)
	}
	return r, nil
}

// Base storages beyond the precisions: a frozen base kept in ggml's
// quantized blocks by the native engine (policy/native/quant.go).
// StorageQuant keeps each matrix of a GGUF file in the blocks the file
// stores it in (Q8_0, Q4_0, Q4_1; other types in float32); the formats
// quantize every base matrix on load (blocks of that format in the file
// are kept as they are), a Hugging Face folder's too.
const (
	StorageQuant = "quant"
	StorageQ8_0  = native.StorageQ8_0
	StorageQ4_0  = native.StorageQ4_0
	StorageQ4_1  = native.StorageQ4_1
)

// QuantizedStorage reports whether a resolved base storage keeps
// matrices in quantized blocks.
func QuantizedStorage(s string) bool {
	switch s {
	case StorageQuant, StorageQ8_0, StorageQ4_0, StorageQ4_1:
		return true
	}
	return false
}

// ResolveBaseStorage resolves base_storage for the policy spec names:
// auto (or "") becomes quant when spec is a GGUF file whose matrices
// are stored in blocks the native engine keeps (QuantizedGGUF: it reads
// the file's tensor table), else what AutoPrecision says; fp32, bf16,
// quant and the quantized formats stay as they are (any case). An empty
// spec (a stage that learns its base later, from a checkpoint) resolves
// auto by the CPU alone.
func ResolveBaseStorage(mode, spec string) (string, error) {
	switch m := strings.ToLower(strings.TrimSpace(mode)); m {
	case MatmulAuto, "":
		if kind, path, err := ParseSpec(spec); err == nil && kind == KindGGUF {
			q, err := QuantizedGGUF(path)
			if err != nil {
				return "", err
			}
			if q {
				return StorageQuant, nil
			}
		}
		return AutoPrecision()
	case MatmulFP32, MatmulBF16, StorageQuant, StorageQ8_0, StorageQ4_0, StorageQ4_1:
		return m, nil
	}
	return "", fmt.Errorf("base storage %q: want %s, %s, %s, %s, %s, %s or %s", mode, MatmulAuto, MatmulFP32, MatmulBF16, StorageQuant, StorageQ8_0, StorageQ4_0, StorageQ4_1)
}

// QuantizedGGUF reports whether the GGUF file at path stores any matrix
// in quantized blocks, which the native engine keeps (gguf.BlockFormat):
// base_storage auto then means quant. Only the header and the tensor
// table are read.
func QuantizedGGUF(path string) (bool, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, t := range f.Tensors {
		if _, ok := gguf.BlockFormat(t.Type); ok && len(t.Dims) == 2 {
			return true, nil
		}
	}
	return false, nil
}

// Activations of the native engine's products with a base kept in
// quantized blocks (Config.QuantActivations; policy/native/quant8.go):
// float32 inputs, or inputs quantized to int8 per block with integer
// dot products (llama.cpp's arithmetic: faster decoding, logits within
// native.Int8Bound of float32's). Only generation that trains nothing
// asks for int8 (evaluate's activations key): a sampler's
// log-probabilities must be the learner's to float32 rounding.
const (
	ActivationsFP32 = native.ActivationsFP32
	ActivationsInt8 = native.ActivationsInt8
)
