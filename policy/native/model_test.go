package native

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// testBatch packs two examples in row 0 (then padding) and one in row 1
// (then padding); padding holds token 12, which no example uses.
func testBatch() Batch {
	r := rand.New(rand.NewPCG(5, 6))
	return packRows(10, 12,
		[]example{{randTokens(r, 5, 12), 0}, {randTokens(r, 3, 12), 0}},
		[]example{{randTokens(r, 7, 12), 0}})
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string
	}{
		{"ok", tinyConfig(), ""},
		{"zero vocab", Config{DModel: 8, Heads: 2, Layers: 1, Ctx: 4}, "must be positive"},
		{"heads do not divide", Config{Vocab: 4, DModel: 10, Heads: 3, Layers: 1, Ctx: 4}, "not a multiple"},
		{"odd head dim", Config{Vocab: 4, DModel: 9, Heads: 3, Layers: 1, Ctx: 4}, "must be even"},
		{"bad rope base", Config{Vocab: 4, DModel: 8, Heads: 2, Layers: 1, Ctx: 4, RoPEBase: 0.5}, "rope base"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("Validate() = %v, want error containing %q", err, tc.err)
			}
		})
	}
}

func TestParams(t *testing.T) {
	cfg := tinyConfig()
	m := newTestModel(t, cfg, 1)
	ps := m.Params()
	// embed + per block (2 LN x 2 + 6 dense x 2) + final LN 2 + heads 4.
	if want := 1 + cfg.Layers*16 + 2 + 4; len(ps) != want {
		t.Fatalf("got %d params, want %d", len(ps), want)
	}
	total := 0
	for _, p := range ps {
		if p.Size() != len(p.Data) || len(p.Grad) != len(p.Data) {
			t.Errorf("%s: shape %v but %d data, %d grad", p.Name, p.Shape, len(p.Data), len(p.Grad))
		}
		total += p.Size()
	}
	if total != m.NumParams() {
		t.Errorf("sizes sum to %d, NumParams %d", total, m.NumParams())
	}
	for i, want := range map[int]string{0: "/token_embed/embeddings", 3: "/block_0/q/dense/weights", len(ps) - 1: "/value_head/dense/biases"} {
		if ps[i].Name != want {
			t.Errorf("param %d is %q, want %q", i, ps[i].Name, want)
		}
	}
}

func TestForwardMatchesReference(t *testing.T) {
	cfg := tinyConfig()
	b := testBatch()
	m := newTestModel(t, cfg, 2)
	wantLogits, wantValues := newRef(m).forward(b)
	idx := realPositions(b)
	forEachKernel(t, func(t *testing.T) {
		if err := m.Forward(b); err != nil {
			t.Fatal(err)
		}
		logits, values, err := m.Heads(idx)
		if err != nil {
			t.Fatal(err)
		}
		for k, at := range idx {
			if d := maxRelDiff(logits[k*cfg.Vocab:(k+1)*cfg.Vocab], wantLogits[at], 1); d > 2e-6 {
				t.Errorf("position %d: logits differ by %.2g (relative)", at, d)
			}
			if d := math.Abs(float64(values[k]) - wantValues[at]); d > 2e-6*math.Max(1, math.Abs(wantValues[at])) {
				t.Errorf("position %d: value %g, want %g", at, values[k], wantValues[at])
			}
		}
	})
}

// refLoss is the loss of the gradient check: weighted cross-entropy of
// targets at idx plus half of c times the squared value there.
func refLoss(logits [][]float64, values []float64, idx, targets []int32, w, c []float64) float64 {
	loss := 0.0
	for k, at := range idx {
		z := logits[at]
		mx := math.Inf(-1)
		for _, v := range z {
			mx = math.Max(mx, v)
		}
		s := 0.0
		for _, v := range z {
			s += math.Exp(v - mx)
		}
		loss += w[k] * (math.Log(s) + mx - z[targets[k]])
		loss += 0.5 * c[k] * values[at] * values[at]
	}
	return loss
}

