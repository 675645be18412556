package evaluate

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/schemas"
)

func rowsOf(method, task, split, direction string, mInit float64, finals ...float64) []schemas.EvalResult {
	var out []schemas.EvalResult
	for i, f := range finals {
		out = append(out, schemas.EvalResult{Method: method, TaskID: task, Split: split, Metric: "m", Direction: direction,
			Trajectory: int32(i), MInit: mInit, FinalScore: f, Steps: 2, WallS: 1,
			Actions: []string{"List Files", "Final Answer"}, Outcomes: []string{"success", "success"}})
	}
	return out
}

// reference computes a cell's numbers the slow, obvious way.
func reference(direction string, mInit float64, xs []float64) (avg, best, delta, ci float64) {
	sum := 0.0
	best = xs[0]
	for _, x := range xs {
		sum += x
		if (direction == schemas.HigherIsBetter && x > best) || (direction == schemas.LowerIsBetter && x < best) {
			best = x
		}
	}
	avg = sum / float64(len(xs))
	ss := 0.0
	for _, x := range xs {
		ss += (x - avg) * (x - avg)
	}
	sd := math.Sqrt(ss / float64(len(xs)-1))
	b := 1.0
	if direction == schemas.LowerIsBetter {
		b = -1
	}
	delta = b * (avg - mInit) / mInit
	ci = t975[len(xs)-2] * sd / math.Sqrt(float64(len(xs))) / math.Abs(mInit)
	return
}

// t975 holds the 0.975 quantiles of Student's t for 1..30 degrees of
// freedom, as printed in t tables (3 decimals).
var t975 = []float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
	2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
	2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}

func TestCell(t *testing.T) {
	tests := []struct {
		name      string
		direction string
		mInit     float64
		finals    []float64
	}{
		{"higher", schemas.HigherIsBetter, 0.8, []float64{0.8, 0.9}},
		{"higher eight", schemas.HigherIsBetter, 0.5, []float64{0.5, 0.52, 0.61, 0.49, 0.55, 0.5, 0.7, 0.45}},
		{"lower", schemas.LowerIsBetter, 10, []float64{9, 8, 12}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := cell("m", rowsOf("m", "t", schemas.HeldOut, tc.direction, tc.mInit, tc.finals...))
			avg, best, delta, ci := reference(tc.direction, tc.mInit, tc.finals)
			for _, v := range []struct {
				what      string
				got, want float64
				tol       float64
			}{{"avg", c.Avg, avg, 1e-12}, {"best", c.Best, best, 1e-12}, {"delta_r", c.Delta, delta, 1e-12},
				// The table's quantiles are rounded to 3 decimals.
				{"ci", c.DeltaCI, ci, 3e-4 * ci}} {
				if math.Abs(v.got-v.want) > v.tol {
					t.Errorf("%s: got %v, want %v", v.what, v.got, v.want)
				}
			}
		})
	}
	// Lower is better: 9, 8 and 12 against 10 -> avg 9.667, a gain of 3.33%.
	c := cell("m", rowsOf("m", "t", schemas.HeldOut, schemas.LowerIsBetter, 10, 9, 8, 12))
	if math.Abs(c.Delta-1.0/30) > 1e-12 || c.Best != 8 || math.Abs(c.Improved-2.0/3) > 1e-12 {
		t.Errorf("lower: got delta %v best %v improved %v, want 0.0333 8 0.667", c.Delta, c.Best, c.Improved)
	}
	if c := cell("m", rowsOf("m", "t", schemas.HeldOut, schemas.HigherIsBetter, 0, 0.1, 0.2)); !math.IsNaN(c.Delta) {
		t.Errorf("m_init 0: got delta %v, want NaN (undefined)", c.Delta)
	}
	if c := cell("initial", rowsOf("initial", "t", schemas.HeldOut, schemas.HigherIsBetter, 0.7, 0.7)); c.Delta != 0 || c.DeltaCI != 0 {
		t.Errorf("one trajectory at m_init: got delta %v ± %v, want 0 ± 0", c.Delta, c.DeltaCI)
	}
}

