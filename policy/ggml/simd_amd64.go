//go:build goexperiment.simd && amd64

package ggml

// The K-quants (Q2_K to Q6_K), IQ4_XS and Q5_1 dequantized on AVX-512
// (simd/archsimd), 16 values a vector, or on AVX2 (Zen 3, Intel before
// AVX-512), 8 (IQ4_XS's levels through VPERMPS, or VPSHUFB on AVX2): the nibbles (and Q5_K's fifth, Q6_K's top two bits) widened
// to 32-bit lanes, converted, times the sub-block's scale (a product
// rounded on its own) and for Q4_K/Q5_K minus its min: the scalar
// functions' operations one for one, so the same bits.
//
// Each block's scalar part (its float16 scales, the sub-blocks' scale and
// min products) is done before its first vector instruction, the vector
// part reads those products with vector loads only (bcast), and each
// block ends with VZEROUPPER: Go's scalar float code, a float load
// included, is legacy SSE, which pays a large penalty on Intel CPUs while
// the upper register halves are dirty (policy/native's
// kernels_simd_amd64.go says more). Shifts take their counts in vectors
// (VPSRLVD): ShiftAllRight's count goes through a general register into
// an XMM register, which cost about 200 ns a shift here (these functions
// ran 6-10 times slower than the scalar ones with it).

import (
	"encoding/binary"
	"simd/archsimd"
)

func init() {
	switch {
	case archsimd.X86.AVX512():
		Q2_K.blocks = q2KBlocks512
		Q3_K.blocks = q3KBlocks512
		Q4_K.blocks = q4KBlocks512
		Q5_K.blocks = q5KBlocks512
		Q6_K.blocks = q6KBlocks512
		IQ4_XS.blocks = iq4XSBlocks512
		Q5_1.blocks = q51Blocks512
	case archsimd.X86.AVX2():
		Q2_K.blocks = q2KBlocks256
		Q3_K.blocks = q3KBlocks256
		Q4_K.blocks = q4KBlocks256
		Q5_K.blocks = q5KBlocks256
		Q6_K.blocks = q6KBlocks256
		Q5_1.blocks = q51Blocks256
		IQ4_XS.blocks = iq4XSBlocks256
	}
}

// bcast is v[i] in 16 lanes, read by a vector load (v has room for 3
// more values past i).
func bcast(v []float32, i int) archsimd.Float32x16 {
	return archsimd.LoadFloat32x4Slice(v[i:]).Broadcast1To16()
}

// kScales sets the eight sub-blocks' d·sc and dmin·m of a Q4_K or Q5_K
// block (scalar float work, before any vector instruction).
func kScales(b []byte, ds, ms *[11]float32) {
	d, dmin := F16ToF32(binary.LittleEndian.Uint16(b)), F16ToF32(binary.LittleEndian.Uint16(b[2:]))
	for j := range 8 {
		sc, m := scaleMinK4(j, b[4:16])
		ds[j], ms[j] = d*float32(sc), dmin*float32(m)
	}
}

func q4KBlocks512(y []float32, src []byte) {
	var ds, ms [11]float32
	for k := range len(y) / 256 {
		b, yk := src[k*144:(k+1)*144], y[k*256:(k+1)*256]
		kScales(b, &ds, &ms)
		fifteen, four := archsimd.BroadcastUint32x16(15), archsimd.BroadcastUint32x16(4)
		q := b[16:144]
		for g := range 4 {
			d1, m1 := bcast(ds[:], 2*g), bcast(ms[:], 2*g)
			d2, m2 := bcast(ds[:], 2*g+1), bcast(ms[:], 2*g+1)
			for h := range 2 {
				u := archsimd.LoadUint8x16Slice(q[32*g+16*h:]).ExtendToUint32()
				lo := u.And(fifteen).AsInt32x16().ConvertToFloat32()
				hi := u.ShiftRight(four).AsInt32x16().ConvertToFloat32()
				d1.Mul(lo).Sub(m1).StoreSlice(yk[64*g+16*h:])
				d2.Mul(hi).Sub(m2).StoreSlice(yk[64*g+32+16*h:])
			}
		}
		archsimd.ClearAVXUpperBits()
	}
}

