package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/schemas"
)

// committedRun checks both datasets of the run with this key before
// anything is rolled out: the run is done only when its trajectories and
// its steps are both committed. It repairs what a lost manifest left
// behind, when the files prove what the manifest said:
//
//   - trajectories committed, steps not: the steps version the
//     trajectories manifest names as a parent is recommitted from its part
//     files if they match the committed trajectories step for step and
//     the summary stored in their manifest;
//   - steps committed, trajectories neither committed nor pending: an
//     uncommitted trajectories folder holding exactly this run's
//     trajectories, those the committed steps belong to, is recommitted.
//
// What it cannot repair is an error that names the folders to delete. It
// reports whether the run is complete.
func committedRun(ctx context.Context, cfg Config, in *inputs, key string) (bool, error) {
	st := in.st
	tm, err := datasets.FindRun(ctx, st, cfg.Trajectories, key)
	if err != nil {
		return false, err
	}
	sm, err := datasets.FindRun(ctx, st, cfg.Steps, key)
	if err != nil {
		return false, err
	}
	switch {
	case tm != nil:
		i := slices.IndexFunc(tm.Parents, func(p datasets.Parent) bool { return p.Name == cfg.Steps })
		if sm == nil && i >= 0 {
			return repairSteps(ctx, cfg, in, tm, tm.Parents[i])
		}
		if sm == nil {
			return false, fmt.Errorf("rollout: this run is committed as %s v%d, but no %s version of it is, and the manifest names none: delete %s, then rerun to roll out again",
				tm.Name, tm.Version, cfg.Steps, st.URI(datasets.Dir(tm.Name, tm.Version)))
		}
		fmt.Fprintf(os.Stderr, "rollout: this run (key %s) is already committed as %s v%d and %s v%d; nothing to do (change the seed or config for a new run)\n",
			key, tm.Name, tm.Version, sm.Name, sm.Version)
		return true, nil
	case sm != nil:
		if p, err := datasets.FindPending(ctx, st, cfg.Trajectories, schemas.Trajectories, key); err != nil {
			return false, err
		} else if p != nil {
			return false, nil // a commit died between the two manifests: the run commits it
		}
		return repairTrajectories(ctx, cfg, in, sm, key)
	}
	return false, nil
}

// repairSteps recommits the steps version ref of the committed
// trajectories tm, whose manifest is missing.
func repairSteps(ctx context.Context, cfg Config, in *inputs, tm *datasets.Manifest, ref datasets.Parent) (bool, error) {
	st := in.st
	stepsP := &datasets.Pending{St: st, Name: ref.Name, Version: ref.Version, Schema: schemas.Steps, RunKey: tm.RunKey}
	fix := fmt.Sprintf("delete %s and %s, then rerun to roll out again", st.URI(datasets.Dir(tm.Name, tm.Version)), stepsP.URI())
	fail := func(why string) (bool, error) {
		return false, fmt.Errorf("rollout: this run is committed as %s v%d, but its steps %s v%d %s: %s", tm.Name, tm.Version, ref.Name, ref.Version, why, fix)
	}
	if m, err := datasets.ReadManifest(ctx, st, ref.Name, ref.Version); err == nil {
		return fail(fmt.Sprintf("are committed by another run (run key %q)", m.RunKey))
	}
	parts, err := stepsP.Parts(ctx)
	if err != nil {
		return false, err
	}
	if len(parts) == 0 {
		return fail("are gone (no part files)")
	}
	trajs, err := datasets.ReadAll[schemas.Trajectory](ctx, st, tm, schemas.Trajectories)
	if err != nil {
		return false, err
	}
	steps, err := datasets.ReadPending[schemas.Step](ctx, stepsP)
	if err != nil {
		return fail(fmt.Sprintf("lost their manifest and a part file is unreadable (%v)", err))
	}
	if why := mismatch(trajs, steps); why != "" {
		return fail("lost their manifest and their part files do not match the trajectories: " + why)
	}
	if canonicalJSON(stepExtra(trajs, steps)) != canonicalJSON(map[string]any{"summary": tm.Extra["summary"], "actions": tm.Extra["actions"], "outcomes": tm.Extra["outcomes"]}) {
		return fail("lost their manifest and their part files do not match the summary in the trajectories manifest")
	}
	// The manifest the commit wrote: the trajectories' producer, parents
	// (less the steps themselves) and summary.
	parents := slices.DeleteFunc(slices.Clone(tm.Parents), func(p datasets.Parent) bool { return p.Name == ref.Name })
	sm, err := stepsP.Commit(ctx, datasets.CommitOptions{Producer: tm.Producer, Parents: parents, Extra: tm.Extra})
	if err != nil {
		return false, err
	}
	fmt.Fprintf(os.Stderr, "rollout: repaired %s v%d: its manifest was missing; recommitted from its %d part files (%d rows), which match %s v%d\n",
		sm.Name, sm.Version, len(sm.Files), sm.Rows, tm.Name, tm.Version)
	return true, nil
}

