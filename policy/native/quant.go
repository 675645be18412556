package native

import (
	"fmt"
	"math"
	"strings"

	"github.com/mlerl/mlerl/policy/ggml"
)

// A frozen base kept in ggml's quantized blocks (Options.BaseStorage
// q8_0, q4_0, q4_1, or per matrix Options.MatrixStorage): each matrix
// holds, per row of 32-value blocks, the blocks' quantized values and
// their float16 scales, the bytes of a GGUF file's tensor rearranged, so
// that a model opened from a quantized file computes with the file's
// weights as they are, in about a sixth (Q4) or a third (Q8) of float32's
// memory, and reads that much less per decoded token. ggml's other
// formats (Q5_1, the K-quants, IQ4_XS: the raw formats, quantType.raw)
// are kept as the file's rows of blocks and dequantized a row at a time
// by every product (policy/ggml's code, the reader's).
//
//	Q8_0  y = d·q            q int8,  d float16           34 bytes per 32
//	Q4_0  y = d·(q-8)        q 4 bits, d float16           18 bytes per 32
//	Q4_1  y = d·q + m        q 4 bits, d and m float16     20 bytes per 32
//
// A row is the quantized direction of a matrix, the one ggml's blocks run
// along: a dense layer's input (its row j holds the weights of output j,
// a Hugging Face Linear's row), the embedding's width (its row t is token
// t's embedding). The values are those of policy/gguf's (and the gguf
// package's) dequantization, bit for bit: float32(d·q) + m for Q4_1, each
// product rounded before the sum.
//
// Products read the blocks two ways (quantgemm.go):
//
//   - a product of at most gemmSmallM rows (decoding, a short Extend)
//     multiplies by the blocks directly: per block, the dot product of
//     the input with the quantized values in float32, times d, and for
//     Q4_1 m times the block's input sum (kernels.qdot). It computes the
//     dequantized product's function in another order of float32
//     operations (QuantTolerance);
//   - a larger one (prefill, the training forward and the backward
//     pass's input gradient dX = dY·Wᵀ) dequantizes the columns of B each
//     worker computes into the panels the float32 (or bf16) micro-kernel
//     reads: the same panels, so the same bits, as a float32 base holding
//     the dequantized weights.
//
// Nothing trains in blocks: a quantized matrix is frozen (LoRA's base, or
// Options.Frozen), and a model that trains every weight keeps them in
// float32.

// Base storages of quantized blocks (Options.BaseStorage,
// Options.MatrixStorage).
const (
	StorageQ8_0 = "q8_0"
	StorageQ4_0 = "q4_0"
	StorageQ4_1 = "q4_1"
)

// QuantBlock is the number of values in one block of every quantized
// storage: a quantized matrix's rows are a multiple of it.
const QuantBlock = 32

// quantType is a block format; qNone is no quantization (float32 or
// bfloat16 storage).
type quantType uint8

const (
	qNone quantType = iota
	qQ8_0
	qQ4_0
	qQ4_1
	// ggml's other formats, kept as a GGUF file stores them and
	// dequantized a row at a time as the engine computes (raw).
	qQ5_1
	qQ2_K
	qQ3_K
	qQ4_K
	qQ5_K
	qQ6_K
	qIQ4_XS
)

// rawFormats are the formats without kernels of their own, by type.
var rawFormats = [...]*ggml.Format{
	qQ5_1: ggml.Q5_1, qQ2_K: ggml.Q2_K, qQ3_K: ggml.Q3_K, qQ4_K: ggml.Q4_K,
	qQ5_K: ggml.Q5_K, qQ6_K: ggml.Q6_K, qIQ4_XS: ggml.IQ4_XS,
}

// raw is the ggml format of a type kept as a GGUF file stores it (Q5_1,
// the K-quants, IQ4_XS); nil for the kernels' own Q8_0, Q4_0 and Q4_1.
// Such a matrix's row is its blocks as the file has them, each product
// dequantizes the rows it reads (dequantRange: ggml's arithmetic, the
// values policy/gguf reads), and a matrix in one cannot be quantized
// from float32 values: only a loaded base (Options.LoadedBase) writes
// it, with SetParamBlocks.
func (t quantType) raw() *ggml.Format {
	if int(t) < len(rawFormats) {
		return rawFormats[t]
	}
	return nil
}

// blockValues is the number of values in one of the type's blocks: 32,
// or 256 for the K-quants and IQ4_XS.
func (t quantType) blockValues() int {
	if f := t.raw(); f != nil {
		return f.Values
	}
	return QuantBlock
}

