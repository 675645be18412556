//go:build goexperiment.simd && amd64

package native

import "math"

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
}

//go:noescape
func qgemv4Q4avx512(a *qgemvArgs)

//go:noescape
func qgemv4Q8avx512(a *qgemvArgs)

//go:noescape
func qgemv4Q4avx2(a *qgemvArgs)

//go:noescape
func qgemv4Q8avx2(a *qgemvArgs)

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
	quads := n / 4
	for r := range rows {
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
