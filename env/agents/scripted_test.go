package agents

import (
	"context"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/env"
)

// fakeEpisode plays the scripted expert against a tiny fake environment in
// which applying plan idea i improves the score iff good[i].
func fakeEpisode(t *testing.T, seed int64, plan []string, good map[string]bool, maxSteps int) []env.Action {
	t.Helper()
	acts, _ := fakeEpisodeSteps(t, seed, plan, good, maxSteps)
	return acts
}

// fakeEpisodeSteps also returns the steps taken, format errors included.
func fakeEpisodeSteps(t *testing.T, seed int64, plan []string, good map[string]bool, maxSteps int) ([]env.Action, int) {
	t.Helper()
	acts, steps, _ := fakeEpisodeStanding(t, Scripted{SlipRate: 0.2}, seed, plan, good, maxSteps)
	return acts, steps
}

// fakeEpisodeStanding also returns the score of the submission standing at
// the end minus the episode's best: as in the real environment, an undo
// restores the script, not the submission, until the script runs again.
func fakeEpisodeStanding(t *testing.T, expert Scripted, seed int64, plan []string, good map[string]bool, maxSteps int) ([]env.Action, int, float64) {
	t.Helper()
	agent := expert.Episode(plan, seed)
	st := State{Metric: "accuracy", Direction: "higher", MInit: 0.5, Current: 0.5, MaxSteps: maxSteps, Script: "# === model ===\nm = 1\n# === end model ===\n# === training ===\n# === end training ===\n"}
	best := 0.5
	script, beforeEdit := 0.5, 0.5 // what running train.py scores now, and before the last edit
	var last *env.StepResult
	var pendingIdea string
	var acts []env.Action
	for st.Step = 0; st.Step < maxSteps; st.Step++ {
		text, _, err := agent.Act(context.Background(), Observation{State: st, Last: last})
		if err != nil {
			t.Fatal(err)
		}
		r := &env.StepResult{Step: st.Step + 1, MetricBefore: st.Current}
		b := best
		r.BestBefore = &b
		a, perr := env.Parse(text)
		if perr != nil {
			r.Outcome = env.OutcomeFormatError
			last = r
			continue
		}
		r.Action = &a
		r.Outcome = env.OutcomeSuccess
		switch a.Name {
		case env.EditScriptAI:
			pendingIdea = a.EditInstruction
			beforeEdit = script
			if good[pendingIdea] {
				script = best + 0.1
			} else {
				script = best - 0.1
			}
		case env.ExecuteScript:
			if a.ScriptName != "train.py" {
				r.Outcome = env.OutcomeInvalidAction
				break
			}
			score := script
			pendingIdea = ""
			r.MetricAfter = &score
			st.Current = score
			if score > best {
				best = score
			}
		case env.UndoEditScript:
			script = beforeEdit
		case env.InspectScriptLines:
			if a.StartLine > 100 {
				r.Outcome = env.OutcomeInvalidAction
			}
		}
		acts = append(acts, a)
		last = r
		if a.Name == env.FinalAnswer {
			return acts, st.Step + 1, st.Current - best
		}
	}
	return acts, maxSteps, st.Current - best
}

func names(acts []env.Action) string {
	var s []string
	for _, a := range acts {
		s = append(s, a.Name)
	}
	return strings.Join(s, ", ")
}

func TestScriptedKeepsGoodEditsAndUndoesBadOnes(t *testing.T) {
	plan := []string{"idea good", "idea bad", "idea good too"}
	good := map[string]bool{"idea good": true, "idea good too": true}
	distinct := map[string]bool{}
	for seed := int64(0); seed < 40; seed++ {
		acts, steps := fakeEpisodeSteps(t, seed, plan, good, 15)
		distinct[names(acts)] = true
		if got := acts[len(acts)-1].Name; got != env.FinalAnswer {
			t.Fatalf("seed %d: last action %s, want Final Answer: %s", seed, got, names(acts))
		}
		edits := map[string]int{}
		for i, a := range acts {
			if a.Name == env.EditScriptAI {
				edits[a.EditInstruction]++
			}
			// A bad idea's run is followed by an undo; a good one's is not.
			if a.Name == env.ExecuteScript && i > 0 {
				var idea string
				for j := i - 1; j >= 0; j-- {
					if acts[j].Name == env.EditScriptAI {
						idea = acts[j].EditInstruction
						break
					}
					if acts[j].Name == env.ExecuteScript || acts[j].Name == env.UndoEditScript {
						break
					}
				}
				if idea == "" || i+1 >= len(acts) {
					continue
				}
				next := acts[i+1].Name
				if !good[idea] && next != env.UndoEditScript && next != env.ExecuteScript {
					// a slip may come in between; the undo must follow soon
					found := false
					for k := i + 1; k < len(acts) && k < i+4; k++ {
						if acts[k].Name == env.UndoEditScript {
							found = true
						}
					}
					if !found {
						t.Errorf("seed %d: bad idea %q was not undone: %s", seed, idea, names(acts))
					}
				}
				if good[idea] && next == env.UndoEditScript {
					t.Errorf("seed %d: good idea %q was undone: %s", seed, idea, names(acts))
				}
			}
		}
		// The restored script runs again after an undo, so that the better
		// submission is the one standing at the end (unless slips used up
		// the steps: the Final Answer then takes the last one).
		lastUndo, lastRun := -1, -1
		for i, a := range acts {
			switch a.Name {
			case env.UndoEditScript:
				lastUndo = i
			case env.ExecuteScript:
				lastRun = i
			}
		}
		if lastUndo >= 0 && lastRun < lastUndo && steps < 15 {
			t.Errorf("seed %d: the last undo is not followed by a run: %s", seed, names(acts))
		}
		// Ideas are tried in plan order: the tried ones are a prefix of the
		// plan (slips may leave no steps for the last ones).
		for i, p := range plan {
			if i == 0 && edits[p] == 0 {
				t.Errorf("seed %d: the first plan idea was never tried: %s", seed, names(acts))
			}
			if i > 0 && edits[p] > 0 && edits[plan[i-1]] == 0 {
				t.Errorf("seed %d: plan idea %q tried before %q: %s", seed, p, plan[i-1], names(acts))
			}
		}
		again := fakeEpisode(t, seed, plan, good, 15)
		if names(again) != names(acts) {
			t.Fatalf("seed %d: not deterministic", seed)
		}
	}
	if len(distinct) < 10 {
		t.Errorf("40 seeds gave %d distinct action sequences, want a real spread", len(distinct))
	}
}

