//go:build goexperiment.simd && amd64

package native

// AVX-512 and AVX2 kernels, written with simd/archsimd (GOEXPERIMENT=simd).
//
// Every function here that touches 256- or 512-bit registers calls
// archsimd.ClearAVXUpperBits (VZEROUPPER) before it returns or does any
// scalar float work. Go's scalar float code and math.Exp/Log/Sqrt use
// legacy-SSE instructions; on Intel CPUs each of those pays a large
// AVX-to-SSE transition penalty while the upper register halves are dirty
// (2M math.Exp calls: 2.33 s after one 512-bit add, 14 ms after a
// VZEROUPPER). Tails shorter than a vector go through masked loads and
// stores, or through a small array filled before the first vector
// instruction and copied back after the VZEROUPPER.
//
// The GEMM micro-kernels are in assembly (micro_amd64.s): written with
// archsimd, the best tile without spills was 4 x 32 with a copy or a move
// beside every FMA, at about 60% of the FMA peak of a Zen 5 core on data
// in L1.

import (
	"math"
	"simd/archsimd"
	"unsafe"

	"golang.org/x/sys/cpu"
)

func init() {
	if archsimd.X86.AVX512() {
		k := &kernels{
			name: "avx512", mr: 8, nr: 32, kc: 128, packStrips: packStrips32, mrw: 4, nrw: 64,
			micro: micro512, wide: wide512, gemv: gemv512, dot: dot512, axpy: axpy512, scale: scale512, max: max512,
			expShift: expShift512, gelu: gelu512, geluBackward: geluBackward512, adamw: adamw512,
			lnForward: lnForward512, lnBackward: lnBackward512, rope: rope512, softmaxGrad: softmaxGrad512,
			rmsForward: rmsForward512, rmsBackward: rmsBackward512, swiglu: swiglu512, swigluBackward: swigluBackward512,
			qgemv: qgemv512, qdequant: qdequant512Row, qtranspose: qtranspose512, qgemv8: qgemv8Generic,
		}
		if cpu.X86.HasAVX512VNNI && cpu.X86.HasAVX512BW {
			k.qgemv8, k.qprep8, k.qgemv8Native, k.quant8 = qgemv8vnni, prep8AVX512, true, quant8AVX512
		}
		simdKernels = append(simdKernels, k)
	}
	if archsimd.X86.AVX2() && archsimd.X86.FMA() {
		simdKernels = append(simdKernels, &kernels{
			name: "avx2", mr: 6, nr: 16, kc: avx2KC, packStrips: packStrips16, mrw: 2, nrw: 32,
			micro: micro256, wide: wide256, gemv: gemvRows256, dot: dot256, axpy: axpy256, scale: scale256, max: max256,
			expShift: expShift256, gelu: gelu256, geluBackward: geluBackward256, adamw: adamw256,
			lnForward: lnForward256, lnBackward: lnBackward256, rope: rope256, softmaxGrad: softmaxGrad256,
			rmsForward: rmsForward256, rmsBackward: rmsBackward256, swiglu: swiglu256, swigluBackward: swigluBackward256,
			qgemv: qgemv256, qdequant: qdequantGeneric, qgemv8: qgemv8Generic,
		})
	}
}

// avx2KC is the AVX2 kernel's k block: with 128 (the others'), the
// 2,048^3 product ran at 77-82 GFLOP per second on a Zen 3 core, 256
// at 82-90, and most products of an SFT step with k >= 256 gained 3-8%
// (BENCHMARKS.md, issue 51): at 128 each 6 x 16 tile of C is read and
// written once per 128 steps of 12 FMAs, and the B strip of 8 KB is
// fetched for 10 tiles' worth of work. A strip of 256 rows is 16 KB,
// half a Zen 3 core's L1.
const avx2KC = 256

type (
	f16 = archsimd.Float32x16
	f8  = archsimd.Float32x8
)

func b16(x float32) f16 { return archsimd.BroadcastFloat32x16(x) }
func b8(x float32) f8   { return archsimd.BroadcastFloat32x8(x) }

// zero16 and zero8 are v with the lanes where m is set cleared (AND-NOT
// on the mask as integer lanes). The kernels below never write a
// floating-point 0 constant (b16(0), or a comparison with 0): Go 1.26
// materializes it with a legacy-SSE XORPS, and one SSE instruction while
// the upper halves of the vector registers are in use cost about 150 ns
// here (Intel Xeon with AVX-512, in a VM), 40 times the rest of exp16;
// GELU and exp ran at 25-30 ns per element instead of about 1.
func zero16(m archsimd.Mask32x16, v f16) f16 {
	return v.AsInt32x16().AndNot(m.ToInt32x16()).AsFloat32x16()
}

func zero8(m archsimd.Mask32x8, v f8) f8 {
	return v.AsInt32x8().AndNot(m.ToInt32x8()).AsFloat32x8()
}

func load16(p unsafe.Pointer) f16     { return archsimd.LoadFloat32x16((*[16]float32)(p)) }
func load8(p unsafe.Pointer) f8       { return archsimd.LoadFloat32x8((*[8]float32)(p)) }
func store16(v f16, p unsafe.Pointer) { v.Store((*[16]float32)(p)) }
func store8(v f8, p unsafe.Pointer)   { v.Store((*[8]float32)(p)) }

// checkMicro panics unless the slices hold the tile (the kernels then
// use unchecked pointer arithmetic).
func checkMicro(kc int, a []float32, ars, aks int, b []float32, ldb int, c []float32, ldc, mr, nr int) {
	if kc <= 0 || ars < 0 || aks < 0 || len(a) <= (mr-1)*ars+(kc-1)*aks || len(b) < (kc-1)*ldb+nr || len(c) < (mr-1)*ldc+nr {
		panic("native: micro-kernel tile out of range")
	}
}

// micro512 is the AVX-512 micro-kernel, 8 x 32, and micro256 the AVX2
// one, 6 x 16 (micro_amd64.s).
func micro512(kc int, a []float32, ars, aks int, b []float32, ldb int, c []float32, ldc int, acc bool) {
	checkMicro(kc, a, ars, aks, b, ldb, c, ldc, 8, 32)
	micro8x32asm(kc, &a[0], ars, aks, &b[0], ldb, &c[0], ldc, acc)
}

func micro256(kc int, a []float32, ars, aks int, b []float32, ldb int, c []float32, ldc int, acc bool) {
	checkMicro(kc, a, ars, aks, b, ldb, c, ldc, 6, 16)
	micro6x16asm(kc, &a[0], ars, aks, &b[0], ldb, &c[0], ldc, acc)
}

// wide512 (4 x 64) and wide256 (2 x 32) are the micro-kernels of
// products with few rows and B read in place (kernels.wide).
func wide512(kc int, a []float32, ars, aks int, b []float32, ldb int, c []float32, ldc int, acc bool) {
	checkMicro(kc, a, ars, aks, b, ldb, c, ldc, 4, 64)
	micro4x64asm(kc, &a[0], ars, aks, &b[0], ldb, &c[0], ldc, acc)
}

func wide256(kc int, a []float32, ars, aks int, b []float32, ldb int, c []float32, ldc int, acc bool) {
	checkMicro(kc, a, ars, aks, b, ldb, c, ldc, 2, 32)
	micro2x32asm(kc, &a[0], ars, aks, &b[0], ldb, &c[0], ldc, acc)
}

