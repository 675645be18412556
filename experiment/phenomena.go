package experiment

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/schemas"
)

// Phenomenon checks (issue 22): an ablation can show what its feature
// does only when the grid's runs contain what the feature acts on.
// Duration weighting corrects a bias toward fast actions, which matters
// only when an action's duration and its reward are related;
// instrumentation's partial credit enters only when a script fails
// part-way; the reward's format term only when the policy writes answers
// that do not parse or are refused. Each is measured over a PPO arm's
// training samples (every update's, pooled over seeds), and an ablation
// whose phenomenon is below its threshold is "not testable here", with
// the figure, instead of inconclusive.

// The thresholds below which an ablation is not testable here.
const (
	// Duration weighting: the correlation of duration and reward over all
	// samples is within ±minCorrelation and its 95% interval holds 0.
	minCorrelation = 0.1
	// Instrumentation: fewer than this share of script runs failed.
	minFailedRuns = 0.05
	// Format term: fewer than this share of samples were format errors,
	// refused actions or invalid edits (what the format term punishes).
	minRefused = 0.02
)

// sampleSums pools PPO cells' sample summaries (the rows' 1.1 columns).
type sampleSums struct {
	cells                  int
	classes, failedMarkers map[string]int64
	moments                map[string]schemas.Moments      // executed, all
	halves                 map[string]schemas.DurationHalf // slow, fast
}

func newSampleSums() sampleSums {
	return sampleSums{classes: map[string]int64{}, failedMarkers: map[string]int64{},
		moments: map[string]schemas.Moments{}, halves: map[string]schemas.DurationHalf{}}
}

// add pools one cell's row (one row of each cell, once); rows without
// samples (1.0 rows, metrics without samples) add nothing.
func (s *sampleSums) add(r schemas.ExperimentRow) {
	if len(r.DurationReward) == 0 {
		return
	}
	s.cells++
	for _, c := range r.SampleClasses {
		s.classes[c.Name] += c.N
	}
	for _, c := range r.FailedMarkers {
		s.failedMarkers[c.Name] += c.N
	}
	for _, m := range r.DurationReward {
		s.addMoments(m)
	}
	for _, h := range r.StalenessByDuration {
		s.addHalf(h)
	}
}

func (s *sampleSums) addMoments(m schemas.Moments) {
	p := s.moments[m.Subset]
	p.Subset, p.N = m.Subset, p.N+m.N
	p.SumX, p.SumY, p.SumXX, p.SumYY, p.SumXY = p.SumX+m.SumX, p.SumY+m.SumY, p.SumXX+m.SumXX, p.SumYY+m.SumYY, p.SumXY+m.SumXY
	s.moments[m.Subset] = p
}

func (s *sampleSums) addHalf(h schemas.DurationHalf) {
	p := s.halves[h.Half]
	p.Half, p.N, p.DurationSum, p.StalenessSum = h.Half, p.N+h.N, p.DurationSum+h.DurationSum, p.StalenessSum+h.StalenessSum
	s.halves[h.Half] = p
}

// merge is the pool of s and o.
func (s sampleSums) merge(o sampleSums) sampleSums {
	out := newSampleSums()
	for _, x := range []sampleSums{s, o} {
		out.cells += x.cells
		for k, v := range x.classes {
			out.classes[k] += v
		}
		for k, v := range x.failedMarkers {
			out.failedMarkers[k] += v
		}
		for _, m := range x.moments {
			out.addMoments(m)
		}
		for _, h := range x.halves {
			out.addHalf(h)
		}
	}
	return out
}

func (s sampleSums) samples() int64 { return s.moments["all"].N }
func (s sampleSums) runs() int64    { return s.moments["executed"].N }

func (s sampleSums) failed() int64 {
	n := int64(0)
	for _, v := range s.failedMarkers {
		n += v
	}
	return n
}

// count is the number of samples of the given outcome classes.
func (s sampleSums) count(classes ...env.Outcome) int64 {
	n := int64(0)
	for _, c := range classes {
		n += s.classes[string(c)]
	}
	return n
}

// refused counts what the format term punishes.
func (s sampleSums) refused() int64 {
	return s.count(env.OutcomeFormatError, env.OutcomeInvalidAction, env.OutcomeInvalidEdit)
}

// meanStaleness is the mean staleness of the slow or fast half (NaN when empty).
func (s sampleSums) meanStaleness(half string) float64 {
	h := s.halves[half]
	if h.N == 0 {
		return math.NaN()
	}
	return h.StalenessSum / float64(h.N)
}

// correlation is a Pearson correlation with its 95% interval (Fisher's z:
// atanh r ± 1.96 / sqrt(n - 3), mapped back with tanh). r is NaN when x
// or y does not vary (or n < 2); the interval is NaN for n < 4.
type correlation struct {
	r, lo, hi float64
	n         int64
}

var z975 = distuv.UnitNormal.Quantile(0.975)

// pearson computes the correlation from its moments.
func pearson(m schemas.Moments) correlation {
	c := correlation{r: math.NaN(), lo: math.NaN(), hi: math.NaN(), n: m.N}
	n := float64(m.N)
	vx, vy := n*m.SumXX-m.SumX*m.SumX, n*m.SumYY-m.SumY*m.SumY
	// Below rounding error of the sums: no variation.
	if m.N < 2 || vx <= 1e-12*n*m.SumXX || vy <= 1e-12*n*m.SumYY {
		return c
	}
	c.r = math.Max(-1, math.Min(1, (n*m.SumXY-m.SumX*m.SumY)/math.Sqrt(vx*vy)))
	if m.N < 4 {
		return c
	}
	if math.Abs(c.r) == 1 {
		c.lo, c.hi = c.r, c.r
		return c
	}
	z, se := math.Atanh(c.r), 1/math.Sqrt(n-3)
	c.lo, c.hi = math.Tanh(z-z975*se), math.Tanh(z+z975*se)
	return c
}

