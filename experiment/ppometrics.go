package experiment

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"math"
	"slices"
	"sort"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// What a PPO cell keeps of its run's metrics.jsonl (train ppo writes one
// JSON object per line): per update ("stage":"ppo") the mean reward, the
// valid-action rate, the outcome and action shares and every sample's
// duration, reward, outcome class, whether a script ran, the last marker
// it reached and its staleness; per learning-curve point
// ("stage":"ppo-curve") delta_r per split and the update time so far.
// Lines of other stages, and lines that do not parse, are skipped; when a
// (stage, step) appears twice the last line wins.

// ppoMetrics is a PPO run's metrics as the experiment's rows hold them.
type ppoMetrics struct {
	reward, valid  []float64 // per update, in update order
	curve          []schemas.CurvePoint
	updates        []schemas.UpdateShares
	classes        []schemas.Count
	failedMarkers  []schemas.Count
	durationReward []schemas.Moments
	staleness      []schemas.DurationHalf
	durations      []schemas.UpdateDurations
	time           []schemas.PhaseTime // wall seconds per phase, summed (phaseOrder)
}

// phaseOrder is the order of ppoMetrics.time's phases (the time table's
// columns); the execute phase's parts follow them (executeParts).
var phaseOrder = []string{"generate", "execute", "learn", "curve"}

// executeParts split the execute phase where train ppo recorded them:
// the workers' step time (summed over the workers, so up to workers x
// execute) and the scripts' own run time within it (runs not replayed
// from the execution cache).
var executeParts = []string{"execute_busy", "execute_scripts"}

// metricsLine is one line of metrics.jsonl, the keys the experiment reads.
type metricsLine struct {
	Stage  string   `json:"stage"`
	Step   int      `json:"step"`
	Reward *float64 `json:"charts/reward_mean"`
	// Credit is what PPO credited the update's trained actions with (the
	// reward, or with horizon n the n-step return); lines written before
	// train ppo recorded it have only the reward.
	Credit  *float64 `json:"charts/credit_mean"`
	Valid   float64  `json:"charts/valid_action_rate"`
	WallS   float64  `json:"time/wall_s"`
	CPUS    float64  `json:"time/cpu_s"`
	Success float64  `json:"outcomes/success"`
	Error   float64  `json:"outcomes/error"`
	Timeout float64  `json:"outcomes/timeout"`
	OOM     float64  `json:"outcomes/oom"`
	Refused float64  `json:"outcomes/refused"`
	Undo    float64  `json:"actions/undo"`
	Final   float64  `json:"actions/final_answer"`

	// Phase seconds of an update (ppo) or a curve evaluation (ppo-curve).
	GenerateS *float64 `json:"time/generate_s"`
	ExecuteS  *float64 `json:"time/execute_s"`
	LearnS    *float64 `json:"time/learn_s"`
	CurveS    *float64 `json:"time/curve_s"`
	BusyS     *float64 `json:"time/execute_busy_s"`
	ScriptS   *float64 `json:"time/execute_script_s"`

	HeldIn  *float64 `json:"curve/held-in/delta_r"`
	HeldOut *float64 `json:"curve/held-out/delta_r"`

	Durations []float64 `json:"samples/duration_s"`
	Rewards   []float64 `json:"samples/reward"`
	Classes   []string  `json:"samples/class"`
	Executed  []bool    `json:"samples/executed"`
	Markers   []string  `json:"samples/last_marker"`
	Staleness []float64 `json:"samples/staleness"`
	// Used is false for the samples the update dropped; lines written
	// before train ppo recorded it trained on every sample.
	Used []bool `json:"samples/used"`
}

// failedRun lists the outcome classes of a script run that failed: what
// instrumentation's partial credit acts on.
var failedRun = []env.Outcome{env.OutcomeScriptError, env.OutcomeKilled, env.OutcomeOutputLimit,
	env.OutcomeInvalidSubmission, env.OutcomeTimeout, env.OutcomeOOM}

// readPPOMetrics reads dir/metrics.jsonl of a PPO run.
func readPPOMetrics(ctx context.Context, st store.Store, dir string) (ppoMetrics, error) {
	b, err := store.ReadAll(ctx, st, dir+"/metrics.jsonl")
	if err != nil {
		return ppoMetrics{}, err
	}
	return parsePPOMetrics(b), nil
}

// parsePPOMetrics is readPPOMetrics on the file's bytes.
func parsePPOMetrics(b []byte) ppoMetrics {
	type key struct {
		stage string
		step  int
	}
	last := map[key]metricsLine{}
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var m metricsLine
		if json.Unmarshal(line, &m) != nil || (m.Stage != "ppo" && m.Stage != "ppo-curve") {
			continue
		}
		last[key{m.Stage, m.Step}] = m
	}
	keys := slices.Collect(maps.Keys(last))
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].stage != keys[j].stage {
			return keys[i].stage < keys[j].stage
		}
		return keys[i].step < keys[j].step
	})
	var pm ppoMetrics
	var samples []metricsLine
	phases := map[string]*float64{}
	addPhase := func(name string, v *float64) {
		if v != nil {
			if phases[name] == nil {
				phases[name] = new(float64)
			}
			*phases[name] += *v
		}
	}
	for _, k := range keys {
		m := last[k]
		addPhase("generate", m.GenerateS)
		addPhase("execute", m.ExecuteS)
		addPhase("learn", m.LearnS)
		addPhase("curve", m.CurveS)
		addPhase("execute_busy", m.BusyS)
		addPhase("execute_scripts", m.ScriptS)
		if k.stage == "ppo-curve" {
			pm.curve = append(pm.curve, schemas.CurvePoint{Update: int32(m.Step), WallS: m.WallS, CPUS: m.CPUS,
				HeldInDeltaR: orNaN(m.HeldIn), HeldOutDeltaR: orNaN(m.HeldOut)})
			continue
		}
		samples = append(samples, m)
		if m.Reward == nil {
			continue // a skipped update: nothing trained, no reward measured; its dropped samples count
		}
		credit := *m.Reward
		if m.Credit != nil {
			credit = *m.Credit
		}
		pm.reward, pm.valid = append(pm.reward, credit), append(pm.valid, m.Valid)
		pm.updates = append(pm.updates, schemas.UpdateShares{Update: int32(m.Step), WallS: m.WallS, CPUS: m.CPUS,
			Success: m.Success, Error: m.Error, Corner: m.Timeout + m.OOM, Refused: m.Refused, Undo: m.Undo, FinalAnswer: m.Final})
	}
	pm.summariseSamples(samples)
	for _, name := range slices.Concat(phaseOrder, executeParts) {
		if v := phases[name]; v != nil {
			pm.time = append(pm.time, schemas.PhaseTime{Phase: name, WallS: *v})
		}
	}
	return pm
}

