package diversity

// The similarity kernels. Select needs two products:
//
//   - dot: one float32 dot product (the first pick, norms, the first
//     pass against the first pick);
//   - panels: one row (or four) against w consecutive kept vectors at
//     once. The kept vectors are stored transposed (dimension-major,
//     b[kk*ldb+j] is dimension kk of kept vector j), so a panel is an
//     outer-product loop: for each dimension, broadcast the row's value
//     and multiply-add it into w column accumulators. No horizontal sums,
//     and the kept vectors stay in cache while rows stream past.
//
// Within a kernel set, row1 and row4 sum each column in the same order
// (one multiply-add per dimension, in order), so a similarity does not
// depend on which of them computed it, nor therefore on how Select batches
// rows across its workers. dot sums in another order; the sets differ
// from each other in rounding (fused or separate multiply-adds).
//
// kernelSet bundles one instruction set's versions; kern is the best the
// CPU has (set in dot_simd.go), genericKernels the portable fallback.
type kernelSet struct {
	name string
	dot  func(a, b []float32) float32
	// row1 sets out[c] = sum_kk a[kk]*b[kk*ldb+lo+c] for c < w1.
	w1   int
	row1 func(a, b []float32, ldb, lo int, out []float32)
	// row4 does the same for four rows, row r into out[r*w4 : (r+1)*w4].
	w4   int
	row4 func(a0, a1, a2, a3, b []float32, ldb, lo int, out []float32)
}

// genericKernels is the portable fallback; panels are 16 columns wide.
var genericKernels = kernelSet{name: "generic", dot: dotGeneric, w1: 16, row1: row1Generic, w4: 16, row4: row4Generic}

// kern is the kernel set Select uses (the fastest the CPU supports).
var kern = &genericKernels

// kernelSets lists every kernel set this CPU can run, fastest first; the
// tests check them against each other.
var kernelSets = []*kernelSet{&genericKernels}

// dot is the float32 dot product of two equal-length vectors.
func dot(a, b []float32) float32 { return kern.dot(a, b) }

// maxPanel is the widest panel of any kernel set: the transposed kept
// matrix carries this many zero columns of padding so that a panel
// starting at any kept column stays inside it.
const maxPanel = 64

// checkPanel panics unless a panel of width w starting at column lo fits
// in b for rows of dimension d (the SIMD kernels then skip bounds checks).
// Dimension 0 needs no columns (every product is 0).
func checkPanel(d int, b []float32, ldb, lo, w int) {
	if d == 0 {
		return
	}
	if d < 0 || lo < 0 || lo+w > ldb || len(b) < (d-1)*ldb+lo+w {
		panic("diversity: similarity panel out of range")
	}
}

// dotGeneric is the portable float32 dot product: 8-way unrolled with four
// independent accumulators so the loads and adds pipeline.
func dotGeneric(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+8 <= n; i += 8 {
		aa, bb := a[i:i+8:i+8], b[i:i+8:i+8]
		s0 += aa[0]*bb[0] + aa[4]*bb[4]
		s1 += aa[1]*bb[1] + aa[5]*bb[5]
		s2 += aa[2]*bb[2] + aa[6]*bb[6]
		s3 += aa[3]*bb[3] + aa[7]*bb[7]
	}
	for ; i < n; i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// row1Generic is row1 for 16 columns with the accumulators in locals.
func row1Generic(a, b []float32, ldb, lo int, out []float32) {
	checkPanel(len(a), b, ldb, lo, 16)
	var c [16]float32
	for kk, x := range a {
		bb := (*[16]float32)(b[kk*ldb+lo:])
		for j := range c {
			c[j] += x * bb[j]
		}
	}
	copy(out[:16], c[:])
}

// row4Generic is row4 for 16 columns.
func row4Generic(a0, a1, a2, a3, b []float32, ldb, lo int, out []float32) {
	d := len(a0)
	checkPanel(d, b, ldb, lo, 16)
	a1, a2, a3 = a1[:d], a2[:d], a3[:d]
	var c0, c1, c2, c3 [16]float32
	for kk := range d {
		bb := (*[16]float32)(b[kk*ldb+lo:])
		x0, x1, x2, x3 := a0[kk], a1[kk], a2[kk], a3[kk]
		for j, v := range bb {
			c0[j] += x0 * v
			c1[j] += x1 * v
			c2[j] += x2 * v
			c3[j] += x3 * v
		}
	}
	copy(out[0:16], c0[:])
	copy(out[16:32], c1[:])
	copy(out[32:48], c2[:])
	copy(out[48:64], c3[:])
}

// axpy adds alpha*x to y.
func axpy(alpha float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += alpha * v
	}
}
