package env

import (
	"math"
	"testing"
	"time"

	"github.com/mlerl/mlerl/schemas"
)

func fp(v float64) *float64 { return &v }

func TestComputeReward(t *testing.T) {
	def := DefaultRewardConfig()
	noFormat := def
	noFormat.Format = false
	noCorner := def
	noCorner.CornerCase = false
	tanh := def
	tanh.Squash = SquashTanh
	binary := def
	binary.Improvement, binary.Binary = false, true
	noMarkers := def
	noMarkers.Markers = false
	pc := PartialCreditRewardConfig()
	penalty := pc
	penalty.NoValidPen = -5

	hi := func(in RewardInput) RewardInput {
		in.Direction, in.MInit, in.MBest = schemas.HigherIsBetter, 0.6, 0.8
		return in
	}
	lo := func(in RewardInput) RewardInput {
		in.Direction, in.MInit, in.MBest = schemas.LowerIsBetter, 10, 6
		return in
	}
	run := func(o Outcome) RewardInput { return RewardInput{Outcome: o, Executed: true, Edited: true} }
	graded := func(prev, now float64, edited bool) RewardInput {
		return RewardInput{Outcome: OutcomeSuccess, Executed: true, Edited: edited, Prev: prev, New: fp(now)}
	}
	withMarkers := func(in RewardInput, n int) RewardInput { in.Markers = n; return in }

	tests := []struct {
		name  string
		cfg   RewardConfig
		in    RewardInput
		total float64
		terms map[string]float64
	}{
		{"format error", def, hi(RewardInput{Outcome: OutcomeFormatError}), -1, map[string]float64{TermFormat: -1}},
		{"invalid action", def, hi(RewardInput{Outcome: OutcomeInvalidAction}), -1, map[string]float64{TermFormat: -1}},
		{"invalid edit", def, hi(RewardInput{Outcome: OutcomeInvalidEdit}), -1, map[string]float64{TermFormat: -1}},
		{"format term off", noFormat, hi(RewardInput{Outcome: OutcomeFormatError}), 0, map[string]float64{}},
		{"valid non-editing action", def, hi(RewardInput{Outcome: OutcomeSuccess}), 0, map[string]float64{}},
		{"successful edit (no run yet)", def, hi(RewardInput{Outcome: OutcomeSuccess, Edited: true}), 0, map[string]float64{}},
		{"editor failure is a corner case", def, hi(RewardInput{Outcome: OutcomeEditorError}), 0, map[string]float64{TermCornerCase: 0}},
		{"timeout", def, hi(run(OutcomeTimeout)), 0, map[string]float64{TermCornerCase: 0}},
		{"idle timeout", def, hi(withMarkers(RewardInput{Outcome: OutcomeTimeout, Executed: true, Edited: true, IdleTimeout: true}, 1)), -0.9, map[string]float64{TermError: -1, TermMarkers: 0.1}},
		{"edited run measured from its base", def, hi(RewardInput{Outcome: OutcomeSuccess, Executed: true, Edited: true, Prev: 0.6, Base: fp(0.7), New: fp(0.8)}), 0.5, map[string]float64{TermImprovement: 0.5}},
		{"oom", def, hi(run(OutcomeOOM)), 0, map[string]float64{TermCornerCase: 0}},
		{"timeout without corner-case term", noCorner, hi(withMarkers(run(OutcomeTimeout), 2)), -0.8, map[string]float64{TermError: -1, TermMarkers: 0.2}},
		{"script error, no markers", def, hi(run(OutcomeScriptError)), -1, map[string]float64{TermError: -1, TermMarkers: 0}},
		{"script error after 3 markers", def, hi(withMarkers(run(OutcomeScriptError), 3)), -0.7, map[string]float64{TermError: -1, TermMarkers: 0.3}},
		{"script error, markers off", noMarkers, hi(withMarkers(run(OutcomeScriptError), 3)), -1, map[string]float64{TermError: -1}},
		{"killed", def, hi(run(OutcomeKilled)), -1, map[string]float64{TermError: -1, TermMarkers: 0}},
		{"output flood", def, hi(run(OutcomeOutputLimit)), -1, map[string]float64{TermError: -1, TermMarkers: 0}},
		{"invalid submission after 6 markers", def, hi(withMarkers(run(OutcomeInvalidSubmission), 6)), -0.4, map[string]float64{TermError: -1, TermMarkers: 0.6}},
		{"improvement higher-is-better", def, hi(graded(0.6, 0.7, true)), 0.5, map[string]float64{TermImprovement: 0.5}},
		{"regression higher-is-better", def, hi(graded(0.7, 0.6, true)), -0.5, map[string]float64{TermImprovement: -0.5}},
		{"improvement clipped", def, hi(graded(0.6, 1.0, true)), 1, map[string]float64{TermImprovement: 1}},
		{"regression clipped", def, hi(graded(0.7, 0.1, true)), -1, map[string]float64{TermImprovement: -1}},
		{"improvement tanh", tanh, hi(graded(0.6, 0.7, true)), math.Tanh(0.5), map[string]float64{TermImprovement: math.Tanh(0.5)}},
		{"improvement lower-is-better", def, lo(graded(10, 9, true)), 0.25, map[string]float64{TermImprovement: 0.25}},
		{"regression lower-is-better", def, lo(graded(9, 10, true)), -0.25, map[string]float64{TermImprovement: -0.25}},
		{"re-run without an edit earns nothing", def, hi(graded(0.6, 0.7, false)), 0, map[string]float64{}},
		{"m_best == m_init scales by |m_init|", def, RewardInput{Outcome: OutcomeSuccess, Executed: true, Edited: true, Prev: 0.5, New: fp(0.6), MInit: 0.5, MBest: 0.5, Direction: schemas.HigherIsBetter}, 0.2, map[string]float64{TermImprovement: 0.2}},
		{"m_best == m_init == 0 scales by 1", def, RewardInput{Outcome: OutcomeSuccess, Executed: true, Edited: true, Prev: 0, New: fp(0.25), MInit: 0, MBest: 0, Direction: schemas.LowerIsBetter}, -0.25, map[string]float64{TermImprovement: -0.25}},
		{"binary improved", binary, hi(graded(0.6, 0.61, true)), 1, map[string]float64{TermBinary: 1}},
		{"binary not improved", binary, hi(graded(0.6, 0.6, true)), 0, map[string]float64{TermBinary: 0}},
		{"partial credit: failed run", pc, hi(withMarkers(run(OutcomeScriptError), 4)), -9.6, map[string]float64{TermNoValid: -10, TermMarkers: 0.4}},
		{"partial credit: configured penalty", penalty, hi(run(OutcomeInvalidSubmission)), -5, map[string]float64{TermNoValid: -5, TermMarkers: 0}},
		{"partial credit: valid run scores", pc, hi(graded(0.6, 0.7, true)), 0.7, map[string]float64{TermScore: 0.7}},
		{"partial credit: lower-is-better score flips sign", pc, lo(graded(10, 9, false)), -9, map[string]float64{TermScore: -9}},
		{"partial credit: timeout stays a corner case", pc, hi(run(OutcomeTimeout)), 0, map[string]float64{TermCornerCase: 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ComputeReward(tc.cfg, tc.in)
			if math.Abs(got.Total-tc.total) > 1e-12 {
				t.Errorf("got total %v, want %v (terms %+v)", got.Total, tc.total, got.Terms)
			}
			if len(got.Terms) != len(tc.terms) {
				t.Errorf("got terms %+v, want %v", got.Terms, tc.terms)
			}
			sum := 0.0
			for _, term := range got.Terms {
				want, ok := tc.terms[term.Name]
				if !ok || math.Abs(term.Value-want) > 1e-12 {
					t.Errorf("got term %s = %v, want %v (present: %v)", term.Name, term.Value, want, ok)
				}
				sum += term.Value
			}
			if math.Abs(sum-got.Total) > 1e-12 {
				t.Errorf("terms sum to %v, total is %v", sum, got.Total)
			}
		})
	}
}