func orNaN(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// summariseSamples sums every update's samples: outcome classes, the last
// markers of failed script runs, the moments of (duration, reward) over
// the samples that ran a script and over all, and the staleness of the
// samples slower and faster than the run's median duration. A sample is
// counted when it has a duration and a reward; nothing is set when no
// update recorded samples (metrics from before train ppo recorded them).
func (pm *ppoMetrics) summariseSamples(lines []metricsLine) {
	classes, markers := map[string]int64{}, map[string]int64{}
	exec, all := schemas.Moments{Subset: "executed"}, schemas.Moments{Subset: "all"}
	type smp struct{ dur, stale float64 }
	var ss []smp
	for _, m := range lines {
		for i := range min(len(m.Durations), len(m.Rewards)) {
			d, r := m.Durations[i], m.Rewards[i]
			class, ran := at(m.Classes, i), at(m.Executed, i)
			classes[class]++
			addMoments(&all, d, r)
			if ran {
				addMoments(&exec, d, r)
				if slices.Contains(failedRun, env.Outcome(class)) {
					markers[at(m.Markers, i)]++
				}
			}
			ss = append(ss, smp{d, at(m.Staleness, i)})
		}
	}
	if len(ss) == 0 {
		return
	}
	pm.classes, pm.failedMarkers = counts(classes), counts(markers)
	pm.durationReward = []schemas.Moments{exec, all}
	durs := make([]float64, len(ss))
	for i, s := range ss {
		durs[i] = s.dur
	}
	med := median(durs)
	slow, fast := schemas.DurationHalf{Half: "slow"}, schemas.DurationHalf{Half: "fast"}
	for _, s := range ss {
		h := &fast
		if s.dur > med {
			h = &slow
		}
		h.N++
		h.DurationSum += s.dur
		h.StalenessSum += s.stale
	}
	pm.staleness = []schemas.DurationHalf{slow, fast}
	pm.durations = updateDurations(lines)
}

// updateDurations ranks every recorded sample of the run by duration
// (ties in recording order), cuts the ranks into quarters, and returns
// per update the shares of its trained samples in each quarter and their
// mean staleness. Empty when no update recorded durations.
func updateDurations(lines []metricsLine) []schemas.UpdateDurations {
	type ref struct {
		line, i int
		dur     float64
	}
	var all []ref
	for l, m := range lines {
		for i := range min(len(m.Durations), len(m.Rewards)) {
			all = append(all, ref{l, i, m.Durations[i]})
		}
	}
	if len(all) == 0 {
		return nil
	}
	slices.SortStableFunc(all, func(a, b ref) int { return cmp.Compare(a.dur, b.dur) })
	quarter := make([][]int, len(lines))
	for l, m := range lines {
		quarter[l] = make([]int, len(m.Durations))
	}
	for rank, r := range all {
		quarter[r.line][r.i] = 4 * rank / len(all)
	}
	out := make([]schemas.UpdateDurations, 0, len(lines))
	for l, m := range lines {
		u := schemas.UpdateDurations{Update: int32(m.Step)}
		var q [4]int
		stale := 0.0
		for i := range min(len(m.Durations), len(m.Rewards)) {
			if i < len(m.Used) && !m.Used[i] {
				u.Dropped++
				continue
			}
			u.Trained++
			q[quarter[l][i]]++
			stale += at(m.Staleness, i)
		}
		if u.Trained > 0 {
			n := float64(u.Trained)
			u.Q1, u.Q2, u.Q3, u.Q4, u.Staleness = float64(q[0])/n, float64(q[1])/n, float64(q[2])/n, float64(q[3])/n, stale/n
		} else {
			u.Q1, u.Q2, u.Q3, u.Q4, u.Staleness = math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN()
		}
		out = append(out, u)
	}
	return out
}

func at[T any](xs []T, i int) T {
	var zero T
	if i < len(xs) {
		return xs[i]
	}
	return zero
}

func addMoments(m *schemas.Moments, x, y float64) {
	m.N++
	m.SumX += x
	m.SumY += y
	m.SumXX += x * x
	m.SumYY += y * y
	m.SumXY += x * y
}

// counts lists a tally by name.
func counts(m map[string]int64) []schemas.Count {
	out := make([]schemas.Count, 0, len(m))
	for name, n := range m {
		out = append(out, schemas.Count{Name: name, N: n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
