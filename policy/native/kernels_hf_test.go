package native

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestRMSNormRows: every kernel's RMSNorm row, forward and backward,
// against the same arithmetic in float64, on rows with and without a tail
// past the vector width; the input gradient is orthogonal to x, as an
// RMSNorm's must be (scaling x does not change the output) when the gain
// is 1.
func TestRMSNormRows(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 20))
	const eps = 1e-6
	forEachKernel(t, func(t *testing.T) {
		for _, d := range []int{1, 7, 16, 33, 64, 128, 300, 896} {
			x, gain, dOut := randSlice(r, d), randSlice(r, d), randSlice(r, d)
			for j := range x {
				x[j] = 3*x[j] + 0.5
			}
			out := make([]float32, d)
			rs := kern.rmsForward(out, x, gain, eps)
			ss := 0.0
			for _, v := range x {
				ss += float64(v) * float64(v)
			}
			r64 := 1 / math.Sqrt(ss/float64(d)+eps)
			if math.Abs(float64(rs)-r64) > 1e-6*r64 {
				t.Fatalf("d=%d: 1/rms %g, want %g", d, rs, r64)
			}
			xh := make([]float64, d)
			m2 := 0.0
			for j, v := range x {
				xh[j] = float64(v) * r64
				want := xh[j] * float64(gain[j])
				if math.Abs(float64(out[j])-want) > 1e-6*(1+math.Abs(want)) {
					t.Fatalf("d=%d: out[%d] = %g, want %g", d, j, out[j], want)
				}
				m2 += float64(dOut[j]) * float64(gain[j]) * xh[j]
			}
			m2 /= float64(d)
			dx, dg := randSlice(r, d), randSlice(r, d)
			dx0, dg0 := append([]float32(nil), dx...), append([]float32(nil), dg...)
			kern.rmsBackward(dx, dg, dOut, x, gain, rs)
			for j := range d {
				g := float64(dOut[j])
				wantX := float64(dx0[j]) + r64*(g*float64(gain[j])-xh[j]*m2)
				wantG := float64(dg0[j]) + g*xh[j]
				for _, c := range [][2]float64{{float64(dx[j]), wantX}, {float64(dg[j]), wantG}} {
					if math.Abs(c[0]-c[1]) > 1e-5*(1+math.Abs(c[1])) {
						t.Fatalf("d=%d element %d: backward %g, want %g", d, j, c[0], c[1])
					}
				}
			}
			ones := make([]float32, d)
			for j := range ones {
				ones[j] = 1
			}
			dx, dg = make([]float32, d), make([]float32, d)
			kern.rmsBackward(dx, dg, dOut, x, ones, rs)
			dot, scale := 0.0, 0.0
			for j := range d {
				dot += float64(dx[j]) * float64(x[j])
				scale += math.Abs(float64(dx[j]) * float64(x[j]))
			}
			if d > 1 && math.Abs(dot) > 1e-5*scale {
				t.Fatalf("d=%d: the input gradient has %g along x (scale %g), not 0", d, dot, scale)
			}
		}
	})
}

// TestSwiGLUKernels: every kernel's silu(g)·u and its backward against
// float64, over both tails of the sigmoid and lengths with and without a
// vector tail; dUp may alias dOut.
func TestSwiGLUKernels(t *testing.T) {
	var gs []float32
	for x := -40.0; x <= 40; x += 0.0913 {
		gs = append(gs, float32(x))
	}
	gs = append(gs, 0, 1e-6, -1e-6, 90, -90)
	r := rand.New(rand.NewPCG(21, 22))
	forEachKernel(t, func(t *testing.T) {
		for _, n := range []int{1, 5, 8, 16, 31, len(gs)} {
			g, u, dOut := gs[:n], randSlice(r, n), randSlice(r, n)
			out := make([]float32, n)
			kern.swiglu(out, g, u)
			dGate, dUp := make([]float32, n), append([]float32(nil), dOut...)
			kern.swigluBackward(dGate, dUp, dUp, g, u) // dUp aliases dOut
			for i := range n {
				x, uu, d := float64(g[i]), float64(u[i]), float64(dOut[i])
				s := 1 / (1 + math.Exp(-x))
				want := x * s * uu
				if math.Abs(float64(out[i])-want) > 1e-6*math.Abs(want)+1e-30 {
					t.Errorf("n=%d: silu(%g)*%g = %g, want %g", n, x, uu, out[i], want)
				}
				wantUp := d * x * s
				wantGate := d * uu * s * (1 + x*(1-s))
				if math.Abs(float64(dUp[i])-wantUp) > 1e-6*math.Abs(wantUp)+1e-30 {
					t.Errorf("n=%d: dUp at g=%g: %g, want %g", n, x, dUp[i], wantUp)
				}
				if math.Abs(float64(dGate[i])-wantGate) > 2e-6*math.Abs(wantGate)+1e-7*math.Abs(d*uu) {
					t.Errorf("n=%d: dGate at g=%g: %g, want %g", n, x, dGate[i], wantGate)
				}
			}
		}
	})
}
