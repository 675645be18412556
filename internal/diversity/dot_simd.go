//go:build goexperiment.simd && amd64

package diversity

// AVX-512 and AVX2+FMA kernels, written with simd/archsimd
// (GOEXPERIMENT=simd). Every kernel calls archsimd.ClearAVXUpperBits
// (VZEROUPPER) before it returns or does any scalar float work: Go's
// scalar float code uses legacy-SSE instructions, which pay an
// AVX-to-SSE transition penalty on Intel CPUs while the upper register
// halves are dirty (see policy/native/kernels_simd_amd64.go).
//
// row4 is 4 rows x 2 column vectors: 8 accumulators (enough independent
// fused multiply-add chains to cover the FMA latency on two ports), 2
// panel loads and 4 broadcasts per dimension, the largest tile Go's 16
// vector registers hold without spills. Every column is one chain over
// the dimensions in order.

import (
	"simd/archsimd"
	"unsafe"
)

var (
	avx512Kernels = kernelSet{name: "avx512", dot: dot512, w: 32, row4: row4x512}
	avx2Kernels   = kernelSet{name: "avx2", dot: dot256, w: 16, row4: row4x256}
)

func init() {
	var sets []*kernelSet
	if archsimd.X86.AVX512() {
		sets = append(sets, &avx512Kernels)
	}
	if archsimd.X86.AVX2() && archsimd.X86.FMA() {
		sets = append(sets, &avx2Kernels)
	}
	kernelSets = append(sets, kernelSets...)
	kern = kernelSets[0]
}

type (
	f16 = archsimd.Float32x16
	f8  = archsimd.Float32x8
)

func load16(p unsafe.Pointer) f16     { return archsimd.LoadFloat32x16((*[16]float32)(p)) }
func load8(p unsafe.Pointer) f8       { return archsimd.LoadFloat32x8((*[8]float32)(p)) }
func store16(v f16, p unsafe.Pointer) { v.Store((*[16]float32)(p)) }
func store8(v f8, p unsafe.Pointer)   { v.Store((*[8]float32)(p)) }

// dot512 uses four 16-lane fused multiply-add accumulators (64 floats per
// iteration); vectors shorter than 64 and the tail go through the
// portable loop.
func dot512(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	if n < 64 {
		return dotGeneric(a, b)
	}
	var acc0, acc1, acc2, acc3 f16
	i := 0
	for ; i+64 <= n; i += 64 {
		acc0 = archsimd.LoadFloat32x16Slice(a[i:]).MulAdd(archsimd.LoadFloat32x16Slice(b[i:]), acc0)
		acc1 = archsimd.LoadFloat32x16Slice(a[i+16:]).MulAdd(archsimd.LoadFloat32x16Slice(b[i+16:]), acc1)
		acc2 = archsimd.LoadFloat32x16Slice(a[i+32:]).MulAdd(archsimd.LoadFloat32x16Slice(b[i+32:]), acc2)
		acc3 = archsimd.LoadFloat32x16Slice(a[i+48:]).MulAdd(archsimd.LoadFloat32x16Slice(b[i+48:]), acc3)
	}
	for ; i+16 <= n; i += 16 {
		acc0 = archsimd.LoadFloat32x16Slice(a[i:]).MulAdd(archsimd.LoadFloat32x16Slice(b[i:]), acc0)
	}
	sum := acc0.Add(acc1).Add(acc2.Add(acc3))
	half := sum.GetLo().Add(sum.GetHi())
	var lanes [8]float32
	half.StoreSlice(lanes[:])
	archsimd.ClearAVXUpperBits()
	return sumLanes(&lanes) + dotGeneric(a[i:], b[i:])
}

// dot256 uses four 8-lane fused multiply-add accumulators (32 floats per
// iteration).
func dot256(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	if n < 32 {
		return dotGeneric(a, b)
	}
	var acc0, acc1, acc2, acc3 f8
	i := 0
	for ; i+32 <= n; i += 32 {
		acc0 = archsimd.LoadFloat32x8Slice(a[i:]).MulAdd(archsimd.LoadFloat32x8Slice(b[i:]), acc0)
		acc1 = archsimd.LoadFloat32x8Slice(a[i+8:]).MulAdd(archsimd.LoadFloat32x8Slice(b[i+8:]), acc1)
		acc2 = archsimd.LoadFloat32x8Slice(a[i+16:]).MulAdd(archsimd.LoadFloat32x8Slice(b[i+16:]), acc2)
		acc3 = archsimd.LoadFloat32x8Slice(a[i+24:]).MulAdd(archsimd.LoadFloat32x8Slice(b[i+24:]), acc3)
	}
	for ; i+8 <= n; i += 8 {
		acc0 = archsimd.LoadFloat32x8Slice(a[i:]).MulAdd(archsimd.LoadFloat32x8Slice(b[i:]), acc0)
	}
	sum := acc0.Add(acc1).Add(acc2.Add(acc3))
	var lanes [8]float32
	sum.StoreSlice(lanes[:])
	archsimd.ClearAVXUpperBits()
	return sumLanes(&lanes) + dotGeneric(a[i:], b[i:])
}

