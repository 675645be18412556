package native

import (
	"fmt"

	"github.com/mlerl/mlerl/policy/ggml"
)

// Products with a B in quantized blocks (gemmOp.bq; quant.go).

// gemmQuant runs op, whose B is op.bq: a product of at most gemmSmallM
// rows that reads the blocks' rows as B's columns (decoding) multiplies
// by the blocks (kernels.qgemv); any other dequantizes B a block of
// columns at a time into the panels the micro-kernels read
// (gemmQuantPanels).
func gemmQuant(p *pool, op gemmOp) {
	q := op.bq
	rows, cols := op.k, op.n
	if op.tb {
		rows, cols = op.n, op.k
	}
	if q.rows != rows || q.cols != cols {
		panic(fmt.Sprintf("native: quantized B of %d x %d in a product of k %d, n %d (tb %v)", q.rows, q.cols, op.k, op.n, op.tb))
	}
	if op.m <= gemmSmallM && op.tb && !op.ta {
		gemvQuant(p, op)
		return
	}
	gemmQuantPanels(p, op)
}

// qgemvRows is how many of a quantized matrix's rows (the outputs) one
// task of gemvQuant computes: a task's share of the weights is a few
// tens of KB.
const qgemvRows = 64

// gemvQuant computes op's few rows (decoding) from the blocks, its
// outputs split over the workers in tasks of qgemvRows; each output is
// computed the same way whatever the split.
func gemvQuant(p *pool, op gemmOp) {
	op = op.biasFirst()
	q := op.bq
	if q.typ.raw() != nil {
		gemvRaw(p, op)
		return
	}
	if op.q8 {
		p.gemmMu.Lock()
		defer p.gemmMu.Unlock()
		quantizeInput8(&p.q8, op.a, op.lda, op.m, q.nb)
		in := &p.q8
		if kern.qprep8 != nil {
			kern.qprep8(in, q.typ)
		}
		p.runWork((op.n+qgemvRows-1)/qgemvRows, max(op.m, 8)*op.n*op.k, func(w, t int) {
			j0 := t * qgemvRows
			kern.qgemv8(&p.ws[w], q, j0, min(qgemvRows, op.n-j0), in, op.c[j0:], op.ldc, op.acc)
		})
		return
	}
	var sx []float32
	if q.typ == qQ4_1 {
		p.gemmMu.Lock()
		defer p.gemmMu.Unlock()
		st := qsxStride(q.nb)
		p.qsx = grow(p.qsx, op.m*st)
		for r := range op.m {
			qBlockSums(p.qsx[r*st:(r+1)*st], op.a[r*op.lda:r*op.lda+q.cols])
		}
		sx = p.qsx
	}
	work := max(op.m, 8) * op.n * op.k
	p.runWork((op.n+qgemvRows-1)/qgemvRows, work, func(w, t int) {
		j0 := t * qgemvRows
		n := min(qgemvRows, op.n-j0)
		kern.qgemv(&p.ws[w], q, j0, n, op.a, op.lda, op.m, sx, op.c[j0:], op.ldc, op.acc)
	})
}

// gemvRaw is gemvQuant for a matrix in a raw format (Q5_1, the
// K-quants, IQ4_XS), which has no kernels of its own: qgemvRaw on tasks
// of qgemvRows outputs. With int8 activations (op.q8), a format that has
// ggml's int8 dot product on this CPU (Format.DotQ8: Q4_K, Q5_K, Q6_K)
// takes it, the input rows quantized once per product to int8 per block
// of 256 (ggml.Q8K, llama.cpp's Q8_K); the others keep float32 inputs.
func gemvRaw(p *pool, op gemmOp) {
	q := op.bq
	if f := q.typ.raw(); op.q8 && f.HasDotQ8() && fusedRawDot {
		p.gemmMu.Lock()
		defer p.gemmMu.Unlock()
		if len(p.q8k) < op.m {
			p.q8k = append(p.q8k, make([]ggml.Q8K, op.m-len(p.q8k))...)
		}
		for r := range op.m {
			p.q8k[r].Quantize(op.a[r*op.lda : r*op.lda+q.cols])
		}
		p.runWork((op.n+qgemvRows-1)/qgemvRows, max(op.m, 8)*op.n*op.k, func(w, t int) {
			j0 := t * qgemvRows
			qgemvRawQ8(&p.ws[w], q, f, j0, min(qgemvRows, op.n-j0), p.q8k[:op.m], op.c[j0:], op.ldc, op.acc)
		})
		return
	}
	p.runWork((op.n+qgemvRows-1)/qgemvRows, max(op.m, 8)*op.n*op.k, func(w, t int) {
		j0 := t * qgemvRows
		qgemvRaw(&p.ws[w], q, j0, min(qgemvRows, op.n-j0), op.a, op.lda, op.m, op.c[j0:], op.ldc, op.acc)
	})
}

