package native

// Matrix products. Every dense layer and the attention are C = A·B in one
// of four layouts: forward y = x·W (A, B as stored), the input gradient
// dX = dY·Wᵀ (B transposed), the weight gradient dW = Xᵀ·dY (A
// transposed), attention scores Q·Kᵀ. The micro-kernel reads A in place
// in either layout (it only needs mr values per k, at any two strides)
// and B as rows of nr values. B is copied ("packed") into strips of nr
// columns once per call: always when it is transposed, and for large
// products also when it is not, because reading a strip in place with a
// large power-of-two row stride (a 4,096-wide LM head) maps every row to
// the same few L1 sets and runs at a third of the speed; a product of at
// most gemmFusedMaxM rows with B as stored (the weight gradients) packs
// it tile by tile instead (gemmFusedB). A is copied only for its ragged
// last rows: packing all of it was slower on the products measured (issue
// 51, Zen 3: a tile reading A in place, either layout, ran at 87-91
// GFLOP/s against the micro-kernel's 94-100 with everything in L1, and
// the copy cost more than the difference).

// Block sizes: a kc x nr strip of B (16 KB at kc=128, nr=32; kc is the
// kernel's, kernels.kc) stays in L1 while the micro-kernel sweeps mc rows
// of A.
const (
	gemmMC = 64
	gemmNC = 256
	// gemmSmallM: at or below this many rows (decoding), tiles are split
	// over the columns only, so that each worker streams its own part of
	// the weights.
	gemmSmallM = 8
	// gemmMinTasks: a parallel product is cut into at least this many
	// tiles (halving mc down to 16 rows, then nc down to 64 columns), so
	// that a helper the OS deschedules mid-tile (another process on its
	// core) holds up the caller for a small part of the product only; the
	// weight gradients (dW = Xᵀ·dY, 128 x 128 at the bench shape) would
	// otherwise be 2 tiles. The split depends on the shape alone, and
	// tiles do not change the order of any sum.
	gemmMinTasks = 16
)

// gemmOp describes C[m×n] = A·B (+ C when acc). A is m×k row-major with
// stride lda, or when ta its transpose is stored (k×m, stride lda). B is
// k×n with stride ldb, or when tb stored as n×k.
type gemmOp struct {
	ta, tb  bool
	m, n, k int
	a       []float32
	lda     int
	b       []float32
	ldb     int
	c       []float32
	ldc     int
	acc     bool
	// packed, when not nil, holds B in panels of nr columns: panel j
	// covers columns [j*nr, j*nr+nr), k rows of nr values, zero-padded
	// (gemm and gemmSerial take it as given: the weights a decoding cache
	// packed once for its calls, Model.PackWeights; a shared prompt's
	// keys, packed once for all the continuations that attend to them).
	packed []float32
	// bf16: round A and B to bfloat16 (gemmBF16) when the product is
	// large enough (more than gemmSmallM rows).
	bf16 bool
	// bias, when set (with acc false), is what C starts from instead of
	// zero: bias[j] in every row, plus res (rows of stride ldc, possibly C
	// itself) when set. The tiles write it just before their first
	// product, so that C is not swept once more (a dense layer's bias and
	// residual); the sums are those of filling C first and accumulating.
	bias, res []float32
	// bf16B, when set, is B already converted for a bf16 product (one
	// conversion shared by several products); the float32 paths read b.
	bf16B *bf16Panels
	// bf16A, when set, is A already converted for a bf16 product
	// (shareBF16A: one conversion for the products that share it); the
	// float32 paths read a.
	bf16A *bf16Input
	// bh, when set, is B stored in bfloat16 (a frozen base matrix,
	// Options.BaseStorage) in b's layout, b being nil: a bf16 product
	// pairs its values as they are; a float32 one widens them (exactly)
	// into packed panels first.
	bh []uint16
	// bq, when set, is B in quantized blocks (a frozen base matrix,
	// Options.BaseStorage q8_0...), b being nil: with tb its rows are B's
	// columns (B(kk, j) = row j's value kk: a dense layer's forward, the
	// tied LM head's logits), else B's rows (the input gradient dX =
	// dY·Wᵀ, the tied head's dh = dL·E). gemmQuant runs such a product.
	bq *qmat
	// q8: a product of at most gemmSmallM rows with bq quantizes its A
	// to int8 per block and sums in integers (quant8.go).
	q8 bool
	// packTiles: B (as stored, not transposed) is packed by each tile,
	// kc rows of its columns at a time, right before the micro-kernel
	// reads them (gemmFusedB), instead of all of it once per product.
	packTiles bool
}

