package native

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"sync"

	"golang.org/x/sys/cpu"
)

// kernels is one implementation of the inner loops everything else is
// built from. The portable one (genericKernels) is plain Go; with
// GOEXPERIMENT=simd on amd64, kernels_simd_amd64.go adds AVX-512 and AVX2
// ones. Every vector kernel clears the upper AVX register halves before it
// returns (see kernels_simd_amd64.go for why).
type kernels struct {
	name string
	// mr x nr is the register tile of micro.
	mr, nr int
	// kc is the k block of the products through micro: each tile of C is
	// summed over kc values of k at a time, from zero in the registers,
	// then added to C (so the bits of a product depend on kc, and a
	// kernel's kc is fixed). The generic and AVX-512 kernels use 128;
	// the AVX2 one 256 (kernels_simd_amd64.go).
	kc int
	// packStrips copies rows rows of strips*nr values of src (row stride
	// ld) into strips of nr columns in dst: strip s at dst[s*stride:],
	// row kk at kk*nr within it (packing B for micro).
	packStrips func(dst []float32, stride int, src []float32, ld, rows, strips int)
	// micro computes an mr x nr tile: C = A·B (+ C when acc), A(i, k) at
	// a[i*ars + k*aks], B kc rows of nr values with stride ldb.
	micro func(kc int, a []float32, ars, aks int, b []float32, ldb int, c []float32, ldc int, acc bool)
	// wide, when not nil, is micro for an mrw x nrw tile, used for
	// products of at most gemmSmallM rows whose B is read in place
	// (decoding, B the weights): its strips are wider, so each visit to a
	// row of B reads more of it; streaming a 16 MB set of weights at 8
	// rows it ran at 15-19 GB/s where micro ran at 8-11 (AVX-512, Zen 5).
	wide     func(kc int, a []float32, ars, aks int, b []float32, ldb int, c []float32, ldc int, acc bool)
	mrw, nrw int
	// gemv computes y = x·B (+ y when acc) for one row x of len(x) values
	// and B of len(x) rows of len(y) values with stride ldb: decoding one
	// sequence, where streaming the weights once is all that matters.
	gemv func(x, b []float32, ldb int, y []float32, acc bool)
	// dot returns sum a[i]*b[i] over len(a) (b at least as long).
	dot func(a, b []float32) float32
	// axpy adds alpha*x to y (len(y) <= len(x)).
	axpy func(y []float32, alpha float32, x []float32)
	// scale multiplies x by s.
	scale func(x []float32, s float32)
	// max returns the largest element of a non-empty x.
	max func(x []float32) float32
	// expShift sets x[i] = exp((x[i]-shift)*mul) and returns their sum.
	expShift func(x []float32, shift, mul float32) float32
	// gelu sets out[i] = GELU(in[i]) (exact, erf-based).
	gelu func(out, in []float32)
	// geluBackward sets dIn[i] = dOut[i] * GELU'(in[i]).
	geluBackward func(dIn, dOut, in []float32)
	// adamw is one AdamW update of w, m, v from g (adamwGeneric).
	adamw func(w, g, m, v []float32, s adamwStep)
	// lnForward normalises one row x into out (lnForwardGeneric) and
	// returns its mean and 1/std; lnBackward is that row's backward pass
	// (lnBackwardGeneric).
	lnForward  func(out, x, gain, offset []float32) (mu, r float32)
	lnBackward func(dx, dGain, dOffset, dOut, x, gain []float32, mu, r float32)
	// rope rotates the pairs (a[j], b[j]) by the angles whose cosines and
	// sines are c[j], s[j] (by their negatives when inverse), with the
	// bits of ropeGeneric.
	rope func(a, b, c, s []float32, inverse bool)
	// softmaxGrad sets d[j] = p[j]*(d[j]-delta)*scale over len(p), with
	// the bits of softmaxGradGeneric (the attention's dS).
	softmaxGrad func(d, p []float32, delta, scale float32)
	// rmsForward normalises one row x into out (rmsForwardGeneric) and
	// returns its 1/rms; rmsBackward is that row's backward pass
	// (rmsBackwardGeneric).
	rmsForward  func(out, x, gain []float32, eps float64) float32
	rmsBackward func(dx, dGain, dOut, x, gain []float32, r float32)
	// swiglu sets out[i] = silu(gate[i])*up[i]; swigluBackward is its
	// backward pass (swigluGeneric, swigluBackwardGeneric).
	swiglu         func(out, gate, up []float32)
	swigluBackward func(dGate, dUp, dOut, gate, up []float32)
	// qgemv computes y[r*ldy + j] = x_r · (row j0+j of q, dequantized)
	// (+ y when acc) for j < n, r < rows, x_r at x[r*ldx:]: a product of
	// a few rows with B in quantized blocks (gemvQuant), ws its scratch;
	// for Q4_1, sx holds each x_r's block sums (qBlockSums, stride
	// qsxStride). The vector kernels multiply by the blocks, summing in
	// another order than qgemvGeneric, within QuantTolerance of it; each
	// is deterministic, and an output's bits do not depend on rows, j0 or
	// n.
	qgemv func(ws *workspace, q *qmat, j0, n int, x []float32, ldx, rows int, sx []float32, y []float32, ldy int, acc bool)
	// qdequant sets dst to blocks [b0, b1) of row j of q dequantized,
	// the values of dequantRange bit for bit; qtranspose, when not nil,
	// is transposeF32 for rows a multiple of 16 and cols of 32 (the
	// panels of gemmQuantPanels).
	qdequant   func(q *qmat, dst []float32, j, b0, b1 int)
	qtranspose func(dst, src []float32, rows, cols int)
	// qgemv8 is qgemv with the input quantized to int8 (quant8.go):
	// y[r*ldy + j] for the in.rows rows of in; qgemv8Native tells that it
	// runs on integer dot-product instructions.
	qgemv8       func(ws *workspace, q *qmat, j0, n int, in *q8Input, y []float32, ldy int, acc bool)
	qgemv8Native bool
	// qprep8, when not nil, lays a quantized input out for qgemv8 and a
	// matrix of format typ, once per product.
	qprep8 func(in *q8Input, typ quantType)
	// quant8, when not nil, is quantizeInput8's loop for one row x of
	// whole blocks into q, dx, sxq and sum (the same values).
	quant8 func(x []float32, q []int8, dx, sxq []float32, sum []int32)
}

