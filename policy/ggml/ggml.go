// Package ggml holds ggml's quantized block formats: their sizes, their
// dequantization into float32, and for the K-quants and IQ4_XS fused dot
// products with float32 vectors (Format.Dot, Format.Dot2) and, for Q4_K,
// Q5_K and Q6_K, with vectors quantized to int8 (Format.DotQ8), shared by
// the GGUF reader (policy/gguf, which reads any of them) and the native
// engine (policy/native, which keeps a frozen base's matrices in them and
// dequantizes, or in decoding takes the dot products, as it computes).
package ggml

import (
	"encoding/binary"
	"math"
	"strings"
)

// Dequantization of ggml's block types into float32, the engine's storage.
// The layouts are those of ggml's ggml-common.h (block_q8_0, block_q4_K...)
// and the arithmetic is that of ggml's dequantize_row_* in float32, with
// each product rounded before the sum (the explicit float32 conversions
// keep the compiler from fusing them into an FMA), so that the values
// equal the gguf package's gguf.quants.dequantize bit for bit
// (policy/gguf/testdata/quants.json, TestDequantizeMatchesGGUF: the
// vector forms of simd_amd64.go included, as gguf.Dequantize uses them).
//
//	Q8_0  32 per block: f16 d, int8 q[32];                x = d*q
//	Q4_0  32 per block: f16 d, u8 q[16] (two nibbles);    x = d*(q-8)
//	Q4_1  32 per block: f16 d, f16 m, u8 q[16];           x = d*q + m
//	      (low nibbles are elements 0..15, high nibbles 16..31)
//	Q5_0  32 per block: f16 d, u32 qh, u8 q[16];          x = d*(q-16)
//	Q5_1  32 per block: f16 d, f16 m, u32 qh, u8 q[16];   x = d*q + m
//	      (as Q4_0/Q4_1, element i's fifth bit is bit i of qh)
//	IQ4_NL 32 per block: f16 d, u8 q[16];                 x = d*kv[q]
//	      (kv: sixteen non-uniform levels, IQ4NLValues)
//	Q2_K 256 per block: u8 scales[16] (4-bit scale, 4-bit min), u8 q[64]
//	      (2 bits each), f16 d, f16 dmin; per 16: x = d*sc*q - dmin*m
//	Q3_K 256 per block: u8 hmask[32], u8 q[64], u8 scales[12] (sixteen
//	      6-bit scales), f16 d; per 16: x = d*(sc-32)*(q - 4 unless the
//	      hmask bit is set), q of 2 bits
//	Q4_K 256 per block: f16 d, f16 dmin, u8 scales[12] (eight 6-bit
//	      scale and min pairs), u8 q[128]; per 32: x = d*sc*q - dmin*m
//	Q5_K as Q4_K with u8 qh[32] (the fifth bit) before q[128]
//	Q6_K 256 per block: u8 ql[128], u8 qh[64], int8 scales[16], f16 d;
//	      per 16: x = d*scale*(q-32), q of 6 bits
//	IQ4_XS 256 per block: f16 d, u16 scales_h, u8 scales_l[4], u8 q[128];
//	      per 32: x = d*(sc-32)*kv[q], sc of 6 bits
//
// llama.cpp's k-quant mixes (Q4_K_M, Q3_K_M, Q2_K...) fall back to Q5_0,
// Q5_1, Q8_0 or IQ4_NL for a matrix whose rows are not whole 256-element
// blocks (SmolLM2's and Qwen2.5-0.5B's hidden sizes, 576 and 896), so a
// reader of those files needs the legacy types too.

// A Format is one block type: Values values in Bytes bytes per block,
// and Dequant, which sets y[:Values] to one block's values.
type Format struct {
	Name    string // ggml's name in lower case: "q4_k"
	Values  int
	Bytes   int
	Dequant func(y []float32, blk []byte)

	// blocks, where set, is DequantBlocks on vector registers (simd_amd64.go),
	// the same values bit for bit.
	blocks func(y []float32, src []byte)
	// dot, where set, is Dot on vector registers (dot_amd64.go).
	dot func(x []float32, src []byte, scratch []float32) float32
	// dot2, where set, is Dot2 (dot2_amd64.go).
	dot2 func(xa, xb []float32, src []byte, scratch []float32) (float32, float32)
	// dotQ8, where set, is DotQ8 (dotq8_amd64.go).
	dotQ8 func(x *Q8K, src []byte, scratch []float32) float32
}

