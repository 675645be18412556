//go:build goexperiment.simd && amd64

package ggml

// Fused dot products of a float32 vector with a row of Q4_K, Q5_K or
// Q6_K blocks (llama.cpp's Q4_K_M and Q5_K_M store most of a large
// model's matrices in these three), and on AVX-512 of IQ4_XS, Q2_K and
// Q3_K blocks: the decode step multiplies one input row by every row of
// a matrix, and dequantizing each row into memory, then reading it back
// for the dot product, costs a store and a load per value that this
// form does not pay. Per sub-block it sums the integer levels (IQ4_XS's
// looked up) times x, then multiplies by the sub-block's scale once (an
// FMA into the accumulator); the mins (Q2_K, Q4_K, Q5_K) multiply the
// sum of x over the sub-block (dmin·m·Σx), Q6_K's offset 32 and Q3_K's
// 4 are taken off the integers. So the products are rounded in another
// order than DequantBlocks's values and a dot product of them: equal to
// within float32 rounding of the sum (TestDot), not bit for bit.
//
// A first pass over the row's blocks does their scalar part with integer
// instructions only (ggml's packed 6-bit scales and mins unpacked to
// bytes, SWAR; the float16 d and dmin widened to float32 bits) into the
// caller's scratch, 8 values a block; the vector pass converts each
// block's 16 scale bytes at once, sums each sub-block's products times
// its integer scale, and multiplies the block's sums by d (and dmin)
// once; VZEROUPPER before the horizontal sum (simd_amd64.go says why
// no legacy-SSE instruction may run between). A pass that computed
// d·sc in scalar float code per sub-block took a third of the time.

import (
	"encoding/binary"
	"simd/archsimd"
	"unsafe"
)

func init() {
	switch {
	case archsimd.X86.AVX512():
		Q4_K.dot, Q5_K.dot, Q6_K.dot, IQ4_XS.dot = q4KDot512, q5KDot512, q6KDot512, iq4XSDot512
		Q2_K.dot, Q3_K.dot = q2KDot512, q3KDot512
	case archsimd.X86.AVX2() && archsimd.X86.FMA():
		Q4_K.dot, Q5_K.dot, Q6_K.dot = q4KDot256, q5KDot256, q6KDot256
	}
}

// scratchWords is the scratch of block k as 8 uint32 words: 0-3 the 16
// scale bytes, 4 d's and 5 dmin's float32 bits.
func scratchWords(s []float32, k int) *[8]uint32 {
	return (*[8]uint32)(unsafe.Pointer(&s[8*k : 8*k+8][0]))
}

// kPrep unpacks the nb Q4_K or Q5_K blocks of src (bs bytes each): block
// k's bytes 0-7 the sub-blocks' scales, 8-15 their mins (scaleMinK4's
// values, four at a time), d and dmin.
func kPrep(s []float32, src []byte, nb, bs int) {
	for k := range nb {
		b := src[k*bs : k*bs+16]
		lo, mid, hi := binary.LittleEndian.Uint32(b[4:]), binary.LittleEndian.Uint32(b[8:]), binary.LittleEndian.Uint32(b[12:])
		w := scratchWords(s, k)
		w[0] = lo & 0x3f3f3f3f
		w[1] = hi&0x0f0f0f0f | lo>>2&0x30303030
		w[2] = mid & 0x3f3f3f3f
		w[3] = hi>>4&0x0f0f0f0f | mid>>2&0x30303030
		w[4], w[5] = f16Bits(binary.LittleEndian.Uint16(b)), f16Bits(binary.LittleEndian.Uint16(b[2:]))
	}
}

// q6Prep copies the nb Q6_K blocks' sixteen int8 scales and d.
func q6Prep(s []float32, src []byte, nb int) {
	for k := range nb {
		b := src[k*210 : (k+1)*210]
		w := scratchWords(s, k)
		for i := range 4 {
			w[i] = binary.LittleEndian.Uint32(b[192+4*i:])
		}
		w[4] = f16Bits(binary.LittleEndian.Uint16(b[208:]))
	}
}

