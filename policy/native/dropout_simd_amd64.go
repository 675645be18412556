//go:build goexperiment.simd && amd64

package native

import "simd/archsimd"

// dropout32x512 is dropout's loop on AVX-512 (lora.go: dropoutBlocks):
// 32 elements at a time, from 8 draws of splitmix in the 64-bit lanes of
// one vector (VPMULLQ), each draw's four 16-bit fields the uniforms of
// four consecutive elements, as the scalar loop reads them. The same
// mask and the same products, bit for bit: a dropped element is +0, a
// kept one x*keep.
func dropout32x512(xd, x []float32, draw0 uint64, blocks int, thresh uint32, keep float32) {
	if blocks <= 0 {
		return
	}
	_, _ = xd[32*blocks-1], x[32*blocks-1]
	lanes := archsimd.LoadUint64x8(&[8]uint64{0, 1, 2, 3, 4, 5, 6, 7})
	golden := archsimd.BroadcastUint64x8(0x9e3779b97f4a7c15)
	c1, c2 := archsimd.BroadcastUint64x8(0xbf58476d1ce4e5b9), archsimd.BroadcastUint64x8(0x94d049bb133111eb)
	// Shifts by vectors of counts (VPSRLVQ): ShiftAllRight's count goes
	// through a legacy-SSE move, and on Intel each such move with the
	// upper halves dirty pays the AVX-to-SSE transition (226 ns a shift,
	// measured on a Xeon family 6 model 207, against 1 ns).
	s30, s27, s31 := archsimd.BroadcastUint64x8(30), archsimd.BroadcastUint64x8(27), archsimd.BroadcastUint64x8(31)
	th := archsimd.BroadcastUint32x16(thresh)
	k := archsimd.BroadcastFloat32x16(keep)
	h0 := archsimd.BroadcastUint64x8(draw0).Add(lanes).Add(golden)
	step := archsimd.BroadcastUint64x8(8)
	for b := range blocks {
		h := h0
		h0 = h0.Add(step)
		h = h.Xor(h.ShiftRight(s30)).Mul(c1)
		h = h.Xor(h.ShiftRight(s27)).Mul(c2)
		h = h.Xor(h.ShiftRight(s31))
		u := h.AsUint16x32()
		at := 32 * b
		lo, hi := u.GetLo().ExtendToUint32(), u.GetHi().ExtendToUint32()
		archsimd.LoadFloat32x16Slice(x[at:]).Mul(k).Masked(lo.GreaterEqual(th)).StoreSlice(xd[at:])
		archsimd.LoadFloat32x16Slice(x[at+16:]).Mul(k).Masked(hi.GreaterEqual(th)).StoreSlice(xd[at+16:])
	}
	archsimd.ClearAVXUpperBits()
}

func init() {
	if archsimd.X86.AVX512() {
		dropoutFast = dropout32x512
	}
}
