package train

import (
	"math"

	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/policy/native"
)

// The losses, computed on the host from the logits and values an engine
// returns (policy.LossFunc), the same code for every engine. Each writes
// its gradient with respect to the logits and values.

// sftLoss is the mean weighted negative log-likelihood of the targets
// (response tokens) at the positions whose logits it is given.
func sftLoss(targets []int32, weights []float32, vocab int) policy.LossFunc {
	return sftLossStats(targets, weights, nil, vocab, nil)
}

// actionNLL sums the negative log-likelihood of the targets that write an
// action's name, unweighted: what SFT's loss says about the decision alone.
// Names and Right count the action names (runs of consecutive marked
// targets) and those whose every token is the most likely one given the
// text before it: the decision as greedy decoding would take it from the
// same context (teacher-forced, over the whole vocabulary, no grammar
// mask), which a loss averaged over tokens hides.
type actionNLL struct {
	Sum          float64
	N            int
	Names, Right int
}

// Accuracy is the share of action names predicted right (NaN without one).
func (a actionNLL) Accuracy() float64 {
	if a.Names == 0 {
		return math.NaN()
	}
	return float64(a.Right) / float64(a.Names)
}

// Mean is the mean NLL per action-name token (NaN without one).
func (a actionNLL) Mean() float64 {
	if a.N == 0 {
		return math.NaN()
	}
	return a.Sum / float64(a.N)
}

// sftLossStats is sftLoss that also adds, to st when it is not nil, the
// NLL of the targets act marks.
func sftLossStats(targets []int32, weights []float32, act []bool, vocab int, st *actionNLL) policy.LossFunc {
	return func(logits, _, dLogits, _ []float32) float64 {
		copy(dLogits, logits)
		native.LogSoftmaxRows(dLogits, vocab) // now log p, row by row
		wsum := 0.0
		for _, w := range weights {
			wsum += float64(w)
		}
		if wsum == 0 {
			clear(dLogits)
			return 0
		}
		loss := 0.0
		right := false // the current action name's tokens so far are all argmax
		// The loss and the statistics, from log p.
		for i, t := range targets {
			row := dLogits[i*vocab : (i+1)*vocab]
			loss -= float64(weights[i]) * float64(row[t])
			if st != nil && act[i] {
				st.Sum -= float64(row[t])
				st.N++
				if i == 0 || !act[i-1] {
					st.Names++
					right = true
				}
				right = right && isArgmax(row, t)
				if i == len(targets)-1 || !act[i+1] {
					if right {
						st.Right++
					}
				}
			}
		}
		native.ExpRows(dLogits[:len(targets)*vocab], vocab) // now p
		// The gradient: w_i/Σw · (p - onehot(t)).
		for i, t := range targets {
			row := dLogits[i*vocab : (i+1)*vocab]
			coef := float32(float64(weights[i]) / wsum)
			for j, p := range row {
				row[j] = coef * p
			}
			row[t] -= coef
		}
		return loss / wsum
	}
}

// isArgmax reports whether row's value at t is its largest (a tie counts
// against t: greedy decoding would not be sure to take it).
func isArgmax(row []float32, t int32) bool {
	v := row[t]
	for j, x := range row {
		if x > v || x == v && int32(j) != t {
			return false
		}
	}
	return true
}

// ppoToken is one action token of a PPO minibatch.
type ppoToken struct {
	Target    int32
	OldLogP   float64       // behaviour log-prob (under the mask): the sampler's, or the learner's own (old_logp recompute), as exact as the policy's then: the first ratio reads 1
	RefLogP   float64       // the frozen reference's log-prob (under the mask), as exact as the policy's: kl_ref reads 0 while they are equal
	Advantage float32       // the sample's advantage
	Weight    float32       // the sample's duration weight
	Mask      policy.Bitset // allowed tokens under constrained decoding (nil: all)
	// Free marks free text (policy.Sample.Free); Skip tokens take no part
	// in the policy-gradient, KL and entropy terms: tokens the grammar
	// forced (one allowed token: no choice, ratio exactly 1) and free text
	// under free_text mask.
	Free, Skip bool
}

// ppoCoefs are the loss's coefficients (CleanRL's names).
type ppoCoefs struct {
	ClipCoef, VfCoef, EntCoef, KLCoef float64
	// ClipHigh is the upper clip of the ratio, 1+ClipHigh (DAPO's
	// clip-higher: room for unlikely tokens to gain); 0 means ClipCoef.
	ClipHigh float64
}

// clipRange is the ratio's clip interval [1-lo, 1+hi].
func (c ppoCoefs) clipRange() (lo, hi float64) {
	hi = c.ClipHigh
	if hi == 0 {
		hi = c.ClipCoef
	}
	return 1 - c.ClipCoef, 1 + hi
}

// ppoStats are the minibatch's metrics, in ppoMetricNames order.
type ppoStats [numPPOMetrics]float64

// The PPO loss's metrics: the policy-gradient, value, entropy (decision
// tokens), approx_kl, clip fraction and KL-to-reference terms, the
// entropy of free-text tokens (not in the loss) and the number of tokens
// in the loss.
const (
	metricPolicy = iota
	metricValue
	metricEntropy
	metricApproxKL
	metricClipFrac
	metricKLRef
	metricEntropyFree
	metricLossTokens
	numPPOMetrics
)