func hsum512(v archsimd.Float32x16) float32 {
	var t [16]float32
	v.Store(&t)
	archsimd.ClearAVXUpperBits()
	return sum16(t[:])
}

func hsum256(v archsimd.Float32x8) float32 {
	var t [8]float32
	v.Store(&t)
	archsimd.ClearAVXUpperBits()
	return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]))
}

// scaleBytes are block k's 16 scale bytes (kPrep, q6Prep).
func scaleBytes(s []float32, k int) *[16]uint8 {
	return (*[16]uint8)(unsafe.Pointer(&s[8*k : 8*k+4][0]))
}

// kLevels512 are group g's levels of a Q4_K (five false) or Q5_K block
// as float32: sub-block 2g's values 0-15 and 16-31 (low nibbles of q's
// bytes 32g..32g+31), then sub-block 2g+1's (high nibbles), Q5_K's fifth
// bit (bit j of qh[l] for sub-block j) added.
func kLevels512(q, qh []byte, g int, five bool) (l0, l1, h0, h1 archsimd.Float32x16) {
	fifteen, four, one := archsimd.BroadcastUint32x16(15), archsimd.BroadcastUint32x16(4), archsimd.BroadcastUint32x16(1)
	u0 := archsimd.LoadUint8x16Slice(q[32*g:]).ExtendToUint32()
	u1 := archsimd.LoadUint8x16Slice(q[32*g+16:]).ExtendToUint32()
	a0, a1 := u0.And(fifteen), u1.And(fifteen)
	b0, b1 := u0.ShiftRight(four), u1.ShiftRight(four)
	if five {
		lo, hi := archsimd.BroadcastUint32x16(uint32(2*g)), archsimd.BroadcastUint32x16(uint32(2*g+1))
		e0 := archsimd.LoadUint8x16Slice(qh).ExtendToUint32()
		e1 := archsimd.LoadUint8x16Slice(qh[16:]).ExtendToUint32()
		a0 = a0.Or(e0.ShiftRight(lo).And(one).ShiftLeft(four))
		a1 = a1.Or(e1.ShiftRight(lo).And(one).ShiftLeft(four))
		b0 = b0.Or(e0.ShiftRight(hi).And(one).ShiftLeft(four))
		b1 = b1.Or(e1.ShiftRight(hi).And(one).ShiftLeft(four))
	}
	return a0.AsInt32x16().ConvertToFloat32(), a1.AsInt32x16().ConvertToFloat32(),
		b0.AsInt32x16().ConvertToFloat32(), b1.AsInt32x16().ConvertToFloat32()
}

// kDot512 is Q4_K's (five false) or Q5_K's fused dot product: per group
// of 64 values, 32 bytes whose low nibbles are sub-block 2g and high
// nibbles 2g+1 (Q5_K's fifth bits from qh, bit j of qh[l] for sub-block
// j).
func kDot512(x []float32, src []byte, s []float32, bs int, five bool) float32 {
	nb := len(x) / 256
	kPrep(s, src, nb, bs)
	var sc [19]float32
	var acc, accm archsimd.Float32x16
	for k := range nb {
		b, xk := src[k*bs:(k+1)*bs], x[k*256:(k+1)*256]
		archsimd.LoadUint8x16(scaleBytes(s, k)).ExtendToUint32().AsInt32x16().ConvertToFloat32().StoreSlice(sc[:])
		q, qh := b[16:], b[16:48]
		if five {
			q = b[48:]
		}
		var b1, b2, bm archsimd.Float32x16
		for g := range 4 {
			x0 := archsimd.LoadFloat32x16Slice(xk[64*g:])
			x1 := archsimd.LoadFloat32x16Slice(xk[64*g+16:])
			x2 := archsimd.LoadFloat32x16Slice(xk[64*g+32:])
			x3 := archsimd.LoadFloat32x16Slice(xk[64*g+48:])
			l0, l1, h0, h1 := kLevels512(q, qh, g, five)
			b1 = l1.MulAdd(x1, l0.Mul(x0)).MulAdd(bcast(sc[:], 2*g), b1)
			b2 = h1.MulAdd(x3, h0.Mul(x2)).MulAdd(bcast(sc[:], 2*g+1), b2)
			bm = x0.Add(x1).MulAdd(bcast(sc[:], 8+2*g), bm)
			bm = x2.Add(x3).MulAdd(bcast(sc[:], 9+2*g), bm)
		}
		acc = b1.Add(b2).MulAdd(bcast(s, 8*k+4), acc)
		accm = bm.MulAdd(bcast(s, 8*k+5), accm)
	}
	return hsum512(acc.Sub(accm))
}

