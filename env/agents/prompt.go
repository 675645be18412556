// The prompt renderer: an agent's state as the text it reads before
// acting. One renderer serves every place a prompt is made — the experts
// during rollouts, the dataset stage, the trainer and evaluation — so
// training and acting see identical prompts.
//
// Two renderings of the same [State]:
//   - [Full]: the MLAgentBench-style prompt (research problem, tools, plan,
//     history of actions and observations, answer format) for large LLMs
//     and the exports.
//   - [Compact]: a short prompt that fits the small CPU policy's context:
//     task summary, scores, plan, the script's editable sections, and the
//     last steps' outcomes.
//
// Both fit a token budget measured by a [Counter], dropping the oldest
// history first and then shortening the script.

package agents

import (
	"fmt"
	"math"
	"strings"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/internal/textutil"
)

// Counter counts tokens.
type Counter func(string) int

// ApproxCounter estimates tokens as one per 4 bytes; use the real
// tokenizer's count where it is loaded.
func ApproxCounter(s string) int { return (len(s) + 3) / 4 }

// Step is one past step as the prompt shows it.
type Step struct {
	ActionName  string
	ActionText  string
	Observation string
	Outcome     string
	MetricAfter *float64
	Reward      float64
}

// State is everything a prompt shows.
type State struct {
	TaskID      string
	Title       string
	Description string
	Metric      string
	Direction   string
	MInit       float64
	Current     float64
	Best        *float64
	// Plan is the initial action plan: the ideas to try, in order.
	Plan   []string
	Script string // the current train.py
	// Files lists the workspace's files, Modality and TaskType the task's
	// kind: not shown in the compact prompt, but what a constrained
	// decoder enumerates (files to name, catalog ideas to choose).
	Files []string
	// Undoable are the scripts with an edit to undo (nil: unknown).
	Undoable []string
	Modality string
	TaskType string
	History  []Step
	Step     int // steps taken so far
	MaxSteps int
	// Hidden: the environment tells the agent nothing of its hidden-test
	// scores (env feedback none): MInit, Current, Best, the history's
	// scores and rewards are left out of every rendering.
	Hidden bool
	// NoEdit and NoUndo say that an edit, or an undo, taken now cannot
	// change the score the episode ends with (its last step, where the
	// environment does not run the script after it: env.Env.ScoreFixed,
	// which reads the environment's own step limit, not MaxSteps above).
	// The action grammar does not offer them then; the prompt does not
	// show them.
	NoEdit, NoUndo bool
	// Format is the compact prompt's format (0: CompactFormat): what
	// rendered the prompts a policy learnt from renders them for it later
	// (Options.Format, recorded in a rollout's Prompts).
	Format int
}

// Compact prompt formats. Format 1 marked a current score "(worse than
// the best)" against the episode's best graded run only, so a first run
// that scored below the initial script went unmarked, although the
// expert undoes it (run 17 found 91 of the 166 undos of its SFT data in
// such states). Format 2 compares with the better of the initial score
// and the best run: the best so far as the expert, the reward's final
// term and the Final Answer read it. Rollouts recorded no format before
// format 2 (Prompts.Format 0), and they are rendered in format 1.
const (
	CompactFormat1 = 1
	CompactFormat  = 2 // the current format, what new rollouts record
)

// StateOf is the state an agent acting in e sees: FromEnv with the
// workspace's train.py (a link or FIFO a run left shows as no script).
// Episodes, episode-wise PPO and step-wise PPO's action grammar all read
// a state through it, so that they offer the same actions.
func StateOf(e *env.Env, plan []string, maxSteps int) State {
	script, _ := e.ReadFile("train.py", maxPromptScriptBytes)
	return FromEnv(e, plan, maxSteps, string(script))
}

// FromEnv reads the state of a live environment. plan is the episode's
// action plan (empty when there is none).
func FromEnv(e *env.Env, plan []string, maxSteps int, script string) State {
	spec := e.Spec()
	s := State{
		TaskID: spec.TaskID, Title: spec.Title, Description: spec.Description,
		Metric: spec.Metric, Direction: spec.Direction, MInit: spec.MInit,
		Current: e.Current(), Plan: plan, Script: script, Step: e.Steps(), MaxSteps: maxSteps,
		Files: e.Files(), Undoable: e.Undoable(), Modality: spec.Modality, TaskType: spec.TaskType,
	}
	s.NoEdit, s.NoUndo = e.ScoreFixed()
	if b, ok := e.Best(); ok {
		s.Best = &b
	}
	for _, h := range e.History() {
		s.History = append(s.History, Step{ActionName: h.ActionName, ActionText: h.ActionText, Observation: h.Observation,
			Outcome: string(h.Outcome), MetricAfter: h.MetricAfter, Reward: h.Reward})
	}
	if e.Feedback() == env.FeedbackNone {
		s = s.hideScores()
	}
	return s
}