// The default reward stays in [-1, 1] for every outcome.
func TestDefaultRewardBounded(t *testing.T) {
	for _, o := range Outcomes() {
		for _, m := range []int{0, 3, 6} {
			for _, now := range []float64{-100, 0.5, 100} {
				in := RewardInput{Outcome: o, Executed: true, Edited: true, Prev: 0.5, New: fp(now), MInit: 0.5, MBest: 0.6, Direction: schemas.HigherIsBetter, Markers: m}
				if r := ComputeReward(DefaultRewardConfig(), in); r.Total < -1 || r.Total > 1 {
					t.Errorf("outcome %s markers %d new %v: got total %v, want within [-1, 1]", o, m, now, r.Total)
				}
			}
		}
	}
}

func TestRewardConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*RewardConfig)
		want string // the whole message; "" for valid
	}{
		{"default", func(*RewardConfig) {}, ""},
		{"partial credit", func(c *RewardConfig) { *c = PartialCreditRewardConfig() }, ""},
		{"unknown squash", func(c *RewardConfig) { c.Squash = "sigmoid" }, `squash "sigmoid": want clip, tanh or none`},
		{"empty squash", func(c *RewardConfig) { c.Squash = "" }, `squash "": want clip, tanh or none (the improvement term is on)`},
		{"empty squash, no improvement", func(c *RewardConfig) { c.Squash, c.Improvement = "", false }, ""},
		{"negative marker value", func(c *RewardConfig) { c.MarkerValue = -0.1 }, "marker_value -0.1: must be a number >= 0 (credit per marker reached)"},
		{"NaN marker value", func(c *RewardConfig) { c.MarkerValue = math.NaN() }, "marker_value NaN: must be a number >= 0 (credit per marker reached)"},
		{"positive penalty", func(c *RewardConfig) { c.NoValidPen = 10 }, "no_valid_penalty 10: must be a number <= 0 (a penalty, such as -10)"},
		{"infinite penalty", func(c *RewardConfig) { c.NoValidPen = math.Inf(-1) }, "no_valid_penalty -Inf: must be a number <= 0 (a penalty, such as -10)"},
		{"unchanged edit cost", func(c *RewardConfig) { c.UnchangedEdit = -0.1 }, ""},
		{"unchanged edit paid", func(c *RewardConfig) { c.UnchangedEdit = 0.5 }, "unchanged_edit 0.5: must be a number in [-1, 0] (a cost; a positive value would pay for edits that do nothing)"},
		{"unchanged edit NaN", func(c *RewardConfig) { c.UnchangedEdit = math.NaN() }, "unchanged_edit NaN: must be a number in [-1, 0] (a cost; a positive value would pay for edits that do nothing)"},
	} {
		cfg := DefaultRewardConfig()
		tc.edit(&cfg)
		got := ""
		if err := cfg.Validate(); err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("%s: got %q want %q", tc.name, got, tc.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // the whole message; "" for valid
	}{
		{"default", func(*Config) {}, ""},
		{"no observation limit", func(c *Config) { c.ObservationChars = 0 }, ""},
		{"max_steps", func(c *Config) { c.MaxSteps = -1 }, "max_steps -1: must be positive"},
		{"max_time", func(c *Config) { c.MaxTime = -time.Minute }, "max_time -1m0s: must be positive"},
		{"observation_chars", func(c *Config) { c.ObservationChars = -1 }, "observation_chars -1: must not be negative (0: no limit)"},
		{"memory_bytes", func(c *Config) { c.MemoryBytes = -1 }, "memory_bytes -1: must be positive (bytes: 4294967296 is 4 GiB)"},
		{"max_procs", func(c *Config) { c.MaxProcs = 0 }, "max_procs 0: must be positive"},
		{"max_output_bytes", func(c *Config) { c.MaxOutputBytes = -5 }, "max_output_bytes -5: must be positive"},
		{"max_file_bytes", func(c *Config) { c.MaxFileBytes = 0 }, "max_file_bytes 0: must be positive (bytes: 2147483648 is 2 GiB)"},
		{"workspace_bytes", func(c *Config) { c.WorkspaceBytes = -1 }, "workspace_bytes -1: must be positive (bytes: 1073741824 is 1 GiB)"},
		{"workspace_files", func(c *Config) { c.WorkspaceFiles = 0 }, "workspace_files 0: must be positive"},
		{"grade_timeout", func(c *Config) { c.GradeTimeout = 0 }, "grade_timeout 0s: must be positive"},
		{"reward", func(c *Config) { c.Reward.Squash = "x" }, `reward.squash "x": want clip, tanh or none`},
	} {
		cfg := DefaultConfig()
		tc.edit(&cfg)
		got := ""
		if err := cfg.Validate(); err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("%s: got %q want %q", tc.name, got, tc.want)
		}
	}
}

// TestAcceptedIsWhatTheFormatTermSpares: the valid-action rate the
// evaluation reports counts exactly the outcomes the reward's format term
// does not punish, so that "valid" and "no format penalty" never disagree.
func TestAcceptedIsWhatTheFormatTermSpares(t *testing.T) {
	for _, o := range Outcomes() {
		r := ComputeReward(DefaultRewardConfig(), RewardInput{Outcome: o, Executed: true, Edited: true, Direction: schemas.HigherIsBetter, MInit: 0.5, MBest: 1})
		punished := false
		for _, term := range r.Terms {
			punished = punished || (term.Name == TermFormat && term.Value < 0)
		}
		if Accepted(o) == punished {
			t.Errorf("outcome %s: Accepted %v, format term punishes it %v", o, Accepted(o), punished)
		}
	}
	if Accepted(OutcomeInvalidEdit) {
		t.Error("an edit the editor could not carry out counts as a valid action")
	}
}
