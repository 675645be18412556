//go:build goexperiment.simd && amd64

package ggml

// Dot products of Q4_K, Q5_K and Q6_K rows with a vector quantized to
// int8 per block of 256 (Q8K), in integer arithmetic as llama.cpp's
// ggml_vec_dot_q4_K_q8_K and its siblings compute them on AVX2: the
// levels are unsigned bytes (Q4_K 0-15, Q5_K 0-31, Q6_K 0-63 before its
// offset), so VPMADDUBSW multiplies 32 of them by 32 int8 values and adds
// pairs into int16 (at most 2·63·127, no saturation), and VPMADDWD with
// the sub-block's scale adds pairs again into int32: 32 products in two
// instructions, where the float32 form (dot_amd64.go) converts each level
// to float32 first. A block's integer sum is exact; the mins (Q4_K,
// Q5_K) multiply the vector's per-16 sums (BSums) and Q6_K's offset 32
// is taken off through them too, all in integer vectors. Only the block's
// d·D and dmin·D scaling and the sum over blocks are float32.
//
// The vectors are 256 bits wide on AVX2 and AVX-512 machines alike.

import (
	"math"
	"simd/archsimd"
	"unsafe"
)

func init() {
	if archsimd.X86.AVX2() && archsimd.X86.FMA() {
		Q4_K.dotQ8, Q5_K.dotQ8, Q6_K.dotQ8 = q4KDotQ8, q5KDotQ8, q6KDotQ8
	}
}

func q4KDotQ8(x *Q8K, src []byte, s []float32) float32 { return kDotQ8(x, src, s, 144, false) }
func q5KDotQ8(x *Q8K, src []byte, s []float32) float32 { return kDotQ8(x, src, s, 176, true) }

// kDotQ8 is Q4_K's (five false) or Q5_K's: group g's 32 bytes hold
// sub-block 2g in their low nibbles and 2g+1 in their high ones (Q5_K's
// fifth bits: bit j of qh[l] for sub-block j), whose values are the
// vector's 64g..64g+31 and 64g+32..64g+63.
func kDotQ8(x *Q8K, src []byte, s []float32, bs int, five bool) float32 {
	nb := len(x.D)
	kPrep(s, src, nb, bs)
	low, one := archsimd.BroadcastUint8x32(0x0f), archsimd.BroadcastUint8x32(1)
	ones := archsimd.BroadcastInt16x16(1)
	var acc, accm archsimd.Float32x8
	for k := range nb {
		b := src[k*bs : (k+1)*bs]
		q := b[16:]
		var qh archsimd.Uint16x16
		if five {
			q = b[48:]
			qh = archsimd.LoadUint8x32Slice(b[16:48]).AsUint16x16()
		}
		xq := x.Q[k*256 : (k+1)*256]
		sc := scaleBytes(s, k)
		var isum archsimd.Int32x8
		for g := range 4 {
			v := archsimd.LoadUint8x32Slice(q[32*g:])
			lo := v.And(low)
			hi := v.AsUint16x16().ShiftAllRight(4).AsUint8x32().And(low)
			if five {
				// Each byte's bit 2g (2g+1), moved to bit 4: shifting 16-bit
				// lanes keeps each byte's own bit at bit 0 once masked.
				lo = lo.Or(qh.ShiftAllRight(uint64(2 * g)).AsUint8x32().And(one).AsUint16x16().ShiftAllLeft(4).AsUint8x32())
				hi = hi.Or(qh.ShiftAllRight(uint64(2*g + 1)).AsUint8x32().And(one).AsUint16x16().ShiftAllLeft(4).AsUint8x32())
			}
			p0 := lo.DotProductPairsSaturated(archsimd.LoadInt8x32Slice(xq[64*g:]))
			p1 := hi.DotProductPairsSaturated(archsimd.LoadInt8x32Slice(xq[64*g+32:]))
			isum = isum.Add(p0.DotProductPairs(archsimd.BroadcastInt16x16(int16(sc[2*g]))))
			isum = isum.Add(p1.DotProductPairs(archsimd.BroadcastInt16x16(int16(sc[2*g+1]))))
		}
		// The mins: m_j times the sum of sub-block j's 32 inputs, the
		// BSums' pairs, in integers; dmin·D multiplies them in float32.
		pairs := archsimd.LoadInt16x16Slice(x.BSums[k*16:]).DotProductPairs(ones)
		m := archsimd.LoadUint8x16((*[16]uint8)(unsafe.Pointer(&s[8*k+2]))).AsInt8x16().ExtendLo8ToInt32().Mul(pairs) // bytes 8-15: the mins
		w := scratchWords(s, k)
		acc = isum.ConvertToFloat32().MulAdd(archsimd.BroadcastFloat32x8(math.Float32frombits(w[4])*x.D[k]), acc)
		accm = m.ConvertToFloat32().MulAdd(archsimd.BroadcastFloat32x8(math.Float32frombits(w[5])*x.D[k]), accm)
	}
	return hsum256(acc.Sub(accm))
}