// The formats, ggml-common.h's block sizes.
var (
	Q8_0   = &Format{Name: "q8_0", Values: 32, Bytes: 34, Dequant: q8_0}
	Q4_0   = &Format{Name: "q4_0", Values: 32, Bytes: 18, Dequant: q4_0}
	Q4_1   = &Format{Name: "q4_1", Values: 32, Bytes: 20, Dequant: q4_1}
	Q5_0   = &Format{Name: "q5_0", Values: 32, Bytes: 22, Dequant: q5_0}
	Q5_1   = &Format{Name: "q5_1", Values: 32, Bytes: 24, Dequant: q5_1}
	IQ4_NL = &Format{Name: "iq4_nl", Values: 32, Bytes: 18, Dequant: iq4NL}
	Q2_K   = &Format{Name: "q2_k", Values: 256, Bytes: 84, Dequant: q2K}
	Q3_K   = &Format{Name: "q3_k", Values: 256, Bytes: 110, Dequant: q3K}
	Q4_K   = &Format{Name: "q4_k", Values: 256, Bytes: 144, Dequant: q4K}
	Q5_K   = &Format{Name: "q5_k", Values: 256, Bytes: 176, Dequant: q5K}
	Q6_K   = &Format{Name: "q6_k", Values: 256, Bytes: 210, Dequant: q6K}
	IQ4_XS = &Format{Name: "iq4_xs", Values: 256, Bytes: 136, Dequant: iq4XS}
)

// Formats lists them.
var Formats = []*Format{Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS}

// ByName finds a format by its name, in any case ("Q4_K", "q4_k").
func ByName(s string) (*Format, bool) {
	for _, f := range Formats {
		if strings.EqualFold(f.Name, strings.TrimSpace(s)) {
			return f, true
		}
	}
	return nil, false
}

// DequantBlocks sets y (a whole number of blocks' values) from src, the same
// number of blocks.
func (f *Format) DequantBlocks(y []float32, src []byte) {
	if f.blocks != nil {
		f.blocks(y, src)
		return
	}
	for k := range len(y) / f.Values {
		f.Dequant(y[k*f.Values:(k+1)*f.Values], src[k*f.Bytes:(k+1)*f.Bytes])
	}
}

// HasDot says whether Dot has a fused form for f on this CPU (Q4_K, Q5_K
// and Q6_K on AVX-512 or AVX2, IQ4_XS, Q2_K and Q3_K on AVX-512). Without one, a caller
// dequantizes (DequantBlocks) and takes its own dot product.
func (f *Format) HasDot() bool { return f.dot != nil }

// DotScratch is the length of the scratch Dot needs for n values: each
// block's scales, unpacked.
func DotScratch(n int) int { return 8*(n/256) + 4 }

// Dot is x · the values of src's blocks (len(x) of them, a whole number
// of blocks) without writing the values anywhere: the decode step's
// product of one input row with a quantized row. scratch has at least
// DotScratch(len(x)) values. The sum is within float32 rounding of the
// dot product of DequantBlocks's values, not bit for bit (dot_amd64.go).
// It panics unless HasDot.
func (f *Format) Dot(x []float32, src []byte, scratch []float32) float32 {
	nb := len(x) / f.Values
	return f.dot(x[:nb*f.Values], src[:nb*f.Bytes], scratch[:DotScratch(len(x))])
}

// HasDot2 says whether Dot2 has a fused form for f on this CPU (Q4_K,
// Q5_K, Q6_K and IQ4_XS on AVX-512).
func (f *Format) HasDot2() bool { return f.dot2 != nil }

// Dot2 is Dot for two vectors of the same length at once: each block's
// levels converted once for both. Each result has Dot's bits. It panics
// unless HasDot2.
func (f *Format) Dot2(xa, xb []float32, src []byte, scratch []float32) (float32, float32) {
	nb := len(xa) / f.Values
	return f.dot2(xa[:nb*f.Values], xb[:nb*f.Values], src[:nb*f.Bytes], scratch[:DotScratch(len(xa))])
}

