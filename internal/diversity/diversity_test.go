package diversity

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
	"time"
)

// referenceSelect is the slow, obvious version of Select: float64
// arithmetic, every distance recomputed from scratch at every step.
func referenceSelect(rows [][]float32, k int, threshold float64, seed uint64) (order []int, nearest []float64) {
	n := len(rows)
	cos := func(a, b []float32) float64 {
		var ab, aa, bb float64
		for i := range a {
			ab += float64(a[i]) * float64(b[i])
			aa += float64(a[i]) * float64(a[i])
			bb += float64(b[i]) * float64(b[i])
		}
		if aa == 0 || bb == 0 {
			return 0
		}
		return ab / math.Sqrt(aa*bb)
	}
	if n == 0 || k <= 0 {
		nearest = make([]float64, n)
		for i := range nearest {
			nearest[i] = -1
		}
		return nil, nearest
	}
	var first int
	if seed != 0 {
		first = rand.New(rand.NewPCG(seed, 0x6d6c6572)).IntN(n)
	} else {
		mean := make([]float64, len(rows[0]))
		for _, r := range rows {
			var nn float64
			for _, v := range r {
				nn += float64(v) * float64(v)
			}
			for j, v := range r {
				if nn > 0 {
					mean[j] += float64(v) / math.Sqrt(nn)
				}
			}
		}
		m32 := make([]float32, len(mean))
		for j := range mean {
			m32[j] = float32(mean[j])
		}
		best := math.Inf(-1)
		for i, r := range rows {
			if c := cos(r, m32); c > best+1e-9 {
				best, first = c, i
			}
		}
	}
	kept := map[int]bool{first: true}
	order = []int{first}
	for len(order) < k {
		next, nextSim := -1, math.Inf(1)
		for i := range rows {
			if kept[i] {
				continue
			}
			maxSim := -1.0
			for _, j := range order {
				maxSim = max(maxSim, cos(rows[i], rows[j]))
			}
			if maxSim > threshold {
				continue
			}
			if maxSim < nextSim-1e-9 {
				next, nextSim = i, maxSim
			}
		}
		if next < 0 {
			break
		}
		kept[next] = true
		order = append(order, next)
	}
	nearest = make([]float64, n)
	for i := range rows {
		nearest[i] = -1
		for _, j := range order {
			if j != i {
				nearest[i] = max(nearest[i], cos(rows[i], rows[j]))
			}
		}
	}
	return order, nearest
}

func randomRows(r *rand.Rand, n, d int) [][]float32 {
	rows := make([][]float32, n)
	for i := range rows {
		rows[i] = make([]float32, d)
		for j := range rows[i] {
			rows[i][j] = float32(r.NormFloat64())
		}
	}
	return rows
}