func (t quantType) String() string {
	if f := t.raw(); f != nil {
		return f.Name
	}
	switch t {
	case qQ8_0:
		return StorageQ8_0
	case qQ4_0:
		return StorageQ4_0
	case qQ4_1:
		return StorageQ4_1
	}
	return "none"
}

// qsBytes is the bytes of one block's quantized values; scales the
// float16 scales per block (d, and m for Q4_1).
func (t quantType) qsBytes() int {
	if t == qQ8_0 {
		return 32
	}
	return 16
}

func (t quantType) scales() int {
	if t == qQ4_1 {
		return 2
	}
	return 1
}

// blockBytes is one block's size in a GGUF file (and here).
func (t quantType) blockBytes() int { return t.qsBytes() + 2*t.scales() }

// parseQuant maps a storage name to its block format (qNone for fp32 and
// bf16); ok is false for an unknown name.
func parseQuant(s string) (quantType, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case StorageQ8_0:
		return qQ8_0, true
	case StorageQ4_0:
		return qQ4_0, true
	case StorageQ4_1:
		return qQ4_1, true
	}
	if f, ok := ggml.ByName(s); ok {
		for t, g := range rawFormats {
			if g == f {
				return quantType(t), true
			}
		}
	}
	return qNone, false
}

// qmat is a quantized matrix of rows x cols values (cols a multiple of
// QuantBlock). Row j is stored as one record of rowBytes bytes at
// data[j*rowBytes:]: its nb = cols/32 blocks' quantized values (qsBytes
// each, in ggml's order: Q8_0's 32 int8; Q4's 16 bytes, low nibbles the
// block's values 0-15 and high nibbles 16-31), then the nb float16 d,
// then for Q4_1 the nb float16 m. Keeping a row's bytes together lets a
// product stream each row once; keeping the scales apart from the values
// lets the kernels convert a row's scales 16 at a time. data has
// qmatPad bytes past the last row, which the vector kernels may read
// (never use).
type qmat struct {
	typ        quantType
	rows, cols int
	nb         int // blocks per row
	rowBytes   int
	data       []byte
}

// qmatPad is what the vector kernels may read past a matrix's last row:
// a group of 16 scales converted at once (32 bytes) from its last row's
// last scale.
const qmatPad = 64

func newQmat(t quantType, rows, cols int) *qmat {
	nb := cols / QuantBlock
	rb := nb * t.blockBytes()
	if f := t.raw(); f != nil {
		rb = cols / f.Values * f.Bytes
	}
	return &qmat{typ: t, rows: rows, cols: cols, nb: nb, rowBytes: rb, data: make([]byte, rows*rb+qmatPad)}
}

// row returns row j's record.
func (q *qmat) row(j int) []byte { return q.data[j*q.rowBytes : (j+1)*q.rowBytes] }

// rowParts splits row j's record into its quantized values and scales (m
// nil unless Q4_1).
func (q *qmat) rowParts(j int) (qs []byte, d, m []byte) {
	r := q.row(j)
	n := q.nb * q.typ.qsBytes()
	qs, d = r[:n], r[n:n+2*q.nb]
	if q.typ == qQ4_1 {
		m = r[n+2*q.nb : n+4*q.nb]
	}
	return qs, d, m
}

// bytes is the memory the matrix's blocks take.
func (q *qmat) bytes() int { return q.rows * q.rowBytes }

// setBlocks writes rows [0, rows) from src, ggml's layout (rows of
// blocks, each block its scales then its values).
func (q *qmat) setBlocks(src []byte) {
	if q.typ.raw() != nil {
		copy(q.data, src[:q.rows*q.rowBytes])
		return
	}
	bb, qb := q.typ.blockBytes(), q.typ.qsBytes()
	for j := range q.rows {
		qs, d, m := q.rowParts(j)
		for b := range q.nb {
			blk := src[(j*q.nb+b)*bb : (j*q.nb+b+1)*bb]
			copy(d[2*b:2*b+2], blk[0:2])
			if m != nil {
				copy(m[2*b:2*b+2], blk[2:4])
			}
			copy(qs[b*qb:(b+1)*qb], blk[bb-qb:])
		}
	}
}

