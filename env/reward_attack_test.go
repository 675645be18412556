package env

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
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

// TestUneditedRunsOnlyRaiseTheBaseline: the same with the toggling
// script as the task's own (no edit yet): the episode's first runs are
// unedited. The first (1.0, better than m_init 0.5) raises the baseline,
// as measuring the initial script first does (env's Example); the second
// (0.0) does not lower it, so the edited run's 1.0 earns nothing.
func TestUneditedRunsOnlyRaiseTheBaseline(t *testing.T) {
	e, _ := newTestEnv(t, false)
	e.cfg.Reward.Squash = SquashNone
	if err := os.WriteFile(filepath.Join(e.Dir(), "train.py"), []byte(toggleScript), 0o644); err != nil {
		t.Fatal(err)
	}
	want := []float64{0, 0, 0, 0} // 1.0 and 0.0 unedited, the edit, then 1.0 against the baseline 1.0
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

// TestSleepingOutTheLimitIsNotACornerCase: a timeout earns the corner
// case's 0 where a crash earns -1, so a script about to fail could sleep
// out its time limit instead. Through the real sandbox (warm runner, a
// 3 s limit): a run that sleeps is a failed run (-1, plus its markers), a run that computes
// until the limit keeps the corner case (0). Where no CPU cgroup counts
// the run's processes the sleep cannot be told and the test says so.
func TestSleepingOutTheLimitIsNotACornerCase(t *testing.T) {
	python := realPython(t)
	hostileOnce.Do(func() { hostileRunner, hostileErr = sandbox.NewWarm(context.Background(), python) })
	if hostileErr != nil {
		t.Fatal(hostileErr)
	}
	for _, tc := range []struct {
		name, script string
		idle         bool
	}{
		{"sleeps", "import time\ntime.sleep(60)\n", true},
		{"waits on a pipe", "import os\nr, w = os.pipe()\nos.read(r, 1)\n", true},
		{"computes", "x = 0\nwhile True:\n    x += 1\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := store.NewLocal(t.TempDir())
			cfg := testConfig(t)
			cfg.Python, cfg.Runner, cfg.Instrumenter = python, hostileRunner, nil
			spec := fixture(t, st, false)
			spec.TimeLimit = 3 * time.Second
			e, err := New(context.Background(), cfg, spec, st)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if err := os.WriteFile(filepath.Join(e.Dir(), "attack.py"), []byte(tc.script), 0o644); err != nil {
				t.Fatal(err)
			}
			metered := &meteredRunner{Runner: hostileRunner}
			e.cfg.Runner = metered
			r := step(t, e, act(ExecuteScript, "attack.py"))
			res := metered.result()
			if r.Outcome != OutcomeTimeout || res == nil {
				t.Fatalf("outcome %s, want timeout:\n%s", r.Outcome, r.Observation)
			}
			t.Logf("%s: CPU time %v in %v (held to %g core): reward %+.1f", tc.name, res.CPUTime, res.Duration, res.CPUs, r.Reward.Total)
			if res.CPUs == 0 {
				t.Skip("no CPU cgroup here: an idle run cannot be told from one whose workers were not counted")
			}
			want := 0.0 // the corner case
			if tc.idle {
				want = -1 + 0.1*float64(len(r.Markers)) // a failed run, with the markers it reached
			}
			if math.Abs(r.Reward.Total-want) > 1e-9 {
				t.Fatalf("reward %+.1f, want %+.1f:\n%s", r.Reward.Total, want, r.Observation)
			}
			if idle := strings.Contains(r.Observation, "waiting, not computing"); idle != tc.idle {
				t.Fatalf("the observation does not say whether the run was idle:\n%s", r.Observation)
			}
		})
	}
}