func TestSelectMatchesReference(t *testing.T) {
	dup := randomRows(rand.New(rand.NewPCG(7, 7)), 30, 16)
	for i := 10; i < 30; i++ { // rows 10..29 are noisy copies of rows 0..9
		for j := range dup[i] {
			dup[i][j] = dup[i-10][j] + 0.05*float32(rand.New(rand.NewPCG(uint64(i), uint64(j))).NormFloat64())
		}
	}
	withZero := randomRows(rand.New(rand.NewPCG(3, 3)), 12, 5)
	withZero[4] = make([]float32, 5)
	tests := []struct {
		name      string
		rows      [][]float32
		k         int
		threshold float64
		seed      uint64
	}{
		{"one row", randomRows(rand.New(rand.NewPCG(1, 1)), 1, 4), 10, 0.9, 0},
		{"k larger than pool", randomRows(rand.New(rand.NewPCG(1, 2)), 7, 6), 10, 2, 0},
		{"k zero", randomRows(rand.New(rand.NewPCG(1, 2)), 7, 6), 0, 0.9, 0},
		{"random 200x32 k10", randomRows(rand.New(rand.NewPCG(2, 2)), 200, 32), 10, 0.9, 0},
		{"random 200x32 k10 seeded", randomRows(rand.New(rand.NewPCG(2, 2)), 200, 32), 10, 0.9, 42},
		{"odd dimension", randomRows(rand.New(rand.NewPCG(5, 2)), 90, 37), 25, 1, 0},
		{"near duplicates skipped", dup, 30, 0.9, 0},
		{"near duplicates seeded", dup, 30, 0.9, 9},
		{"tight threshold", randomRows(rand.New(rand.NewPCG(4, 4)), 60, 3), 60, 0.5, 0},
		{"zero vector", withZero, 12, 0.99, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := NewMatrix(tt.rows)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Select(context.Background(), m, Options{K: tt.k, Threshold: float32(tt.threshold), Seed: tt.seed})
			if err != nil {
				t.Fatal(err)
			}
			wantOrder, wantNearest := referenceSelect(tt.rows, tt.k, tt.threshold, tt.seed)
			if !slices.Equal(got.Order, wantOrder) {
				t.Fatalf("order: got %v want %v", got.Order, wantOrder)
			}
			for i := range tt.rows {
				wantRank := int32(slices.Index(wantOrder, i))
				if got.Rank[i] != wantRank || got.Kept[i] != (wantRank >= 0) {
					t.Errorf("row %d: got rank %d kept %v, want rank %d", i, got.Rank[i], got.Kept[i], wantRank)
				}
				if math.Abs(float64(got.NearestSim[i])-wantNearest[i]) > 1e-5 {
					t.Errorf("row %d: got nearest sim %.6f want %.6f", i, got.NearestSim[i], wantNearest[i])
				}
			}
		})
	}
}

