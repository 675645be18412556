package native

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"unsafe"
)

// bf16 matrix products for training: inputs rounded to bfloat16 (the top
// 16 bits of a float32, round to nearest even), products summed in
// float32. Weights, gradients and optimizer state stay float32 (the master
// copy); each product converts its two inputs as it packs them, so nothing
// else of the model changes. With AVX512_BF16 (bf16_amd64.s) one
// VDPBF16PS does the multiply-adds of two k values per lane, twice the
// FMA's; elsewhere a plain-Go kernel computes the same sums (exact
// products, float32 adds), slowly: it exists so that the bf16 mode and its
// training check run on every machine.
//
// A model set to bf16 (SetMatmul) uses it in the dense layers' products
// (forward, input and weight gradients; the LM head included) and the
// attention's (scores, P·V and their gradients), for products of more
// than gemmSmallM rows, except a shared prompt's packed keys (float32
// panels, Batch.Prefix). Decoding stays float32, which is why PPO keeps
// float32 (its behaviour log-probs come from the float32 sampler; a bf16
// learner would move every ratio away from 1 before any update); train
// sft takes bf16 where the CPU has AVX512_BF16 (--matmul auto).
//
// Which precision a model computes in is its caller's choice, never this
// package's: SetMatmul and Options.BaseStorage take fp32 or bf16, and
// "auto" (bf16 where the CPU has AVX512_BF16) is resolved once where a
// stage or a test builds its model (policy.ResolvePrecision), printed and
// recorded there. The CPU only picks which kernels compute the chosen
// precision (bf16Kern: the same sums either way), so a test that names
// its precision checks the same arithmetic on every machine.

// Precisions of a model's training products (SetMatmul) and of a frozen
// base's storage (Options.BaseStorage).
const (
	MatmulFP32 = "fp32"
	MatmulBF16 = "bf16" // the plain-Go kernel where the CPU lacks AVX512_BF16
)

// parsePrecision reports whether mode, a precision of what (for errors),
// is bf16: "fp32" (or "", the zero value) or "bf16", in any case. "auto"
// is an error here: what it means depends on the CPU, and the caller
// resolves it where it builds the model (bf16.go's comment).
func parsePrecision(what, mode string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(mode)) {
	case MatmulFP32, "":
		return false, nil
	case MatmulBF16:
		return true, nil
	case "auto":
		return false, fmt.Errorf("native: %s %q: resolve auto to %s or %s where the model is built (policy.ResolvePrecision); this package does not choose a precision from the CPU", what, mode, MatmulFP32, MatmulBF16)
	}
	return false, fmt.Errorf("native: %s %q: want %s or %s", what, mode, MatmulFP32, MatmulBF16)
}

// BF16Unit is bfloat16's unit roundoff: it keeps 8 significant bits (7
// stored and the leading one), so rounding to nearest changes a value by
// at most half a step, 2⁻⁸ of it.
const BF16Unit = 0x1p-8

// BF16Tolerance is the stated precision of a result computed with bf16
// products against the same computation in float32 (or float64): the
// largest difference allowed, relative to the scale of the results (the
// largest magnitude among them), for a result that went through a chain
// of depth bf16 products (its longest path from the input: each dense
// layer, an adapter being two, each attention product run in bf16, the
// LM head).
//
// The derivation: a bf16 product rounds both its inputs to nearest
// bfloat16, so every term of its sum carries a relative error within
// ±2·BF16Unit, the sum of two independent roundings each uniform within
// ±BF16Unit: mean square 2·BF16Unit²/3. For terms of either sign the
// sum's error then has a standard deviation of sqrt(2/3)·BF16Unit of the
// sum's own size (the float32 accumulation adds 2¹⁶ times less). The
// products along a chain err independently, and a transformer block
// neither amplifies nor damps an error much (it adds to a residual
// stream that the next norm rescales), so at the end of the chain the
// standard deviation is sqrt(2·depth/3)·BF16Unit of the result's scale.
// The tolerance is 6 of them, which one value exceeds with probability
// 2e-9, so one of the tens of thousands a check compares with probability
// below 1e-4. The checks against PEFT (TestHFReferenceLoRA) and of a
// merged folder (train's TestSFTOnBF16Base) see a quarter of it or less.
func BF16Tolerance(depth int) float64 { return 6 * math.Sqrt(2*float64(depth)/3) * BF16Unit }