// inBF16 reports whether op runs as a bf16 product: asked for, more than
// gemmSmallM rows (decoding stays float32), and B not pre-packed in
// float32.
func (op *gemmOp) inBF16() bool {
	return op.bf16 && op.m > gemmSmallM && op.k > 0 && op.packed == nil
}

// starts reports whether C starts from a bias or a residual (fillBias)
// rather than from zero or itself.
func (op *gemmOp) starts() bool { return op.bias != nil || op.res != nil }

// fillBias sets rows [i, i+h) x columns [j, j+w) of C to bias (+ res);
// without a bias, to res.
func (op *gemmOp) fillBias(i, h, j, w int) {
	if op.bias == nil {
		for r := i; r < i+h; r++ {
			copy(op.c[r*op.ldc+j:r*op.ldc+j+w], op.res[r*op.ldc+j:r*op.ldc+j+w])
		}
		return
	}
	b := op.bias[j : j+w]
	for r := i; r < i+h; r++ {
		c := op.c[r*op.ldc+j : r*op.ldc+j+w]
		if op.res == nil {
			copy(c, b)
			continue
		}
		// c = res + b: the residual, then the bias added by the vector
		// kernel (1*b + c rounds once, as the sum does).
		copy(c, op.res[r*op.ldc+j:r*op.ldc+j+w])
		kern.axpy(c, 1, b)
	}
}

// biasFirst fills all of C from op.bias (and op.res) for the paths that
// do not go through the tiles (gemv, dots, k = 0), and returns op
// accumulating onto it.
func (op gemmOp) biasFirst() gemmOp {
	if op.starts() {
		op.fillBias(0, op.m, 0, op.n)
		op.bias, op.res, op.acc = nil, nil, true
	}
	return op
}

// gemm runs op on the worker pool, split into tiles of C.
func gemm(p *pool, op gemmOp) {
	if op.m == 0 || op.n == 0 {
		return
	}
	if op.bq != nil && op.packed == nil {
		gemmQuant(p, op)
		return
	}
	if op.inBF16() {
		gemmBF16(p, &op)
		return
	}
	work := op.m * op.n * op.k
	if op.m <= gemmSmallM {
		// Decoding: the time goes into reading the weights once, about
		// as long as 8 multiply-adds per weight.
		work = max(work, 8*op.n*op.k)
	}
	if op.bh != nil && op.packed == nil && op.k > 0 {
		// A bfloat16 B in a float32 product: widened as it is packed.
		p.gemmMu.Lock()
		defer p.gemmMu.Unlock()
		p.sharedB = packB(p, op, p.sharedB, work >= parallelMinWork)
		op.packed = p.sharedB
	}
	if op.m == 1 && !op.ta && !op.tb && op.k > 0 && op.packed == nil {
		op := op.biasFirst()
		const nc = 256
		p.runWork((op.n+nc-1)/nc, work, func(_, t int) {
			j0 := t * nc
			kern.gemv(op.a[:op.k], op.b[j0:], op.ldb, op.c[j0:min(op.n, j0+nc)], op.acc)
		})
		return
	}
	if op.k == 0 || (op.m <= 4 && op.tb && !op.ta && op.packed == nil) {
		p.run(1, func(w, _ int) { gemmSerial(&p.ws[w], op) })
		return
	}
	if op.m > gemmSmallM && op.m <= gemmFusedMaxM && !op.tb && op.packed == nil && op.bh == nil {
		// Tiles over the columns only: taken where they are enough tasks
		// for the pool (else tileSplit's row blocks keep the workers busy).
		if nc, nt := fusedSplit(op.n); nt >= max(8, 2*p.workers) {
			gemmFusedB(p, op, work, nc, nt)
			return
		}
	}
	mr := kern.mr
	mc, nc, mt, nt := op.m, 128, 1, (op.n+127)/128
	if op.m > gemmSmallM {
		mc, nc, mt, nt = tileSplit(op.m, op.n, mr)
	}
	if op.packed == nil && (op.tb || op.m > gemmSmallM) {
		p.gemmMu.Lock()
		defer p.gemmMu.Unlock()
		p.sharedB = packB(p, op, p.sharedB, work >= parallelMinWork)
		op.packed = p.sharedB
	}
	p.runWork(mt*nt, work, func(w, t int) {
		i0, j0 := (t/nt)*mc, (t%nt)*nc
		gemmTile(&p.ws[w], op, i0, min(op.m, i0+mc), j0, min(op.n, j0+nc))
	})
}

