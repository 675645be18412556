package native

import (
	"fmt"
	"math"
	"strings"
)

// Products of a few rows with quantized blocks in integer arithmetic, as
// llama.cpp computes them (its ggml_vec_dot_q4_1_q8_1...): the input row
// is quantized too, per block of 32 to int8 with a float32 scale (ggml's
// Q8_0: dx = max|x|/127, q = round(x/dx)), and each block's dot product
// of the two sets of integers is exact; only the scaling and the sum over
// blocks are float32. An integer multiply-add (AVX512_VNNI's VPDPBUSD)
// does 64 of them per instruction where float32 FMAs do 16 and the
// quantized values must first be converted: decoding reads the same
// blocks in about half the instructions.
//
// What it computes is the product of the dequantized weights with the
// input rounded to that grid, x̃ = dx·q:
//
//	y = Σ_b d_b·dx_b·Σ_i w_bi·q_bi  (+ m_b·dx_b·Σ_i q_bi for Q4_1)
//
// so it differs from the float32 product (QuantTolerance) by the input's
// rounding, at most Σ_b (dx_b/2)·Σ_i |w_bi| per output (Int8Bound): for
// an output, about 1/254 of its terms' magnitude at worst, a few
// thousandths of it typically, like bf16 products. It is a choice of the
// caller (Model.SetQuantActivations int8; fp32, the default, keeps the
// float32 products): decoding in int8 computes other logits than the
// training forward (products of more rows, float32 from panels), so that
// a sampler's log-probabilities and a learner's would not agree to float32
// rounding.

// Activations of the products with quantized blocks (SetQuantActivations).
const (
	ActivationsFP32 = "fp32"
	ActivationsInt8 = "int8"
)

// SetQuantActivations sets how products of at most gemmSmallM rows with
// quantized blocks treat their input: ActivationsFP32 (float32, the
// default) or ActivationsInt8 (quantized to int8 per block, integer dot
// products: quant8.go for Q4_0, Q4_1 and Q8_0 blocks, ggml.Format.DotQ8
// for Q4_K, Q5_K and Q6_K; the other raw formats keep float32 inputs).
// It returns the mode as the model records it.
func (m *Model) SetQuantActivations(mode string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(mode)) {
	case ActivationsFP32, "":
		m.int8 = false
	case ActivationsInt8:
		m.int8 = true
	default:
		return "", fmt.Errorf("native: quantized products' activations %q: want %s or %s", mode, ActivationsFP32, ActivationsInt8)
	}
	return m.QuantActivations(), nil
}

// QuantActivations is the model's SetQuantActivations mode.
func (m *Model) QuantActivations() string {
	if m.int8 {
		return ActivationsInt8
	}
	return ActivationsFP32
}

// Int8Native reports whether this CPU and build run the int8 products on
// AVX512_VNNI; elsewhere a plain-Go kernel computes the same integer
// sums (slowly: it exists so that the mode and its checks run
// everywhere).
func Int8Native() bool { return KernelName() == "avx512" && kern.qgemv8 != nil && kern.qgemv8Native }

// q8Input is input rows quantized for the int8 products, per row: each
// block's scale dx, its 32 int8 values and their sum; sxq the block's
// dequantized sum dx·Σq (Q4_1's m multiplies it).
type q8Input struct {
	rows, nb int
	dx, sxq  []float32 // [rows][nb]
	q        []int8    // [rows][nb·32]
	sum      []int32   // [rows][nb]
	// The vector kernels' layout of each row (prep8), for the format
	// typ: pack holds a row's sub-groups at packStride bytes per row;
	// dxp and sxqp its dx and sxq padded with zeros to whole groups of
	// 16, at padStride floats per row.
	typ                   quantType
	pack                  []byte
	packStride, padStride int
	dxp, sxqp             []float32
}

