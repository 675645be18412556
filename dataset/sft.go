package dataset

// SFT examples: one per kept expert step, prompt = the compact rendering
// the small policy sees, response = the expert's raw answer.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"runtime"
	"sync"

	"github.com/mlerl/mlerl/schemas"
)

// Values of Config.ErrorSteps: which steps whose own outcome is an error
// become SFT examples. A format error (the response did not parse) is
// always dropped: it teaches nothing but the slip.
const (
	// ErrorStepsKeep keeps every parseable step, refused ones included.
	ErrorStepsKeep = "keep"
	// ErrorStepsDropRefused drops steps whose response the environment
	// refused (invalid_action: a wrong path or line range; invalid_edit:
	// an instruction the editor could not carry out). These are the
	// expert's slips: imitating them teaches the slip. Steps whose action
	// was well formed but whose run failed (script_error, timeout, oom,
	// invalid_submission...) stay: the action was right for the state, the
	// failure came from an earlier edit, and the steps that follow show
	// the recovery. The default.
	ErrorStepsDropRefused = "drop-refused"
	// ErrorStepsDrop keeps successful steps only.
	ErrorStepsDrop = "drop"
)

// Outcome names used by the filters (env's outcome classes, as
// stored in the steps dataset).
const (
	outcomeSuccess       = "success"
	outcomeFormatError   = "format_error"
	outcomeInvalidAction = "invalid_action"
	outcomeInvalidEdit   = "invalid_edit"
)

// SFTOptions configure [BuildSFT]. Start from [DefaultSFTOptions].
type SFTOptions struct {
	// ErrorSteps is ErrorStepsKeep, ErrorStepsDropRefused (default) or
	// ErrorStepsDrop.
	ErrorSteps string
	// MaxTokens drops examples whose prompt plus response exceed it
	// (Qwen tokens); 0 keeps every length. Default 1024.
	MaxTokens int
	// HeldOutValidation writes steps of held-out tasks as examples with
	// Split=held-out (the trainer only computes a validation loss on
	// them). Default true; they exist only when the rollout stage rolled
	// out held-out tasks (its default rolls out held-in ones only).
	HeldOutValidation bool
}

// DefaultSFTOptions returns the options of `mlerl dataset`.
func DefaultSFTOptions() SFTOptions {
	return SFTOptions{ErrorSteps: ErrorStepsDropRefused, MaxTokens: 1024, HeldOutValidation: true}
}

// SFTCounts says what [BuildSFT] kept and dropped, and why.
type SFTCounts struct {
	Steps       int `json:"steps"`        // expert steps read
	Kept        int `json:"kept"`         // examples written
	FormatError int `json:"format_error"` // response did not parse
	Refused     int `json:"refused"`      // dropped by the error_steps policy
	Duplicate   int `json:"duplicate"`    // same prompt and response as a kept example
	TooLong     int `json:"too_long"`     // over max_tokens
	HeldOut     int `json:"held_out"`     // held-out task steps dropped (held_out_validation off)
	EmptyPrompt int `json:"empty_prompt"` // no compact or no full prompt recorded
	// Variants counts the plan variants made (among Steps) and skipped.
	Variants VariantCounts `json:"plan_variants"`
}

// Tokens holds the Qwen token counts of one step's compact prompt and
// response.
type Tokens struct{ Prompt, Response int }

// CountTokens counts the compact prompt and response tokens of every step
// with count, on workers goroutines (0: one per core). count must be safe
// for concurrent use (the Qwen tokenizer is).
func CountTokens(steps []schemas.Step, count func(string) int, workers int) []Tokens {
	if workers <= 0 {
		workers = runtime.NumCPU()
	}
	out := make([]Tokens, len(steps))
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i] = Tokens{Prompt: count(steps[i].CompactState), Response: count(steps[i].ActionText)}
			}
		}()
	}
	for i := range steps {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// BuildSFT turns expert steps into SFT examples. steps must be sorted
// (trajectory, step index) so the output is deterministic; tokens[i] are
// the counts of steps[i]; tasks gives each step's split (every step's
// task must be in it). Examples of held-out tasks get Split=held-out.
// The first of several steps with the same prompt and response is kept.
func BuildSFT(steps []schemas.Step, tokens []Tokens, tasks map[string]schemas.Task, opts SFTOptions) ([]schemas.SFTExample, SFTCounts, error) {
	var c SFTCounts
	var out []schemas.SFTExample
	seen := map[[32]byte]bool{}
	for i, s := range steps {
		c.Steps++
		t, ok := tasks[s.TaskID]
		if !ok {
			return nil, c, fmt.Errorf("steps row %d (trajectory %s step %d): task %q is not in the tasks dataset; point --tasks at the version the rollout used", i, s.TrajectoryID, s.StepIndex, s.TaskID)
		}
		switch {
		case s.Outcome == outcomeFormatError || s.ActionName == "":
			c.FormatError++
			continue
		case !keepOutcome(s.Outcome, opts.ErrorSteps):
			c.Refused++
			continue
		case t.Split == schemas.HeldOut && !opts.HeldOutValidation:
			c.HeldOut++
			continue
		case s.CompactState == "" || s.State == "":
			c.EmptyPrompt++
			continue
		}
		if opts.MaxTokens > 0 && tokens[i].Prompt+tokens[i].Response > opts.MaxTokens {
			c.TooLong++
			continue
		}
		key := sha256.Sum256([]byte(s.CompactState + "\x00" + s.ActionText))
		if seen[key] {
			c.Duplicate++
			continue
		}
		seen[key] = true
		out = append(out, schemas.SFTExample{
			ExampleID: exampleID(s), TaskID: s.TaskID, Split: t.Split,
			TrajectoryID: s.TrajectoryID, StepIndex: s.StepIndex,
			Prompt: s.CompactState, FullPrompt: s.State, Response: s.ActionText,
			PromptTokens: int32(tokens[i].Prompt), ResponseTokens: int32(tokens[i].Response),
			Outcome: s.Outcome, Reward: s.Reward,
		})
	}
	c.Kept = len(out)
	return out, c, nil
}

// keepOutcome applies the error_steps policy to a parseable step.
func keepOutcome(outcome, policy string) bool {
	switch policy {
	case ErrorStepsKeep:
		return true
	case ErrorStepsDrop:
		return outcome == outcomeSuccess
	default: // ErrorStepsDropRefused
		return outcome != outcomeInvalidAction && outcome != outcomeInvalidEdit
	}
}

// exampleID names a step's example: its trajectory and step index, which
// are unique in a steps dataset.
func exampleID(s schemas.Step) string {
	return fmt.Sprintf("%s/%02d", s.TrajectoryID, s.StepIndex)
}

// shortHash is a 16-hex-digit digest, for run keys.
func shortHash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}