// packStrips16 is kernels.packStrips for nr = 16 (packStrips16asm).
func packStrips16(dst []float32, stride int, src []float32, ld, rows, strips int) {
	if rows <= 0 || strips <= 0 {
		return
	}
	if ld < 0 || stride < 0 || len(src) < (rows-1)*ld+strips*16 || len(dst) < (strips-1)*stride+rows*16 {
		panic("native: packStrips out of range")
	}
	packStrips16asm(&dst[0], &src[0], ld*4, rows, strips, stride*4)
}

//go:noescape
func packStrips16asm(dst, src *float32, ld, rows, strips, stride int)

//go:noescape
func micro4x64asm(kc int, a *float32, ars, aks int, b *float32, ldb int, c *float32, ldc int, acc bool)

//go:noescape
func micro2x32asm(kc int, a *float32, ars, aks int, b *float32, ldb int, c *float32, ldc int, acc bool)

//go:noescape
func micro8x32asm(kc int, a *float32, ars, aks int, b *float32, ldb int, c *float32, ldc int, acc bool)

//go:noescape
func micro6x16asm(kc int, a *float32, ars, aks int, b *float32, ldb int, c *float32, ldc int, acc bool)

// gemv512 keeps 64 columns of y in four registers while it streams the
// rows of B, then moves to the next 64.
func gemv512(x, b []float32, ldb int, y []float32, acc bool) {
	k, n := len(x), len(y)
	if k == 0 {
		if !acc {
			clear(y)
		}
		return
	}
	if len(b) < (k-1)*ldb+n {
		panic("native: gemv: B out of range")
	}
	bp := unsafe.Pointer(&b[0])
	stride := uintptr(ldb) * 4
	j := 0
	for ; j+64 <= n; j += 64 {
		var y0, y1, y2, y3 f16
		for kk, xk := range x {
			p := unsafe.Add(bp, uintptr(j*4)+uintptr(kk)*stride) // never past B's last row (checkptr)
			xv := archsimd.BroadcastFloat32x16(xk)
			y0 = load16(p).MulAdd(xv, y0)
			y1 = load16(unsafe.Add(p, 64)).MulAdd(xv, y1)
			y2 = load16(unsafe.Add(p, 128)).MulAdd(xv, y2)
			y3 = load16(unsafe.Add(p, 192)).MulAdd(xv, y3)
		}
		yp := unsafe.Pointer(&y[j])
		if acc {
			y0, y1 = y0.Add(load16(yp)), y1.Add(load16(unsafe.Add(yp, 64)))
			y2, y3 = y2.Add(load16(unsafe.Add(yp, 128))), y3.Add(load16(unsafe.Add(yp, 192)))
		}
		store16(y0, yp)
		store16(y1, unsafe.Add(yp, 64))
		store16(y2, unsafe.Add(yp, 128))
		store16(y3, unsafe.Add(yp, 192))
	}
	for ; j < n; j += 16 {
		var y0 f16
		for kk, xk := range x {
			y0 = archsimd.LoadFloat32x16SlicePart(b[kk*ldb+j:kk*ldb+n]).MulAdd(archsimd.BroadcastFloat32x16(xk), y0)
		}
		if acc {
			y0 = y0.Add(archsimd.LoadFloat32x16SlicePart(y[j:]))
		}
		y0.StoreSlicePart(y[j:])
	}
	archsimd.ClearAVXUpperBits()
}

// gemv256 is gemv512 with 8-wide vectors: 32 columns at a time.
func gemv256(x, b []float32, ldb int, y []float32, acc bool) {
	k, n := len(x), len(y)
	if k == 0 {
		if !acc {
			clear(y)
		}
		return
	}
	if len(b) < (k-1)*ldb+n {
		panic("native: gemv: B out of range")
	}
	bp := unsafe.Pointer(&b[0])
	stride := uintptr(ldb) * 4
	j := 0
	for ; j+32 <= n; j += 32 {
		var y0, y1, y2, y3 f8
		for kk, xk := range x {
			p := unsafe.Add(bp, uintptr(j*4)+uintptr(kk)*stride) // never past B's last row (checkptr)
			xv := archsimd.BroadcastFloat32x8(xk)
			y0 = load8(p).MulAdd(xv, y0)
			y1 = load8(unsafe.Add(p, 32)).MulAdd(xv, y1)
			y2 = load8(unsafe.Add(p, 64)).MulAdd(xv, y2)
			y3 = load8(unsafe.Add(p, 96)).MulAdd(xv, y3)
		}
		yp := unsafe.Pointer(&y[j])
		if acc {
			y0, y1 = y0.Add(load8(yp)), y1.Add(load8(unsafe.Add(yp, 32)))
			y2, y3 = y2.Add(load8(unsafe.Add(yp, 64))), y3.Add(load8(unsafe.Add(yp, 96)))
		}
		store8(y0, yp)
		store8(y1, unsafe.Add(yp, 32))
		store8(y2, unsafe.Add(yp, 64))
		store8(y3, unsafe.Add(yp, 96))
	}
	archsimd.ClearAVXUpperBits()
	if j < n { // ragged columns: the portable loop (after VZEROUPPER)
		for kk, xk := range x {
			row := b[kk*ldb+j : kk*ldb+n]
			if kk == 0 && !acc {
				for jj, v := range row {
					y[j+jj] = xk * v
				}
				continue
			}
			for jj, v := range row {
				y[j+jj] += xk * v
			}
		}
	}
}

// gemvRows256 computes y = x B (acc: y += x B) streaming B row by row,
// the AVX2 set's gemv: for each block of up to 512 columns, every row's
// segment is read once, front to back, four rows per pass over the
// block's partial sums (a stack buffer). gemv256's 32-column strips walk
// down all k rows at B's stride instead, and on a decode step, whose
// weights come from beyond the L2 cache, they fetched about half as many
// bytes per second (BenchmarkGemv). The sums are gemv256's, bit for bit:
// the same k-ascending fused multiply-adds from the first product, y's
// old values added last, and the ragged columns (beyond a multiple of
// 32) by gemv256 itself.
func gemvRows256(x, b []float32, ldb int, y []float32, acc bool) {
	k, n := len(x), len(y)/32*32
	if k == 0 || n == 0 {
		gemv256(x, b, ldb, y, acc)
		return
	}
	if len(b) < (k-1)*ldb+len(y) {
		panic("native: gemv: B out of range")
	}
	if n < len(y) { // ragged columns: gemv256's own loop, as before
		gemv256(x, b[n:], ldb, y[n:], acc)
	}
	var buf [512]float32
	stride := uintptr(ldb) * 4
	for j0 := 0; j0 < n; j0 += 512 {
		nb := min(512, n-j0)
		t := unsafe.Pointer(&buf[0])
		// Row kk's segment: computed where it is read, never stepped past
		// B's last row (checkptr, under -race, rejects a pointer beyond
		// the allocation even unread).
		base := unsafe.Pointer(&b[j0])
		at := func(kk int) unsafe.Pointer { return unsafe.Add(base, uintptr(kk)*stride) }
		kk := 0
		// The first row sets the sums (no zeroing pass).
		{
			xv := archsimd.BroadcastFloat32x8(x[0])
			for j := 0; j < nb; j += 8 {
				store8(load8(unsafe.Add(base, j*4)).Mul(xv), unsafe.Add(t, j*4))
			}
			kk = 1
		}
		for ; kk+4 <= k; kk += 4 {
			x0, x1 := archsimd.BroadcastFloat32x8(x[kk]), archsimd.BroadcastFloat32x8(x[kk+1])
			x2, x3 := archsimd.BroadcastFloat32x8(x[kk+2]), archsimd.BroadcastFloat32x8(x[kk+3])
			row, r1, r2, r3 := at(kk), at(kk+1), at(kk+2), at(kk+3)
			for j := 0; j < nb; j += 8 {
				o := uintptr(j * 4)
				v := load8(unsafe.Add(t, o))
				v = load8(unsafe.Add(row, o)).MulAdd(x0, v)
				v = load8(unsafe.Add(r1, o)).MulAdd(x1, v)
				v = load8(unsafe.Add(r2, o)).MulAdd(x2, v)
				v = load8(unsafe.Add(r3, o)).MulAdd(x3, v)
				store8(v, unsafe.Add(t, o))
			}
		}
		for ; kk < k; kk++ {
			xv := archsimd.BroadcastFloat32x8(x[kk])
			row := at(kk)
			for j := 0; j < nb; j += 8 {
				o := uintptr(j * 4)
				store8(load8(unsafe.Add(row, o)).MulAdd(xv, load8(unsafe.Add(t, o))), unsafe.Add(t, o))
			}
		}
		yp := unsafe.Pointer(&y[j0])
		for j := 0; j < nb; j += 8 {
			o := uintptr(j * 4)
			v := load8(unsafe.Add(t, o))
			if acc {
				v = v.Add(load8(unsafe.Add(yp, o)))
			}
			store8(v, unsafe.Add(yp, o))
		}
	}
	archsimd.ClearAVXUpperBits()
}

