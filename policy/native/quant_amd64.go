//go:build goexperiment.simd && amd64

package native

import (
	"math"
	"unsafe"
)

// The vector kernels of products with quantized blocks (quant_amd64.s).

// qgemvArgs are the kernels' arguments, read through one pointer (the
// kernels need every register they have); the offsets are
// quant_amd64.s's A_* constants.
type qgemvArgs struct {
	x, sx    *float32 // the input row; its block sums (Q4_1), groups zero-padded
	rows     *byte    // the first row's record
	rowBytes int      // a record's size (0: every row of the quad is the first)
	nb16     int      // 16 x blocks per row: the main loop's end
	dOff     int      // the scales' offset in a record
	mOff     int      // Q4_1's m offset, 0 for the other formats
	ngb      int      // groups of scales x the group's bytes of sx: the prologue's end
	quads    int      // quads of rows
	dbuf     *float32 // 4 x (groups x group size) converted scales
	table    *float32 // AVX-512: Q4's 16 values; AVX2: Q4_0's offset, else nil
	mask     *float32 // the last group's m lanes (all ones when whole)
	y        *float32 // the outputs of the first quad
	acc      int      // add to y
	// The R-row kernels': the interleaved inputs' bytes per block and
	// block sums' per group.
	xStride, sxStride int
}

//go:noescape
func qgemv4Q4avx512(a *qgemvArgs)

//go:noescape
func qgemv4Q8avx512(a *qgemvArgs)

//go:noescape
func qgemv4Q4avx2(a *qgemvArgs)

//go:noescape
func qgemv4Q8avx2(a *qgemvArgs)

//go:noescape
func qgemvR8Q4avx512(a *qgemvArgs)

//go:noescape
func qgemvR4Q4avx512(a *qgemvArgs)

//go:noescape
func qgemvR2Q4avx512(a *qgemvArgs)

//go:noescape
func qgemvR8Q8avx512(a *qgemvArgs)

//go:noescape
func qgemvR4Q8avx512(a *qgemvArgs)

//go:noescape
func qgemvR2Q8avx512(a *qgemvArgs)

//go:noescape
func qgemvR4Q4avx2(a *qgemvArgs)

//go:noescape
func qgemvR2Q4avx2(a *qgemvArgs)

//go:noescape
func qgemvR4Q8avx2(a *qgemvArgs)

//go:noescape
func qgemvR2Q8avx2(a *qgemvArgs)

// qRowKernels are the R-row kernels of each tier, most rows first, by
// format family (Q4, Q8).
var qRowKernels = map[int][]struct {
	rows   int
	q4, q8 func(*qgemvArgs)
}{
	16: {{8, qgemvR8Q4avx512, qgemvR8Q8avx512}, {4, qgemvR4Q4avx512, qgemvR4Q8avx512}, {2, qgemvR2Q4avx512, qgemvR2Q8avx512}},
	8:  {{4, qgemvR4Q4avx2, qgemvR4Q8avx2}, {2, qgemvR2Q4avx2, qgemvR2Q8avx2}},
}

// q4Tables are Q4_1's and Q4_0's nibble values as floats (VPERMPS's
// table); q4Offset is Q4_0's 8.0 for the AVX2 kernel.
var (
	q41Table = [16]float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	q40Table = [16]float32{-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7}
	q4Offset = float32(8)
)

// qgemv512 is kernels.qgemv on AVX-512, qgemv256 on AVX2.
func qgemv512(ws *workspace, q *qmat, j0, n int, x []float32, ldx, rows int, sx []float32, y []float32, ldy int, acc bool) {
	qgemvVec(ws, q, j0, n, x, ldx, rows, sx, y, ldy, acc, 16)
}

func qgemv256(ws *workspace, q *qmat, j0, n int, x []float32, ldx, rows int, sx []float32, y []float32, ldy int, acc bool) {
	qgemvVec(ws, q, j0, n, x, ldx, rows, sx, y, ldy, acc, 8)
}