func (c correlation) String() string {
	switch {
	case c.n == 0:
		return "n/a"
	case math.IsNaN(c.r):
		return fmt.Sprintf("n/a (no variation, n = %d)", c.n)
	case math.IsNaN(c.lo):
		return fmt.Sprintf("%+.3f (n = %d)", c.r, c.n)
	}
	return fmt.Sprintf("%+.3f [%+.3f, %+.3f] (n = %d)", c.r, c.lo, c.hi, c.n)
}

// phenomenonCheck is what an ablation's phenomenon measured: the figure,
// and whether it is large enough to test the ablation. known is false
// when the rows hold no samples to measure it on (then the verdict is
// the comparison's).
type phenomenonCheck struct {
	known, testable bool
	figure          string
}

// rule says when an ablation of the phenomenon is not testable here.
func rule(phenomenon string) string {
	switch phenomenon {
	case PhenomenonDuration:
		return fmt.Sprintf("not testable when |r(duration, reward)| over all samples < %.1f with its 95%% interval holding 0, or r cannot be measured (fewer than 4 samples, no variation); the staleness of slow vs fast samples is shown beside it", minCorrelation)
	case PhenomenonInstrumentation:
		return fmt.Sprintf("not testable when failed script runs < %.0f%% of runs", 100*minFailedRuns)
	case PhenomenonFormat:
		return fmt.Sprintf("not testable when format errors and refusals < %.0f%% of samples", 100*minRefused)
	}
	return "none: always testable"
}

// check measures a phenomenon over s.
func check(phenomenon string, s sampleSums) phenomenonCheck {
	if phenomenon == "" {
		return phenomenonCheck{}
	}
	n := s.samples()
	if n == 0 {
		return phenomenonCheck{figure: "n/a (no samples recorded)"}
	}
	switch phenomenon {
	case PhenomenonDuration:
		c := pearson(s.moments["all"])
		fig := fmt.Sprintf("r(duration, reward) %s over all samples, %s over script runs", c, pearson(s.moments["executed"]))
		if len(s.halves) > 0 {
			fig += fmt.Sprintf("; staleness of the slower half %.2f vs the faster %.2f", s.meanStaleness("slow"), s.meanStaleness("fast"))
		}
		small := math.IsNaN(c.r) || math.IsNaN(c.lo) || (math.Abs(c.r) < minCorrelation && c.lo <= 0 && c.hi >= 0)
		return phenomenonCheck{known: true, testable: !small, figure: fig}
	case PhenomenonInstrumentation:
		runs, failed := s.runs(), s.failed()
		if runs == 0 {
			return phenomenonCheck{known: true, figure: fmt.Sprintf("no script ran in %d samples", n)}
		}
		share := float64(failed) / float64(runs)
		return phenomenonCheck{known: true, testable: share >= minFailedRuns,
			figure: fmt.Sprintf("%d of %d script runs failed (%.1f%%)%s", failed, runs, 100*share, markerText(s.failedMarkers))}
	case PhenomenonFormat:
		share := float64(s.refused()) / float64(n)
		return phenomenonCheck{known: true, testable: share >= minRefused,
			figure: fmt.Sprintf("%d of %d samples format errors or refused (%.1f%%)", s.refused(), n, 100*share)}
	}
	return phenomenonCheck{}
}

// markerText is the distribution of failed runs' last markers, most
// frequent first: ": last marker data 3, none 1".
func markerText(m map[string]int64) string {
	if len(m) == 0 {
		return ""
	}
	type kv struct {
		k string
		v int64
	}
	var kvs []kv
	for k, v := range m {
		if k == "" {
			k = "none"
		}
		kvs = append(kvs, kv{k, v})
	}
	sort.Slice(kvs, func(i, j int) bool { return kvs[i].v > kvs[j].v || kvs[i].v == kvs[j].v && kvs[i].k < kvs[j].k })
	var parts []string
	for _, x := range kvs {
		parts = append(parts, fmt.Sprintf("%s %d", x.k, x.v))
	}
	return "; last marker reached: " + strings.Join(parts, ", ")
}

func staleness(s sampleSums) string {
	if len(s.halves) == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f / %.2f", s.meanStaleness("slow"), s.meanStaleness("fast"))
}

// phenomenaRow is one PPO arm's line of the phenomenon table.
func phenomenaRow(a *armStats) []string {
	s := a.samples
	n := s.samples()
	if n == 0 {
		return []string{a.arm.Name, "0", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a"}
	}
	pct := func(k, of int64) string {
		if of == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%d (%.1f%%)", k, 100*float64(k)/float64(of))
	}
	failed := pct(s.failed(), s.runs())
	if m := markerText(s.failedMarkers); m != "" {
		failed += strings.Replace(m, "; last marker reached: ", ": ", 1)
	}
	return []string{a.arm.Name, fmt.Sprintf("%d (%s)", n, plural(s.cells, "cell")),
		pearson(s.moments["all"]).String(), pearson(s.moments["executed"]).String(),
		staleness(s),
		pct(s.runs(), n) + " ran a script", failed,
		pct(s.count(env.OutcomeFormatError), n) + " / " + pct(s.count(env.OutcomeInvalidAction, env.OutcomeInvalidEdit), n)}
}
