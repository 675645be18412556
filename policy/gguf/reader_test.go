package gguf

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// rewrite reads a testdata file and writes it again to a temporary file
// after edit changes its metadata (and tensors).
func rewrite(t *testing.T, src string, edit func(meta []KV, ts []Tensor) ([]KV, []Tensor)) string {
	t.Helper()
	f, err := Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var meta []KV
	for _, k := range f.Keys {
		meta = append(meta, KV{k, f.Meta[k]})
	}
	var ts []Tensor
	for _, ti := range f.Tensors {
		b, _, err := f.Raw(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, Tensor{Name: ti.Name, Shape: ti.Shape(), Type: ti.Type, Data: b})
	}
	meta, ts = edit(meta, ts)
	path := filepath.Join(t.TempDir(), "bad.gguf")
	var buf bytes.Buffer
	if err := Write(&buf, meta, ts); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func without(meta []KV, prefix string) []KV {
	var out []KV
	for _, kv := range meta {
		if !strings.HasPrefix(kv.Key, prefix) {
			out = append(out, kv)
		}
	}
	return out
}

func set(meta []KV, key string, v Value) []KV {
	for i := range meta {
		if meta[i].Key == key {
			meta[i].Value = v
			return meta
		}
	}
	return append(meta, KV{key, v})
}

// patched writes a copy of src's bytes changed by edit.
func patched(t *testing.T, src string, edit func(b []byte) []byte) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "bad.gguf")
	if err := os.WriteFile(path, edit(bytes.Clone(b)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// tensorField is the offset of a tensor-table entry's type field (which
// follows its name, dimension count and dimensions), +4 its offset field.
func tensorField(t *testing.T, b []byte, name string) int {
	t.Helper()
	key := append(binary.LittleEndian.AppendUint64(nil, uint64(len(name))), name...)
	i := bytes.Index(b, key)
	if i < 0 {
		t.Fatalf("tensor %s not found", name)
	}
	i += len(key)
	nd := int(binary.LittleEndian.Uint32(b[i:]))
	return i + 4 + 8*nd
}

// TestRefusals opens broken files: each is refused in one line that names
// the file and what is wrong, before any tensor is read.
func TestRefusals(t *testing.T) {
	const tiny = "testdata/llama.gguf"
	size := func() int {
		st, _ := os.Stat(tiny)
		return int(st.Size())
	}()
	cases := []struct {
		name string
		file func(t *testing.T) string
		want string // in the message
	}{
		{"truncated header", func(t *testing.T) string { return patched(t, tiny, func(b []byte) []byte { return b[:20] }) }, "truncated"},
		{"truncated metadata", func(t *testing.T) string { return patched(t, tiny, func(b []byte) []byte { return b[:3000] }) }, "truncated or corrupt: metadata \"tokenizer.ggml.tokens\""},
		{"truncated in a string", func(t *testing.T) string {
			return patched(t, tiny, func(b []byte) []byte { return b[:bytes.Index(b, []byte("tokenizer.chat_template"))+60] })
		}, `truncated: metadata "tokenizer.chat_template" needs`},
		{"truncated data", func(t *testing.T) string { return patched(t, tiny, func(b []byte) []byte { return b[:size-100] }) }, "run past the end"},
		{"tensor table past the end", func(t *testing.T) string {
			return patched(t, tiny, func(b []byte) []byte {
				i := tensorField(t, b, "token_embd.weight")
				return b[:i+2] // cut inside the first entry of the table
			})
		}, "truncated: tensor \"token_embd.weight\" in the tensor table"},
		{"more tensors than the file holds", func(t *testing.T) string {
			return patched(t, tiny, func(b []byte) []byte { binary.LittleEndian.PutUint64(b[8:], 1<<40); return b })
		}, "tensors, more than"},
		{"a tensor's data past the end", func(t *testing.T) string {
			return patched(t, tiny, func(b []byte) []byte {
				i := tensorField(t, b, "blk.1.ffn_down.weight")
				binary.LittleEndian.PutUint64(b[i+4:], uint64(size))
				return b
			})
		}, "past the end of the"},
		{"unknown quantization type", func(t *testing.T) string {
			return patched(t, tiny, func(b []byte) []byte {
				binary.LittleEndian.PutUint32(b[tensorField(t, b, "blk.0.attn_q.weight"):], 99)
				return b
			})
		}, "tensor \"blk.0.attn_q.weight\" has unknown quantization type 99"},
		{"unsupported quantization type", func(t *testing.T) string {
			return patched(t, tiny, func(b []byte) []byte {
				binary.LittleEndian.PutUint32(b[tensorField(t, b, "blk.0.attn_q.weight"):], 16)
				return b
			})
		}, "quantized as IQ2_XXS, which mlerl does not dequantize"},
		{"overlapping tensors", func(t *testing.T) string {
			return patched(t, tiny, func(b []byte) []byte {
				i := tensorField(t, b, "blk.0.attn_k.weight")
				j := tensorField(t, b, "blk.0.attn_q.weight")
				copy(b[i+4:i+12], b[j+4:j+12])
				return b
			})
		}, "overlaps"},
		{"misaligned offset", func(t *testing.T) string {
			return patched(t, tiny, func(b []byte) []byte {
				i := tensorField(t, b, "output_norm.weight")
				binary.LittleEndian.PutUint64(b[i+4:], binary.LittleEndian.Uint64(b[i+4:])+4)
				return b
			})
		}, "not a multiple of the alignment 32"},
		{"not gguf", func(t *testing.T) string {
			return patched(t, tiny, func(b []byte) []byte { copy(b, "GGML"); return b })
		}, "not a GGUF file"},
		{"version 1", func(t *testing.T) string {
			return patched(t, tiny, func(b []byte) []byte { binary.LittleEndian.PutUint32(b[4:], 1); return b })
		}, "version 1"},
		{"big-endian", func(t *testing.T) string {
			return patched(t, tiny, func(b []byte) []byte { binary.BigEndian.PutUint32(b[4:], 3); return b })
		}, "big-endian"},
		{"huge string", func(t *testing.T) string {
			return patched(t, tiny, func(b []byte) []byte {
				binary.LittleEndian.PutUint64(b[24:], 1<<50) // the first key's length
				return b
			})
		}, "over the 65535-byte limit"},
		{"huge array", func(t *testing.T) string {
			return patched(t, tiny, func(b []byte) []byte {
				key := []byte("tokenizer.ggml.tokens")
				i := bytes.Index(b, key) + len(key) + 4 + 4 // value type, element type
				binary.LittleEndian.PutUint64(b[i:], 1<<40)
				return b
			})
		}, "cannot fit in the"},
		{"bad alignment", func(t *testing.T) string {
			good := rewrite(t, tiny, func(m []KV, ts []Tensor) ([]KV, []Tensor) {
				return append(m, KV{"general.alignment", Uint32(32)}), ts
			})
			return patched(t, good, func(b []byte) []byte {
				key := []byte("general.alignment")
				binary.LittleEndian.PutUint32(b[bytes.Index(b, key)+len(key)+4:], 24)
				return b
			})
		}, `"general.alignment" is uint32 24: want a power of two`},
		{"unsupported architecture", func(t *testing.T) string {
			return rewrite(t, tiny, func(m []KV, ts []Tensor) ([]KV, []Tensor) {
				return set(m, "general.architecture", String("gemma3")), ts
			})
		}, `"general.architecture" is "gemma3": mlerl runs llama`},
		{"missing tokenizer", func(t *testing.T) string {
			return rewrite(t, tiny, func(m []KV, ts []Tensor) ([]KV, []Tensor) { return without(m, "tokenizer.ggml."), ts })
		}, `"tokenizer.ggml.model" is missing: the file carries no tokenizer`},
		{"missing vocabulary", func(t *testing.T) string {
			return rewrite(t, tiny, func(m []KV, ts []Tensor) ([]KV, []Tensor) { return without(m, "tokenizer.ggml.tokens"), ts })
		}, `"tokenizer.ggml.tokens" is missing`},
		{"sentencepiece", func(t *testing.T) string {
			return rewrite(t, tiny, func(m []KV, ts []Tensor) ([]KV, []Tensor) {
				return set(m, "tokenizer.ggml.model", String("llama")), ts
			})
		}, "not SentencePiece"},
		{"unknown pre-tokenizer", func(t *testing.T) string {
			return rewrite(t, tiny, func(m []KV, ts []Tensor) ([]KV, []Tensor) {
				return set(m, "tokenizer.ggml.pre", String("deepseek-llm")), ts
			})
		}, `tokenizer.ggml.pre "deepseek-llm" is not a pre-tokenizer mlerl knows`},
		{"missing chat template", func(t *testing.T) string {
			return rewrite(t, tiny, func(m []KV, ts []Tensor) ([]KV, []Tensor) { return without(m, "tokenizer.chat_template"), ts })
		}, `"tokenizer.chat_template" is missing`},
		{"layer count", func(t *testing.T) string {
			return rewrite(t, tiny, func(m []KV, ts []Tensor) ([]KV, []Tensor) {
				return set(m, "llama.block_count", Uint32(3)), ts
			})
		}, `"llama.block_count" is 3 but the tensors hold blocks 0..1`},
		{"hidden size", func(t *testing.T) string {
			return rewrite(t, tiny, func(m []KV, ts []Tensor) ([]KV, []Tensor) {
				return set(m, "llama.embedding_length", Uint32(96)), ts
			})
		}, `tensor "token_embd.weight" has shape [352 64] but llama.embedding_length is 96`},
		{"extra tensor", func(t *testing.T) string {
			return rewrite(t, tiny, func(m []KV, ts []Tensor) ([]KV, []Tensor) {
				return m, append(ts, Tensor{Name: "rope_freqs.weight", Shape: []int{8}, Type: F32, Data: make([]byte, 32)})
			})
		}, `tensor "rope_freqs.weight": Llama 3.1's scaled RoPE`},
		{"missing tensor", func(t *testing.T) string {
			return rewrite(t, tiny, func(m []KV, ts []Tensor) ([]KV, []Tensor) {
				var out []Tensor
				for _, x := range ts {
					if x.Name != "blk.1.ffn_up.weight" {
						out = append(out, x)
					}
				}
				return m, out
			})
		}, `tensor "blk.1.ffn_up.weight" is missing`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := c.file(t)
			ck, err := Load(path)
			if err == nil {
				ck.Close()
				t.Fatal("loaded")
			}
			msg := err.Error()
			t.Log(msg)
			if !strings.Contains(msg, c.want) {
				t.Errorf("error %q does not say %q", msg, c.want)
			}
			if !strings.HasPrefix(msg, path) && !strings.Contains(msg, path+":") {
				t.Errorf("error %q does not name the file %s", msg, path)
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error is not one line: %q", msg)
			}
			if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
				t.Errorf("the folder holds %d files after the refusal", len(ents))
			}
		})
	}
}