// gemmFusedMaxM is the most rows a product packs its B tile by tile for
// (gemmFusedB).
const gemmFusedMaxM = 256

// gemmFusedB runs a product of few rows (at most gemmFusedMaxM) with B as
// stored: the weight gradients dW = Xᵀ·dY, whose B (dY, tokens x outputs)
// is the large operand. Packed once for the product, B was written to
// memory and read back for a few row blocks of tiles, and the products
// ran at 59-75 GFLOP per second where the others reach 85-95 (Zen 3, one
// thread); here each tile covers all the rows and nc columns and packs
// kc rows of its own columns of B just before it uses them, from L2:
// 79-82 (BENCHMARKS.md, issue 51). Every B value is still packed once,
// and the sums are those of the other path.
func gemmFusedB(p *pool, op gemmOp, work, nc, nt int) {
	op.packTiles = true
	p.runWork(nt, work, func(w, t int) {
		j0 := t * nc
		gemmTile(&p.ws[w], op, 0, op.m, j0, min(op.n, j0+nc))
	})
}

// fusedSplit is gemmFusedB's cut of n columns into nt tiles of nc: about
// gemmNC columns, halved down to 64 until there are gemmMinTasks tiles.
func fusedSplit(n int) (nc, nt int) {
	nc = gemmNC
	nt = (n + nc - 1) / nc
	for nt < gemmMinTasks && nc > 64 {
		nc /= 2
		nt = (n + nc - 1) / nc
	}
	return nc, nt
}

// tileSplit is how a product of m > gemmSmallM rows is cut into mt x nt
// tiles of mc rows (a multiple of mr) and nc columns: blocks of about
// gemmMC x gemmNC, halved (rows down to 16, then columns down to 64) until
// there are gemmMinTasks tiles.
func tileSplit(m, n, mr int) (mc, nc, mt, nt int) {
	mc, nc = blockRows(mr), gemmNC
	mt, nt = (m+mc-1)/mc, (n+nc-1)/nc
	for mt*nt < gemmMinTasks && mc > 16 && mc/2/mr*mr >= mr {
		mc = mc / 2 / mr * mr
		mt = (m + mc - 1) / mc
	}
	for mt*nt < gemmMinTasks && nc > 64 {
		nc /= 2
		nt = (n + nc - 1) / nc
	}
	return mc, nc, mt, nt
}

// gemmSerial runs op on the calling worker (inside a pool task).
func gemmSerial(ws *workspace, op gemmOp) {
	if op.m == 0 || op.n == 0 {
		return
	}
	if op.inBF16() {
		ws.op = op
		gemmBF16Serial(ws, &ws.op)
		ws.op = gemmOp{} // holds no slices past the product
		return
	}
	if op.bh != nil || op.bq != nil {
		panic("native: gemmSerial on a bfloat16 or quantized B (dense layers go through gemm)")
	}
	k := kern
	switch {
	case op.k == 0:
		if op = op.biasFirst(); !op.acc {
			for i := range op.m {
				clear(op.c[i*op.ldc : i*op.ldc+op.n])
			}
		}
		return
	case op.m <= 4 && op.tb && !op.ta:
		gemmDots(op.biasFirst(), 0, op.m, 0, op.n)
		return
	case op.m == 1 && !op.ta && !op.tb:
		op = op.biasFirst()
		k.gemv(op.a[:op.k], op.b, op.ldb, op.c[:op.n], op.acc)
		return
	}
	if op.tb && op.packed == nil {
		ws.packB = packB(nil, op, ws.packB, false)
		op.packed = ws.packB
	}
	mc := blockRows(k.mr)
	for i0 := 0; i0 < op.m; i0 += mc {
		for j0 := 0; j0 < op.n; j0 += gemmNC {
			gemmTile(ws, op, i0, min(op.m, i0+mc), j0, min(op.n, j0+gemmNC))
		}
	}
}

// blockRows is the row block: about gemmMC rows, a multiple of the
// micro-kernel's mr, so that only a product's last rows take the edge path.
func blockRows(mr int) int { return max(mr, gemmMC/mr*mr) }

