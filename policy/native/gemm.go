package native

// Matrix products. Every dense layer and the attention are C = A·B in one
// of four layouts: forward y = x·W (A, B as stored), the input gradient
// dX = dY·Wᵀ (B transposed), the weight gradient dW = Xᵀ·dY (A
// transposed), attention scores Q·Kᵀ. gemm handles them all by packing
// blocks of A and B into the layout the micro-kernel reads (GotoBLAS
// style), so there is one micro-kernel per CPU path.

// Block sizes: a kc x nr panel of B (16 KB at kc=128, nr=32) stays in L1
// while the micro-kernel sweeps an mc x kc block of A held in L2.
const (
	gemmMC = 64
	gemmNC = 256
	gemmKC = 128
	// gemmSmallM: at or below this many rows (decoding a few sequences)
	// B is read in place instead of packed: each of its elements is used
	// only m times, so copying it would double the memory traffic.
	gemmSmallM = 8
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
}

// gemm runs op on the worker pool, split into tiles of C.
func gemm(p *pool, op gemmOp) {
	if op.m == 0 || op.n == 0 {
		return
	}
	mc, nc := gemmMC, gemmNC
	if op.m <= gemmSmallM {
		nc = 128 // decode: spread the weight columns over the workers
	}
	mt, nt := (op.m+mc-1)/mc, (op.n+nc-1)/nc
	if op.m*op.n*op.k < 1<<16 {
		mt, nt, mc, nc = 1, 1, op.m, op.n // too small to be worth a wake-up
	}
	p.run(mt*nt, func(w, t int) {
		i0, j0 := (t/nt)*mc, (t%nt)*nc
		gemmTile(&p.ws[w], op, i0, min(op.m, i0+mc), j0, min(op.n, j0+nc))
	})
}

// gemmSerial runs op on the calling worker (inside a pool task).
func gemmSerial(ws *workspace, op gemmOp) {
	if op.m == 0 || op.n == 0 {
		return
	}
	for i0 := 0; i0 < op.m; i0 += gemmMC {
		for j0 := 0; j0 < op.n; j0 += gemmNC {
			gemmTile(ws, op, i0, min(op.m, i0+gemmMC), j0, min(op.n, j0+gemmNC))
		}
	}
}

// gemmTile computes rows [i0,i1) x columns [j0,j1) of C.
func gemmTile(ws *workspace, op gemmOp, i0, i1, j0, j1 int) {
	k := kern
	mr, nr := k.mr, k.nr
	if op.k == 0 {
		if !op.acc {
			for i := i0; i < i1; i++ {
				clear(op.c[i*op.ldc+j0 : i*op.ldc+j1])
			}
		}
		return
	}
	if i1-i0 <= 4 && op.tb && !op.ta {
		gemmDots(op, i0, i1, j0, j1)
		return
	}
	rows, cols := i1-i0, j1-j0
	mPanels, nPanels := (rows+mr-1)/mr, (cols+nr-1)/nr
	inPlaceB := op.m <= gemmSmallM && !op.tb
	ws.tile = grow(ws.tile, mr*nr)
	for p0 := 0; p0 < op.k; p0 += gemmKC {
		kb := min(gemmKC, op.k-p0)
		acc := op.acc || p0 > 0
		ws.packA = grow(ws.packA, mPanels*mr*kb)
		packA(ws.packA, op, i0, rows, p0, kb, mr)
		var bp []float32
		ldb := nr
		if inPlaceB {
			bp, ldb = op.b[p0*op.ldb:], op.ldb
		} else {
			ws.packB = grow(ws.packB, nPanels*nr*kb)
			packB(ws.packB, op, p0, kb, j0, cols, nr)
			bp = ws.packB
		}
		for jp := range nPanels {
			j := j0 + jp*nr
			var bPanel []float32
			if inPlaceB {
				bPanel = bp[j:]
			} else {
				bPanel = bp[jp*nr*kb:]
			}
			w := min(nr, j1-j)
			if inPlaceB && w < nr {
				// A partial panel read in place would run past B's
				// columns; do the ragged edge with dots.
				for i := i0; i < i1; i++ {
					for jj := j; jj < j1; jj++ {
						s := float32(0)
						for kk := range kb {
							s += op.at(i, p0+kk) * op.b[(p0+kk)*op.ldb+jj]
						}
						if acc {
							op.c[i*op.ldc+jj] += s
						} else {
							op.c[i*op.ldc+jj] = s
						}
					}
				}
				continue
			}
			for ip := range mPanels {
				i := i0 + ip*mr
				aPanel := ws.packA[ip*mr*kb:]
				h := min(mr, i1-i)
				if h == mr && w == nr {
					k.micro(kb, aPanel, bPanel, ldb, op.c[i*op.ldc+j:], op.ldc, acc)
					continue
				}
				k.micro(kb, aPanel, bPanel, ldb, ws.tile, nr, false)
				for ii := range h {
					dst := op.c[(i+ii)*op.ldc+j : (i+ii)*op.ldc+j+w]
					src := ws.tile[ii*nr : ii*nr+w]
					if acc {
						for jj := range dst {
							dst[jj] += src[jj]
						}
					} else {
						copy(dst, src)
					}
				}
			}
		}
	}
}

// at returns A(i, k).
func (op *gemmOp) at(i, k int) float32 {
	if op.ta {
		return op.a[k*op.lda+i]
	}
	return op.a[i*op.lda+k]
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

// packA copies rows [i0, i0+rows) x columns [p0, p0+kb) of A into panels
// of mr rows, k-major (kb groups of mr values), zero-padding the last.
func packA(dst []float32, op gemmOp, i0, rows, p0, kb, mr int) {
	for ip := 0; ip*mr < rows; ip++ {
		panel := dst[ip*mr*kb : (ip+1)*mr*kb]
		h := min(mr, rows-ip*mr)
		r0 := i0 + ip*mr
		if op.ta {
			for kk := range kb {
				src := op.a[(p0+kk)*op.lda+r0:]
				d := panel[kk*mr : kk*mr+mr]
				copy(d[:h], src[:h])
				clear(d[h:])
			}
			continue
		}
		for ii := range h {
			src := op.a[(r0+ii)*op.lda+p0 : (r0+ii)*op.lda+p0+kb]
			for kk, v := range src {
				panel[kk*mr+ii] = v
			}
		}
		for ii := h; ii < mr; ii++ {
			for kk := range kb {
				panel[kk*mr+ii] = 0
			}
		}
	}
}

// packB copies rows [p0, p0+kb) x columns [j0, j0+cols) of B into panels
// of nr columns (kb rows of nr values each), zero-padding the last.
func packB(dst []float32, op gemmOp, p0, kb, j0, cols, nr int) {
	for jp := 0; jp*nr < cols; jp++ {
		panel := dst[jp*nr*kb : (jp+1)*nr*kb]
		w := min(nr, cols-jp*nr)
		c0 := j0 + jp*nr
		if !op.tb {
			for kk := range kb {
				src := op.b[(p0+kk)*op.ldb+c0:]
				d := panel[kk*nr : kk*nr+nr]
				copy(d[:w], src[:w])
				clear(d[w:])
			}
			continue
		}
		for jj := range w {
			src := op.b[(c0+jj)*op.ldb+p0 : (c0+jj)*op.ldb+p0+kb]
			for kk, v := range src {
				panel[kk*nr+jj] = v
			}
		}
		for jj := w; jj < nr; jj++ {
			for kk := range kb {
				panel[kk*nr+jj] = 0
			}
		}
	}
}
