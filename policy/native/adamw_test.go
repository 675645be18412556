package native

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestAdamWMatchesReference runs three steps with made-up gradients (the
// second large enough to be clipped) against the update written out in
// float64.
func TestAdamWMatchesReference(t *testing.T) {
	m := newTestModel(t, tinyConfig(), 31)
	cfg := AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, ClipNorm: 1}
	o := NewAdamW(m, cfg)
	n := m.NumParams()
	p := toF64(m.data)
	mm, vv := make([]float64, n), make([]float64, n)
	r := rand.New(rand.NewPCG(17, 18))
	for step, gscale := range []float64{0.001, 10, 0.01} {
		lr := 0.01 * float64(step+1)
		g := make([]float64, n)
		norm := 0.0
		for i := range g {
			g[i] = gscale * r.NormFloat64()
			m.grad[i] = float32(g[i])
			g[i] = float64(m.grad[i])
			norm += g[i] * g[i]
		}
		norm = math.Sqrt(norm)
		clip := math.Min(1, cfg.ClipNorm/(norm+1e-6))
		tt := float64(step + 1)
		for i := range p {
			gi := g[i] * clip
			mm[i] = cfg.Beta1*mm[i] + (1-cfg.Beta1)*gi
			vv[i] = cfg.Beta2*vv[i] + (1-cfg.Beta2)*gi*gi
			mh, vh := mm[i]/(1-math.Pow(cfg.Beta1, tt)), vv[i]/(1-math.Pow(cfg.Beta2, tt))
			p[i] -= lr * (mh/(math.Sqrt(vh)+cfg.Eps) + cfg.WeightDecay*p[i])
		}
		got := o.Step(m, lr)
		if math.Abs(got-norm) > 1e-9*norm {
			t.Errorf("step %d: norm %g, want %g", step, got, norm)
		}
		if d := maxRelDiff(m.data, p, 1e-3); d > 1e-5 {
			t.Errorf("step %d: parameters differ from the reference by %.2g", step, d)
		}
	}
	if o.Steps() != 3 {
		t.Errorf("Steps() = %d, want 3", o.Steps())
	}
}

// TestAdamWStateRestores saves the optimizer state by name, restores it
// into a fresh optimizer, and checks both then take identical steps.
func TestAdamWStateRestores(t *testing.T) {
	m1, m2 := newTestModel(t, tinyConfig(), 32), newTestModel(t, tinyConfig(), 32)
	o1 := NewAdamW(m1, DefaultAdamWConfig())
	for i := range m1.grad {
		m1.grad[i] = float32(i%7) * 0.01
	}
	o1.Step(m1, 0.1)
	saved := map[string][]float32{}
	for _, s := range o1.State() {
		saved[s.Name] = append([]float32(nil), s.Data...)
		if !strings.HasPrefix(s.Name, "/native_adamw/") {
			t.Errorf("state name %q lacks the /native_adamw/ prefix", s.Name)
		}
	}
	if _, ok := saved["/native_adamw/m/block_0/q/dense/weights"]; !ok {
		t.Error("no moment named /native_adamw/m/block_0/q/dense/weights")
	}
	copy(m2.data, m1.data)
	o2 := NewAdamW(m2, DefaultAdamWConfig())
	for _, s := range o2.State() {
		copy(s.Data, saved[s.Name])
	}
	copy(m2.grad, m1.grad)
	o1.Step(m1, 0.1)
	o2.Step(m2, 0.1)
	for i := range m1.data {
		if m1.data[i] != m2.data[i] {
			t.Fatalf("element %d: %v after the restored step, want %v", i, m2.data[i], m1.data[i])
		}
	}
}

// TestAdamWKernelsMatchGeneric: each kernel path's AdamW update gives
// adamwGeneric's bits (the same float32 operations in the same order), at
// lengths around the vector widths.
func TestAdamWKernelsMatchGeneric(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 20))
	st := adamwStep{gs: 0.7, b1: 0.9, b2: 0.95, invBC2: 1 / (1 - 0.95*0.95), stepSize: 1e-3 / (1 - 0.81), eps: 1e-8, decay: 1e-5}
	forEachKernel(t, func(t *testing.T) {
		for _, n := range []int{0, 1, 7, 8, 15, 16, 17, 33, 1000} {
			w, g, m, v := randSlice(r, n), randSlice(r, n), randSlice(r, n), randSlice(r, n)
			for i := range v {
				v[i] = float32(math.Abs(float64(v[i])))
			}
			w2, m2, v2 := append([]float32(nil), w...), append([]float32(nil), m...), append([]float32(nil), v...)
			kern.adamw(w, g, m, v, st)
			adamwGeneric(w2, g, m2, v2, st)
			for i := range w {
				if math.Float32bits(w[i]) != math.Float32bits(w2[i]) || math.Float32bits(m[i]) != math.Float32bits(m2[i]) || math.Float32bits(v[i]) != math.Float32bits(v2[i]) {
					t.Fatalf("n %d, element %d: w %v m %v v %v, generic w %v m %v v %v", n, i, w[i], m[i], v[i], w2[i], m2[i], v2[i])
				}
			}
		}
	})
}
