package gguf

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/policy/ggml"
	"github.com/mlerl/mlerl/policy/hf"
)

// TestWriteMatchesGGUFWriter rewrites every testdata file (made by the
// gguf package's GGUFWriter) from what the reader read: the same
// metadata and tensors give the same bytes.
func TestWriteMatchesGGUFWriter(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.gguf")
	if len(files) < 10 {
		t.Fatalf("%d testdata files", len(files))
	}
	for _, path := range files {
		f, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
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
		f.Close()
		var buf bytes.Buffer
		if err := Write(&buf, meta, ts); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		want, _ := os.ReadFile(path)
		if !bytes.Equal(buf.Bytes(), want) {
			t.Errorf("%s: rewritten %d bytes differ from GGUFWriter's %d", path, buf.Len(), len(want))
		}
	}
}

// exportAndLoad exports ck (its own weights) as typ into a temporary file
// and loads it back.
func exportAndLoad(t *testing.T, ck *hf.Checkpoint, typ Type) (*hf.Checkpoint, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "out.gguf")
	same := func(_ string, v []float32) ([]float32, error) { return v, nil }
	if err := Export(path, ck, same, typ, "mlerl test"); err != nil {
		t.Fatal(err)
	}
	back, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { back.Close() })
	return back, path
}

// maxLogitDiff runs both checkpoints' reference forward passes on ids.
func maxLogitDiff(t *testing.T, a, b *hf.Checkpoint, ids []int) (diff, scale float64) {
	t.Helper()
	la, err := hf.ReferenceLogits(a, ids)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := hf.ReferenceLogits(b, ids)
	if err != nil {
		t.Fatal(err)
	}
	for p := range la {
		for i := range la[p] {
			diff = max(diff, math.Abs(la[p][i]-lb[p][i]))
			scale = max(scale, math.Abs(la[p][i]))
		}
	}
	return diff, scale
}

// TestExportRoundTrip exports the tiny GGUF models and policy/hf's tiny
// Hugging Face folders as F32, F16, BF16 and Q8_0 and loads them back:
// F32 gives the same weights and logits exactly; F16 and BF16 each weight
// rounded to nearest even; Q8_0 each weight within half a step of its
// block. The tokenizer, chat format and stop ids survive.
func TestExportRoundTrip(t *testing.T) {
	type src struct {
		name string
		open func() (*hf.Checkpoint, error)
	}
	var srcs []src
	for _, n := range tinyModels {
		srcs = append(srcs, src{"gguf-" + n, func() (*hf.Checkpoint, error) { return Load(filepath.Join("testdata", n+".gguf")) }})
	}
	for _, n := range []string{"llama", "qwen2", "qwen3"} {
		srcs = append(srcs, src{"hf-" + n, func() (*hf.Checkpoint, error) { return hf.Load(filepath.Join("..", "hf", "testdata", "ckpt", n)) }})
	}
	for _, s := range srcs {
		t.Run(s.name, func(t *testing.T) {
			ck, err := s.open()
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			ids := ck.Tokenizer.Encode("<|im_start|>user\nShow me 3 lines of code.")
			if len(ids) > 16 {
				ids = ids[:16]
			}
			for _, typ := range []Type{F32, F16, BF16, Q8_0} {
				back, _ := exportAndLoad(t, ck, typ)
				if back.Arch.Architecture != ck.Arch.Architecture || back.Arch.TieWordEmbeddings != ck.Arch.TieWordEmbeddings || back.Arch.HeadDim != ck.Arch.HeadDim {
					t.Fatalf("%s: arch %+v, want %+v", typ, back.Arch, ck.Arch)
				}
				if back.Chat.Kind != ck.Chat.Kind || back.Chat.DefaultSystem != ck.Chat.DefaultSystem {
					t.Errorf("%s: chat %s %q, want %s %q", typ, back.Chat.Kind, back.Chat.DefaultSystem, ck.Chat.Kind, ck.Chat.DefaultSystem)
				}
				// GGUF holds one EOS id (the first of generation_config's
				// list); the chat format's end of turn stops either way.
				eot, _ := ck.Tokenizer.ID(ck.Chat.EndOfTurn)
				for _, id := range back.StopIDs() {
					if !slices.Contains(ck.StopIDs(), id) {
						t.Errorf("%s: stop ids %v, not among the original's %v", typ, back.StopIDs(), ck.StopIDs())
					}
				}
				if !slices.Contains(back.StopIDs(), eot) || !slices.Contains(back.StopIDs(), ck.EOSTokenIDs[0]) {
					t.Errorf("%s: stop ids %v lack the end of turn %d or the first EOS %d", typ, back.StopIDs(), eot, ck.EOSTokenIDs[0])
				}
				for _, text := range []string{"Hello world 123!\n\tdef f(x): return x**2", "<|im_start|>ünïcode 日本語<|im_end|>"} {
					if a, b := back.Tokenizer.Encode(text), ck.Tokenizer.Encode(text); !slices.Equal(a, b) {
						t.Errorf("%s: encode %q = %v, want %v", typ, text, a, b)
					}
				}
				for _, n := range ck.Weights.Names() {
					want, info, err := ck.Weights.Float32(n)
					if err != nil {
						t.Fatal(err)
					}
					got, _, err := back.Weights.Float32(n)
					if err != nil {
						t.Fatal(err)
					}
					checkRounded(t, typ, n, info.Shape, want, got)
				}
				diff, scale := maxLogitDiff(t, ck, back, ids)
				// F32: the RMSNorm epsilon and RoPE base are float32 in GGUF.
				tol := map[Type]float64{F32: 1e-9, F16: 2e-3, BF16: 3e-2, Q8_0: 3e-2}[typ]
				if diff > tol*max(1, scale) {
					t.Errorf("%s: logits differ by %.3g (scale %.3g), over %.0e", typ, diff, scale, tol)
				}
				t.Logf("%s %s: max |logit diff| %.2g (scale %.2g)", s.name, typ, diff, scale)
			}
		})
	}
}

