package hf

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/mlerl/mlerl/policy/ggml"
)

// DType is a safetensors element type.
type DType string

// The element types mlerl reads and writes. Others (I8, F64, F8_E4M3...)
// are refused when a file is opened.
const (
	F32  DType = "F32"
	F16  DType = "F16"
	BF16 DType = "BF16"
)

// Size is the width of one element in bytes (0 for an unsupported type).
func (d DType) Size() int {
	switch d {
	case F32:
		return 4
	case F16, BF16:
		return 2
	}
	return 0
}

// ParseDType maps a config.json dtype ("float32", "bfloat16", "float16")
// or a safetensors one ("F32"...) to a DType.
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(s) {
	case "f32", "float32", "float":
		return F32, nil
	case "bf16", "bfloat16":
		return BF16, nil
	case "f16", "float16", "half":
		return F16, nil
	}
	return "", fmt.Errorf("dtype %q is not supported (want float32, bfloat16 or float16)", s)
}

// torchName is the dtype as config.json spells it.
func (d DType) torchName() string {
	switch d {
	case BF16:
		return "bfloat16"
	case F16:
		return "float16"
	}
	return "float32"
}

// maxHeader bounds the JSON header, as the safetensors library does
// (100 MB): a larger length is a corrupt or hostile file.
const maxHeader = 100_000_000

// TensorInfo describes one tensor of a safetensors file.
type TensorInfo struct {
	Name  string
	DType DType
	Shape []int
	// Begin and End are byte offsets into the data section (after the
	// 8-byte length and the header), End exclusive.
	Begin, End int64
}

// Elems is the number of elements (1 for a scalar).
func (t TensorInfo) Elems() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// File is an open safetensors file whose header has been checked against
// its size. Tensors are read lazily, with ReadAt, when asked for. A File is
// safe for concurrent reads.
type File struct {
	// Path names the file in errors ("" for a reader opened with NewFile).
	Path     string
	Metadata map[string]string
	r        io.ReaderAt
	closer   io.Closer
	data     int64 // offset of the data section
	tensors  map[string]TensorInfo
}