// qgemvRaw is kernels.qgemv's job for a raw format: y[r*ldy + j] = x_r ·
// (row j0+j of q) for j < n and r < rows (+ y when acc), each row
// dequantized once (ggml's values, as a float32 base holds them) into
// ws.qrow, then its dot product with every input row (kernels.dot).
// A format that has a fused dot product on this CPU (ggml's Format.Dot:
// the K-quants, IQ4_XS) takes it instead, which never writes the
// row's values: with one input row (decoding one sequence), and with
// more where it also has the two-row form (Format.Dot2, on AVX-512:
// evaluation decodes a task's episodes in lockstep), input rows in
// pairs. The same sums to within float32 rounding.
func qgemvRaw(ws *workspace, q *qmat, j0, n int, x []float32, ldx, rows int, y []float32, ldy int, acc bool) {
	if f := q.typ.raw(); f != nil && f.HasDot() && fusedRawDot && (rows == 1 || f.HasDot2()) {
		ws.qscratch = grow(ws.qscratch, ggml.DotScratch(q.cols))
		put := func(r, j int, s float32) {
			if acc {
				s += y[r*ldy+j]
			}
			y[r*ldy+j] = s
		}
		for j := range n {
			row := q.row(j0 + j)
			r := 0
			for ; r+2 <= rows; r += 2 {
				a, b := f.Dot2(x[r*ldx:r*ldx+q.cols], x[(r+1)*ldx:(r+1)*ldx+q.cols], row, ws.qscratch)
				put(r, j, a)
				put(r+1, j, b)
			}
			if r < rows {
				put(r, j, f.Dot(x[r*ldx:r*ldx+q.cols], row, ws.qscratch))
			}
		}
		return
	}
	ws.qrow = grow(ws.qrow, q.cols)
	row := ws.qrow[:q.cols]
	for j := range n {
		q.dequantRow(row, j0+j)
		for r := range rows {
			s := kern.dot(x[r*ldx:r*ldx+q.cols], row)
			if acc {
				s += y[r*ldy+j]
			}
			y[r*ldy+j] = s
		}
	}
}

// qgemvRawQ8 is qgemvRaw with the input rows quantized (gemvRaw):
// y[r*ldy + j] = f.DotQ8(x[r], row j0+j of q) (+ y when acc).
func qgemvRawQ8(ws *workspace, q *qmat, f *ggml.Format, j0, n int, x []ggml.Q8K, y []float32, ldy int, acc bool) {
	ws.qscratch = grow(ws.qscratch, ggml.DotScratch(q.cols))
	for j := range n {
		row := q.row(j0 + j)
		for r := range x {
			s := f.DotQ8(&x[r], row, ws.qscratch)
			if acc {
				s += y[r*ldy+j]
			}
			y[r*ldy+j] = s
		}
	}
}

// fusedRawDot lets qgemvRaw take ggml's fused dot products (and gemvRaw
// the int8 ones); the tests and BenchmarkQGemvRaw turn it off to compare
// with dequantizing each row.
var fusedRawDot = true

// qdequant is kernels.qdequant, or for a raw format dequantRange.
func qdequant(q *qmat, dst []float32, j, b0, b1 int) {
	if q.typ.raw() != nil {
		q.dequantRange(dst, j, b0, b1)
		return
	}
	kern.qdequant(q, dst, j, b0, b1)
}

