package gguf

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"

	"github.com/mlerl/mlerl/policy/ggml"
	"github.com/mlerl/mlerl/policy/hf"
)

// family is what a GGUF general.architecture is in transformers' terms.
type family struct {
	architecture, modelType string
	// permuted: llama.cpp's converter reorders the rows of Q and K within
	// each head for its RoPE (see permuteRows).
	permuted bool
	// layerTensors are the family's tensors of a block beyond the shared
	// ones, GGUF suffix -> Hugging Face suffix.
	layerTensors map[string]string
}

var families = map[string]family{
	"llama": {architecture: "LlamaForCausalLM", modelType: "llama", permuted: true},
	"qwen2": {architecture: "Qwen2ForCausalLM", modelType: "qwen2", layerTensors: map[string]string{
		"attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias", "attn_v.bias": "self_attn.v_proj.bias"}},
	"qwen3": {architecture: "Qwen3ForCausalLM", modelType: "qwen3", layerTensors: map[string]string{
		"attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight"}},
}

// Tensor names: GGUF's (llama.cpp's gguf-py/gguf/constants.py) and the
// Hugging Face ones they stand for, shared by the three families.
var (
	globalTensors = map[string]string{
		"token_embd.weight":  "model.embed_tokens.weight",
		"output_norm.weight": "model.norm.weight",
		"output.weight":      "lm_head.weight", // absent: tied to token_embd
	}
	layerTensors = map[string]string{
		"attn_norm.weight":   "input_layernorm.weight",
		"ffn_norm.weight":    "post_attention_layernorm.weight",
		"attn_q.weight":      "self_attn.q_proj.weight",
		"attn_k.weight":      "self_attn.k_proj.weight",
		"attn_v.weight":      "self_attn.v_proj.weight",
		"attn_output.weight": "self_attn.o_proj.weight",
		"ffn_gate.weight":    "mlp.gate_proj.weight",
		"ffn_up.weight":      "mlp.up_proj.weight",
		"ffn_down.weight":    "mlp.down_proj.weight",
	}
	blockName = regexp.MustCompile(`^blk\.(\d+)\.(.+)$`)
)

func supported() string { return "llama (Llama 2/3, SmolLM2), qwen2 and qwen3" }

