package experiment

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// The time-quality relation of each task's scripts (issue 22, item 3):
// duration-aware weighting matters where better solutions take longer to
// run. The grid's data root holds the rollout's steps: every Execute
// Script the expert ran, with its run time and the grader's score. Per
// task, the correlation of run time and the direction-signed score over
// the expert's successful runs says whether, on this suite, slow scripts
// are the good ones.

// taskTimeQuality is one task's relation.
type taskTimeQuality struct {
	task         string
	runs         int
	minS, maxS   float64
	corr         correlation
	fastQ, slowQ float64 // mean signed score of the faster and slower half
	direction    string
}

// timeQuality reads the latest steps dataset in st and measures each
// task's relation (nil when the root has no steps).
func timeQuality(ctx context.Context, st store.Store) ([]taskTimeQuality, error) {
	m, err := datasets.Latest(ctx, st, schemas.Steps.Name)
	if err != nil {
		return nil, nil
	}
	rows, err := datasets.ReadAll[schemas.Step](ctx, st, m, schemas.Steps)
	if err != nil {
		return nil, err
	}
	tm, err := datasets.Latest(ctx, st, schemas.Tasks.Name)
	if err != nil {
		return nil, err
	}
	tasks, err := datasets.ReadAll[schemas.Task](ctx, st, tm, schemas.Tasks)
	if err != nil {
		return nil, err
	}
	directions := map[string]string{}
	for _, t := range tasks {
		directions[t.TaskID] = t.Direction
	}
	return timeQualityOf(rows, directions), nil
}

// timeQualityOf measures the relation over the steps' successful runs,
// each task's metric direction from directions.
func timeQualityOf(rows []schemas.Step, directions map[string]string) []taskTimeQuality {
	type run struct{ s, q float64 }
	byTask := map[string][]run{}
	dir := map[string]string{}
	for _, r := range rows {
		if r.ActionName != env.ExecuteScript || r.Outcome != string(env.OutcomeSuccess) || r.MetricAfter == nil {
			continue
		}
		q := *r.MetricAfter
		if directions[r.TaskID] == schemas.LowerIsBetter {
			q = -q
		}
		byTask[r.TaskID] = append(byTask[r.TaskID], run{r.ExecS, q})
		dir[r.TaskID] = directions[r.TaskID]
	}
	var out []taskTimeQuality
	for task, runs := range byTask {
		sort.Slice(runs, func(i, j int) bool { return runs[i].s < runs[j].s })
		var m schemas.Moments
		t := taskTimeQuality{task: task, runs: len(runs), minS: runs[0].s, maxS: runs[len(runs)-1].s, direction: dir[task]}
		half := len(runs) / 2
		for i, r := range runs {
			m.N++
			m.SumX, m.SumY, m.SumXX, m.SumYY, m.SumXY = m.SumX+r.s, m.SumY+r.q, m.SumXX+r.s*r.s, m.SumYY+r.q*r.q, m.SumXY+r.s*r.q
			if i < half {
				t.fastQ += r.q / float64(half)
			} else {
				t.slowQ += r.q / float64(len(runs)-half)
			}
		}
		t.corr = pearson(m)
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].task < out[j].task })
	return out
}

// writeTimeQuality writes the section: one row per task, and how many
// tasks show a significant positive relation.
func writeTimeQuality(b *strings.Builder, tq []taskTimeQuality) {
	if len(tq) == 0 {
		return
	}
	b.WriteString("\n## Do better scripts take longer? (the duration-weighting phenomenon on this suite)\n\n")
	b.WriteString("Over the rollout's successful Execute Script steps in the data root (the scripted expert's runs of its plans' idea combinations): per task, Pearson's r of the run time and the score (sign flipped for lower-is-better metrics, so higher is better), with its Fisher-z 95% interval, and the mean signed score of the faster and the slower half of the runs. Duration-aware weighting can only help where slow scripts are the better ones.\n\n")
	b.WriteString("| task | runs | run time (s) | r(time, score) | faster half | slower half |\n|---|---:|---:|---|---:|---:|\n")
	pos, neg := 0, 0
	for _, t := range tq {
		switch {
		case t.corr.lo > 0:
			pos++
		case t.corr.hi < 0:
			neg++
		}
		fmt.Fprintf(b, "| %s | %d | %.1f-%.1f | %s | %.4g | %.4g |\n", t.task, t.runs, t.minS, t.maxS, t.corr, t.fastQ, t.slowQ)
	}
	fmt.Fprintf(b, "\nSlower scripts score better (interval above 0) on %d of %d tasks, worse (below 0) on %d.\n", pos, len(tq), neg)
}
