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
		bf16Fast = &bf16Kernels{name: "avx512-bf16", mr: 8, nr: 32, micro: microBF16x8x32, cvt: cvtBF16x16, cvtPairs: cvtPairsBF16x16, cvtPanels: cvtPanelsBF16x32}
	}
}

//go:noescape
func microBF16x8x32asm(kp int, a *uint32, ars, aks int, b *uint32, ldb int, c *float32, ldc int, acc bool)

//go:noescape
func cvtBF16asm(n int, src *float32, dst *uint16)

//go:noescape
func cvtPairsBF16asm(n int, r0, r1 *float32, dst *uint32)

//go:noescape
func cvtPanelsBF16asm(panels int, r0, r1 *float32, dst *uint32, stride int)

//go:noescape
func dpbf16Loop512(n int, a, b uint32, out *[16]float32)

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

// DPBF16Loop runs n iterations of the register-only VDPBF16PS loop and
// returns its FLOPs (2 per multiply-add) and the sum of its accumulators'
// lanes (exact for small values: 16 lanes x 16 accumulators x n x 2 x
// a x b); ok is false without AVX512_BF16.
func DPBF16Loop(n int, a, b float32) (flops, sum float64, ok bool) {
	if bf16Fast == nil {
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