// bf16Kernels is one implementation of the bf16 product.
type bf16Kernels struct {
	name   string
	mr, nr int
	// micro computes an mr x nr tile of C = A·B (+ C when acc) over kp
	// pairs of k: A's pair q of row i is the uint32 a[i*ars + q*aks] (two
	// bf16, the even k in the low half), B kp rows of nr pairs with a row
	// stride of ldb.
	micro func(kp int, a []uint32, ars, aks int, b []uint32, ldb int, c []float32, ldc int, acc bool)
	// cvt sets dst[i] = bf16(src[i]) for every i < len(src).
	cvt func(dst []uint16, src []float32)
	// cvtPairs sets dst[i] = bf16(r0[i]) | bf16(r1[i])<<16, i < len(dst).
	cvtPairs func(dst []uint32, r0, r1 []float32)
	// cvtPanels is cvtPairs over panels of nr columns: the pairs of
	// columns [p*nr, p*nr+nr) go to dst[p*stride:], p < panels.
	cvtPanels func(panels int, r0, r1 []float32, dst []uint32, stride int)
	// cvtPanelsA (nil with rowA) converts 2*mr columns of qn pairs of
	// rows (a transposed A's: bf16Convert) into two panels of mr: for q < qn, the pairs of
	// src's rows 2q and 2q+1 (row stride lda), columns [0, mr), go to
	// dst[q*mr:] and columns [mr, 2*mr) to dst[stride+q*mr:].
	cvtPanelsA func(qn int, src []float32, lda int, dst []uint32, stride int)
	// transpose sets dst[c*ldd + r] = src[r*lds + c] for r < rows, c <
	// cols.
	transpose func(dst []uint32, ldd int, src []uint32, lds, rows, cols int)
	// rowA: micro reads A row-major only (aks 1: a row's pairs adjacent,
	// as AMX's tiles load it), so a transposed A is converted into rows,
	// not panels (bf16ConvertA).
	rowA bool
}

var bf16Generic = &bf16Kernels{name: "bf16-generic", mr: 4, nr: 8, micro: microBF16Generic, cvt: cvtBF16Generic, cvtPairs: cvtPairsBF16Generic,
	transpose: transposeGeneric, cvtPanelsA: cvtPanelsAGeneric(4),
	cvtPanels: func(panels int, r0, r1 []float32, dst []uint32, stride int) {
		for p := range panels {
			cvtPairsBF16Generic(dst[p*stride:p*stride+8], r0[p*8:p*8+8], r1[p*8:p*8+8])
		}
	}}

// cvtPanelsAGeneric is cvtPanelsA for mr rows, one value at a time.
func cvtPanelsAGeneric(mr int) func(qn int, src []float32, lda int, dst []uint32, stride int) {
	return func(qn int, src []float32, lda int, dst []uint32, stride int) {
		for q := range qn {
			r0, r1 := src[2*q*lda:2*q*lda+2*mr], src[(2*q+1)*lda:(2*q+1)*lda+2*mr]
			cvtPairsBF16Generic(dst[q*mr:q*mr+mr], r0[:mr], r1[:mr])
			cvtPairsBF16Generic(dst[stride+q*mr:stride+q*mr+mr], r0[mr:], r1[mr:])
		}
	}
}

// bf16Fast is the hardware implementation where the build and CPU have
// one (bf16_amd64.go: AMX's tiles where Linux gives them, else
// AVX512_BF16), else nil.
var bf16Fast *bf16Kernels

// bf16Others are the hardware implementations this CPU has besides
// bf16Fast (the AVX512_BF16 one where AMX is in use): the tests run them
// too.
var bf16Others []*bf16Kernels