func q5KBlocks512(y []float32, src []byte) {
	var ds, ms [11]float32
	for k := range len(y) / 256 {
		b, yk := src[k*176:(k+1)*176], y[k*256:(k+1)*256]
		kScales(b, &ds, &ms)
		fifteen, one, four := archsimd.BroadcastUint32x16(15), archsimd.BroadcastUint32x16(1), archsimd.BroadcastUint32x16(4)
		qh, q := b[16:48], b[48:176]
		for g := range 4 {
			d1, m1 := bcast(ds[:], 2*g), bcast(ms[:], 2*g)
			d2, m2 := bcast(ds[:], 2*g+1), bcast(ms[:], 2*g+1)
			lo, hi := archsimd.BroadcastUint32x16(uint32(2*g)), archsimd.BroadcastUint32x16(uint32(2*g+1))
			for h := range 2 {
				u := archsimd.LoadUint8x16Slice(q[32*g+16*h:]).ExtendToUint32()
				hb := archsimd.LoadUint8x16Slice(qh[16*h:]).ExtendToUint32()
				v1 := u.And(fifteen).Or(hb.ShiftRight(lo).And(one).ShiftLeft(four))
				v2 := u.ShiftRight(four).Or(hb.ShiftRight(hi).And(one).ShiftLeft(four))
				d1.Mul(v1.AsInt32x16().ConvertToFloat32()).Sub(m1).StoreSlice(yk[64*g+16*h:])
				d2.Mul(v2.AsInt32x16().ConvertToFloat32()).Sub(m2).StoreSlice(yk[64*g+32+16*h:])
			}
		}
		archsimd.ClearAVXUpperBits()
	}
}

func q6KBlocks512(y []float32, src []byte) {
	var s [19]float32
	for k := range len(y) / 256 {
		b, yk := src[k*210:(k+1)*210], y[k*256:(k+1)*256]
		d := F16ToF32(binary.LittleEndian.Uint16(b[208:]))
		for i, sc := range b[192:208] {
			s[i] = d * float32(int8(sc))
		}
		fifteen, three := archsimd.BroadcastUint32x16(15), archsimd.BroadcastUint32x16(3)
		two, four, six := archsimd.BroadcastUint32x16(2), archsimd.BroadcastUint32x16(4), archsimd.BroadcastUint32x16(6)
		thirtyTwo := archsimd.BroadcastInt32x16(32)
		for h := range 2 {
			lq, hq, yh := b[64*h:], b[128+32*h:], yk[128*h:]
			for l0 := 0; l0 < 32; l0 += 16 {
				a := archsimd.LoadUint8x16Slice(lq[l0:]).ExtendToUint32()
				c := archsimd.LoadUint8x16Slice(lq[l0+32:]).ExtendToUint32()
				e := archsimd.LoadUint8x16Slice(hq[l0:]).ExtendToUint32()
				q1 := a.And(fifteen).Or(e.And(three).ShiftLeft(four))
				q2 := c.And(fifteen).Or(e.ShiftRight(two).And(three).ShiftLeft(four))
				q3 := a.ShiftRight(four).Or(e.ShiftRight(four).And(three).ShiftLeft(four))
				q4 := c.ShiftRight(four).Or(e.ShiftRight(six).And(three).ShiftLeft(four))
				// Element l+32k of the half: scale 8h + (l+32k)/16.
				for kk, v := range [4]archsimd.Uint32x16{q1, q2, q3, q4} {
					sc := bcast(s[:], 8*h+2*kk+l0/16)
					sc.Mul(v.AsInt32x16().Sub(thirtyTwo).ConvertToFloat32()).StoreSlice(yh[l0+32*kk:])
				}
			}
		}
		archsimd.ClearAVXUpperBits()
	}
}

// The AVX2 forms: as above on 8 lanes, each 16 bytes loaded once and
// widened in two halves (bytes8).

// bcast8 is v[i] in 8 lanes, read by a vector load (see bcast).
func bcast8(v []float32, i int) archsimd.Float32x8 {
	return archsimd.LoadFloat32x4Slice(v[i:]).Broadcast1To8()
}