// --- AVX-512 vector helpers ---

// tail16 copies the last len(x)%16 values into a full vector, the rest
// of it set to fill.
func tail16(x []float32, fill float32) (buf [16]float32, n int) {
	n = len(x) % 16
	for i := range buf {
		buf[i] = fill
	}
	copy(buf[:], x[len(x)-n:])
	return buf, n
}

func hsum16(v f16) float32 {
	var t [16]float32
	v.Store(&t)
	archsimd.ClearAVXUpperBits()
	return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7])) +
		((t[8] + t[9]) + (t[10] + t[11])) + ((t[12] + t[13]) + (t[14] + t[15]))
}

func dot512(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1 f16
	i := 0
	for ; i+32 <= len(a); i += 32 {
		s0 = archsimd.LoadFloat32x16Slice(a[i:]).MulAdd(archsimd.LoadFloat32x16Slice(b[i:]), s0)
		s1 = archsimd.LoadFloat32x16Slice(a[i+16:]).MulAdd(archsimd.LoadFloat32x16Slice(b[i+16:]), s1)
	}
	for ; i+16 <= len(a); i += 16 {
		s0 = archsimd.LoadFloat32x16Slice(a[i:]).MulAdd(archsimd.LoadFloat32x16Slice(b[i:]), s0)
	}
	if i < len(a) {
		s0 = archsimd.LoadFloat32x16SlicePart(a[i:]).MulAdd(archsimd.LoadFloat32x16SlicePart(b[i:]), s0)
	}
	return hsum16(s0.Add(s1))
}

func axpy512(y []float32, alpha float32, x []float32) {
	x = x[:len(y)]
	al := b16(alpha)
	i := 0
	for ; i+16 <= len(y); i += 16 {
		archsimd.LoadFloat32x16Slice(x[i:]).MulAdd(al, archsimd.LoadFloat32x16Slice(y[i:])).StoreSlice(y[i:])
	}
	if i < len(y) {
		archsimd.LoadFloat32x16SlicePart(x[i:]).MulAdd(al, archsimd.LoadFloat32x16SlicePart(y[i:])).StoreSlicePart(y[i:])
	}
	archsimd.ClearAVXUpperBits()
}

func scale512(x []float32, s float32) {
	sv := b16(s)
	i := 0
	for ; i+16 <= len(x); i += 16 {
		archsimd.LoadFloat32x16Slice(x[i:]).Mul(sv).StoreSlice(x[i:])
	}
	if i < len(x) {
		archsimd.LoadFloat32x16SlicePart(x[i:]).Mul(sv).StoreSlicePart(x[i:])
	}
	archsimd.ClearAVXUpperBits()
}

func max512(x []float32) float32 {
	buf, n := tail16(x, float32(math.Inf(-1)))
	m := archsimd.LoadFloat32x16(&buf)
	for i := 0; i+16 <= len(x)-n; i += 16 {
		m = m.Max(archsimd.LoadFloat32x16Slice(x[i:]))
	}
	var t [16]float32
	m.Store(&t)
	archsimd.ClearAVXUpperBits()
	r := t[0]
	for _, v := range t[1:] {
		r = max(r, v)
	}
	return r
}

// exp16 is expf on 16 lanes: VRNDSCALE for n, VSCALEF for 2^n (which
// also overflows to +Inf above expMax), and lanes below expMin set to 0.
func exp16(x f16) f16 {
	xc := x.Max(b16(expMin)).Min(b16(expMax + 1)) // below expMin: no denormals, and zeroed below
	n := xc.Mul(b16(log2e)).RoundToEvenScaled(0)
	r := n.MulAdd(b16(-ln2Hi), xc)
	r = n.MulAdd(b16(-ln2Lo), r)
	p := b16(expP0).MulAdd(r, b16(expP1))
	p = p.MulAdd(r, b16(expP2))
	p = p.MulAdd(r, b16(expP3))
	p = p.MulAdd(r, b16(expP4))
	p = p.MulAdd(r, b16(expP5))
	p = p.MulAdd(r.Mul(r), r).Add(b16(1))
	return zero16(x.Less(b16(expMin)), p.Scale(n))
}

func expShift512(x []float32, shift, mul float32) float32 {
	buf, n := tail16(x, float32(math.Inf(-1))) // scalar work first, see above
	sh, mu := b16(shift), b16(mul)
	var sum f16
	for i := 0; i+16 <= len(x)-n; i += 16 {
		e := exp16(archsimd.LoadFloat32x16Slice(x[i:]).Sub(sh).Mul(mu))
		e.StoreSlice(x[i:])
		sum = sum.Add(e)
	}
	if n > 0 {
		e := exp16(archsimd.LoadFloat32x16(&buf).Sub(sh).Mul(mu))
		e.StoreSlicePart(x[len(x)-n:])
		sum = sum.Add(e)
	}
	return hsum16(sum)
}

// erfc16 is erfcf on 16 lanes.
func erfc16(z f16) f16 {
	a := z.Max(z.Mul(b16(-1)))
	t := b16(1).Div(a.MulAdd(b16(0.5), b16(1)))
	p := b16(erfcC9).MulAdd(t, b16(erfcC8))
	p = p.MulAdd(t, b16(erfcC7))
	p = p.MulAdd(t, b16(erfcC6))
	p = p.MulAdd(t, b16(erfcC5))
	p = p.MulAdd(t, b16(erfcC4))
	p = p.MulAdd(t, b16(erfcC3))
	p = p.MulAdd(t, b16(erfcC2))
	p = p.MulAdd(t, b16(erfcC1))
	p = p.MulAdd(t, b16(erfcC0))
	y := t.Mul(exp16(a.Mul(a).Mul(b16(-1)).Add(p)))
	return b16(2).Sub(y).Merge(y, z.Less(a)) // z < |z|: z < 0
}

func gelu512(out, in []float32) {
	in = in[:len(out)]
	i := 0
	for ; i+16 <= len(out); i += 16 {
		x := archsimd.LoadFloat32x16Slice(in[i:])
		x.Mul(b16(0.5)).Mul(erfc16(x.Mul(b16(-invSqrt2)))).StoreSlice(out[i:])
	}
	if i < len(out) {
		x := archsimd.LoadFloat32x16SlicePart(in[i:])
		x.Mul(b16(0.5)).Mul(erfc16(x.Mul(b16(-invSqrt2)))).StoreSlicePart(out[i:])
	}
	archsimd.ClearAVXUpperBits()
}