func TestSummarizeHeadlines(t *testing.T) {
	var rows []schemas.EvalResult
	rows = append(rows, rowsOf(MethodSFT, "a", schemas.HeldOut, schemas.HigherIsBetter, 0.5, 0.5, 0.6)...)
	rows = append(rows, rowsOf(MethodSFT, "b", schemas.HeldOut, schemas.LowerIsBetter, 2, 1, 1)...)
	rows = append(rows, rowsOf(MethodSFT, "c", schemas.HeldIn, schemas.HigherIsBetter, 0.5, 0.5)...)
	rows = append(rows, rowsOf(MethodInitial, "a", schemas.HeldOut, schemas.HigherIsBetter, 0.5, 0.5)...)
	s := Summarize(rows)
	if got := len(s.Headlines); got != 3 {
		t.Fatalf("got %d headlines, want 3 (initial and sft held-out, sft held-in)", got)
	}
	if h := s.Headlines[0]; h.Method != MethodInitial || h.Split != schemas.HeldOut {
		t.Errorf("first headline %s/%s, want initial/held-out", h.Method, h.Split)
	}
	h := s.Headlines[1]
	// a: +10%, b: +50% -> mean +30%; a's se 0.05/0.5 = 0.1, b's 0 -> ci t(2) * 0.1 / 2.
	if h.Method != MethodSFT || h.Tasks != 2 || h.Trajectories != 4 || math.Abs(h.Delta-0.3) > 1e-12 || math.Abs(h.DeltaCI-4.303*0.1/2) > 1e-4 {
		t.Errorf("sft held-out: got %+v, want 2 tasks, 4 trajectories, delta 0.3 ± %v", h, 4.303*0.1/2)
	}
	if got := s.Actions[MethodSFT]["Final Answer"]; got != 5 {
		t.Errorf("sft Final Answer count %d, want 5", got)
	}
	if got, want := s.Methods, []string{MethodInitial, MethodSFT}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("methods %v, want %v", got, want)
	}
}

func TestTQuantile(t *testing.T) {
	// Every value of a printed t table (3 decimals), then beyond it.
	type tc struct {
		df   int
		want float64
	}
	var tests []tc
	for i, q := range t975 {
		tests = append(tests, tc{i + 1, q})
	}
	tests = append(tests, tc{40, 2.021}, tc{60, 2.000}, tc{120, 1.980}, tc{1000, 1.962})
	for _, tc := range tests {
		if got := tQuantile975(tc.df); math.Abs(got-tc.want) > 0.0005 {
			t.Errorf("df %d: got %.4f, want %.3f", tc.df, got, tc.want)
		}
	}
	if got := tQuantile975(0); got != 0 {
		t.Errorf("df 0: got %v, want 0 (no interval)", got)
	}
}