// Q8K is a vector quantized for DotQ8, per block of 256 values as
// llama.cpp's block_q8_K: each block's scale D = max|x|/127, its values
// Q = round(x/D) (to even) in int8, and BSums, each 16 of them summed.
type Q8K struct {
	D     []float32
	Q     []int8
	BSums []int16
}

// Quantize sets q from x (a whole number of blocks of 256), reusing q's
// slices where they are long enough.
func (q *Q8K) Quantize(x []float32) {
	nb := len(x) / 256
	q.D = growTo(q.D, nb)
	q.Q = growTo(q.Q, nb*256)
	q.BSums = growTo(q.BSums, nb*16)
	for k := range nb {
		blk := x[k*256 : (k+1)*256]
		var amax float32
		for _, v := range blk {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		d, id := amax/127, float32(0)
		if d != 0 {
			id = 1 / d
		}
		q.D[k] = d
		for g := range 16 {
			var s int16
			for i, v := range blk[16*g : 16*g+16] {
				v := int8(math.RoundToEven(float64(v * id)))
				q.Q[k*256+16*g+i], s = v, s+int16(v)
			}
			q.BSums[k*16+g] = s
		}
	}
}

func growTo[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// HasDotQ8 says whether DotQ8 has a form for f on this CPU (Q4_K, Q5_K
// and Q6_K on AVX2 or AVX-512).
func (f *Format) HasDotQ8() bool { return f.dotQ8 != nil }

// DotQ8 is Dot with the vector quantized (Q8K.Quantize), as llama.cpp's
// ggml_vec_dot_q4_K_q8_K computes it: per block the products of the
// integer levels and the int8 values summed exactly in integers, times
// the sub-blocks' scales, the mins times the BSums; only each block's
// d·D scaling and the sum over blocks are float32. So it is the dot
// product of DequantBlocks's values with x rounded to the int8 grid (D·Q),
// to within float32 rounding (TestDotQ8): like Dot's, but for x's
// rounding, at most D/2 per value. scratch has at least DotScratch(len
// of x) values. It panics unless HasDotQ8.
func (f *Format) DotQ8(x *Q8K, src []byte, scratch []float32) float32 {
	nb := len(x.D)
	return f.dotQ8(x, src[:nb*f.Bytes], scratch[:DotScratch(nb*256)])
}

// F16ToF32 widens an IEEE half-precision value (exact).
func F16ToF32(h uint16) float32 { return math.Float32frombits(f16Bits(h)) }

// f16Bits is F16ToF32's value's bits, by integer instructions only.
func f16Bits(h uint16) uint32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf, NaN
		return sign | 0x7f800000 | man<<13
	case exp == 0 && man == 0:
		return sign
	case exp == 0: // subnormal: normalize
		e := uint32(127 - 15 + 1)
		for man&0x400 == 0 {
			man <<= 1
			e--
		}
		return sign | e<<23 | (man&0x3ff)<<13
	}
	return sign | (exp+127-15)<<23 | man<<13
}

func f16(b []byte) float32 { return F16ToF32(binary.LittleEndian.Uint16(b)) }

func q8_0(y []float32, b []byte) {
	d := f16(b)
	for i := range 32 {
		y[i] = float32(int8(b[2+i])) * d
	}
}

func q4_0(y []float32, b []byte) {
	d := f16(b)
	q := b[2:18]
	for i := range 16 {
		y[i] = d * float32(int(q[i]&0xf)-8)
		y[i+16] = d * float32(int(q[i]>>4)-8)
	}
}

func q4_1(y []float32, b []byte) {
	d, m := f16(b), f16(b[2:])
	q := b[4:20]
	for i := range 16 {
		y[i] = float32(d*float32(q[i]&0xf)) + m
		y[i+16] = float32(d*float32(q[i]>>4)) + m
	}
}