var genericKernels = &kernels{
	name: "generic", mr: 4, nr: 8, kc: 128, packStrips: packStrips8,
	micro: microGeneric, gemv: gemvGeneric, dot: dotGeneric, axpy: axpyGeneric, scale: scaleGeneric,
	max: maxGeneric, expShift: expShiftGeneric,
	gelu: geluGeneric, geluBackward: geluBackwardGeneric, adamw: adamwGeneric,
	lnForward: lnForwardGeneric, lnBackward: lnBackwardGeneric, rope: ropeGeneric,
	softmaxGrad: softmaxGradGeneric,
	rmsForward:  rmsForwardGeneric, rmsBackward: rmsBackwardGeneric,
	swiglu: swigluGeneric, swigluBackward: swigluBackwardGeneric,
	qgemv: qgemvGeneric, qdequant: qdequantGeneric, qgemv8: qgemv8Generic,
}

// simdKernels lists the vector kernels this build and CPU support, best
// first; kernels_simd_amd64.go fills it in its init.
var simdKernels []*kernels

// KernelEnv names the environment variable that forces a kernel path:
// "avx512", "avx2" or "generic". Unset, the best available one is used.
const KernelEnv = "MLERL_NATIVE_KERNEL"

var (
	kern        = genericKernels // the kernels in use
	kernOnce    sync.Once
	kernInitErr error
)