func TestSelectNearDuplicatesNeverBothKept(t *testing.T) {
	rows := [][]float32{{1, 0}, {0.999, 0.01}, {0, 1}, {-1, 0}, {-0.999, -0.02}}
	m, _ := NewMatrix(rows)
	got, err := Select(context.Background(), m, Options{K: 5, Threshold: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Order) != 3 {
		t.Fatalf("got %d kept (%v), want 3: one of each near-duplicate pair plus the orthogonal one", len(got.Order), got.Order)
	}
	if got.Kept[0] && got.Kept[1] || got.Kept[3] && got.Kept[4] {
		t.Errorf("got kept %v: a near-duplicate pair was kept twice", got.Kept)
	}
}

// TestSelectParallelMatchesSerial checks that a pool large enough to be
// split across goroutines gives the same verdict with 1 and 4 workers.
func TestSelectParallelMatchesSerial(t *testing.T) {
	rows := randomRows(rand.New(rand.NewPCG(11, 11)), parallelMinRows+1001, 8)
	m, _ := NewMatrix(rows)
	one, err := Select(context.Background(), m, Options{K: 40, Threshold: 0.95, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	four, err := Select(context.Background(), m, Options{K: 40, Threshold: 0.95, Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(one.Order, four.Order) || !slices.Equal(one.NearestSim, four.NearestSim) {
		t.Errorf("got order %v with 4 workers, want %v as with 1", four.Order, one.Order)
	}
}

func TestSelectPools(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	var pools []Matrix
	for i := range 6 {
		m, _ := NewMatrix(randomRows(r, 20+i*10, 12))
		pools = append(pools, m)
	}
	opts := Options{K: 5, Threshold: 0.9, Workers: 3}
	got, err := SelectPools(context.Background(), pools, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range pools {
		want, _ := Select(context.Background(), m, opts)
		if !slices.Equal(got[i].Order, want.Order) {
			t.Errorf("pool %d: got order %v want %v", i, got[i].Order, want.Order)
		}
	}
}

func TestNewMatrixErrors(t *testing.T) {
	tests := []struct {
		name string
		rows [][]float32
		want string
	}{
		{"ragged", [][]float32{{1, 2}, {1}}, "diversity: row 1 has dimension 1, row 0 has 2"},
		{"empty vector", [][]float32{{}}, "diversity: row 0 is an empty vector"},
	}
	for _, tt := range tests {
		_, err := NewMatrix(tt.rows)
		if err == nil || err.Error() != tt.want {
			t.Errorf("%s: got error %v want %q", tt.name, err, tt.want)
		}
	}
	if _, err := Select(context.Background(), Matrix{Data: make([]float32, 5), Rows: 2, Dim: 3}, DefaultOptions()); err == nil {
		t.Error("Select on an inconsistent matrix: got no error")
	}
}

func TestDotMatchesGeneric(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for _, n := range []int{0, 1, 7, 8, 31, 32, 33, 100, 384, 1000} {
		a, b := make([]float32, n), make([]float32, n)
		var want float64
		for i := range a {
			a[i], b[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
			want += float64(a[i]) * float64(b[i])
		}
		for _, ks := range kernelSets {
			if got := ks.dot(a, b); math.Abs(float64(got)-want) > 1e-4*math.Sqrt(float64(n)+1) {
				t.Errorf("%s n=%d: got %v want %v", ks.name, n, got, want)
			}
		}
	}
}

// clusteredLabels returns n unit vectors around c random centres whose
// sizes are skewed (centre j is drawn with probability growing towards
// j = 0), as idea pools are: many rewordings of a few common ideas, and
// each row's centre.
func clusteredLabels(r *rand.Rand, n, d, c int, noise float64) (Matrix, []int) {
	centres := randomRows(r, c, d)
	m := Matrix{Data: make([]float32, n*d), Rows: n, Dim: d}
	labels := make([]int, n)
	for i := range n {
		row := m.Row(i)
		u := r.Float64()
		labels[i] = int(float64(c) * u * u)
		ctr := centres[labels[i]]
		var nn float64
		for j := range row {
			row[j] = ctr[j] + float32(noise*r.NormFloat64())
			nn += float64(row[j]) * float64(row[j])
		}
		for j := range row {
			row[j] /= float32(math.Sqrt(nn))
		}
	}
	return m, labels
}

// distinct counts the different labels among rows idx.
func distinct(labels, idx []int) int {
	seen := map[int]bool{}
	for _, i := range idx {
		seen[labels[i]] = true
	}
	return len(seen)
}

// TestKeptSetMoreDiverseThanRandom checks the filter's purpose on clustered
// data: the kept set is more spread out than random subsets of its size.
func TestKeptSetMoreDiverseThanRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 21))
	m, labels := clusteredLabels(r, 2000, 64, 30, 0.3)
	res, err := Select(context.Background(), m, Options{K: 30, Threshold: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	kept := MeanPairwiseDistance(m, res.Order)
	random := meanRandomSubsetDistance(r, m, len(res.Order), 20)
	if kept <= random {
		t.Errorf("got kept-set mean distance %.4f, want more than random subsets' %.4f", kept, random)
	}
	if got := distinct(labels, res.Order); got != 30 {
		t.Errorf("got %d of 30 clusters among the %d kept, want all 30", got, len(res.Order))
	}
}

func meanRandomSubsetDistance(r *rand.Rand, m Matrix, size, trials int) float64 {
	var sum float64
	for range trials {
		sum += MeanPairwiseDistance(m, r.Perm(m.Rows)[:size])
	}
	return sum / float64(trials)
}

func TestMeanPairwiseDistance(t *testing.T) {
	m, _ := NewMatrix([][]float32{{1, 0}, {0, 2}, {-3, 0}})
	tests := []struct {
		idx  []int
		want float64
	}{
		{nil, 0}, {[]int{0}, 0}, {[]int{0, 1}, 1}, {[]int{0, 2}, 2}, {[]int{0, 1, 2}, (1 + 2 + 1) / 3.0},
	}
	for _, tt := range tests {
		if got := MeanPairwiseDistance(m, tt.idx); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("MeanPairwiseDistance(%v): got %v want %v", tt.idx, got, tt.want)
		}
	}
}

// BenchmarkDiversity100k selects 1,000 of 100,000 clustered 384-d vectors
// and reports the kept set's mean pairwise cosine distance next to that of
// random subsets of the same size.
func BenchmarkDiversity100k(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	m, labels := clusteredLabels(r, 100_000, 384, 1000, 0.5)
	opts := Options{K: 1000, Threshold: 0.9}
	var res Result
	cpu0 := cpuSeconds()
	b.ResetTimer()
	for range b.N {
		var err error
		if res, err = Select(context.Background(), m, opts); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	// CPU time is what a shared machine's load inflates least.
	b.ReportMetric((cpuSeconds()-cpu0)/float64(b.N), "cpu_s/op")
	b.ReportMetric(float64(len(res.Order)), "kept")
	b.ReportMetric(nearestCoverage(res), "coverage")
	b.ReportMetric(MeanPairwiseDistance(m, res.Order), "kept_mean_dist")
	b.ReportMetric(meanRandomSubsetDistance(r, m, len(res.Order), 5), "random_mean_dist")
	// Distinct clusters (underlying ideas) covered: the kept set against
	// the mean of 5 random subsets of its size.
	b.ReportMetric(float64(distinct(labels, res.Order)), "kept_clusters")
	var random int
	for range 5 {
		random += distinct(labels, r.Perm(m.Rows)[:len(res.Order)])
	}
	b.ReportMetric(float64(random)/5, "random_clusters")
}

// BenchmarkEagerSelect100k runs the previous, eager implementation
// (eagerSelect, one goroutine) on BenchmarkDiversity100k's pool and
// reports how the current Select's kept set compares: coverage of both
// and how many picks are the same in the same place. Slow (tens of CPU
// seconds): run it on its own.
func BenchmarkEagerSelect100k(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	m, _ := clusteredLabels(r, 100_000, 384, 1000, 0.5)
	opts := Options{K: 1000, Threshold: 0.9}
	cur, err := Select(context.Background(), m, opts)
	if err != nil {
		b.Fatal(err)
	}
	var res Result
	cpu0 := cpuSeconds()
	b.ResetTimer()
	for range b.N {
		res = eagerSelect(m, opts)
	}
	b.StopTimer()
	b.ReportMetric((cpuSeconds()-cpu0)/float64(b.N), "cpu_s/op")
	b.ReportMetric(nearestCoverage(res), "eager_coverage")
	b.ReportMetric(nearestCoverage(cur), "coverage")
	same := 0
	for i := range min(len(res.Order), len(cur.Order)) {
		if res.Order[i] == cur.Order[i] {
			same++
		}
	}
	b.ReportMetric(float64(same), "same_picks")
	var maxDiff float64
	for i := range res.NearestSim {
		maxDiff = max(maxDiff, math.Abs(float64(res.NearestSim[i]-cur.NearestSim[i])))
	}
	b.ReportMetric(maxDiff, "max_nearest_diff")
}

// nearestCoverage is coverage (see lazy_test.go) read off a Result: the
// mean over all rows of the max cosine similarity to a kept row, 1 for
// kept rows themselves.
func nearestCoverage(res Result) float64 {
	var sum float64
	for i, s := range res.NearestSim {
		if res.Kept[i] {
			s = 1
		}
		sum += float64(s)
	}
	return sum / float64(len(res.NearestSim))
}

// cpuSeconds is the process's user plus system CPU time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func ExampleSelect() {
	m, _ := NewMatrix([][]float32{{1, 0}, {0.99, 0.05}, {0, 1}, {0.7, 0.7}})
	res, _ := Select(context.Background(), m, Options{K: 3, Threshold: 0.9})
	fmt.Println(res.Order, res.Rank)
	// Output: [3 0 2] [1 -1 2 0]
}