// Q5 unpacks the 5-bit values of elements i and i+16 of a Q5_0 or Q5_1
// block from its qh and its q[16]: the nibbles of q[i], and bits i and
// i+16 of qh.
func Q5(q []byte, qh uint32, i int) (lo, hi byte) {
	return q[i]&0xf | byte(qh>>i&1)<<4, q[i]>>4 | byte(qh>>(i+16)&1)<<4
}

func q5_0(y []float32, b []byte) {
	d := f16(b)
	qh := binary.LittleEndian.Uint32(b[2:])
	for i := range 16 {
		lo, hi := Q5(b[6:22], qh, i)
		y[i] = d * float32(int(lo)-16)
		y[i+16] = d * float32(int(hi)-16)
	}
}

func q5_1(y []float32, b []byte) {
	d, m := f16(b), f16(b[2:])
	qh := binary.LittleEndian.Uint32(b[4:])
	for i := range 16 {
		lo, hi := Q5(b[8:24], qh, i)
		y[i] = float32(d*float32(lo)) + m
		y[i+16] = float32(d*float32(hi)) + m
	}
}

// IQ4NLValues are IQ4_NL's and IQ4_XS's sixteen levels (ggml's
// kvalues_iq4nl).
var IQ4NLValues = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

func iq4NL(y []float32, b []byte) {
	d := f16(b)
	q := b[2:18]
	for i := range 16 {
		y[i] = d * float32(IQ4NLValues[q[i]&0xf])
		y[i+16] = d * float32(IQ4NLValues[q[i]>>4])
	}
}

// q2KScales sets a Q2_K block's sixteen sub-block scales d·sc and mins
// dmin·m (arrays with room for vector loads past the sixteenth).
func q2KScales(b []byte, dl, ml *[19]float32) {
	d, dmin := f16(b[80:]), f16(b[82:])
	for i, sc := range b[0:16] {
		dl[i], ml[i] = d*float32(sc&0xf), dmin*float32(sc>>4)
	}
}

func q2K(y []float32, b []byte) {
	var dl, ml [19]float32
	q2KScales(b, &dl, &ml)
	q := b[16:80]
	// Two halves of 128: each of their 32 bytes holds four 2-bit values,
	// bits 2s..2s+1 being element 32s+l of the half; a scale byte per 16.
	for h := range 2 {
		for s := range 4 {
			for l := range 32 {
				e := 128*h + 32*s + l
				y[e] = float32(dl[e/16]*float32(q[32*h+l]>>(2*s)&3)) - ml[e/16]
			}
		}
	}
}

// q3KScales sets a Q3_K block's sixteen sub-block scales d·(sc-32):
// scale i's low four bits are a nibble of bytes 0-7 of its scales (low
// nibbles for 0-7, high for 8-15), its top two bits 2(i/4) of byte
// 8+i%4.
func q3KScales(b []byte, scale *[19]float32) {
	sb, d := b[96:108], f16(b[108:])
	for i := range 16 {
		lo := sb[i%8] >> (4 * (i / 8)) & 0xf
		hi := sb[8+i%4] >> (2 * (i / 4)) & 3
		scale[i] = d * float32(int(lo|hi<<4)-32)
	}
}

func q3K(y []float32, b []byte) {
	var scale [19]float32
	q3KScales(b, &scale)
	hmask, q := b[0:32], b[32:96]
	// The low two bits as Q2_K's; element e's high bit is bit e/32 of
	// hmask[e%32], and a clear bit subtracts 4.
	for h := range 2 {
		for s := range 4 {
			for l := range 32 {
				e := 128*h + 32*s + l
				v := int(q[32*h+l] >> (2 * s) & 3)
				if hmask[l]>>(e/32)&1 == 0 {
					v -= 4
				}
				y[e] = scale[e/16] * float32(v)
			}
		}
	}
}

// iq4XSScales sets an IQ4_XS block's eight sub-block scales d·(ls-32):
// sub-block j's ls is a nibble of scales_l[j/2] and bits 2j..2j+1 of
// scales_h.
func iq4XSScales(b []byte, dl *[11]float32) {
	d := f16(b)
	sh := binary.LittleEndian.Uint16(b[2:])
	sl := b[4:8]
	for j := range 8 {
		ls := sl[j/2]>>(4*(j%2))&0xf | byte(sh>>(2*j)&3)<<4
		dl[j] = d * float32(int(ls)-32)
	}
}