// hideScores blanks every hidden-test score of s and its history's
// rewards (which are differences of those scores).
func (s State) hideScores() State {
	s.Hidden = true
	s.MInit, s.Current, s.Best = math.NaN(), math.NaN(), nil
	h := make([]Step, len(s.History))
	for i, st := range s.History {
		st.MetricAfter, st.Reward = nil, 0
		h[i] = st
	}
	s.History = h
	return s
}

func direction(d string) string {
	if d == "lower" {
		return "lower is better"
	}
	return "higher is better"
}

func score(v *float64) string {
	if v == nil {
		return "none yet"
	}
	return fmt.Sprintf("%.4f", *v)
}

// worse marks a current score that is worse than the best so far, in
// the metric's direction: the comparison a small policy cannot make from
// two numbers, and the one that decides whether to undo an edit (and run
// the restored script, so that the better submission stands).
func worse(s State) string {
	if s.Best == nil {
		return ""
	}
	best := *s.Best
	if s.Format != CompactFormat1 && better(s.Direction, s.MInit, best) {
		best = s.MInit
	}
	if better(s.Direction, best, s.Current) {
		return " (worse than the best)"
	}
	return ""
}

// Compact renders the small policy's prompt within budget tokens.
func Compact(s State, budget int, count Counter) string {
	var head strings.Builder
	fmt.Fprintf(&head, "Task: %s (%s). Metric: %s, %s.\n", s.Title, s.TaskID, s.Metric, direction(s.Direction))
	if s.Hidden {
		fmt.Fprintf(&head, "Score: not shown (only whether a submission is valid). Step %d of %d.\n", s.Step+1, s.MaxSteps)
	} else {
		fmt.Fprintf(&head, "Score: initial %.4f, current %.4f%s, best %s. Step %d of %d.\n", s.MInit, s.Current, worse(s), score(s.Best), s.Step+1, s.MaxSteps)
	}
	if len(s.Plan) > 0 {
		head.WriteString("Plan:\n")
		for i, p := range s.Plan {
			fmt.Fprintf(&head, "%d. %s\n", i+1, p)
		}
	}
	hist := compactHistory(s.History, s.Hidden)
	script := editableSections(s.Script)
	return fit(head.String(), script, hist, compactTail, budget, count, compactScriptTitle, compactHistTitle)
}

// The parts of a compact prompt that RefitCompact recognises.
const (
	compactScriptTitle = "Script train.py (editable sections):\n"
	compactHistTitle   = "Recent steps:\n"
	compactTail        = "Answer with Reflection, Thought, Action, Action Input.\n"
	moreLinesFormat    = "... (%d more lines)\n"
	earlierFormat      = "(%d earlier steps not shown)\n"
)

