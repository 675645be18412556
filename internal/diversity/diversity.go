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
//  2. Every vector has a "max similarity to any kept vector".
//  3. The next pick is the not-yet-kept vector with the smallest max
//     similarity (the farthest from the kept set); ties go to the lowest
//     index. A vector whose max similarity exceeds [Options.Threshold] is a
//     near-duplicate of a kept idea and is never picked.
//  4. Selection stops after k picks or when only near-duplicates are left.
//
// The result is that of updating every max similarity after every pick
// (O(N·k·d) multiply-adds, which NearestSim needs anyway), but the work is
// not one pass over the N·d matrix per pick, which would be bound by memory
// bandwidth. Max similarities only grow as picks are added, so a value
// folded over the first t picks is a lower bound on the current one. A
// heap orders the candidates by these bounds; the smallest few are brought
// up to date (their rows against the picks they have not seen, as panel
// products with the normalised picks in cache, see dot.go) until the
// smallest is current: that is the next pick. Most rows are brought up to
// date a few times in a whole selection, hundreds of picks at a time; a
// last pass folds the remaining picks into every row for NearestSim,
// skipping picks that the angle triangle inequality shows cannot raise a
// row's max (see foldPruned). Each (row, pick) similarity enters the row's
// max at most once, computed the same way whenever that happens, so the
// outcome does not depend on the order.
//
// For large pools the rows are split into one contiguous part per worker
// (GOMAXPROCS goroutines), each with its own heap: per pick, the parts find
// their local best in parallel and the best of those (lowest index on
// ties) is the pick, which is the global best. The first and last passes
// run across the same workers. A row's values do not depend on the part it
// falls in, so the result is the same for any number of workers.
package diversity

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync/atomic"

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
// pass over the rows: smaller pools do not repay the goroutine start.
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
	s := newSelector(m, res.NearestSim, min(opts.K, n), opts.Workers)
	pick := firstPick(m, s.invNorm, opts.Seed)
	s.add(pick)
	s.firstPass()
	s.candidates(opts.Threshold)
	for len(s.order) < opts.K {
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		next := s.next(opts.Threshold)
		if next < 0 {
			break
		}
		s.add(next)
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	s.lastPass()
	for rank, i := range s.order {
		res.Kept[i] = true
		res.Rank[i] = int32(rank)
	}
	res.Order = s.order
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

// selector is the state of one selection.
type selector struct {
	m       Matrix
	invNorm []float32 // 1/|row|, 0 for a zero row
	// maxSim[i] is the max similarity of row i to picks order[:upto[i]]
	// (other than itself); -1 while there are none.
	maxSim []float32
	upto   []int32
	arg    []int32 // the pick (rank) that maxSim[i] comes from; -1 if none
	order  []int
	// picks holds the kept rows normalised, in panels of ks.w vectors
	// (see dot.go): dimension kk of pick j is
	// picks[(j/w)*d*w + kk*w + j%w]; columns past the last pick are zero.
	picks   []float32
	ks      *kernelSet // kern when the selection started
	workers int
	// parts split the rows into contiguous ranges, one per worker, each
	// with its own heap of candidates.
	parts []part
}

// part is one worker's rows [lo, hi) and scratch space.
type part struct {
	lo, hi int
	heap   simHeap
	buf    []float32 // panel output
	best   heapEntry // this step's local pick
	found  bool
}

func newSelector(m Matrix, maxSim []float32, k, workers int) *selector {
	n := m.Rows
	s := &selector{m: m, maxSim: maxSim, invNorm: make([]float32, n), upto: make([]int32, n), arg: make([]int32, n), order: make([]int, 0, k), ks: kern}
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	if n < parallelMinRows {
		workers = 1
	}
	s.workers = workers
	size := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += size {
		s.parts = append(s.parts, part{lo: lo, hi: min(lo+size, n), buf: make([]float32, 4*maxPanel)})
	}
	s.parallel(func(p *part) {
		for i := p.lo; i < p.hi; i++ {
			if v := s.ks.dot(m.Row(i), m.Row(i)); v > 0 {
				s.invNorm[i] = float32(1 / math.Sqrt(float64(v)))
			}
		}
	})
	w := s.ks.w
	s.picks = make([]float32, (k+w-1)/w*w*m.Dim)
	return s
}

// parallel runs f on every part, on a goroutine each when there are
// several.
func (s *selector) parallel(f func(p *part)) {
	if len(s.parts) == 1 {
		f(&s.parts[0])
		return
	}
	var g errgroup.Group
	for i := range s.parts {
		g.Go(func() error { f(&s.parts[i]); return nil })
	}
	g.Wait()
}

// add appends row p to the picks.
func (s *selector) add(p int) {
	j := len(s.order)
	s.order = append(s.order, p)
	inv, w := s.invNorm[p], s.ks.w
	panel := s.picks[j/w*w*s.m.Dim:]
	for kk, v := range s.m.Row(p) {
		panel[kk*w+j%w] = v * inv
	}
}

// firstPass folds the first pick into every row.
func (s *selector) firstPass() {
	p := s.order[0]
	q := make([]float32, s.m.Dim)
	for kk := range q {
		q[kk] = s.picks[kk*s.ks.w]
	}
	s.parallel(func(pt *part) {
		for i := pt.lo; i < pt.hi; i++ {
			s.arg[i] = -1
			if i != p {
				s.maxSim[i] = s.ks.dot(s.m.Row(i), q) * s.invNorm[i]
				s.arg[i] = 0
			}
			s.upto[i] = 1
		}
	})
}

// candidates fills each part's heap with its rows still eligible after
// the first pick.
func (s *selector) candidates(threshold float32) {
	p := s.order[0]
	for w := range s.parts {
		pt := &s.parts[w]
		pt.heap = make(simHeap, 0, pt.hi-pt.lo)
		for i := pt.lo; i < pt.hi; i++ {
			if v := s.maxSim[i]; i != p && v <= threshold {
				pt.heap = append(pt.heap, heapEntry{v, int32(i)})
			}
		}
		pt.heap.init()
	}
}

// next returns the eligible row with the smallest max similarity to the
// picks (lowest index on ties), or -1 when none is left: the best of the
// parts' local picks.
func (s *selector) next(threshold float32) int {
	s.parallel(func(p *part) { p.best, p.found = s.localNext(p, threshold) })
	var best *part
	for w := range s.parts {
		if p := &s.parts[w]; p.found && (best == nil || p.best.less(best.best)) {
			best = p
		}
	}
	if best == nil {
		return -1
	}
	best.heap.pop()
	return int(best.best.idx)
}

// localNext finds the part's eligible row with the smallest max
// similarity and leaves it on top of the heap. Heap entries are lower
// bounds: while the top one is not current, the (up to) four smallest
// stale entries are brought up to date together and put back, and rows
// now over the threshold are dropped.
func (s *selector) localNext(p *part, threshold float32) (heapEntry, bool) {
	t := int32(len(s.order))
	h := &p.heap
	for len(*h) > 0 {
		if top := (*h)[0]; s.upto[top.idx] == t {
			return top, true
		}
		var batch [4]int32
		nb := 0
		for nb < len(batch) && len(*h) > 0 && s.upto[(*h)[0].idx] != t {
			batch[nb] = (*h)[0].idx
			nb++
			h.pop()
		}
		s.fold4(batch[:nb], p.buf)
		for _, i := range batch[:nb] {
			if v := s.maxSim[i]; v <= threshold {
				h.push(heapEntry{v, i})
			}
		}
	}
	return heapEntry{}, false
}

// lastPass folds the remaining picks into every row, four rows at a
// time across the workers. Rows already close to a pick (see foldPruned)
// go apart from the others; within each class rows are sorted by how many
// picks they lack, so rows lacking the same picks share kernel calls and
// the longest work goes first, which balances the workers.
func (s *selector) lastPass() {
	n, k := s.m.Rows, len(s.order)
	prunable := func(i int) bool { return pruning && s.arg[i] >= 0 && s.maxSim[i] >= pruneMin }
	// Counting sort by (prunable, upto).
	key := func(i int) int {
		if prunable(i) {
			return k + 1 + int(s.upto[i])
		}
		return int(s.upto[i])
	}
	count := make([]int, 2*k+3)
	for i := range n {
		count[key(i)+1]++
	}
	for u := 1; u < len(count); u++ {
		count[u] += count[u-1]
	}
	rows := make([]int32, n)
	for i := range n {
		rows[count[key(i)]] = int32(i)
		count[key(i)]++
	}
	simPicks := s.pickSims()
	const group = 64 // rows per claim
	var nextGroup atomic.Int64
	work := func() {
		sc := newPruneScratch(s)
		for {
			g := int(nextGroup.Add(1)-1) * group
			if g >= n {
				return
			}
			for b := g; b < min(g+group, n); b += 4 {
				quad := rows[b:min(b+4, n)]
				if !prunable(int(quad[0])) || !s.foldPruned(quad, simPicks, sc) {
					s.fold4(quad, sc.buf)
				}
			}
		}
	}
	if s.workers == 1 {
		work()
		return
	}
	var g errgroup.Group
	for range s.workers {
		g.Go(func() error { work(); return nil })
	}
	g.Wait()
}

// pickSims returns the similarities between the picks, k x k row-major
// (rank a's row against rank j at a*k+j).
func (s *selector) pickSims() []float32 {
	k, w, d := len(s.order), s.ks.w, s.m.Dim
	g := make([]float32, k*k)
	buf := make([]float32, 4*w)
	for a := 0; a < k; a += 4 {
		var r [4][]float32
		for q := range r {
			r[q] = s.m.Row(s.order[min(a+q, k-1)])
		}
		for c0 := 0; c0 < k; c0 += w {
			s.ks.row4(r[0], r[1], r[2], r[3], s.picks[c0*d:(c0+w)*d], buf)
			for q := range min(4, k-a) {
				inv := s.invNorm[s.order[a+q]]
				for c := c0; c < min(c0+w, k); c++ {
					g[(a+q)*k+c] = buf[q*w+c-c0] * inv
				}
			}
		}
	}
	return g
}

// Pruning with the angle triangle inequality. Let row i's max similarity
// M = cos θ come from pick b. Another pick j at angle θ(b,j) >= 2θ + δ
// from b is at angle θ(i,j) >= θ(b,j) - θ >= θ + δ from i, so it cannot
// raise the max. With θ <= 60° (M >= pruneMin), θ(b,j) >= 2θ + δ is
// sim(b,j) <= cos 2θ - margin = 2M²-1 - pruneMargin; the margin (far above
// float32 rounding in M and sim(b,j)) keeps such a pick's computed
// similarity below the computed max, so skipping it changes no value.
const (
	pruneMin    = 0.5
	pruneMargin = 1e-3
)

// pruning can be turned off to check that it changes nothing.
var pruning = true

// pruneScratch is one worker's space for foldPruned.
type pruneScratch struct {
	buf, panel []float32
	cols       []int   // union of the rows' candidate picks
	seen       []int32 // seen[j] == stamp: pick j is in cols
	stamp      int32
}

func newPruneScratch(s *selector) *pruneScratch {
	k := len(s.order)
	return &pruneScratch{buf: make([]float32, 4*s.ks.w), panel: make([]float32, s.m.Dim*s.ks.w), cols: make([]int, 0, k), seen: make([]int32, k)}
}

// foldPruned does fold4's work for rows whose max similarity is at least
// pruneMin, computing only the picks the bound above cannot rule out:
// their union, gathered into panels. For a row already close to a pick
// (an idea in a covered cluster) that is a handful of picks instead of
// all. It reports false, having changed nothing, when the union is more
// than half the picks the rows lack (fold4 is then cheaper).
func (s *selector) foldPruned(rows []int32, simPicks []float32, sc *pruneScratch) bool {
	k, w, d := len(s.order), s.ks.w, s.m.Dim
	lo := k
	for _, i := range rows {
		if s.arg[i] < 0 || s.maxSim[i] < pruneMin {
			return false
		}
		lo = min(lo, int(s.upto[i]))
	}
	sc.stamp++
	sc.cols = sc.cols[:0]
	limit := (k - lo) / 2
	for _, i := range rows {
		m := s.maxSim[i]
		cut := 2*m*m - 1 - pruneMargin
		g := simPicks[int(s.arg[i])*k : (int(s.arg[i])+1)*k]
		for j := int(s.upto[i]); j < k; j++ {
			if g[j] > cut && sc.seen[j] != sc.stamp {
				sc.seen[j] = sc.stamp
				sc.cols = append(sc.cols, j)
				if len(sc.cols) > limit {
					return false
				}
			}
		}
	}
	var idx [4]int
	var best [4]float32
	var arg [4]int32
	for r := range idx {
		idx[r] = int(rows[min(r, len(rows)-1)])
		best[r], arg[r] = s.maxSim[idx[r]], s.arg[idx[r]]
	}
	m := s.m
	for c0 := 0; c0 < len(sc.cols); c0 += w {
		chunk := sc.cols[c0:min(c0+w, len(sc.cols))]
		for c, j := range chunk {
			src := s.picks[j/w*w*d+j%w:]
			for kk := range d {
				sc.panel[kk*w+c] = src[kk*w]
			}
		}
		s.ks.row4(m.Row(idx[0]), m.Row(idx[1]), m.Row(idx[2]), m.Row(idx[3]), sc.panel, sc.buf)
		for r := range rows {
			i := idx[r]
			inv := s.invNorm[i]
			for c, j := range chunk {
				if j < int(s.upto[i]) || s.order[j] == i {
					continue
				}
				if v := sc.buf[r*w+c] * inv; v > best[r] {
					best[r], arg[r] = v, int32(j)
				}
			}
		}
	}
	for r := range rows {
		s.maxSim[idx[r]], s.arg[idx[r]], s.upto[idx[r]] = best[r], arg[r], int32(k)
	}
	return true
}

// fold4 folds the picks each of up to four rows lacks into its maxSim
// (the last row also fills the kernel's missing rows).
func (s *selector) fold4(rows []int32, buf []float32) {
	k := len(s.order)
	var idx [4]int
	lo := k
	for r := range idx {
		idx[r] = int(rows[min(r, len(rows)-1)])
		lo = min(lo, int(s.upto[idx[r]]))
	}
	if lo >= k {
		return
	}
	w, d := s.ks.w, s.m.Dim
	var best [4]float32
	var arg [4]int32
	for r := range rows {
		best[r], arg[r] = s.maxSim[idx[r]], s.arg[idx[r]]
	}
	m := s.m
	for c0 := lo / w * w; c0 < k; c0 += w {
		s.ks.row4(m.Row(idx[0]), m.Row(idx[1]), m.Row(idx[2]), m.Row(idx[3]), s.picks[c0*d:(c0+w)*d], buf)
		for r := range rows {
			i := idx[r]
			inv := s.invNorm[i]
			for c := max(c0, int(s.upto[i])); c < min(c0+w, k); c++ {
				if v := buf[r*w+c-c0] * inv; v > best[r] && s.order[c] != i {
					best[r], arg[r] = v, int32(c)
				}
			}
		}
	}
	for r := range rows {
		s.maxSim[idx[r]], s.arg[idx[r]], s.upto[idx[r]] = best[r], arg[r], int32(k)
	}
}

// heapEntry is a candidate with a lower bound on its max similarity.
type heapEntry struct {
	sim float32
	idx int32
}

func (a heapEntry) less(b heapEntry) bool {
	return a.sim < b.sim || a.sim == b.sim && a.idx < b.idx
}

// simHeap is a binary min-heap of candidates ordered by (sim, idx).
type simHeap []heapEntry

func (h simHeap) init() {
	for j := len(h)/2 - 1; j >= 0; j-- {
		h.down(j)
	}
}

func (h simHeap) down(j int) {
	n := len(h)
	for {
		l := 2*j + 1
		if l >= n {
			return
		}
		c := l
		if r := l + 1; r < n && h[r].less(h[l]) {
			c = r
		}
		if !h[c].less(h[j]) {
			return
		}
		h[j], h[c] = h[c], h[j]
		j = c
	}
}

// push adds an entry.
func (h *simHeap) push(e heapEntry) {
	*h = append(*h, e)
	s := *h
	for j := len(s) - 1; j > 0; {
		up := (j - 1) / 2
		if !s[j].less(s[up]) {
			break
		}
		s[j], s[up] = s[up], s[j]
		j = up
	}
}

// pop removes the top entry.
func (h *simHeap) pop() {
	last := len(*h) - 1
	(*h)[0] = (*h)[last]
	*h = (*h)[:last]
	h.down(0)
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