func geluGrad16(x f16) f16 {
	phi := exp16(x.Mul(x).Mul(b16(-0.5))).Mul(b16(invSqrt2Pi))
	return erfc16(x.Mul(b16(-invSqrt2))).Mul(b16(0.5)).Add(x.Mul(phi))
}

func geluBackward512(dIn, dOut, in []float32) {
	dOut, in = dOut[:len(dIn)], in[:len(dIn)]
	i := 0
	for ; i+16 <= len(dIn); i += 16 {
		x := archsimd.LoadFloat32x16Slice(in[i:])
		geluGrad16(x).Mul(archsimd.LoadFloat32x16Slice(dOut[i:])).StoreSlice(dIn[i:])
	}
	if i < len(dIn) {
		x := archsimd.LoadFloat32x16SlicePart(in[i:])
		geluGrad16(x).Mul(archsimd.LoadFloat32x16SlicePart(dOut[i:])).StoreSlicePart(dIn[i:])
	}
	archsimd.ClearAVXUpperBits()
}

// --- AVX2 vector helpers ---

func tail8(x []float32, fill float32) (buf [8]float32, n int) {
	n = len(x) % 8
	for i := range buf {
		buf[i] = fill
	}
	copy(buf[:], x[len(x)-n:])
	return buf, n
}

func hsum8(v f8) float32 {
	var t [8]float32
	v.Store(&t)
	archsimd.ClearAVXUpperBits()
	return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]))
}

func dot256(a, b []float32) float32 {
	b = b[:len(a)]
	ta, n := tail8(a, 0) // scalar work first, see above
	tb, _ := tail8(b, 0)
	var s0, s1 f8
	m := len(a) - n
	i := 0
	for ; i+16 <= m; i += 16 {
		s0 = archsimd.LoadFloat32x8Slice(a[i:]).MulAdd(archsimd.LoadFloat32x8Slice(b[i:]), s0)
		s1 = archsimd.LoadFloat32x8Slice(a[i+8:]).MulAdd(archsimd.LoadFloat32x8Slice(b[i+8:]), s1)
	}
	for ; i+8 <= m; i += 8 {
		s0 = archsimd.LoadFloat32x8Slice(a[i:]).MulAdd(archsimd.LoadFloat32x8Slice(b[i:]), s0)
	}
	if n > 0 {
		s0 = archsimd.LoadFloat32x8(&ta).MulAdd(archsimd.LoadFloat32x8(&tb), s0)
	}
	return hsum8(s0.Add(s1))
}

func axpy256(y []float32, alpha float32, x []float32) {
	x = x[:len(y)]
	tx, n := tail8(x, 0) // scalar work first, see above
	ty, _ := tail8(y, 0)
	m := len(y) - n
	al := b8(alpha)
	for i := 0; i+8 <= m; i += 8 {
		archsimd.LoadFloat32x8Slice(x[i:]).MulAdd(al, archsimd.LoadFloat32x8Slice(y[i:])).StoreSlice(y[i:])
	}
	if n > 0 {
		archsimd.LoadFloat32x8(&tx).MulAdd(al, archsimd.LoadFloat32x8(&ty)).Store(&ty)
	}
	archsimd.ClearAVXUpperBits()
	copy(y[m:], ty[:n])
}

func scale256(x []float32, s float32) {
	t, n := tail8(x, 0) // scalar work first, see above
	m := len(x) - n
	sv := b8(s)
	for i := 0; i+8 <= m; i += 8 {
		archsimd.LoadFloat32x8Slice(x[i:]).Mul(sv).StoreSlice(x[i:])
	}
	if n > 0 {
		archsimd.LoadFloat32x8(&t).Mul(sv).Store(&t)
	}
	archsimd.ClearAVXUpperBits()
	copy(x[m:], t[:n])
}

func max256(x []float32) float32 {
	buf, n := tail8(x, float32(math.Inf(-1)))
	m := archsimd.LoadFloat32x8(&buf)
	for i := 0; i+8 <= len(x)-n; i += 8 {
		m = m.Max(archsimd.LoadFloat32x8Slice(x[i:]))
	}
	var t [8]float32
	m.Store(&t)
	archsimd.ClearAVXUpperBits()
	r := t[0]
	for _, v := range t[1:] {
		r = max(r, v)
	}
	return r
}

// exp8 is expf on 8 lanes; without VSCALEF, 2^n is built from exponent
// bits in two factors (2^128 is not a float32).
func exp8(x f8) f8 {
	xc := x.Max(b8(expMin)).Min(b8(expMax))
	n := xc.Mul(b8(log2e)).RoundToEven()
	r := n.MulAdd(b8(-ln2Hi), xc)
	r = n.MulAdd(b8(-ln2Lo), r)
	p := b8(expP0).MulAdd(r, b8(expP1))
	p = p.MulAdd(r, b8(expP2))
	p = p.MulAdd(r, b8(expP3))
	p = p.MulAdd(r, b8(expP4))
	p = p.MulAdd(r, b8(expP5))
	p = p.MulAdd(r.Mul(r), r).Add(b8(1))
	ni := n.ConvertToInt32()
	h := ni.ShiftAllRight(1)
	bias := archsimd.BroadcastInt32x8(127)
	e1 := h.Add(bias).ShiftAllLeft(23).AsFloat32x8()
	e2 := ni.Sub(h).Add(bias).ShiftAllLeft(23).AsFloat32x8()
	y := p.Mul(e1).Mul(e2)
	y = b8(float32(math.Inf(1))).Merge(y, x.Greater(b8(expMax)))
	return zero8(x.Less(b8(expMin)), y)
}

func expShift256(x []float32, shift, mul float32) float32 {
	buf, n := tail8(x, float32(math.Inf(-1))) // scalar work first, see above
	m := len(x) - n
	sh, mu := b8(shift), b8(mul)
	var sum f8
	for i := 0; i+8 <= m; i += 8 {
		e := exp8(archsimd.LoadFloat32x8Slice(x[i:]).Sub(sh).Mul(mu))
		e.StoreSlice(x[i:])
		sum = sum.Add(e)
	}
	if n > 0 {
		e := exp8(archsimd.LoadFloat32x8(&buf).Sub(sh).Mul(mu))
		e.Store(&buf)
		sum = sum.Add(e)
	}
	total := hsum8(sum) // clears the upper halves
	copy(x[m:], buf[:n])
	return total
}

// erfc8 and geluGrad8 serve the GELU loops' last vector: erfc8x2 and
// geluGrad8x2 with it twice.
func erfc8(z f8) f8 {
	y, _ := erfc8x2(z, z)
	return y
}