// repairTrajectories recommits the trajectories of the committed steps sm
// from an uncommitted folder that holds exactly this run's trajectories,
// those of the steps, with the summary stored in the steps manifest.
func repairTrajectories(ctx context.Context, cfg Config, in *inputs, sm *datasets.Manifest, key string) (bool, error) {
	st := in.st
	steps, err := datasets.ReadAll[schemas.Step](ctx, st, sm, schemas.Steps)
	if err != nil {
		return false, err
	}
	want := map[string]bool{}
	for _, t := range in.Tasks {
		for i := 0; i < cfg.PerTask; i++ {
			want[trajectoryID(t.TaskID, i)] = true
		}
	}
	stored := canonicalJSON(map[string]any{"summary": sm.Extra["summary"], "actions": sm.Extra["actions"], "outcomes": sm.Extra["outcomes"]})
	inc, err := datasets.Uncommitted(ctx, st, cfg.Trajectories)
	if err != nil {
		return false, err
	}
	for i := len(inc) - 1; i >= 0; i-- {
		if inc[i].Pending {
			continue // another run's: FindPending found none of this one
		}
		trajP := &datasets.Pending{St: st, Name: cfg.Trajectories, Version: inc[i].Version, Schema: schemas.Trajectories, RunKey: key}
		trajs, err := datasets.ReadPending[schemas.Trajectory](ctx, trajP)
		if err != nil || len(trajs) != len(want) || mismatch(trajs, steps) != "" ||
			slices.ContainsFunc(trajs, func(t schemas.Trajectory) bool { return !want[t.TrajectoryID] }) ||
			canonicalJSON(stepExtra(trajs, steps)) != stored {
			continue
		}
		// The manifest the commit wrote: the steps' producer, parents and
		// summary, and the steps themselves as a parent.
		tm, err := trajP.Commit(ctx, datasets.CommitOptions{Producer: sm.Producer, Parents: append(slices.Clone(sm.Parents), sm.Ref()), Extra: sm.Extra})
		if err != nil {
			return false, err
		}
		fmt.Fprintf(os.Stderr, "rollout: repaired %s v%d: its manifest was missing; recommitted from its %d part files (%d rows), which match %s v%d\n",
			tm.Name, tm.Version, len(tm.Files), tm.Rows, sm.Name, sm.Version)
		return true, nil
	}
	return false, fmt.Errorf("rollout: this run's steps are committed as %s v%d, but no %s version holds its trajectories (committed, pending, or with a lost manifest): delete %s, then rerun to roll out again",
		sm.Name, sm.Version, cfg.Trajectories, st.URI(datasets.Dir(sm.Name, sm.Version)))
}

// mismatch says how steps fail to be exactly the steps of trajs ("" when
// they are): every trajectory has NumSteps step rows, indexed 0..n-1, and
// no step belongs to another trajectory.
func mismatch(trajs []schemas.Trajectory, steps []schemas.Step) string {
	n := map[string]int32{}
	seen := map[string]bool{}
	for _, t := range trajs {
		if seen[t.TrajectoryID] {
			return fmt.Sprintf("trajectory %s is there twice", t.TrajectoryID)
		}
		seen[t.TrajectoryID] = true
		n[t.TrajectoryID] = t.NumSteps
	}
	idx := map[string]map[int32]bool{}
	for _, s := range steps {
		if !seen[s.TrajectoryID] {
			return fmt.Sprintf("steps of trajectory %s, which is not there", s.TrajectoryID)
		}
		if idx[s.TrajectoryID] == nil {
			idx[s.TrajectoryID] = map[int32]bool{}
		}
		if s.StepIndex < 0 || s.StepIndex >= n[s.TrajectoryID] || idx[s.TrajectoryID][s.StepIndex] {
			return fmt.Sprintf("trajectory %s has a stray or repeated step %d", s.TrajectoryID, s.StepIndex)
		}
		idx[s.TrajectoryID][s.StepIndex] = true
	}
	for _, t := range trajs {
		if got := int32(len(idx[t.TrajectoryID])); got != t.NumSteps {
			return fmt.Sprintf("trajectory %s has %d steps, its row says %d", t.TrajectoryID, got, t.NumSteps)
		}
	}
	return ""
}

// stepExtra is the part of a rollout manifest's Extra computed from the
// rows (see commitIfComplete).
func stepExtra(trajs []schemas.Trajectory, steps []schemas.Step) map[string]any {
	return map[string]any{"summary": summarize(trajs, steps),
		"actions":  countBy(steps, func(s schemas.Step) string { return s.ActionName }),
		"outcomes": countBy(steps, func(s schemas.Step) string { return s.Outcome })}
}

// canonicalJSON renders v as JSON the way it reads back from a manifest.
func canonicalJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "unrenderable: " + err.Error()
	}
	var back any
	if err := json.Unmarshal(b, &back); err != nil {
		return "unrenderable: " + err.Error()
	}
	b, _ = json.Marshal(back)
	return string(b)
}
