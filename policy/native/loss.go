package native

import (
	"fmt"
	"math"
)

// CrossEntropy returns the weighted mean negative log-likelihood of
// targets at flat positions idx: sum_i w_i*nll_i / sum_i w_i, or 0 when
// the weights sum to 0. weights nil means all 1.
func (m *Model) CrossEntropy(idx, targets []int32, weights []float32) (float64, error) {
	return m.crossEntropy(idx, targets, weights, false)
}

// CrossEntropyBackward is CrossEntropy followed by Backward of that loss,
// fused: the logits buffer is turned into its own gradient in place, so
// nothing of size [len(idx), Vocab] is allocated besides it. It adds to
// the gradients (call ZeroGrad first for a fresh step).
func (m *Model) CrossEntropyBackward(idx, targets []int32, weights []float32) (float64, error) {
	return m.crossEntropy(idx, targets, weights, true)
}

// ceChunkFloats bounds the logits CrossEntropy holds at once: positions
// are taken in chunks of a multiple of ceChunkAlign rows with at most
// this many logits (at least ceChunkAlign rows), so that a 150k-id
// vocabulary at a thousand positions does not hold a gigabyte of logits
// (and their gradient) at once. Chunks start at multiples of
// ceChunkAlign positions, a multiple of both GEMMs' k blocks (kernels.kc;
// gemmBF16KP pairs): the LM head's weight gradient then sums the
// positions in the same order as one product over all of them would, bit
// for bit. The last chunk takes the rest (up to twice a chunk), so that
// no chunk is small enough to take another product path.
const (
	ceChunkAlign  = 2 * gemmBF16KP
	ceChunkFloats = 1 << 26
)

// ceChunkRows is the number of positions per chunk for a vocabulary of v
// ids (a variable for tests).
var ceChunkRows = func(v int) int {
	return max(ceChunkAlign, ceChunkFloats/v/ceChunkAlign*ceChunkAlign)
}

func (m *Model) crossEntropy(idx, targets []int32, weights []float32, backward bool) (float64, error) {
	c, hs := m.Config, &m.head
	k, d, v := len(idx), c.DModel, c.Vocab
	if len(targets) != k || (weights != nil && len(weights) != k) {
		return 0, fmt.Errorf("native: cross-entropy over %d positions got %d targets and %d weights", k, len(targets), len(weights))
	}
	for i, t := range targets {
		if t < 0 || int(t) >= v {
			return 0, fmt.Errorf("native: target %d (entry %d) is outside the vocabulary [0, %d)", t, i, v)
		}
	}
	if err := m.headsInput(idx); err != nil {
		return 0, err
	}
	wsum := 0.0
	for i := range k {
		wsum += float64(weightAt(weights, i))
	}
	inv := float32(0)
	if wsum > 0 {
		inv = float32(1 / wsum)
	}
	hs.nll = grow(hs.nll, k)
	if backward {
		hs.dh = grow(hs.dh, k*d)
		clear(hs.dh)
	}
	rows := ceChunkRows(v)
	chunks := max(1, k/rows)
	for ch := range chunks {
		i0, i1 := ch*rows, (ch+1)*rows
		if ch == chunks-1 {
			i1 = k
		}
		kc := i1 - i0
		hs.logits = grow(hs.logits, kc*v)
		m.lmForward(hs.logits, hs.h[i0*d:], kc, m.bf16, nil)
		m.p.chunks(kc, 16, func(_, lo, hi int) {
			for j := lo; j < hi; j++ {
				i := i0 + j
				z := hs.logits[j*v : (j+1)*v]
				w := weightAt(weights, i)
				if w == 0 {
					hs.nll[i] = 0
					if backward {
						clear(z)
					}
					continue
				}
				t := targets[i]
				zt := z[t]
				mx := kern.max(z)
				s := kern.expShift(z, mx, 1) // z = exp(z - mx)
				hs.nll[i] = float32(math.Log(float64(s))) + mx - zt
				if backward {
					coef := w * inv
					kern.scale(z, coef/s)
					z[t] -= coef
				}
			}
		})
		if backward {
			m.lmBackward(hs.dh[i0*d:], hs.logits, hs.h[i0*d:], kc)
		}
	}
	loss := 0.0
	for i := range k {
		loss += float64(weightAt(weights, i)) * float64(hs.nll[i])
	}
	if wsum > 0 {
		loss /= wsum
	}
	if backward {
		m.backwardHeads(nil)
		m.backwardTrunk()
	}
	return loss, nil
}

func weightAt(w []float32, i int) float32 {
	if w == nil {
		return 1
	}
	return w[i]
}

// LogSoftmaxRows replaces each row of x (len(x)/cols rows of cols
// values) by its log-softmax.
func LogSoftmaxRows(x []float32, cols int) {
	if cols <= 0 || len(x)%cols != 0 {
		panic(fmt.Sprintf("native: LogSoftmaxRows: %d values are not rows of %d", len(x), cols))
	}
	if err := selectKernels(); err != nil {
		panic(err)
	}
	p := workers()
	p.chunks(len(x)/cols, 16, func(w, lo, hi int) {
		tmp := grow(p.ws[w].buf, cols)
		for i := lo; i < hi; i++ {
			row := x[i*cols : (i+1)*cols]
			copy(tmp, row)
			mx := kern.max(tmp)
			lse := mx + float32(math.Log(float64(kern.expShift(tmp, mx, 1))))
			for j := range row {
				row[j] -= lse
			}
		}
		p.ws[w].buf = tmp
	})
}

// ExpRows sets every value of x (rows of cols values) to its
// exponential, the rows split over the workers, with the kernels' expf
// (kernels.expShift: within a few float32 roundings of math.Exp). SFT's
// loss turns its log-probabilities into the probabilities of its
// gradient with it: a vocabulary's worth per target token.
func ExpRows(x []float32, cols int) {
	if cols <= 0 || len(x)%cols != 0 {
		panic(fmt.Sprintf("native: ExpRows: %d values are not rows of %d", len(x), cols))
	}
	if err := selectKernels(); err != nil {
		panic(err)
	}
	p := workers()
	p.chunks(len(x)/cols, 16, func(w, lo, hi int) {
		kern.expShift(x[lo*cols:hi*cols], 0, 1)
	})
}