// exp8x2 and erfc8x2 are exp8 and erfc8 on two vectors at once, the same
// operations lane for lane: their polynomials are chains of dependent
// FMAs, and one vector at a time (a call each) left the FMA units idle
// for most of each chain's latency.
func exp8x2(x0, x1 f8) (f8, f8) {
	lo, hi := b8(expMin), b8(expMax)
	xc0, xc1 := x0.Max(lo).Min(hi), x1.Max(lo).Min(hi)
	l2e := b8(log2e)
	n0, n1 := xc0.Mul(l2e).RoundToEven(), xc1.Mul(l2e).RoundToEven()
	c := b8(-ln2Hi)
	r0, r1 := n0.MulAdd(c, xc0), n1.MulAdd(c, xc1)
	c = b8(-ln2Lo)
	r0, r1 = n0.MulAdd(c, r0), n1.MulAdd(c, r1)
	// Constants stay literal in b8 (a broadcast from memory): a float32
	// variable would be loaded with a legacy-SSE MOVSS (see zero16).
	p0, p1 := b8(expP0), b8(expP0)
	c = b8(expP1)
	p0, p1 = p0.MulAdd(r0, c), p1.MulAdd(r1, c)
	c = b8(expP2)
	p0, p1 = p0.MulAdd(r0, c), p1.MulAdd(r1, c)
	c = b8(expP3)
	p0, p1 = p0.MulAdd(r0, c), p1.MulAdd(r1, c)
	c = b8(expP4)
	p0, p1 = p0.MulAdd(r0, c), p1.MulAdd(r1, c)
	c = b8(expP5)
	p0, p1 = p0.MulAdd(r0, c), p1.MulAdd(r1, c)
	one := b8(1)
	p0, p1 = p0.MulAdd(r0.Mul(r0), r0).Add(one), p1.MulAdd(r1.Mul(r1), r1).Add(one)
	bias := archsimd.BroadcastInt32x8(127)
	ni0, ni1 := n0.ConvertToInt32(), n1.ConvertToInt32()
	h0, h1 := ni0.ShiftAllRight(1), ni1.ShiftAllRight(1)
	y0 := p0.Mul(h0.Add(bias).ShiftAllLeft(23).AsFloat32x8()).Mul(ni0.Sub(h0).Add(bias).ShiftAllLeft(23).AsFloat32x8())
	y1 := p1.Mul(h1.Add(bias).ShiftAllLeft(23).AsFloat32x8()).Mul(ni1.Sub(h1).Add(bias).ShiftAllLeft(23).AsFloat32x8())
	inf := b8(float32(math.Inf(1)))
	y0, y1 = inf.Merge(y0, x0.Greater(hi)), inf.Merge(y1, x1.Greater(hi))
	return zero8(x0.Less(lo), y0), zero8(x1.Less(lo), y1)
}

func erfc8x2(z0, z1 f8) (f8, f8) {
	m1, one := b8(-1), b8(1)
	a0, a1 := z0.Max(z0.Mul(m1)), z1.Max(z1.Mul(m1))
	half := b8(0.5)
	t0, t1 := one.Div(a0.MulAdd(half, one)), one.Div(a1.MulAdd(half, one))
	p0, p1 := b8(erfcC9), b8(erfcC9)
	p0, p1 = p0.MulAdd(t0, b8(erfcC8)), p1.MulAdd(t1, b8(erfcC8))
	p0, p1 = p0.MulAdd(t0, b8(erfcC7)), p1.MulAdd(t1, b8(erfcC7))
	p0, p1 = p0.MulAdd(t0, b8(erfcC6)), p1.MulAdd(t1, b8(erfcC6))
	p0, p1 = p0.MulAdd(t0, b8(erfcC5)), p1.MulAdd(t1, b8(erfcC5))
	p0, p1 = p0.MulAdd(t0, b8(erfcC4)), p1.MulAdd(t1, b8(erfcC4))
	p0, p1 = p0.MulAdd(t0, b8(erfcC3)), p1.MulAdd(t1, b8(erfcC3))
	p0, p1 = p0.MulAdd(t0, b8(erfcC2)), p1.MulAdd(t1, b8(erfcC2))
	p0, p1 = p0.MulAdd(t0, b8(erfcC1)), p1.MulAdd(t1, b8(erfcC1))
	p0, p1 = p0.MulAdd(t0, b8(erfcC0)), p1.MulAdd(t1, b8(erfcC0))
	e0, e1 := exp8x2(a0.Mul(a0).Mul(m1).Add(p0), a1.Mul(a1).Mul(m1).Add(p1))
	y0, y1 := t0.Mul(e0), t1.Mul(e1)
	two := b8(2)
	return two.Sub(y0).Merge(y0, z0.Less(a0)), two.Sub(y1).Merge(y1, z1.Less(a1))
}

func gelu256(out, in []float32) {
	in = in[:len(out)]
	t, n := tail8(in, 0) // scalar work first, see above
	m := len(out) - n
	i := 0
	for ; i+16 <= m; i += 16 {
		x0, x1 := archsimd.LoadFloat32x8Slice(in[i:]), archsimd.LoadFloat32x8Slice(in[i+8:])
		s := b8(-invSqrt2)
		e0, e1 := erfc8x2(x0.Mul(s), x1.Mul(s))
		x0.Mul(b8(0.5)).Mul(e0).StoreSlice(out[i:])
		x1.Mul(b8(0.5)).Mul(e1).StoreSlice(out[i+8:])
	}
	for ; i+8 <= m; i += 8 {
		x := archsimd.LoadFloat32x8Slice(in[i:])
		x.Mul(b8(0.5)).Mul(erfc8(x.Mul(b8(-invSqrt2)))).StoreSlice(out[i:])
	}
	if n > 0 {
		x := archsimd.LoadFloat32x8(&t)
		x.Mul(b8(0.5)).Mul(erfc8(x.Mul(b8(-invSqrt2)))).Store(&t)
	}
	archsimd.ClearAVXUpperBits()
	copy(out[m:], t[:n])
}

func geluGrad8(x f8) f8 {
	g, _ := geluGrad8x2(x, x)
	return g
}

// geluGrad8x2 is geluGrad8 on two vectors (see exp8x2).
func geluGrad8x2(x0, x1 f8) (f8, f8) {
	mh := b8(-0.5)
	q0, q1 := exp8x2(x0.Mul(x0).Mul(mh), x1.Mul(x1).Mul(mh))
	c := b8(invSqrt2Pi)
	phi0, phi1 := q0.Mul(c), q1.Mul(c)
	s := b8(-invSqrt2)
	e0, e1 := erfc8x2(x0.Mul(s), x1.Mul(s))
	half := b8(0.5)
	return e0.Mul(half).Add(x0.Mul(phi0)), e1.Mul(half).Add(x1.Mul(phi1))
}

func geluBackward256(dIn, dOut, in []float32) {
	dOut, in = dOut[:len(dIn)], in[:len(dIn)]
	t, n := tail8(in, 0) // scalar work first, see above
	g, _ := tail8(dOut, 0)
	m := len(dIn) - n
	i := 0
	for ; i+16 <= m; i += 16 {
		g0, g1 := geluGrad8x2(archsimd.LoadFloat32x8Slice(in[i:]), archsimd.LoadFloat32x8Slice(in[i+8:]))
		g0.Mul(archsimd.LoadFloat32x8Slice(dOut[i:])).StoreSlice(dIn[i:])
		g1.Mul(archsimd.LoadFloat32x8Slice(dOut[i+8:])).StoreSlice(dIn[i+8:])
	}
	for ; i+8 <= m; i += 8 {
		x := archsimd.LoadFloat32x8Slice(in[i:])
		geluGrad8(x).Mul(archsimd.LoadFloat32x8Slice(dOut[i:])).StoreSlice(dIn[i:])
	}
	if n > 0 {
		geluGrad8(archsimd.LoadFloat32x8(&t)).Mul(archsimd.LoadFloat32x8(&g)).Store(&t)
	}
	archsimd.ClearAVXUpperBits()
	copy(dIn[m:], t[:n])
}