func q4KDot512(x []float32, src []byte, s []float32) float32 { return kDot512(x, src, s, 144, false) }
func q5KDot512(x []float32, src []byte, s []float32) float32 { return kDot512(x, src, s, 176, true) }

// q6KDot512: per half of 128, ql's 64 bytes hold the low four bits of
// elements l and l+64 (bytes l), l+32 and l+96 (bytes l+32), qh's 32
// bytes the top two (q6K); each 16 values have their own scale.
func q6KDot512(x []float32, src []byte, s []float32) float32 {
	nb := len(x) / 256
	q6Prep(s, src, nb)
	fifteen, three := archsimd.BroadcastUint32x16(15), archsimd.BroadcastUint32x16(3)
	two, four, six := archsimd.BroadcastUint32x16(2), archsimd.BroadcastUint32x16(4), archsimd.BroadcastUint32x16(6)
	thirtyTwo := archsimd.BroadcastInt32x16(32)
	var sc [19]float32
	var acc archsimd.Float32x16
	for k := range nb {
		b, xk := src[k*210:(k+1)*210], x[k*256:(k+1)*256]
		archsimd.LoadUint8x16(scaleBytes(s, k)).AsInt8x16().ExtendToInt32().ConvertToFloat32().StoreSlice(sc[:])
		var b1, b2 archsimd.Float32x16
		for h := range 2 {
			lq, hq, xh := b[64*h:], b[128+32*h:], xk[128*h:]
			for l0 := 0; l0 < 32; l0 += 16 {
				a := archsimd.LoadUint8x16Slice(lq[l0:]).ExtendToUint32()
				c := archsimd.LoadUint8x16Slice(lq[l0+32:]).ExtendToUint32()
				e := archsimd.LoadUint8x16Slice(hq[l0:]).ExtendToUint32()
				q1 := a.And(fifteen).Or(e.And(three).ShiftLeft(four)).AsInt32x16().Sub(thirtyTwo).ConvertToFloat32()
				q2 := c.And(fifteen).Or(e.ShiftRight(two).And(three).ShiftLeft(four)).AsInt32x16().Sub(thirtyTwo).ConvertToFloat32()
				q3 := a.ShiftRight(four).Or(e.ShiftRight(four).And(three).ShiftLeft(four)).AsInt32x16().Sub(thirtyTwo).ConvertToFloat32()
				q4 := c.ShiftRight(four).Or(e.ShiftRight(six).And(three).ShiftLeft(four)).AsInt32x16().Sub(thirtyTwo).ConvertToFloat32()
				// Element l+32kk of the half has scale 8h + 2kk + l0/16.
				j := 8*h + l0/16
				b1 = q1.Mul(archsimd.LoadFloat32x16Slice(xh[l0:])).MulAdd(bcast(sc[:], j), b1)
				b2 = q2.Mul(archsimd.LoadFloat32x16Slice(xh[l0+32:])).MulAdd(bcast(sc[:], j+2), b2)
				b1 = q3.Mul(archsimd.LoadFloat32x16Slice(xh[l0+64:])).MulAdd(bcast(sc[:], j+4), b1)
				b2 = q4.Mul(archsimd.LoadFloat32x16Slice(xh[l0+96:])).MulAdd(bcast(sc[:], j+6), b2)
			}
		}
		acc = b1.Add(b2).MulAdd(bcast(s, 8*k+4), acc)
	}
	return hsum512(acc)
}