// BF16Native reports whether this CPU and build have hardware bf16
// products (AVX512_BF16) and the float32 kernels in use are AVX-512. It
// picks the bf16 kernels (bf16Kern); whether they are worth using is
// BF16Faster's.
func BF16Native() bool { return bf16Fast != nil && KernelName() == "avx512" }

// BF16Faster reports whether the bf16 products outrun the float32 ones
// on this CPU: what "auto" decides from (policy.AutoPrecision). They do
// on AMX's tiles (amx_linux_amd64.go: BenchmarkAMXPeak about 4x
// BenchmarkFMAPeak per CPU-second; SFT steps 1.37-1.76x float32 per
// CPU-second on a Xeon family 6 model 207) and on AMD's AVX512_BF16
// (Zen 4 and 5: VDPBF16PS at twice the FMA's multiply-adds; bf16 SFT
// 1.44-1.65x float32 on an EPYC Zen 4). Intel's VDPBF16PS without the
// tiles runs at half the FMA peak (BenchmarkBF16Peak 112 against
// BenchmarkFMAPeak 239 GFLOP per CPU-second on that Xeon: SFT steps
// 0.71-0.77x float32), so there float32 is the faster and auto's choice.
func BF16Faster() bool { return BF16Native() && (bf16Fast.rowA || bf16DotFaster) }

// bf16DotFaster: this CPU's VDPBF16PS does more multiply-adds per cycle
// than its FMA (AMD's; bf16_amd64.go).
var bf16DotFaster bool

// SetMatmul sets the precision of the model's training products (Forward
// and the backward passes; decoding is always float32), MatmulFP32 or
// MatmulBF16, and returns it as the model records it.
func (m *Model) SetMatmul(mode string) (string, error) {
	bf16, err := parsePrecision("matmul", mode)
	if err != nil {
		return "", err
	}
	m.bf16 = bf16
	return m.Matmul(), nil
}

// Matmul returns the model's product precision, "fp32" or "bf16".
func (m *Model) Matmul() string {
	if m.bf16 {
		return MatmulBF16
	}
	return MatmulFP32
}

// bf16Kern is the bf16 implementation in use: the hardware one when the
// float32 kernels in use are AVX-512 (MLERL_NATIVE_KERNEL=avx2 or generic
// forces the plain-Go one too), else the plain-Go one.
func bf16Kern() *bf16Kernels {
	if BF16Native() {
		return bf16Fast
	}
	return bf16Generic
}

