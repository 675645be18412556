package train

import (
	"strings"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/internal/tasks"
	"github.com/mlerl/mlerl/schemas"
)

// behaviour counts what a policy did in some episodes, as `mlerl
// evaluate`'s behaviour table counts it (evaluate.behaviours): edits and
// executions among the steps, edits that left their file unchanged (the
// environment's reply starts with env.UnchangedEditPrefix) among the
// edits, episodes that ran the script at least once and that gave a
// Final Answer. Recorded per update from the training episodes and per
// learning-curve point from its evaluation episodes, so that a collapse
// into repeated edits is visible while it happens. The curve's episodes
// also count, as evaluate's Found and Kept, those that made a better
// script than the initial one and those that kept it to the end.
type behaviour struct {
	episodes, steps, edits, unchanged, executes, ran, final int
	scored, found, kept                                     int // curve episodes only (scores)
}

// scores counts one finished episode's best and final scores against the
// task's initial score (nil: no graded run).
func (b *behaviour) scores(direction string, mInit float64, best, final *float64) {
	b.scored++
	if best == nil || !tasks.Better(direction, *best, mInit) {
		return
	}
	b.found++
	if final != nil && tasks.Better(direction, *final, mInit) {
		b.kept++
	}
}

// step counts one step of an episode by its action name and whether it
// was an edit that changed nothing.
func (b *behaviour) step(action string, unchanged bool) (ran, final bool) {
	b.steps++
	switch action {
	case env.EditScriptAI, env.EditScriptSegment:
		b.edits++
		if unchanged {
			b.unchanged++
		}
	case env.ExecuteScript:
		b.executes++
		return true, false
	case env.FinalAnswer:
		return false, true
	}
	return false, false
}

// episode counts one episode's steps.
func (b *behaviour) episode(steps []schemas.Step) {
	b.episodes++
	ran, final := false, false
	for _, s := range steps {
		r, f := b.step(s.ActionName, unchangedEdit(s.Observation))
		ran, final = ran || r, final || f
	}
	b.count(ran, final)
}

func (b *behaviour) count(ran, final bool) {
	if ran {
		b.ran++
	}
	if final {
		b.final++
	}
}

// add counts the episodes of groups as the rollout played them (every
// step of every episode, before any crediting keeps some).
func (b *behaviour) add(groups []*group) {
	for _, g := range groups {
		type ep struct{ ran, final bool }
		eps := map[int]*ep{}
		var order []int
		for _, s := range g.Samples {
			e := eps[s.Episode]
			if e == nil {
				e = &ep{}
				eps[s.Episode] = e
				order = append(order, s.Episode)
			}
			r, f := b.step(s.Out.Action, s.Out.Unchanged)
			e.ran, e.final = e.ran || r, e.final || f
		}
		for _, i := range order {
			b.episodes++
			b.count(eps[i].ran, eps[i].final)
		}
	}
}

// record adds the shares to rec under prefix ("behaviour/" or
// "curve/<split>/behaviour/"); a share whose denominator is 0 is left
// out (nothing was measured).
func (b behaviour) record(rec map[string]any, prefix string) {
	put := func(name string, n, d int) {
		if d > 0 {
			rec[prefix+name] = float64(n) / float64(d)
		}
	}
	put("edit_share", b.edits, b.steps)
	put("unchanged_edit_share", b.unchanged, b.edits)
	put("execute_share", b.executes, b.steps)
	put("ran_script_share", b.ran, b.episodes)
	put("final_answer_share", b.final, b.episodes)
	put("found_better_share", b.found, b.scored)
	put("kept_better_share", b.kept, b.found)
	if b.episodes > 0 {
		rec[prefix+"episodes"] = b.episodes
	}
}

// unchangedEdit reports whether the environment's reply to an edit says
// it left its file unchanged.
func unchangedEdit(observation string) bool {
	return strings.HasPrefix(observation, env.UnchangedEditPrefix)
}