// The AVX2 forms: as above on 8 lanes (bytes8 widens 16 bytes in two
// halves).

// scales8 converts block k's 16 scale bytes (as unsigned or signed
// bytes) into sc[:16].
func scales8(s []float32, k int, signed bool, sc []float32) {
	v := archsimd.LoadUint8x16(scaleBytes(s, k))
	w := v.AsUint64x2()
	hi := w.InterleaveHi(w).AsUint8x16()
	if signed {
		v.AsInt8x16().ExtendLo8ToInt32().ConvertToFloat32().StoreSlice(sc)
		hi.AsInt8x16().ExtendLo8ToInt32().ConvertToFloat32().StoreSlice(sc[8:])
		return
	}
	v.ExtendLo8ToUint32().AsInt32x8().ConvertToFloat32().StoreSlice(sc)
	hi.ExtendLo8ToUint32().AsInt32x8().ConvertToFloat32().StoreSlice(sc[8:])
}

func kDot256(x []float32, src []byte, s []float32, bs int, five bool) float32 {
	nb := len(x) / 256
	kPrep(s, src, nb, bs)
	fifteen, four, one := archsimd.BroadcastUint32x8(15), archsimd.BroadcastUint32x8(4), archsimd.BroadcastUint32x8(1)
	var sc [19]float32
	var acc, accm archsimd.Float32x8
	for k := range nb {
		b, xk := src[k*bs:(k+1)*bs], x[k*256:(k+1)*256]
		scales8(s, k, false, sc[:])
		q, qh := b[16:], b[16:48]
		if five {
			q = b[48:]
		}
		var b1, b2, bm archsimd.Float32x8
		for g := range 4 {
			lo, hi := archsimd.BroadcastUint32x8(uint32(2*g)), archsimd.BroadcastUint32x8(uint32(2*g+1))
			// The 32 bytes as four vectors of 8 (u), with their fifth bits'
			// bytes (e; unused for Q4_K); vector t covers values 8t..8t+7 of
			// sub-blocks 2g (low nibbles) and 2g+1 (high).
			u0, u1 := bytes8(q, 32*g)
			u2, u3 := bytes8(q, 32*g+16)
			e0, e1, e2, e3 := u0, u1, u2, u3
			if five {
				e0, e1 = bytes8(qh, 0)
				e2, e3 = bytes8(qh, 16)
			}
			us, es := [4]archsimd.Uint32x8{u0, u1, u2, u3}, [4]archsimd.Uint32x8{e0, e1, e2, e3}
			xg := xk[64*g:]
			var p1, p2, sx1, sx2 archsimd.Float32x8
			for t := range 4 {
				lu, hu := us[t].And(fifteen), us[t].ShiftRight(four)
				if five {
					lu = lu.Or(es[t].ShiftRight(lo).And(one).ShiftLeft(four))
					hu = hu.Or(es[t].ShiftRight(hi).And(one).ShiftLeft(four))
				}
				xa, xb := archsimd.LoadFloat32x8Slice(xg[8*t:]), archsimd.LoadFloat32x8Slice(xg[32+8*t:])
				p1 = lu.AsInt32x8().ConvertToFloat32().MulAdd(xa, p1)
				p2 = hu.AsInt32x8().ConvertToFloat32().MulAdd(xb, p2)
				sx1, sx2 = sx1.Add(xa), sx2.Add(xb)
			}
			b1 = p1.MulAdd(bcast8(sc[:], 2*g), b1)
			b2 = p2.MulAdd(bcast8(sc[:], 2*g+1), b2)
			bm = sx1.MulAdd(bcast8(sc[:], 8+2*g), bm)
			bm = sx2.MulAdd(bcast8(sc[:], 9+2*g), bm)
		}
		acc = b1.Add(b2).MulAdd(bcast8(s, 8*k+4), acc)
		accm = bm.MulAdd(bcast8(s, 8*k+5), accm)
	}
	return hsum256(acc.Sub(accm))
}

