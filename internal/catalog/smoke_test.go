package catalog

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSmokeEveryIdea runs every applicable idea once on every built-in task
// (hyperparameter ideas after the first model idea that gives them a
// parameter to act on) and reports the ones whose script fails. It takes
// several minutes, so it runs only with MLERL_SMOKE=1:
//
//	MLERL_SMOKE=1 go test -run TestSmokeEveryIdea -timeout 60m -v ./internal/catalog
//
// Failures that an idea raises on purpose (seed averaging without a
// random_state, a grid search without a tunable parameter) are logged, not
// errors: the agent learns from them.
func TestSmokeEveryIdea(t *testing.T) {
	if os.Getenv("MLERL_SMOKE") != "1" {
		t.Skip("set MLERL_SMOKE=1 to run every idea on every task (minutes)")
	}
	py := python(t)
	suite := loadSuite(t)
	type entry struct {
		task string
		ids  []string
	}
	var entries []entry
	var jobs []job
	for _, st := range suite {
		if only := os.Getenv("MLERL_SMOKE_TASKS"); only != "" && !strings.Contains(","+only+",", ","+st.ID+",") {
			continue
		}
		ideas := ForTask(st.Modality, st.TaskType)
		for _, i := range ideas {
			ids := []string{i.ID}
			s, err := Apply(st.script, i.Edit)
			if err != nil {
				for _, m := range ideas {
					if m.Category != "model" {
						continue
					}
					if s1, err := Apply(st.script, m.Edit); err == nil {
						if s2, err := Apply(s1, i.Edit); err == nil {
							s, ids = s2, []string{m.ID, i.ID}
							break
						}
					}
				}
			}
			if s == "" {
				t.Errorf("%s: %s applies nowhere", st.ID, i.ID)
				continue
			}
			entries = append(entries, entry{st.ID, ids})
			jobs = append(jobs, job{st, s})
		}
	}
	tmp := t.TempDir()
	half := len(jobs) / 2
	parts := [][]job{jobs[:half], jobs[half:]}
	outs := make([][]runResult, 2)
	errs := make([]error, 2)
	parallel(2, func(p int) {
		outs[p], errs[p] = runJobs(py, parts[p], filepath.Join(tmp, fmt.Sprintf("part%d", p)))
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	results := append(outs[0], outs[1]...)
	failed := 0
	for k, e := range entries {
		r := results[k]
		switch {
		case r.err != nil && (strings.Contains(r.err.Error(), "needs a model with a random_state") || strings.Contains(r.err.Error(), "no hyperparameter to tune") ||
			strings.Contains(r.err.Error(), "sample weights need a model")):
			t.Logf("%s + %v: refused on purpose", e.task, e.ids)
		case r.err != nil:
			failed++
			t.Errorf("%s + %v: %v", e.task, e.ids, lastLines(r.err.Error(), 3))
		case !r.valid:
			failed++
			t.Errorf("%s + %v: invalid submission: %s", e.task, e.ids, r.reason)
		}
	}
	t.Logf("%d of %d idea runs failed", failed, len(entries))
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, " | ")
}