func TestVerdict(t *testing.T) {
	mk := func(sft, sftCI, ppo, ppoCI float64) Summary {
		return Summary{Headlines: []Headline{
			{Method: MethodSFT, Split: schemas.HeldOut, Delta: sft, DeltaCI: sftCI},
			{Method: MethodPPO, Split: schemas.HeldOut, Delta: ppo, DeltaCI: ppoCI}}}
	}
	tests := []struct {
		name string
		s    Summary
		want string
	}{
		{"rl better, clear", mk(0.01, 0.001, 0.05, 0.001), "On held-out tasks, SFT+PPO beats SFT: delta_r +5.00% vs +1.00%."},
		{"rl better, within noise", mk(0.01, 0.05, 0.02, 0.05), "On held-out tasks, SFT+PPO beats SFT: delta_r +2.00% vs +1.00% (within the 95% intervals: not a clear difference)."},
		{"rl worse", mk(0.02, 0.001, -0.01, 0.001), "On held-out tasks, RL does not beat SFT: SFT+PPO delta_r -1.00% vs SFT +2.00%."},
		{"equal", mk(0, 0, 0, 0), "On held-out tasks, RL does not beat SFT: both have delta_r +0.00%."},
		{"no ppo", Summary{Headlines: []Headline{{Method: MethodSFT, Split: schemas.HeldOut}}}, ""},
		{"ppo kept the sft weights", func() Summary {
			s := mk(-0.04, 0.01, 0.02, 0.01)
			s.PPOIsSFT = "no PPO point beats the SFT point"
			return s
		}(),
			"On held-out tasks, RL does not beat SFT: the PPO run kept the SFT policy (no PPO point beats the SFT point), so SFT+PPO's delta_r +2.00% vs SFT's -4.00% is two evaluations of the same weights."},
	}
	for _, tc := range tests {
		if got := Verdict(tc.s, schemas.HeldOut); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestBehaviours counts edits, unchanged edits, executions and the
// trajectories that ran the script or gave a Final Answer, per split and
// method, from the rows' actions and feedback.
func TestBehaviours(t *testing.T) {
	row := func(method, split string, actions []string, feedback ...string) schemas.EvalResult {
		return schemas.EvalResult{Method: method, TaskID: "a", Split: split, Direction: schemas.HigherIsBetter, MInit: 1, FinalScore: 1,
			Actions: actions, Feedback: feedback}
	}
	// scored sets a row's final score and its best run's score.
	scored := func(r schemas.EvalResult, final, best float64) schemas.EvalResult {
		r.FinalScore, r.BestScore = final, &best
		return r
	}
	rows := []schemas.EvalResult{
		// An edit, the same edit again (unchanged), a run, a Final Answer:
		// a better script found and kept.
		scored(row(MethodPPO, schemas.HeldIn, []string{"Edit Script (AI)", "Edit Script (AI)", "Execute Script", "Final Answer"},
			"The edited file is saved to train.py.", "The edit left train.py unchanged.", "The script ran.", "Done."), 1.2, 1.2),
		// Edits only: never runs, never answers.
		row(MethodPPO, schemas.HeldIn, []string{"Edit Script (AI)", "Edit Script Segment"}, "The edit left train.py unchanged."),
		// A run that only matched the initial script: nothing found.
		scored(row(MethodSFT, schemas.HeldIn, []string{"Execute Script"}, "The script ran."), 1, 1),
		// A run edit undone without a rerun, then an edit and its undo:
		// the script at the end is not the last run's. Its run was better
		// than the initial script, and lost.
		scored(row(MethodSFT, schemas.HeldIn, []string{"Edit Script (AI)", "Execute Script", "Undo Edit Script", "Edit Script (AI)", "Undo Edit Script"},
			"The edited file is saved to train.py.", "The script ran.", "Undone.", "The edited file is saved to train.py.", "Undone."), 1, 1.3),
		// An edit undone before any run: nothing left unrun.
		row(MethodSFT, schemas.HeldIn, []string{"Execute Script", "Edit Script (AI)", "Undo Edit Script", "Final Answer"},
			"The script ran.", "The edited file is saved to train.py.", "Undone.", "Done."),
		// A run, then an edit the editor failed: nothing changed.
		func() schemas.EvalResult {
			r := row(MethodSFT, schemas.HeldIn, []string{"Execute Script", "Edit Script (AI)"}, "The script ran.", "The editor failed.")
			r.Outcomes = []string{"success", "editor_error"}
			return r
		}(),
		// Lower is better: a run below m_init found, the final kept below.
		func() schemas.EvalResult {
			r := scored(row(MethodPPO, schemas.HeldOut, []string{"List Files"}, "files"), 0.95, 0.9)
			r.Direction = schemas.LowerIsBetter
			return r
		}(),
	}
	s := Summarize(rows)
	var ppo *Behaviour
	for i, b := range s.Behaviours {
		if b.Method == MethodPPO && b.Split == schemas.HeldIn {
			ppo = &s.Behaviours[i]
		}
	}
	if len(s.Behaviours) != 3 || ppo == nil {
		t.Fatalf("behaviours %+v, want 3 (sft held-in, sft+ppo held-in and held-out)", s.Behaviours)
	}
	// The second trajectory's first edit left the script unchanged, its
	// second (no feedback recorded) counts as a change, never run: one
	// unrun change.
	want := Behaviour{Method: MethodPPO, Split: schemas.HeldIn, Trajectories: 2, Steps: 6, Edits: 4, Unchanged: 2, Executes: 1, RanScript: 1, FinalAnswer: 1, Unrun: 1,
		Found: 1, Kept: 1}
	if *ppo != want {
		t.Errorf("sft+ppo held-in: got %+v, want %+v", *ppo, want)
	}
	for _, b := range s.Behaviours {
		if b.Method == MethodSFT && (b.Trajectories != 4 || b.Unrun != 1) {
			t.Errorf("sft held-in: %d trajectories, %d ended on an unrun change; want 4 and 1 (the undo of a run edit)", b.Trajectories, b.Unrun)
		}
		if b.Method == MethodSFT && (b.Found != 1 || b.Kept != 0) {
			t.Errorf("sft held-in: found %d, kept %d; want 1 and 0 (the undone run; a run equal to m_init is not better)", b.Found, b.Kept)
		}
		if b.Split == schemas.HeldOut && (b.Found != 1 || b.Kept != 1) {
			t.Errorf("sft+ppo held-out (lower is better): found %d, kept %d; want 1 and 1", b.Found, b.Kept)
		}
	}
	if s.Behaviours[0].Split != schemas.HeldOut {
		t.Errorf("held-out first: %+v", s.Behaviours)
	}
	var buf strings.Builder
	writeBehaviours(&buf, s, schemas.HeldIn)
	if out := buf.String(); !strings.Contains(out, "| sft+ppo | 2 | 6 | 67% | 50% | 17% | 50% | 50% | 50% | 1 (50%) | 1 of 1 |") {
		t.Errorf("report table:\n%s", out)
	}
}

// TestSummarizeHeadroom: with m_best known, each cell reports the mean
// share of the headroom closed (clipped per trajectory to [-1, 1]) and
// the headline averages it over tasks; a letter-recognition-like task
// whose delta_r is huge counts at most 1. Without m_best the share is
// NaN and the report says n/a.
func TestSummarizeHeadroom(t *testing.T) {
	var rows []schemas.EvalResult
	rows = append(rows, rowsOf("sft", "small-init", schemas.HeldOut, schemas.HigherIsBetter, 0.1, 0.5, 0.3)...) // m_best 0.3: shares 1 (clipped), 1
	rows = append(rows, rowsOf("sft", "mae", schemas.HeldOut, schemas.LowerIsBetter, 10, 8, 12)...)             // m_best 6: shares 0.5, -0.5
	s := SummarizeWith(rows, map[string]float64{"small-init": 0.3, "mae": 6})
	got := map[string]float64{}
	for _, c := range s.Cells {
		got[c.TaskID] = c.Room
	}
	if got["small-init"] != 1 || got["mae"] != 0 {
		t.Fatalf("cell shares %v, want small-init 1 and mae 0", got)
	}
	h := s.Headlines[0]
	if h.RoomTasks != 2 || h.Room != 0.5 || !(h.RoomCI > 0) {
		t.Fatalf("headline share %v ± %v over %d tasks, want 0.5 over 2 with an interval", h.Room, h.RoomCI, h.RoomTasks)
	}
	if h.Delta < 1 {
		t.Fatalf("delta_r %v: the fixture should let the small-init task decide delta_r's mean", h.Delta)
	}
	none := Summarize(rows)
	if !math.IsNaN(none.Headlines[0].Room) || !math.IsNaN(none.Cells[0].Room) {
		t.Fatalf("without m_best: headline %v, cell %v, want NaN", none.Headlines[0].Room, none.Cells[0].Room)
	}
	var b strings.Builder
	writeMarkdown(&b, ReportInput{Summary: s, PerTask: 2, MaxSteps: 8}, nil, false)
	if !strings.Contains(b.String(), "| headroom closed |") || !strings.Contains(b.String(), "| +50.00% ± ") {
		t.Fatalf("the report lacks the headroom column:\n%s", b.String())
	}
}

// TestHeadlineJSONWritesNaNAsNull: a headline without m_best (or m_init)
// still goes into the manifest, its unmeasured values as null.
func TestHeadlineJSONWritesNaNAsNull(t *testing.T) {
	h := Summarize(rowsOf("sft", "a", schemas.HeldOut, schemas.HigherIsBetter, 0.5, 0.6, 0.7)).Headlines[0]
	b, err := json.Marshal([]Headline{h})
	if err != nil {
		t.Fatal(err)
	}
	var back []map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if v, ok := back[0]["headroom"]; !ok || v != nil {
		t.Fatalf("headroom %v (present %v), want null: %s", v, ok, b)
	}
	if v, _ := back[0]["delta_r"].(float64); math.Abs(v-0.3) > 1e-9 || back[0]["method"] != "sft" || back[0]["tasks"] != 1.0 {
		t.Fatalf("the measured fields were lost: %s", b)
	}
}