// qgemvVec runs the quad kernels of width lanes (16: AVX-512, 8: AVX2)
// over rows [j0, j0+n) for each input row; the last n%4 rows one at a
// time, as a quad of four times the same row (rowBytes 0), whose first
// output is that row's alone.
func qgemvVec(ws *workspace, q *qmat, j0, n int, x []float32, ldx, rows int, sx []float32, y []float32, ldy int, acc bool, lanes int) {
	if n <= 0 || rows <= 0 {
		return
	}
	nb := q.nb
	groups := (nb + lanes - 1) / lanes
	if len(q.data) < (j0+n)*q.rowBytes+qmatPad || len(x) < (rows-1)*ldx+q.cols || len(y) < (rows-1)*ldy+n {
		panic("native: quantized gemv out of range")
	}
	sxStride := qsxStride(nb)
	if q.typ == qQ4_1 && len(sx) < (rows-1)*sxStride+groups*lanes {
		panic("native: quantized gemv: block sums out of range")
	}
	// Scratch: dbuf (4 rows x groups x lanes), the mask, a tail quad's
	// outputs.
	need := 4*groups*lanes + 16 + 4
	ws.qscratch = grow(ws.qscratch, need)
	s := ws.qscratch
	dbuf, mask, tail := s[:4*groups*lanes], s[4*groups*lanes:4*groups*lanes+16], s[4*groups*lanes+16:need]
	rem := nb % lanes
	for i := range mask[:lanes] {
		mask[i] = 0
		if rem == 0 || i < rem {
			mask[i] = math.Float32frombits(0xffffffff)
		}
	}
	a := qgemvArgs{nb16: 16 * nb, dOff: nb * q.typ.qsBytes(), ngb: groups * lanes * 4, dbuf: &dbuf[0], mask: &mask[0]}
	if q.typ == qQ4_1 {
		a.mOff = a.dOff + 2*nb
	}
	kernel := qgemv4Q8avx512
	switch {
	case lanes == 16 && q.typ == qQ4_1:
		kernel, a.table = qgemv4Q4avx512, &q41Table[0]
	case lanes == 16 && q.typ == qQ4_0:
		kernel, a.table = qgemv4Q4avx512, &q40Table[0]
	case lanes == 8 && q.typ == qQ4_1:
		kernel = qgemv4Q4avx2
	case lanes == 8 && q.typ == qQ4_0:
		kernel, a.table = qgemv4Q4avx2, &q4Offset
	case lanes == 8:
		kernel = qgemv4Q8avx2
	}
	r := 0
	for _, rk := range qRowKernels[lanes] {
		for rows-r >= rk.rows {
			kernel := rk.q8
			if q.typ != qQ8_0 {
				kernel = rk.q4
			}
			qgemvRowsVec(ws, q, j0, n, x[r*ldx:], ldx, rk.rows, sx, r, y[r*ldy:], ldy, acc, lanes, a, kernel)
			r += rk.rows
		}
	}
	if r == rows {
		return
	}
	// One input row left: the quads.
	quads := n / 4
	for ; r < rows; r++ {
		a.x = &x[r*ldx]
		if q.typ == qQ4_1 {
			a.sx = &sx[r*sxStride]
		}
		if quads > 0 {
			a.rows, a.rowBytes, a.quads, a.y = &q.data[j0*q.rowBytes], q.rowBytes, quads, &y[r*ldy]
			a.acc = 0
			if acc {
				a.acc = 1
			}
			kernel(&a)
		}
		for j := 4 * quads; j < n; j++ {
			a.rows, a.rowBytes, a.quads, a.y, a.acc = &q.data[(j0+j)*q.rowBytes], 0, 1, &tail[0], 0
			kernel(&a)
			v := tail[0]
			if acc {
				v += y[r*ldy+j]
			}
			y[r*ldy+j] = v
		}
	}
}

