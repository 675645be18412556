package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// refSampler is the sampler as it was before it worked on the allowed ids
// only (the slow, obvious reference): LogProbs over every id at
// temperature 1, again at the sampling temperature, every probability
// exponentiated, top-p by a stable sort of every allowed id.
type refSampler struct {
	logp, probs []float64
	idx         []int
	total       float64
	best        int
	greedy      bool
}

func (s *refSampler) prepare(logits []float32, mask Bitset, opts GenerateOptions) {
	s.logp = logProbsInto(s.logp, logits, mask, 1)
	s.greedy = opts.Temperature <= 0
	if s.greedy {
		best := -1
		for j, l := range logits {
			if (mask == nil || mask.Has(int32(j))) && (best < 0 || l > logits[best]) {
				best = j
			}
		}
		s.best = best
		return
	}
	if opts.Temperature == 1 {
		s.probs = append(s.probs[:0], s.logp...)
	} else {
		s.probs = logProbsInto(s.probs, logits, mask, opts.Temperature)
	}
	probs, idx := s.probs, s.idx[:0]
	for j := range probs {
		if !math.IsInf(probs[j], -1) {
			probs[j] = math.Exp(probs[j])
			idx = append(idx, j)
		} else {
			probs[j] = 0
		}
	}
	if opts.TopP > 0 && opts.TopP < 1 {
		sort.SliceStable(idx, func(a, b int) bool { return probs[idx[a]] > probs[idx[b]] })
		cum := 0.0
		for k, j := range idx {
			cum += probs[j]
			if cum >= opts.TopP {
				idx = idx[:k+1]
				break
			}
		}
	}
	total := 0.0
	for _, j := range idx {
		total += probs[j]
	}
	s.idx, s.total = idx, total
}

func (s *refSampler) draw(rng *rand.Rand) (int32, float32) {
	if s.greedy {
		return int32(s.best), float32(s.logp[s.best])
	}
	u := rng.Float64() * s.total
	choice := s.idx[len(s.idx)-1]
	for _, j := range s.idx {
		u -= s.probs[j]
		if u < 0 {
			choice = j
			break
		}
	}
	return int32(choice), float32(s.logp[choice])
}

// sampleCase is one row's logits and mask for the sampler's tests and
// benchmark.
type sampleCase struct {
	logits []float32
	mask   Bitset
}

// newSampleCase draws vocab logits (normal, times scale; ties when
// quantised) and a mask keeping each id with probability keep (nil when
// keep is 1; at least one id otherwise).
func newSampleCase(r *rand.Rand, vocab int, scale float64, quantised bool, keep float64) sampleCase {
	c := sampleCase{logits: make([]float32, vocab)}
	for i := range c.logits {
		l := r.NormFloat64() * scale
		if quantised {
			l = math.Round(l)
		}
		c.logits[i] = float32(l)
	}
	if keep < 1 {
		c.mask = NewBitset(vocab)
		for i := range vocab {
			if r.Float64() < keep {
				c.mask.Set(int32(i))
			}
		}
		c.mask.Set(int32(r.IntN(vocab)))
	}
	return c
}

// TestSamplerMatchesReference: the sampler draws the same tokens with
// bit-identical log-probabilities as the reference, for the same random
// stream, over vocabularies, masks, temperatures and top-p; and every
// log-probability is LogProbs's at temperature 1 for that id.
func TestSamplerMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	type row struct {
		name string
		c    sampleCase
	}
	var rows []row
	for _, vocab := range []int{1, 70, 1130, 151936} {
		if testing.Short() && vocab > 2000 {
			continue
		}
		for _, m := range []struct {
			name string
			keep float64
		}{{"nil", 1}, {"sparse", 0.002}, {"dense", 0.9}, {"single", 0}} {
			rows = append(rows,
				row{fmt.Sprintf("vocab %d, mask %s", vocab, m.name), newSampleCase(r, vocab, 3, false, m.keep)},
				row{fmt.Sprintf("vocab %d, mask %s, ties", vocab, m.name), newSampleCase(r, vocab, 2, true, m.keep)})
		}
	}
	// Logits LogProbs cannot normalise (NaN, +Inf, all -Inf), or that
	// are -Inf at some allowed ids, or peaked so that most probabilities
	// underflow.
	odd := func(name string, vocab int, keep float64, f func(c *sampleCase)) {
		c := newSampleCase(r, vocab, 3, false, keep)
		f(&c)
		rows = append(rows, row{name, c})
	}
	inf := float32(math.Inf(1))
	odd("-Inf at some ids", 200, 1, func(c *sampleCase) {
		for i := 0; i < 200; i += 3 {
			c.logits[i] = -inf
		}
	})
	odd("-Inf at some allowed ids", 200, 0.5, func(c *sampleCase) {
		for i := 0; i < 200; i += 2 {
			c.logits[i] = -inf
		}
	})
	odd("all -Inf", 130, 1, func(c *sampleCase) {
		for i := range c.logits {
			c.logits[i] = -inf
		}
	})
	odd("allowed all -Inf", 130, 0.3, func(c *sampleCase) {
		for i := range c.logits {
			if c.mask.Has(int32(i)) {
				c.logits[i] = -inf
			}
		}
	})
	odd("a NaN", 130, 1, func(c *sampleCase) { c.logits[17] = float32(math.NaN()) })
	odd("a masked NaN", 130, 0.5, func(c *sampleCase) {
		for i := range c.logits {
			if !c.mask.Has(int32(i)) {
				c.logits[i] = float32(math.NaN())
				return
			}
		}
	})
	odd("a +Inf", 130, 0.5, func(c *sampleCase) { c.logits[c.mask.first()] = inf })
	odd("peaked", 1130, 1, func(c *sampleCase) {
		for i := range c.logits {
			c.logits[i] *= 100
		}
	})
	odd("mask longer than the row", 100, 0.5, func(c *sampleCase) {
		all := ^uint64(0)
		c.mask = append(c.mask, all)
		c.mask[1] |= all << 40
	})

	var got sampler // reused across rows, as Generate reuses it
	for _, rw := range rows {
		for _, temp := range []float64{0, 1, 0.7} {
			for _, topP := range []float64{1, 0.9, 0.5, 0.999999} {
				if temp == 0 && topP != 1 {
					continue
				}
				opts := GenerateOptions{Temperature: temp, TopP: topP}
				var want refSampler
				want.prepare(rw.c.logits, rw.c.mask, opts)
				got.prepare(rw.c.logits, rw.c.mask, opts)
				lp := LogProbs(rw.c.logits, rw.c.mask, 1)
				seed := r.Uint64()
				rw1, rw2 := rand.New(rand.NewPCG(seed, 1)), rand.New(rand.NewPCG(seed, 1))
				for d := range 20 {
					wt, wl := want.draw(rw1)
					gt, gl := got.draw(rw2)
					if gt != wt || math.Float32bits(gl) != math.Float32bits(wl) {
						t.Fatalf("%s, temperature %g, top-p %g, draw %d: got token %d log-prob %v, want %d %v", rw.name, temp, topP, d, gt, gl, wt, wl)
					}
					if math.Float32bits(gl) != math.Float32bits(float32(lp[gt])) {
						t.Fatalf("%s, temperature %g, top-p %g, draw %d: token %d log-prob %v, LogProbs %v", rw.name, temp, topP, d, gt, gl, float32(lp[gt]))
					}
				}
			}
		}
	}
}

