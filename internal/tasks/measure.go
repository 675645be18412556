package tasks

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mlerl/mlerl/internal/catalog"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/schemas"
)

// MeasureBudget bounds a catalog search ([Measure]).
type MeasureBudget struct {
	// Scripts is the most edited scripts run (0: every combination of the
	// search for the task's kind).
	Scripts int
	// Time is how long the search may go on: no script starts after it
	// (0: no limit). A script that started runs to its own time limit.
	Time time.Duration
}

// Measured is what a catalog search found.
type Measured struct {
	// Score is the best graded test score, reached by IDs (catalog ideas
	// applied in order).
	Score float64
	IDs   []string
	// Scripts is how many combinations were tried, of Combinations in the
	// search; Failed of them did not apply, crashed or wrote no valid
	// submission. Stopped says the budget ended the search early.
	Scripts, Combinations, Failed int
	Stopped                       bool
	// Source is the m_best_source to record.
	Source string
	// Public and Private are the best scores on each part of the hidden
	// answers over every combination that ran (nil for a task without
	// parts): m_best_public and m_best_private.
	Public, Private *float64
}

// Measure runs the catalog search that measured the built-in suite's
// m_best (catalog.Search: the obvious edits, then the strong
// combinations, for t's modality and task type) on script, a sectioned
// train.py of t (its initial one, usually), within budget: each
// combination's edits applied in order, run in a fresh copy of t's
// workspace through runner with limits, its submission graded by grade
// (see [RunBaseline]). It returns the best graded score, which must be
// better than mInit (the initial script's): otherwise, or when no
// combination ran, the error says so and to set m_best by hand. day is
// the date recorded in the source.
func Measure(ctx context.Context, runner sandbox.Runner, grade GradeFunc, t *Task, script string, base Baseline, limits sandbox.Limits, budget MeasureBudget, day time.Time) (Measured, error) {
	mInit := base.TestScore
	fail := func(format string, args ...any) (Measured, error) {
		return Measured{}, &Error{Task: t.ID, File: SpecFile, Field: "m_best", Msg: fmt.Sprintf(format, args...) + "; set m_best (and m_best_source) in task.yaml by hand"}
	}
	obvious, strong := catalog.Search(t.Modality, t.TaskType)
	combos := append(append([][]string{}, obvious...), strong...)
	if len(combos) == 0 {
		return fail("%s: the catalog search has no edits for %s tasks (it knows tabular, image, text, time-series and graph ones)", MeasureMBest, catalog.Kind(t.Modality, t.TaskType))
	}
	m := Measured{Combinations: len(combos)}
	found := false
	start := time.Now()
	for _, ids := range combos {
		if (budget.Scripts > 0 && m.Scripts >= budget.Scripts) || (budget.Time > 0 && time.Since(start) >= budget.Time) {
			m.Stopped = true
			break
		}
		if err := ctx.Err(); err != nil {
			return Measured{}, err
		}
		m.Scripts++
		edited, err := applyIdeas(script, ids)
		if err != nil {
			m.Failed++
			continue
		}
		r, err := runScript(ctx, runner, grade, t, []byte(edited), limits)
		if err != nil {
			return Measured{}, err
		}
		if r.res.Outcome != sandbox.Success || !r.submitted || !r.grade.Valid {
			m.Failed++
			continue
		}
		if !found || better(t.Direction, r.grade.Score, m.Score) {
			m.Score, m.IDs, found = r.grade.Score, ids, true
		}
		if r.grade.HasParts() {
			if m.Public == nil || better(t.Direction, *r.grade.Public, *m.Public) {
				m.Public = r.grade.Public
			}
			if m.Private == nil || better(t.Direction, *r.grade.Private, *m.Private) {
				m.Private = r.grade.Private
			}
		}
	}
	switch {
	case !found && m.Scripts == 0:
		return fail("%s: the budget (%d scripts, %s) ended the catalog search before any script ran", MeasureMBest, budget.Scripts, budget.Time)
	case !found:
		return fail("%s: none of the %d catalog combinations tried ran and wrote a valid submission (does train.py keep the built-in sections and conventions? see tasks/README.md)", MeasureMBest, m.Scripts)
	case !better(t.Direction, m.Score, mInit):
		return fail("%s: the best of %d catalog combinations, %g (%s), is not better than the initial script's %g (%s is better)", MeasureMBest, m.Scripts, m.Score, strings.Join(m.IDs, " + "), mInit, t.Direction)
	}
	for _, p := range []struct {
		name       string
		best, init *float64
	}{{PartPublic, m.Public, base.Public}, {PartPrivate, m.Private, base.Private}} {
		if p.best != nil && p.init != nil && !better(t.Direction, *p.best, *p.init) {
			return fail("%s: on the %s part of the hidden answers the best of %d catalog combinations, %g, is not better than the initial script's %g (%s is better)", MeasureMBest, p.name, m.Scripts, *p.best, *p.init, t.Direction)
		}
	}
	m.Source = fmt.Sprintf("measured (catalog search, %d scripts, %s): %s", m.Scripts, day.Format(time.DateOnly), strings.Join(m.IDs, " + "))
	return m, nil
}

// applyIdeas applies catalog ideas, by id, in order.
func applyIdeas(script string, ids []string) (string, error) {
	for _, id := range ids {
		idea, ok := catalog.Lookup(id)
		if !ok {
			return "", fmt.Errorf("no catalog idea %q", id)
		}
		var err error
		if script, err = catalog.Apply(script, idea.Edit); err != nil {
			return "", fmt.Errorf("%s: %w", id, err)
		}
	}
	return script, nil
}

// better reports whether score a beats b in direction.
func better(direction string, a, b float64) bool {
	if direction == schemas.LowerIsBetter {
		return a < b
	}
	return a > b
}

// Better reports whether score a beats b in direction.
func Better(direction string, a, b float64) bool { return better(direction, a, b) }