// RefitCompact shortens a rendered compact prompt until fits accepts it,
// by the one rule every consumer of compact prompts shares (the policy's
// SFT, PPO and evaluation): the oldest history lines go first (the
// "(N earlier steps not shown)" marker counts them), then the script's
// last lines (the "... (N more lines)" marker counts them); the task
// header, the scores, the plan and the answer instruction are always
// kept. It returns the shortest such prompt and false when even that does
// not fit, and the prompt unchanged when it already fits. Text that is not
// a compact prompt is returned unchanged (with fits' verdict).
func RefitCompact(prompt string, fits func(string) bool) (string, bool) {
	if fits(prompt) {
		return prompt, true
	}
	c, ok := parseCompact(prompt)
	if !ok {
		return prompt, false
	}
	n := len(c.hist) + len(c.script)
	// The smallest number of drops that fits (fits is monotone in it).
	lo, hi := 1, n
	if !fits(c.render(n)) {
		return c.render(n), false
	}
	for lo < hi {
		mid := (lo + hi) / 2
		if fits(c.render(mid)) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return c.render(lo), true
}

// compactParts is a rendered compact prompt cut into what RefitCompact
// may drop and what it keeps.
type compactParts struct {
	head, tail     string
	script, hist   []string // lines, each with its newline
	moreLines      int      // script lines already cut
	earlier        int      // history steps already cut
	hasScriptTitle bool
	hasHistTitle   bool
}

func parseCompact(p string) (compactParts, bool) {
	var c compactParts
	if !strings.HasSuffix(p, compactTail) {
		return c, false
	}
	body := strings.TrimSuffix(p, compactTail)
	c.tail = compactTail
	lines := strings.SplitAfter(body, "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	i := 0
	var head strings.Builder
	for ; i < len(lines) && lines[i] != compactScriptTitle && lines[i] != compactHistTitle; i++ {
		head.WriteString(lines[i])
	}
	c.head = head.String()
	if i < len(lines) && lines[i] == compactScriptTitle {
		c.hasScriptTitle = true
		for i++; i < len(lines) && lines[i] != compactHistTitle; i++ {
			var n int
			if _, err := fmt.Sscanf(lines[i], moreLinesFormat, &n); err == nil && strings.HasPrefix(lines[i], "... (") {
				c.moreLines = n
				continue
			}
			c.script = append(c.script, lines[i])
		}
	}
	if i < len(lines) && lines[i] == compactHistTitle {
		c.hasHistTitle = true
		for i++; i < len(lines); i++ {
			var n int
			if _, err := fmt.Sscanf(lines[i], earlierFormat, &n); err == nil && strings.HasPrefix(lines[i], "(") {
				c.earlier = n
				continue
			}
			c.hist = append(c.hist, lines[i])
		}
	}
	return c, true
}

// render writes the prompt with the first drops removed: history lines
// oldest first, then script lines from the end.
func (c compactParts) render(drops int) string {
	dh := min(drops, len(c.hist))
	ds := min(drops-dh, len(c.script))
	var b strings.Builder
	b.WriteString(c.head)
	if c.hasScriptTitle {
		b.WriteString(compactScriptTitle)
		for _, l := range c.script[:len(c.script)-ds] {
			b.WriteString(l)
		}
		if more := c.moreLines + ds; more > 0 {
			fmt.Fprintf(&b, moreLinesFormat, more)
		}
	}
	if c.hasHistTitle {
		b.WriteString(compactHistTitle)
		if earlier := c.earlier + dh; earlier > 0 {
			fmt.Fprintf(&b, earlierFormat, earlier)
		}
		for _, l := range c.hist[dh:] {
			b.WriteString(l)
		}
	}
	b.WriteString(c.tail)
	return b.String()
}

// compactHistory renders one line per step.
func compactHistory(h []Step, hidden bool) []string {
	out := make([]string, len(h))
	for i, st := range h {
		name := st.ActionName
		if name == "" {
			name = "(unparsed answer)"
		}
		line := fmt.Sprintf("%d. %s -> %s", i+1, name, st.Outcome)
		if st.MetricAfter != nil {
			line += fmt.Sprintf(", score %.4f", *st.MetricAfter)
		}
		if !hidden {
			line += fmt.Sprintf(", reward %.2f", st.Reward)
		}
		if obs := firstLine(st.Observation); obs != "" && st.MetricAfter == nil {
			line += ": " + textutil.Clip(obs, 100)
		}
		out[i] = line + "\n"
	}
	return out
}

// editableSections keeps the data, model and training sections of a
// sectioned script (the whole script when it has no sections).
func editableSections(script string) []string {
	if script == "" {
		return nil
	}
	lines := strings.SplitAfter(script, "\n")
	if !strings.Contains(script, "# === model ===") {
		return lines
	}
	var out []string
	in := false
	for _, l := range lines {
		t := strings.TrimSpace(l)
		switch {
		case t == "# === data ===" || t == "# === model ===" || t == "# === training ===":
			in = true
		case strings.HasPrefix(t, "# === end "):
			if in {
				out = append(out, l)
			}
			in = false
			continue
		}
		if in {
			out = append(out, l)
		}
	}
	return out
}

// fit assembles head + script + history + tail, keeping the newest history
// entries and as many script lines as the budget allows (history first:
// the last outcomes matter more than the script's tail).
func fit(head string, script, hist []string, tail string, budget int, count Counter, scriptTitle, histTitle string) string {
	used := count(head) + count(tail)
	// Newest history entries first, within half the remaining budget.
	keepHist := 0
	histBudget := (budget - used) / 2
	for i := len(hist) - 1; i >= 0; i-- {
		c := count(hist[i])
		if histBudget-c < 0 {
			break
		}
		histBudget -= c
		keepHist++
	}
	histText := ""
	if keepHist > 0 {
		histText = histTitle
		if keepHist < len(hist) {
			histText += fmt.Sprintf(earlierFormat, len(hist)-keepHist)
		}
		histText += strings.Join(hist[len(hist)-keepHist:], "")
	}
	used += count(histText)
	var sb strings.Builder
	if len(script) > 0 {
		sb.WriteString(scriptTitle)
		room := budget - used - count(scriptTitle)
		for i, l := range script {
			c := count(l)
			if room-c < 0 {
				fmt.Fprintf(&sb, moreLinesFormat, len(script)-i)
				break
			}
			room -= c
			sb.WriteString(l)
		}
	}
	return head + sb.String() + histText + tail
}

// Full renders the MLAgentBench-style prompt within budget tokens.
func Full(s State, budget int, count Counter) string {
	var head strings.Builder
	head.WriteString(fullTools)
	fmt.Fprintf(&head, "\nResearch Problem (%s, metric %s, %s):\n%s\n", s.TaskID, s.Metric, direction(s.Direction), strings.TrimSpace(s.Description))
	if s.Hidden {
		fmt.Fprintf(&head, "\nScores on the hidden test set are not shown: after each run you are told only whether submission.csv is a valid submission. You have used %d of %d steps.\n", s.Step, s.MaxSteps)
	} else {
		fmt.Fprintf(&head, "\nThe initial train.py scores %.4f on the hidden test set; the current workspace scores %.4f; best so far %s. You have used %d of %d steps.\n",
			s.MInit, s.Current, score(s.Best), s.Step, s.MaxSteps)
	}
	if len(s.Plan) > 0 {
		head.WriteString("\nInitial plan: try these ideas, one at a time, keeping those that improve the score:\n")
		for i, p := range s.Plan {
			fmt.Fprintf(&head, "%d. %s\n", i+1, p)
		}
	}
	tail := fullFormat
	hist := make([]string, len(s.History))
	for i, st := range s.History {
		hist[i] = fmt.Sprintf("\nStep %d:\n%s\nObservation:\n```\n%s\n```\n", i+1, strings.TrimSpace(st.ActionText), textutil.Clip(strings.TrimSpace(st.Observation), 2000))
	}
	return fit(head.String(), nil, hist, tail, budget, count, "", "\nHere are the actions and observations so far:\n")
}

// The fixed parts of every full prompt: the tool list it starts with and
// the answer format it ends with.
var (
	fullTools  = toolList()
	fullFormat = `
Always respond in this format exactly:
Reflection: What does the observation mean? If there is an error, what caused the error and how to debug?
Thought: What you are currently doing, what actions to perform and why
Action: the action to take, should be one of the names of the tools
Action Input: the input to the action as a valid JSON string
`
)

func toolList() string {
	var b strings.Builder
	b.WriteString("You are a helpful research assistant. You have access to the following tools:\n")
	for _, name := range env.ActionNames() {
		fmt.Fprintf(&b, "- %s: %s\n    Usage: Action: %s; Action Input: {%s}\n", name, toolDoc[name], name, argList(name))
	}
	return b.String()
}

// FullInstructions returns the fixed parts of every [Full] prompt: tools,
// the role and tool list it starts with, and format, the answer format it
// ends with. What lies between is the state (research problem, scores,
// plan, history), so an export can put tools and format in a system
// message and the state alone in the user's.
func FullInstructions() (tools, format string) { return fullTools, fullFormat }

// Tool describes an action as a function for tool-calling trainers: its
// name, what it does, and a JSON Schema of its Action Input.
type Tool struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Parameters  map[string]any `json:"parameters"`
}

// Tools describes every action, in [env.ActionNames] order: the
// descriptions of the full prompt, every argument required (line numbers
// positive integers, other arguments strings).
func Tools() []Tool {
	var out []Tool
	for _, name := range env.ActionNames() {
		props := map[string]any{}
		args := env.ActionArgs(name)
		for _, a := range args {
			p := map[string]any{"type": env.ActionArgType(name, a)}
			if p["type"] == "integer" {
				p["minimum"] = 1
			}
			props[a] = p
		}
		out = append(out, Tool{Name: name, Description: toolDoc[name],
			Parameters: map[string]any{"type": "object", "properties": props, "required": args}})
	}
	return out
}

var toolDoc = map[string]string{
	env.ListFiles:          "Use this to navigate the file system.",
	env.UnderstandFile:     "Use this to read the whole file and understand certain aspects.",
	env.InspectScriptLines: "Use this to inspect specific part of a python script precisely (at most 100 lines).",
	env.EditScriptSegment:  "Replace the lines start..end of a script with the given text.",
	env.EditScriptAI:       "Use this to do a relatively large but cohesive edit over a python script: an editor carries out the instruction and returns the diff.",
	env.ExecuteScript:      "Use this to execute the python script. The script must already exist.",
	env.UndoEditScript:     "Use this to undo the last edit of the python script.",
	env.CopyFile:           "Use this to copy a file to a new location with a new name.",
	env.FinalAnswer:        "Use this to provide the final answer to the current task.",
}

func argList(name string) string {
	args := env.ActionArgs(name)
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = fmt.Sprintf("%q: ...", a)
	}
	return strings.Join(q, ", ")
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// PlanFromCompact returns the plan a compact prompt shows (nil when it
// shows none).
func PlanFromCompact(prompt string) []string {
	_, rest, ok := strings.Cut(prompt, "\nPlan:\n")
	if !ok {
		return nil
	}
	var plan []string
	for _, l := range strings.Split(rest, "\n") {
		n, text, ok := strings.Cut(l, ". ")
		if !ok || n == "" || strings.Trim(n, "0123456789") != "" {
			break
		}
		plan = append(plan, text)
	}
	return plan
}
