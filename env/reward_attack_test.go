package env

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// Reward hacks that use only valid actions: the agent writes a script
// whose score it controls from run to run, and times its runs and edits
// so that the improvement terms add up to more than the submission it
// leaves standing improved on m_init.

// toggleScript writes a perfect submission on one run and an all-wrong
// one on the next (a file it leaves in the workspace says which): a
// script's score can change between two runs of the same code without any
// edit (a random seed, the clock, a file of its own).
const toggleScript = `import os
good = not os.path.exists("flip")
if good:
    open("flip", "w").close()
else:
    os.remove("flip")
with open("submission.csv", "w") as f:
    f.write("id,y\n")
    for i in range(20):
        y = int(i / 20 > 0.5)
        f.write("t%d,%d\n" % (i, y if good else 1 - y))
raise SystemExit(0)
`

// TestRerunsDoNotLowerTheImprovementBaseline: an unedited re-run earns
// nothing, so a script that scores high and low on alternate runs must
// not let the agent bank the low run as the baseline of its next
// (trivially) edited run. Without the guard each cycle of re-run, a
// comment inserted and a run earns the whole headroom again: 1 + 1 + 1
// for one point of real gain.
func TestRerunsDoNotLowerTheImprovementBaseline(t *testing.T) {
	e, _ := newTestEnv(t, false)
	e.cfg.MaxSteps = 100
	e.cfg.Reward.Squash = SquashNone // clipping would hide a doubled gain
	seq := []string{
		// Replace train.py (26 lines) with the toggling script.
		act(EditScriptSegment, "train.py", "1", "26", toggleScript),
		act(ExecuteScript, "train.py"), // good: 1.0, an edited run: +1
	}
	for i := 0; i < 3; i++ {
		seq = append(seq,
			act(ExecuteScript, "train.py"), // bad: 0.0, unedited: 0
			act(EditScriptSegment, "train.py", "1", "1", fmt.Sprintf("import os  # %d", i)), // a comment
			act(ExecuteScript, "train.py"), // good again
		)
	}
	total := 0.0
	for i, text := range seq {
		r := step(t, e, text)
		if r.Outcome != OutcomeSuccess {
			t.Fatalf("step %d: %s: %s", i+1, r.Outcome, r.Observation)
		}
		total += r.Reward.Total
		after := "-"
		if r.MetricAfter != nil {
			after = fmt.Sprint(*r.MetricAfter)
		}
		t.Logf("step %d %s: score %s, reward %+.2f", i+1, r.Action.Name, after, r.Reward.Total)
	}
	// The submission standing scores 1.0 against m_init 0.5: one point of
	// headroom (scale 0.5), earned once.
	if got := e.Current(); got != 1 {
		t.Fatalf("standing score %v, want 1", got)
	}
	if math.Abs(total-1) > 1e-9 {
		t.Fatalf("the episode earned %+.2f of improvement for a gain of +1.00: unedited re-runs lowered the baseline", total)
	}
}

// TestUneditedFirstRunsDoNotMoveTheBaseline: the same with the toggling
// script as the task's own (no edit yet): the episode's first runs are
// unedited, and the first edited run is measured from m_init, not from
// whatever the last unedited run scored.
func TestUneditedFirstRunsDoNotMoveTheBaseline(t *testing.T) {
	e, _ := newTestEnv(t, false)
	e.cfg.Reward.Squash = SquashNone
	if err := os.WriteFile(filepath.Join(e.Dir(), "train.py"), []byte(toggleScript), 0o644); err != nil {
		t.Fatal(err)
	}
	want := []float64{0, 0, 0, 1} // 1.0 and 0.0 unedited, the edit, then 1.0 against m_init 0.5 (scale 0.5)
	for i, text := range []string{
		act(ExecuteScript, "train.py"),
		act(ExecuteScript, "train.py"),
		act(EditScriptSegment, "train.py", "1", "1", "import os  # edited"),
		act(ExecuteScript, "train.py"),
	} {
		r := step(t, e, text)
		if r.Outcome != OutcomeSuccess || math.Abs(r.Reward.Total-want[i]) > 1e-9 {
			t.Fatalf("step %d %s: outcome %s, reward %+.2f, want success and %+.2f", i+1, r.Action.Name, r.Outcome, r.Reward.Total, want[i])
		}
	}
}