func TestScriptedEndsWithinTheStepLimit(t *testing.T) {
	for seed := int64(0); seed < 20; seed++ {
		acts := fakeEpisode(t, seed, []string{"a", "b", "c"}, nil, 6)
		if len(acts) > 6 || acts[len(acts)-1].Name != env.FinalAnswer {
			t.Errorf("seed %d: %d actions ending with %s, want at most 6 ending with Final Answer: %s", seed, len(acts), acts[len(acts)-1].Name, names(acts))
		}
	}
}

// TestScriptedLeavesNoWorseSubmissionStanding: without slips, whatever
// the step limit and whichever ideas fail, the expert ends on its best
// submission with a Final Answer: it starts an edit cycle only when the
// cycle (edit, run, undo, run) and the Final Answer after it fit.
func TestScriptedLeavesNoWorseSubmissionStanding(t *testing.T) {
	plan := []string{"a", "b", "c", "d", "e"}
	for maxSteps := 5; maxSteps <= 12; maxSteps++ {
		for seed := int64(0); seed < 30; seed++ {
			for _, good := range []map[string]bool{nil, {"a": true}, {"b": true, "d": true}} {
				acts, _, gap := fakeEpisodeStanding(t, Scripted{SlipRate: 1e-12}, seed, plan, good, maxSteps)
				if gap != 0 || acts[len(acts)-1].Name != env.FinalAnswer {
					t.Fatalf("max %d seed %d good %v: standing - best = %v, last %s: %s", maxSteps, seed, good, gap, acts[len(acts)-1].Name, names(acts))
				}
			}
		}
	}
}

func TestRandomAnswersAlwaysParse(t *testing.T) {
	agent := Random{}.Episode([]string{"idea"}, 3)
	seen := map[string]bool{}
	for i := 0; i < 200; i++ {
		text, _, _ := agent.Act(context.Background(), Observation{})
		a, err := env.Parse(text)
		if err != nil {
			t.Fatalf("random answer does not parse: %v\n%s", err, text)
		}
		seen[a.Name] = true
	}
	if len(seen) != len(env.ActionNames()) {
		t.Errorf("random agent used %d of %d actions", len(seen), len(env.ActionNames()))
	}
}

// TestScriptedEditsWhenTheCycleFits: under a step limit below
// ScriptedEditSteps the expert (at its default slip rate) never edits;
// under evaluation's 8 steps most of its episodes edit (its opening takes
// up to four steps first).
func TestScriptedEditsWhenTheCycleFits(t *testing.T) {
	cases := []struct {
		maxSteps int
		min, max float64 // the share of episodes with an edit
	}{
		{maxSteps: 3, min: 0, max: 0},
		{maxSteps: ScriptedEditSteps - 1, min: 0, max: 0},
		{maxSteps: ScriptedEditSteps, min: 0.005, max: 0.1},
		{maxSteps: 8, min: 0.85, max: 1},
		{maxSteps: 15, min: 0.95, max: 1},
	}
	for _, c := range cases {
		edited := 0
		const n = 400
		for seed := range int64(n) {
			acts, _, _ := fakeEpisodeStanding(t, Scripted{}, seed, []string{"a", "b", "c"}, nil, c.maxSteps)
			if strings.Contains(names(acts), env.EditScriptAI) {
				edited++
			}
		}
		t.Logf("max_steps %d: %d of %d episodes edit", c.maxSteps, edited, n)
		if share := float64(edited) / n; share < c.min || share > c.max {
			t.Errorf("max_steps %d: %.1f%% of episodes edit, want %.1f%% to %.1f%%", c.maxSteps, 100*share, 100*c.min, 100*c.max)
		}
	}
}
