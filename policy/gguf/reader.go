package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
)

// Bounds on what the reader accepts, beyond the file's own size.
const (
	// maxKeyLen bounds a metadata key (the spec: ASCII, at most 65535).
	maxKeyLen = 65535
	// maxNameLen bounds a tensor name (ggml's GGML_MAX_NAME is 64;
	// longer names are corrupt or a program mlerl does not know).
	maxNameLen = 256
	// maxDims is ggml's GGML_MAX_DIMS.
	maxDims = 4
	// maxArrayDepth bounds arrays of arrays.
	maxArrayDepth = 4
	// maxAlignment bounds general.alignment.
	maxAlignment = 1 << 20
)

// TensorInfo is one entry of the tensor table.
type TensorInfo struct {
	Name string
	// Dims are ggml's, fastest-varying first: a matrix's row length
	// (its input width), then its number of rows.
	Dims []int
	Type Type
	// Offset is from the start of the data section; Size is the data's
	// length in bytes.
	Offset, Size int64
	// shard is the split model's file holding it: 0 the File itself,
	// k its shards[k-1].
	shard int
}

// Shape is the tensor's shape row-major, slowest first (Dims reversed):
// a Linear weight's [out, in], as torch and safetensors write it.
func (t TensorInfo) Shape() []int {
	s := slices.Clone(t.Dims)
	slices.Reverse(s)
	return s
}

