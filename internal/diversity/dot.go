package diversity

// The similarity kernels. Select needs two products:
//
//   - dot: one float32 dot product (norms, the first pick, the first pass
//     against the first pick);
//   - panels: four rows against w kept vectors at once. The kept vectors
//     are stored in panels of w, each panel dimension-major (b[kk*w+c] is
//     dimension kk of the panel's vector c, w*d floats contiguous), so a
//     panel product is an outer-product loop that streams the panel once:
//     for each dimension, broadcast the four rows' values and multiply-add
//     them into 4 x w column accumulators. No horizontal sums, and the
//     kept vectors stay in cache while rows stream past.
//
// A panel column's sum runs over the dimensions in order, whichever rows
// share the call, so a similarity does not depend on how Select batches
// rows across its workers. dot sums in another order; the kernel sets
// differ from each other in rounding (fused or separate multiply-adds).
//
// kernelSet bundles one instruction set's versions; kern is the best the
// CPU has (set in dot_simd.go), genericKernels the portable fallback.
type kernelSet struct {
	name string
	dot  func(a, b []float32) float32
	// w is the panel width. row4 sets out[r*w+c] = sum_kk ar[kk]*b[kk*w+c]
	// for the four rows a0..a3 of equal dimension d and c < w; b holds
	// d*w floats.
	w    int
	row4 func(a0, a1, a2, a3, b []float32, out []float32)
}

// genericKernels is the portable fallback; panels are 16 columns wide.
var genericKernels = kernelSet{name: "generic", dot: dotGeneric, w: 16, row4: row4Generic}

// kern is the kernel set Select uses (the fastest the CPU supports).
var kern = &genericKernels

// kernelSets lists every kernel set this CPU can run, fastest first; the
// tests check them against each other.
var kernelSets = []*kernelSet{&genericKernels}

// dot is the float32 dot product of two equal-length vectors.
func dot(a, b []float32) float32 { return kern.dot(a, b) }

// maxPanel is the widest panel of any kernel set.
const maxPanel = 32

// checkPanel panics unless four rows of dimension d, a panel of width w
// and the output fit (the SIMD kernels then skip bounds checks).
func checkPanel(a0, a1, a2, a3, b, out []float32, w int) {
	d := len(a0)
	if len(a1) != d || len(a2) != d || len(a3) != d || len(b) < d*w || len(out) < 4*w {
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

// row4Generic is row4 for 16 columns.
func row4Generic(a0, a1, a2, a3, b []float32, out []float32) {
	checkPanel(a0, a1, a2, a3, b, out, 16)
	var c0, c1, c2, c3 [16]float32
	for kk := range a0 {
		bb := (*[16]float32)(b[kk*16:])
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