// checkRounded checks an exported weight against the original: exactly
// for F32 (and every 1-D tensor), rounded to nearest even for F16 and
// BF16, within half a Q8_0 step of its block.
func checkRounded(t *testing.T, typ Type, name string, shape []int, want, got []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s %s: %d values, want %d", typ, name, len(got), len(want))
	}
	if len(shape) == 1 || typ == F32 {
		if !slices.Equal(got, want) {
			t.Errorf("%s %s: values changed", typ, name)
		}
		return
	}
	q8 := typ == Q8_0 && shape[1]%32 == 0
	for i := range want {
		var w float32
		switch {
		case typ == BF16:
			w = math.Float32frombits(uint32(hf.Float32ToBF16(want[i])) << 16)
		case typ == F16 || !q8:
			w = ggml.F16ToF32(hf.Float32ToF16(want[i]))
		default:
			// Q8_0: rows are whole blocks; the block's step d is
			// max|x|/127, stored as f16: q*d_f16 is within d/2 of x plus
			// 127 times f16's relative rounding (2^-11) of d.
			b := i / 32 * 32
			var amax float64
			for _, x := range want[b : b+32] {
				amax = max(amax, math.Abs(float64(x)))
			}
			if d := math.Abs(float64(got[i] - want[i])); d > amax/127*(0.5+127.0/2048)+1e-7 {
				t.Fatalf("%s %s[%d]: %g -> %g, more than half a step off", typ, name, i, want[i], got[i])
			}
			continue
		}
		if got[i] != w {
			t.Fatalf("%s %s[%d]: %g, want %g", typ, name, i, got[i], w)
		}
	}
}

// TestExportRefusals: Llama 3.1's scaled RoPE, an unknown type, an
// existing file.
func TestExportRefusals(t *testing.T) {
	same := func(_ string, v []float32) ([]float32, error) { return v, nil }
	ck, err := hf.Load(filepath.Join("..", "hf", "testdata", "ckpt", "llama3"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	path := filepath.Join(t.TempDir(), "x.gguf")
	if err := Export(path, ck, same, F16, "x"); err == nil || !strings.Contains(err.Error(), "RoPE scaling") {
		t.Errorf("llama 3.1 export: %v", err)
	}
	if _, err := os.Stat(path); err == nil {
		t.Error("a refused export left a file")
	}
	g, err := Load("testdata/qwen2.gguf")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := Export(path, g, same, Q4_K, "x"); err == nil || !strings.Contains(err.Error(), "q8_0") {
		t.Errorf("Q4_K export: %v", err)
	}
	os.WriteFile(path, []byte("keep"), 0o644)
	if err := Export(path, g, same, F16, "x"); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("export over a file: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "keep" {
		t.Error("the existing file was changed")
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("left %d files behind", len(ents))
	}
}

// TestWriteGGUFForPython writes, when MLERL_GGUF_ROUNDTRIP_DIR names a
// folder, exported files with mlerl's logits beside them, for
// `scripts/gguf_reference.py check DIR` (gguf's reader and transformers on
// Go's output).
func TestWriteGGUFForPython(t *testing.T) {
	dir := os.Getenv("MLERL_GGUF_ROUNDTRIP_DIR")
	if dir == "" {
		t.Skip("MLERL_GGUF_ROUNDTRIP_DIR not set")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range tinyModels {
		ck, err := Load(filepath.Join("testdata", n+".gguf"))
		if err != nil {
			t.Fatal(err)
		}
		for _, typ := range []Type{F16, BF16, Q8_0} {
			name := n + "-" + strings.ToLower(typ.String())
			path := filepath.Join(dir, name+".gguf")
			os.Remove(path)
			same := func(_ string, v []float32) ([]float32, error) { return v, nil }
			if err := Export(path, ck, same, typ, name); err != nil {
				t.Fatal(err)
			}
			back, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			ids := ck.Tokenizer.Encode("<|im_start|>user\nWhat is 2+2?")
			logits, err := hf.ReferenceLogits(back, ids)
			if err != nil {
				t.Fatal(err)
			}
			flat := []float64{}
			for _, row := range logits {
				flat = append(flat, row...)
			}
			tensors := map[string]any{}
			for _, ti := range back.Weights.(*Weights).File().Tensors {
				v, _, err := back.Weights.(*Weights).File().Float32(ti.Name)
				if err != nil {
					t.Fatal(err)
				}
				tensors[ti.Name] = map[string]string{"sha256": f32SHA(v)}
			}
			back.Close()
			out, _ := json.Marshal(map[string]any{"ids": ids, "logits": flat, "tensors": tensors})
			if err := os.WriteFile(filepath.Join(dir, name+".json"), out, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		ck.Close()
	}
}
