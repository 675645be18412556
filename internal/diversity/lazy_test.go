package diversity

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// eagerSelect is the previous implementation of Select, kept as the
// reference for the lazy one: after every pick, one pass over all rows
// folds the similarity to the new pick into every max similarity (one
// matrix-vector product per pick, with dot), and a scan finds the next pick.
func eagerSelect(m Matrix, opts Options) Result {
	n := m.Rows
	res := Result{Kept: make([]bool, n), Rank: make([]int32, n), NearestSim: make([]float32, n)}
	for i := range res.Rank {
		res.Rank[i] = -1
		res.NearestSim[i] = -1
	}
	if n == 0 || opts.K <= 0 {
		return res
	}
	invNorm := make([]float32, n)
	for i := range n {
		if s := dot(m.Row(i), m.Row(i)); s > 0 {
			invNorm[i] = float32(1 / math.Sqrt(float64(s)))
		}
	}
	maxSim := res.NearestSim
	pick := firstPick(m, invNorm, opts.Seed)
	for rank := 0; pick >= 0; rank++ {
		res.Kept[pick] = true
		res.Rank[pick] = int32(rank)
		res.Order = append(res.Order, pick)
		q, qn := m.Row(pick), invNorm[pick]
		next, nextSim := -1, float32(math.Inf(1))
		for i := range n {
			if i != pick {
				if s := dot(m.Row(i), q) * invNorm[i] * qn; s > maxSim[i] {
					maxSim[i] = s
				}
			}
			if !res.Kept[i] && maxSim[i] <= opts.Threshold && maxSim[i] < nextSim {
				next, nextSim = i, maxSim[i]
			}
		}
		if rank+1 >= opts.K {
			break
		}
		pick = next
	}
	return res
}

// coverage is how well the kept rows idx represent the pool: the mean over
// all rows of the max cosine similarity to a kept row (1 for a kept row
// itself), in float64.
func coverage(m Matrix, idx []int) float64 {
	norm := func(i int) float64 {
		var s float64
		for _, v := range m.Row(i) {
			s += float64(v) * float64(v)
		}
		return math.Sqrt(s)
	}
	keptNorm := make([]float64, len(idx))
	for a, j := range idx {
		keptNorm[a] = norm(j)
	}
	var sum float64
	for i := range m.Rows {
		ni, best := norm(i), -1.0
		for a, j := range idx {
			if ni == 0 || keptNorm[a] == 0 {
				best = max(best, 0)
				continue
			}
			var ab float64
			for kk, v := range m.Row(i) {
				ab += float64(v) * float64(m.Data[j*m.Dim+kk])
			}
			best = max(best, ab/(ni*keptNorm[a]))
		}
		sum += best
	}
	return sum / float64(m.Rows)
}

// withKernels runs f with kern set to ks.
func withKernels(ks *kernelSet, f func()) {
	old := kern
	kern = ks
	defer func() { kern = old }()
	f()
}

type poolCase struct {
	name string
	m    Matrix
	opts Options
}

// poolCases are pools large enough for the parallel passes: random
// Gaussian rows (no structure: every max similarity in a narrow band) and
// clustered rows, in 64 and 384 dimensions.
func poolCases() []poolCase {
	r := rand.New(rand.NewPCG(31, 31))
	random64, _ := NewMatrix(randomRows(r, 12000, 64))
	random384, _ := NewMatrix(randomRows(r, parallelMinRows+500, 384))
	clustered64, _ := clusteredLabels(r, 12000, 64, 150, 0.4)
	clustered384, _ := clusteredLabels(r, parallelMinRows+500, 384, 300, 0.5)
	return []poolCase{
		{"random 12000x64 k150", random64, Options{K: 150, Threshold: 0.9}},
		{"random 8692x384 k200 seeded", random384, Options{K: 200, Threshold: 0.9, Seed: 5}},
		{"clustered 12000x64 k200", clustered64, Options{K: 200, Threshold: 0.9}},
		{"clustered 8692x384 k300", clustered384, Options{K: 300, Threshold: 0.9}},
		{"clustered 12000x64 tight threshold", clustered64, Options{K: 400, Threshold: 0.5}},
	}
}