func q4KDot256(x []float32, src []byte, s []float32) float32 { return kDot256(x, src, s, 144, false) }
func q5KDot256(x []float32, src []byte, s []float32) float32 { return kDot256(x, src, s, 176, true) }

func q6KDot256(x []float32, src []byte, s []float32) float32 {
	nb := len(x) / 256
	q6Prep(s, src, nb)
	fifteen, three := archsimd.BroadcastUint32x8(15), archsimd.BroadcastUint32x8(3)
	two, four, six := archsimd.BroadcastUint32x8(2), archsimd.BroadcastUint32x8(4), archsimd.BroadcastUint32x8(6)
	thirtyTwo := archsimd.BroadcastInt32x8(32)
	var sc [19]float32
	var acc archsimd.Float32x8
	for k := range nb {
		b, xk := src[k*210:(k+1)*210], x[k*256:(k+1)*256]
		scales8(s, k, true, sc[:])
		var b1, b2 archsimd.Float32x8
		for h := range 2 {
			lq, hq, xh := b[64*h:], b[128+32*h:], xk[128*h:]
			for l0 := 0; l0 < 32; l0 += 16 {
				a0, a1 := bytes8(lq, l0)
				c0, c1 := bytes8(lq, l0+32)
				e0, e1 := bytes8(hq, l0)
				j := 8*h + l0/16
				s1, s2, s3, s4 := bcast8(sc[:], j), bcast8(sc[:], j+2), bcast8(sc[:], j+4), bcast8(sc[:], j+6)
				for i := range 2 {
					a, c, e := [2]archsimd.Uint32x8{a0, a1}[i], [2]archsimd.Uint32x8{c0, c1}[i], [2]archsimd.Uint32x8{e0, e1}[i]
					q1 := a.And(fifteen).Or(e.And(three).ShiftLeft(four)).AsInt32x8().Sub(thirtyTwo).ConvertToFloat32()
					q2 := c.And(fifteen).Or(e.ShiftRight(two).And(three).ShiftLeft(four)).AsInt32x8().Sub(thirtyTwo).ConvertToFloat32()
					q3 := a.ShiftRight(four).Or(e.ShiftRight(four).And(three).ShiftLeft(four)).AsInt32x8().Sub(thirtyTwo).ConvertToFloat32()
					q4 := c.ShiftRight(four).Or(e.ShiftRight(six).And(three).ShiftLeft(four)).AsInt32x8().Sub(thirtyTwo).ConvertToFloat32()
					l := l0 + 8*i
					b1 = q1.Mul(archsimd.LoadFloat32x8Slice(xh[l:])).MulAdd(s1, b1)
					b2 = q2.Mul(archsimd.LoadFloat32x8Slice(xh[l+32:])).MulAdd(s2, b2)
					b1 = q3.Mul(archsimd.LoadFloat32x8Slice(xh[l+64:])).MulAdd(s3, b1)
					b2 = q4.Mul(archsimd.LoadFloat32x8Slice(xh[l+96:])).MulAdd(s4, b2)
				}
			}
		}
		acc = b1.Add(b2).MulAdd(bcast8(s, 8*k+4), acc)
	}
	return hsum256(acc)
}