// bytes8 widens q[o:o+16] to two vectors of 8 lanes: bytes o..o+7 and
// o+8..o+15.
func bytes8(q []byte, o int) (lo, hi archsimd.Uint32x8) {
	v := archsimd.LoadUint8x16Slice(q[o:])
	w := v.AsUint64x2()
	return v.ExtendLo8ToUint32(), w.InterleaveHi(w).AsUint8x16().ExtendLo8ToUint32()
}

func q4KBlocks256(y []float32, src []byte) {
	var ds, ms [11]float32
	for k := range len(y) / 256 {
		b, yk := src[k*144:(k+1)*144], y[k*256:(k+1)*256]
		kScales(b, &ds, &ms)
		fifteen, four := archsimd.BroadcastUint32x8(15), archsimd.BroadcastUint32x8(4)
		q := b[16:144]
		for g := range 4 {
			d1, m1 := bcast8(ds[:], 2*g), bcast8(ms[:], 2*g)
			d2, m2 := bcast8(ds[:], 2*g+1), bcast8(ms[:], 2*g+1)
			for h := range 2 {
				u0, u1 := bytes8(q, 32*g+16*h)
				for i, u := range [2]archsimd.Uint32x8{u0, u1} {
					o := 16*h + 8*i
					d1.Mul(u.And(fifteen).AsInt32x8().ConvertToFloat32()).Sub(m1).StoreSlice(yk[64*g+o:])
					d2.Mul(u.ShiftRight(four).AsInt32x8().ConvertToFloat32()).Sub(m2).StoreSlice(yk[64*g+32+o:])
				}
			}
		}
		archsimd.ClearAVXUpperBits()
	}
}

func q5KBlocks256(y []float32, src []byte) {
	var ds, ms [11]float32
	for k := range len(y) / 256 {
		b, yk := src[k*176:(k+1)*176], y[k*256:(k+1)*256]
		kScales(b, &ds, &ms)
		fifteen, one, four := archsimd.BroadcastUint32x8(15), archsimd.BroadcastUint32x8(1), archsimd.BroadcastUint32x8(4)
		qh, q := b[16:48], b[48:176]
		for g := range 4 {
			d1, m1 := bcast8(ds[:], 2*g), bcast8(ms[:], 2*g)
			d2, m2 := bcast8(ds[:], 2*g+1), bcast8(ms[:], 2*g+1)
			lo, hi := archsimd.BroadcastUint32x8(uint32(2*g)), archsimd.BroadcastUint32x8(uint32(2*g+1))
			for h := range 2 {
				u0, u1 := bytes8(q, 32*g+16*h)
				h0, h1 := bytes8(qh, 16*h)
				for i, u := range [2]archsimd.Uint32x8{u0, u1} {
					hb := [2]archsimd.Uint32x8{h0, h1}[i]
					o := 16*h + 8*i
					v1 := u.And(fifteen).Or(hb.ShiftRight(lo).And(one).ShiftLeft(four))
					v2 := u.ShiftRight(four).Or(hb.ShiftRight(hi).And(one).ShiftLeft(four))
					d1.Mul(v1.AsInt32x8().ConvertToFloat32()).Sub(m1).StoreSlice(yk[64*g+o:])
					d2.Mul(v2.AsInt32x8().ConvertToFloat32()).Sub(m2).StoreSlice(yk[64*g+32+o:])
				}
			}
		}
		archsimd.ClearAVXUpperBits()
	}
}

