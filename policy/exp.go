package policy

import (
	"math"
	"math/rand/v2"
	"sync"
)

// expSub sets dst[k] = math.Exp(x[k] - c) for every k of x, bit for bit.
// The sampler exponentiates every allowed logit twice per token (Qwen3:
// 151,936 ids), and math.Exp's call into assembly per value was most of
// that time. Where exactExp found that math.Exp is exp_amd64.s's fused
// multiply-add algorithm (amd64 with FMA), expSub runs that algorithm
// in a loop instead (expSubFMA: the same operations, so the same
// roundings); elsewhere it calls math.Exp.
func expSub(dst, x []float64, c float64) {
	dst = dst[:len(x)]
	if !exactExp() {
		for k, v := range x {
			dst[k] = math.Exp(v - c)
		}
		return
	}
	expSubFMA(dst, x, c)
}

// expSubFMA is expSub with exp_amd64.s's fused multiply-add path (from
// Go 1.26; the probe in exactExp would notice a change), four at a time
// where the CPU has AVX2 in a GOEXPERIMENT=simd build (exp_simd_amd64.go).
func expSubFMA(dst, x []float64, c float64) {
	k := expSub4(dst, x, c)
	expSub1(dst[k:], x[k:], c)
}

// expSub1 is exp_amd64.s's fused multiply-add path, one value at a time:
// the reduction by ln 2 in two halves, the Taylor polynomial of r/16 and
// four squarings, then the power of two. Its CVTSD2SL rounds to nearest
// even, as adding and subtracting 1.5*2^52 does. Outside [-700, 700]
// (overflow, subnormal results, Inf, NaN) it calls math.Exp.
func expSub1(dst, x []float64, c float64) {
	dst = dst[:len(x)]
	for k, v := range x {
		d := v - c
		if !(d >= -700 && d <= 700) {
			dst[k] = math.Exp(d)
			continue
		}
		n := float64(expLog2E*d) + expRound - expRound
		r := math.FMA(-n, expLn2U, d)
		r = math.FMA(-n, expLn2L, r)
		r *= 0.0625
		p := math.FMA(expC9, r, expC8)
		p = math.FMA(p, r, expC7)
		p = math.FMA(p, r, expC6)
		p = math.FMA(p, r, expC5)
		p = math.FMA(p, r, expC4)
		p = math.FMA(p, r, expC3)
		p = math.FMA(p, r, expC2)
		r *= p
		r *= r + 2
		r *= r + 2
		r *= r + 2
		r = math.FMA(r, r+2, 1)
		dst[k] = r * math.Float64frombits(uint64(int64(n)+1023)<<52)
	}
}

// exp_amd64.s's constants.
const (
	expLog2E = 1.4426950408889634073599246810018920
	expLn2U  = 0.69314718055966295651160180568695068359375
	expLn2L  = 0.28235290563031577122588448175013436025525412068e-12
	expRound = 0x1.8p52
	expC2    = 1.0
	expC3    = 0.5
	expC4    = 1.6666666666666666667e-1
	expC5    = 4.1666666666666666667e-2
	expC6    = 8.3333333333333333333e-3
	expC7    = 1.3888888888888888889e-3
	expC8    = 1.9841269841269841270e-4
	expC9    = 2.4801587301587301587e-5
)

// exactExp reports whether expSubFMA is math.Exp on this machine: it
// compares them once, one at a time and in a slice (the vector path),
// on inputs where exp_amd64.s's two paths (with and without FMA) round
// differently about one time in eleven, so a machine whose math.Exp is
// another algorithm fails it.
var exactExp = sync.OnceValue(func() bool {
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float64, 4099)
	for k := range x {
		x[k] = -r.ExpFloat64() * 20
		if k%2 == 1 {
			x[k] = (r.Float64()*2 - 1) * 720
		}
	}
	x[0], x[1], x[2] = math.Inf(-1), math.NaN(), 0
	vec, one := make([]float64, len(x)), make([]float64, len(x))
	expSubFMA(vec, x, 0)
	expSub1(one, x, 0)
	for k, v := range x {
		want := math.Float64bits(math.Exp(v))
		if math.Float64bits(vec[k]) != want || math.Float64bits(one[k]) != want {
			return false
		}
	}
	return true
})