func TestGradientsMatchFiniteDifferences(t *testing.T) {
	cfg := tinyConfig()
	b := testBatch()
	m := newTestModel(t, cfg, 3)
	ref := newRef(m)
	r := rand.New(rand.NewPCG(7, 8))
	// Heads at a few positions of each example, one repeated.
	idx := []int32{1, 4, 5, 7, 10, 13, 16, 4}
	targets := randTokens(r, len(idx), cfg.Vocab)
	w, c := make([]float64, len(idx)), make([]float64, len(idx))
	for k := range idx {
		w[k], c[k] = 0.5+r.Float64(), r.Float64()
	}
	// Central differences of the float64 reference, every element.
	want := map[string][]float64{}
	const h = 1e-5
	for _, p := range m.Params() {
		g := make([]float64, p.Size())
		vals := ref.p[p.Name]
		for i := range vals {
			x := vals[i]
			vals[i] = x + h
			lp := refLoss2(ref, b, idx, targets, w, c)
			vals[i] = x - h
			lm := refLoss2(ref, b, idx, targets, w, c)
			vals[i] = x
			g[i] = (lp - lm) / (2 * h)
		}
		want[p.Name] = g
	}
	forEachKernel(t, func(t *testing.T) {
		m.ZeroGrad()
		if err := m.Forward(b); err != nil {
			t.Fatal(err)
		}
		logits, values, err := m.Heads(idx)
		if err != nil {
			t.Fatal(err)
		}
		v := cfg.Vocab
		dLogits, dValues := make([]float32, len(idx)*v), make([]float32, len(idx))
		for k := range idx {
			z := toF64(logits[k*v : (k+1)*v])
			mx := math.Inf(-1)
			for _, x := range z {
				mx = math.Max(mx, x)
			}
			s := 0.0
			for _, x := range z {
				s += math.Exp(x - mx)
			}
			for j, x := range z {
				g := math.Exp(x-mx) / s
				if j == int(targets[k]) {
					g--
				}
				dLogits[k*v+j] = float32(w[k] * g)
			}
			dValues[k] = float32(c[k] * float64(values[k]))
		}
		if err := m.Backward(idx, dLogits, dValues); err != nil {
			t.Fatal(err)
		}
		for _, p := range m.Params() {
			if d := maxRelDiff(p.Grad, want[p.Name], 1e-3); d > 1e-5 {
				t.Errorf("%s: gradient differs from finite differences by %.2g (relative to its largest element)", p.Name, d)
			}
		}
	})
}

func refLoss2(ref *refModel, b Batch, idx, targets []int32, w, c []float64) float64 {
	logits, values := ref.forward(b)
	return refLoss(logits, values, idx, targets, w, c)
}

// randomDirection draws a N(0,1) direction in parameter space, in the
// model's fixed parameter order so that it is the same every run.
func randomDirection(r *rand.Rand, m *Model) map[string][]float64 {
	u := map[string][]float64{}
	for _, p := range m.Params() {
		u[p.Name] = make([]float64, p.Size())
		for i := range u[p.Name] {
			u[p.Name][i] = r.NormFloat64()
		}
	}
	return u
}

// directionalDerivative is the reference loss's derivative along u by
// central differences (ref's parameters are restored afterwards).
func directionalDerivative(ref *refModel, u map[string][]float64, b Batch, idx, targets []int32, w, c []float64) float64 {
	const h = 1e-4
	shift := func(s float64) {
		for name, vals := range ref.p {
			for i := range vals {
				vals[i] += s * u[name][i]
			}
		}
	}
	shift(h)
	lp := refLoss2(ref, b, idx, targets, w, c)
	shift(-2 * h)
	lm := refLoss2(ref, b, idx, targets, w, c)
	shift(h)
	return (lp - lm) / (2 * h)
}

func TestCrossEntropyBackwardMatchesBackward(t *testing.T) {
	cfg := tinyConfig()
	b := testBatch()
	m := newTestModel(t, cfg, 4)
	idx := []int32{0, 2, 3, 6, 12, 15}
	targets := []int32{1, 5, 0, 12, 7, 3}
	weights := []float32{1, 0, 2, 1, 0.5, 1}
	forEachKernel(t, func(t *testing.T) {
		// Manual: Heads, dLogits = w/W (softmax - onehot), Backward.
		m.ZeroGrad()
		if err := m.Forward(b); err != nil {
			t.Fatal(err)
		}
		logits, _, err := m.Heads(idx)
		if err != nil {
			t.Fatal(err)
		}
		v, wsum, want := cfg.Vocab, 0.0, 0.0
		for _, w := range weights {
			wsum += float64(w)
		}
		lsm := append([]float32(nil), logits...)
		LogSoftmaxRows(lsm, v)
		dLogits := make([]float32, len(lsm))
		for k := range idx {
			want -= float64(weights[k]) * float64(lsm[k*v+int(targets[k])]) / wsum
			for j := range v {
				g := math.Exp(float64(lsm[k*v+j]))
				if j == int(targets[k]) {
					g--
				}
				dLogits[k*v+j] = float32(float64(weights[k]) / wsum * g)
			}
		}
		if err := m.Backward(idx, dLogits, nil); err != nil {
			t.Fatal(err)
		}
		manual := append([]float32(nil), m.grad...)

		m.ZeroGrad()
		if err := m.Forward(b); err != nil {
			t.Fatal(err)
		}
		evalLoss, err := m.CrossEntropy(idx, targets, weights)
		if err != nil {
			t.Fatal(err)
		}
		loss, err := m.CrossEntropyBackward(idx, targets, weights)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(loss-want) > 1e-5*want || loss != evalLoss {
			t.Errorf("loss %g (eval %g), want %g", loss, evalLoss, want)
		}
		if d := maxRelDiff(m.grad, toF64(manual), 1e-3); d > 1e-5 {
			t.Errorf("fused gradients differ from Backward's by %.2g", d)
		}
	})
}