// TestReadValues reads every metadata value type back as written,
// arrays of arrays included.
func TestReadValues(t *testing.T) {
	meta := []KV{
		{"a.u8", Value{Type: TypeUint8, x: uint8(250)}}, {"a.i8", Value{Type: TypeInt8, x: int8(-5)}},
		{"a.u16", Value{Type: TypeUint16, x: uint16(65000)}}, {"a.i16", Value{Type: TypeInt16, x: int16(-300)}},
		{"a.u32", Uint32(4e9)}, {"a.i32", Int32(-7)}, {"a.f32", Float32(1.5)}, {"a.bool", Bool(true)},
		{"a.str", String("héllo")}, {"a.u64", Uint64(1 << 60)}, {"a.i64", Value{Type: TypeInt64, x: int64(-1 << 40)}},
		{"a.f64", Value{Type: TypeFloat64, x: 2.25}}, {"a.strs", Strings([]string{"x", "", "zz"})},
		{"a.i32s", Int32s([]int32{1, -2, 3})}, {"a.bools", Value{Type: TypeArray, Elem: TypeBool, x: []bool{true, false}}},
		{"a.nested", Value{Type: TypeArray, Elem: TypeArray, x: []Value{Strings([]string{"p"}), Int32s([]int32{4, 5})}}},
	}
	var buf bytes.Buffer
	if err := Write(&buf, meta, []Tensor{{Name: "t", Shape: []int{2, 32}, Type: F32, Data: make([]byte, 256)}}); err != nil {
		t.Fatal(err)
	}
	f, err := NewFile(bytes.NewReader(buf.Bytes()), int64(buf.Len()), "mem.gguf")
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range meta {
		got := f.Meta[kv.Key]
		if got.Type != kv.Value.Type || got.Elem != kv.Value.Elem || got.Describe() != kv.Value.Describe() {
			t.Errorf("%s: read %s (%s), wrote %s", kv.Key, got.Describe(), got.Type, kv.Value.Describe())
		}
	}
	if n, _ := f.Meta["a.nested"].Any().([]Value); len(n) != 2 || n[1].Len() != 2 {
		t.Errorf("nested array read as %v", f.Meta["a.nested"].Any())
	}
	if ti, _ := f.Tensor("t"); ti.Shape()[0] != 2 || ti.Shape()[1] != 32 || ti.Dims[0] != 32 {
		t.Errorf("tensor t: %+v", ti)
	}
}

// TestOpenNotAFile: a FIFO (which a plain open would wait on forever), a
// folder and a missing path are refused at once.
func TestOpenNotAFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "model.gguf")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	done := make(chan error, 1)
	go func() { _, err := Load(fifo); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("FIFO: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("opening a FIFO blocked")
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("folder: %v", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.gguf")); err == nil {
		t.Error("a missing file loaded")
	}
}
