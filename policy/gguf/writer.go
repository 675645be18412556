package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/mlerl/mlerl/policy/hf"
)

// KV is one metadata entry to write.
type KV struct {
	Key   string
	Value Value
}

// Tensor is one tensor to write: its data already encoded as Type
// ([Encode]), its shape row-major, slowest first ([out, in]).
type Tensor struct {
	Name  string
	Shape []int
	Type  Type
	Data  []byte
}

// Encode converts float32 values to type t: F32, F16 and BF16 rounded to
// nearest even (as PyTorch and ggml round), Q8_0 as ggml quantizes it
// (the values' count a multiple of 32).
func Encode(v []float32, t Type) ([]byte, error) {
	le := binary.LittleEndian
	switch t {
	case F32:
		out := make([]byte, 4*len(v))
		for i, x := range v {
			le.PutUint32(out[4*i:], math.Float32bits(x))
		}
		return out, nil
	case F16:
		out := make([]byte, 2*len(v))
		for i, x := range v {
			le.PutUint16(out[2*i:], hf.Float32ToF16(x))
		}
		return out, nil
	case BF16:
		out := make([]byte, 2*len(v))
		for i, x := range v {
			le.PutUint16(out[2*i:], hf.Float32ToBF16(x))
		}
		return out, nil
	case Q8_0:
		return QuantizeQ8_0(v)
	}
	return nil, fmt.Errorf("writing type %s is not supported (F32, F16, BF16 or Q8_0)", t)
}

// WriteFile writes a GGUF file at path through a temporary file in the
// same folder, linked into place once complete: a failure leaves nothing
// behind, path is never half written, and an existing path (even one made
// while the file was being written) is refused, never replaced.
func WriteFile(path string, meta []KV, tensors []Tensor) error {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%s exists: name a new file", path)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".mlerl-gguf-*")
	if err != nil {
		return err
	}
	fail := func(err error) error {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := Write(tmp, meta, tensors); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	// A hard link fails where path exists, which a rename would replace.
	err = os.Link(tmp.Name(), path)
	os.Remove(tmp.Name())
	if os.IsExist(err) {
		return fmt.Errorf("%s exists: name a new file", path)
	}
	return err
}

// Write writes a GGUF version 3 file: the header, meta in the order given,
// the tensor table and the data, each tensor aligned to general.alignment
// (DefaultAlignment when meta has none). The output is a function of its
// inputs only.
func Write(out io.Writer, meta []KV, tensors []Tensor) error {
	align := int64(DefaultAlignment)
	seen := map[string]bool{}
	for _, kv := range meta {
		if kv.Key == "" || seen[kv.Key] {
			return fmt.Errorf("write gguf: metadata key %q is empty or repeated", kv.Key)
		}
		seen[kv.Key] = true
		if kv.Key == "general.alignment" {
			a, ok := kv.Value.Int()
			if !ok || a <= 0 || a&(a-1) != 0 || kv.Value.Type != TypeUint32 {
				return fmt.Errorf("write gguf: general.alignment must be a uint32 power of two")
			}
			align = a
		}
	}
	w := &encoder{w: bufio.NewWriterSize(out, 1<<20)}
	w.raw([]byte(magic))
	w.u32(Version)
	w.u64(uint64(len(tensors)))
	w.u64(uint64(len(meta)))
	for _, kv := range meta {
		w.str(kv.Key)
		if err := w.value(kv.Value, true); err != nil {
			return fmt.Errorf("write gguf: metadata %q: %w", kv.Key, err)
		}
	}
	names := map[string]bool{}
	var off int64
	offsets := make([]int64, len(tensors))
	for i, t := range tensors {
		ti, ok := readable[t.Type]
		if !ok {
			return fmt.Errorf("write gguf: tensor %q: type %s", t.Name, t.Type)
		}
		if t.Name == "" || len(t.Name) > maxNameLen || names[t.Name] {
			return fmt.Errorf("write gguf: tensor name %q is empty, too long or repeated", t.Name)
		}
		names[t.Name] = true
		if len(t.Shape) < 1 || len(t.Shape) > maxDims {
			return fmt.Errorf("write gguf: tensor %q: %d dimensions", t.Name, len(t.Shape))
		}
		n := 1
		for _, d := range t.Shape {
			if d <= 0 {
				return fmt.Errorf("write gguf: tensor %q: shape %v", t.Name, t.Shape)
			}
			n *= d
		}
		row := t.Shape[len(t.Shape)-1]
		if row%ti.block != 0 || len(t.Data) != n/ti.block*ti.size {
			return fmt.Errorf("write gguf: tensor %q: %d bytes for shape %v of %s", t.Name, len(t.Data), t.Shape, t.Type)
		}
		w.str(t.Name)
		w.u32(uint32(len(t.Shape)))
		dims := slices.Clone(t.Shape)
		slices.Reverse(dims) // GGUF lists the fastest dimension first
		for _, d := range dims {
			w.u64(uint64(d))
		}
		w.u32(uint32(t.Type))
		w.u64(uint64(off))
		offsets[i] = off
		off = (off + int64(len(t.Data)) + align - 1) / align * align
	}
	w.pad(align)
	base := w.n
	for i, t := range tensors {
		w.zeros(base + offsets[i] - w.n)
		w.raw(t.Data)
	}
	if len(tensors) > 0 {
		w.pad(align)
	}
	if w.err != nil {
		return w.err
	}
	return w.w.Flush()
}

// encoder writes little-endian values, keeping the first error.
type encoder struct {
	w   *bufio.Writer
	n   int64
	err error
	buf [8]byte
}

func (e *encoder) raw(b []byte) {
	if e.err != nil {
		return
	}
	_, e.err = e.w.Write(b)
	e.n += int64(len(b))
}

func (e *encoder) u32(v uint32) {
	binary.LittleEndian.PutUint32(e.buf[:4], v)
	e.raw(e.buf[:4])
}

func (e *encoder) u64(v uint64) {
	binary.LittleEndian.PutUint64(e.buf[:8], v)
	e.raw(e.buf[:8])
}

func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	e.raw([]byte(s))
}

