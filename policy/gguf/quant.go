package gguf

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/mlerl/mlerl/policy/ggml"
	"github.com/mlerl/mlerl/policy/hf"
)

// blockFormats are the block types, as policy/ggml has them.
var blockFormats = map[Type]*ggml.Format{
	Q8_0: ggml.Q8_0, Q4_0: ggml.Q4_0, Q4_1: ggml.Q4_1, Q5_0: ggml.Q5_0, Q5_1: ggml.Q5_1, IQ4_NL: ggml.IQ4_NL,
	Q2_K: ggml.Q2_K, Q3_K: ggml.Q3_K, Q4_K: ggml.Q4_K, Q5_K: ggml.Q5_K, Q6_K: ggml.Q6_K, IQ4_XS: ggml.IQ4_XS,
}

// Dequantization of ggml's block types into float32, the engine's
// storage: policy/ggml's, bit for bit gguf.quants.dequantize
// (testdata/quants.json).

// Dequantize converts n elements of type t stored in b to float32.
func Dequantize(t Type, b []byte, n int) ([]float32, error) {
	ti, ok := readable[t]
	if !ok {
		return nil, fmt.Errorf("type %s is not one mlerl dequantizes", t)
	}
	if n%ti.block != 0 || len(b) != n/ti.block*ti.size {
		return nil, fmt.Errorf("%d bytes for %d elements of %s", len(b), n, t)
	}
	out := make([]float32, n)
	le := binary.LittleEndian
	switch t {
	case F32:
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(b[4*i:]))
		}
		return out, nil
	case F16:
		for i := range out {
			out[i] = ggml.F16ToF32(le.Uint16(b[2*i:]))
		}
		return out, nil
	case BF16:
		for i := range out {
			out[i] = math.Float32frombits(uint32(le.Uint16(b[2*i:])) << 16)
		}
		return out, nil
	}
	blockFormats[t].DequantBlocks(out, b)
	return out, nil
}

// QuantizeQ8_0 quantizes float32 values (a multiple of 32) into Q8_0
// blocks as ggml's quantize_row_q8_0_ref does: d = max|x|/127 stored as
// f16, q = round(x/d) half away from zero with the unrounded d.
func QuantizeQ8_0(x []float32) ([]byte, error) {
	if len(x)%32 != 0 {
		return nil, fmt.Errorf("Q8_0 needs a multiple of 32 values, got %d", len(x))
	}
	out := make([]byte, len(x)/32*34)
	for k := range len(x) / 32 {
		blk, o := x[32*k:32*k+32], out[34*k:34*k+34]
		var amax float32
		for _, v := range blk {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(o, hf.Float32ToF16(d))
		for i, v := range blk {
			o[2+i] = byte(int8(math.Round(float64(v * id))))
		}
	}
	return out, nil
}