// qgemvRowsVec runs an R-row kernel (R = rr input rows, from x with
// stride ldx; their block sums at row r0 of sx) over rows [j0, j0+n):
// the inputs interleaved block by block into ws.qx (the kernel reads
// block b of row r at (b·R + r)·32), the outputs from ws.qy ([row][R])
// into y (stride ldy), added to it when acc.
func qgemvRowsVec(ws *workspace, q *qmat, j0, n int, x []float32, ldx, rr int, sx []float32, r0 int, y []float32, ldy int, acc bool, lanes int, a qgemvArgs, kernel func(*qgemvArgs)) {
	nb := q.nb
	groups := (nb + lanes - 1) / lanes
	ws.qx = grow(ws.qx, nb*rr*QuantBlock+groups*rr*lanes+n*rr+4*groups*lanes)
	xs := ws.qx[:nb*rr*QuantBlock]
	rest := ws.qx[nb*rr*QuantBlock:]
	sxs, ys, dbuf := rest[:groups*rr*lanes], rest[groups*rr*lanes:groups*rr*lanes+n*rr], rest[groups*rr*lanes+n*rr:]
	for r := range rr {
		xr := x[r*ldx : r*ldx+q.cols]
		for b := range nb {
			copy(xs[(b*rr+r)*QuantBlock:(b*rr+r+1)*QuantBlock], xr[b*QuantBlock:])
		}
	}
	a.x, a.xStride = &xs[0], rr*QuantBlock*4
	if q.typ == qQ4_1 {
		st := qsxStride(nb)
		for r := range rr {
			for g := range groups {
				copy(sxs[(g*rr+r)*lanes:(g*rr+r+1)*lanes], sx[(r0+r)*st+g*lanes:])
			}
		}
		a.sx, a.sxStride = &sxs[0], rr*lanes*4
	}
	a.rows, a.rowBytes, a.quads, a.y, a.dbuf, a.acc = &q.data[j0*q.rowBytes], q.rowBytes, n, &ys[0], &dbuf[0], 0
	kernel(&a)
	for r := range rr {
		for j := range n {
			v := ys[j*rr+r]
			if acc {
				v += y[r*ldy+j]
			}
			y[r*ldy+j] = v
		}
	}
}

//go:noescape
func qdequant512(qs *byte, d, m *uint16, nb int, table, dst *float32, q8 bool)

// qdequant512Row is kernels.qdequant on AVX-512.
func qdequant512Row(q *qmat, dst []float32, j, b0, b1 int) {
	if b1 <= b0 {
		return
	}
	qs, d, m := q.rowParts(j)
	dst = dst[:(b1-b0)*QuantBlock]
	var mp *uint16
	if m != nil {
		mp = (*uint16)(unsafe.Pointer(&m[2*b0]))
	}
	table := &q41Table[0]
	if q.typ == qQ4_0 {
		table = &q40Table[0]
	}
	qdequant512(&qs[b0*q.typ.qsBytes()], (*uint16)(unsafe.Pointer(&d[2*b0])), mp, b1-b0, table, &dst[0], q.typ == qQ8_0)
}

// qtranspose512 is kernels.qtranspose: transpose16 on float32's bits.
func qtranspose512(dst, src []float32, rows, cols int) {
	u := func(f []float32) []uint32 { return unsafe.Slice((*uint32)(unsafe.Pointer(&f[0])), len(f)) }
	transpose16(u(dst), rows, u(src), cols, rows, cols)
}

// q8Args are the int8 kernels' arguments (quant_amd64.s's B_* offsets).
type q8Args struct {
	x        *byte    // the row's packed input (prep8)
	dx, sxq  *float32 // its blocks' dx and dx·Σq, padded
	rows     *byte
	rowBytes int
	nb       int
	dOff     int
	mOff     int
	quads    int
	idx      *int32
	mask     *float32
	y        *float32
	acc      int
}

//go:noescape
func qgemv4Q4vnni(a *q8Args)

//go:noescape
func qgemv4Q8vnni(a *q8Args)

// q8Idx4 are the Q4 kernel's VPERMPS indices: for sub-group u of a group
// of 16 blocks, each of its 4 blocks' d·dx spread over 4 lanes; q8Idx8
// the Q8 kernel's, two vectors per sub-group, 8 lanes per block.
var q8Idx4, q8Idx8 = func() (a [4][16]int32, b [4][2][16]int32) {
	for u := range 4 {
		for l := range 16 {
			a[u][l] = int32(4*u + l/4)
			b[u][0][l] = int32(4*u + l/8)
			b[u][1][l] = int32(4*u + 2 + l/8)
		}
	}
	return
}()

