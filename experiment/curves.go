package experiment

import (
	"math"
	"slices"
	"sort"

	"github.com/mlerl/mlerl/schemas"
)

// What the PPO arms' training records say, over seeds: the learning
// curves (ML-Agent's Fig. 3), the gain in training reward ("RL learns
// its training distribution", issue 21), equal-wall-time comparisons,
// the reward-hacking watch and the task-count curve (issue 22). The unit
// of every interval here is a seed: each seed's run is one curve.

// seedRun is what one seed's PPO cell recorded.
type seedRun struct {
	reward  []float64 // mean reward per update (held-in states)
	curve   []schemas.CurvePoint
	updates []schemas.UpdateShares
	// durations are the updates' trained samples by duration quarter
	// (empty in rows before 1.2).
	durations []schemas.UpdateDurations
}

// Splits of a learning curve.
func curveValue(p schemas.CurvePoint, split string) float64 {
	if split == schemas.HeldIn {
		return p.HeldInDeltaR
	}
	return p.HeldOutDeltaR
}

// curveStat is one learning-curve point (the policy after update) over
// the seeds that evaluated it: its cumulative update wall and CPU time
// and delta_r per split, each with its 95% interval.
type curveStat struct {
	update          int
	wall, cpu       estimate
	heldIn, heldOut estimate
}

// curveStats pools the seeds' curves point by point (by update number);
// a split's NaN values (not evaluated) are left out.
func curveStats(runs map[int64]*seedRun) []curveStat {
	type acc struct{ wall, cpu, in, out []float64 }
	by := map[int]*acc{}
	for _, r := range runs {
		for _, p := range r.curve {
			a := by[int(p.Update)]
			if a == nil {
				a = &acc{}
				by[int(p.Update)] = a
			}
			a.wall, a.cpu = append(a.wall, p.WallS), append(a.cpu, p.CPUS)
			if !math.IsNaN(p.HeldInDeltaR) {
				a.in = append(a.in, p.HeldInDeltaR)
			}
			if !math.IsNaN(p.HeldOutDeltaR) {
				a.out = append(a.out, p.HeldOutDeltaR)
			}
		}
	}
	var out []curveStat
	for u, a := range by {
		out = append(out, curveStat{update: u, wall: interval(a.wall), cpu: interval(a.cpu), heldIn: interval(a.in), heldOut: interval(a.out)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].update < out[j].update })
	return out
}

// windows are the sizes of a run's first tenth and last quarter of n
// updates (each rounded up, so at least one update); ok is false when
// they would overlap (fewer than 2 updates).
func windows(n int) (first, last int, ok bool) {
	first, last = (n+9)/10, (n+3)/4
	return first, last, n >= 2 && first+last <= n
}

// gain is the mean of the last quarter of xs minus the mean of its first
// tenth (windows); ok is false with fewer than 2 values.
func gain(xs []float64) (float64, bool) {
	first, last, ok := windows(len(xs))
	if !ok {
		return 0, false
	}
	return mean(xs[len(xs)-last:]) - mean(xs[:first]), true
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// seedsOf lists the seeds of runs in order.
func seedsOf(runs map[int64]*seedRun) []int64 {
	var seeds []int64
	for s := range runs {
		seeds = append(seeds, s)
	}
	slices.Sort(seeds)
	return seeds
}

// rewardGains is each seed's training-reward gain (the held-in mean
// reward per update: the state pool is held-in), in seed order, for the
// seeds with at least 2 updates.
func rewardGains(runs map[int64]*seedRun) []float64 {
	var out []float64
	for _, s := range seedsOf(runs) {
		if g, ok := gain(runs[s].reward); ok {
			out = append(out, g)
		}
	}
	return out
}

// The shares the reward-hacking watch follows.
var watched = []struct {
	name string
	get  func(schemas.UpdateShares) float64
}{
	{"timeout + OOM (corner cases)", func(u schemas.UpdateShares) float64 { return u.Corner }},
	{"undo", func(u schemas.UpdateShares) float64 { return u.Undo }},
	{"final answer", func(u schemas.UpdateShares) float64 { return u.FinalAnswer }},
}

// watchMargin: a watched share is flagged when its mean over seeds rises
// by more than this (in share of samples) from the first tenth of the
// updates to the last quarter.
const watchMargin = 0.05

// shareRise is, per seed with at least 2 updates, the rise of a share
// from the first tenth of the updates to the last quarter, and the mean
// share of each window.
func shareRise(runs map[int64]*seedRun, get func(schemas.UpdateShares) float64) (rise, first, last estimate) {
	var rs, fs, ls []float64
	for _, s := range seedsOf(runs) {
		xs := make([]float64, len(runs[s].updates))
		for i, u := range runs[s].updates {
			xs[i] = get(u)
		}
		f, l, ok := windows(len(xs))
		if !ok {
			continue
		}
		fm, lm := mean(xs[:f]), mean(xs[len(xs)-l:])
		rs, fs, ls = append(rs, lm-fm), append(fs, fm), append(ls, lm)
	}
	return interval(rs), interval(fs), interval(ls)
}

// valueAt is a curve's delta_r on split at wall time t: the last point
// evaluated at or before t (the policy the run had by then; NaN when
// none, or when the split was not evaluated there).
func valueAt(curve []schemas.CurvePoint, t float64, split string) float64 {
	v := math.NaN()
	for _, p := range curve {
		if p.WallS <= t*(1+1e-9) {
			v = curveValue(p, split)
		}
	}
	return v
}

// equalWall compares two PPO arms at equal wall time: per seed both ran,
// t is the smaller of the two runs' total update wall time (the last
// curve point's), and the difference is a's delta_r on split at t minus
// b's. It returns the differences' interval over seeds and the times.
func equalWall(a, b map[int64]*seedRun, split string) (estimate, []float64) {
	var d, ts []float64
	for _, s := range seedsOf(a) {
		rb, ok := b[s]
		ra := a[s]
		if !ok || len(ra.curve) == 0 || len(rb.curve) == 0 {
			continue
		}
		t := math.Min(ra.curve[len(ra.curve)-1].WallS, rb.curve[len(rb.curve)-1].WallS)
		x := valueAt(ra.curve, t, split) - valueAt(rb.curve, t, split)
		if !math.IsNaN(x) {
			d, ts = append(d, x), append(ts, t)
		}
	}
	return interval(d), ts
}

// seedMeans is an arm's held-out delta_r per seed (the mean over its
// (seed, task) units), for intervals over seeds.
func seedMeans(units map[unit]float64) []float64 {
	sum, n := map[int64]float64{}, map[int64]int{}
	for u, x := range units {
		sum[u.seed] += x
		n[u.seed]++
	}
	var seeds []int64
	for s := range sum {
		seeds = append(seeds, s)
	}
	slices.Sort(seeds)
	out := make([]float64, len(seeds))
	for i, s := range seeds {
		out[i] = sum[s] / float64(n[s])
	}
	return out
}