// packB packs B into op.packed's panel layout in dst, on the pool when
// parallel.
func packB(p *pool, op gemmOp, dst []float32, parallel bool) []float32 {
	nr := kern.nr
	panels := (op.n + nr - 1) / nr
	dst = grow(dst, panels*nr*op.k)
	pack := func(lo, hi int) { // panels [lo, hi)
		switch {
		case op.bh != nil:
			for jp := lo; jp < hi; jp++ {
				packHalf(dst[jp*nr*op.k:(jp+1)*nr*op.k], op, jp*nr, min(nr, op.n-jp*nr), nr)
			}
		case !op.tb:
			// B as stored is read a band of packRows rows at a time, each
			// row across the panels: going down one panel's columns
			// instead touches a new page per row (B's stride is often 4 KB
			// or more): packing took 13% of a weight gradient's product
			// (a 2,048 x 1,024 B, Zen 3) that way, 8.6% this way.
			const packRows = 16
			for k0 := 0; k0 < op.k; k0 += packRows {
				packBRows(dst[lo*nr*op.k+k0*nr:], nr*op.k, op, k0, min(packRows, op.k-k0), lo*nr, min(op.n, hi*nr), nr)
			}
		default:
			for jp := lo; jp < hi; jp++ {
				panel := dst[jp*nr*op.k : (jp+1)*nr*op.k]
				w := min(nr, op.n-jp*nr)
				for jj := range w {
					src := op.b[(jp*nr+jj)*op.ldb : (jp*nr+jj)*op.ldb+op.k]
					for kk, v := range src {
						panel[kk*nr+jj] = v
					}
				}
				for jj := w; jj < nr; jj++ {
					for kk := range op.k {
						panel[kk*nr+jj] = 0
					}
				}
			}
		}
	}
	if parallel {
		p.chunks(panels, 4, func(_, lo, hi int) { pack(lo, hi) })
	} else {
		pack(0, panels)
	}
	return dst
}

// packBRows packs rows [p0, p0+rows) x columns [j0, j1) of B (as stored)
// into strips of nr columns: strip s at dst[s*stride:], row kk of it at
// kk*nr, the last strip's missing columns zero. packB's panels (stride
// nr*k), a tile's own strips (gemmFusedB: stride nr*kb) and a ragged
// strip read in place (gemmTile) are all this layout.
func packBRows(dst []float32, stride int, op gemmOp, p0, rows, j0, j1, nr int) {
	full := (j1 - j0) / nr
	if full > 0 {
		kern.packStrips(dst, stride, op.b[p0*op.ldb+j0:], op.ldb, rows, full)
	}
	if j := j0 + full*nr; j < j1 {
		strip := dst[full*stride:]
		for kk := range rows {
			row := strip[kk*nr : kk*nr+nr]
			copy(row, op.b[(p0+kk)*op.ldb+j:(p0+kk)*op.ldb+j1])
			clear(row[j1-j:])
		}
	}
}

// packStrips8 and packStrips32 are kernels.packStrips for nr = 8 and 32
// (the generic and AVX-512 kernels).
func packStrips8(dst []float32, stride int, src []float32, ld, rows, strips int) {
	packStripsN(dst, stride, src, ld, rows, strips, 8)
}

func packStrips32(dst []float32, stride int, src []float32, ld, rows, strips int) {
	packStripsN(dst, stride, src, ld, rows, strips, 32)
}

func packStripsN(dst []float32, stride int, src []float32, ld, rows, strips, nr int) {
	for kk := range rows {
		s := src[kk*ld : kk*ld+strips*nr]
		for st := range strips {
			d := dst[st*stride+kk*nr : st*stride+kk*nr+nr]
			for i := 0; i < nr; i += 4 {
				// [4]float32 moves are one 16-byte load and store; larger
				// arrays would go through memmove.
				*(*[4]float32)(d[i:]) = *(*[4]float32)(s[st*nr+i:])
			}
		}
	}
}

// packHalf is packB's panel of columns [j0, j0+w) from a bfloat16 B,
// widened to float32 (exact).
func packHalf(panel []float32, op gemmOp, j0, w, nr int) {
	for kk := range op.k {
		row := panel[kk*nr : kk*nr+nr]
		for jj := range w {
			if op.tb {
				row[jj] = fromBF16(op.bh[(j0+jj)*op.ldb+kk])
			} else {
				row[jj] = fromBF16(op.bh[kk*op.ldb+j0+jj])
			}
		}
		clear(row[w:])
	}
}

