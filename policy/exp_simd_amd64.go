//go:build goexperiment.simd && amd64

package policy

import "simd/archsimd"

var expAVX2 = archsimd.X86.AVX2() && archsimd.X86.FMA()

// expSub4 is expSub1 on four lanes at a time (AVX2 and FMA: each lane's
// operations are the scalar ones, so are its roundings); it returns how
// many values it did, a multiple of four. A group with a value outside
// [-700, 700] goes through expSub1.
func expSub4(dst, x []float64, c float64) int {
	if !expAVX2 || len(x) < 4 {
		return 0
	}
	dst = dst[:len(x)]
	bc := archsimd.BroadcastFloat64x4
	var (
		cv               = bc(c)
		lo, hi           = bc(-700), bc(700)
		log2e, round     = bc(expLog2E), bc(expRound)
		negLn2U, negLn2L = bc(-expLn2U), bc(-expLn2L)
		c2, c3, c4, c5   = bc(expC2), bc(expC3), bc(expC4), bc(expC5)
		c6, c7, c8, c9   = bc(expC6), bc(expC7), bc(expC8), bc(expC9)
		sixteenth, two   = bc(0.0625), bc(2)
		bias             = archsimd.BroadcastInt64x4(1023)
		roundBits        = archsimd.BroadcastInt64x4(0x4338000000000000) // expRound's bits
	)
	k := 0
	for ; k+4 <= len(x); k += 4 {
		d := archsimd.LoadFloat64x4Slice(x[k : k+4]).Sub(cv)
		if d.GreaterEqual(lo).And(d.LessEqual(hi)).ToBits() != 0xf {
			archsimd.ClearAVXUpperBits()
			expSub1(dst[k:k+4], x[k:k+4], c)
			continue
		}
		t := d.Mul(log2e).Add(round)
		n := t.Sub(round)
		r := n.MulAdd(negLn2U, d)
		r = n.MulAdd(negLn2L, r)
		r = r.Mul(sixteenth)
		p := c9.MulAdd(r, c8)
		p = p.MulAdd(r, c7)
		p = p.MulAdd(r, c6)
		p = p.MulAdd(r, c5)
		p = p.MulAdd(r, c4)
		p = p.MulAdd(r, c3)
		p = p.MulAdd(r, c2)
		r = r.Mul(p)
		r = r.Mul(r.Add(two))
		r = r.Mul(r.Add(two))
		r = r.Mul(r.Add(two))
		r = r.MulAdd(r.Add(two), c2)
		// t's low bits hold n (|n| < 2^51): 2^n is (n + 1023) << 52.
		scale := t.AsInt64x4().Sub(roundBits).Add(bias).ShiftAllLeft(52).AsFloat64x4()
		r.Mul(scale).StoreSlice(dst[k : k+4])
	}
	archsimd.ClearAVXUpperBits()
	return k
}

// clearVectorState clears the vector registers' upper halves
// (VZEROUPPER), before SSE code such as SHA-256's.
func clearVectorState() { archsimd.ClearAVXUpperBits() }