func q6KBlocks256(y []float32, src []byte) {
	var s [19]float32
	for k := range len(y) / 256 {
		b, yk := src[k*210:(k+1)*210], y[k*256:(k+1)*256]
		d := F16ToF32(binary.LittleEndian.Uint16(b[208:]))
		for i, sc := range b[192:208] {
			s[i] = d * float32(int8(sc))
		}
		fifteen, three := archsimd.BroadcastUint32x8(15), archsimd.BroadcastUint32x8(3)
		two, four, six := archsimd.BroadcastUint32x8(2), archsimd.BroadcastUint32x8(4), archsimd.BroadcastUint32x8(6)
		thirtyTwo := archsimd.BroadcastInt32x8(32)
		for h := range 2 {
			lq, hq, yh := b[64*h:], b[128+32*h:], yk[128*h:]
			for l0 := 0; l0 < 32; l0 += 16 {
				a0, a1 := bytes8(lq, l0)
				c0, c1 := bytes8(lq, l0+32)
				e0, e1 := bytes8(hq, l0)
				for i := range 2 {
					a, c, e := [2]archsimd.Uint32x8{a0, a1}[i], [2]archsimd.Uint32x8{c0, c1}[i], [2]archsimd.Uint32x8{e0, e1}[i]
					q1 := a.And(fifteen).Or(e.And(three).ShiftLeft(four))
					q2 := c.And(fifteen).Or(e.ShiftRight(two).And(three).ShiftLeft(four))
					q3 := a.ShiftRight(four).Or(e.ShiftRight(four).And(three).ShiftLeft(four))
					q4 := c.ShiftRight(four).Or(e.ShiftRight(six).And(three).ShiftLeft(four))
					l := l0 + 8*i
					for kk, v := range [4]archsimd.Uint32x8{q1, q2, q3, q4} {
						sc := bcast8(s[:], 8*h+2*kk+l0/16)
						sc.Mul(v.AsInt32x8().Sub(thirtyTwo).ConvertToFloat32()).StoreSlice(yh[l+32*kk:])
					}
				}
			}
		}
		archsimd.ClearAVXUpperBits()
	}
}

// Q2_K and Q3_K: four 2-bit values a byte (bits 2s..2s+1 are element
// 32s+l of a half of 128), Q3_K's third bit from hmask (bit 4h+s of
// hmask[l]; clear subtracts 4), a scale (and Q2_K's min) per 16 values.

func q2KBlocks512(y []float32, src []byte) {
	var dl, ml [19]float32
	for k := range len(y) / 256 {
		b, yk := src[k*84:(k+1)*84], y[k*256:(k+1)*256]
		q2KScales(b, &dl, &ml)
		three := archsimd.BroadcastUint32x16(3)
		for h := range 2 {
			for l0 := 0; l0 < 32; l0 += 16 {
				u := archsimd.LoadUint8x16Slice(b[16+32*h+l0:]).ExtendToUint32()
				for s := range 4 {
					v := u.ShiftRight(archsimd.BroadcastUint32x16(uint32(2 * s))).And(three).AsInt32x16().ConvertToFloat32()
					e := 128*h + 32*s + l0
					bcast(dl[:], e/16).Mul(v).Sub(bcast(ml[:], e/16)).StoreSlice(yk[e:])
				}
			}
		}
		archsimd.ClearAVXUpperBits()
	}
}

func q3KBlocks512(y []float32, src []byte) {
	var sc [19]float32
	for k := range len(y) / 256 {
		b, yk := src[k*110:(k+1)*110], y[k*256:(k+1)*256]
		q3KScales(b, &sc)
		one, two, three := archsimd.BroadcastUint32x16(1), archsimd.BroadcastUint32x16(2), archsimd.BroadcastUint32x16(3)
		four := archsimd.BroadcastInt32x16(4)
		for h := range 2 {
			for l0 := 0; l0 < 32; l0 += 16 {
				u := archsimd.LoadUint8x16Slice(b[32+32*h+l0:]).ExtendToUint32()
				hm := archsimd.LoadUint8x16Slice(b[l0:]).ExtendToUint32()
				for s := range 4 {
					v := u.ShiftRight(archsimd.BroadcastUint32x16(uint32(2 * s))).And(three)
					hb := hm.ShiftRight(archsimd.BroadcastUint32x16(uint32(4*h + s))).And(one).ShiftLeft(two)
					e := 128*h + 32*s + l0
					bcast(sc[:], e/16).Mul(v.Or(hb).AsInt32x16().Sub(four).ConvertToFloat32()).StoreSlice(yk[e:])
				}
			}
		}
		archsimd.ClearAVXUpperBits()
	}
}