// OpenFile opens and checks a safetensors file. Close it when done.
func OpenFile(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	sf, err := NewFile(f, st.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sf.Path, sf.closer = path, f
	return sf, nil
}

// NewFile reads and checks the header of a safetensors stream of size
// bytes: the header length fits the file, the header is one JSON object
// without duplicate names, every tensor's dtype is F32, F16 or BF16, its
// shape times the dtype's size is its byte span, and the spans lie inside
// the data section without overlapping (they need not be sorted or cover
// the section). The caller keeps r open while the File is used.
func NewFile(r io.ReaderAt, size int64) (*File, error) {
	var lenBuf [8]byte
	if size < 8 {
		return nil, fmt.Errorf("file is %d bytes, shorter than the 8-byte header length: truncated or not safetensors", size)
	}
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("read header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > maxHeader {
		return nil, fmt.Errorf("header length %d is over the 100 MB limit: corrupt or not safetensors", n)
	}
	if int64(n) > size-8 {
		return nil, fmt.Errorf("header length %d runs past the end of the %d-byte file: truncated", n, size)
	}
	hdr := make([]byte, n)
	if _, err := r.ReadAt(hdr, 8); err != nil {
		return nil, fmt.Errorf("read header: %w", err)
	}
	f := &File{r: r, data: 8 + int64(n), tensors: map[string]TensorInfo{}}
	if err := f.parseHeader(hdr, size-8-int64(n)); err != nil {
		return nil, err
	}
	return f, nil
}

type tensorJSON struct {
	DType       string   `json:"dtype"`
	Shape       []int    `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

func (f *File) parseHeader(hdr []byte, dataLen int64) error {
	dec := json.NewDecoder(bytes.NewReader(hdr))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return fmt.Errorf("header is not a JSON object: %v", err)
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return fmt.Errorf("header: %w", err)
		}
		name := k.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fmt.Errorf("header entry %q: %w", name, err)
		}
		if name == "__metadata__" {
			if f.Metadata != nil {
				return fmt.Errorf("header: __metadata__ appears twice")
			}
			if err := json.Unmarshal(raw, &f.Metadata); err != nil {
				return fmt.Errorf("header __metadata__: want an object of strings: %w", err)
			}
			if f.Metadata == nil {
				f.Metadata = map[string]string{}
			}
			continue
		}
		if _, dup := f.tensors[name]; dup {
			return fmt.Errorf("header names tensor %q twice", name)
		}
		var tj tensorJSON
		d := json.NewDecoder(bytes.NewReader(raw))
		d.DisallowUnknownFields()
		if err := d.Decode(&tj); err != nil {
			return fmt.Errorf("tensor %q: header entry: %w", name, err)
		}
		dt := DType(tj.DType)
		if dt.Size() == 0 {
			return fmt.Errorf("tensor %q has dtype %q: only F32, F16 and BF16 are supported; convert the checkpoint (e.g. save it with torch_dtype=torch.bfloat16)", name, tj.DType)
		}
		elems := int64(1)
		for _, s := range tj.Shape {
			if s < 0 {
				return fmt.Errorf("tensor %q has a negative dimension in shape %v", name, tj.Shape)
			}
			if s > 0 && elems > math.MaxInt64/int64(s)/8 {
				return fmt.Errorf("tensor %q: shape %v is too large", name, tj.Shape)
			}
			elems *= int64(s)
		}
		b, e := tj.DataOffsets[0], tj.DataOffsets[1]
		if b < 0 || e < b {
			return fmt.Errorf("tensor %q has data_offsets [%d, %d]: begin must be >= 0 and <= end", name, b, e)
		}
		if e > dataLen {
			return fmt.Errorf("tensor %q has data_offsets [%d, %d] past the %d-byte data section: truncated or corrupt", name, b, e, dataLen)
		}
		if want := elems * int64(dt.Size()); e-b != want {
			return fmt.Errorf("tensor %q spans %d bytes but shape %v of %s needs %d", name, e-b, tj.Shape, dt, want)
		}
		f.tensors[name] = TensorInfo{Name: name, DType: dt, Shape: slices.Clone(tj.Shape), Begin: b, End: e}
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("header: %w", err)
	}
	if dec.More() {
		return fmt.Errorf("header: trailing data after the JSON object")
	}
	// Overlap: sort the spans by start; each must begin at or after the end
	// of the one before (empty tensors overlap nothing).
	spans := make([]TensorInfo, 0, len(f.tensors))
	for _, t := range f.tensors {
		if t.End > t.Begin {
			spans = append(spans, t)
		}
	}
	sort.Slice(spans, func(i, j int) bool {
		if spans[i].Begin != spans[j].Begin {
			return spans[i].Begin < spans[j].Begin
		}
		return spans[i].Name < spans[j].Name
	})
	for i := 1; i < len(spans); i++ {
		if spans[i].Begin < spans[i-1].End {
			return fmt.Errorf("tensors %q [%d, %d] and %q [%d, %d] overlap in the data section: corrupt header", spans[i-1].Name, spans[i-1].Begin, spans[i-1].End, spans[i].Name, spans[i].Begin, spans[i].End)
		}
	}
	return nil
}

// Close closes the underlying file (a no-op for NewFile's readers).
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	return f.closer.Close()
}

// Names returns the tensors' names, sorted.
func (f *File) Names() []string {
	out := make([]string, 0, len(f.tensors))
	for n := range f.tensors {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Info returns a tensor's description.
func (f *File) Info(name string) (TensorInfo, bool) {
	t, ok := f.tensors[name]
	return t, ok
}

// ErrNoTensor is wrapped when a named tensor is not in a file or set.
var ErrNoTensor = errors.New("no such tensor")

// Raw returns a tensor's bytes as stored (little-endian). The slice is
// the caller's.
func (f *File) Raw(name string) ([]byte, TensorInfo, error) {
	t, ok := f.tensors[name]
	if !ok {
		return nil, t, fmt.Errorf("%s: tensor %q: %w", f.where(), name, ErrNoTensor)
	}
	b := make([]byte, t.End-t.Begin)
	if _, err := f.r.ReadAt(b, f.data+t.Begin); err != nil {
		return nil, t, fmt.Errorf("%s: read tensor %q: %w", f.where(), name, err)
	}
	return b, t, nil
}

// Float32 returns a tensor converted to float32, row-major in its stored
// shape (a Hugging Face Linear weight is [out, in]).
func (f *File) Float32(name string) ([]float32, TensorInfo, error) {
	b, t, err := f.Raw(name)
	if err != nil {
		return nil, t, err
	}
	return decode(b, t.DType), t, nil
}

// BF16 returns a BF16 tensor's raw 16-bit values (the high half of the
// float32 bit pattern); other dtypes are an error.
func (f *File) BF16(name string) ([]uint16, TensorInfo, error) {
	b, t, err := f.Raw(name)
	if err != nil {
		return nil, t, err
	}
	if t.DType != BF16 {
		return nil, t, fmt.Errorf("%s: tensor %q is %s, not BF16", f.where(), name, t.DType)
	}
	out := make([]uint16, len(b)/2)
	for i := range out {
		out[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return out, t, nil
}

func (f *File) where() string {
	if f.Path == "" {
		return "safetensors"
	}
	return f.Path
}

// decode converts little-endian elements of dtype d to float32.
func decode(b []byte, d DType) []float32 {
	switch d {
	case F32:
		out := make([]float32, len(b)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return out
	case BF16:
		out := make([]float32, len(b)/2)
		for i := range out {
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
		}
		return out
	case F16:
		out := make([]float32, len(b)/2)
		for i := range out {
			out[i] = ggml.F16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
		}
		return out
	}
	return nil
}

// Float32ToBF16 rounds to the nearest bfloat16, ties to even, as
// PyTorch's .to(torch.bfloat16) does; NaN stays NaN.
func Float32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// Float32ToF16 rounds to the nearest IEEE half, ties to even; values past
// the half range become infinities.
func Float32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	if f != f {
		return sign | 0x7e00
	}
	a := math.Abs(float64(f))
	if a >= 65520 { // rounds past the largest half (65504)
		return sign | 0x7c00
	}
	if a < math.Ldexp(1, -25) { // below half the smallest subnormal: zero
		return sign
	}
	exp := int(b>>23&0xff) - 127
	if exp < -14 { // subnormal half: value = m * 2^-24
		m := math.RoundToEven(a * (1 << 24))
		return sign | uint16(m)
	}
	mant := b & 0x7fffff
	// Keep 10 of 23 mantissa bits, rounding the 13 dropped ones to even.
	h := uint32(exp+15)<<10 | mant>>13
	rest := mant & 0x1fff
	if rest > 0x1000 || (rest == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, which is right
	}
	return sign | uint16(h)
}

// encode converts float32 values to little-endian elements of dtype d.
func encode(v []float32, d DType) []byte {
	out := make([]byte, len(v)*d.Size())
	for i, x := range v {
		switch d {
		case F32:
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
		case BF16:
			binary.LittleEndian.PutUint16(out[2*i:], Float32ToBF16(x))
		case F16:
			binary.LittleEndian.PutUint16(out[2*i:], Float32ToF16(x))
		}
	}
	return out
}

// Tensor is one tensor to write: float32 values converted to DType.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []float32
}

// WriteSafetensors writes tensors in the safetensors layout: the header's
// length (u64 little-endian), the JSON header (__metadata__ first, then
// tensors sorted by name, padded with spaces to a multiple of 8 bytes as
// the safetensors library does, so the data section is aligned), then the
// data in the same order. The output is a function of its inputs only.
func WriteSafetensors(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	ts := slices.Clone(tensors)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	var hdr bytes.Buffer
	hdr.WriteByte('{')
	first := true
	sep := func() {
		if !first {
			hdr.WriteByte(',')
		}
		first = false
	}
	if len(metadata) > 0 {
		sep()
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		hdr.WriteString(`"__metadata__":{`)
		for i, k := range keys {
			if i > 0 {
				hdr.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			vb, _ := json.Marshal(metadata[k])
			hdr.Write(kb)
			hdr.WriteByte(':')
			hdr.Write(vb)
		}
		hdr.WriteByte('}')
	}
	var off int64
	seen := map[string]bool{}
	for _, t := range ts {
		if t.Name == "" || t.Name == "__metadata__" || seen[t.Name] {
			return fmt.Errorf("write safetensors: tensor name %q is empty, reserved or repeated", t.Name)
		}
		seen[t.Name] = true
		if t.DType.Size() == 0 {
			return fmt.Errorf("write safetensors: tensor %q: dtype %q is not supported", t.Name, t.DType)
		}
		n := 1
		for _, d := range t.Shape {
			n *= d
		}
		if n != len(t.Data) {
			return fmt.Errorf("write safetensors: tensor %q has %d values for shape %v", t.Name, len(t.Data), t.Shape)
		}
		size := int64(n * t.DType.Size())
		sep()
		nb, _ := json.Marshal(t.Name)
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		sb, _ := json.Marshal(shape)
		fmt.Fprintf(&hdr, `%s:{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]}`, nb, t.DType, sb, off, off+size)
		off += size
	}
	hdr.WriteByte('}')
	for hdr.Len()%8 != 0 {
		hdr.WriteByte(' ')
	}
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(hdr.Len()))
	if _, err := w.Write(lenBuf[:]); err != nil {
		return err
	}
	if _, err := w.Write(hdr.Bytes()); err != nil {
		return err
	}
	for _, t := range ts {
		if _, err := w.Write(encode(t.Data, t.DType)); err != nil {
			return err
		}
	}
	return nil
}