// first is the smallest id in the set (-1 when empty).
func (b Bitset) first() int32 {
	for i := range int32(len(b) * 64) {
		if b.Has(i) {
			return i
		}
	}
	return -1
}

// BenchmarkSampleToken: one row's prepare and draw, the reference (the
// sampler before it worked on the allowed ids only) against the sampler,
// over Qwen3's 151,936 rows and mlerl's trimmed 1,130 ids; masks nil,
// dense (90% of ids, like the free-text mask) and sparse (0.2%, like a
// grammar's choice); greedy, temperature 1, and 0.7 with top-p 0.95
// (evaluation's default).
func BenchmarkSampleToken(b *testing.B) {
	for _, vocab := range []int{151936, 1130} {
		for _, m := range []struct {
			name string
			keep float64
		}{{"nil", 1}, {"dense", 0.9}, {"sparse", 0.002}} {
			c := newSampleCase(rand.New(rand.NewPCG(1, 2)), vocab, 3, false, m.keep)
			for _, mode := range []struct {
				name string
				opts GenerateOptions
			}{{"greedy", GenerateOptions{}}, {"t1", GenerateOptions{Temperature: 1}}, {"t0.7-p0.95", GenerateOptions{Temperature: 0.7, TopP: 0.95}}} {
				name := fmt.Sprintf("vocab=%d/mask=%s/%s", vocab, m.name, mode.name)
				b.Run(name+"/impl=reference", func(b *testing.B) {
					var s refSampler
					rng := rand.New(rand.NewPCG(3, 4))
					s.prepare(c.logits, c.mask, mode.opts) // its buffers, as Generate's pooled samplers have them
					b.ResetTimer()
					for range b.N {
						s.prepare(c.logits, c.mask, mode.opts)
						s.draw(rng)
					}
				})
				b.Run(name+"/impl=sampler", func(b *testing.B) {
					var s sampler
					rng := rand.New(rand.NewPCG(3, 4))
					s.prepare(c.logits, c.mask, mode.opts) // its buffers, as Generate's pooled samplers have them
					b.ResetTimer()
					for range b.N {
						s.prepare(c.logits, c.mask, mode.opts)
						s.draw(rng)
					}
				})
			}
		}
	}
}

// TestExpSub: expSub is math.Exp bit for bit, in and out of its fast
// range, at every slice length's tail.
func TestExpSub(t *testing.T) {
	t.Logf("exp_amd64.s's algorithm in Go: %v", exactExp())
	r := rand.New(rand.NewPCG(9, 10))
	n := 1 << 21
	if testing.Short() {
		n = 1 << 16
	}
	x := make([]float64, n)
	for k := range x {
		switch k % 4 {
		case 0:
			x[k] = -r.ExpFloat64() * 30
		case 1:
			x[k] = (r.Float64()*2 - 1) * 800
		case 2:
			x[k] = r.NormFloat64() * 3
		default:
			x[k] = float64(float32(r.NormFloat64() * 5))
		}
	}
	for k, v := range []float64{math.Inf(-1), math.Inf(1), math.NaN(), 0, math.Copysign(0, -1), -700, 700, -700.0000001, 709.8, -745.2, -1e300, 1e-300} {
		x[k*5] = v
	}
	got := make([]float64, n)
	for _, c := range []float64{0, 1.5, -3} {
		for _, m := range []int{n, n - 1, 3, 1} {
			clear(got)
			expSub(got[:m], x[:m], c)
			for k, v := range x[:m] {
				if want := math.Exp(v - c); math.Float64bits(got[k]) != math.Float64bits(want) {
					t.Fatalf("exp(%v - %v) = %v, math.Exp %v", v, c, got[k], want)
				}
			}
		}
	}
}
