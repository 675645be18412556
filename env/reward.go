package env

import (
	"math"

	"github.com/mlerl/mlerl/internal/config"
	"github.com/mlerl/mlerl/schemas"
)

// Reward term names.
const (
	TermFormat      = "format"         // -1: the response did not parse, or the action was refused or an invalid edit
	TermError       = "error"          // -1: the script crashed, was killed, flooded its output or wrote no valid submission
	TermCornerCase  = "corner_case"    // 0: timeout, out of memory, editor failure (not the agent's fault)
	TermImprovement = "improvement"    // squashed (m_new - m_base) / (m_best - m_init), direction-signed (RewardInput.Base)
	TermBinary      = "binary"         // +1 when an edit improved the score, else 0 (the ML-Agent ablation)
	TermScore       = "score"          // the grader's score, sign flipped for lower-is-better (second paper)
	TermMarkers     = "markers"        // +MarkerCredit per instrumentation marker reached by a failed run
	TermNoValid     = "no_valid"       // NoValidPenalty when an execution produced no valid submission
	TermFinal       = "final"          // <= 0: squashed (m_current - m_best_so_far) / scale, direction-signed, for a Final Answer
	TermUnchanged   = "unchanged_edit" // <= 0: the configured cost of an edit that left its file as it was
	TermLimit       = "final_at_limit" // <= 0: the final term, for the step an episode ends on at its step or time limit
)

// Squashing functions for the improvement term.
const (
	SquashClip = "clip" // clip to [-1, 1]
	SquashTanh = "tanh" // tanh, smooth and in (-1, 1)
	SquashNone = "none" // unbounded (for analysis only)
)

// RewardConfig switches each reward term on or off (the papers'
// ablations). Start from [DefaultRewardConfig].
type RewardConfig struct {
	Format      bool    `yaml:"format" help:"-1 for a format error, a refused action or an invalid edit (off: 0)"`
	Error       bool    `yaml:"error" help:"-1 for a script error, kill, output flood or invalid submission (off: 0)"`
	CornerCase  bool    `yaml:"corner_case" help:"timeouts and out-of-memory runs score 0 (off: they count as errors, -1)"`
	Improvement bool    `yaml:"improvement" help:"scaled, squashed improvement for an edit followed by a graded run"`
	Squash      string  `yaml:"squash" help:"improvement squashing: clip (to [-1,1]), tanh or none"`
	Binary      bool    `yaml:"binary" help:"binary performance reward: +1 when an edit improved the score (ablation)"`
	Score       bool    `yaml:"score" help:"add the grader's direction-signed score for a valid submission (second paper)"`
	Markers     bool    `yaml:"markers" help:"partial credit per instrumentation marker reached by a failed run"`
	MarkerValue float64 `yaml:"marker_value" help:"credit per marker reached"`
	NoValid     bool    `yaml:"no_valid" help:"penalty when an execution produces no valid submission (replaces the -1 error term)"`
	NoValidPen  float64 `yaml:"no_valid_penalty" help:"the no-valid-submission penalty"`
	// Final credits a Final Answer with how far the submission it leaves
	// standing is from the best one of the episode: squash(s x (m_current -
	// m_best_so_far) / scale), never positive, so that stopping on a worse
	// submission costs (m_best_so_far: the best graded score, or m_init
	// when that is better or there is none).
	Final bool `yaml:"final_answer" help:"a Final Answer earns the squashed (m_current - m_best_so_far) / scale, <= 0: stopping on a worse submission costs"`
	// UnchangedEdit is the reward of an edit that left its file exactly
	// as it was (the environment says "The edit left <file> unchanged."),
	// such as the same instruction applied again: 0 adds no term.
	UnchangedEdit float64 `yaml:"unchanged_edit" help:"reward of an edit that left its file unchanged, in [-1, 0] (e.g. -0.1; 0: no term): a cost for repeating an edit"`
	// FinalAtLimit gives the step an episode ends on at its step or time
	// limit (no Final Answer) the final term too: the submission left
	// standing is what evaluation scores however the episode ends, so
	// running out of steps on a worse one costs as stopping on it does.
	FinalAtLimit bool `yaml:"final_at_limit" help:"the step an episode ends on at its step or time limit earns the final term too (<= 0: the submission left standing against the episode's best), as a Final Answer would"`
}

// DefaultRewardConfig returns the ML-Agent terms (format -1, error -1,
// corner cases 0, clipped scaled improvement) plus the second paper's
// partial credit (+0.1 per marker reached by a failed run). The -10
// no-valid penalty is configured but off, so that by default every step's
// reward stays within [-1, 1] (a failed run scores -1 + 0.1 per marker).
func DefaultRewardConfig() RewardConfig {
	return RewardConfig{
		Format: true, Error: true, CornerCase: true, Improvement: true, Squash: SquashClip,
		Markers: true, MarkerValue: 0.1, NoValidPen: -10,
	}
}