// toBF16 rounds f to bfloat16 as VCVTNEPS2BF16 does: to nearest even,
// denormal inputs as zero, NaN kept a (quiet) NaN.
func toBF16(f float32) uint16 {
	u := math.Float32bits(f)
	switch {
	case u&0x7f800000 == 0: // zero or denormal: signed zero
		return uint16(u>>16) & 0x8000
	case u&0x7fffffff > 0x7f800000: // NaN
		return uint16(u>>16) | 0x0040
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// fromBF16 widens a bfloat16 to float32 (exact).
func fromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

func cvtBF16Generic(dst []uint16, src []float32) {
	for i, v := range src {
		dst[i] = toBF16(v)
	}
}

func cvtPairsBF16Generic(dst []uint32, r0, r1 []float32) {
	for i := range dst {
		dst[i] = uint32(toBF16(r0[i])) | uint32(toBF16(r1[i]))<<16
	}
}

// transposeGeneric is bf16Kernels.transpose one value at a time.
func transposeGeneric(dst []uint32, ldd int, src []uint32, lds, rows, cols int) {
	for r := range rows {
		for c, v := range src[r*lds : r*lds+cols] {
			dst[c*ldd+r] = v
		}
	}
}

// microBF16Generic is the plain-Go bf16 micro-kernel, 4 x 8: per pair the
// odd k's product is added first, then the even one's, as VDPBF16PS
// specifies; each product of two bf16 values is exact in float32.
func microBF16Generic(kp int, a []uint32, ars, aks int, b []uint32, ldb int, c []float32, ldc int, acc bool) {
	const mr, nr = 4, 8
	var t [mr * nr]float32
	for q := range kp {
		bq := b[q*ldb : q*ldb+nr : q*ldb+nr]
		for i := range mr {
			ap := a[i*ars+q*aks]
			a0, a1 := fromBF16(uint16(ap)), fromBF16(uint16(ap>>16))
			ti := t[i*nr : i*nr+nr : i*nr+nr]
			for j, bp := range bq {
				p1 := a1 * fromBF16(uint16(bp>>16))
				p0 := a0 * fromBF16(uint16(bp))
				ti[j] += p1
				ti[j] += p0
			}
		}
	}
	storeRows(c, ldc, t[:], nr, mr, nr, acc)
}

// gemmBF16KP is the k block in pairs: a 128 x nr strip of packed B (16 KB
// at nr = 32) stays in L1 while the micro-kernel sweeps a block of rows.
const gemmBF16KP = 128

// bf16PanelQ is how many k pairs of a transposed A bf16Convert converts
// into its panels at a time: 16 stored rows, 256 bytes of each panel.
const bf16PanelQ = 8

// bf16Operands is a product's inputs converted for the bf16 micro-kernel:
// A's mp rows (zero-padded to whole tiles) in tiles of mr rows, the tile
// of row i (a multiple of mr) at a[i*kp:], its row r's pair q at r*ars +
// q*aks (row-major: ars = kp, aks = 1; a panel: ars = 1, aks = mr); B in
// panels of nr pairs per k pair (kp pairs, zero-padded columns).
type bf16Operands struct {
	a, b     []uint32
	ars, aks int
	kp, mp   int
	bStride  int // pairs per panel of b: kp, or more in a pre-converted B (bf16Panels)
}

// bf16Panels is a B converted once for several products (the attention's
// keys and values of one head, for each block of queries): panels of nr
// columns, stride pairs each. A product over its first k rows (k <=
// 2*stride) or first n columns reads a prefix of every panel, or the
// first panels. Past a product's k the panels hold the next rows' values,
// which meet A's zero padding (finite values only: 0 x Inf would be NaN).
type bf16Panels struct {
	b      []uint32
	stride int
}

// bf16Input is an A converted once for several bf16 products that read
// it (gemmOp.bf16A): the layer-normed input of the attention's query, key
// and value projections, forward and in their weight gradients.
type bf16Input struct {
	a        []uint32
	ars, aks int
	m, k     int
	ta       bool
	x        *float32 // the float32 A it was converted from
}

// shareBF16A converts A (m x k: x, row stride lda, or with ta its
// transpose) into in for the bf16 products that share it, and returns in;
// nil when such a product would not run in bf16 (bf16 off, or too few
// rows), where each product reads x itself.
func shareBF16A(p *pool, in *bf16Input, bf16, ta bool, x []float32, lda, m, k int) *bf16Input {
	op := gemmOp{ta: ta, m: m, k: k, a: x, lda: lda, bf16: bf16}
	if !op.inBF16() {
		return nil
	}
	// Parallel as a product of gemmNC columns would be (the sharing
	// products' n is theirs to know).
	run := poolRunner(p, m*k*gemmNC >= parallelMinWork)
	in.a, in.ars, in.aks = bf16ConvertA(bf16Kern(), &op, in.a, run)
	in.m, in.k, in.ta, in.x = m, k, ta, &x[0]
	return in
}

// bf16Runner runs fn over [0, n) in chunks of about grain, each with a
// workspace: on the pool, or on one worker.
type bf16Runner func(n, grain int, fn func(ws *workspace, lo, hi int))

// poolRunner is a bf16Runner on p: in chunks over its workers when
// parallel, else all on one worker.
func poolRunner(p *pool, parallel bool) bf16Runner {
	if parallel {
		return func(n, grain int, fn func(ws *workspace, lo, hi int)) {
			p.chunks(n, grain, func(w, lo, hi int) { fn(&p.ws[w], lo, hi) })
		}
	}
	return func(n, _ int, fn func(ws *workspace, lo, hi int)) { p.run(1, func(w, _ int) { fn(&p.ws[w], 0, n) }) }
}

// bf16Convert converts op's A and B into a and b (grown as needed): A by
// bf16ConvertA, unless op.bf16A holds it converted; B into panels, from
// pairs of rows, or when transposed from each stored row (one column's
// pairs).
//
// With op.bf16B set, B is taken from it as it is.
func bf16Convert(bk *bf16Kernels, op *gemmOp, a, b []uint32, run bf16Runner) bf16Operands {
	m, k := op.m, op.k
	kp := (k + 1) / 2
	cv := bf16Operands{kp: kp, mp: (m + bk.mr - 1) / bk.mr * bk.mr}
	if in := op.bf16A; in != nil {
		if in.m != m || in.k != k || in.ta != op.ta || len(op.a) == 0 || in.x != &op.a[0] {
			panic("native: a shared bf16 A used by a product of another A")
		}
		cv.a, cv.ars, cv.aks = in.a, in.ars, in.aks
	} else {
		cv.a, cv.ars, cv.aks = bf16ConvertA(bk, op, a, run)
	}
	if op.bf16B != nil {
		cv.b, cv.bStride = op.bf16B.b, op.bf16B.stride
		return cv
	}
	cv.b, cv.bStride = bf16ConvertB(bk, op, b, run), kp
	return cv
}

// bf16ConvertA converts op's A into a (grown as needed) for the
// micro-kernel and returns it with its row and pair strides: row-major
// when op stores it as is (its rows' pairs are adjacent), else into
// panels of mr rows from pairs of stored rows.
func bf16ConvertA(bk *bf16Kernels, op *gemmOp, a []uint32, run bf16Runner) (_ []uint32, ars, aks int) {
	mr := bk.mr
	m, k := op.m, op.k
	kp := (k + 1) / 2
	mp := (m + mr - 1) / mr * mr
	a = growU32(a, mp*kp)

	if op.ta && bk.rowA {
		return bf16RowsFromColumns(bk, op, a, run), kp, 1
	}
	if !op.ta {
		ars, aks = kp, 1
		run(mp, 32, func(_ *workspace, lo, hi int) {
			for i := lo; i < hi; i++ {
				row := a[i*kp : (i+1)*kp]
				if i >= m {
					clear(row)
					continue
				}
				h := unsafe.Slice((*uint16)(unsafe.Pointer(&row[0])), 2*kp)
				bk.cvt(h[:k], op.a[i*op.lda:i*op.lda+k])
				if k%2 == 1 {
					h[k] = 0
				}
			}
		})
	} else {
		// A(i, kk) = op.a[kk*lda + i]: pair q of rows [p*mr, p*mr+mr) is
		// the run a[p*mr*kp + q*mr:][:mr], read by the micro-kernel in one
		// load. (Rows mp pairs apart, as a stored transposed A suggests,
		// put a tile's k pairs a multiple of 4 KB apart whenever mp is a
		// multiple of 1,024, all in one set of the L1 cache: 10-20% slower
		// products.) Converted in blocks of bf16PanelQ pairs of stored
		// rows, two panels at a time: each panel gets whole cache lines
		// from a block, while the rows are read in order.
		ars, aks = 1, mr
		panels, stride := mp/mr, kp*mr
		run((kp+bf16PanelQ-1)/bf16PanelQ, 1, func(_ *workspace, lo, hi int) {
			for q0 := lo * bf16PanelQ; q0 < min(kp, hi*bf16PanelQ); q0 += bf16PanelQ {
				q1 := min(kp, q0+bf16PanelQ)
				whole := min(q1, k/2) // pairs of two stored rows
				for p := 0; p < panels; p += 2 {
					from := q0 // the first pair left to the scalar code
					if (p+2)*mr <= m && whole > q0 {
						bk.cvtPanelsA(whole-q0, op.a[2*q0*op.lda+p*mr:], op.lda, a[p*stride+q0*mr:], stride)
						from = whole
					}
					for q := from; q < q1; q++ {
						r0 := op.a[2*q*op.lda:]
						var r1 []float32
						if 2*q+1 < k {
							r1 = op.a[(2*q+1)*op.lda:]
						}
						for pp := p; pp < min(p+2, panels); pp++ {
							d := a[pp*stride+q*mr : pp*stride+q*mr+mr]
							for r := range mr {
								var v uint32
								if i := pp*mr + r; i < m {
									v = uint32(toBF16(r0[i]))
									if r1 != nil {
										v |= uint32(toBF16(r1[i])) << 16
									}
								}
								d[r] = v
							}
						}
					}
				}
			}
		})
	}
	return a, ars, aks
}

// bf16RowsFromColumns converts a transposed A (A(i, kk) = op.a[kk*lda +
// i]) into rows of pairs in a (mp rows of kp, rows past m zero), for a
// kernel that reads A row-major (rowA): first each pair of stored rows
// into one run of pairs (cvtPairs over the whole row: pair q of every A
// row, a [kp, mp] scratch), then the scratch transposed into the rows, 16
// at a time (bk.transpose).
func bf16RowsFromColumns(bk *bf16Kernels, op *gemmOp, a []uint32, run bf16Runner) []uint32 {
	const w = 16
	m, k := op.m, op.k
	kp := (k + 1) / 2
	mp := (m + bk.mr - 1) / bk.mr * bk.mr
	sp := bf16Scratch.Get().(*[]uint32)
	defer bf16Scratch.Put(sp)
	*sp = growU32(*sp, kp*mp)
	cols := *sp
	run(kp, 8, func(_ *workspace, lo, hi int) {
		for q := lo; q < hi; q++ {
			d := cols[q*mp : (q+1)*mp]
			r0 := op.a[2*q*op.lda : 2*q*op.lda+m]
			if 2*q+1 < k {
				bk.cvtPairs(d[:m], r0, op.a[(2*q+1)*op.lda:(2*q+1)*op.lda+m])
			} else {
				for i, v := range r0 {
					d[i] = uint32(toBF16(v))
				}
			}
			clear(d[m:])
		}
	})
	run(mp/w, 1, func(_ *workspace, lo, hi int) {
		for p := lo; p < hi; p++ {
			bk.transpose(a[p*w*kp:(p+1)*w*kp], kp, cols[p*w:], mp, kp, w)
		}
	})
	return a
}

// bf16Scratch holds bf16RowsFromColumns' scratch between products.
var bf16Scratch = sync.Pool{New: func() any { return new([]uint32) }}

// bf16ConvertB converts op's B into panels in b (grown as needed): from
// pairs of rows, or when transposed from each stored row (one column's
// pairs).
func bf16ConvertB(bk *bf16Kernels, op *gemmOp, b []uint32, run bf16Runner) []uint32 {
	nr := bk.nr
	n, k := op.n, op.k
	kp := (k + 1) / 2
	panels := (n + nr - 1) / nr
	b = growU32(b, panels*kp*nr)
	if op.bh != nil {
		bf16PanelsHalf(bk, op, b, nr, run)
		return b
	}
	if !op.tb {
		run(kp, 8, func(_ *workspace, lo, hi int) {
			for q := lo; q < hi; q++ {
				r0 := op.b[2*q*op.ldb : 2*q*op.ldb+n]
				var r1 []float32
				if 2*q+1 < k {
					r1 = op.b[(2*q+1)*op.ldb : (2*q+1)*op.ldb+n]
				}
				first := 0
				if r1 != nil && n >= nr {
					first = n / nr
					bk.cvtPanels(first, r0, r1, b[q*nr:], kp*nr)
				}
				for jp := first; jp < panels; jp++ {
					j0 := jp * nr
					w := min(nr, n-j0)
					dst := b[(jp*kp+q)*nr : (jp*kp+q)*nr+nr]
					for jj := range w {
						v := uint32(toBF16(r0[j0+jj]))
						if r1 != nil {
							v |= uint32(toBF16(r1[j0+jj])) << 16
						}
						dst[jj] = v
					}
					clear(dst[w:])
				}
			}
		})
	} else {
		// B(kk, j) = b[j*ldb + kk]: row j of the stored matrix, converted,
		// is column j's kp pairs: a panel's nr rows converted (zero past
		// n), then transposed into the panel.
		run(panels, 1, func(ws *workspace, lo, hi int) {
			ws.bf16Row = growU32(ws.bf16Row, nr*kp)
			rows := ws.bf16Row
			for jp := lo; jp < hi; jp++ {
				wd := min(nr, n-jp*nr)
				for jj := range nr {
					row := rows[jj*kp : (jj+1)*kp]
					if jj >= wd {
						clear(row)
						continue
					}
					j := jp*nr + jj
					h := unsafe.Slice((*uint16)(unsafe.Pointer(&row[0])), 2*kp)
					bk.cvt(h[:k], op.b[j*op.ldb:j*op.ldb+k])
					if k%2 == 1 {
						h[k] = 0
					}
				}
				bk.transpose(b[jp*kp*nr:(jp+1)*kp*nr], nr, rows, kp, nr, kp)
			}
		})
	}
	return b
}

// bf16PanelsHalf is bf16ConvertB for a B stored in bfloat16 (op.bh): its
// values are paired into the panels as they are, no rounding. A whole
// panel of a B stored as is pairs two rows' runs (pairsHalf); of a
// transposed B stored with an even row length, each stored row already
// holds its column's pairs as uint32s, and the panel is their transpose
// (bk.transpose). Ragged panels go one value at a time.
func bf16PanelsHalf(bk *bf16Kernels, op *gemmOp, b []uint32, nr int, run bf16Runner) {
	n, k := op.n, op.k
	kp := (k + 1) / 2
	panels := (n + nr - 1) / nr
	at := func(kk, j int) uint32 {
		if kk >= k {
			return 0
		}
		if op.tb {
			return uint32(op.bh[j*op.ldb+kk])
		}
		return uint32(op.bh[kk*op.ldb+j])
	}
	pairedRows := op.tb && k%2 == 0 && op.ldb%2 == 0
	run(panels, 1, func(_ *workspace, lo, hi int) {
		for jp := lo; jp < hi; jp++ {
			j0 := jp * nr
			w := min(nr, n-j0)
			if w == nr && pairedRows {
				rows := unsafe.Slice((*uint32)(unsafe.Pointer(&op.bh[j0*op.ldb])), (nr-1)*op.ldb/2+kp)
				bk.transpose(b[jp*kp*nr:(jp+1)*kp*nr], nr, rows, op.ldb/2, nr, kp)
				continue
			}
			for q := range kp {
				dst := b[(jp*kp+q)*nr : (jp*kp+q)*nr+nr]
				if w == nr && !op.tb && 2*q+1 < k {
					pairsHalf(dst, op.bh[2*q*op.ldb+j0:2*q*op.ldb+j0+nr], op.bh[(2*q+1)*op.ldb+j0:(2*q+1)*op.ldb+j0+nr])
					continue
				}
				for jj := range w {
					j := j0 + jj
					dst[jj] = at(2*q, j) | at(2*q+1, j)<<16
				}
				clear(dst[w:])
			}
		}
	})
}

// pairsHalf sets dst[i] = r0[i] | r1[i]<<16 for i < len(dst): two rows of
// bfloat16 into pairs (a vector loop where the CPU has one:
// bf16_amd64.go).
var pairsHalf = func(dst []uint32, r0, r1 []uint16) {
	for i := range dst {
		dst[i] = uint32(r0[i]) | uint32(r1[i])<<16
	}
}

// bf16Tile computes rows [i0,i1) x columns [j0,j1) of C from cv, in k
// blocks of gemmBF16KP pairs; ragged tiles go through ws.tile.
func bf16Tile(ws *workspace, bk *bf16Kernels, op gemmOp, cv bf16Operands, i0, i1, j0, j1 int) {
	mr, nr := bk.mr, bk.nr
	kp, ars, aks := cv.kp, cv.ars, cv.aks
	ws.tile = grow(ws.tile, mr*nr)
	for q0 := 0; q0 < kp; q0 += gemmBF16KP {
		kb := min(gemmBF16KP, kp-q0)
		acc := op.acc || q0 > 0 || op.starts()
		for j := j0; j < j1; j += nr {
			wd := min(nr, j1-j)
			bs := cv.b[(j/nr)*cv.bStride*nr+q0*nr:]
			for i := i0; i < i1; i += mr {
				h := min(mr, i1-i)
				as := cv.a[i*kp+q0*aks:] // i is a multiple of mr: its tile's rows (bf16Operands)
				if q0 == 0 && op.starts() {
					op.fillBias(i, h, j, wd)
				}
				if h == mr && wd == nr {
					bk.micro(kb, as, ars, aks, bs, nr, op.c[i*op.ldc+j:], op.ldc, acc)
					continue
				}
				bk.micro(kb, as, ars, aks, bs, nr, ws.tile, nr, false)
				storeRows(op.c[i*op.ldc+j:], op.ldc, ws.tile, nr, h, wd, acc)
			}
		}
	}
}

// gemmBF16 is gemm with bf16 inputs (bf16Convert on the pool into its
// shared buffers), tiles of C split as gemm splits them, each a float32
// sum.
func gemmBF16(p *pool, op *gemmOp) {
	bk := bf16Kern()
	work := op.m * op.n * op.k
	run := poolRunner(p, work >= parallelMinWork)
	p.gemmMu.Lock()
	defer p.gemmMu.Unlock()
	cv := bf16Convert(bk, op, p.bf16A, p.bf16B, run)
	if op.bf16A == nil {
		p.bf16A = cv.a
	}
	if op.bf16B == nil {
		p.bf16B = cv.b
	}

	mc, nc, mt, nt := tileSplit(op.m, op.n, bk.mr)
	p.runWork(mt*nt, work, func(w, t int) {
		i0, j0 := (t/nt)*mc, (t%nt)*nc
		bf16Tile(&p.ws[w], bk, *op, cv, i0, min(op.m, i0+mc), j0, min(op.n, j0+nc))
	})
}

// gemmBF16Serial is gemmBF16 on the calling worker (inside a pool task:
// attention), converting into the worker's own buffers.
func gemmBF16Serial(ws *workspace, op *gemmOp) {
	bk := bf16Kern()
	cv := bf16Convert(bk, op, ws.bf16A, ws.bf16B, func(n, _ int, fn func(*workspace, int, int)) { fn(ws, 0, n) })
	if op.bf16A == nil {
		ws.bf16A = cv.a
	}
	if op.bf16B == nil {
		ws.bf16B = cv.b
	}
	mc := blockRows(bk.mr)
	for i0 := 0; i0 < op.m; i0 += mc {
		for j0 := 0; j0 < op.n; j0 += gemmNC {
			bf16Tile(ws, bk, *op, cv, i0, min(op.m, i0+mc), j0, min(op.n, j0+gemmNC))
		}
	}
}

// growU32 is grow for []uint32.
func growU32(s []uint32, n int) []uint32 {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]uint32, n, n+n/2)
}

// attnPanels converts a head's n rows of keys or values (dh values each,
// row stride ld) once for all of its query blocks' bf16 products: tbSrc as
// a transposed B (scores Q·Kᵀ, dP = dO·Vᵀ: one column per row) and nbSrc
// as a B (P·V, dS·K: k runs over the rows). Converting them per block
// would convert the first rows once for every block (the causal blocks
// see keys [0, r1)).
func attnPanels(ws *workspace, tbSrc, nbSrc []float32, ld, n, dh int) (tb, nb *bf16Panels) {
	bk := bf16Kern()
	serial := func(n, _ int, fn func(*workspace, int, int)) { fn(ws, 0, n) }
	ws.op = gemmOp{tb: true, n: n, k: dh, b: tbSrc, ldb: ld}
	ws.attT.b = bf16ConvertB(bk, &ws.op, ws.attT.b, serial)
	ws.attT.stride = (dh + 1) / 2
	ws.op = gemmOp{n: dh, k: n, b: nbSrc, ldb: ld}
	ws.attB.b = bf16ConvertB(bk, &ws.op, ws.attB.b, serial)
	ws.attB.stride = (n + 1) / 2
	ws.op = gemmOp{}
	return &ws.attT, &ws.attB
}
