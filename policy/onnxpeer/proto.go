package onnxpeer

import (
	"encoding/binary"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// A small writer of ONNX ModelProto bytes with the protobuf wire format
// (field numbers from onnx.proto), enough for the two graphs of export.go:
// nodes with int, ints and float attributes, float32 and int64
// initializers (0-d scalars included), and inputs and outputs with
// symbolic dimensions.

// TensorProto data types.
const (
	dtFloat = 1
	dtInt64 = 7
)

// AttributeProto types.
const (
	attrFloat = 1
	attrInt   = 2
	attrInts  = 7
)

// Opset is the ai.onnx opset the graphs declare (LayerNormalization is
// opset 17); IRVersion is their IR version.
const (
	Opset     = 17
	IRVersion = 8
)

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	return appendBytes(b, num, []byte(s))
}

func appendVarint(b []byte, num protowire.Number, v int64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(v))
}

// attr is one encoded AttributeProto.
type attr []byte

func intAttr(name string, v int64) attr {
	b := appendString(nil, 1, name)
	b = appendVarint(b, 3, v)
	return appendVarint(b, 20, attrInt)
}

func intsAttr(name string, vs ...int64) attr {
	b := appendString(nil, 1, name)
	for _, v := range vs {
		b = appendVarint(b, 8, v)
	}
	return appendVarint(b, 20, attrInts)
}

func floatAttr(name string, v float32) attr {
	b := appendString(nil, 1, name)
	b = protowire.AppendTag(b, 2, protowire.Fixed32Type)
	b = protowire.AppendFixed32(b, math.Float32bits(v))
	return appendVarint(b, 20, attrFloat)
}

// dim is a tensor dimension of a graph input or output: an int size or
// a string naming a symbolic one.
type dim any

// graph collects a GraphProto's fields. Values are named by strings;
// fresh returns unused names for intermediate values.
type graph struct {
	name                   string
	nodes, inits, ins, out [][]byte
	seq                    int
	consts                 map[string]string // scalar and small constants, deduplicated by value
}

func newGraph(name string) *graph { return &graph{name: name, consts: map[string]string{}} }

// fresh returns a new value name starting with prefix.
func (g *graph) fresh(prefix string) string {
	g.seq++
	return fmt.Sprintf("%s_%d", prefix, g.seq)
}

// node adds a node of type op with the given inputs and outputs.
func (g *graph) node(op string, ins, outs []string, attrs ...attr) {
	var b []byte
	for _, in := range ins {
		b = appendString(b, 1, in)
	}
	for _, o := range outs {
		b = appendString(b, 2, o)
	}
	b = appendString(b, 3, fmt.Sprintf("%s_%d", op, len(g.nodes)))
	b = appendString(b, 4, op)
	for _, a := range attrs {
		b = appendBytes(b, 5, a)
	}
	g.nodes = append(g.nodes, b)
}

// op adds a node with one output, a fresh value named after op, and
// returns that name.
func (g *graph) op(op string, ins []string, attrs ...attr) string {
	return g.opTo(op, "", ins, attrs...)
}

// opTo is op with the output named out (empty: a fresh name).
func (g *graph) opTo(op, out string, ins []string, attrs ...attr) string {
	if out == "" {
		out = g.fresh(op)
	}
	g.node(op, ins, []string{out}, attrs...)
	return out
}

func tensorHeader(name string, dims []int64, dt int64) []byte {
	var b []byte
	for _, d := range dims {
		b = appendVarint(b, 1, d)
	}
	b = appendVarint(b, 2, dt)
	return appendString(b, 8, name)
}

// floats adds a float32 initializer (dims nil: a 0-d scalar).
func (g *graph) floats(name string, dims []int64, data []float32) string {
	raw := make([]byte, 4*len(data))
	for i, x := range data {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
	}
	g.inits = append(g.inits, appendBytes(tensorHeader(name, dims, dtFloat), 9, raw))
	return name
}

// int64s adds an int64 initializer (dims nil: a 0-d scalar).
func (g *graph) int64s(name string, dims []int64, data []int64) string {
	raw := make([]byte, 8*len(data))
	for i, x := range data {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(x))
	}
	g.inits = append(g.inits, appendBytes(tensorHeader(name, dims, dtInt64), 9, raw))
	return name
}

// scalarF is a float32 0-d constant, shared by every use of the same value.
func (g *graph) scalarF(v float32) string {
	key := fmt.Sprintf("f%x", math.Float32bits(v))
	if n, ok := g.consts[key]; ok {
		return n
	}
	n := g.floats("const_"+key, nil, []float32{v})
	g.consts[key] = n
	return n
}

// ints is a 1-d int64 constant (scalar: a 0-d one), shared by every use
// of the same values.
func (g *graph) ints(scalar bool, vs ...int64) string {
	key := fmt.Sprintf("i%v%v", scalar, vs)
	if n, ok := g.consts[key]; ok {
		return n
	}
	dims := []int64{int64(len(vs))}
	if scalar {
		dims = nil
	}
	n := g.int64s(fmt.Sprintf("const_i%d", len(g.consts)), dims, vs)
	g.consts[key] = n
	return n
}

func valueInfo(name string, dt int64, dims []dim) []byte {
	var shape []byte
	for _, d := range dims {
		var dd []byte
		switch d := d.(type) {
		case int:
			dd = appendVarint(nil, 1, int64(d))
		case string:
			dd = appendString(nil, 2, d)
		}
		shape = appendBytes(shape, 1, dd)
	}
	tensor := appendVarint(nil, 1, dt)
	tensor = appendBytes(tensor, 2, shape)
	b := appendString(nil, 1, name)
	return appendBytes(b, 2, appendBytes(nil, 1, tensor))
}

// input declares a graph input.
func (g *graph) input(name string, dt int64, dims ...dim) string {
	g.ins = append(g.ins, valueInfo(name, dt, dims))
	return name
}

// output declares value as a graph output.
func (g *graph) output(name string, dt int64, dims ...dim) {
	g.out = append(g.out, valueInfo(name, dt, dims))
}

// model encodes the graph as a ModelProto.
func (g *graph) model() []byte {
	var gb []byte
	for _, n := range g.nodes {
		gb = appendBytes(gb, 1, n)
	}
	gb = appendString(gb, 2, g.name)
	for _, t := range g.inits {
		gb = appendBytes(gb, 5, t)
	}
	for _, in := range g.ins {
		gb = appendBytes(gb, 11, in)
	}
	for _, o := range g.out {
		gb = appendBytes(gb, 12, o)
	}
	opset := appendString(nil, 1, "")
	opset = appendVarint(opset, 2, Opset)
	b := appendVarint(nil, 1, IRVersion)
	b = appendString(b, 2, "mlerl-onnxpeer")
	b = appendBytes(b, 7, gb)
	return appendBytes(b, 8, opset)
}
