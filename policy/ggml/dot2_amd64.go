//go:build goexperiment.simd && amd64

package ggml

// Fused dot products of two float32 vectors with one row of Q4_K, Q5_K,
// Q6_K or IQ4_XS blocks (Format.Dot2): evaluation decodes a task's
// episodes in lockstep, two or more input rows a product, and the
// one-row form would convert each block's levels to float32 once per
// input row. Here they are converted once and multiplied by both rows;
// otherwise the arithmetic is Dot's (dot_amd64.go), so each of the two
// sums is the one-row form's in the same order: the same bits
// (TestDot2).

import "simd/archsimd"

func init() {
	if archsimd.X86.AVX512() {
		Q4_K.dot2, Q5_K.dot2, Q6_K.dot2, IQ4_XS.dot2 = q4KDot2x512, q5KDot2x512, q6KDot2x512, iq4XSDot2x512
	}
}

// kDot2x512 is kDot512 for two input rows, xa and xb.
func kDot2x512(xa, xb []float32, src []byte, s []float32, bs int, five bool) (float32, float32) {
	nb := len(xa) / 256
	xb = xb[:len(xa)]
	kPrep(s, src, nb, bs)
	var sc [19]float32
	var acca, accma, accb, accmb archsimd.Float32x16
	for k := range nb {
		b, ka, kb := src[k*bs:(k+1)*bs], xa[k*256:(k+1)*256], xb[k*256:(k+1)*256]
		archsimd.LoadUint8x16(scaleBytes(s, k)).ExtendToUint32().AsInt32x16().ConvertToFloat32().StoreSlice(sc[:])
		q, qh := b[16:], b[16:48]
		if five {
			q = b[48:]
		}
		var b1a, b2a, bma, b1b, b2b, bmb archsimd.Float32x16
		for g := range 4 {
			fl0, fl1, fh0, fh1 := kLevels512(q, qh, g, five)
			d1, d2 := bcast(sc[:], 2*g), bcast(sc[:], 2*g+1)
			m1, m2 := bcast(sc[:], 8+2*g), bcast(sc[:], 9+2*g)

			x0 := archsimd.LoadFloat32x16Slice(ka[64*g:])
			x1 := archsimd.LoadFloat32x16Slice(ka[64*g+16:])
			x2 := archsimd.LoadFloat32x16Slice(ka[64*g+32:])
			x3 := archsimd.LoadFloat32x16Slice(ka[64*g+48:])
			b1a = fl1.MulAdd(x1, fl0.Mul(x0)).MulAdd(d1, b1a)
			b2a = fh1.MulAdd(x3, fh0.Mul(x2)).MulAdd(d2, b2a)
			bma = x0.Add(x1).MulAdd(m1, bma)
			bma = x2.Add(x3).MulAdd(m2, bma)

			x0 = archsimd.LoadFloat32x16Slice(kb[64*g:])
			x1 = archsimd.LoadFloat32x16Slice(kb[64*g+16:])
			x2 = archsimd.LoadFloat32x16Slice(kb[64*g+32:])
			x3 = archsimd.LoadFloat32x16Slice(kb[64*g+48:])
			b1b = fl1.MulAdd(x1, fl0.Mul(x0)).MulAdd(d1, b1b)
			b2b = fh1.MulAdd(x3, fh0.Mul(x2)).MulAdd(d2, b2b)
			bmb = x0.Add(x1).MulAdd(m1, bmb)
			bmb = x2.Add(x3).MulAdd(m2, bmb)
		}
		d, dmin := bcast(s, 8*k+4), bcast(s, 8*k+5)
		acca = b1a.Add(b2a).MulAdd(d, acca)
		accma = bma.MulAdd(dmin, accma)
		accb = b1b.Add(b2b).MulAdd(d, accb)
		accmb = bmb.MulAdd(dmin, accmb)
	}
	return hsum2(acca.Sub(accma), accb.Sub(accmb))
}

// hsum2 is hsum512 of a and of b.
func hsum2(a, b archsimd.Float32x16) (float32, float32) {
	var t [32]float32
	a.StoreSlice(t[:])
	b.StoreSlice(t[16:])
	archsimd.ClearAVXUpperBits()
	return sum16(t[:16]), sum16(t[16:])
}

// sum16 is hsum512's sum of 16 stored lanes, in its order.
func sum16(t []float32) float32 {
	t = t[:16]
	return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7])) +
		((t[8] + t[9]) + (t[10] + t[11])) + ((t[12] + t[13]) + (t[14] + t[15]))
}

func q4KDot2x512(xa, xb []float32, src []byte, s []float32) (float32, float32) {
	return kDot2x512(xa, xb, src, s, 144, false)
}

func q5KDot2x512(xa, xb []float32, src []byte, s []float32) (float32, float32) {
	return kDot2x512(xa, xb, src, s, 176, true)
}