// Validate checks the squashing name and the values; keys in errors are
// relative ("squash"), nested by the caller ("env.reward.squash").
func (c RewardConfig) Validate() error {
	switch c.Squash {
	case SquashClip, SquashTanh, SquashNone:
	case "":
		if c.Improvement {
			return config.Errorf("squash", c.Squash, "want %s, %s or %s (the improvement term is on)", SquashClip, SquashTanh, SquashNone)
		}
	default:
		return config.Errorf("squash", c.Squash, "want %s, %s or %s", SquashClip, SquashTanh, SquashNone)
	}
	if !(c.MarkerValue >= 0) || math.IsInf(c.MarkerValue, 0) {
		return config.Errorf("marker_value", c.MarkerValue, "must be a number >= 0 (credit per marker reached)")
	}
	if !(c.NoValidPen <= 0) || math.IsInf(c.NoValidPen, 0) {
		return config.Errorf("no_valid_penalty", c.NoValidPen, "must be a number <= 0 (a penalty, such as -10)")
	}
	if !(c.UnchangedEdit >= -1 && c.UnchangedEdit <= 0) {
		return config.Errorf("unchanged_edit", c.UnchangedEdit, "must be a number in [-1, 0] (a cost; a positive value would pay for edits that do nothing)")
	}
	return nil
}

// PartialCreditRewardConfig returns the second paper's reward: a failed
// run scores NoValidPenalty (-10) + 0.1 per marker, a valid run its
// direction-signed score; format errors still cost -1.
func PartialCreditRewardConfig() RewardConfig {
	return RewardConfig{Format: true, Error: true, CornerCase: true, Score: true, Markers: true, MarkerValue: 0.1, NoValid: true, NoValidPen: -10}
}

// RewardInput is what the reward of one step depends on.
type RewardInput struct {
	Outcome Outcome
	// Executed is true for Execute Script steps (the run terms apply).
	Executed bool
	// Edited is true when the workspace changed since the last graded run
	// (only then does a graded run earn the improvement term).
	Edited bool
	// Prev is the score before the step (m_prev); New the grader's score of
	// the run's submission, nil unless the submission was valid.
	Prev float64
	New  *float64
	// Base is the score the improvement is measured from: the score of the
	// last graded run that followed an edit (m_init before any), or of a
	// later unedited re-run that scored better (nil: Prev). An unedited
	// re-run that scores worse moves Prev, the standing submission's
	// score, but not Base.
	Base *float64
	// MInit, MBest and Direction come from the task.
	MInit, MBest float64
	Direction    string
	Markers      int
	// FinalAnswer marks a Final Answer step; Best is the best graded score
	// before it (nil: none), Prev the score of the submission it leaves.
	FinalAnswer bool
	Best        *float64
	// UnchangedEdit marks an accepted edit that left its file as it was.
	UnchangedEdit bool
	// IdleTimeout marks a timeout of a run that waited rather than
	// computed (a script sleeping out its limit): a failed run, not the
	// corner case.
	IdleTimeout bool
}

// Term is one named reward term.
type Term struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
}

// Reward is a step's reward: its enabled terms (in a fixed order) and their sum.
type Reward struct {
	Terms []Term  `json:"terms"`
	Total float64 `json:"total"`
}

// Term returns the value of a named term and whether it is present.
func (r Reward) Term(name string) (float64, bool) {
	for _, t := range r.Terms {
		if t.Name == name {
			return t.Value, true
		}
	}
	return 0, false
}

// Rows returns the terms as rows of the steps dataset.
func (r Reward) Rows() []schemas.RewardTerm {
	out := make([]schemas.RewardTerm, len(r.Terms))
	for i, t := range r.Terms {
		out[i] = schemas.RewardTerm{Name: t.Name, Value: t.Value}
	}
	return out
}