// Elems is the number of elements.
func (t TensorInfo) Elems() int {
	n := 1
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// File is an open GGUF file whose header, metadata and tensor table have
// been checked against its size (see [NewFile]). Tensors are read when
// asked for, with ReadAt; a File is safe for concurrent reads.
type File struct {
	// Path names the file in errors.
	Path    string
	Version uint32
	// Alignment is general.alignment (DefaultAlignment when absent).
	Alignment int64
	// Keys are the metadata keys in file order; Meta their values.
	Keys    []string
	Meta    map[string]Value
	Tensors []TensorInfo

	byName map[string]int
	data   int64 // offset of the data section
	size   int64
	r      io.ReaderAt
	closer io.Closer
	// shards are a split model's other files (split.go), in order.
	shards []*File
}

// Open opens and checks a GGUF file. Close it when done. The first shard
// of a split model (llama.cpp's gguf-split, NAME-00001-of-0000N.gguf)
// opens every shard beside it as one File (split.go).
func Open(path string) (*File, error) {
	f, err := openOne(path)
	if err != nil {
		return nil, err
	}
	if err := f.openShards(); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// openOne opens and checks one file.
func openOne(path string) (*File, error) {
	// A FIFO or device is refused before it is opened (opening a FIFO
	// waits for a writer); a symlink to a file is followed.
	if st, err := os.Stat(path); err != nil {
		return nil, err
	} else if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file: give the .gguf model file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file: give the .gguf model file", path)
	}
	gf, err := NewFile(f, st.Size(), path)
	if err != nil {
		f.Close()
		return nil, err
	}
	gf.closer = f
	return gf, nil
}

// NewFile reads and checks a GGUF stream of size bytes (name names it in
// errors) before any tensor is read: the magic and version (2 or 3), the
// counts bounded by what the file can hold, every metadata key/value
// (all value types, arrays of arrays included, each length bounded by the
// bytes left), general.alignment (a power of two), and the tensor table:
// unique names, 1 to 4 positive dimensions, a type mlerl dequantizes with
// a row length that is a whole number of its blocks, offsets aligned and
// every tensor's bytes inside the file without overlapping another's.
// Every refusal is one line naming the file, the key or tensor, and what
// is wrong. The caller keeps r open while the File is used.
func NewFile(r io.ReaderAt, size int64, name string) (*File, error) {
	f, err := parse(r, size, name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return f, nil
}

func parse(r io.ReaderAt, size int64, name string) (*File, error) {
	p := &parser{br: bufio.NewReaderSize(io.NewSectionReader(r, 0, size), 1<<16), size: size, what: "the magic"}
	head, err := p.bytes(4)
	if err != nil {
		return nil, fmt.Errorf("%d bytes: not a GGUF file (too short for its header)", size)
	}
	if string(head) != magic {
		return nil, fmt.Errorf("starts with %q, not GGUF's magic %q: not a GGUF file", head, magic)
	}
	f := &File{Path: name, Meta: map[string]Value{}, byName: map[string]int{}, size: size, r: r, Alignment: DefaultAlignment}
	p.what = "the version"
	if f.Version, err = p.u32(); err != nil {
		return nil, err
	}
	switch {
	case f.Version == 1:
		return nil, fmt.Errorf("GGUF version 1 (32-bit counts) is not supported: convert the model again with a current llama.cpp")
	case f.Version&0xffff == 0 && f.Version != 0:
		return nil, fmt.Errorf("version %#x: a big-endian GGUF file, which mlerl does not read", f.Version)
	case f.Version != 2 && f.Version != 3:
		return nil, fmt.Errorf("GGUF version %d: mlerl reads versions 2 and 3", f.Version)
	}
	p.what = "the tensor count"
	nTensors, err := p.u64()
	if err != nil {
		return nil, err
	}
	p.what = "the metadata count"
	nKV, err := p.u64()
	if err != nil {
		return nil, err
	}
	// The smallest entries: a key of one byte, its type and a one-byte
	// value (14 bytes); a tensor of a one-byte name, one dimension, its
	// type and offset (33 bytes).
	left := size - p.pos
	if nKV > uint64(left)/14 {
		return nil, fmt.Errorf("header says %d metadata entries, more than the %d bytes after it can hold: corrupt or truncated", nKV, left)
	}
	if nTensors > uint64(left)/33 {
		return nil, fmt.Errorf("header says %d tensors, more than the %d bytes after it can hold: corrupt or truncated", nTensors, left)
	}
	for i := range nKV {
		p.what = fmt.Sprintf("metadata entry %d of %d", i+1, nKV)
		key, err := p.str(maxKeyLen)
		if err != nil {
			return nil, err
		}
		if key == "" {
			return nil, fmt.Errorf("%s has an empty key: corrupt", p.what)
		}
		p.what = fmt.Sprintf("metadata %q", key)
		if _, dup := f.Meta[key]; dup {
			return nil, fmt.Errorf("%s appears twice: corrupt", p.what)
		}
		t, err := p.u32()
		if err != nil {
			return nil, err
		}
		v, err := p.value(ValueType(t), 0)
		if err != nil {
			return nil, err
		}
		f.Keys = append(f.Keys, key)
		f.Meta[key] = v
	}
	if v, ok := f.Meta["general.alignment"]; ok {
		a, isInt := v.Int()
		if !isInt || a <= 0 || a > maxAlignment || a&(a-1) != 0 {
			return nil, fmt.Errorf("metadata \"general.alignment\" is %s: want a power of two up to %d", v.Describe(), maxAlignment)
		}
		f.Alignment = a
	}
	for i := range nTensors {
		p.what = fmt.Sprintf("tensor %d of %d in the tensor table", i+1, nTensors)
		t, err := p.tensorInfo()
		if err != nil {
			return nil, err
		}
		if _, dup := f.byName[t.Name]; dup {
			return nil, fmt.Errorf("tensor %q appears twice in the tensor table: corrupt", t.Name)
		}
		f.byName[t.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}
	f.data = (p.pos + f.Alignment - 1) / f.Alignment * f.Alignment
	if err := f.checkRanges(p.pos); err != nil {
		return nil, err
	}
	return f, nil
}

// checkRanges checks the tensors' data against the file: aligned, inside
// it, not overlapping. tableEnd is where the tensor table ends.
func (f *File) checkRanges(tableEnd int64) error {
	if len(f.Tensors) > 0 && f.data > f.size {
		return fmt.Errorf("the tensor table ends at byte %d and the data section would start at %d, past the end of the %d-byte file: truncated (download the file again)", tableEnd, f.data, f.size)
	}
	order := make([]int, len(f.Tensors))
	for i := range order {
		order[i] = i
	}
	for _, t := range f.Tensors {
		if t.Offset%f.Alignment != 0 {
			return fmt.Errorf("tensor %q: data offset %d is not a multiple of the alignment %d: corrupt", t.Name, t.Offset, f.Alignment)
		}
		end := f.data + t.Offset + t.Size
		if t.Offset > f.size || end > f.size || end < f.data {
			return fmt.Errorf("tensor %q: its %d bytes at data offset %d (bytes %d to %d) run past the end of the %d-byte file: truncated (download the file again)", t.Name, t.Size, t.Offset, f.data+t.Offset, f.data+t.Offset+t.Size, f.size)
		}
	}
	sort.Slice(order, func(i, j int) bool { return f.Tensors[order[i]].Offset < f.Tensors[order[j]].Offset })
	for k := 1; k < len(order); k++ {
		a, b := f.Tensors[order[k-1]], f.Tensors[order[k]]
		if a.Offset+a.Size > b.Offset {
			return fmt.Errorf("tensor %q (data offsets %d to %d) overlaps tensor %q (from %d): corrupt", a.Name, a.Offset, a.Offset+a.Size, b.Name, b.Offset)
		}
	}
	return nil
}

// Close closes the file (and a split model's other shards).
func (f *File) Close() error {
	var errs []error
	for _, s := range f.shards {
		errs = append(errs, s.Close())
	}
	if f.closer != nil {
		errs = append(errs, f.closer.Close())
	}
	return errors.Join(errs...)
}

// Tensor finds a tensor's entry.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Tensors[i], true
}

// ErrNoTensor is wrapped when a tensor is not in the file.
var ErrNoTensor = errors.New("no such tensor")

// Raw returns a tensor's stored bytes.
func (f *File) Raw(name string) ([]byte, TensorInfo, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, t, fmt.Errorf("%s: tensor %q: %w", f.Path, name, ErrNoTensor)
	}
	src := f
	if t.shard > 0 {
		src = f.shards[t.shard-1]
	}
	b := make([]byte, t.Size)
	if _, err := src.r.ReadAt(b, src.data+t.Offset); err != nil {
		return nil, t, fmt.Errorf("%s: tensor %q: %w", src.Path, name, err)
	}
	return b, t, nil
}

// Float32 returns a tensor dequantized to float32, row-major in the
// order stored (Shape's).
func (f *File) Float32(name string) ([]float32, TensorInfo, error) {
	b, t, err := f.Raw(name)
	if err != nil {
		return nil, t, err
	}
	v, err := Dequantize(t.Type, b, t.Elems())
	if err != nil {
		return nil, t, fmt.Errorf("%s: tensor %q: %w", f.Path, name, err)
	}
	return v, t, nil
}

// String is a metadata string; ok false when absent. A value of another
// type is an error naming the key.
func (f *File) String(key string) (string, bool, error) {
	v, ok := f.Meta[key]
	if !ok {
		return "", false, nil
	}
	s, isStr := v.Str()
	if !isStr {
		return "", true, fmt.Errorf("%s: metadata %q is %s: want a string", f.Path, key, v.Describe())
	}
	return s, true, nil
}

// Int is a metadata integer of any width.
func (f *File) Int(key string) (int64, bool, error) {
	v, ok := f.Meta[key]
	if !ok {
		return 0, false, nil
	}
	n, isInt := v.Int()
	if !isInt {
		return 0, true, fmt.Errorf("%s: metadata %q is %s: want an integer", f.Path, key, v.Describe())
	}
	return n, true, nil
}

// Float is a metadata number.
func (f *File) Float(key string) (float64, bool, error) {
	v, ok := f.Meta[key]
	if !ok {
		return 0, false, nil
	}
	x, isNum := v.Float()
	if !isNum || math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, true, fmt.Errorf("%s: metadata %q is %s: want a finite number", f.Path, key, v.Describe())
	}
	return x, true, nil
}

