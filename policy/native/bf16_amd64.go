//go:build goexperiment.simd && amd64

package native

import (
	"simd/archsimd"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// The AVX512_BF16 kernels of bf16.go (bf16_amd64.s).

func init() {
	if archsimd.X86.AVX512() && cpu.X86.HasAVX512BF16 && cpu.X86.HasAVX512BW {
		bf16AVX512 = &bf16Kernels{name: "avx512-bf16", mr: 8, nr: 32, micro: microBF16x8x32, cvt: cvtBF16x16, cvtPairs: cvtPairsBF16x16, cvtPanels: cvtPanelsBF16x32,
			cvtPanelsA: cvtPanelsBF16x8, transpose: transpose16}
		bf16Fast = bf16AVX512
		pairsHalf = pairsHalf32x512
		var v [12]byte
		cpuidVendor(&v)
		// AMD's VDPBF16PS does twice the FMA's multiply-adds (Zen 4 and
		// 5); Intel's half of them (BF16Faster).
		bf16DotFaster = string(v[:]) == "AuthenticAMD"
		// The tiles, where the CPU and Linux give them: several times
		// VDPBF16PS's rate (amx_linux_amd64.go).
		if k := amxKernels(bf16AVX512); k != nil {
			bf16Fast, bf16Others = k, []*bf16Kernels{bf16AVX512}
		}
	}
}

// pairsHalf32x512 is pairsHalf 32 pairs at a time (AVX-512: zero-extend
// each row's 16-bit values, shift the second's up by a vector of counts,
// or them), the rest one at a time.
func pairsHalf32x512(dst []uint32, r0, r1 []uint16) {
	n := len(dst) &^ 31
	if n > 0 {
		_, _ = r0[n-1], r1[n-1]
		s16 := archsimd.BroadcastUint32x16(16)
		for i := 0; i < n; i += 32 {
			a, c := archsimd.LoadUint16x32Slice(r0[i:]), archsimd.LoadUint16x32Slice(r1[i:])
			a.GetLo().ExtendToUint32().Or(c.GetLo().ExtendToUint32().ShiftLeft(s16)).StoreSlice(dst[i:])
			a.GetHi().ExtendToUint32().Or(c.GetHi().ExtendToUint32().ShiftLeft(s16)).StoreSlice(dst[i+16:])
		}
		archsimd.ClearAVXUpperBits()
	}
	for i := n; i < len(dst); i++ {
		dst[i] = uint32(r0[i]) | uint32(r1[i])<<16
	}
}

// bf16AVX512 is the AVX512_BF16 implementation, also where the AMX one
// is in use (its last k step; the tests compare the two).
var bf16AVX512 *bf16Kernels

//go:noescape
func microBF16x8x32asm(kp int, a *uint32, ars, aks int, b *uint32, ldb int, c *float32, ldc int, acc bool)

//go:noescape
func cvtBF16asm(n int, src *float32, dst *uint16)

//go:noescape
func cvtPairsBF16asm(n int, r0, r1 *float32, dst *uint32)

//go:noescape
func cvtPanelsBF16asm(panels int, r0, r1 *float32, dst *uint32, stride int)

//go:noescape
func cvtPanels8BF16asm(qn int, src *float32, lda int, dst *uint32, stride int)

//go:noescape
func dpbf16Loop512(n int, a, b uint32, out *[16]float32)

//go:noescape
func cpuidVendor(out *[12]byte)

func microBF16x8x32(kp int, a []uint32, ars, aks int, b []uint32, ldb int, c []float32, ldc int, acc bool) {
	const mr, nr = 8, 32
	if kp <= 0 || ars < 0 || aks < 0 || len(a) <= (mr-1)*ars+(kp-1)*aks || len(b) < (kp-1)*ldb+nr || len(c) < (mr-1)*ldc+nr {
		panic("native: bf16 micro-kernel tile out of range")
	}
	microBF16x8x32asm(kp, &a[0], ars, aks, &b[0], ldb, &c[0], ldc, acc)
}

// cvtBF16x16 converts whole vectors of 16 in assembly and the rest here,
// with toBF16's identical rounding.
func cvtBF16x16(dst []uint16, src []float32) {
	n := len(src) &^ 15
	if n > 0 {
		_ = dst[n-1]
		cvtBF16asm(n, unsafe.SliceData(src), unsafe.SliceData(dst))
	}
	for i := n; i < len(src); i++ {
		dst[i] = toBF16(src[i])
	}
}

func cvtPairsBF16x16(dst []uint32, r0, r1 []float32) {
	n := len(dst) &^ 15
	if n > 0 {
		_, _ = r0[n-1], r1[n-1]
		cvtPairsBF16asm(n, unsafe.SliceData(r0), unsafe.SliceData(r1), unsafe.SliceData(dst))
	}
	for i := n; i < len(dst); i++ {
		dst[i] = uint32(toBF16(r0[i])) | uint32(toBF16(r1[i]))<<16
	}
}

func cvtPanelsBF16x32(panels int, r0, r1 []float32, dst []uint32, stride int) {
	if panels <= 0 {
		return
	}
	if stride < 32 || len(r0) < panels*32 || len(r1) < panels*32 || len(dst) < (panels-1)*stride+32 {
		panic("native: bf16 panel conversion out of range")
	}
	cvtPanelsBF16asm(panels, &r0[0], &r1[0], &dst[0], stride)
}

// cvtPanelsBF16x8 is cvtPanelsA for the micro-kernel's 8 rows, in
// assembly.
func cvtPanelsBF16x8(qn int, src []float32, lda int, dst []uint32, stride int) {
	if qn <= 0 {
		return
	}
	if lda < 16 || stride < 8 || len(src) < (2*qn-1)*lda+16 || len(dst) < stride+qn*8 {
		panic("native: bf16 panel conversion out of range")
	}
	cvtPanels8BF16asm(qn, &src[0], lda, &dst[0], stride)
}

// DPBF16Loop runs n iterations of the register-only VDPBF16PS loop and
// returns its FLOPs (2 per multiply-add) and the sum of its accumulators'
// lanes (exact for small values: 16 lanes x 16 accumulators x n x 2 x
// a x b); ok is false without AVX512_BF16.
func DPBF16Loop(n int, a, b float32) (flops, sum float64, ok bool) {
	if bf16AVX512 == nil {
		return 0, 0, false
	}
	pa := uint32(toBF16(a)) * 0x10001
	pb := uint32(toBF16(b)) * 0x10001
	var out [16]float32
	dpbf16Loop512(n, pa, pb, &out)
	for _, v := range out {
		sum += float64(v)
	}
	return float64(n) * 16 * 16 * 2 * 2, sum, true
}

// transposeIdx are the ConcatPermute indices of transpose16's four
// stages (blocks of b = 8, 4, 2, 1 lanes): stage s's lo takes, in each
// group of 2b lanes, b lanes of x then the same b of y; its hi the next b
// of each.
var transposeIdx = func() (idx [4][2][16]uint32) {
	for s, b := range []int{8, 4, 2, 1} {
		for p := range 16 {
			g, off := p/(2*b)*2*b, p%(2*b)
			lo, hi := uint32(g+off), uint32(g+b+off)
			if off >= b {
				lo, hi = uint32(16+g+off-b), uint32(16+g+off)
			}
			idx[s][0][p], idx[s][1][p] = lo, hi
		}
	}
	return idx
}()

// transpose16 is transposeGeneric in blocks of 16 x 16 lanes, each
// transposed in registers in four stages of ConcatPermute (a stage swaps
// the off-diagonal blocks of every 2b x 2b block), the edges one by one.
// The stages are written out so that the 16 rows stay in registers.
func transpose16(dst []uint32, ldd int, src []uint32, lds, rows, cols int) {
	r16, c16 := rows&^15, cols&^15
	if r16 > 0 && c16 > 0 {
		lo8, hi8 := archsimd.LoadUint32x16Slice(transposeIdx[0][0][:]), archsimd.LoadUint32x16Slice(transposeIdx[0][1][:])
		lo4, hi4 := archsimd.LoadUint32x16Slice(transposeIdx[1][0][:]), archsimd.LoadUint32x16Slice(transposeIdx[1][1][:])
		lo2, hi2 := archsimd.LoadUint32x16Slice(transposeIdx[2][0][:]), archsimd.LoadUint32x16Slice(transposeIdx[2][1][:])
		lo1, hi1 := archsimd.LoadUint32x16Slice(transposeIdx[3][0][:]), archsimd.LoadUint32x16Slice(transposeIdx[3][1][:])
		for r0 := 0; r0 < r16; r0 += 16 {
			for c0 := 0; c0 < c16; c0 += 16 {
				s := src[r0*lds+c0:]
				v0 := archsimd.LoadUint32x16Slice(s)
				v1 := archsimd.LoadUint32x16Slice(s[1*lds:])
				v2 := archsimd.LoadUint32x16Slice(s[2*lds:])
				v3 := archsimd.LoadUint32x16Slice(s[3*lds:])
				v4 := archsimd.LoadUint32x16Slice(s[4*lds:])
				v5 := archsimd.LoadUint32x16Slice(s[5*lds:])
				v6 := archsimd.LoadUint32x16Slice(s[6*lds:])
				v7 := archsimd.LoadUint32x16Slice(s[7*lds:])
				v8 := archsimd.LoadUint32x16Slice(s[8*lds:])
				v9 := archsimd.LoadUint32x16Slice(s[9*lds:])
				v10 := archsimd.LoadUint32x16Slice(s[10*lds:])
				v11 := archsimd.LoadUint32x16Slice(s[11*lds:])
				v12 := archsimd.LoadUint32x16Slice(s[12*lds:])
				v13 := archsimd.LoadUint32x16Slice(s[13*lds:])
				v14 := archsimd.LoadUint32x16Slice(s[14*lds:])
				v15 := archsimd.LoadUint32x16Slice(s[15*lds:])
				v0, v8 = v0.ConcatPermute(v8, lo8), v0.ConcatPermute(v8, hi8)
				v1, v9 = v1.ConcatPermute(v9, lo8), v1.ConcatPermute(v9, hi8)
				v2, v10 = v2.ConcatPermute(v10, lo8), v2.ConcatPermute(v10, hi8)
				v3, v11 = v3.ConcatPermute(v11, lo8), v3.ConcatPermute(v11, hi8)
				v4, v12 = v4.ConcatPermute(v12, lo8), v4.ConcatPermute(v12, hi8)
				v5, v13 = v5.ConcatPermute(v13, lo8), v5.ConcatPermute(v13, hi8)
				v6, v14 = v6.ConcatPermute(v14, lo8), v6.ConcatPermute(v14, hi8)
				v7, v15 = v7.ConcatPermute(v15, lo8), v7.ConcatPermute(v15, hi8)
				v0, v4 = v0.ConcatPermute(v4, lo4), v0.ConcatPermute(v4, hi4)
				v1, v5 = v1.ConcatPermute(v5, lo4), v1.ConcatPermute(v5, hi4)
				v2, v6 = v2.ConcatPermute(v6, lo4), v2.ConcatPermute(v6, hi4)
				v3, v7 = v3.ConcatPermute(v7, lo4), v3.ConcatPermute(v7, hi4)
				v8, v12 = v8.ConcatPermute(v12, lo4), v8.ConcatPermute(v12, hi4)
				v9, v13 = v9.ConcatPermute(v13, lo4), v9.ConcatPermute(v13, hi4)
				v10, v14 = v10.ConcatPermute(v14, lo4), v10.ConcatPermute(v14, hi4)
				v11, v15 = v11.ConcatPermute(v15, lo4), v11.ConcatPermute(v15, hi4)
				v0, v2 = v0.ConcatPermute(v2, lo2), v0.ConcatPermute(v2, hi2)
				v1, v3 = v1.ConcatPermute(v3, lo2), v1.ConcatPermute(v3, hi2)
				v4, v6 = v4.ConcatPermute(v6, lo2), v4.ConcatPermute(v6, hi2)
				v5, v7 = v5.ConcatPermute(v7, lo2), v5.ConcatPermute(v7, hi2)
				v8, v10 = v8.ConcatPermute(v10, lo2), v8.ConcatPermute(v10, hi2)
				v9, v11 = v9.ConcatPermute(v11, lo2), v9.ConcatPermute(v11, hi2)
				v12, v14 = v12.ConcatPermute(v14, lo2), v12.ConcatPermute(v14, hi2)
				v13, v15 = v13.ConcatPermute(v15, lo2), v13.ConcatPermute(v15, hi2)
				v0, v1 = v0.ConcatPermute(v1, lo1), v0.ConcatPermute(v1, hi1)
				v2, v3 = v2.ConcatPermute(v3, lo1), v2.ConcatPermute(v3, hi1)
				v4, v5 = v4.ConcatPermute(v5, lo1), v4.ConcatPermute(v5, hi1)
				v6, v7 = v6.ConcatPermute(v7, lo1), v6.ConcatPermute(v7, hi1)
				v8, v9 = v8.ConcatPermute(v9, lo1), v8.ConcatPermute(v9, hi1)
				v10, v11 = v10.ConcatPermute(v11, lo1), v10.ConcatPermute(v11, hi1)
				v12, v13 = v12.ConcatPermute(v13, lo1), v12.ConcatPermute(v13, hi1)
				v14, v15 = v14.ConcatPermute(v15, lo1), v14.ConcatPermute(v15, hi1)
				d := dst[c0*ldd+r0:]
				v0.StoreSlice(d)
				v1.StoreSlice(d[1*ldd:])
				v2.StoreSlice(d[2*ldd:])
				v3.StoreSlice(d[3*ldd:])
				v4.StoreSlice(d[4*ldd:])
				v5.StoreSlice(d[5*ldd:])
				v6.StoreSlice(d[6*ldd:])
				v7.StoreSlice(d[7*ldd:])
				v8.StoreSlice(d[8*ldd:])
				v9.StoreSlice(d[9*ldd:])
				v10.StoreSlice(d[10*ldd:])
				v11.StoreSlice(d[11*ldd:])
				v12.StoreSlice(d[12*ldd:])
				v13.StoreSlice(d[13*ldd:])
				v14.StoreSlice(d[14*ldd:])
				v15.StoreSlice(d[15*ldd:])
			}
		}
		archsimd.ClearAVXUpperBits()
	}
	for r := range rows {
		c := 0
		if r < r16 {
			c = c16
		}
		for ; c < cols; c++ {
			dst[c*ldd+r] = src[r*lds+c]
		}
	}
}