func q2KBlocks256(y []float32, src []byte) {
	var dl, ml [19]float32
	for k := range len(y) / 256 {
		b, yk := src[k*84:(k+1)*84], y[k*256:(k+1)*256]
		q2KScales(b, &dl, &ml)
		three := archsimd.BroadcastUint32x8(3)
		for h := range 2 {
			for l0 := 0; l0 < 32; l0 += 16 {
				u0, u1 := bytes8(b, 16+32*h+l0)
				for s := range 4 {
					sh := archsimd.BroadcastUint32x8(uint32(2 * s))
					for i, u := range [2]archsimd.Uint32x8{u0, u1} {
						v := u.ShiftRight(sh).And(three).AsInt32x8().ConvertToFloat32()
						e := 128*h + 32*s + l0
						bcast8(dl[:], e/16).Mul(v).Sub(bcast8(ml[:], e/16)).StoreSlice(yk[e+8*i:])
					}
				}
			}
		}
		archsimd.ClearAVXUpperBits()
	}
}

func q3KBlocks256(y []float32, src []byte) {
	var sc [19]float32
	for k := range len(y) / 256 {
		b, yk := src[k*110:(k+1)*110], y[k*256:(k+1)*256]
		q3KScales(b, &sc)
		one, two, three := archsimd.BroadcastUint32x8(1), archsimd.BroadcastUint32x8(2), archsimd.BroadcastUint32x8(3)
		four := archsimd.BroadcastInt32x8(4)
		for h := range 2 {
			for l0 := 0; l0 < 32; l0 += 16 {
				u0, u1 := bytes8(b, 32+32*h+l0)
				h0, h1 := bytes8(b, l0)
				for s := range 4 {
					sh, hs := archsimd.BroadcastUint32x8(uint32(2*s)), archsimd.BroadcastUint32x8(uint32(4*h+s))
					for i, u := range [2]archsimd.Uint32x8{u0, u1} {
						hm := [2]archsimd.Uint32x8{h0, h1}[i]
						v := u.ShiftRight(sh).And(three)
						hb := hm.ShiftRight(hs).And(one).ShiftLeft(two)
						e := 128*h + 32*s + l0
						bcast8(sc[:], e/16).Mul(v.Or(hb).AsInt32x8().Sub(four).ConvertToFloat32()).StoreSlice(yk[e+8*i:])
					}
				}
			}
		}
		archsimd.ClearAVXUpperBits()
	}
}

// iq4XSLevels are IQ4NLValues as float32 (exact), VPERMPS's table.
var iq4XSLevels = func() (t [16]float32) {
	for i, v := range IQ4NLValues {
		t[i] = float32(v)
	}
	return t
}()

func iq4XSBlocks512(y []float32, src []byte) {
	var dl [11]float32
	for k := range len(y) / 256 {
		b, yk := src[k*136:(k+1)*136], y[k*256:(k+1)*256]
		iq4XSScales(b, &dl)
		table := archsimd.LoadFloat32x16(&iq4XSLevels)
		fifteen, four := archsimd.BroadcastUint32x16(15), archsimd.BroadcastUint32x16(4)
		for j := range 8 {
			u := archsimd.LoadUint8x16Slice(b[8+16*j:]).ExtendToUint32()
			s := bcast(dl[:], j)
			s.Mul(table.Permute(u.And(fifteen))).StoreSlice(yk[32*j:])
			s.Mul(table.Permute(u.ShiftRight(four))).StoreSlice(yk[32*j+16:])
		}
		archsimd.ClearAVXUpperBits()
	}
}

// Q5_1: blocks of 32, so a run of blocks' float16 d and m are widened
// first (q51Chunk blocks at a time), then the vector pass: element i's
// fifth bit is bit i of qh (i < 16, the low nibbles) or i+16.

const q51Chunk = 64

// q51Scales widens the d and m of blocks [k0, k0+n) of src.
func q51Scales(src []byte, k0, n int, d, m *[q51Chunk + 3]float32) {
	for k := range n {
		b := src[(k0+k)*24:]
		d[k], m[k] = f16(b), f16(b[2:])
	}
}

// lanes16 is 0..15 and 16..31 (shift counts for qh's bits).
var lanes16 = [32]uint32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31}