func TestPositionShiftInvariance(t *testing.T) {
	cfg := tinyConfig()
	m := newTestModel(t, cfg, 5)
	r := rand.New(rand.NewPCG(9, 10))
	toks := randTokens(r, 9, 12)
	logitsAt := func(start int32) []float32 {
		b := packRows(9, 12, []example{{toks, start}})
		if err := m.Forward(b); err != nil {
			t.Fatal(err)
		}
		l, _, err := m.Heads(realPositions(b))
		if err != nil {
			t.Fatal(err)
		}
		return append([]float32(nil), l...)
	}
	base := logitsAt(0)
	for _, shift := range []int32{7, 30} {
		if d := maxRelDiff(logitsAt(shift), toF64(base), 1); d > 1e-5 {
			t.Errorf("positions +%d change the logits by %.2g", shift, d)
		}
	}
}

func TestPackedExamplesAreIsolated(t *testing.T) {
	cfg := tinyConfig()
	m := newTestModel(t, cfg, 6)
	r := rand.New(rand.NewPCG(11, 12))
	a, other := randTokens(r, 6, 12), randTokens(r, 5, 12)
	alone := packRows(6, 12, []example{{a, 0}})
	if err := m.Forward(alone); err != nil {
		t.Fatal(err)
	}
	l, _, _ := m.Heads(realPositions(alone))
	want := toF64(l)
	// a after another example, then padding, in a wider batch.
	packed := packRows(14, 12, []example{{other, 0}, {a, 0}}, []example{{other, 0}})
	if err := m.Forward(packed); err != nil {
		t.Fatal(err)
	}
	idx := []int32{5, 6, 7, 8, 9, 10}
	got, _, err := m.Heads(idx)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxRelDiff(got, want, 1); d > 1e-6 {
		t.Errorf("packing changes an example's logits by %.2g", d)
	}
	if _, _, err := m.Heads([]int32{12}); err == nil {
		t.Error("Heads at a padding position: got no error")
	}
}

func TestPaddingGetsNoGradient(t *testing.T) {
	cfg := tinyConfig()
	m := newTestModel(t, cfg, 7)
	b := testBatch() // padding token 12 appears only in padding
	m.ZeroGrad()
	if err := m.Forward(b); err != nil {
		t.Fatal(err)
	}
	idx := realPositions(b)
	targets := make([]int32, len(idx))
	if _, err := m.CrossEntropyBackward(idx, targets, nil); err != nil {
		t.Fatal(err)
	}
	d := cfg.DModel
	for j, g := range m.g.embed[12*d : 13*d] {
		if g != 0 {
			t.Fatalf("embedding of the padding token got gradient %g at %d", g, j)
		}
	}
}

func TestDeterminism(t *testing.T) {
	cfg := tinyConfig()
	b := testBatch()
	run := func() (float64, []float32, []float32) {
		m, err := New(cfg, 42)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Forward(b); err != nil {
			t.Fatal(err)
		}
		idx := realPositions(b)
		loss, err := m.CrossEntropyBackward(idx, make([]int32, len(idx)), nil)
		if err != nil {
			t.Fatal(err)
		}
		return loss, m.data, m.grad
	}
	l1, d1, g1 := run()
	l2, d2, g2 := run()
	if l1 != l2 {
		t.Errorf("loss %v then %v", l1, l2)
	}
	for i := range d1 {
		if d1[i] != d2[i] || g1[i] != g2[i] {
			t.Fatalf("element %d: params %v/%v, grads %v/%v", i, d1[i], d2[i], g1[i], g2[i])
		}
	}
}

func TestBatchErrors(t *testing.T) {
	m := newTestModel(t, tinyConfig(), 8)
	good := testBatch()
	for _, tc := range []struct {
		name string
		edit func(b *Batch)
		err  string
	}{
		{"short tokens", func(b *Batch) { b.Tokens = b.Tokens[1:] }, "needs"},
		{"token outside vocab", func(b *Batch) { b.Tokens[0] = 13 }, "vocabulary"},
		{"position outside ctx", func(b *Batch) { b.Positions[1] = 40 }, "ctx"},
		{"negative segment", func(b *Batch) { b.Segments[2] = -1 }, "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := good
			b.Tokens = append([]int32(nil), good.Tokens...)
			b.Positions = append([]int32(nil), good.Positions...)
			b.Segments = append([]int32(nil), good.Segments...)
			tc.edit(&b)
			if err := m.Forward(b); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("got %v, want an error containing %q", err, tc.err)
			}
		})
	}
}