// qsxStride is the stride of one input row's block sums (qBlockSums):
// whole groups of 16 (the AVX-512 kernels read 16 at a time), zero past
// the row's blocks.
func qsxStride(nb int) int { return (nb + 15) / 16 * 16 }

// qBlockSums sets dst[b] to the sum of x's block b (32 values: four
// partial sums over every fourth value, then (s0+s1)+(s2+s3)) and the
// rest of dst to zero: Q4_1's m multiplies it.
func qBlockSums(dst, x []float32) {
	nb := len(x) / QuantBlock
	for b := range nb {
		blk := x[b*QuantBlock : (b+1)*QuantBlock : (b+1)*QuantBlock]
		var s0, s1, s2, s3 float32
		for i := 0; i < QuantBlock; i += 4 {
			s0 += blk[i]
			s1 += blk[i+1]
			s2 += blk[i+2]
			s3 += blk[i+3]
		}
		dst[b] = (s0 + s1) + (s2 + s3)
	}
	clear(dst[nb:])
}

// qpanelMaxBytes bounds the panels a worker dequantizes at once: B's
// columns are taken in blocks of fewer columns when k is large (the tied
// LM head's backward pass has k = the vocabulary).
const qpanelMaxBytes = 4 << 20

// gemmQuantPanels runs op in blocks of B's columns, one per task: the
// task dequantizes its block (all of k) into ws.qpanel in the layout
// packB writes (and for a bf16 product converts it to pairs as
// bf16ConvertB does), then computes every row of C for those columns
// with the micro-kernel. Each value of C is then the sum the same
// product computes from B in float32, bit for bit (the tiles only choose
// which values a call computes, never the order of a sum): a frozen
// base in blocks gives the logits and gradients of a float32 base
// holding its dequantized weights.
func gemmQuantPanels(p *pool, op gemmOp) {
	bf := op.inBF16()
	nr := kern.nr
	var bk *bf16Kernels
	var cv bf16Operands
	if bf {
		bk = bf16Kern()
		nr = bk.nr
		p.gemmMu.Lock()
		defer p.gemmMu.Unlock()
		run := poolRunner(p, op.m*op.k*gemmNC >= parallelMinWork)
		if in := op.bf16A; in != nil {
			cv.a, cv.ars, cv.aks = in.a, in.ars, in.aks
		} else {
			cv.a, cv.ars, cv.aks = bf16ConvertA(bk, &op, p.bf16A, run)
			p.bf16A = cv.a
		}
		cv.kp = (op.k + 1) / 2
		cv.mp = (op.m + bk.mr - 1) / bk.mr * bk.mr
		cv.bStride = cv.kp
	}
	// Blocks of nc columns: a multiple of 32 (a quantized row's columns
	// split at block boundaries) and of nr, about gemmNC, smaller for
	// more tasks (gemmMinTasks) or a large k.
	nc := gemmNC
	for nc > 64 && (op.n+nc-1)/nc < gemmMinTasks {
		nc /= 2
	}
	for nc > 32 && op.k*nc*4 > qpanelMaxBytes {
		nc /= 2
	}
	nt := (op.n + nc - 1) / nc
	work := op.m * op.n * op.k
	p.runWork(nt, work, func(w, t int) {
		ws := &p.ws[w]
		j0 := t * nc
		j1 := min(op.n, j0+nc)
		ws.qpanel = dequantPanels(ws, op, j0, j1, nr, ws.qpanel)
		sub := op
		sub.n, sub.c = j1-j0, op.c[j0:]
		if op.bias != nil {
			sub.bias = op.bias[j0:]
		}
		if op.res != nil {
			sub.res = op.res[j0:]
		}
		sub.bq = nil
		if !bf {
			sub.packed = ws.qpanel
			gemmTile(ws, sub, 0, op.m, 0, j1-j0)
			return
		}
		ws.qpairs = pairPanels(bk, ws.qpanel, op.k, j1-j0, ws.qpairs)
		c := cv
		c.b = ws.qpairs
		bf16Tile(ws, bk, sub, c, 0, op.m, 0, j1-j0)
	})
}