func q51Blocks512(y []float32, src []byte) {
	var d, m [q51Chunk + 3]float32
	nb := len(y) / 32
	for k0 := 0; k0 < nb; k0 += q51Chunk {
		n := min(q51Chunk, nb-k0)
		q51Scales(src, k0, n, &d, &m)
		fifteen, one, four := archsimd.BroadcastUint32x16(15), archsimd.BroadcastUint32x16(1), archsimd.BroadcastUint32x16(4)
		lo, hi := archsimd.LoadUint32x16Slice(lanes16[:16]), archsimd.LoadUint32x16Slice(lanes16[16:])
		for k := range n {
			b, yk := src[(k0+k)*24:(k0+k+1)*24], y[(k0+k)*32:(k0+k+1)*32]
			qh := archsimd.LoadUint8x16Slice(b[4:20]).AsUint32x4().Broadcast1To16()
			u := archsimd.LoadUint8x16Slice(b[8:24]).ExtendToUint32()
			v0 := u.And(fifteen).Or(qh.ShiftRight(lo).And(one).ShiftLeft(four))
			v1 := u.ShiftRight(four).Or(qh.ShiftRight(hi).And(one).ShiftLeft(four))
			dk, mk := bcast(d[:], k), bcast(m[:], k)
			dk.Mul(v0.AsInt32x16().ConvertToFloat32()).Add(mk).StoreSlice(yk)
			dk.Mul(v1.AsInt32x16().ConvertToFloat32()).Add(mk).StoreSlice(yk[16:])
		}
		archsimd.ClearAVXUpperBits()
	}
}

func q51Blocks256(y []float32, src []byte) {
	var d, m [q51Chunk + 3]float32
	nb := len(y) / 32
	for k0 := 0; k0 < nb; k0 += q51Chunk {
		n := min(q51Chunk, nb-k0)
		q51Scales(src, k0, n, &d, &m)
		fifteen, one, four := archsimd.BroadcastUint32x8(15), archsimd.BroadcastUint32x8(1), archsimd.BroadcastUint32x8(4)
		var sh [4]archsimd.Uint32x8
		for i := range sh {
			sh[i] = archsimd.LoadUint32x8Slice(lanes16[8*i:])
		}
		for k := range n {
			b, yk := src[(k0+k)*24:(k0+k+1)*24], y[(k0+k)*32:(k0+k+1)*32]
			qh := archsimd.LoadUint8x16Slice(b[4:20]).AsUint32x4().Broadcast1To8()
			u0, u1 := bytes8(b, 8)
			dk, mk := bcast8(d[:], k), bcast8(m[:], k)
			for i, u := range [2]archsimd.Uint32x8{u0, u1} {
				v0 := u.And(fifteen).Or(qh.ShiftRight(sh[i]).And(one).ShiftLeft(four))
				v1 := u.ShiftRight(four).Or(qh.ShiftRight(sh[i+2]).And(one).ShiftLeft(four))
				dk.Mul(v0.AsInt32x8().ConvertToFloat32()).Add(mk).StoreSlice(yk[8*i:])
				dk.Mul(v1.AsInt32x8().ConvertToFloat32()).Add(mk).StoreSlice(yk[16+8*i:])
			}
		}
		archsimd.ClearAVXUpperBits()
	}
}

// iq4XSBlocks256 is IQ4_XS on AVX2: each 16 bytes' nibbles looked up in
// the sixteen int8 levels (VPSHUFB), widened 8 at a time.
func iq4XSBlocks256(y []float32, src []byte) {
	var dl [11]float32
	for k := range len(y) / 256 {
		b, yk := src[k*136:(k+1)*136], y[k*256:(k+1)*256]
		iq4XSScales(b, &dl)
		table := archsimd.LoadInt8x16Slice(IQ4NLValues[:])
		fifteen, four := archsimd.BroadcastUint8x16(15), archsimd.BroadcastUint16x8(4)
		for j := range 8 {
			v := archsimd.LoadUint8x16Slice(b[8+16*j:])
			s := bcast8(dl[:], j)
			for h, idx := range [2]archsimd.Uint8x16{v.And(fifteen), v.AsUint16x8().ShiftRight(four).AsUint8x16().And(fifteen)} {
				kv := table.PermuteOrZero(idx.AsInt8x16())
				w := kv.AsInt64x2()
				s.Mul(kv.ExtendLo8ToInt32().ConvertToFloat32()).StoreSlice(yk[32*j+16*h:])
				s.Mul(w.InterleaveHi(w).AsInt8x16().ExtendLo8ToInt32().ConvertToFloat32()).StoreSlice(yk[32*j+16*h+8:])
			}
		}
		archsimd.ClearAVXUpperBits()
	}
}