func (e *encoder) zeros(n int64) {
	var z [64]byte
	for n > 0 {
		k := min(n, int64(len(z)))
		e.raw(z[:k])
		n -= k
	}
}

func (e *encoder) pad(align int64) { e.zeros((align - e.n%align) % align) }

// value writes a value (with its type when typed, as a metadata entry's
// value is; an array's elements are not). The type must be the one of the
// value's Go type.
func (e *encoder) value(v Value, typed bool) error {
	t, elem, n, at, ok := layout(v.x)
	if !ok {
		return fmt.Errorf("value of Go type %T cannot be written", v.x)
	}
	if t != v.Type || (t == TypeArray && elem != v.Elem) {
		return fmt.Errorf("value says type %s (elements %s) but holds a %T", v.Type, v.Elem, v.x)
	}
	if typed {
		e.u32(uint32(t))
	}
	if t != TypeArray {
		e.scalar(v.x)
		return nil
	}
	e.u32(uint32(elem))
	e.u64(uint64(n))
	for i := range n {
		item := at(i)
		if elem == TypeArray {
			if err := e.value(item, false); err != nil {
				return err
			}
			continue
		}
		e.scalar(item.x)
	}
	return nil
}

// layout is the GGUF type of a Go value; for a slice, its element type,
// length and elements.
func layout(x any) (t, elem ValueType, n int, at func(int) Value, ok bool) {
	arr := func(et ValueType, n int, get func(int) any) (ValueType, ValueType, int, func(int) Value, bool) {
		return TypeArray, et, n, func(i int) Value { return Value{Type: et, x: get(i)} }, true
	}
	switch x := x.(type) {
	case uint8:
		return TypeUint8, 0, 0, nil, true
	case int8:
		return TypeInt8, 0, 0, nil, true
	case uint16:
		return TypeUint16, 0, 0, nil, true
	case int16:
		return TypeInt16, 0, 0, nil, true
	case uint32:
		return TypeUint32, 0, 0, nil, true
	case int32:
		return TypeInt32, 0, 0, nil, true
	case float32:
		return TypeFloat32, 0, 0, nil, true
	case bool:
		return TypeBool, 0, 0, nil, true
	case string:
		return TypeString, 0, 0, nil, true
	case uint64:
		return TypeUint64, 0, 0, nil, true
	case int64:
		return TypeInt64, 0, 0, nil, true
	case float64:
		return TypeFloat64, 0, 0, nil, true
	case []uint8:
		return arr(TypeUint8, len(x), func(i int) any { return x[i] })
	case []int8:
		return arr(TypeInt8, len(x), func(i int) any { return x[i] })
	case []uint16:
		return arr(TypeUint16, len(x), func(i int) any { return x[i] })
	case []int16:
		return arr(TypeInt16, len(x), func(i int) any { return x[i] })
	case []uint32:
		return arr(TypeUint32, len(x), func(i int) any { return x[i] })
	case []int32:
		return arr(TypeInt32, len(x), func(i int) any { return x[i] })
	case []float32:
		return arr(TypeFloat32, len(x), func(i int) any { return x[i] })
	case []bool:
		return arr(TypeBool, len(x), func(i int) any { return x[i] })
	case []string:
		return arr(TypeString, len(x), func(i int) any { return x[i] })
	case []uint64:
		return arr(TypeUint64, len(x), func(i int) any { return x[i] })
	case []int64:
		return arr(TypeInt64, len(x), func(i int) any { return x[i] })
	case []float64:
		return arr(TypeFloat64, len(x), func(i int) any { return x[i] })
	case []Value:
		return TypeArray, TypeArray, len(x), func(i int) Value { return x[i] }, true
	}
	return 0, 0, 0, nil, false
}

// scalar writes a fixed-size value or a string.
func (e *encoder) scalar(x any) {
	le := binary.LittleEndian
	switch x := x.(type) {
	case string:
		e.str(x)
	case bool:
		if x {
			e.raw([]byte{1})
		} else {
			e.raw([]byte{0})
		}
	case uint8:
		e.raw([]byte{x})
	case int8:
		e.raw([]byte{byte(x)})
	case uint16:
		le.PutUint16(e.buf[:2], x)
		e.raw(e.buf[:2])
	case int16:
		le.PutUint16(e.buf[:2], uint16(x))
		e.raw(e.buf[:2])
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	}
}