// TestSelectMatchesEager compares Select with the previous, eager
// implementation on the same pools, for every kernel set this CPU runs:
// the kept set's coverage must be within 1% (the selection is the same
// greedy one, so it is in practice equal), and so must NearestSim.
func TestSelectMatchesEager(t *testing.T) {
	for _, tc := range poolCases() {
		want := eagerSelect(tc.m, tc.opts)
		wantCov := coverage(tc.m, want.Order)
		for _, ks := range kernelSets {
			t.Run(tc.name+"/"+ks.name, func(t *testing.T) {
				var got Result
				withKernels(ks, func() {
					var err error
					if got, err = Select(context.Background(), tc.m, tc.opts); err != nil {
						t.Fatal(err)
					}
				})
				gotCov := wantCov
				if !slices.Equal(got.Order, want.Order) {
					gotCov = coverage(tc.m, got.Order)
				}
				same := 0
				for i := range min(len(got.Order), len(want.Order)) {
					if got.Order[i] == want.Order[i] {
						same++
					}
				}
				t.Logf("coverage %.6f (eager %.6f); %d kept (eager %d), %d in the same place", gotCov, wantCov, len(got.Order), len(want.Order), same)
				if math.Abs(gotCov-wantCov) > 0.01*math.Abs(wantCov) {
					t.Errorf("coverage: got %.6f, eager %.6f: more than 1%% apart", gotCov, wantCov)
				}
				if len(got.Order) != len(want.Order) {
					t.Errorf("got %d kept, eager %d", len(got.Order), len(want.Order))
				}
				for i := range got.NearestSim {
					if d := math.Abs(float64(got.NearestSim[i] - want.NearestSim[i])); d > 1e-4 {
						t.Fatalf("row %d: NearestSim %.6f, eager %.6f", i, got.NearestSim[i], want.NearestSim[i])
					}
				}
				for rank, i := range got.Order {
					if !got.Kept[i] || got.Rank[i] != int32(rank) {
						t.Fatalf("row %d: kept %v rank %d, want rank %d", i, got.Kept[i], got.Rank[i], rank)
					}
				}
			})
		}
	}
}

// TestSelectWorkersAgree checks that 1, 2 and 3 workers give bitwise the
// same result (rows are split differently, and refreshed in other
// batches, but every similarity comes out the same).
func TestSelectWorkersAgree(t *testing.T) {
	for _, tc := range poolCases()[1:4] {
		var base Result
		for _, w := range []int{1, 2, 3} {
			opts := tc.opts
			opts.Workers = w
			got, err := Select(context.Background(), tc.m, opts)
			if err != nil {
				t.Fatal(err)
			}
			if w == 1 {
				base = got
				continue
			}
			if !slices.Equal(got.Order, base.Order) || !slices.Equal(got.NearestSim, base.NearestSim) {
				t.Errorf("%s: %d workers differ from 1", tc.name, w)
			}
		}
	}
}

// TestPruningChangesNothing checks that the last pass's angle-bound
// pruning skips only picks that cannot raise a max: the result is bitwise
// the same with it off, on pools where it applies (clustered) and where it
// does not (random).
func TestPruningChangesNothing(t *testing.T) {
	for _, tc := range poolCases() {
		on, err := Select(context.Background(), tc.m, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		pruning = false
		off, err := Select(context.Background(), tc.m, tc.opts)
		pruning = true
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(on.Order, off.Order) || !slices.Equal(on.NearestSim, off.NearestSim) {
			t.Errorf("%s: pruning changed the result", tc.name)
		}
	}
}

// TestPanelKernels checks every kernel set's panel products against
// float64 sums, and that a row's values do not depend on the rows it
// shares the call with (Select relies on it), for dimensions that do and
// do not fill a vector.
func TestPanelKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 13))
	for _, d := range []int{0, 1, 3, 17, 64, 384} {
		rows := randomRows(r, 5, d)
		for _, ks := range kernelSets {
			w := ks.w
			panel := make([]float32, d*w)
			for i := range panel {
				panel[i] = float32(r.NormFloat64())
			}
			out := make([]float32, 4*w)
			ks.row4(rows[0], rows[1], rows[2], rows[3], panel, out)
			other := make([]float32, 4*w)
			ks.row4(rows[4], rows[2], rows[0], rows[4], panel, other)
			for rr := range 4 {
				for c := range w {
					var want float64
					for kk := range d {
						want += float64(rows[rr][kk]) * float64(panel[kk*w+c])
					}
					if got := out[rr*w+c]; math.Abs(float64(got)-want) > 1e-4*math.Sqrt(float64(d)+1) {
						t.Fatalf("%s d=%d row %d col %d: got %v want %v", ks.name, d, rr, c, got, want)
					}
				}
			}
			for c := range w {
				if other[2*w+c] != out[c] || other[1*w+c] != out[2*w+c] {
					t.Fatalf("%s d=%d col %d: a row's value depends on its neighbours in the call", ks.name, d, c)
				}
			}
		}
	}
}
