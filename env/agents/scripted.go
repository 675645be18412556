package agents

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/internal/llm"
)

// Scripted is the built-in expert of the embedded default. It works like a
// careful engineer: it looks around (lists, inspects, sometimes reads a
// file), runs the baseline, then applies the plan's ideas one at a time
// through Edit Script (AI), keeps an edit when the hidden-test score
// improves and otherwise undoes it and runs the restored script (so that
// the better submission stands), and ends with Final Answer. Its
// choices are random (seeded): whether and how it explores, and an
// honest share of slips — a malformed
// answer, a misspelled file, an out-of-range inspection — that it then
// recovers from, so the policy also learns what goes wrong.
type Scripted struct {
	// SlipRate is the chance of a slip at each step (default 0.06).
	SlipRate float64
}

// Name implements Factory.
func (Scripted) Name() string { return "scripted" }

// Episode implements Factory.
func (s Scripted) Episode(plan []string, seed int64) Agent {
	rate := s.SlipRate
	if rate == 0 {
		rate = 0.06
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	a := &scriptedAgent{rng: rng, plan: plan, slip: rate}
	// The opening: some engineers look around first, some run at once.
	if rng.Float64() < 0.75 {
		a.queue = append(a.queue, a.listFiles)
	}
	if rng.Float64() < 0.5 {
		a.queue = append(a.queue, a.inspectTop)
	}
	if rng.Float64() < 0.25 {
		a.queue = append(a.queue, a.understand)
	}
	if rng.Float64() < 0.8 {
		a.queue = append(a.queue, a.runBaseline)
	}
	return a
}

// ScriptedEditSteps is the fewest steps left in which the scripted expert
// starts an edit: an edit cycle may take four (edit, run, undo, run
// again) and the Final Answer one more, and the expert leaves no worse
// submission standing. Under a step limit below it the expert never
// edits (it looks around, runs the baseline and stops); its opening
// (list, inspect, read, run the baseline: up to four steps) comes first,
// so a limit of 8 lets most of its episodes edit at least once.
const ScriptedEditSteps = 5

type scriptedAgent struct {
	rng   *rand.Rand
	plan  []string
	slip  float64
	queue []func(Observation) env.Action
	next  int // next plan idea
	// What the last action was for, to read its result.
	pending  string // "edit", "run-edit", "undo", "run-restored"
	idea     string
	kept     []string
	dropped  []string
	lastSlip bool
	// bestVal is the VAL_METRIC of the standing script: what the expert
	// judges an edit by when the environment shows no hidden-test score
	// (feedback none). Nil before a run printed one; the first edit run
	// without a baseline run before it is then kept.
	bestVal *float64
}

func (a *scriptedAgent) Act(ctx context.Context, obs Observation) (string, llm.Usage, error) {
	act := a.decide(obs)
	// Slips never come first or last: the expert always gets going and
	// always submits its Final Answer.
	if !a.lastSlip && obs.State.Step > 0 && obs.State.MaxSteps-obs.State.Step > 1 && a.rng.Float64() < a.slip {
		a.lastSlip = true
		return a.slipText(act), llm.Usage{}, nil
	}
	a.lastSlip = false
	return env.Render(act), llm.Usage{}, nil
}

// decide picks the next action from the last result and the plan.
func (a *scriptedAgent) decide(obs Observation) env.Action {
	st := obs.State
	left := st.MaxSteps - st.Step
	if r := obs.Last; r != nil && a.pending == "" && a.bestVal == nil && r.Outcome == env.OutcomeSuccess && r.ValMetric != nil {
		a.bestVal = r.ValMetric // the baseline run
	}
	if obs.Last != nil && obs.Last.Outcome != env.OutcomeFormatError && obs.Last.Outcome != env.OutcomeInvalidAction {
		if act, ok := a.followUp(obs); ok && left > 1 {
			return act
		}
	}
	if obs.Last != nil && (obs.Last.Outcome == env.OutcomeFormatError || obs.Last.Outcome == env.OutcomeInvalidAction) && a.pending != "" && left > 1 {
		// Retry what the slip was meant to do.
		if act, ok := a.followUp(obs); ok {
			return act
		}
	}
	if len(a.queue) > 0 && left > 1 {
		f := a.queue[0]
		a.queue = a.queue[1:]
		return f(obs)
	}
	// An edit cycle may take four steps (edit, run, undo, run again) and
	// the Final Answer one more: start one only when they fit, so that no
	// worse submission is left standing.
	if a.next < len(a.plan) && left >= ScriptedEditSteps {
		a.idea = a.plan[a.next]
		a.next++
		a.pending = "edit"
		return env.Action{
			Reflection: a.reflect(obs),
			Thought:    fmt.Sprintf("Next idea from the plan: %s.", LowerFirst(a.idea)),
			Name:       env.EditScriptAI, ScriptName: "train.py", EditInstruction: a.idea, SaveName: "train.py",
		}
	}
	return a.finish(obs)
}

// followUp continues a pending edit cycle: run after an edit, judge after
// a run, re-run after an undo.
func (a *scriptedAgent) followUp(obs Observation) (env.Action, bool) {
	r := obs.Last
	switch a.pending {
	case "edit":
		if r.Action == nil || r.Action.Name != env.EditScriptAI {
			// A slip happened instead of the edit: redo it.
			return env.Action{Reflection: "My last answer did not do what I meant.", Thought: "Apply the idea again: " + LowerFirst(a.idea) + ".",
				Name: env.EditScriptAI, ScriptName: "train.py", EditInstruction: a.idea, SaveName: "train.py"}, true
		}
		if r.Outcome != env.OutcomeSuccess {
			a.pending = ""
			a.dropped = append(a.dropped, a.idea)
			return env.Action{}, false
		}
		a.pending = "run-edit"
		if a.rng.Float64() < 0.15 && obs.State.MaxSteps-obs.State.Step >= ScriptedEditSteps {
			// Check the edit first, then run (when the cycle still fits).
			a.queue = append([]func(Observation) env.Action{a.runEdit}, a.queue...)
			return a.inspectModel(obs), true
		}
		return a.runEdit(obs), true
	case "run-edit":
		if r.Action == nil || r.Action.Name != env.ExecuteScript || r.Outcome == env.OutcomeInvalidAction {
			if len(a.queue) > 0 {
				return env.Action{}, false // the queued run comes next
			}
			return a.runEdit(obs), true // a slip came instead of the run
		}
		a.pending = ""
		keep := r.MetricAfter != nil && improved(obs.State.Direction, *r.MetricAfter, r.BestBefore, obs.State.MInit)
		if obs.State.Hidden { // no hidden-test score: judge by the validation metric
			keep = r.Outcome == env.OutcomeSuccess && r.ValMetric != nil && (a.bestVal == nil || better(obs.State.Direction, *r.ValMetric, *a.bestVal))
		}
		if keep {
			if r.ValMetric != nil {
				a.bestVal = r.ValMetric
			}
			a.kept = append(a.kept, a.idea)
			return env.Action{}, false
		}
		a.dropped = append(a.dropped, a.idea)
		a.pending = "undo"
		return env.Action{
			Reflection: a.reflect(obs),
			Thought:    "The idea did not help; undo the edit to return to the better script.",
			Name:       env.UndoEditScript, ScriptName: "train.py",
		}, true
	case "undo":
		if r.Action == nil || r.Action.Name != env.UndoEditScript {
			return env.Action{Reflection: "My last answer did not do what I meant.", Thought: "Undo the unhelpful edit.", Name: env.UndoEditScript, ScriptName: "train.py"}, true
		}
		// Run the restored script: until it runs, the submission standing
		// is the worse one the undone edit produced.
		a.pending = "run-restored"
		return env.Action{Reflection: "The edit was undone.", Thought: "Run the restored script so that its submission stands again.", Name: env.ExecuteScript, ScriptName: "train.py"}, true
	case "run-restored":
		if r.Action == nil || r.Action.Name != env.ExecuteScript || r.Outcome == env.OutcomeInvalidAction {
			return env.Action{Reflection: "My last answer did not do what I meant.", Thought: "Run the restored script so that its submission stands again.", Name: env.ExecuteScript, ScriptName: "train.py"}, true
		}
		a.pending = ""
	}
	return env.Action{}, false
}

func improved(direction string, got float64, best *float64, mInit float64) bool {
	ref := mInit
	if best != nil {
		ref = *best
	}
	return better(direction, got, ref)
}

func (a *scriptedAgent) listFiles(Observation) env.Action {
	return env.Action{Reflection: "Nothing has been done yet.", Thought: "List the workspace to see the data and the script.", Name: env.ListFiles, DirPath: "."}
}

func (a *scriptedAgent) inspectTop(obs Observation) env.Action {
	end := 30 + a.rng.IntN(50)
	return env.Action{Reflection: a.reflect(obs), Thought: "Read the start of train.py to see how data is loaded and which model is used.", Name: env.InspectScriptLines, ScriptName: "train.py", StartLine: 1, EndLine: end}
}

func (a *scriptedAgent) inspectModel(obs Observation) env.Action {
	lines := strings.Split(obs.State.Script, "\n")
	start, end := 1, len(lines)
	for i, l := range lines {
		if strings.TrimSpace(l) == "# === model ===" {
			start = i + 1
		}
		if strings.TrimSpace(l) == "# === end training ===" {
			end = i + 1
		}
	}
	if end < start {
		end = start
	}
	if end-start > 99 {
		end = start + 99
	}
	return env.Action{Reflection: a.reflect(obs), Thought: "Check that the edit looks right before running it.", Name: env.InspectScriptLines, ScriptName: "train.py", StartLine: start, EndLine: end}
}

func (a *scriptedAgent) understand(obs Observation) env.Action {
	return env.Action{Reflection: a.reflect(obs), Thought: "Understand the training script before changing it.", Name: env.UnderstandFile, FileName: "train.py",
		ThingsToLookFor: "how the data is preprocessed, which model is trained and how the metric is computed"}
}

func (a *scriptedAgent) runBaseline(obs Observation) env.Action {
	return env.Action{Reflection: a.reflect(obs), Thought: "Run the initial script to get a baseline score.", Name: env.ExecuteScript, ScriptName: "train.py"}
}

func (a *scriptedAgent) runEdit(obs Observation) env.Action {
	return env.Action{Reflection: a.reflect(obs), Thought: "Run the edited script to measure the idea.", Name: env.ExecuteScript, ScriptName: "train.py"}
}

func (a *scriptedAgent) finish(obs Observation) env.Action {
	var sb strings.Builder
	best := obs.State.Current
	if obs.State.Best != nil {
		best = *obs.State.Best
	}
	switch {
	case obs.State.Hidden && a.bestVal != nil:
		fmt.Fprintf(&sb, "Final validation score %.4f.", *a.bestVal)
	case obs.State.Hidden:
		sb.WriteString("Final answer.")
	default:
		fmt.Fprintf(&sb, "Final score %.4f (initial %.4f).", best, obs.State.MInit)
	}
	if len(a.kept) > 0 {
		fmt.Fprintf(&sb, " Kept: %s.", strings.Join(a.kept, "; "))
	}
	if len(a.dropped) > 0 {
		fmt.Fprintf(&sb, " Tried without gain: %s.", strings.Join(a.dropped, "; "))
	}
	return env.Action{Reflection: a.reflect(obs), Thought: "The plan is done; submit the best script.", Name: env.FinalAnswer, Answer: sb.String()}
}

// reflect says what the last observation means, in one sentence.
func (a *scriptedAgent) reflect(obs Observation) string {
	r := obs.Last
	if r == nil {
		return "Nothing has been done yet."
	}
	switch {
	case r.MetricAfter != nil:
		prev := obs.State.MInit
		if r.BestBefore != nil {
			prev = *r.BestBefore
		}
		verb := "did not improve on"
		if better(obs.State.Direction, *r.MetricAfter, prev) {
			verb = "improved on"
		}
		return fmt.Sprintf("The script scored %.4f, which %s the best so far (%.4f).", *r.MetricAfter, verb, prev)
	case r.Outcome == env.OutcomeSuccess && r.Action != nil && r.Action.Name == env.EditScriptAI:
		return "The edit was applied; the diff looks as intended."
	case r.Outcome == env.OutcomeSuccess:
		return "The observation shows what I needed."
	case r.Outcome == env.OutcomeInvalidEdit:
		return "The editor could not carry out that idea on this script, so I skip it."
	case r.Outcome == env.OutcomeFormatError:
		return "My last answer was malformed; I must follow the answer format."
	case r.Outcome == env.OutcomeInvalidAction:
		return "That action was refused: " + firstSentence(r.Detail)
	default:
		return fmt.Sprintf("The last run ended with %s.", strings.ReplaceAll(string(r.Outcome), "_", " "))
	}
}

// slipText returns a flawed version of act: the kinds of mistakes real
// agents make.
func (a *scriptedAgent) slipText(act env.Action) string {
	switch a.rng.IntN(4) {
	case 0: // missing Action Input
		return fmt.Sprintf("Reflection: %s\nThought: %s\nAction: %s\n", act.Reflection, act.Thought, act.Name)
	case 1: // broken JSON
		t := env.Render(act)
		return strings.Replace(t, "}", "", 1)
	case 2: // a misspelled file
		return env.Render(env.Action{Reflection: act.Reflection, Thought: act.Thought, Name: env.ExecuteScript, ScriptName: "trian.py"})
	default: // an out-of-range inspection
		return env.Render(env.Action{Reflection: act.Reflection, Thought: "Look at the end of the script.", Name: env.InspectScriptLines, ScriptName: "train.py", StartLine: 900, EndLine: 950})
	}
}

// LowerFirst lower-cases an idea's first letter, as the expert writes
// it inside a thought ("Next idea from the plan: use ...").
func LowerFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}

func firstSentence(s string) string {
	if i := strings.IndexAny(s, ".\n"); i >= 0 {
		return s[:i+1]
	}
	return s + "."
}