// iq4XSPrep sets block k's scratch to its eight sub-blocks' 6-bit scales
// less 32 (int8, bytes 0-7; 8-15 zero) and d's bits, for the nb IQ4_XS
// blocks of src (iq4XSScales's values before d multiplies them).
func iq4XSPrep(s []float32, src []byte, nb int) {
	for k := range nb {
		b := src[k*136 : k*136+8]
		sh := binary.LittleEndian.Uint16(b[2:])
		sc := scaleBytes(s, k)
		for j := range 8 {
			ls := b[4+j/2]>>(4*(j%2))&0xf | byte(sh>>(2*j)&3)<<4
			sc[j] = uint8(int8(ls) - 32)
		}
		for j := 8; j < 16; j++ {
			sc[j] = 0
		}
		scratchWords(s, k)[4] = f16Bits(binary.LittleEndian.Uint16(b))
	}
}

// iq4XSDot512: per sub-block of 32, 16 bytes whose low nibbles index
// the levels of values 0-15 and high nibbles 16-31 (iq4XS), looked up
// by VPERMPS as iq4XSBlocks512 does.
func iq4XSDot512(x []float32, src []byte, s []float32) float32 {
	nb := len(x) / 256
	iq4XSPrep(s, src, nb)
	table := archsimd.LoadFloat32x16(&iq4XSLevels)
	fifteen, four := archsimd.BroadcastUint32x16(15), archsimd.BroadcastUint32x16(4)
	var sc [19]float32
	var acc archsimd.Float32x16
	for k := range nb {
		b, xk := src[k*136:(k+1)*136], x[k*256:(k+1)*256]
		archsimd.LoadUint8x16(scaleBytes(s, k)).AsInt8x16().ExtendToInt32().ConvertToFloat32().StoreSlice(sc[:])
		var b1, b2 archsimd.Float32x16
		for j := 0; j < 8; j += 2 {
			u := archsimd.LoadUint8x16Slice(b[8+16*j:]).ExtendToUint32()
			v := archsimd.LoadUint8x16Slice(b[8+16*(j+1):]).ExtendToUint32()
			p1 := table.Permute(u.And(fifteen)).Mul(archsimd.LoadFloat32x16Slice(xk[32*j:]))
			p1 = table.Permute(u.ShiftRight(four)).MulAdd(archsimd.LoadFloat32x16Slice(xk[32*j+16:]), p1)
			p2 := table.Permute(v.And(fifteen)).Mul(archsimd.LoadFloat32x16Slice(xk[32*j+32:]))
			p2 = table.Permute(v.ShiftRight(four)).MulAdd(archsimd.LoadFloat32x16Slice(xk[32*j+48:]), p2)
			b1 = p1.MulAdd(bcast(sc[:], j), b1)
			b2 = p2.MulAdd(bcast(sc[:], j+1), b2)
		}
		acc = b1.Add(b2).MulAdd(bcast(s, 8*k+4), acc)
	}
	return hsum512(acc)
}

// q2KPrep sets block k's words 4 and 5 to the nb Q2_K blocks' d and
// dmin (their 4-bit scales and mins are read from the blocks as they
// are).
func q2KPrep(s []float32, src []byte, nb int) {
	for k := range nb {
		b := src[k*84 : (k+1)*84]
		w := scratchWords(s, k)
		w[4], w[5] = f16Bits(binary.LittleEndian.Uint16(b[80:])), f16Bits(binary.LittleEndian.Uint16(b[82:]))
	}
}