// dequantPanels dequantizes columns [j0, j1) of op's B (op.bq) into
// panels of nr columns in dst (grown): panel p at p*nr*k, row kk of it at
// kk*nr, the last panel's missing columns zero (packB's layout).
func dequantPanels(ws *workspace, op gemmOp, j0, j1, nr int, dst []float32) []float32 {
	q, k := op.bq, op.k
	w := j1 - j0
	panels := (w + nr - 1) / nr
	dst = grow(dst, panels*nr*k)
	if op.tb {
		// Column j of B is row j: a panel's nr rows dequantized (zero
		// past w), then transposed into it.
		ws.qrow = grow(ws.qrow, nr*k)
		rows := ws.qrow
		for pn := range panels {
			for jj := range nr {
				if j := pn*nr + jj; j < w {
					qdequant(q, rows[jj*k:(jj+1)*k], j0+j, 0, q.nb)
				} else {
					clear(rows[jj*k : (jj+1)*k])
				}
			}
			panel := dst[pn*nr*k : (pn+1)*nr*k]
			if kern.qtranspose != nil && nr%16 == 0 && k%32 == 0 {
				kern.qtranspose(panel, rows, nr, k)
			} else {
				transposeF32(panel, rows, nr, k)
			}
		}
		return dst
	}
	// Row kk of B is row kk: its blocks over [j0, j1) dequantized, then cut
	// into the panels' rows.
	ws.qrow = grow(ws.qrow, panels*nr)
	row := ws.qrow
	clear(row[w:])
	for kk := range k {
		qdequant(q, row, kk, j0/QuantBlock, (j1+QuantBlock-1)/QuantBlock)
		for pn := range panels {
			copy(dst[pn*nr*k+kk*nr:pn*nr*k+kk*nr+nr], row[pn*nr:])
		}
	}
	return dst
}

// qdequantGeneric is kernels.qdequant in plain Go (dequantRange).
func qdequantGeneric(q *qmat, dst []float32, j, b0, b1 int) { q.dequantRange(dst, j, b0, b1) }

// pairPanels converts float32 panels (dequantPanels' layout, k rows of nr
// per panel, w columns) into bf16 panels of pairs of rows as bf16ConvertB
// writes them (kp pairs of nr per panel, an odd k's last pair with a zero
// high half) in dst (grown).
func pairPanels(bk *bf16Kernels, src []float32, k, w int, dst []uint32) []uint32 {
	nr := bk.nr
	kp := (k + 1) / 2
	panels := (w + nr - 1) / nr
	dst = growU32(dst, panels*kp*nr)
	var zeros []float32
	if k%2 == 1 {
		zeros = make([]float32, nr)
	}
	for pn := range panels {
		s, d := src[pn*nr*k:], dst[pn*kp*nr:]
		for qq := range kp {
			r1 := zeros
			if 2*qq+1 < k {
				r1 = s[(2*qq+1)*nr : (2*qq+2)*nr]
			}
			bk.cvtPairs(d[qq*nr:qq*nr+nr], s[2*qq*nr:(2*qq+1)*nr], r1)
		}
	}
	return dst
}

// qgemvGeneric is kernels.qgemv in plain Go: y[r*ldy + j] = x_r ·
// (row j0+j of q, dequantized) for j < n and r < rows (+ y when acc),
// each row dequantized once for every x_r and the dot products summed as
// dotGeneric sums them. It is the reference the vector kernels are held
// to (QuantTolerance): the product with the dequantized weights.
func qgemvGeneric(ws *workspace, q *qmat, j0, n int, x []float32, ldx, rows int, _ []float32, y []float32, ldy int, acc bool) {
	ws.qrow = grow(ws.qrow, q.cols)
	for j := range n {
		q.dequantRow(ws.qrow, j0+j)
		for r := range rows {
			s := dotGeneric(x[r*ldx:r*ldx+q.cols], ws.qrow)
			if acc {
				s += y[r*ldy+j]
			}
			y[r*ldy+j] = s
		}
	}
}