// availableKernels lists every kernel set usable here, best first.
func availableKernels() []*kernels {
	return append(append([]*kernels{}, simdKernels...), genericKernels)
}

// selectKernels picks the kernels once per process: the one named by
// MLERL_NATIVE_KERNEL if set, else the best available.
func selectKernels() error {
	kernOnce.Do(func() {
		all := availableKernels()
		want := strings.ToLower(strings.TrimSpace(os.Getenv(KernelEnv)))
		if want == "" {
			kern = all[0]
			return
		}
		var names []string
		for _, k := range all {
			if k.name == want {
				kern = k
				return
			}
			names = append(names, k.name)
		}
		kernInitErr = fmt.Errorf("native: %s=%q is not available in this build on this CPU (available: %s; AVX kernels need GOEXPERIMENT=simd on amd64)",
			KernelEnv, want, strings.Join(names, ", "))
	})
	return kernInitErr
}

// KernelName names the kernel path in use: "avx512", "avx2" or "generic".
func KernelName() string {
	_ = selectKernels()
	return kern.name
}

func microGeneric(kc int, a []float32, ars, aks int, b []float32, ldb int, c []float32, ldc int, acc bool) {
	const mr, nr = 4, 8
	var t [mr][nr]float32
	for k := 0; k < kc; k++ {
		bk := b[k*ldb : k*ldb+nr : k*ldb+nr]
		for i := range mr {
			ai := a[i*ars+k*aks]
			ti := &t[i]
			ti[0] += ai * bk[0]
			ti[1] += ai * bk[1]
			ti[2] += ai * bk[2]
			ti[3] += ai * bk[3]
			ti[4] += ai * bk[4]
			ti[5] += ai * bk[5]
			ti[6] += ai * bk[6]
			ti[7] += ai * bk[7]
		}
	}
	for i := range mr {
		storeRows(c[i*ldc:], ldc, t[i][:], nr, 1, nr, acc)
	}
}

func gemvGeneric(x, b []float32, ldb int, y []float32, acc bool) {
	if !acc {
		clear(y)
	}
	for k, xk := range x {
		axpyGeneric(y, xk, b[k*ldb:])
	}
}

func dotGeneric(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func axpyGeneric(y []float32, alpha float32, x []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += alpha * x[i]
	}
}

func scaleGeneric(x []float32, s float32) {
	for i := range x {
		x[i] *= s
	}
}

func maxGeneric(x []float32) float32 {
	m := x[0]
	for _, v := range x[1:] {
		m = max(m, v)
	}
	return m
}

func expShiftGeneric(x []float32, shift, mul float32) float32 {
	var s float32
	for i, v := range x {
		e := expf((v - shift) * mul)
		x[i] = e
		s += e
	}
	return s
}

func geluGeneric(out, in []float32) {
	in = in[:len(out)]
	for i, x := range in {
		out[i] = 0.5 * x * erfcf(-x*invSqrt2)
	}
}

func geluBackwardGeneric(dIn, dOut, in []float32) {
	dOut, in = dOut[:len(dIn)], in[:len(dIn)]
	for i, x := range in {
		d := 0.5*erfcf(-x*invSqrt2) + x*invSqrt2Pi*expf(-0.5*x*x)
		dIn[i] = dOut[i] * d
	}
}

// Constants of the exp and erfc approximations shared by every kernel path.
const (
	invSqrt2   = 0.70710678118654752440
	invSqrt2Pi = 0.39894228040143267794
	log2e      = 1.44269504088896340736
	// ln 2 split in a part exact in float32 and a correction
	// (Cody-Waite), so n*ln2Hi is exact for the n we meet.
	ln2Hi = 0.693359375
	ln2Lo = -2.12194440e-4
	// expf flushes results below ~1.2e-38 to 0 and overflows above.
	expMin = -87.33654
	expMax = 88.72284
	// Minimax polynomial for exp(r)-1-r on |r| <= ln2/2 (Cephes expf).
	expP0 = 1.9875691500e-4
	expP1 = 1.3981999507e-3
	expP2 = 8.3334519073e-3
	expP3 = 4.1665795894e-2
	expP4 = 1.6666665459e-1
	expP5 = 5.0000001201e-1
)