// prep8AVX512 is kernels.qprep8 for the VNNI kernels: each row's blocks
// in sub-groups of 4 (quant_amd64.s's layout), its dx and dx·Σq padded.
func prep8AVX512(in *q8Input, typ quantType) {
	nb := in.nb
	subs := (nb + 3) / 4
	per := 192 // Q4: values 0-15, values 16-31, corrections
	if typ == qQ8_0 {
		per = 256 // the values, two vectors of corrections
	}
	in.typ, in.packStride, in.padStride = typ, subs*per, qsxStride(nb)
	if cap(in.pack) < in.rows*in.packStride {
		in.pack = make([]byte, in.rows*in.packStride)
	}
	in.pack = in.pack[:in.rows*in.packStride]
	clear(in.pack)
	in.dxp, in.sxqp = grow(in.dxp, in.rows*in.padStride), grow(in.sxqp, in.rows*in.padStride)
	clear(in.dxp)
	clear(in.sxqp)
	put32 := func(b []byte, v int32) { b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24) }
	qb := unsafe.Slice((*byte)(unsafe.Pointer(&in.q[0])), len(in.q))
	for r := range in.rows {
		pk := in.pack[r*in.packStride : (r+1)*in.packStride]
		copy(in.dxp[r*in.padStride:], in.dx[r*nb:(r+1)*nb])
		copy(in.sxqp[r*in.padStride:], in.sxq[r*nb:(r+1)*nb])
		for b := range nb {
			s, j := b/4, b%4
			q := qb[(r*nb+b)*QuantBlock : (r*nb+b+1)*QuantBlock]
			sum := in.sum[r*nb+b]
			sg := pk[s*per : (s+1)*per]
			if typ == qQ8_0 {
				copy(sg[32*j:32*j+32], q)
				put32(sg[128+64*(j/2)+32*(j%2):], -128*sum)
				continue
			}
			copy(sg[16*j:16*j+16], q[:16])
			copy(sg[64+16*j:64+16*j+16], q[16:])
			if typ == qQ4_0 {
				put32(sg[128+16*j:], -8*sum)
			}
		}
	}
}

// qgemv8vnni is kernels.qgemv8 on AVX512_VNNI: the quad kernels for each
// input row (prep8AVX512's layout); the last n%4 rows as quads of one
// row repeated, as qgemvVec does.
func qgemv8vnni(ws *workspace, q *qmat, j0, n int, in *q8Input, y []float32, ldy int, acc bool) {
	if n <= 0 || in.rows <= 0 {
		return
	}
	if in.typ != q.typ || in.nb != q.nb || len(q.data) < (j0+n)*q.rowBytes+qmatPad || len(y) < (in.rows-1)*ldy+n {
		panic("native: int8 gemv out of range (input not laid out for this matrix)")
	}
	ws.qscratch = grow(ws.qscratch, 16+4)
	mask, tail := ws.qscratch[:16], ws.qscratch[16:20]
	rem := q.nb % 16
	for i := range mask {
		mask[i] = 0
		if rem == 0 || i < rem {
			mask[i] = math.Float32frombits(0xffffffff)
		}
	}
	a := q8Args{nb: q.nb, dOff: q.nb * q.typ.qsBytes(), mask: &mask[0]}
	kernel := qgemv4Q8vnni
	a.idx = &q8Idx8[0][0][0]
	if q.typ != qQ8_0 {
		kernel, a.idx = qgemv4Q4vnni, &q8Idx4[0][0]
	}
	if q.typ == qQ4_1 {
		a.mOff = a.dOff + 2*q.nb
	}
	quads := n / 4
	for r := range in.rows {
		a.x, a.dx, a.sxq = &in.pack[r*in.packStride], &in.dxp[r*in.padStride], &in.sxqp[r*in.padStride]
		if quads > 0 {
			a.rows, a.rowBytes, a.quads, a.y, a.acc = &q.data[j0*q.rowBytes], q.rowBytes, quads, &y[r*ldy], 0
			if acc {
				a.acc = 1
			}
			kernel(&a)
		}
		for j := 4 * quads; j < n; j++ {
			a.rows, a.rowBytes, a.quads, a.y, a.acc = &q.data[(j0+j)*q.rowBytes], 0, 1, &tail[0], 0
			kernel(&a)
			v := tail[0]
			if acc {
				v += y[r*ldy+j]
			}
			y[r*ldy+j] = v
		}
	}
}

//go:noescape
func quant8Row512(x *float32, nb int, q *int8, dx, sxq *float32, sum *int32)

// quant8AVX512 is kernels.quant8 on AVX-512.
func quant8AVX512(x []float32, q []int8, dx, sxq []float32, sum []int32) {
	nb := len(x) / QuantBlock
	if nb == 0 {
		return
	}
	if len(q) < nb*QuantBlock || len(dx) < nb || len(sxq) < nb || len(sum) < nb {
		panic("native: quant8 out of range")
	}
	quant8Row512(&x[0], nb, &q[0], &dx[0], &sxq[0], &sum[0])
}