// quantizeInput8 quantizes rows rows of x (stride ldx, nb blocks each)
// into in (grown), as ggml's quantize_row_q8_0 does but for the scale,
// kept in float32, and the rounding, to nearest even (VCVTPS2DQ's; ggml
// rounds half away from zero): dx = max|x|/127, q = round(x·(1/dx)),
// q = 0 in a block of zeros. kern.quant8 does each row where the tier
// has one (the same values).
func quantizeInput8(in *q8Input, x []float32, ldx, rows, nb int) {
	in.rows, in.nb = rows, nb
	in.dx, in.sxq = grow(in.dx, rows*nb), grow(in.sxq, rows*nb)
	if cap(in.q) < rows*nb*QuantBlock {
		in.q = make([]int8, rows*nb*QuantBlock)
	}
	in.q = in.q[:rows*nb*QuantBlock]
	if cap(in.sum) < rows*nb {
		in.sum = make([]int32, rows*nb)
	}
	in.sum = in.sum[:rows*nb]
	for r := range rows {
		xr := x[r*ldx : r*ldx+nb*QuantBlock]
		if kern.quant8 != nil {
			kern.quant8(xr, in.q[r*nb*QuantBlock:(r+1)*nb*QuantBlock], in.dx[r*nb:(r+1)*nb], in.sxq[r*nb:(r+1)*nb], in.sum[r*nb:(r+1)*nb])
			continue
		}
		for b := range nb {
			d, id := q8Scale(xr[b*QuantBlock : (b+1)*QuantBlock])
			qs := in.q[(r*nb+b)*QuantBlock : (r*nb+b+1)*QuantBlock]
			var s int32
			for i, v := range xr[b*QuantBlock : (b+1)*QuantBlock] {
				q := int8(math.RoundToEven(float64(v * id)))
				qs[i], s = q, s+int32(q)
			}
			in.dx[r*nb+b], in.sum[r*nb+b] = d, s
			in.sxq[r*nb+b] = d * float32(s)
		}
	}
}

// Int8Bound is the most the int8 products (quant8.go) can move an
// output from the float32 product with the same dequantized weights w:
// each input value is rounded to its block's grid, by at most dx/2, so
// |Δy| <= Σ_b dx_b/2 · Σ_i |w_bi| (= Σ_b max|x_b|/254 · Σ_i |w_bi|),
// plus float32 rounding.
func Int8Bound(x, w []float32) float64 {
	var s float64
	for b := 0; b+QuantBlock <= len(x); b += QuantBlock {
		var amax, wsum float64
		for i := b; i < b+QuantBlock; i++ {
			amax = math.Max(amax, math.Abs(float64(x[i])))
			wsum += math.Abs(float64(w[i]))
		}
		s += float64(float32(amax)/127) / 2 * wsum
	}
	return s
}

// qgemv8Generic is kernels.qgemv8 in plain Go: for each row j of
// [j0, j0+n) and input row r, the integer dot products of its blocks
// with the quantized input's, scaled by d·dx, plus m·dx·Σq (Q4_1),
// summed over the blocks in order.
func qgemv8Generic(ws *workspace, q *qmat, j0, n int, in *q8Input, y []float32, ldy int, acc bool) {
	for j := range n {
		qs, d, m := q.rowParts(j0 + j)
		for r := range in.rows {
			xq := in.q[r*in.nb*QuantBlock:]
			var s, ms float32
			for b := range q.nb {
				x := xq[b*QuantBlock : (b+1)*QuantBlock]
				var dot int32
				switch q.typ {
				case qQ8_0:
					for i, v := range qs[32*b : 32*b+32] {
						dot += int32(int8(v)) * int32(x[i])
					}
				case qQ4_0, qQ4_1:
					for i, v := range qs[16*b : 16*b+16] {
						dot += int32(v&0xf)*int32(x[i]) + int32(v>>4)*int32(x[i+16])
					}
					if q.typ == qQ4_0 {
						dot -= 8 * in.sum[r*in.nb+b]
					}
				}
				sc := f16ToF32(le16(d[2*b:])) * in.dx[r*in.nb+b]
				s += sc * float32(dot)
				if m != nil {
					ms += f16ToF32(le16(m[2*b:])) * in.sxq[r*in.nb+b]
				}
			}
			s += ms
			if acc {
				s += y[r*ldy+j]
			}
			y[r*ldy+j] = s
		}
	}
}