// expf is a float32 exp accurate to about 1 ulp: exp(x) = 2^n * exp(r)
// with n = round(x/ln2), |r| <= ln2/2, and a degree-7 polynomial for
// exp(r). It returns 0 below expMin (including -Inf) and +Inf above expMax.
// The vector kernels compute the same steps.
func expf(x float32) float32 {
	switch {
	case x != x:
		return x
	case x < expMin:
		return 0
	case x > expMax:
		return float32(math.Inf(1))
	}
	n := float32(math.Floor(float64(x*log2e) + 0.5))
	r := x - n*ln2Hi
	r -= n * ln2Lo
	p := float32(expP0)
	p = p*r + expP1
	p = p*r + expP2
	p = p*r + expP3
	p = p*r + expP4
	p = p*r + expP5
	p = p*r*r + r + 1
	// n is in [-126, 128]; 2^128 is not a float32, so scale in two steps.
	ni := int32(n)
	h := ni >> 1
	return p * math.Float32frombits(uint32(h+127)<<23) * math.Float32frombits(uint32(ni-h+127)<<23)
}

// erfcf is the complementary error function to about 1.2e-7 relative
// error everywhere (the Chebyshev-fitted form erfc(z) = t*exp(-z²+P(t)),
// t = 1/(1+z/2), Numerical Recipes §6.2), with erfc(-z) = 2-erfc(z). GELU
// uses it as 0.5*x*erfc(-x/√2), which keeps full relative accuracy in
// both tails.
func erfcf(z float32) float32 {
	a := z
	if a < 0 {
		a = -a
	}
	t := 1 / (1 + 0.5*a)
	y := t * expf(-a*a+erfcPoly(t))
	if z < 0 {
		return 2 - y
	}
	return y
}

func erfcPoly(t float32) float32 {
	p := float32(erfcC9)
	p = p*t + erfcC8
	p = p*t + erfcC7
	p = p*t + erfcC6
	p = p*t + erfcC5
	p = p*t + erfcC4
	p = p*t + erfcC3
	p = p*t + erfcC2
	p = p*t + erfcC1
	return p*t + erfcC0
}

// Coefficients of P(t) in erfcf.
const (
	erfcC0 = -1.26551223
	erfcC1 = 1.00002368
	erfcC2 = 0.37409196
	erfcC3 = 0.09678418
	erfcC4 = -0.18628806
	erfcC5 = 0.27886807
	erfcC6 = -1.13520398
	erfcC7 = 1.48851587
	erfcC8 = -0.82215223
	erfcC9 = 0.17087277
)

// SlowBuild returns one line when this process runs the portable kernels
// on a CPU the vector kernels would run on because the binary was built
// without them (a plain `go build`, without the GOEXPERIMENT=simd that
// `make build` sets): training and generation are then many times slower
// with the same results in float32. It returns "" otherwise, also when
// MLERL_NATIVE_KERNEL chose the portable kernels on purpose.
func SlowBuild() string {
	if KernelName() != genericKernels.name || len(simdKernels) > 0 || os.Getenv(KernelEnv) != "" {
		return ""
	}
	if runtime.GOARCH != "amd64" || !cpu.X86.HasAVX2 || !cpu.X86.HasFMA {
		return ""
	}
	return "native: this binary was built without GOEXPERIMENT=simd, so the CPU's AVX2 kernels are left out and the portable Go kernels run (tens of times slower here); build it with `make build` or `GOEXPERIMENT=simd go build ./cmd/mlerl`"
}