// parser reads the header sequentially, refusing any length past the
// file's end before allocating for it.
type parser struct {
	br        *bufio.Reader
	pos, size int64
	// what is being read, for errors.
	what string
	buf  [8]byte
}

func (p *parser) truncated(n int64) error {
	return fmt.Errorf("truncated: %s needs %d bytes at byte %d, past the end of the %d-byte file (the file is cut short: download it again)", p.what, n, p.pos, p.size)
}

func (p *parser) fill(b []byte) error {
	if int64(len(b)) > p.size-p.pos {
		return p.truncated(int64(len(b)))
	}
	if _, err := io.ReadFull(p.br, b); err != nil {
		return fmt.Errorf("reading %s at byte %d: %w", p.what, p.pos, err)
	}
	p.pos += int64(len(b))
	return nil
}

func (p *parser) bytes(n int64) ([]byte, error) {
	if n > p.size-p.pos {
		return nil, p.truncated(n)
	}
	b := make([]byte, n)
	return b, p.fill(b)
}

func (p *parser) u32() (uint32, error) {
	if err := p.fill(p.buf[:4]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(p.buf[:4]), nil
}

func (p *parser) u64() (uint64, error) {
	if err := p.fill(p.buf[:8]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(p.buf[:8]), nil
}

// str reads a length-prefixed string of at most limit bytes (0: bounded
// by the file only).
func (p *parser) str(limit int64) (string, error) {
	n, err := p.u64()
	if err != nil {
		return "", err
	}
	if limit > 0 && n > uint64(limit) {
		return "", fmt.Errorf("%s: a string of %d bytes, over the %d-byte limit: corrupt", p.what, n, limit)
	}
	if n > uint64(p.size-p.pos) {
		return "", p.truncated(int64(min(n, math.MaxInt64)))
	}
	b, err := p.bytes(int64(n))
	return string(b), err
}

// value reads a value of type t (depth counts enclosing arrays).
func (p *parser) value(t ValueType, depth int) (Value, error) {
	v := Value{Type: t}
	if t == TypeString {
		s, err := p.str(0)
		v.x = s
		return v, err
	}
	if t == TypeArray {
		return p.array(depth)
	}
	n := t.size()
	if n == 0 {
		return v, fmt.Errorf("%s: unknown value type %d: corrupt, or a GGUF newer than this reader", p.what, uint32(t))
	}
	if err := p.fill(p.buf[:n]); err != nil {
		return v, err
	}
	v.x = scalar(t, p.buf[:n])
	if t == TypeBool && p.buf[0] > 1 {
		return v, fmt.Errorf("%s: bool byte %d: want 0 or 1", p.what, p.buf[0])
	}
	return v, nil
}

// scalar decodes a fixed-size value.
func scalar(t ValueType, b []byte) any {
	le := binary.LittleEndian
	switch t {
	case TypeUint8:
		return b[0]
	case TypeInt8:
		return int8(b[0])
	case TypeBool:
		return b[0] == 1
	case TypeUint16:
		return le.Uint16(b)
	case TypeInt16:
		return int16(le.Uint16(b))
	case TypeUint32:
		return le.Uint32(b)
	case TypeInt32:
		return int32(le.Uint32(b))
	case TypeFloat32:
		return math.Float32frombits(le.Uint32(b))
	case TypeUint64:
		return le.Uint64(b)
	case TypeInt64:
		return int64(le.Uint64(b))
	case TypeFloat64:
		return math.Float64frombits(le.Uint64(b))
	}
	return nil
}

// array reads an array's element type, count and elements; the count
// times the element's smallest encoding must fit the bytes left.
func (p *parser) array(depth int) (Value, error) {
	if depth >= maxArrayDepth {
		return Value{}, fmt.Errorf("%s: arrays nested deeper than %d: corrupt", p.what, maxArrayDepth)
	}
	et, err := p.u32()
	if err != nil {
		return Value{}, err
	}
	elem := ValueType(et)
	n, err := p.u64()
	if err != nil {
		return Value{}, err
	}
	least := int64(elem.size())
	switch elem {
	case TypeString:
		least = 8
	case TypeArray:
		least = 12
	}
	if least == 0 {
		return Value{}, fmt.Errorf("%s: array of unknown value type %d: corrupt, or a GGUF newer than this reader", p.what, et)
	}
	if left := p.size - p.pos; n > uint64(left/least) {
		return Value{}, fmt.Errorf("truncated or corrupt: %s is an array of %d elements of type %s, which cannot fit in the %d bytes left in the file", p.what, n, elem, left)
	}
	v := Value{Type: TypeArray, Elem: elem}
	count := int(n)
	switch elem {
	case TypeString:
		out := make([]string, count)
		for i := range out {
			if out[i], err = p.str(0); err != nil {
				return v, err
			}
		}
		v.x = out
		return v, nil
	case TypeArray:
		out := make([]Value, count)
		for i := range out {
			if out[i], err = p.array(depth + 1); err != nil {
				return v, err
			}
		}
		v.x = out
		return v, nil
	}
	raw, err := p.bytes(int64(count) * least)
	if err != nil {
		return v, err
	}
	v.x = decodeArray(elem, raw, count)
	if elem == TypeBool {
		for _, b := range raw {
			if b > 1 {
				return v, fmt.Errorf("%s: bool byte %d in an array: want 0 or 1", p.what, b)
			}
		}
	}
	return v, nil
}

// decodeArray decodes count fixed-size elements into a typed slice.
func decodeArray(t ValueType, raw []byte, count int) any {
	le := binary.LittleEndian
	switch t {
	case TypeUint8:
		return slices.Clone(raw)
	case TypeInt8:
		out := make([]int8, count)
		for i := range out {
			out[i] = int8(raw[i])
		}
		return out
	case TypeBool:
		out := make([]bool, count)
		for i := range out {
			out[i] = raw[i] == 1
		}
		return out
	case TypeUint16:
		out := make([]uint16, count)
		for i := range out {
			out[i] = le.Uint16(raw[2*i:])
		}
		return out
	case TypeInt16:
		out := make([]int16, count)
		for i := range out {
			out[i] = int16(le.Uint16(raw[2*i:]))
		}
		return out
	case TypeUint32:
		out := make([]uint32, count)
		for i := range out {
			out[i] = le.Uint32(raw[4*i:])
		}
		return out
	case TypeInt32:
		out := make([]int32, count)
		for i := range out {
			out[i] = int32(le.Uint32(raw[4*i:]))
		}
		return out
	case TypeFloat32:
		out := make([]float32, count)
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		}
		return out
	case TypeUint64:
		out := make([]uint64, count)
		for i := range out {
			out[i] = le.Uint64(raw[8*i:])
		}
		return out
	case TypeInt64:
		out := make([]int64, count)
		for i := range out {
			out[i] = int64(le.Uint64(raw[8*i:]))
		}
		return out
	case TypeFloat64:
		out := make([]float64, count)
		for i := range out {
			out[i] = math.Float64frombits(le.Uint64(raw[8*i:]))
		}
		return out
	}
	return nil
}

// tensorInfo reads one entry of the tensor table and checks it alone:
// its name, dimensions, type and byte size.
func (p *parser) tensorInfo() (TensorInfo, error) {
	var t TensorInfo
	name, err := p.str(maxNameLen)
	if err != nil {
		return t, err
	}
	if name == "" || strings.ContainsRune(name, 0) {
		return t, fmt.Errorf("%s has an empty name or a NUL byte in it: corrupt", p.what)
	}
	t.Name = name
	p.what = fmt.Sprintf("tensor %q in the tensor table", name)
	nd, err := p.u32()
	if err != nil {
		return t, err
	}
	if nd < 1 || nd > maxDims {
		return t, fmt.Errorf("tensor %q has %d dimensions: want 1 to %d", name, nd, maxDims)
	}
	elems := int64(1)
	for range nd {
		d, err := p.u64()
		if err != nil {
			return t, err
		}
		// No tensor can hold more elements than 8 per byte of the file
		// (the densest ggml type packs fewer); this also keeps the
		// product from overflowing.
		if d == 0 || d > uint64(p.size)*8 || elems > p.size*8/int64(d) {
			return t, fmt.Errorf("tensor %q: dimension %d makes it larger than the %d-byte file could hold: corrupt", name, d, p.size)
		}
		elems *= int64(d)
		t.Dims = append(t.Dims, int(d))
	}
	typ, err := p.u32()
	if err != nil {
		return t, err
	}
	t.Type = Type(typ)
	ti, ok := readable[t.Type]
	if !ok {
		if n, known := otherTypes[t.Type]; known {
			return t, fmt.Errorf("tensor %q is quantized as %s, which mlerl does not dequantize: it reads %s (use a file quantized as one of those, e.g. Q4_K_M or Q8_0)", name, n, readableNames())
		}
		return t, fmt.Errorf("tensor %q has unknown quantization type %d (not one of ggml's types): corrupt, or newer than this reader", name, typ)
	}
	if t.Dims[0]%ti.block != 0 {
		return t, fmt.Errorf("tensor %q: its rows of %d elements are not a whole number of %s blocks of %d: corrupt", name, t.Dims[0], ti.name, ti.block)
	}
	t.Size = elems / int64(ti.block) * int64(ti.size)
	off, err := p.u64()
	if err != nil {
		return t, err
	}
	if off > uint64(p.size) {
		return t, fmt.Errorf("tensor %q: data offset %d is past the end of the %d-byte file: truncated or corrupt", name, off, p.size)
	}
	t.Offset = int64(off)
	return t, nil
}

// readableNames lists the types mlerl dequantizes.
func readableNames() string {
	return "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K and Q6_K"
}
