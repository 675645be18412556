// Package diversity keeps a compact, diverse subset of a pool of embedded
// ideas: greedy farthest-point (max-min cosine distance) selection, skipping
// near-duplicates of ideas already kept (ML-Agent's idea-pool filter).
//
// Start with [Select] (one pool) or [SelectPools] (many pools in parallel),
// then [MeanPairwiseDistance] to measure how spread out a kept set is.
//
// The algorithm, for a pool of N vectors of dimension d and a budget k:
//
//  1. The first pick is the vector most similar to the pool's mean direction
//     (the most typical idea), or, when [Options.Seed] is not 0, a vector
//     drawn with that seed. Either way the result is deterministic.
//  2. Every vector keeps a running "max similarity to any kept vector";
//     after each pick one matrix-vector product against the new pick
//     updates it (O(N·d) per pick, O(N·k·d) in all, O(N) extra memory
//     besides the caller's N·d matrix).
//  3. The next pick is the not-yet-kept vector with the smallest running
//     max similarity (the farthest from the kept set); ties go to the lowest
//     index. A vector whose max similarity exceeds [Options.Threshold] is a
//     near-duplicate of a kept idea and is never picked.
//  4. Selection stops after k picks or when only near-duplicates are left.
//
// The dot products run in row chunks across GOMAXPROCS goroutines for large
// pools; the chunk results are reduced in index order, so the outcome does
// not depend on the number of workers.
package diversity

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"

	"golang.org/x/sync/errgroup"
)

// Matrix is N row vectors of equal dimension stored contiguously (row i is
// Data[i*Dim:(i+1)*Dim]). Select never modifies it.
type Matrix struct {
	Data []float32
	Rows int
	Dim  int
}

// NewMatrix copies rows into a Matrix. It fails when rows differ in
// length or are empty vectors.
func NewMatrix(rows [][]float32) (Matrix, error) {
	if len(rows) == 0 {
		return Matrix{}, nil
	}
	d := len(rows[0])
	if d == 0 {
		return Matrix{}, errors.New("diversity: row 0 is an empty vector")
	}
	m := Matrix{Data: make([]float32, 0, len(rows)*d), Rows: len(rows), Dim: d}
	for i, r := range rows {
		if len(r) != d {
			return Matrix{}, fmt.Errorf("diversity: row %d has dimension %d, row 0 has %d", i, len(r), d)
		}
		m.Data = append(m.Data, r...)
	}
	return m, nil
}

// Row returns row i (a view, not a copy).
func (m Matrix) Row(i int) []float32 { return m.Data[i*m.Dim : (i+1)*m.Dim] }

func (m Matrix) check() error {
	if m.Rows < 0 || m.Dim < 0 || len(m.Data) != m.Rows*m.Dim {
		return fmt.Errorf("diversity: matrix of %d rows x %d dims has %d values", m.Rows, m.Dim, len(m.Data))
	}
	return nil
}

// Options control a selection. The zero value is not useful; start from
// [DefaultOptions].
type Options struct {
	// K is how many vectors to keep at most.
	K int
	// Threshold is the cosine similarity above which a candidate counts as a
	// near-duplicate of a kept vector and is skipped; 1 or more disables it.
	Threshold float32
	// Seed 0 starts from the vector closest to the pool's mean direction;
	// any other value starts from a vector drawn with this seed.
	Seed uint64
	// Workers bounds the goroutines used (0: GOMAXPROCS).
	Workers int
}

// DefaultOptions keeps 10 per pool and skips candidates with cosine
// similarity above 0.9 to a kept idea.
func DefaultOptions() Options { return Options{K: 10, Threshold: 0.9} }

// Result is the verdict for every vector of a pool, indexed like its rows.
type Result struct {
	// Kept marks the selected vectors.
	Kept []bool
	// Rank is the selection order of kept vectors (0 first) and -1 for the rest.
	Rank []int32
	// NearestSim is the cosine similarity to the most similar kept vector
	// other than the vector itself; -1 when there is none (a pool of one).
	NearestSim []float32
	// Order lists the kept row indices in selection order.
	Order []int
}

// parallelMinRows is the pool size below which one goroutine does each
// matrix-vector product: smaller pools do not repay the goroutine start.
const parallelMinRows = 8192