func sumLanes(l *[8]float32) float32 {
	return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]))
}

// row4x512 is row4 for panels of 32: 4 rows x 2 vectors.
func row4x512(a0, a1, a2, a3, b []float32, out []float32) {
	checkPanel(a0, a1, a2, a3, b, out, 32)
	d := len(a0)
	if d == 0 {
		clear(out[:128])
		return
	}
	var c00, c01, c10, c11, c20, c21, c30, c31 f16
	p0, p1, p2, p3 := unsafe.Pointer(&a0[0]), unsafe.Pointer(&a1[0]), unsafe.Pointer(&a2[0]), unsafe.Pointer(&a3[0])
	bp := unsafe.Pointer(&b[0])
	// Pointers are formed from the index, never one past the end
	// (checkptr).
	for kk := range uintptr(d) {
		pb, o := unsafe.Add(bp, kk*128), kk*4
		b0, b1 := load16(pb), load16(unsafe.Add(pb, 64))
		x0 := archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(p0, o)))
		x1 := archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(p1, o)))
		x2 := archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(p2, o)))
		x3 := archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(p3, o)))
		c00, c01 = b0.MulAdd(x0, c00), b1.MulAdd(x0, c01)
		c10, c11 = b0.MulAdd(x1, c10), b1.MulAdd(x1, c11)
		c20, c21 = b0.MulAdd(x2, c20), b1.MulAdd(x2, c21)
		c30, c31 = b0.MulAdd(x3, c30), b1.MulAdd(x3, c31)
	}
	op := unsafe.Pointer(&out[0])
	store16(c00, op)
	store16(c01, unsafe.Add(op, 64))
	store16(c10, unsafe.Add(op, 128))
	store16(c11, unsafe.Add(op, 192))
	store16(c20, unsafe.Add(op, 256))
	store16(c21, unsafe.Add(op, 320))
	store16(c30, unsafe.Add(op, 384))
	store16(c31, unsafe.Add(op, 448))
	archsimd.ClearAVXUpperBits()
}

// row4x256 is row4 for panels of 16: 4 rows x 2 vectors.
func row4x256(a0, a1, a2, a3, b []float32, out []float32) {
	checkPanel(a0, a1, a2, a3, b, out, 16)
	d := len(a0)
	if d == 0 {
		clear(out[:64])
		return
	}
	var c00, c01, c10, c11, c20, c21, c30, c31 f8
	p0, p1, p2, p3 := unsafe.Pointer(&a0[0]), unsafe.Pointer(&a1[0]), unsafe.Pointer(&a2[0]), unsafe.Pointer(&a3[0])
	bp := unsafe.Pointer(&b[0])
	// Pointers are formed from the index, never one past the end
	// (checkptr).
	for kk := range uintptr(d) {
		pb, o := unsafe.Add(bp, kk*64), kk*4
		b0, b1 := load8(pb), load8(unsafe.Add(pb, 32))
		x0 := archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(p0, o)))
		x1 := archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(p1, o)))
		x2 := archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(p2, o)))
		x3 := archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(p3, o)))
		c00, c01 = b0.MulAdd(x0, c00), b1.MulAdd(x0, c01)
		c10, c11 = b0.MulAdd(x1, c10), b1.MulAdd(x1, c11)
		c20, c21 = b0.MulAdd(x2, c20), b1.MulAdd(x2, c21)
		c30, c31 = b0.MulAdd(x3, c30), b1.MulAdd(x3, c31)
	}
	op := unsafe.Pointer(&out[0])
	store8(c00, op)
	store8(c01, unsafe.Add(op, 32))
	store8(c10, unsafe.Add(op, 64))
	store8(c11, unsafe.Add(op, 96))
	store8(c20, unsafe.Add(op, 128))
	store8(c21, unsafe.Add(op, 160))
	store8(c30, unsafe.Add(op, 192))
	store8(c31, unsafe.Add(op, 224))
	archsimd.ClearAVXUpperBits()
}
