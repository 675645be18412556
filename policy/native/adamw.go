package native

import (
	"fmt"
	"math"
)

// AdamWConfig holds the optimizer's constants; the learning rate is
// passed to every Step so that schedules stay with the caller. Start from
// DefaultAdamWConfig (the zero value means no moment averaging, eps 0
// and no clipping).
type AdamWConfig struct {
	Beta1       float64 // first-moment decay; default 0.9
	Beta2       float64 // second-moment decay; default 0.999
	Eps         float64 // added to sqrt(v̂); default 1e-8
	WeightDecay float64 // decoupled, applied to every parameter; default 0
	ClipNorm    float64 // global gradient-norm clip; <= 0 disables; default 1
}

// DefaultAdamWConfig returns Beta1 0.9, Beta2 0.999, Eps 1e-8, no weight
// decay, clipping at norm 1.
func DefaultAdamWConfig() AdamWConfig {
	return AdamWConfig{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, ClipNorm: 1}
}

// AdamW is Adam with decoupled weight decay and global-norm clipping:
//
//	g ← g · min(1, clip/(‖g‖+1e-6))
//	m ← β1 m + (1-β1) g;  v ← β2 v + (1-β2) g²
//	p ← p - lr (m̂/(√v̂+ε) + wd p),  m̂ = m/(1-β1^t), v̂ = v/(1-β2^t)
type AdamW struct {
	Config AdamWConfig
	m, v   []float32
	step   []float32 // one element: the number of steps taken (exact to 2^24)
	state  []Param
	parts  []float64 // per-chunk sums of squared gradients
}

// NewAdamW returns an optimizer for model's trainable parameters (all of
// them without adapters; a LoRA model's adapters and value head) with
// zero moments.
func NewAdamW(model *Model, cfg AdamWConfig) *AdamW {
	n := model.NumTrainable()
	o := &AdamW{Config: cfg, m: make([]float32, n), v: make([]float32, n), step: make([]float32, 1)}
	off := 0
	for _, p := range model.Params() {
		if !p.Trainable() {
			continue
		}
		sz := p.Size()
		o.state = append(o.state,
			Param{Name: "/native_adamw/m" + p.Name, Shape: p.Shape, Data: o.m[off : off+sz : off+sz]},
			Param{Name: "/native_adamw/v" + p.Name, Shape: p.Shape, Data: o.v[off : off+sz : off+sz]})
		off += sz
	}
	o.state = append(o.state, Param{Name: "/native_adamw/step", Shape: []int{1}, Data: o.step})
	return o
}

// State lists the optimizer's moments ("/native_adamw/m<param name>",
// "/native_adamw/v<param name>", for the trainable parameters) and its
// step count ("/native_adamw/step", one float32) as views: save them, or
// write them to restore a checkpoint.
func (o *AdamW) State() []Param { return o.state }

// Steps is the number of steps taken.
func (o *AdamW) Steps() int { return int(o.step[0]) }

// Step clips the model's gradients, updates its parameters and returns
// the gradient norm before clipping. It does not clear the gradients.
func (o *AdamW) Step(model *Model, lr float64) (gradNorm float64) {
	if len(o.m) != len(model.data) {
		panic(fmt.Sprintf("native: AdamW built for %d parameters used on a model with %d", len(o.m), len(model.data)))
	}
	p := model.p
	g := model.grad
	// Norm: per-chunk float64 sums, added in chunk order (deterministic).
	const grain = 1 << 15
	o.parts = append(o.parts[:0], make([]float64, (len(g)+grain-1)/grain)...)
	parts := o.parts
	p.chunks(len(g), grain, func(_, lo, hi int) {
		s := 0.0
		for _, v := range g[lo:hi] {
			s += float64(v) * float64(v)
		}
		parts[lo/grain] = s
	})
	sum := 0.0
	for _, s := range parts {
		sum += s
	}
	norm := math.Sqrt(sum)
	clip := 1.0
	if o.Config.ClipNorm > 0 {
		clip = math.Min(1, o.Config.ClipNorm/(norm+1e-6))
	}
	o.step[0]++
	t := float64(o.step[0])
	c := o.Config
	b1, b2 := float32(c.Beta1), float32(c.Beta2)
	bc1, bc2 := 1-math.Pow(c.Beta1, t), 1-math.Pow(c.Beta2, t)
	// p -= lr/bc1 * m / (sqrt(v/bc2) + eps) + lr*wd*p
	stepSize := float32(lr / bc1)
	invBC2 := float32(1 / bc2)
	eps, decay, gs := float32(c.Eps), float32(lr*c.WeightDecay), float32(clip)
	w, m, v := model.data, o.m, o.v
	st := adamwStep{gs: gs, b1: b1, b2: b2, invBC2: invBC2, stepSize: stepSize, eps: eps, decay: decay}
	p.chunks(len(g), grain, func(_, lo, hi int) {
		kern.adamw(w[lo:hi], g[lo:hi], m[lo:hi], v[lo:hi], st)
	})
	return norm
}

// adamwStep is one AdamW step's scalars: gradient scale (clipping),
// betas, 1/(1-beta2^t), lr/(1-beta1^t), epsilon, lr*weight decay.
type adamwStep struct{ gs, b1, b2, invBC2, stepSize, eps, decay float32 }

// adamwGeneric updates w, m and v for gradients g (all one length):
//
//	m = b1*m + (1-b1)*g,  v = b2*v + (1-b2)*g*g
//	w -= stepSize*m / (sqrt(v*invBC2) + eps) + decay*w
//
// each operation rounded to float32 in this order (the vector kernels do
// the same operations in the same order).
func adamwGeneric(w, g, m, v []float32, s adamwStep) {
	for i := range w {
		gi := g[i] * s.gs
		mi := s.b1*m[i] + (1-s.b1)*gi
		vi := s.b2*v[i] + (1-s.b2)*gi*gi
		m[i], v[i] = mi, vi
		w[i] -= s.stepSize*mi/(float32(math.Sqrt(float64(vi*s.invBC2)))+s.eps) + s.decay*w[i]
	}
}