// adamw512 and adamw256 are adamwGeneric on 16 and 8 lanes: the same
// float32 operations in the same order (no fused multiply-adds; a vector
// square root is correctly rounded, as float32(math.Sqrt(float64(x)))
// is), then adamwGeneric for the tail.
func adamw512(w, g, m, v []float32, s adamwStep) {
	n := len(w) &^ 15
	g, m, v = g[:len(w)], m[:len(w)], v[:len(w)]
	gs, b1, nb1, b2, nb2 := b16(s.gs), b16(s.b1), b16(1-s.b1), b16(s.b2), b16(1-s.b2)
	ibc, step, eps, dec := b16(s.invBC2), b16(s.stepSize), b16(s.eps), b16(s.decay)
	for i := 0; i < n; i += 16 {
		gi := archsimd.LoadFloat32x16Slice(g[i:]).Mul(gs)
		mi := b1.Mul(archsimd.LoadFloat32x16Slice(m[i:])).Add(nb1.Mul(gi))
		vi := b2.Mul(archsimd.LoadFloat32x16Slice(v[i:])).Add(nb2.Mul(gi).Mul(gi))
		mi.StoreSlice(m[i:])
		vi.StoreSlice(v[i:])
		wi := archsimd.LoadFloat32x16Slice(w[i:])
		upd := step.Mul(mi).Div(vi.Mul(ibc).Sqrt().Add(eps)).Add(dec.Mul(wi))
		wi.Sub(upd).StoreSlice(w[i:])
	}
	archsimd.ClearAVXUpperBits()
	adamwGeneric(w[n:], g[n:], m[n:], v[n:], s)
}

func adamw256(w, g, m, v []float32, s adamwStep) {
	n := len(w) &^ 7
	g, m, v = g[:len(w)], m[:len(w)], v[:len(w)]
	gs, b1, nb1, b2, nb2 := b8(s.gs), b8(s.b1), b8(1-s.b1), b8(s.b2), b8(1-s.b2)
	ibc, step, eps, dec := b8(s.invBC2), b8(s.stepSize), b8(s.eps), b8(s.decay)
	for i := 0; i < n; i += 8 {
		gi := archsimd.LoadFloat32x8Slice(g[i:]).Mul(gs)
		mi := b1.Mul(archsimd.LoadFloat32x8Slice(m[i:])).Add(nb1.Mul(gi))
		vi := b2.Mul(archsimd.LoadFloat32x8Slice(v[i:])).Add(nb2.Mul(gi).Mul(gi))
		mi.StoreSlice(m[i:])
		vi.StoreSlice(v[i:])
		wi := archsimd.LoadFloat32x8Slice(w[i:])
		upd := step.Mul(mi).Div(vi.Mul(ibc).Sqrt().Add(eps)).Add(dec.Mul(wi))
		wi.Sub(upd).StoreSlice(w[i:])
	}
	archsimd.ClearAVXUpperBits()
	adamwGeneric(w[n:], g[n:], m[n:], v[n:], s)
}

// --- LayerNorm rows (lnForwardGeneric, lnBackwardGeneric): the same
// arithmetic per element, the sums in vector lanes; a row's last
// len%width values go through the scalar path. ---

func lnForward512(out, x, gain, offset []float32) (float32, float32) {
	n := len(x)
	v := n / 16 * 16
	var s0 f16
	for i := 0; i < v; i += 16 {
		s0 = s0.Add(archsimd.LoadFloat32x16Slice(x[i:]))
	}
	s := hsum16(s0)
	for _, t := range x[v:] {
		s += t
	}
	mu := s / float32(n)
	m := b16(mu)
	var q0 f16
	for i := 0; i < v; i += 16 {
		c := archsimd.LoadFloat32x16Slice(x[i:]).Sub(m)
		q0 = c.MulAdd(c, q0)
	}
	vs := hsum16(q0)
	for _, t := range x[v:] {
		vs += (t - mu) * (t - mu)
	}
	r := lnRstd(vs, n)
	rv := b16(r)
	for i := 0; i < v; i += 16 {
		xh := archsimd.LoadFloat32x16Slice(x[i:]).Sub(m).Mul(rv)
		xh.MulAdd(archsimd.LoadFloat32x16Slice(gain[i:]), archsimd.LoadFloat32x16Slice(offset[i:])).StoreSlice(out[i:])
	}
	archsimd.ClearAVXUpperBits()
	for j := v; j < n; j++ {
		out[j] = (x[j]-mu)*r*gain[j] + offset[j]
	}
	return mu, r
}

func lnBackward512(dx, dGain, dOffset, dOut, x, gain []float32, mu, r float32) {
	n := len(dOut)
	v := n / 16 * 16
	m, rv := b16(mu), b16(r)
	var a1, a2 f16
	for i := 0; i < v; i += 16 {
		g := archsimd.LoadFloat32x16Slice(dOut[i:])
		xh := archsimd.LoadFloat32x16Slice(x[i:]).Sub(m).Mul(rv)
		g.MulAdd(xh, archsimd.LoadFloat32x16Slice(dGain[i:])).StoreSlice(dGain[i:])
		g.Add(archsimd.LoadFloat32x16Slice(dOffset[i:])).StoreSlice(dOffset[i:])
		dh := g.Mul(archsimd.LoadFloat32x16Slice(gain[i:]))
		a1 = a1.Add(dh)
		a2 = dh.MulAdd(xh, a2)
	}
	m1, m2 := hsum16(a1), hsum16(a2)
	for j := v; j < n; j++ {
		g, xh := dOut[j], (x[j]-mu)*r
		dGain[j] += g * xh
		dOffset[j] += g
		dh := g * gain[j]
		m1 += dh
		m2 += dh * xh
	}
	m1 /= float32(n)
	m2 /= float32(n)
	b1, b2 := b16(m1), b16(m2)
	for i := 0; i < v; i += 16 {
		xh := archsimd.LoadFloat32x16Slice(x[i:]).Sub(m).Mul(rv)
		dh := archsimd.LoadFloat32x16Slice(dOut[i:]).Mul(archsimd.LoadFloat32x16Slice(gain[i:]))
		t := dh.Sub(b1).Sub(xh.Mul(b2))
		t.MulAdd(rv, archsimd.LoadFloat32x16Slice(dx[i:])).StoreSlice(dx[i:])
	}
	archsimd.ClearAVXUpperBits()
	for j := v; j < n; j++ {
		xh := (x[j] - mu) * r
		dx[j] += r * (dOut[j]*gain[j] - m1 - xh*m2)
	}
}

func lnForward256(out, x, gain, offset []float32) (float32, float32) {
	n := len(x)
	v := n / 8 * 8
	var s0 f8
	for i := 0; i < v; i += 8 {
		s0 = s0.Add(archsimd.LoadFloat32x8Slice(x[i:]))
	}
	s := hsum8(s0)
	for _, t := range x[v:] {
		s += t
	}
	mu := s / float32(n)
	m := b8(mu)
	var q0 f8
	for i := 0; i < v; i += 8 {
		c := archsimd.LoadFloat32x8Slice(x[i:]).Sub(m)
		q0 = c.MulAdd(c, q0)
	}
	vs := hsum8(q0)
	for _, t := range x[v:] {
		vs += (t - mu) * (t - mu)
	}
	r := lnRstd(vs, n)
	rv := b8(r)
	for i := 0; i < v; i += 8 {
		xh := archsimd.LoadFloat32x8Slice(x[i:]).Sub(m).Mul(rv)
		xh.MulAdd(archsimd.LoadFloat32x8Slice(gain[i:]), archsimd.LoadFloat32x8Slice(offset[i:])).StoreSlice(out[i:])
	}
	archsimd.ClearAVXUpperBits()
	for j := v; j < n; j++ {
		out[j] = (x[j]-mu)*r*gain[j] + offset[j]
	}
	return mu, r
}