func iq4XS(y []float32, b []byte) {
	var dl [11]float32
	iq4XSScales(b, &dl)
	q := b[8:136]
	// Eight sub-blocks of 32, each laid out as IQ4_NL's block.
	for j := range 8 {
		qs, y := q[16*j:16*j+16], y[32*j:]
		for i := range 16 {
			y[i] = dl[j] * float32(IQ4NLValues[qs[i]&0xf])
			y[i+16] = dl[j] * float32(IQ4NLValues[qs[i]>>4])
		}
	}
}

// scaleMinK4 unpacks the j-th 6-bit scale and min of a Q4_K/Q5_K block's
// 12 scale bytes: the first four pairs are the low six bits of bytes 0-3
// (scales) and 4-7 (mins); the last four take their low four bits from
// bytes 8-11 and their top two from the spare bits of bytes 0-7.
func scaleMinK4(j int, s []byte) (sc, m uint8) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return s[j+4]&0xf | (s[j-4]>>6)<<4, s[j+4]>>4 | (s[j]>>6)<<4
}

func q4K(y []float32, b []byte) {
	d, dmin := f16(b), f16(b[2:])
	scales, q := b[4:16], b[16:144]
	// Four groups of 64: 32 bytes whose low nibbles are one sub-block and
	// high nibbles the next.
	for g := range 4 {
		sc1, m1 := scaleMinK4(2*g, scales)
		sc2, m2 := scaleMinK4(2*g+1, scales)
		d1, min1 := d*float32(sc1), dmin*float32(m1)
		d2, min2 := d*float32(sc2), dmin*float32(m2)
		qs := q[32*g : 32*g+32]
		for l := range 32 {
			y[64*g+l] = float32(d1*float32(qs[l]&0xf)) - min1
			y[64*g+32+l] = float32(d2*float32(qs[l]>>4)) - min2
		}
	}
}

func q5K(y []float32, b []byte) {
	d, dmin := f16(b), f16(b[2:])
	scales, qh, q := b[4:16], b[16:48], b[48:176]
	// As Q4_K; sub-block j's fifth bit is bit j of qh[l].
	for g := range 4 {
		sc1, m1 := scaleMinK4(2*g, scales)
		sc2, m2 := scaleMinK4(2*g+1, scales)
		d1, min1 := d*float32(sc1), dmin*float32(m1)
		d2, min2 := d*float32(sc2), dmin*float32(m2)
		qs := q[32*g : 32*g+32]
		lo, hi := uint(2*g), uint(2*g+1)
		for l := range 32 {
			v1 := qs[l]&0xf | (qh[l]>>lo&1)<<4
			v2 := qs[l]>>4 | (qh[l]>>hi&1)<<4
			y[64*g+l] = float32(d1*float32(v1)) - min1
			y[64*g+32+l] = float32(d2*float32(v2)) - min2
		}
	}
}

func q6K(y []float32, b []byte) {
	ql, qh, sc := b[0:128], b[128:192], b[192:208]
	d := f16(b[208:])
	// Two halves of 128: ql's 64 bytes give the low four bits of elements
	// l, l+32 (low nibbles) and l+64, l+96 (high nibbles); qh's 32 bytes
	// their top two bits, in pairs from bit 0 up.
	for h := range 2 {
		lq, hq, y := ql[64*h:], qh[32*h:], y[128*h:]
		for l := range 32 {
			q1 := int(lq[l]&0xf|(hq[l]>>0&3)<<4) - 32
			q2 := int(lq[l+32]&0xf|(hq[l]>>2&3)<<4) - 32
			q3 := int(lq[l]>>4|(hq[l]>>4&3)<<4) - 32
			q4 := int(lq[l+32]>>4|(hq[l]>>6&3)<<4) - 32
			for k, q := range [4]int{q1, q2, q3, q4} {
				e := l + 32*k
				s := d * float32(int8(sc[8*h+e/16]))
				y[e] = s * float32(q)
			}
		}
	}
}
