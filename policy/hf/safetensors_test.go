package hf

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/policy/ggml"
)

// rawFile builds a safetensors file from a header value and data bytes,
// without any of the writer's checks, for the bad-input cases.
func rawFile(t testing.TB, header any, data []byte) []byte {
	t.Helper()
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(h)))
	b.Write(h)
	b.Write(data)
	return b.Bytes()
}

// withHeader is a file holding just the header text h.
func withHeader(h string) []byte {
	return append(binary.LittleEndian.AppendUint64(nil, uint64(len(h))), h...)
}

func entry(dtype string, shape []int, begin, end int) map[string]any {
	return map[string]any{"dtype": dtype, "shape": shape, "data_offsets": []int{begin, end}}
}

func TestSafetensorsRoundTrip(t *testing.T) {
	ts := []Tensor{
		{Name: "b.f32", DType: F32, Shape: []int{2, 3}, Data: []float32{1, -2, 3.5, 0, 1e-30, -7}},
		{Name: "a.bf16", DType: BF16, Shape: []int{3}, Data: []float32{1, -0.5, 3}},
		{Name: "c.f16", DType: F16, Shape: []int{2}, Data: []float32{0.25, -1024}},
		{Name: "scalar", DType: F32, Shape: []int{}, Data: []float32{42}},
	}
	var buf bytes.Buffer
	if err := WriteSafetensors(&buf, ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	n := binary.LittleEndian.Uint64(b)
	if n%8 != 0 {
		t.Errorf("header length %d, want a multiple of 8 (safetensors aligns the data)", n)
	}
	if !strings.HasPrefix(string(b[8:]), `{"__metadata__":{"format":"pt"},"a.bf16"`) {
		t.Errorf("header starts %q, want __metadata__ then tensors sorted by name", b[8:40])
	}
	var again bytes.Buffer
	WriteSafetensors(&again, []Tensor{ts[3], ts[1], ts[0], ts[2]}, map[string]string{"format": "pt"})
	if !bytes.Equal(b, again.Bytes()) {
		t.Error("the same tensors in another order gave other bytes: the writer must be deterministic")
	}
	f, err := NewFile(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.Names(), []string{"a.bf16", "b.f32", "c.f16", "scalar"}; !slices.Equal(got, want) {
		t.Errorf("Names() got %v, want %v", got, want)
	}
	for _, tt := range ts {
		got, info, err := f.Float32(tt.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tt.Data) || !slices.Equal(info.Shape, tt.Shape) || info.DType != tt.DType {
			t.Errorf("%s: got %v %v %s, want %v %v %s", tt.Name, got, info.Shape, info.DType, tt.Data, tt.Shape, tt.DType)
		}
	}
	raw, _, err := f.BF16("a.bf16")
	if err != nil || !slices.Equal(raw, []uint16{0x3f80, 0xbf00, 0x4040}) {
		t.Errorf("BF16(a.bf16) got %x, %v, want [3f80 bf00 4040]", raw, err)
	}
	if _, _, err := f.BF16("b.f32"); err == nil {
		t.Error("BF16 of an F32 tensor: got no error")
	}
	if _, _, err := f.Float32("nope"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("Float32(nope) error got %v, want one naming the tensor", err)
	}
	if f.Metadata["format"] != "pt" {
		t.Errorf("metadata got %v, want format pt", f.Metadata)
	}
}

// TestSafetensorsReadsTransformers reads a file written by transformers'
// save_pretrained and checks a value against the reference logits' file
// written by the safetensors library.
func TestSafetensorsReadsTransformers(t *testing.T) {
	f, err := OpenFile("testdata/ckpt/qwen2/model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, ok := f.Info("model.layers.0.self_attn.q_proj.bias")
	if !ok || info.DType != F32 || !slices.Equal(info.Shape, []int{32}) {
		t.Errorf("q_proj.bias got %+v, %v, want F32 [32]", info, ok)
	}
	r, err := OpenFile("testdata/ref/llama3.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if info, _ := r.Info("logits"); !slices.Equal(info.Shape, []int{2, 12, 640}) {
		t.Errorf("logits shape got %v, want [2 12 640]", info.Shape)
	}
}

func TestSafetensorsBadInput(t *testing.T) {
	good := rawFile(t, map[string]any{"a": entry("F32", []int{2}, 0, 8), "b": entry("BF16", []int{2}, 8, 12)}, make([]byte, 12))
	tests := []struct {
		name string
		file []byte
		want string
	}{
		{"empty", nil, "shorter than the 8-byte header length"},
		{"truncated data", good[:len(good)-3], `"b" has data_offsets [8, 12] past the 9-byte data section`},
		{"truncated header", good[:20], "runs past the end"},
		{"header length huge", append(binary.LittleEndian.AppendUint64(nil, 1<<40), '{', '}'), "over the 100 MB limit"},
		{"header length past end", append(binary.LittleEndian.AppendUint64(nil, 100), '{', '}'), "header length 100 runs past the end of the 10-byte file"},
		{"overlap", rawFile(t, map[string]any{"a": entry("F32", []int{2}, 0, 8), "b": entry("F32", []int{2}, 4, 12)}, make([]byte, 12)), "overlap"},
		{"past end", rawFile(t, map[string]any{"a": entry("F32", []int{4}, 0, 16)}, make([]byte, 8)), "past the 8-byte data section"},
		{"span vs shape", rawFile(t, map[string]any{"a": entry("F32", []int{3}, 0, 8)}, make([]byte, 8)), "spans 8 bytes but shape [3] of F32 needs 12"},
		{"reversed offsets", rawFile(t, map[string]any{"a": entry("F32", []int{0}, 8, 0)}, make([]byte, 8)), "begin must be >= 0 and <= end"},
		{"dtype i8", rawFile(t, map[string]any{"w": entry("I8", []int{8}, 0, 8)}, make([]byte, 8)), `tensor "w" has dtype "I8": only F32, F16 and BF16`},
		{"dtype f64", rawFile(t, map[string]any{"w": entry("F64", []int{1}, 0, 8)}, make([]byte, 8)), `tensor "w" has dtype "F64"`},
		{"negative dim", rawFile(t, map[string]any{"w": entry("F32", []int{-2}, 0, 8)}, make([]byte, 8)), "negative dimension"},
		{"not an object", rawFile(t, []int{1}, nil), "not a JSON object"},
		{"unknown entry field", rawFile(t, map[string]any{"w": map[string]any{"dtype": "F32", "shape": []int{0}, "data_offsets": []int{0, 0}, "x": 1}}, nil), "unknown field"},
		{"duplicate name", withHeader(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}`), `names tensor "a" twice`},
		{"trailing data", withHeader(`{} {}`), "trailing data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewFile(bytes.NewReader(tt.file), int64(len(tt.file)))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewFile error got %v, want one containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
	// Unsorted, non-contiguous spans are fine.
	ok := rawFile(t, map[string]any{"a": entry("F32", []int{1}, 12, 16), "b": entry("F32", []int{1}, 0, 4)}, make([]byte, 20))
	if _, err := NewFile(bytes.NewReader(ok), int64(len(ok))); err != nil {
		t.Errorf("unsorted spans with a gap: got %v, want no error", err)
	}
}

func TestOpenFileNamesPath(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.safetensors")
	os.WriteFile(p, []byte("short"), 0o644)
	_, err := OpenFile(p)
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("OpenFile error got %v, want one naming %s", err, p)
	}
}

func TestFloatConversions(t *testing.T) {
	bf := []struct {
		in   float32
		want uint16
	}{
		{1, 0x3f80},
		{math.Float32frombits(0x3f808000), 0x3f80}, // tie, even stays
		{math.Float32frombits(0x3f818000), 0x3f82}, // tie, odd rounds up
		{math.Float32frombits(0x3f808001), 0x3f81}, // above half
		{float32(math.Inf(-1)), 0xff80},
		{math.MaxFloat32, 0x7f80}, // rounds to infinity, as torch does
	}
	for _, tt := range bf {
		if got := Float32ToBF16(tt.in); got != tt.want {
			t.Errorf("Float32ToBF16(%g) got %#x, want %#x", tt.in, got, tt.want)
		}
	}
	if got := Float32ToBF16(float32(math.NaN())); got&0x7f80 != 0x7f80 || got&0x7f == 0 {
		t.Errorf("Float32ToBF16(NaN) got %#x, want a NaN", got)
	}
	// Every half value survives f16 -> f32 -> f16.
	for h := range 1 << 16 {
		f := ggml.F16ToF32(uint16(h))
		if f != f {
			continue
		}
		if got := Float32ToF16(f); got != uint16(h) {
			t.Fatalf("f16 %#04x -> %g -> %#04x", h, f, got)
		}
	}
	f16 := []struct {
		in   float32
		want uint16
	}{
		{65504, 0x7bff}, {65520, 0x7c00}, {1e-8, 0}, {-2, 0xc000},
		{float32(math.Ldexp(1, -24)), 1},          // smallest subnormal
		{float32(math.Ldexp(1.5, -24)), 2},        // tie between 1 and 2 subnormal steps: even
		{1 + float32(math.Ldexp(1, -11)), 0x3c00}, // tie below: even
	}
	for _, tt := range f16 {
		if got := Float32ToF16(tt.in); got != tt.want {
			t.Errorf("Float32ToF16(%g) got %#x, want %#x", tt.in, got, tt.want)
		}
	}
}

func TestWeightsSharded(t *testing.T) {
	one, err := OpenWeights("testdata/ckpt/qwen2")
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	sh, err := OpenWeights("testdata/ckpt/qwen2-sharded")
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	if len(sh.files) < 2 {
		t.Fatalf("sharded set opened %d files, want at least 2", len(sh.files))
	}
	if !slices.Equal(one.Names(), sh.Names()) {
		t.Fatalf("names differ: got %v, want %v", sh.Names(), one.Names())
	}
	for _, n := range one.Names() {
		a, _, _ := one.Float32(n)
		b, _, err := sh.Float32(n)
		if err != nil || !slices.Equal(a, b) {
			t.Errorf("%s differs between the single file and the shards (%v)", n, err)
		}
	}
}