func lnBackward256(dx, dGain, dOffset, dOut, x, gain []float32, mu, r float32) {
	n := len(dOut)
	v := n / 8 * 8
	m, rv := b8(mu), b8(r)
	var a1, a2 f8
	for i := 0; i < v; i += 8 {
		g := archsimd.LoadFloat32x8Slice(dOut[i:])
		xh := archsimd.LoadFloat32x8Slice(x[i:]).Sub(m).Mul(rv)
		g.MulAdd(xh, archsimd.LoadFloat32x8Slice(dGain[i:])).StoreSlice(dGain[i:])
		g.Add(archsimd.LoadFloat32x8Slice(dOffset[i:])).StoreSlice(dOffset[i:])
		dh := g.Mul(archsimd.LoadFloat32x8Slice(gain[i:]))
		a1 = a1.Add(dh)
		a2 = dh.MulAdd(xh, a2)
	}
	m1, m2 := hsum8(a1), hsum8(a2)
	for j := v; j < n; j++ {
		g, xh := dOut[j], (x[j]-mu)*r
		dGain[j] += g * xh
		dOffset[j] += g
		dh := g * gain[j]
		m1 += dh
		m2 += dh * xh
	}
	m1 /= float32(n)
	m2 /= float32(n)
	b1, b2 := b8(m1), b8(m2)
	for i := 0; i < v; i += 8 {
		xh := archsimd.LoadFloat32x8Slice(x[i:]).Sub(m).Mul(rv)
		dh := archsimd.LoadFloat32x8Slice(dOut[i:]).Mul(archsimd.LoadFloat32x8Slice(gain[i:]))
		t := dh.Sub(b1).Sub(xh.Mul(b2))
		t.MulAdd(rv, archsimd.LoadFloat32x8Slice(dx[i:])).StoreSlice(dx[i:])
	}
	archsimd.ClearAVXUpperBits()
	for j := v; j < n; j++ {
		xh := (x[j] - mu) * r
		dx[j] += r * (dOut[j]*gain[j] - m1 - xh*m2)
	}
}

// rope512 and rope256 are ropeGeneric in vectors: the same products and
// sums (no fused multiply-add; the Go compiler fuses none at GOAMD64=v1,
// the default, and TestRopeKernels would see it if it did), so the same
// bits; with inverse, a·c - b·(-s) is a·c + b·s exactly.
func rope512(a, b, c, s []float32, inverse bool) {
	n := len(a)
	v := n / 16 * 16
	for i := 0; i < v; i += 16 {
		av, bv := archsimd.LoadFloat32x16Slice(a[i:]), archsimd.LoadFloat32x16Slice(b[i:])
		cv, sv := archsimd.LoadFloat32x16Slice(c[i:]), archsimd.LoadFloat32x16Slice(s[i:])
		if inverse {
			av.Mul(cv).Add(bv.Mul(sv)).StoreSlice(a[i:])
			bv.Mul(cv).Sub(av.Mul(sv)).StoreSlice(b[i:])
		} else {
			av.Mul(cv).Sub(bv.Mul(sv)).StoreSlice(a[i:])
			bv.Mul(cv).Add(av.Mul(sv)).StoreSlice(b[i:])
		}
	}
	archsimd.ClearAVXUpperBits()
	ropeGeneric(a[v:], b[v:n], c[v:n], s[v:n], inverse)
}

func rope256(a, b, c, s []float32, inverse bool) {
	n := len(a)
	v := n / 8 * 8
	for i := 0; i < v; i += 8 {
		av, bv := archsimd.LoadFloat32x8Slice(a[i:]), archsimd.LoadFloat32x8Slice(b[i:])
		cv, sv := archsimd.LoadFloat32x8Slice(c[i:]), archsimd.LoadFloat32x8Slice(s[i:])
		if inverse {
			av.Mul(cv).Add(bv.Mul(sv)).StoreSlice(a[i:])
			bv.Mul(cv).Sub(av.Mul(sv)).StoreSlice(b[i:])
		} else {
			av.Mul(cv).Sub(bv.Mul(sv)).StoreSlice(a[i:])
			bv.Mul(cv).Add(av.Mul(sv)).StoreSlice(b[i:])
		}
	}
	archsimd.ClearAVXUpperBits()
	ropeGeneric(a[v:], b[v:n], c[v:n], s[v:n], inverse)
}

// softmaxGrad512 and softmaxGrad256 are softmaxGradGeneric in vectors,
// the same operations in the same order (the same bits).
func softmaxGrad512(d, p []float32, delta, scale float32) {
	n := len(p)
	v := n / 16 * 16
	dv, sv := b16(delta), b16(scale)
	for i := 0; i < v; i += 16 {
		pv := archsimd.LoadFloat32x16Slice(p[i:])
		pv.Mul(archsimd.LoadFloat32x16Slice(d[i:]).Sub(dv)).Mul(sv).StoreSlice(d[i:])
	}
	archsimd.ClearAVXUpperBits()
	softmaxGradGeneric(d[v:n], p[v:], delta, scale)
}

func softmaxGrad256(d, p []float32, delta, scale float32) {
	n := len(p)
	v := n / 8 * 8
	dv, sv := b8(delta), b8(scale)
	for i := 0; i < v; i += 8 {
		pv := archsimd.LoadFloat32x8Slice(p[i:])
		pv.Mul(archsimd.LoadFloat32x8Slice(d[i:]).Sub(dv)).Mul(sv).StoreSlice(d[i:])
	}
	archsimd.ClearAVXUpperBits()
	softmaxGradGeneric(d[v:n], p[v:], delta, scale)
}

// --- RMSNorm rows (rmsForwardGeneric, rmsBackwardGeneric): the sums in
// vector lanes, a row's last len%width values through the scalar path,
// as the LayerNorm kernels do. ---

func rmsForward512(out, x, gain []float32, eps float64) float32 {
	n := len(x)
	v := n / 16 * 16
	var s0 f16
	for i := 0; i < v; i += 16 {
		c := archsimd.LoadFloat32x16Slice(x[i:])
		s0 = c.MulAdd(c, s0)
	}
	ss := hsum16(s0)
	for _, t := range x[v:] {
		ss += t * t
	}
	r := rmsRstd(ss, n, eps)
	rv := b16(r)
	for i := 0; i < v; i += 16 {
		archsimd.LoadFloat32x16Slice(x[i:]).Mul(rv).Mul(archsimd.LoadFloat32x16Slice(gain[i:])).StoreSlice(out[i:])
	}
	archsimd.ClearAVXUpperBits()
	for j := v; j < n; j++ {
		out[j] = x[j] * r * gain[j]
	}
	return r
}

func rmsBackward512(dx, dGain, dOut, x, gain []float32, r float32) {
	n := len(dOut)
	v := n / 16 * 16
	rv := b16(r)
	var a2 f16
	for i := 0; i < v; i += 16 {
		g := archsimd.LoadFloat32x16Slice(dOut[i:])
		xh := archsimd.LoadFloat32x16Slice(x[i:]).Mul(rv)
		g.MulAdd(xh, archsimd.LoadFloat32x16Slice(dGain[i:])).StoreSlice(dGain[i:])
		a2 = g.Mul(archsimd.LoadFloat32x16Slice(gain[i:])).MulAdd(xh, a2)
	}
	m2 := hsum16(a2)
	for j := v; j < n; j++ {
		g, xh := dOut[j], x[j]*r
		dGain[j] += g * xh
		m2 += g * gain[j] * xh
	}
	m2 /= float32(n)
	b2 := b16(m2)
	for i := 0; i < v; i += 16 {
		xh := archsimd.LoadFloat32x16Slice(x[i:]).Mul(rv)
		dh := archsimd.LoadFloat32x16Slice(dOut[i:]).Mul(archsimd.LoadFloat32x16Slice(gain[i:]))
		dh.Sub(xh.Mul(b2)).MulAdd(rv, archsimd.LoadFloat32x16Slice(dx[i:])).StoreSlice(dx[i:])
	}
	archsimd.ClearAVXUpperBits()
	for j := v; j < n; j++ {
		dx[j] += r * (dOut[j]*gain[j] - x[j]*r*m2)
	}
}