// Select runs the greedy farthest-point selection on one pool (see the
// package doc). An empty pool gives an empty Result; K <= 0 keeps nothing.
func Select(ctx context.Context, m Matrix, opts Options) (Result, error) {
	if err := m.check(); err != nil {
		return Result{}, err
	}
	n := m.Rows
	res := Result{Kept: make([]bool, n), Rank: make([]int32, n), NearestSim: make([]float32, n)}
	for i := range res.Rank {
		res.Rank[i] = -1
		res.NearestSim[i] = -1
	}
	if n == 0 || opts.K <= 0 {
		return res, nil
	}
	invNorm := make([]float32, n)
	for i := range n {
		if s := dot(m.Row(i), m.Row(i)); s > 0 {
			invNorm[i] = float32(1 / math.Sqrt(float64(s)))
		}
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	if n < parallelMinRows {
		workers = 1
	}

	// maxSim is the running max cosine similarity to the kept set;
	// -1 (the minimum possible) until the first update.
	maxSim := res.NearestSim
	pick := firstPick(m, invNorm, opts.Seed)
	for rank := 0; pick >= 0; rank++ {
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		res.Kept[pick] = true
		res.Rank[pick] = int32(rank)
		res.Order = append(res.Order, pick)
		next, err := update(m, invNorm, maxSim, res.Kept, pick, opts.Threshold, workers)
		if err != nil {
			return Result{}, err
		}
		if rank+1 >= opts.K {
			break
		}
		pick = next
	}
	return res, nil
}

// firstPick returns the seeded random row, or the row most similar to the
// mean of the normalised rows (lowest index on ties).
func firstPick(m Matrix, invNorm []float32, seed uint64) int {
	if seed != 0 {
		return rand.New(rand.NewPCG(seed, 0x6d6c6572)).IntN(m.Rows)
	}
	mean := make([]float32, m.Dim)
	for i := range m.Rows {
		axpy(invNorm[i], m.Row(i), mean)
	}
	best, bestSim := 0, float32(math.Inf(-1))
	for i := range m.Rows {
		if s := dot(m.Row(i), mean) * invNorm[i]; s > bestSim {
			best, bestSim = i, s
		}
	}
	return best
}

// candidate is a chunk's best next pick.
type candidate struct {
	idx int
	sim float32
}

// update folds the similarity to the new pick p into maxSim (for every row
// but p itself) and returns the eligible row with the smallest max
// similarity, or -1 when none is left.
func update(m Matrix, invNorm, maxSim []float32, kept []bool, p int, threshold float32, workers int) (int, error) {
	q := m.Row(p)
	qn := invNorm[p]
	scan := func(lo, hi int) candidate {
		best := candidate{idx: -1, sim: float32(math.Inf(1))}
		for i := lo; i < hi; i++ {
			if i != p {
				if s := dot(m.Data[i*m.Dim:(i+1)*m.Dim], q) * invNorm[i] * qn; s > maxSim[i] {
					maxSim[i] = s
				}
			}
			if !kept[i] && maxSim[i] <= threshold && maxSim[i] < best.sim {
				best = candidate{i, maxSim[i]}
			}
		}
		return best
	}
	var best candidate
	if workers == 1 {
		best = scan(0, m.Rows)
	} else {
		chunks := make([]candidate, workers)
		size := (m.Rows + workers - 1) / workers
		var g errgroup.Group
		for w := range workers {
			lo, hi := w*size, min((w+1)*size, m.Rows)
			g.Go(func() error {
				chunks[w] = candidate{idx: -1}
				if lo < hi {
					chunks[w] = scan(lo, hi)
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return -1, err
		}
		best = candidate{idx: -1, sim: float32(math.Inf(1))}
		for _, c := range chunks { // chunks are in index order: ties keep the lowest index
			if c.idx >= 0 && c.sim < best.sim {
				best = c
			}
		}
	}
	return best.idx, nil
}

// SelectPools runs [Select] on every pool, pools in parallel (at most
// opts.Workers at once). Results are indexed like pools.
func SelectPools(ctx context.Context, pools []Matrix, opts Options) ([]Result, error) {
	out := make([]Result, len(pools))
	g, gctx := errgroup.WithContext(ctx)
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	g.SetLimit(workers)
	for i, m := range pools {
		g.Go(func() error {
			r, err := Select(gctx, m, opts)
			if err != nil {
				return fmt.Errorf("pool %d: %w", i, err)
			}
			out[i] = r
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// MeanPairwiseDistance returns the mean cosine distance (1 - cosine
// similarity) over all pairs of the rows idx of m; 0 for fewer than two rows.
func MeanPairwiseDistance(m Matrix, idx []int) float64 {
	if len(idx) < 2 {
		return 0
	}
	norms := make([]float64, len(idx))
	for a, i := range idx {
		norms[a] = math.Sqrt(float64(dot(m.Row(i), m.Row(i))))
	}
	var sum float64
	pairs := 0
	for a := range idx {
		for b := a + 1; b < len(idx); b++ {
			cos := 0.0
			if norms[a] > 0 && norms[b] > 0 {
				cos = float64(dot(m.Row(idx[a]), m.Row(idx[b]))) / (norms[a] * norms[b])
			}
			sum += 1 - cos
			pairs++
		}
	}
	return sum / float64(pairs)
}