var ppoMetricNames = [numPPOMetrics]string{"losses/policy", "losses/value", "losses/entropy", "losses/approx_kl", "losses/clipfrac", "losses/kl_ref",
	"losses/entropy_free", "losses/decision_tokens"}

// ppoLoss is the clipped surrogate with duration weights, the value loss,
// the entropy bonus and a k3 KL penalty to the reference, over the action
// tokens (the first len(toks) positions it is given) that are not Skip,
// and the value positions (valueAt[i] is the position of sample i's V(s)
// among them, with return returns[i]; none without a critic):
//
//	ratio   = exp(logp - old_logp)           log-probs under the token's mask
//	pg      = w * max(-A ratio, -A clip(ratio, 1-c, 1+c_high))  (c_high = c unless clip_coef_high)
//	v_loss  = 0.5 (V(s) - R)^2
//	kl_ref  = exp(d) - d - 1,  d = ref_logp - logp
//	loss    = mean(pg) + vf_coef mean(v_loss) + kl_coef mean(kl_ref) - ent_coef mean(entropy)
//
// Skip tokens carry no gradient; the entropy of the free-text ones is
// reported (losses/entropy_free) beside the decision tokens' entropy.
func ppoLoss(toks []ppoToken, valueAt []int, returns []float32, c ppoCoefs, vocab int, stats *ppoStats) policy.LossFunc {
	return func(logits, values, dLogits, dValues []float32) float64 {
		var pg, vl, ent, akl, clip, kl, entFree float64
		n, nFree := 0, 0
		for _, tk := range toks {
			switch {
			case !tk.Skip:
				n++
			case tk.Free:
				nFree++
			}
		}
		inv := 1 / float64(max(n, 1))
		lo, hi := c.clipRange()
		for i, tk := range toks {
			if tk.Skip {
				if tk.Free {
					entFree += entropy(policy.LogProbs(logits[i*vocab:(i+1)*vocab], tk.Mask, 1)) / float64(nFree)
				}
				continue
			}
			row := logits[i*vocab : (i+1)*vocab]
			lp := policy.LogProbs(row, tk.Mask, 1)
			logp := lp[tk.Target]
			logratio := logp - tk.OldLogP
			ratio := math.Exp(logratio)
			a := float64(tk.Advantage)
			pg1, pg2 := -a*ratio, -a*math.Min(math.Max(ratio, lo), hi)
			pg += float64(tk.Weight) * math.Max(pg1, pg2) * inv
			// d pg / d logp: through the unclipped branch when it is the
			// larger or when the ratio is inside the clip range.
			dpg := 0.0
			if pg1 >= pg2 || (ratio >= lo && ratio <= hi) {
				dpg = -a * ratio
			}
			dkl := 0.0
			if c.KLCoef > 0 {
				d := tk.RefLogP - logp
				kl += (math.Exp(d) - d - 1) * inv
				dkl = 1 - math.Exp(d)
			}
			akl += (ratio - 1 - logratio) * inv
			if ratio < lo || ratio > hi {
				clip += inv
			}
			// Entropy of the (masked) distribution and its gradient.
			h := entropy(lp)
			ent += h * inv
			dLogp := inv * (float64(tk.Weight)*dpg + c.KLCoef*dkl)
			dRow := dLogits[i*vocab : (i+1)*vocab]
			for j, l := range lp {
				if math.IsInf(l, -1) {
					continue
				}
				p := math.Exp(l)
				g := -dLogp * p                    // d logp_target / d logit_j = onehot - p
				g += c.EntCoef * inv * p * (l + h) // -ent_coef * dH/dlogit_j, dH = -p (l + H)
				dRow[j] += float32(g)
			}
			dRow[tk.Target] += float32(dLogp)
		}
		m := len(valueAt)
		for i, at := range valueAt {
			d := float64(values[at] - returns[i])
			vl += 0.5 * d * d / float64(m)
			dValues[at] += float32(c.VfCoef * d / float64(m))
		}
		if stats != nil {
			*stats = ppoStats{pg, vl, ent, akl, clip, kl, entFree, float64(n)}
		}
		return pg + c.VfCoef*vl + c.KLCoef*kl - c.EntCoef*ent
	}
}

// entropy of a distribution given as log-probabilities (-Inf: excluded).
func entropy(lp []float64) float64 {
	h := 0.0
	for _, l := range lp {
		if !math.IsInf(l, -1) {
			h -= math.Exp(l) * l
		}
	}
	return h
}

// tokenLogProbs returns log pi(target) under each token's mask at the
// given logits (the frozen reference's log-probs, and the values a ratio
// test checks).
func tokenLogProbs(logits []float32, toks []ppoToken, vocab int) []float64 {
	out := make([]float64, len(toks))
	for i, tk := range toks {
		out[i] = policy.LogProbs(logits[i*vocab:(i+1)*vocab], tk.Mask, 1)[tk.Target]
	}
	return out
}