// blocks returns the matrix in ggml's layout (setBlocks' inverse).
func (q *qmat) blocks() []byte {
	if q.typ.raw() != nil {
		return append([]byte(nil), q.data[:q.rows*q.rowBytes]...)
	}
	bb, qb := q.typ.blockBytes(), q.typ.qsBytes()
	out := make([]byte, q.rows*q.nb*bb)
	for j := range q.rows {
		qs, d, m := q.rowParts(j)
		for b := range q.nb {
			blk := out[(j*q.nb+b)*bb : (j*q.nb+b+1)*bb]
			copy(blk[0:2], d[2*b:2*b+2])
			if m != nil {
				copy(blk[2:4], m[2*b:2*b+2])
			}
			copy(blk[bb-qb:], qs[b*qb:(b+1)*qb])
		}
	}
	return out
}

func le16(b []byte) uint16 { return uint16(b[0]) | uint16(b[1])<<8 }

// dequantRow sets dst (q.cols values) to row j dequantized, as ggml's
// dequantize_row_* computes it in float32 (each product rounded before
// the sum: the explicit conversions keep the compiler from fusing them).
func (q *qmat) dequantRow(dst []float32, j int) { q.dequantRange(dst, j, 0, q.nb) }

// dequantRange sets dst to blocks [b0, b1) of row j dequantized
// ((b1-b0)·32 values).
func (q *qmat) dequantRange(dst []float32, j, b0, b1 int) {
	if f := q.typ.raw(); f != nil {
		q.dequantRaw(f, dst, j, b0, b1)
		return
	}
	qs, d, m := q.rowParts(j)
	dst = dst[:(b1-b0)*QuantBlock]
	for b := b0; b < b1; b++ {
		y := dst[(b-b0)*QuantBlock : (b-b0+1)*QuantBlock]
		db := f16ToF32(le16(d[2*b:]))
		switch q.typ {
		case qQ8_0:
			for i, v := range qs[32*b : 32*b+32] {
				y[i] = float32(int8(v)) * db
			}
		case qQ4_0:
			for i, v := range qs[16*b : 16*b+16] {
				y[i] = db * float32(int(v&0xf)-8)
				y[i+16] = db * float32(int(v>>4)-8)
			}
		case qQ4_1:
			mb := f16ToF32(le16(m[2*b:]))
			for i, v := range qs[16*b : 16*b+16] {
				y[i] = float32(db*float32(v&0xf)) + mb
				y[i+16] = float32(db*float32(v>>4)) + mb
			}
		}
	}
}

// dequantRaw is dequantRange for a raw format (f): each run of f's
// blocks that [b0, b1) covers whole in one call (f.DequantBlocks: on
// vector registers where the format has them), a block it covers in part
// (at either end) into a block of scratch first.
func (q *qmat) dequantRaw(f *ggml.Format, dst []float32, j, b0, b1 int) {
	row := q.row(j)
	per := f.Values / QuantBlock
	var tmp [256]float32
	for b := b0; b < b1; {
		k := b / per
		end := min(b1, (k+1)*per)
		if b == k*per && end == (k+1)*per {
			k1 := b1 / per
			f.DequantBlocks(dst[(b-b0)*QuantBlock:(k1*per-b0)*QuantBlock], row[k*f.Bytes:k1*f.Bytes])
			b = k1 * per
			continue
		}
		f.Dequant(tmp[:f.Values], row[k*f.Bytes:(k+1)*f.Bytes])
		copy(dst[(b-b0)*QuantBlock:(end-b0)*QuantBlock], tmp[(b-k*per)*QuantBlock:])
		b = end
	}
}

// quantizeRows sets rows [0, rows) from float32 src (rows x cols,
// row-major) quantized as ggml's reference quantizers (quantize_row_*_ref)
// do.
func (q *qmat) quantizeRows(src []float32) {
	if q.typ.raw() != nil {
		panic(fmt.Sprintf("native: a matrix in %s blocks cannot be quantized from float32 values", q.typ))
	}
	for j := range q.rows {
		q.quantizeRow(j, src[j*q.cols:(j+1)*q.cols])
	}
}

