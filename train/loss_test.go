package train

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mlerl/mlerl/policy"
)

// gradCheck compares a LossFunc's gradient with central differences.
func gradCheck(t *testing.T, name string, loss policy.LossFunc, logits, values []float32) {
	t.Helper()
	dl, dv := make([]float32, len(logits)), make([]float32, len(values))
	loss(logits, values, dl, dv)
	eval := func() float64 {
		return loss(logits, values, make([]float32, len(logits)), make([]float32, len(values)))
	}
	check := func(what string, xs, grad []float32) {
		for i := range xs {
			const h = 1e-3
			x := xs[i]
			xs[i] = x + h
			up := eval()
			xs[i] = x - h
			down := eval()
			xs[i] = x
			num := (up - down) / (2 * h)
			if math.Abs(num-float64(grad[i])) > 2e-3*max(1, math.Abs(num)) {
				t.Errorf("%s: d loss / d %s[%d]: analytic %.6f, numeric %.6f", name, what, i, grad[i], num)
			}
		}
	}
	check("logits", logits, dl)
	check("values", values, dv)
}

func randomRows(r *rand.Rand, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(r.NormFloat64())
	}
	return out
}

func TestSFTLossGradient(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const vocab = 7
	logits := randomRows(r, 3*vocab)
	gradCheck(t, "sft", sftLoss([]int32{1, 4, 6}, []float32{1, 0.5, 1}, vocab), logits, make([]float32, 3))
}

// TestPPOLossHandComputed checks ppoLoss on two tokens whose every term is
// computed by hand, then its gradient by finite differences, with masks,
// a clipped ratio and a forced token.
func TestPPOLossHandComputed(t *testing.T) {
	const vocab = 3
	// Token 0: logits (0, ln 2, 0): p = (1/4, 1/2, 1/4), target 1, logp ln(1/2).
	// Token 1: mask {0, 2}, logits (0, 5, ln 3): over the mask p = (1/4, -, 3/4), target 2.
	// Token 2: forced (a mask of one token): left out of the loss.
	logits := []float32{0, float32(math.Log(2)), 0, 0, 5, float32(math.Log(3)), 1, 2, 3}
	m1, m2 := policy.NewBitset(vocab), policy.NewBitset(vocab)
	m1.Set(0)
	m1.Set(2)
	m2.Set(1)
	old0, old1 := math.Log(0.5)-0.1, math.Log(0.75)+0.5 // ratios e^0.1 (inside the clip) and e^-0.5 (below it)
	ref0, ref1 := math.Log(0.4), math.Log(0.6)
	toks := []ppoToken{
		{Target: 1, OldLogP: old0, RefLogP: ref0, Advantage: 2, Weight: 1.5},
		{Target: 2, OldLogP: old1, RefLogP: ref1, Advantage: 1, Weight: 0.5, Mask: m1},
		{Target: 1, OldLogP: 0, RefLogP: 0, Advantage: 3, Weight: 1, Mask: m2, Skip: true},
	}
	values := []float32{0.3, 0, 0}
	returns := []float32{1}
	c := ppoCoefs{ClipCoef: 0.2, VfCoef: 0.5, EntCoef: 0.01, KLCoef: 0.05}
	var st ppoStats
	got := ppoLoss(toks, []int{0}, returns, c, vocab, &st)(logits, values, make([]float32, len(logits)), make([]float32, len(values)))

	// By hand, averaging over the two unforced tokens.
	r0, r1 := math.Exp(0.1), math.Exp(-0.5)
	pg0 := 1.5 * math.Max(-2*r0, -2*math.Min(math.Max(r0, 0.8), 1.2))
	pg1 := 0.5 * math.Max(-1*r1, -1*math.Min(math.Max(r1, 0.8), 1.2))
	pg := (pg0 + pg1) / 2
	d0, d1 := ref0-math.Log(0.5), ref1-math.Log(0.75)
	kl := ((math.Exp(d0) - d0 - 1) + (math.Exp(d1) - d1 - 1)) / 2
	h0 := -(0.25*math.Log(0.25)*2 + 0.5*math.Log(0.5))
	h1 := -(0.25*math.Log(0.25) + 0.75*math.Log(0.75))
	ent := (h0 + h1) / 2
	vl := 0.5 * (0.3 - 1) * (0.3 - 1)
	want := pg + 0.5*vl + 0.05*kl - 0.01*ent
	if math.Abs(got-want) > 1e-5 {
		t.Fatalf("loss %.6f, by hand %.6f (pg %.4f vl %.4f kl %.4f ent %.4f)", got, want, pg, vl, kl, ent)
	}
	if math.Abs(st[0]-pg) > 1e-6 || math.Abs(st[4]-0.5) > 1e-9 {
		t.Errorf("stats %v: want policy loss %.6f and clip fraction 0.5", st, pg)
	}
	gradCheck(t, "ppo", ppoLoss(toks, []int{0}, returns, c, vocab, nil), logits, values)
	// A masked-out token gets no gradient.
	dl := make([]float32, len(logits))
	ppoLoss(toks, []int{0}, returns, c, vocab, nil)(logits, values, dl, make([]float32, len(values)))
	if dl[4] != 0 || dl[6] != 0 || dl[7] != 0 || dl[8] != 0 {
		t.Errorf("gradient reaches a masked-out or forced token: %v", dl)
	}
}