// gemmTile computes rows [i0,i1) x columns [j0,j1) of C.
func gemmTile(ws *workspace, op gemmOp, i0, i1, j0, j1 int) {
	k := kern
	micro, mr, nr := k.micro, k.mr, k.nr
	if op.packed == nil && op.m <= gemmSmallM && k.wide != nil {
		micro, mr, nr = k.wide, k.mrw, k.nrw
	}
	// A(i, kk) is at a[i*ars + kk*aks].
	ars, aks := op.lda, 1
	if op.ta {
		ars, aks = 1, op.lda
	}
	kc := k.kc
	ws.tile = grow(ws.tile, mr*nr)
	ws.packA = grow(ws.packA, mr*kc)
	ws.edgeB = grow(ws.edgeB, nr*kc)
	for p0 := 0; p0 < op.k; p0 += kc {
		kb := min(kc, op.k-p0)
		acc := op.acc || p0 > 0 || op.starts()
		if op.packTiles {
			ws.tileB = grow(ws.tileB, (j1-j0+nr-1)/nr*nr*kb)
			packBRows(ws.tileB, nr*kb, op, p0, kb, j0, j1, nr)
		}
		edgeA := false // ragged last rows packed in ws.packA for this p0
		for j := j0; j < j1; j += nr {
			w := min(nr, j1-j)
			// The B strip: kb rows of nr values.
			var bs []float32
			ldb := nr
			switch {
			case op.packTiles:
				bs = ws.tileB[(j-j0)*kb:]
			case op.packed != nil:
				bs = op.packed[(j/nr)*nr*op.k+p0*nr:]
			case w == nr:
				bs, ldb = op.b[p0*op.ldb+j:], op.ldb
			default:
				bs = ws.edgeB
				packBRows(bs, nr*kb, op, p0, kb, j, j+w, nr)
			}
			for i := i0; i < i1; i += mr {
				h := min(mr, i1-i)
				as, rs, ks := op.a[i*ars+p0*aks:], ars, aks
				if h < mr {
					if !edgeA {
						packAEdge(ws.packA, op, i, h, p0, kb, mr)
						edgeA = true
					}
					as, rs, ks = ws.packA, 1, mr
				}
				if p0 == 0 && op.starts() {
					op.fillBias(i, h, j, w)
				}
				if h == mr && w == nr {
					micro(kb, as, rs, ks, bs, ldb, op.c[i*op.ldc+j:], op.ldc, acc)
					continue
				}
				micro(kb, as, rs, ks, bs, ldb, ws.tile, nr, false)
				storeRows(op.c[i*op.ldc+j:], op.ldc, ws.tile, nr, h, w, acc)
			}
		}
	}
}

// storeRows writes h rows of w values of src (row stride lds) to dst (row
// stride ldd): added to what dst holds when acc, else copied.
func storeRows(dst []float32, ldd int, src []float32, lds, h, w int, acc bool) {
	for i := range h {
		d, r := dst[i*ldd:i*ldd+w], src[i*lds:i*lds+w]
		if !acc {
			copy(d, r)
			continue
		}
		for j := range d {
			d[j] += r[j]
		}
	}
}

// packAEdge copies the h < mr rows of A starting at row i, columns [p0,
// p0+kb), k-major into dst (kb groups of mr values), zero-padding.
func packAEdge(dst []float32, op gemmOp, i, h, p0, kb, mr int) {
	for kk := range kb {
		d := dst[kk*mr : kk*mr+mr]
		for ii := range mr {
			if ii >= h {
				d[ii] = 0
			} else if op.ta {
				d[ii] = op.a[(p0+kk)*op.lda+i+ii]
			} else {
				d[ii] = op.a[(i+ii)*op.lda+p0+kk]
			}
		}
	}
}

// gemmDots is the few-rows case of C = A·Bᵀ (decode attention scores):
// every element is a dot product of two contiguous rows.
func gemmDots(op gemmOp, i0, i1, j0, j1 int) {
	for i := i0; i < i1; i++ {
		a := op.a[i*op.lda : i*op.lda+op.k]
		c := op.c[i*op.ldc:]
		for j := j0; j < j1; j++ {
			s := kern.dot(a, op.b[j*op.ldb:])
			if op.acc {
				c[j] += s
			} else {
				c[j] = s
			}
		}
	}
}