// Load reads the GGUF file at path as the Hugging Face checkpoint it
// converts to, the way transformers' GGUF loader does, and checks it with
// policy/hf's checks: general.architecture (llama, qwen2 or qwen3) and its
// hyperparameters make config.json; tensors blk.N.attn_q... take their
// Hugging Face names and [out, in] layout, llama's Q and K rows put back
// in transformers' RoPE order; tokenizer.ggml.* makes tokenizer.json
// (tokenizer.go) and tokenizer.chat_template tokenizer_config.json. The
// checkpoint's Dir is the file; its Files hold those files, which a
// merged folder writes out; its weights are dequantized to float32 when
// read. Every refusal is one line naming the file, the key or tensor and
// the problem; nothing is written.
func Load(path string) (*hf.Checkpoint, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	f, err := Open(abs)
	if err != nil {
		return nil, err
	}
	ck, err := fromFile(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return ck, nil
}

// Converted is what Load makes of a file before policy/hf checks it.
type Converted struct {
	Family string // general.architecture
	// Files are config.json, tokenizer.json and tokenizer_config.json.
	Files   map[string][]byte
	Weights *Weights
}

func fromFile(f *File) (*hf.Checkpoint, error) {
	c, err := Convert(f)
	if err != nil {
		return nil, err
	}
	return hf.Assemble(f.Path, c.Files, c.Weights)
}

// Convert maps an open file onto Hugging Face's names and files (Load
// without policy/hf's checks).
func Convert(f *File) (*Converted, error) {
	arch, _, err := f.String("general.architecture")
	if err != nil {
		return nil, err
	}
	fam, ok := families[arch]
	if !ok {
		if arch == "" {
			return nil, fmt.Errorf("%s: metadata \"general.architecture\" is missing: not a model file llama.cpp's converter wrote", f.Path)
		}
		return nil, fmt.Errorf("%s: metadata \"general.architecture\" is %q: mlerl runs %s models", f.Path, arch, supported())
	}
	w, err := mapTensors(f, arch, fam)
	if err != nil {
		return nil, err
	}
	cfg, v, err := config(f, arch, fam, w)
	if err != nil {
		return nil, err
	}
	tmpl, ok, err := f.String("tokenizer.chat_template")
	if err != nil {
		return nil, err
	}
	if !ok || tmpl == "" {
		return nil, fmt.Errorf("%s: metadata \"tokenizer.chat_template\" is missing: mlerl prompts the policy in its chat format; use an instruct model's GGUF file", f.Path)
	}
	maxLen, _ := cfg["max_position_embeddings"].(int)
	cfgJSON, _ := json.MarshalIndent(cfg, "", "  ")
	return &Converted{Family: arch, Weights: w, Files: map[string][]byte{
		"config.json":           append(cfgJSON, '\n'),
		"tokenizer.json":        v.tokenizerJSON(),
		"tokenizer_config.json": v.tokenizerConfigJSON(tmpl, maxLen),
	}}, nil
}

// mapTensors names every tensor of f in Hugging Face's terms, refusing
// one the family does not have.
func mapTensors(f *File, arch string, fam family) (*Weights, error) {
	w := &Weights{f: f, gguf: map[string]string{}, heads: map[string]int{}}
	for _, t := range f.Tensors {
		hfName, ok := globalTensors[t.Name]
		if m := blockName.FindStringSubmatch(t.Name); m != nil {
			suffix, inLayer := layerTensors[m[2]]
			if !inLayer {
				suffix, inLayer = fam.layerTensors[m[2]]
			}
			hfName, ok = "model.layers."+m[1]+"."+suffix, inLayer
		}
		if !ok {
			why := "not a tensor of a dense " + arch + " model as mlerl runs it"
			if t.Name == "rope_freqs.weight" {
				why = "Llama 3.1's scaled RoPE, stored as per-dimension factors, which mlerl does not read yet"
			}
			return nil, fmt.Errorf("%s: tensor %q: %s", f.Path, t.Name, why)
		}
		w.gguf[hfName] = t.Name
		w.names = append(w.names, hfName)
	}
	sort.Strings(w.names)
	if _, ok := w.gguf["model.embed_tokens.weight"]; !ok {
		return nil, fmt.Errorf("%s: tensor \"token_embd.weight\" is missing: not a complete model file", f.Path)
	}
	return w, nil
}

// config reads the hyperparameters ({arch}.block_count...) into
// config.json's fields and checks them against the tensors' shapes, so
// that a mismatch names the GGUF key.
func config(f *File, arch string, fam family, w *Weights) (map[string]any, *vocabulary, error) {
	key := func(k string) string { return arch + "." + k }
	bad := func(k, problem string) error { return fmt.Errorf("%s: metadata %q %s", f.Path, k, problem) }
	need := func(k string) (int, error) {
		n, ok, err := f.Int(key(k))
		switch {
		case err != nil:
			return 0, err
		case !ok:
			return 0, bad(key(k), "is missing: not a complete "+arch+" model file")
		case n <= 0 || n > 1<<24:
			return 0, bad(key(k), fmt.Sprintf("is %d: want a positive size", n))
		}
		return int(n), nil
	}
	hidden, err := need("embedding_length")
	if err != nil {
		return nil, nil, err
	}
	emb, _ := f.Tensor("token_embd.weight")
	shape := emb.Shape()
	if len(shape) != 2 || shape[1] != hidden {
		return nil, nil, fmt.Errorf("%s: tensor \"token_embd.weight\" has shape %v but %s is %d: the metadata does not belong to these weights", f.Path, shape, key("embedding_length"), hidden)
	}
	vocab := shape[0]
	layers, err := need("block_count")
	if err != nil {
		return nil, nil, err
	}
	ffn, err := need("feed_forward_length")
	if err != nil {
		return nil, nil, err
	}
	heads, err := need("attention.head_count")
	if err != nil {
		return nil, nil, err
	}
	kvHeads := heads
	if n, ok, err := f.Int(key("attention.head_count_kv")); err != nil {
		return nil, nil, err
	} else if ok {
		if n <= 0 || int(n) > heads || heads%int(n) != 0 {
			return nil, nil, bad(key("attention.head_count_kv"), fmt.Sprintf("is %d: want a positive divisor of %s %d", n, key("attention.head_count"), heads))
		}
		kvHeads = int(n)
	}
	headDim := 0
	if n, ok, err := f.Int(key("attention.key_length")); err != nil {
		return nil, nil, err
	} else if ok {
		headDim = int(n)
		if v, ok, _ := f.Int(key("attention.value_length")); ok && v != n {
			return nil, nil, bad(key("attention.value_length"), fmt.Sprintf("is %d but key_length is %d: mlerl needs equal key and value widths", v, n))
		}
	} else if hidden%heads == 0 {
		headDim = hidden / heads
	}
	if headDim <= 0 || headDim%2 != 0 {
		return nil, nil, bad(key("attention.head_count"), fmt.Sprintf("gives a head width of %d (embedding_length %d / %d heads, no attention.key_length): want an even positive number", headDim, hidden, heads))
	}
	if n, ok, err := f.Int(key("rope.dimension_count")); err != nil {
		return nil, nil, err
	} else if ok && int(n) != headDim {
		return nil, nil, bad(key("rope.dimension_count"), fmt.Sprintf("is %d but heads are %d wide: rotating part of a head is not supported", n, headDim))
	}
	if s, ok, err := f.String(key("rope.scaling.type")); err != nil {
		return nil, nil, err
	} else if ok && s != "none" && s != "" {
		return nil, nil, bad(key("rope.scaling.type"), fmt.Sprintf("is %q: only plain RoPE is supported for GGUF files", s))
	}
	for _, k := range []string{"expert_count", "attention.sliding_window"} {
		if n, ok, _ := f.Int(key(k)); ok && n != 0 {
			return nil, nil, bad(key(k), fmt.Sprintf("is %d: mixture-of-experts and sliding-window attention are not supported", n))
		}
	}
	theta := 10000.0
	if x, ok, err := f.Float(key("rope.freq_base")); err != nil {
		return nil, nil, err
	} else if ok {
		if !(x > 0) {
			return nil, nil, bad(key("rope.freq_base"), fmt.Sprintf("is %g: want a positive number", x))
		}
		theta = x
	}
	eps, ok, err := f.Float(key("attention.layer_norm_rms_epsilon"))
	if err != nil {
		return nil, nil, err
	}
	if !ok || !(eps > 0) {
		return nil, nil, bad(key("attention.layer_norm_rms_epsilon"), "is missing or not positive: want the RMSNorm epsilon")
	}
	ctx := 2048
	if n, ok, err := f.Int(key("context_length")); err != nil {
		return nil, nil, err
	} else if ok && n > 0 {
		ctx = int(min(n, math.MaxInt32))
	}

	// The tensors against the keys.
	if n, ok, err := f.Int(key("vocab_size")); err != nil {
		return nil, nil, err
	} else if ok && int(n) != vocab {
		return nil, nil, bad(key("vocab_size"), fmt.Sprintf("is %d but token_embd.weight has %d rows", n, vocab))
	}
	maxLayer := -1
	for _, t := range f.Tensors {
		if m := blockName.FindStringSubmatch(t.Name); m != nil {
			l, err := strconv.Atoi(m[1])
			if err != nil || l >= layers {
				return nil, nil, fmt.Errorf("%s: tensor %q is past %s %d", f.Path, t.Name, key("block_count"), layers)
			}
			maxLayer = max(maxLayer, l)
		}
	}
	if maxLayer+1 != layers {
		return nil, nil, bad(key("block_count"), fmt.Sprintf("is %d but the tensors hold blocks 0..%d", layers, maxLayer))
	}
	for l := range layers {
		for _, table := range []map[string]string{layerTensors, fam.layerTensors} {
			// Sorted, so that a file missing several names the same one
			// every run.
			for _, g := range slices.Sorted(maps.Keys(table)) {
				if n := fmt.Sprintf("blk.%d.%s", l, g); !hasTensor(f, n) {
					return nil, nil, fmt.Errorf("%s: tensor %q is missing: not a complete %s model file", f.Path, n, arch)
				}
			}
		}
	}
	if !hasTensor(f, "output_norm.weight") {
		return nil, nil, fmt.Errorf("%s: tensor \"output_norm.weight\" is missing: not a complete %s model file", f.Path, arch)
	}
	if fam.permuted {
		for l := range layers {
			w.heads[fmt.Sprintf("model.layers.%d.self_attn.q_proj.weight", l)] = heads
			w.heads[fmt.Sprintf("model.layers.%d.self_attn.k_proj.weight", l)] = kvHeads
		}
	}

	v, err := readVocabulary(f, vocab)
	if err != nil {
		return nil, nil, err
	}
	_, untied := f.Tensor("output.weight")
	cfg := map[string]any{
		"architectures": []string{fam.architecture}, "model_type": fam.modelType,
		"vocab_size": vocab, "hidden_size": hidden, "intermediate_size": ffn, "num_hidden_layers": layers,
		"num_attention_heads": heads, "num_key_value_heads": kvHeads, "head_dim": headDim,
		"max_position_embeddings": ctx, "rms_norm_eps": eps, "rope_theta": theta, "hidden_act": "silu",
		"tie_word_embeddings": !untied, "eos_token_id": v.eos, "dtype": torchName(w.dtype()),
	}
	if v.bos >= 0 {
		cfg["bos_token_id"] = v.bos
	}
	if v.pad >= 0 {
		cfg["pad_token_id"] = v.pad
	}
	switch fam.modelType {
	case "llama":
		cfg["attention_bias"], cfg["mlp_bias"] = false, false
	case "qwen2", "qwen3":
		cfg["use_sliding_window"] = false
		if fam.modelType == "qwen3" {
			cfg["attention_bias"] = false
		}
	}
	return cfg, v, nil
}

func hasTensor(f *File, name string) bool {
	_, ok := f.Tensor(name)
	return ok
}

func torchName(d hf.DType) string {
	switch d {
	case hf.BF16:
		return "bfloat16"
	case hf.F16:
		return "float16"
	}
	return "float32"
}

// Weights are a GGUF file's tensors by their Hugging Face names, in
// transformers' layout, dequantized to float32 when read (hf.Tensors).
type Weights struct {
	f     *File
	names []string          // Hugging Face names, sorted
	gguf  map[string]string // Hugging Face name -> GGUF name
	// heads of llama's q_proj and k_proj, whose rows are put back in
	// transformers' order when read.
	heads map[string]int
}

// File is the open GGUF file.
func (w *Weights) File() *File { return w.f }

// Names returns every tensor's Hugging Face name, sorted.
func (w *Weights) Names() []string { return slices.Clone(w.names) }

// Stored is the GGUF entry a Hugging Face name stands for.
func (w *Weights) Stored(name string) (TensorInfo, bool) {
	g, ok := w.gguf[name]
	if !ok {
		return TensorInfo{}, false
	}
	return w.f.Tensor(g)
}

// Info describes a tensor as Float32 returns it.
func (w *Weights) Info(name string) (hf.TensorInfo, bool) {
	t, ok := w.Stored(name)
	if !ok {
		return hf.TensorInfo{}, false
	}
	return hf.TensorInfo{Name: name, DType: hf.F32, Shape: t.Shape()}, true
}

// Float32 returns a tensor dequantized, row-major in Info's shape; llama's
// q_proj and k_proj rows in transformers' order.
func (w *Weights) Float32(name string) ([]float32, hf.TensorInfo, error) {
	g, ok := w.gguf[name]
	if !ok {
		return nil, hf.TensorInfo{}, fmt.Errorf("tensor %q: %w", name, hf.ErrNoTensor)
	}
	v, t, err := w.f.Float32(g)
	if err != nil {
		return nil, hf.TensorInfo{}, err
	}
	info := hf.TensorInfo{Name: name, DType: hf.F32, Shape: t.Shape()}
	if h := w.heads[name]; h > 0 {
		if v, err = permuteRows(v, info.Shape, h, false); err != nil {
			return nil, info, fmt.Errorf("%s: tensor %q: %w", w.f.Path, g, err)
		}
	}
	return v, info, nil
}

// Blocks returns a tensor stored in quantized blocks as the file stores
// them, rows of blocks (a Linear's outputs, the embedding's tokens),
// llama's q_proj and k_proj rows in transformers' order as Float32 puts
// them (whole rows move, so the blocks stay as they are), with its
// format in the native engine's terms ([BlockFormat]) and Info's shape.
// A tensor of a float type, or not a matrix, is an error: Float32 reads
// it.
func (w *Weights) Blocks(name string) (format string, blocks []byte, info hf.TensorInfo, err error) {
	g, ok := w.gguf[name]
	if !ok {
		return "", nil, info, fmt.Errorf("tensor %q: %w", name, hf.ErrNoTensor)
	}
	b, t, err := w.f.Raw(g)
	if err != nil {
		return "", nil, info, err
	}
	info = hf.TensorInfo{Name: name, DType: hf.F32, Shape: t.Shape()}
	format, ok = BlockFormat(t.Type)
	if !ok || len(info.Shape) != 2 {
		return "", nil, info, fmt.Errorf("%s: tensor %q is %s, not a matrix of quantized blocks", w.f.Path, g, t.Type)
	}
	if t.Type == Q5_0 || t.Type == IQ4_NL {
		b = asQ8_0(t.Type, b)
	}
	if h := w.heads[name]; h > 0 {
		if b, err = permuteRowBytes(b, info.Shape[0], h); err != nil {
			return "", nil, info, fmt.Errorf("%s: tensor %q: %w", w.f.Path, g, err)
		}
	}
	return format, b, info, nil
}

// BlockFormat names the format the native engine keeps a tensor type's
// blocks in (policy/native's storages); ok is false for the float
// types. Q8_0, Q4_0 and Q4_1 have kernels of their own; Q5_0 and IQ4_NL
// blocks are kept as Q8_0 blocks of the same values ([Weights.Blocks]
// rewrites them, asQ8_0); the others (Q5_1, the K-quants, IQ4_XS) are
// kept as the file stores them, which the engine dequantizes row by row
// as it computes.
func BlockFormat(t Type) (string, bool) {
	switch t {
	case Q8_0, Q5_0, IQ4_NL:
		return "q8_0", true
	}
	if f, ok := blockFormats[t]; ok {
		return f.Name, true
	}
	return "", false
}

// asQ8_0 rewrites Q5_0 or IQ4_NL blocks as Q8_0 blocks holding the same
// values. Both types are an f16 scale d times 32 small integers (q-16 in
// [-16, 15]; IQ4_NL's levels in [-127, 113]), so a Q8_0 block with the
// same d and those integers as int8 dequantizes to the same float32
// values, bit for bit (d*q and q*d are one rounded product): nothing is
// requantized. It takes 34 bytes per block against Q5_0's 22 and
// IQ4_NL's 18, the float32 it replaces 128, and runs on the Q8_0
// kernels. b is whole blocks ([Weights.Blocks] has checked the size).
func asQ8_0(t Type, b []byte) []byte {
	in := readable[t].size
	out := make([]byte, len(b)/in*34)
	for k := range len(b) / in {
		blk, o := b[k*in:(k+1)*in], out[k*34:(k+1)*34]
		copy(o[:2], blk[:2]) // d
		q := o[2:]
		switch t {
		case Q5_0:
			qh := binary.LittleEndian.Uint32(blk[2:])
			for i := range 16 {
				lo, hi := ggml.Q5(blk[6:22], qh, i)
				q[i], q[i+16] = byte(int8(int(lo)-16)), byte(int8(int(hi)-16))
			}
		case IQ4_NL:
			for i, v := range blk[2:18] {
				q[i] = byte(ggml.IQ4NLValues[v&0xf])
				q[i+16] = byte(ggml.IQ4NLValues[v>>4])
			}
		}
	}
	return out
}

// StoredType is the type a tensor (by its Hugging Face name) is stored
// in; ok is false for a name the file does not hold.
func (w *Weights) StoredType(name string) (Type, bool) {
	t, ok := w.Stored(name)
	return t.Type, ok
}

// Close closes the file.
func (w *Weights) Close() error { return w.f.Close() }

// dtype is what a merged model of these weights is saved as: F16 or BF16
// when every matrix is stored so, float32 otherwise (quantized blocks
// dequantize to values neither half type holds).
func (w *Weights) dtype() hf.DType {
	var kinds []Type
	for _, t := range w.f.Tensors {
		if len(t.Dims) == 2 && !slices.Contains(kinds, t.Type) {
			kinds = append(kinds, t.Type)
		}
	}
	if len(kinds) == 1 && kinds[0] == F16 {
		return hf.F16
	}
	if len(kinds) == 1 && kinds[0] == BF16 {
		return hf.BF16
	}
	return hf.F32
}

// permuteRows reorders the rows of a llama Q or K projection ([out, in],
// out = heads x d). llama.cpp's converter stores each head's rows with
// the two halves RoPE pairs (i and i + d/2, transformers' rotate_half)
// interleaved, so that pairs are adjacent (GGML's rotation): stored row
// 2i + j of a head is row j*d/2 + i of transformers'. toGGUF false undoes
// that, as transformers' GGUF loader does; true applies it, for writing.
func permuteRows(v []float32, shape []int, heads int, toGGUF bool) ([]float32, error) {
	if len(shape) != 2 {
		return nil, fmt.Errorf("shape %v cannot be split into %d heads of RoPE pairs", shape, heads)
	}
	return permute(v, shape[0], heads, toGGUF)
}

// permuteRowBytes is permuteRows from the file's order for rows of any
// bytes (quantized blocks): rows rows, each len(b)/rows bytes.
func permuteRowBytes(b []byte, rows, heads int) ([]byte, error) {
	return permute(b, rows, heads, false)
}

// permute moves whole rows (len(v)/rows values each) as permuteRows
// says.
func permute[T any](v []T, rows, heads int, toGGUF bool) ([]T, error) {
	if heads <= 0 || rows%(2*heads) != 0 || len(v)%rows != 0 {
		return nil, fmt.Errorf("%d rows cannot be split into %d heads of RoPE pairs", rows, heads)
	}
	cols := len(v) / rows
	half := rows / heads / 2
	out := make([]T, len(v))
	for h := range heads {
		for i := range half {
			for j := range 2 {
				stored := h*2*half + 2*i + j
				hfRow := h*2*half + j*half + i
				src, dst := stored, hfRow
				if toGGUF {
					src, dst = hfRow, stored
				}
				copy(out[dst*cols:(dst+1)*cols], v[src*cols:(src+1)*cols])
			}
		}
	}
	return out, nil
}