// q2KDot512: per half of 128, each of 32 bytes holds four 2-bit values
// (bits 2s..2s+1: element 32s+l), a scale (low nibble) and a min (high
// nibble) per 16 values (q2K).
func q2KDot512(x []float32, src []byte, s []float32) float32 {
	nb := len(x) / 256
	q2KPrep(s, src, nb)
	three, fifteen, four := archsimd.BroadcastUint32x16(3), archsimd.BroadcastUint32x16(15), archsimd.BroadcastUint32x16(4)
	var sc, ms [19]float32
	var acc, accm archsimd.Float32x16
	for k := range nb {
		b, xk := src[k*84:(k+1)*84], x[k*256:(k+1)*256]
		u := archsimd.LoadUint8x16Slice(b).ExtendToUint32()
		u.And(fifteen).AsInt32x16().ConvertToFloat32().StoreSlice(sc[:])
		u.ShiftRight(four).AsInt32x16().ConvertToFloat32().StoreSlice(ms[:])
		var b1, bm archsimd.Float32x16
		for h := range 2 {
			for l0 := 0; l0 < 32; l0 += 16 {
				q := archsimd.LoadUint8x16Slice(b[16+32*h+l0:]).ExtendToUint32()
				for sh := range 4 {
					v := q.ShiftRight(archsimd.BroadcastUint32x16(uint32(2 * sh))).And(three).AsInt32x16().ConvertToFloat32()
					e := 128*h + 32*sh + l0
					xv := archsimd.LoadFloat32x16Slice(xk[e:])
					b1 = v.Mul(xv).MulAdd(bcast(sc[:], e/16), b1)
					bm = xv.MulAdd(bcast(ms[:], e/16), bm)
				}
			}
		}
		acc = b1.MulAdd(bcast(s, 8*k+4), acc)
		accm = bm.MulAdd(bcast(s, 8*k+5), accm)
	}
	return hsum512(acc.Sub(accm))
}

// q3KPrep sets block k's scratch to its sixteen 6-bit scales less 32
// (int8, bytes 0-15; q3KScales's values before d multiplies them) and
// d's bits, for the nb Q3_K blocks of src.
func q3KPrep(s []float32, src []byte, nb int) {
	for k := range nb {
		b := src[k*110 : (k+1)*110]
		sb := b[96:108]
		sc := scaleBytes(s, k)
		for i := range 16 {
			lo := sb[i%8] >> (4 * (i / 8)) & 0xf
			hi := sb[8+i%4] >> (2 * (i / 4)) & 3
			sc[i] = uint8(int8(lo|hi<<4) - 32)
		}
		scratchWords(s, k)[4] = f16Bits(binary.LittleEndian.Uint16(b[108:]))
	}
}

// q3KDot512: Q2_K's layout of the low two bits; element e's third bit is
// bit e/32 of hmask[e%32], and a clear bit subtracts 4 (q3K).
func q3KDot512(x []float32, src []byte, s []float32) float32 {
	nb := len(x) / 256
	q3KPrep(s, src, nb)
	one, two, three := archsimd.BroadcastUint32x16(1), archsimd.BroadcastUint32x16(2), archsimd.BroadcastUint32x16(3)
	four := archsimd.BroadcastInt32x16(4)
	var sc [19]float32
	var acc archsimd.Float32x16
	for k := range nb {
		b, xk := src[k*110:(k+1)*110], x[k*256:(k+1)*256]
		archsimd.LoadUint8x16(scaleBytes(s, k)).AsInt8x16().ExtendToInt32().ConvertToFloat32().StoreSlice(sc[:])
		var b1, b2 archsimd.Float32x16
		for h := range 2 {
			for l0 := 0; l0 < 32; l0 += 16 {
				u := archsimd.LoadUint8x16Slice(b[32+32*h+l0:]).ExtendToUint32()
				hm := archsimd.LoadUint8x16Slice(b[l0:]).ExtendToUint32()
				for sh := range 4 {
					v := u.ShiftRight(archsimd.BroadcastUint32x16(uint32(2 * sh))).And(three)
					hb := hm.ShiftRight(archsimd.BroadcastUint32x16(uint32(4*h + sh))).And(one).ShiftLeft(two)
					e := 128*h + 32*sh + l0
					p := v.Or(hb).AsInt32x16().Sub(four).ConvertToFloat32().Mul(archsimd.LoadFloat32x16Slice(xk[e:]))
					if sh%2 == 0 {
						b1 = p.MulAdd(bcast(sc[:], e/16), b1)
					} else {
						b2 = p.MulAdd(bcast(sc[:], e/16), b2)
					}
				}
			}
		}
		acc = b1.Add(b2).MulAdd(bcast(s, 8*k+4), acc)
	}
	return hsum512(acc)
}
