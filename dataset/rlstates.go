package dataset

// The RL state pool: restorable expert states that step-wise RL starts
// one-step episodes from. Held-out tasks never enter it.

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/mlerl/mlerl/schemas"
)

// RLOptions configure [BuildRLStates]. Start from [DefaultRLOptions].
type RLOptions struct {
	// PerStratum caps the states kept per (task, step index) stratum,
	// sampled uniformly with Seed; 0 keeps every expert state. Default 0.
	PerStratum int
	// Seed drives the stratified sample. Default 1.
	Seed int64
}

// DefaultRLOptions returns the options of `mlerl dataset`.
func DefaultRLOptions() RLOptions { return RLOptions{Seed: 1} }

// RLCounts says what [BuildRLStates] kept and dropped.
type RLCounts struct {
	Steps       int `json:"steps"`        // expert steps read
	Kept        int `json:"kept"`         // states written
	HeldOut     int `json:"held_out"`     // steps of held-out tasks (never in the pool)
	NoSnapshot  int `json:"no_snapshot"`  // no snapshot_ref: not restorable
	EmptyPrompt int `json:"empty_prompt"` // no compact or no full prompt recorded
	Duplicate   int `json:"duplicate"`    // same snapshot and prompt as a kept state
	Sampled     int `json:"sampled_out"`  // over the per-stratum cap
}

// BuildRLStates turns expert steps into the RL state pool: every held-in
// step with a snapshot (any outcome: the state before a slip is as real a
// state as any), deduplicated on (snapshot, compact prompt), optionally
// capped per (task, step index). steps must be sorted (trajectory, step
// index); the output is in that order and depends only on steps, tasks
// and opts. m_init and m_best are the public part's scores
// (schemas.Task.Public), the ones the environment's rewards use: the
// scores on all hidden answers would, with the public ones, give away the
// private part's to whoever trains on rl_states or its verl export.
func BuildRLStates(steps []schemas.Step, tasks map[string]schemas.Task, opts RLOptions) ([]schemas.RLState, RLCounts, error) {
	var c RLCounts
	type stratum struct {
		task string
		step int32
	}
	var out []schemas.RLState
	byStratum := map[stratum][]int{}
	seen := map[string]bool{}
	for i, s := range steps {
		c.Steps++
		t, ok := tasks[s.TaskID]
		if !ok {
			return nil, c, fmt.Errorf("steps row %d (trajectory %s step %d): task %q is not in the tasks dataset; point --tasks at the version the rollout used", i, s.TrajectoryID, s.StepIndex, s.TaskID)
		}
		switch {
		case t.Split != schemas.HeldIn:
			c.HeldOut++
			continue
		case s.SnapshotRef == "":
			c.NoSnapshot++
			continue
		case s.CompactState == "" || s.State == "":
			c.EmptyPrompt++
			continue
		}
		key := s.SnapshotRef + "\x00" + s.CompactState
		if seen[key] {
			c.Duplicate++
			continue
		}
		seen[key] = true
		mInit, mBest := t.Public()
		st := stratum{s.TaskID, s.StepIndex}
		byStratum[st] = append(byStratum[st], len(out))
		out = append(out, schemas.RLState{
			StateID: exampleID(s), TaskID: s.TaskID, Split: t.Split,
			TrajectoryID: s.TrajectoryID, StepIndex: s.StepIndex,
			Prompt: s.CompactState, FullPrompt: s.State, SnapshotRef: s.SnapshotRef,
			Metric: t.Metric, Direction: t.Direction, MInit: mInit, MBest: mBest,
			MetricPrev:   s.MetricBefore,
			ExpertAction: s.ActionText, ExpertReward: s.Reward, ExpertExecS: s.ExecS,
		})
	}
	if opts.PerStratum > 0 {
		keep := make([]bool, len(out))
		// Visit strata in a fixed order so the sample depends on the seed only.
		keys := make([]stratum, 0, len(byStratum))
		for k := range byStratum {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b stratum) int { return cmp.Or(cmp.Compare(a.task, b.task), cmp.Compare(a.step, b.step)) })
		r := rand.New(rand.NewPCG(uint64(opts.Seed), 0x5eed))
		for _, k := range keys {
			idx := byStratum[k]
			r.Shuffle(len(idx), func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
			for _, i := range idx[:min(opts.PerStratum, len(idx))] {
				keep[i] = true
			}
		}
		n := 0
		for i := range out {
			if keep[i] {
				out[n] = out[i]
				n++
			}
		}
		c.Sampled = len(out) - n
		out = out[:n]
	}
	c.Kept = len(out)
	return out, c, nil
}