// TestLongSequenceDirectionalDerivative checks, on sequences longer than
// an attention block and a GEMM panel, that the gradient along a random
// direction u equals the reference loss's central difference along u.
func TestLongSequenceDirectionalDerivative(t *testing.T) {
	cfg := Config{Vocab: 21, DModel: 16, Heads: 2, Layers: 1, FFN: 40, Ctx: 200}
	m := newTestModel(t, cfg, 9)
	for i := range m.data { // keep activations moderate over 150 tokens
		m.data[i] *= 0.7
	}
	r := rand.New(rand.NewPCG(13, 14))
	b := packRows(180, 20, []example{{randTokens(r, 150, 20), 0}, {randTokens(r, 20, 20), 3}})
	var idx []int32
	for i := int32(0); i < 170; i += 7 {
		idx = append(idx, i)
	}
	targets := randTokens(r, len(idx), cfg.Vocab)
	w, c := make([]float64, len(idx)), make([]float64, len(idx))
	for k := range idx {
		w[k], c[k] = 1, 0.3
	}
	ref := newRef(m)
	wantLogits, _ := ref.forward(b)
	u := randomDirection(r, m)
	want := directionalDerivative(ref, u, b, idx, targets, w, c)
	forEachKernel(t, func(t *testing.T) {
		m.ZeroGrad()
		if err := m.Forward(b); err != nil {
			t.Fatal(err)
		}
		logits, values, err := m.Heads(idx)
		if err != nil {
			t.Fatal(err)
		}
		v := cfg.Vocab
		for k, at := range idx {
			if d := maxRelDiff(logits[k*v:(k+1)*v], wantLogits[at], 1); d > 1e-5 {
				t.Fatalf("position %d: logits differ from the reference by %.2g", at, d)
			}
		}
		dLogits := append([]float32(nil), logits...)
		LogSoftmaxRows(dLogits, v)
		dValues := make([]float32, len(idx))
		for k := range idx {
			for j := range v {
				dLogits[k*v+j] = float32(math.Exp(float64(dLogits[k*v+j])))
			}
			dLogits[k*v+int(targets[k])]--
			dValues[k] = float32(c[k]) * values[k]
		}
		if err := m.Backward(idx, dLogits, dValues); err != nil {
			t.Fatal(err)
		}
		got, scale := 0.0, 0.0 // scale: sum of |g_i u_i|, against cancellation
		for _, p := range m.Params() {
			for i, g := range p.Grad {
				got += float64(g) * u[p.Name][i]
				scale += math.Abs(float64(g) * u[p.Name][i])
			}
		}
		t.Logf("got %.10g want %.10g (scale %.4g)", got, want, scale)
		if math.Abs(got-want) > 1e-5*scale {
			t.Errorf("directional derivative %.8g, finite differences %.8g", got, want)
		}
	})
}

// TestSameBitsOnAnyWorkerCount checks the claim of pool.chunks: work is
// split the same way whatever the number of workers, so a training step
// gives identical bits on one worker and on three.
func TestSameBitsOnAnyWorkerCount(t *testing.T) {
	cfg := Config{Vocab: 50, DModel: 32, Heads: 4, Layers: 2, FFN: 96, Ctx: 300}
	r := rand.New(rand.NewPCG(19, 20))
	b := packRows(260, 0, []example{{randTokens(r, 200, 50), 0}, {randTokens(r, 50, 50), 0}}, []example{{randTokens(r, 90, 50), 0}})
	idx := realPositions(b)
	targets := randTokens(r, len(idx), cfg.Vocab)
	step := func(p *pool) ([]float32, []float32) {
		m := newTestModel(t, cfg, 23)
		m.p = p
		if err := m.Forward(b); err != nil {
			t.Fatal(err)
		}
		if _, err := m.CrossEntropyBackward(idx, targets, nil); err != nil {
			t.Fatal(err)
		}
		NewAdamW(m, DefaultAdamWConfig()).Step(m, 1e-3)
		return m.data, m.grad
	}
	d1, g1 := step(newPool(1))
	d3, g3 := step(newPool(3))
	for i := range d1 {
		if d1[i] != d3[i] || g1[i] != g3[i] {
			t.Fatalf("element %d: params %v / %v, grads %v / %v with 1 / 3 workers", i, d1[i], d3[i], g1[i], g3[i])
		}
	}
}