func rmsForward256(out, x, gain []float32, eps float64) float32 {
	n := len(x)
	v := n / 8 * 8
	var s0 f8
	for i := 0; i < v; i += 8 {
		c := archsimd.LoadFloat32x8Slice(x[i:])
		s0 = c.MulAdd(c, s0)
	}
	ss := hsum8(s0)
	for _, t := range x[v:] {
		ss += t * t
	}
	r := rmsRstd(ss, n, eps)
	rv := b8(r)
	for i := 0; i < v; i += 8 {
		archsimd.LoadFloat32x8Slice(x[i:]).Mul(rv).Mul(archsimd.LoadFloat32x8Slice(gain[i:])).StoreSlice(out[i:])
	}
	archsimd.ClearAVXUpperBits()
	for j := v; j < n; j++ {
		out[j] = x[j] * r * gain[j]
	}
	return r
}

func rmsBackward256(dx, dGain, dOut, x, gain []float32, r float32) {
	n := len(dOut)
	v := n / 8 * 8
	rv := b8(r)
	var a2 f8
	for i := 0; i < v; i += 8 {
		g := archsimd.LoadFloat32x8Slice(dOut[i:])
		xh := archsimd.LoadFloat32x8Slice(x[i:]).Mul(rv)
		g.MulAdd(xh, archsimd.LoadFloat32x8Slice(dGain[i:])).StoreSlice(dGain[i:])
		a2 = g.Mul(archsimd.LoadFloat32x8Slice(gain[i:])).MulAdd(xh, a2)
	}
	m2 := hsum8(a2)
	for j := v; j < n; j++ {
		g, xh := dOut[j], x[j]*r
		dGain[j] += g * xh
		m2 += g * gain[j] * xh
	}
	m2 /= float32(n)
	b2 := b8(m2)
	for i := 0; i < v; i += 8 {
		xh := archsimd.LoadFloat32x8Slice(x[i:]).Mul(rv)
		dh := archsimd.LoadFloat32x8Slice(dOut[i:]).Mul(archsimd.LoadFloat32x8Slice(gain[i:]))
		dh.Sub(xh.Mul(b2)).MulAdd(rv, archsimd.LoadFloat32x8Slice(dx[i:])).StoreSlice(dx[i:])
	}
	archsimd.ClearAVXUpperBits()
	for j := v; j < n; j++ {
		dx[j] += r * (dOut[j]*gain[j] - x[j]*r*m2)
	}
}

// --- SwiGLU (swigluGeneric, swigluBackwardGeneric) with the vector exp:
// s = 1/(1+exp(-g)). ---

func sigmoid16(g f16) f16 { return b16(1).Div(b16(1).Add(exp16(g.Mul(b16(-1))))) }

func sigmoid8(g f8) f8 { return b8(1).Div(b8(1).Add(exp8(g.Mul(b8(-1))))) }

func swiglu512(out, gate, up []float32) {
	gate, up = gate[:len(out)], up[:len(out)]
	i := 0
	for ; i+16 <= len(out); i += 16 {
		g := archsimd.LoadFloat32x16Slice(gate[i:])
		g.Mul(sigmoid16(g)).Mul(archsimd.LoadFloat32x16Slice(up[i:])).StoreSlice(out[i:])
	}
	if i < len(out) {
		g := archsimd.LoadFloat32x16SlicePart(gate[i:])
		g.Mul(sigmoid16(g)).Mul(archsimd.LoadFloat32x16SlicePart(up[i:])).StoreSlicePart(out[i:])
	}
	archsimd.ClearAVXUpperBits()
}

// swigluGrad16 returns dGate and dUp for one vector.
func swigluGrad16(d, g, u f16) (dg, du f16) {
	s := sigmoid16(g)
	one := b16(1)
	du = d.Mul(g.Mul(s))
	dg = d.Mul(u).Mul(s).Mul(g.Mul(one.Sub(s)).Add(one))
	return dg, du
}

func swigluBackward512(dGate, dUp, dOut, gate, up []float32) {
	n := len(dOut)
	dGate, dUp, gate, up = dGate[:n], dUp[:n], gate[:n], up[:n]
	i := 0
	for ; i+16 <= n; i += 16 {
		dg, du := swigluGrad16(archsimd.LoadFloat32x16Slice(dOut[i:]), archsimd.LoadFloat32x16Slice(gate[i:]), archsimd.LoadFloat32x16Slice(up[i:]))
		dg.StoreSlice(dGate[i:])
		du.StoreSlice(dUp[i:])
	}
	if i < n {
		dg, du := swigluGrad16(archsimd.LoadFloat32x16SlicePart(dOut[i:]), archsimd.LoadFloat32x16SlicePart(gate[i:]), archsimd.LoadFloat32x16SlicePart(up[i:]))
		dg.StoreSlicePart(dGate[i:])
		du.StoreSlicePart(dUp[i:])
	}
	archsimd.ClearAVXUpperBits()
}

func swiglu256(out, gate, up []float32) {
	gate, up = gate[:len(out)], up[:len(out)]
	tg, n := tail8(gate, 0) // scalar work first, see above
	tu, _ := tail8(up, 0)
	m := len(out) - n
	for i := 0; i+8 <= m; i += 8 {
		g := archsimd.LoadFloat32x8Slice(gate[i:])
		g.Mul(sigmoid8(g)).Mul(archsimd.LoadFloat32x8Slice(up[i:])).StoreSlice(out[i:])
	}
	if n > 0 {
		g := archsimd.LoadFloat32x8(&tg)
		g.Mul(sigmoid8(g)).Mul(archsimd.LoadFloat32x8(&tu)).Store(&tg)
	}
	archsimd.ClearAVXUpperBits()
	copy(out[m:], tg[:n])
}

func swigluGrad8(d, g, u f8) (dg, du f8) {
	s := sigmoid8(g)
	one := b8(1)
	du = d.Mul(g.Mul(s))
	dg = d.Mul(u).Mul(s).Mul(g.Mul(one.Sub(s)).Add(one))
	return dg, du
}

func swigluBackward256(dGate, dUp, dOut, gate, up []float32) {
	n := len(dOut)
	dGate, dUp, gate, up = dGate[:n], dUp[:n], gate[:n], up[:n]
	td, nt := tail8(dOut, 0) // scalar work first, see above
	tg, _ := tail8(gate, 0)
	tu, _ := tail8(up, 0)
	m := n - nt
	for i := 0; i+8 <= m; i += 8 {
		dg, du := swigluGrad8(archsimd.LoadFloat32x8Slice(dOut[i:]), archsimd.LoadFloat32x8Slice(gate[i:]), archsimd.LoadFloat32x8Slice(up[i:]))
		dg.StoreSlice(dGate[i:])
		du.StoreSlice(dUp[i:])
	}
	if nt > 0 {
		dg, du := swigluGrad8(archsimd.LoadFloat32x8(&td), archsimd.LoadFloat32x8(&tg), archsimd.LoadFloat32x8(&tu))
		dg.Store(&tg)
		du.Store(&tu)
	}
	archsimd.ClearAVXUpperBits()
	copy(dGate[m:], tg[:nt])
	copy(dUp[m:], tu[:nt])
}