// q6KDotQ8: per half of 128 values, ql's bytes l hold the low four bits
// of values l (low nibble) and l+64 (high), bytes l+32 those of l+32 and
// l+96, and qh's byte l the top two bits of all four (bits 0-1, 2-3, 4-5,
// 6-7); each 16 values have their own int8 scale. The offset 32 is
// Σ_j sc_j·32·BSums_j, taken off the integer sums once a block.
func q6KDotQ8(x *Q8K, src []byte, _ []float32) float32 {
	nb := len(x.D)
	low, top := archsimd.BroadcastUint8x32(0x0f), archsimd.BroadcastUint8x32(0x30)
	var acc archsimd.Float32x8
	for k := range nb {
		b := src[k*210 : (k+1)*210]
		sc := b[192:208]
		xq := x.Q[k*256 : (k+1)*256]
		var isum archsimd.Int32x8
		for h := range 2 {
			ql0 := archsimd.LoadUint8x32Slice(b[64*h:])
			ql1 := archsimd.LoadUint8x32Slice(b[64*h+32:])
			qh8 := archsimd.LoadUint8x32Slice(b[128+32*h:])
			qh := qh8.AsUint16x16()
			levels := [4]archsimd.Uint8x32{
				ql0.And(low).Or(qh.ShiftAllLeft(4).AsUint8x32().And(top)),
				ql1.And(low).Or(qh.ShiftAllLeft(2).AsUint8x32().And(top)),
				ql0.AsUint16x16().ShiftAllRight(4).AsUint8x32().And(low).Or(qh8.And(top)),
				ql1.AsUint16x16().ShiftAllRight(4).AsUint8x32().And(low).Or(qh.ShiftAllRight(2).AsUint8x32().And(top)),
			}
			for i, l := range levels {
				c := 4*h + i // values 32c..32c+31, scales 2c and 2c+1
				scv := archsimd.BroadcastInt16x16(int16(int8(sc[2*c]))).SetHi(archsimd.BroadcastInt16x8(int16(int8(sc[2*c+1]))))
				isum = isum.Add(l.DotProductPairsSaturated(archsimd.LoadInt8x32Slice(xq[32*c:])).DotProductPairs(scv))
			}
		}
		// The offset: 32·sc_j times the sum of j's 16 inputs, off the
		// integer sums.
		o := archsimd.LoadInt8x16Slice(int8s(sc)).ExtendToInt16().DotProductPairs(archsimd.LoadInt16x16Slice(x.BSums[k*16:]))
		isum = isum.Sub(o.ShiftAllLeft(5))
		d := F16ToF32(uint16(b[208])|uint16(b[209])<<8) * x.D[k]
		acc = isum.ConvertToFloat32().MulAdd(archsimd.BroadcastFloat32x8(d), acc)
	}
	return hsum256(acc)
}

// int8s is b as int8 values.
func int8s(b []byte) []int8 {
	return unsafe.Slice((*int8)(unsafe.Pointer(unsafe.SliceData(b))), len(b))
}