// q6KDot2x512 is q6KDot512 for two input rows.
func q6KDot2x512(xa, xb []float32, src []byte, s []float32) (float32, float32) {
	nb := len(xa) / 256
	xb = xb[:len(xa)]
	q6Prep(s, src, nb)
	fifteen, three := archsimd.BroadcastUint32x16(15), archsimd.BroadcastUint32x16(3)
	two, four, six := archsimd.BroadcastUint32x16(2), archsimd.BroadcastUint32x16(4), archsimd.BroadcastUint32x16(6)
	thirtyTwo := archsimd.BroadcastInt32x16(32)
	var sc [19]float32
	var acca, accb archsimd.Float32x16
	for k := range nb {
		b, ka, kb := src[k*210:(k+1)*210], xa[k*256:(k+1)*256], xb[k*256:(k+1)*256]
		archsimd.LoadUint8x16(scaleBytes(s, k)).AsInt8x16().ExtendToInt32().ConvertToFloat32().StoreSlice(sc[:])
		var b1a, b2a, b1b, b2b archsimd.Float32x16
		for h := range 2 {
			lq, hq, ha, hb := b[64*h:], b[128+32*h:], ka[128*h:], kb[128*h:]
			for l0 := 0; l0 < 32; l0 += 16 {
				a := archsimd.LoadUint8x16Slice(lq[l0:]).ExtendToUint32()
				c := archsimd.LoadUint8x16Slice(lq[l0+32:]).ExtendToUint32()
				e := archsimd.LoadUint8x16Slice(hq[l0:]).ExtendToUint32()
				q1 := a.And(fifteen).Or(e.And(three).ShiftLeft(four)).AsInt32x16().Sub(thirtyTwo).ConvertToFloat32()
				q2 := c.And(fifteen).Or(e.ShiftRight(two).And(three).ShiftLeft(four)).AsInt32x16().Sub(thirtyTwo).ConvertToFloat32()
				q3 := a.ShiftRight(four).Or(e.ShiftRight(four).And(three).ShiftLeft(four)).AsInt32x16().Sub(thirtyTwo).ConvertToFloat32()
				q4 := c.ShiftRight(four).Or(e.ShiftRight(six).And(three).ShiftLeft(four)).AsInt32x16().Sub(thirtyTwo).ConvertToFloat32()
				j := 8*h + l0/16
				s1, s2, s3, s4 := bcast(sc[:], j), bcast(sc[:], j+2), bcast(sc[:], j+4), bcast(sc[:], j+6)
				b1a = q1.Mul(archsimd.LoadFloat32x16Slice(ha[l0:])).MulAdd(s1, b1a)
				b2a = q2.Mul(archsimd.LoadFloat32x16Slice(ha[l0+32:])).MulAdd(s2, b2a)
				b1a = q3.Mul(archsimd.LoadFloat32x16Slice(ha[l0+64:])).MulAdd(s3, b1a)
				b2a = q4.Mul(archsimd.LoadFloat32x16Slice(ha[l0+96:])).MulAdd(s4, b2a)
				b1b = q1.Mul(archsimd.LoadFloat32x16Slice(hb[l0:])).MulAdd(s1, b1b)
				b2b = q2.Mul(archsimd.LoadFloat32x16Slice(hb[l0+32:])).MulAdd(s2, b2b)
				b1b = q3.Mul(archsimd.LoadFloat32x16Slice(hb[l0+64:])).MulAdd(s3, b1b)
				b2b = q4.Mul(archsimd.LoadFloat32x16Slice(hb[l0+96:])).MulAdd(s4, b2b)
			}
		}
		d := bcast(s, 8*k+4)
		acca = b1a.Add(b2a).MulAdd(d, acca)
		accb = b1b.Add(b2b).MulAdd(d, accb)
	}
	return hsum2(acca, accb)
}

// iq4XSDot2x512 is iq4XSDot512 for two input rows.
func iq4XSDot2x512(xa, xb []float32, src []byte, s []float32) (float32, float32) {
	nb := len(xa) / 256
	xb = xb[:len(xa)]
	iq4XSPrep(s, src, nb)
	table := archsimd.LoadFloat32x16(&iq4XSLevels)
	fifteen, four := archsimd.BroadcastUint32x16(15), archsimd.BroadcastUint32x16(4)
	var sc [19]float32
	var acca, accb archsimd.Float32x16
	for k := range nb {
		b, ka, kb := src[k*136:(k+1)*136], xa[k*256:(k+1)*256], xb[k*256:(k+1)*256]
		archsimd.LoadUint8x16(scaleBytes(s, k)).AsInt8x16().ExtendToInt32().ConvertToFloat32().StoreSlice(sc[:])
		var b1a, b2a, b1b, b2b archsimd.Float32x16
		for j := 0; j < 8; j += 2 {
			u := archsimd.LoadUint8x16Slice(b[8+16*j:]).ExtendToUint32()
			v := archsimd.LoadUint8x16Slice(b[8+16*(j+1):]).ExtendToUint32()
			ul, uh := table.Permute(u.And(fifteen)), table.Permute(u.ShiftRight(four))
			vl, vh := table.Permute(v.And(fifteen)), table.Permute(v.ShiftRight(four))
			s1, s2 := bcast(sc[:], j), bcast(sc[:], j+1)
			b1a = uh.MulAdd(archsimd.LoadFloat32x16Slice(ka[32*j+16:]), ul.Mul(archsimd.LoadFloat32x16Slice(ka[32*j:]))).MulAdd(s1, b1a)
			b2a = vh.MulAdd(archsimd.LoadFloat32x16Slice(ka[32*j+48:]), vl.Mul(archsimd.LoadFloat32x16Slice(ka[32*j+32:]))).MulAdd(s2, b2a)
			b1b = uh.MulAdd(archsimd.LoadFloat32x16Slice(kb[32*j+16:]), ul.Mul(archsimd.LoadFloat32x16Slice(kb[32*j:]))).MulAdd(s1, b1b)
			b2b = vh.MulAdd(archsimd.LoadFloat32x16Slice(kb[32*j+48:]), vl.Mul(archsimd.LoadFloat32x16Slice(kb[32*j+32:]))).MulAdd(s2, b2b)
		}
		d := bcast(s, 8*k+4)
		acca = b1a.Add(b2a).MulAdd(d, acca)
		accb = b1b.Add(b2b).MulAdd(d, accb)
	}
	return hsum2(acca, accb)
}
