package experiment

import (
	"fmt"
	"strings"

	"github.com/mlerl/mlerl/schemas"
)

// armFit is one arm's public minus private difference (evaluate's
// FeedbackFit over the grid): per (seed, task) unit the mean over its
// trajectories of the share of the headroom closed on the public part of
// the hidden answers (whose scores the agent was told) minus that on the
// private part (what the grid reports), and the same for delta_r; then
// the interval over units, per split.
type armFit struct {
	arm               string
	roomOut, roomIn   estimate
	deltaOut, deltaIn estimate
}

// feedbackFits computes armFit for every arm with rows scored on a
// private part (experiments 1.7).
func feedbackFits(arms []Arm, rows []schemas.ExperimentRow) []armFit {
	type acc struct{ room, delta []float64 }
	by := map[string]map[string]map[unit]*acc{} // arm -> split -> unit
	for _, r := range rows {
		if r.ScoredOn != schemas.ScoredPrivate || r.DeltaRPublic == nil {
			continue
		}
		if by[r.Arm] == nil {
			by[r.Arm] = map[string]map[unit]*acc{schemas.HeldOut: {}, schemas.HeldIn: {}}
		}
		m := by[r.Arm][r.Split]
		if m == nil {
			continue
		}
		u := unit{r.Seed, r.TaskID}
		if m[u] == nil {
			m[u] = &acc{}
		}
		m[u].delta = append(m[u].delta, *r.DeltaRPublic-r.DeltaR)
		if r.HeadroomPublic != nil && r.Headroom != nil {
			m[u].room = append(m[u].room, *r.HeadroomPublic-*r.Headroom)
		}
	}
	mean := func(xs []float64) (float64, bool) {
		if len(xs) == 0 {
			return 0, false
		}
		s := 0.0
		for _, x := range xs {
			s += x
		}
		return s / float64(len(xs)), true
	}
	var out []armFit
	for _, a := range arms {
		splits, ok := by[a.Name]
		if !ok {
			continue
		}
		f := armFit{arm: a.Name}
		for _, sp := range []struct {
			split       string
			room, delta *estimate
		}{{schemas.HeldOut, &f.roomOut, &f.deltaOut}, {schemas.HeldIn, &f.roomIn, &f.deltaIn}} {
			var rooms, deltas []float64
			for _, x := range splits[sp.split] {
				if v, ok := mean(x.room); ok {
					rooms = append(rooms, v)
				}
				if v, ok := mean(x.delta); ok {
					deltas = append(deltas, v)
				}
			}
			*sp.room, *sp.delta = interval(rooms), interval(deltas)
		}
		out = append(out, f)
	}
	return out
}

// scoredOnOf says which hidden answers the grid's rows are scored on.
func scoredOnOf(rows []schemas.ExperimentRow) string {
	out := ""
	for _, r := range rows {
		s := r.ScoredOn
		if s == "" {
			s = schemas.ScoredAll
		}
		switch {
		case out == "":
			out = s
		case out != s:
			return "mixed"
		}
	}
	return out
}

// writeFeedbackFits writes the report's section on which answers the
// scores are on, and each arm's public minus private difference.
func writeFeedbackFits(b *strings.Builder, s summary) {
	switch s.scoredOn {
	case schemas.ScoredPrivate:
		b.WriteString("\nEvery score above is on the private part of each task's hidden answers, whose scores no agent saw; the agents were told the public part's, and rewards used them.\n")
	case schemas.ScoredAll:
		b.WriteString("\nEvery score above is on all of each task's hidden answers, whose scores the agents were told during the episodes (the data root's tasks were ingested without a public and a private part).\n")
	case "mixed":
		b.WriteString("\nSome rows are scored on the private part of the hidden answers, others on all of them: the arms are not comparable.\n")
	}
	if len(s.fits) == 0 {
		return
	}
	b.WriteString("\n### Public minus private\n\nHow much better each arm's final scores are on the public part of the hidden answers (told to the agent) than on the private part (reported): per (seed, task) unit, public minus private, each part against the initial script's score on it; 95% interval over units. Above 0, the agent's choices fitted the feedback it read.\n\n")
	b.WriteString("| arm | held-out headroom, public - private | held-out delta_r, public - private | held-in headroom, public - private | held-in delta_r, public - private |\n|---|---:|---:|---:|---:|\n")
	for _, f := range s.fits {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", f.arm, roomCell(f.roomOut), roomCell(f.deltaOut), roomCell(f.roomIn), roomCell(f.deltaIn))
	}
}
