package gguf

import (
	"fmt"
	"math"
	"strings"
)

// The file's framing, as llama.cpp's ggml/docs/gguf.md describes it: the
// magic "GGUF", a uint32 version, the tensor and metadata counts (uint64
// from version 2 on), the metadata key/value table, the tensor table,
// padding to the alignment, then the tensor data. Every number is
// little-endian.
const (
	magic = "GGUF"
	// DefaultAlignment is the data alignment when general.alignment is
	// absent.
	DefaultAlignment = 32
	// Version is the version the writer writes (the reader takes 2 and 3,
	// which share the layout).
	Version = 3
)

// ValueType is the type of a metadata value.
type ValueType uint32

// The metadata value types.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array", "uint64", "int64", "float64"}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("value type %d", uint32(t))
}

// size is the encoded width of a fixed-size value type (0 for string and
// array, whose width depends on the value).
func (t ValueType) size() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// Value is one metadata value. Scalars hold the Go type of their GGUF type
// (uint8, int8, uint16, int16, uint32, int32, float32, bool, string,
// uint64, int64, float64); an array holds a slice of its element's Go type
// ([]string, []int32...), or []Value for an array of arrays.
type Value struct {
	Type ValueType
	// Elem is an array's element type.
	Elem ValueType
	x    any
}

// Any is the value as its Go type.
func (v Value) Any() any { return v.x }

// Int is an integer scalar of any width as int64 (ok false for another
// type, or a uint64 past int64's range).
func (v Value) Int() (int64, bool) {
	switch x := v.x.(type) {
	case uint8:
		return int64(x), true
	case int8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case int16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case int32:
		return int64(x), true
	case uint64:
		if x > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}

// Float is a float scalar (or an integer one) as float64.
func (v Value) Float() (float64, bool) {
	switch x := v.x.(type) {
	case float32:
		return float64(x), true
	case float64:
		return x, true
	}
	if i, ok := v.Int(); ok {
		return float64(i), true
	}
	return 0, false
}

// Str is a string scalar.
func (v Value) Str() (string, bool) {
	s, ok := v.x.(string)
	return s, ok
}

// Bool is a bool scalar.
func (v Value) Bool() (bool, bool) {
	b, ok := v.x.(bool)
	return b, ok
}

// Strings is an array of strings.
func (v Value) Strings() ([]string, bool) {
	s, ok := v.x.([]string)
	return s, ok
}

// Ints is an array of integers of any width as int64.
func (v Value) Ints() ([]int64, bool) {
	conv := func(n int, at func(int) int64) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = at(i)
		}
		return out
	}
	switch x := v.x.(type) {
	case []uint8:
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	case []int8:
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	case []uint16:
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	case []int16:
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	case []uint32:
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	case []int32:
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	case []int64:
		return x, true
	case []uint64:
		for _, u := range x {
			if u > math.MaxInt64 {
				return nil, false
			}
		}
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	}
	return nil, false
}

// Len is an array's length (0 for a scalar).
func (v Value) Len() int {
	switch x := v.x.(type) {
	case []string:
		return len(x)
	case []Value:
		return len(x)
	case []bool:
		return len(x)
	case []float32:
		return len(x)
	case []float64:
		return len(x)
	}
	if ints, ok := v.Ints(); ok {
		return len(ints)
	}
	return 0
}

// Describe is the value on one short line, for errors.
func (v Value) Describe() string {
	if v.Type == TypeArray {
		return fmt.Sprintf("an array of %d %s", v.Len(), v.Elem)
	}
	s := fmt.Sprintf("%v", v.x)
	if str, ok := v.x.(string); ok {
		if len(str) > 60 {
			str = str[:57] + "..."
		}
		s = fmt.Sprintf("%q", str)
	}
	return fmt.Sprintf("%s %s", v.Type, s)
}

// Constructors of metadata values, for the writer.

func String(s string) Value    { return Value{Type: TypeString, x: s} }
func Uint32(n uint32) Value    { return Value{Type: TypeUint32, x: n} }
func Int32(n int32) Value      { return Value{Type: TypeInt32, x: n} }
func Uint64(n uint64) Value    { return Value{Type: TypeUint64, x: n} }
func Float32(f float32) Value  { return Value{Type: TypeFloat32, x: f} }
func Bool(b bool) Value        { return Value{Type: TypeBool, x: b} }
func Strings(s []string) Value { return Value{Type: TypeArray, Elem: TypeString, x: s} }
func Int32s(n []int32) Value   { return Value{Type: TypeArray, Elem: TypeInt32, x: n} }

// Type is a tensor's element type: a plain float or one of ggml's block
// quantizations.
type Type uint32

// The tensor types mlerl reads (F32, F16 and BF16 are also written, and
// Q8_0).
const (
	F32    Type = 0
	F16    Type = 1
	Q4_0   Type = 2
	Q4_1   Type = 3
	Q5_0   Type = 6
	Q5_1   Type = 7
	Q8_0   Type = 8
	Q2_K   Type = 10
	Q3_K   Type = 11
	Q4_K   Type = 12
	Q5_K   Type = 13
	Q6_K   Type = 14
	IQ4_NL Type = 20
	IQ4_XS Type = 23
	BF16   Type = 30
)

// typeInfo is a type's block layout: Block elements take Size bytes.
type typeInfo struct {
	name        string
	block, size int
}

// readable are the types mlerl dequantizes (quant.go), with the block
// sizes of ggml's ggml-common.h.
var readable = map[Type]typeInfo{
	F32:    {"F32", 1, 4},
	F16:    {"F16", 1, 2},
	BF16:   {"BF16", 1, 2},
	Q8_0:   blockInfo(Q8_0),
	Q4_0:   blockInfo(Q4_0),
	Q4_1:   blockInfo(Q4_1),
	Q5_0:   blockInfo(Q5_0),
	Q5_1:   blockInfo(Q5_1),
	Q2_K:   blockInfo(Q2_K),
	Q3_K:   blockInfo(Q3_K),
	Q4_K:   blockInfo(Q4_K),
	Q5_K:   blockInfo(Q5_K),
	Q6_K:   blockInfo(Q6_K),
	IQ4_NL: blockInfo(IQ4_NL),
	IQ4_XS: blockInfo(IQ4_XS),
}

// blockInfo is a block type's entry: policy/ggml's sizes, its name in
// upper case.
func blockInfo(t Type) typeInfo {
	f := blockFormats[t]
	return typeInfo{strings.ToUpper(f.Name), f.Values, f.Bytes}
}

// otherTypes are ggml's types mlerl does not read, named in refusals.
var otherTypes = map[Type]string{
	9: "Q8_1", 15: "Q8_K",
	16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 21: "IQ3_S",
	22: "IQ2_S", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64",
	29: "IQ1_M", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4", 40: "NVFP4", 41: "Q1_0",
}

func (t Type) String() string {
	if ti, ok := readable[t]; ok {
		return ti.name
	}
	if n, ok := otherTypes[t]; ok {
		return n
	}
	return fmt.Sprintf("type %d", uint32(t))
}

// ParseType reads a type's name ("q8_0", "F16"), for flags.
func ParseType(s string) (Type, bool) {
	for t, ti := range readable {
		if strings.EqualFold(ti.name, s) {
			return t, true
		}
	}
	return 0, false
}

// TokenType is tokenizer.ggml.token_type's value of a token (llama.cpp's
// llama_token_type).
const (
	tokenNormal      = 1
	tokenUnknown     = 2
	tokenControl     = 3
	tokenUserDefined = 4
	tokenUnused      = 5
	tokenByte        = 6
)