// ComputeReward turns one step's outcome into reward terms:
//
//   - format_error, invalid_action, invalid_edit: format = -1.
//   - a valid non-running action (list, inspect, understand, edit, undo,
//     copy, final answer): no term, total 0.
//   - timeout, oom, editor_error: corner_case = 0 (with CornerCase off,
//     timeout and oom count as errors instead; an idle timeout, a run
//     that slept out its limit, always does).
//   - script_error, killed, output_limit, invalid_submission: error = -1,
//     plus markers = MarkerValue x markers reached; with NoValid on, the
//     error term is replaced by no_valid = NoValidPen.
//   - success (a graded, valid submission): after an edit, improvement =
//     squash(s x (m_new - m_base) / scale), m_base the score of the last
//     graded run after an edit (m_init before any), raised by a better
//     unedited re-run since (Base), where s is +1 for
//     higher-is-better and -1 for lower-is-better metrics, and scale is
//     |m_best - m_init|, or |m_init| when m_best == m_init, or 1 when both
//     are 0; binary = 1 when that improvement is positive; score = s x m_new.
//   - an edit that left its file unchanged (with UnchangedEdit < 0):
//     unchanged_edit = UnchangedEdit.
//   - a Final Answer (with Final on): final = squash(s x (m_prev -
//     m_best_so_far) / scale) <= 0, m_best_so_far the better of m_init and
//     the best graded score.
//
// Disabled terms are absent from Terms. The total is the terms' sum.
func ComputeReward(c RewardConfig, in RewardInput) Reward {
	var r Reward
	add := func(name string, v float64) {
		r.Terms = append(r.Terms, Term{name, v})
		r.Total += v
	}
	sign := directionSign(in.Direction)
	failed := func() {
		if c.NoValid {
			add(TermNoValid, c.NoValidPen)
		} else if c.Error {
			add(TermError, -1)
		}
		if c.Markers {
			add(TermMarkers, c.MarkerValue*float64(in.Markers))
		}
	}
	switch in.Outcome {
	case OutcomeFormatError, OutcomeInvalidAction, OutcomeInvalidEdit:
		if c.Format {
			add(TermFormat, -1)
		}
	case OutcomeTimeout, OutcomeOOM:
		if c.CornerCase && !in.IdleTimeout {
			add(TermCornerCase, 0)
		} else {
			failed()
		}
	case OutcomeEditorError:
		if c.CornerCase {
			add(TermCornerCase, 0)
		}
	case OutcomeScriptError, OutcomeKilled, OutcomeOutputLimit, OutcomeInvalidSubmission:
		failed()
	case OutcomeSuccess:
		if in.UnchangedEdit && c.UnchangedEdit != 0 {
			add(TermUnchanged, c.UnchangedEdit)
		}
		if in.FinalAnswer && c.Final {
			add(TermFinal, standingCost(c, in, in.Prev, in.Best, sign))
		}
		if !in.Executed || in.New == nil {
			break
		}
		from := in.Prev
		if in.Base != nil {
			from = *in.Base
		}
		gain := sign * (*in.New - from) / improvementScale(in.MInit, in.MBest)
		if in.Edited && c.Improvement {
			add(TermImprovement, squash(c.Squash, gain))
		}
		if in.Edited && c.Binary {
			b := 0.0
			if gain > 0 {
				b = 1
			}
			add(TermBinary, b)
		}
		if c.Score {
			add(TermScore, sign**in.New)
		}
	}
	return r
}

// standingCost is the final term: squash(s x (standing - best) / scale)
// <= 0, best the better of m_init and the best graded score.
func standingCost(c RewardConfig, in RewardInput, standing float64, bestGraded *float64, sign float64) float64 {
	best := in.MInit
	if bestGraded != nil && sign*(*bestGraded-best) > 0 {
		best = *bestGraded
	}
	return squash(c.Squash, math.Min(0, sign*(standing-best)/improvementScale(in.MInit, in.MBest)))
}

// LimitTerm is the final_at_limit term of a step that ended its episode
// at the step or time limit, with standing the submission's score after
// it and best the best graded score so far (nil: none); ok is false when
// the term is off.
func LimitTerm(c RewardConfig, in RewardInput, standing float64, best *float64) (Term, bool) {
	if !c.FinalAtLimit {
		return Term{}, false
	}
	return Term{TermLimit, standingCost(c, in, standing, best, directionSign(in.Direction))}, true
}

// directionSign is +1 for higher-is-better metrics and -1 for
// lower-is-better ones: the sign that makes a better score a gain.
func directionSign(direction string) float64 {
	if direction == schemas.LowerIsBetter {
		return -1
	}
	return 1
}

// improvementScale is the denominator of the scaled improvement.
func improvementScale(mInit, mBest float64) float64 {
	if d := math.Abs(mBest - mInit); d > 0 {
		return d
	}
	if a := math.Abs(mInit); a > 0 {
		return a
	}
	return 1
}

func squash(kind string, x float64) float64 {
	switch kind {
	case SquashTanh:
		return math.Tanh(x)
	case SquashNone:
		return x
	default:
		return math.Max(-1, math.Min(1, x))
	}
}