// quantizeRow quantizes x (q.cols values) into row j:
//
//	Q8_0: d = max|x|/127, q = round(x/d) (half away from zero);
//	Q4_0: with v the value of largest magnitude, d = v/-8,
//	      q = min(15, trunc(x/d + 8.5));
//	Q4_1: d = (max-min)/15, m = min, q = min(15, trunc((x-m)/d + 0.5));
//
// each with the unrounded d and 1/d (0 when d is), d and m stored as
// float16.
func (q *qmat) quantizeRow(j int, x []float32) {
	qs, d, m := q.rowParts(j)
	put := func(dst []byte, v float32) {
		h := f32ToF16(v)
		dst[0], dst[1] = byte(h), byte(h>>8)
	}
	for b := range q.nb {
		blk := x[b*QuantBlock : (b+1)*QuantBlock]
		switch q.typ {
		case qQ8_0:
			db, id := q8Scale(blk)
			put(d[2*b:], db)
			for i, v := range blk {
				qs[32*b+i] = byte(int8(math.Round(float64(v * id))))
			}
		case qQ4_0:
			var amax, vmax float32
			for _, v := range blk {
				if a := float32(math.Abs(float64(v))); a > amax {
					amax, vmax = a, v
				}
			}
			db := vmax / -8
			var id float32
			if db != 0 {
				id = 1 / db
			}
			put(d[2*b:], db)
			for i := range 16 {
				x0 := min(15, int8(float32(blk[i]*id)+8.5))
				x1 := min(15, int8(float32(blk[i+16]*id)+8.5))
				qs[16*b+i] = byte(x0) | byte(x1)<<4
			}
		case qQ4_1:
			lo, hi := blk[0], blk[0]
			for _, v := range blk {
				lo, hi = min(lo, v), max(hi, v)
			}
			db := (hi - lo) / 15
			var id float32
			if db != 0 {
				id = 1 / db
			}
			put(d[2*b:], db)
			put(m[2*b:], lo)
			for i := range 16 {
				x0 := min(15, int8(float32((blk[i]-lo)*id)+0.5))
				x1 := min(15, int8(float32((blk[i+16]-lo)*id)+0.5))
				qs[16*b+i] = byte(x0) | byte(x1)<<4
			}
		}
	}
}

// f16ToF32 widens an IEEE half-precision value (exact).
func f16ToF32(h uint16) float32 { return ggml.F16ToF32(h) }

// f32ToF16 rounds a float32 to half precision, to nearest even (ggml's
// GGML_FP32_TO_FP16 on x86: F16C's conversion), overflow to Inf.
func f32ToF16(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	exp := int(u>>23) & 0xff
	man := u & 0x7fffff
	switch {
	case exp == 0xff: // Inf, NaN (kept a quiet NaN)
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp-127 > 15:
		return sign | 0x7c00
	case exp-127 >= -14: // normal
		h := uint32(exp-127+15)<<10 | man>>13
		rest := man & 0x1fff
		if rest > 0x1000 || rest == 0x1000 && h&1 == 1 {
			h++ // may carry into the exponent, up to Inf: correct
		}
		return sign | uint16(h)
	case exp-127 >= -25: // subnormal half
		man |= 0x800000
		shift := uint(-14-(exp-127)) + 13
		h := man >> shift
		rest := man & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rest > half || rest == half && h&1 == 1 {
			h++
		}
		return sign | uint16(h)
	}
	return sign
}

// QuantTolerance is the stated precision of a product of at most
// gemmSmallM rows read from quantized blocks (decoding) against the same
// product with the dequantized weights in float32, relative to the
// scale of the results: the kernels sum in float32 in another order
// (per block the dot product with the quantized values, then times d,
// plus for Q4_1 m times the block's input sum), so each output differs
// by a few float32 roundings of its terms' magnitudes. Through a chain of
// depth products that feed each other (a transformer's layers, the LM
// head) the differences add up: 2⁻¹⁹·depth covers the sums of up to a
// few thousand terms that a layer makes, with the margin of the float32
// path's own decode-against-forward checks.
func QuantTolerance(depth int) float64 { return 0x1p-19 * float64(max(depth, 1)) }

// checkQuantShape reports whether a matrix of rows x cols values can be
// stored in blocks.
func checkQuantShape(name string, t quantType, rows, cols int) error {
	if cols%t.blockValues() != 0 {
		return fmt.Errorf("native: %s cannot be stored as %s: its rows of %d values are not a multiple of %d (the block size)", name, t, cols, t.blockValues())
	}
	return nil
}

// q8Scale is the scale of a Q8_0 block, ggml's: d = max|x| / 127, and
// its inverse (0 for a block of zeros), which the values are multiplied
// by before rounding. The stored weights (qmat.quantizeRow) and the int8
// activations (quant8.go) share it.
func q8Scale(blk []float32) (d, id float32) {
	var amax float32
	for _, v := range blk {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	d = amax / 127
	if d != 0 {
		id = 1 / d
	}
	return d, id
}
