package evaluate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// Curve is one trainer's metrics, one record per JSON line of its
// metrics.jsonl (numeric fields only), in file order.
type Curve struct {
	Source  string
	Records []map[string]float64
}

// Curves are the training curves shown in the report.
type Curves struct {
	SFT, PPO Curve
}

// ReportInput is everything the report shows.
type ReportInput struct {
	Summary Summary
	// Results, Tasks and Ideas are the datasets (for lineage).
	Results, Tasks, Ideas *datasets.Manifest
	// Sources maps a method to its checkpoint or endpoint.
	Sources map[string]string
	Notes   []string
	PerTask int
	// MaxSteps is the environment's step limit per trajectory.
	MaxSteps int
	Curves   Curves
	// Rows are the results; their answers make transcripts.md.
	Rows []schemas.EvalResult
}

// Report file names.
const (
	ReportFile   = "report.md"
	DeltaPlot    = "delta_r.png"
	SFTPlot      = "training_sft.png"
	PPOPlot      = "training_ppo.png"
	TimePlot     = "time_cost.png"
	ActionsPlot  = "actions.png"
	OutcomesPlot = "outcomes.png"
	// TranscriptsFile shows, step by step, what each method did in its
	// first trajectory of every task.
	TranscriptsFile = "transcripts.md"
)

// WriteReport renders report.md and its plots and writes them to the
// local folder dir, or, when dir is empty, under key in st. It returns
// where report.md is.
func WriteReport(ctx context.Context, st store.Store, dir, key string, in ReportInput) (string, error) {
	files := map[string][]byte{}
	plots := []struct {
		name string
		draw func(ReportInput) ([]byte, error)
	}{{DeltaPlot, plotDelta}, {SFTPlot, plotSFT}, {PPOPlot, plotPPO}, {TimePlot, plotTime}, {ActionsPlot, plotActions}, {OutcomesPlot, plotOutcomes}}
	var drawn []string
	for _, p := range plots {
		b, err := p.draw(in)
		if err != nil {
			return "", fmt.Errorf("plot %s: %w", p.name, err)
		}
		if b != nil { // nil: nothing to draw (no training metrics)
			files[p.name] = b
			drawn = append(drawn, p.name)
		}
	}
	var tr bytes.Buffer
	if writeTranscripts(&tr, in.Rows) {
		files[TranscriptsFile] = tr.Bytes()
	}
	var md bytes.Buffer
	writeMarkdown(&md, in, drawn, files[TranscriptsFile] != nil)
	files[ReportFile] = md.Bytes()
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		for name, b := range files {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				return "", err
			}
		}
		abs, err := filepath.Abs(filepath.Join(dir, ReportFile))
		if err != nil {
			return "", err
		}
		return abs, nil
	}
	for name, b := range files {
		if err := store.WriteAll(ctx, st, key+"/"+name, b, store.CreateOptions{}); err != nil {
			return "", err
		}
	}
	return st.URI(key + "/" + ReportFile), nil
}

func writeMarkdown(w io.Writer, in ReportInput, plots []string, transcripts bool) {
	s := in.Summary
	has := func(name string) bool {
		for _, p := range plots {
			if p == name {
				return true
			}
		}
		return false
	}
	fmt.Fprintf(w, "# Evaluation report\n\n")
	if in.Results != nil {
		fmt.Fprintf(w, "Results: `%s` (%d rows), %s.\n", in.Results.Ref().URI, in.Results.Rows, in.Results.CreatedAt.UTC().Format(time.RFC3339))
	}
	if in.Tasks != nil && in.Ideas != nil {
		fmt.Fprintf(w, "Tasks: `%s`; plans from the kept ideas of `%s`.\n", in.Tasks.Ref().URI, in.Ideas.Ref().URI)
	}
	fmt.Fprintf(w, "Budget: up to %d trajectories per task and method (the table's n), at most %d steps each.\n", in.PerTask, in.MaxSteps)
	fmt.Fprintf(w, "%s\n\n", ScoredOnLine(s.ScoredOn))
	if len(in.Sources) > 0 {
		fmt.Fprintf(w, "| method | source |\n|---|---|\n")
		for _, m := range s.Methods {
			if src, ok := in.Sources[m]; ok {
				fmt.Fprintf(w, "| %s | `%s` |\n", m, src)
			}
		}
		fmt.Fprintln(w)
	}
	for _, n := range in.Notes {
		fmt.Fprintf(w, "- Note: %s\n", n)
	}
	if len(in.Notes) > 0 {
		fmt.Fprintln(w)
	}

	for _, split := range []string{schemas.HeldOut, schemas.HeldIn} {
		var hs []Headline
		for _, h := range s.Headlines {
			if h.Split == split {
				hs = append(hs, h)
			}
		}
		if len(hs) == 0 {
			continue
		}
		fmt.Fprintf(w, "## %s tasks\n\n", split)
		fmt.Fprintf(w, "Mean delta_r over the tasks (95%% interval), mean share of the headroom closed ((final - m_init) / (m_best - m_init), clipped to [-1, 1] per trajectory: bounded per task, where delta_r is not), share of trajectories ending above m_init, share of steps whose action the environment accepted (valid: parsed, not refused, and an edit the editor could carry out), mean steps, time and cost per trajectory.\n\n")
		fmt.Fprintf(w, "| method | tasks | trajectories | delta_r | 95%% CI | headroom closed | improved | valid | steps | time/traj | cost/traj |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, h := range hs {
			fmt.Fprintf(w, "| %s | %d | %d | %s | %s | %s | %.0f%% | %s | %.1f | %.1f s | $%.4f |\n", h.Method, h.Tasks, h.Trajectories,
				pct(h.Delta), ci(h.DeltaCI), room(h.Room, h.RoomCI), 100*h.Improved, share(h.Valid, h.AllSteps), h.MeanSteps, h.MeanWallS, h.MeanCost)
		}
		fmt.Fprintln(w)
		if v := Verdict(s, split); v != "" {
			fmt.Fprintf(w, "%s\n\n", v)
		}
		writeBehaviours(w, s, split)
		writeFeedbackFits(w, s, split)
		fmt.Fprintf(w, "| task | metric | m_init | method | n | avg@n | best@n | delta_r | 95%% CI | valid |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, c := range s.Cells {
			if c.Split != split {
				continue
			}
			fmt.Fprintf(w, "| %s | %s (%s) | %.4g | %s | %d | %.4g | %.4g | %s | %s | %s |\n", c.TaskID, c.Metric, c.Direction, c.MInit,
				c.Method, c.N, c.Avg, c.Best, pct(c.Delta), ci(c.DeltaCI), share(c.Valid, c.AllSteps))
		}
		fmt.Fprintln(w)
	}

	fmt.Fprintf(w, "## Plots\n\n")
	captions := map[string]string{
		DeltaPlot:    "delta_r per task and method with 95% intervals (held-out tasks first; a flat mark is 0 or too small for a bar, n/a an undefined delta_r)",
		SFTPlot:      "SFT: training loss per update and validation loss per epoch",
		PPOPlot:      "PPO: mean reward and losses per update",
		TimePlot:     "time per trajectory, per method, and LLM cost when any method paid for tokens",
		ActionsPlot:  "actions per method (share of steps)",
		OutcomesPlot: "outcome classes per method (share of steps)",
	}
	for _, p := range []string{DeltaPlot, SFTPlot, PPOPlot, TimePlot, ActionsPlot, OutcomesPlot} {
		if has(p) {
			fmt.Fprintf(w, "![%s](%s)\n\n*%s*\n\n", captions[p], p, captions[p])
		} else if p == SFTPlot || p == PPOPlot {
			fmt.Fprintf(w, "- %s: no metrics found.\n\n", captions[p])
		}
	}

	if transcripts {
		fmt.Fprintf(w, "## What the agents did\n\nEvery method's first trajectory of every task, step by step (the answer, and the first line of what the environment said to it): [%s](%s).\n\n", TranscriptsFile, TranscriptsFile)
	}

	fmt.Fprintf(w, "## How the numbers are computed\n\n")
	fmt.Fprintf(w, "- A trajectory's final score is the grader's score (hidden labels) of the submission standing at the end: the last valid graded run, or m_init when the agent never produced one. best_score (the best run during the episode, by the public part's score) is in the dataset but not used here.\n")
	fmt.Fprintf(w, "- Every task's hidden answers have a public and a private part (private/parts.csv, the rule in its task.yaml). During an episode the agent is told only the public part's scores and rewards use only them; every score, delta_r, m_init and m_best above is the private part's (the public part's are in the dataset beside them). Public minus private is the same statistic on both parts, each against the initial script's score on that part.\n")
	fmt.Fprintf(w, "- avg@n is the mean of the n final scores, best@n the best of them; delta_r = beta (avg@n - m_init) / m_init with beta = -1 for lower-is-better metrics.\n")
	fmt.Fprintf(w, "- Intervals: Student t over the n trajectories of a task; per method, the mean of the tasks' delta_r with their standard errors combined (tasks treated as fixed).\n")
	fmt.Fprintf(w, "- initial is the untouched initial script: its delta_r is 0 by construction (one row per task).\n")
	fmt.Fprintf(w, "- Trajectory i of a task has the same seed and initial plan (sampled from the task's kept ideas, which are generated without labels) for every method.\n")
}

// ScoredOnLine says which hidden answers a summary's scores are on.
func ScoredOnLine(scored string) string {
	switch scored {
	case schemas.ScoredPrivate:
		return "Scores: the private part of each task's hidden answers, whose scores no agent saw (the agents were told the public part's)."
	case schemas.ScoredAll:
		return "Scores: all of each task's hidden answers, whose scores the agents were told during the episodes (tasks ingested without a public and a private part; re-ingest them to report private scores)."
	}
	return "Scores: some rows on the private part of the hidden answers, others on all of them (tasks ingested before and after the parts): do not compare them."
}

// writeFeedbackFits writes the public minus private table of a split.
func writeFeedbackFits(w io.Writer, s Summary, split string) {
	var fs []FeedbackFit
	for _, f := range s.FeedbackFits {
		if f.Split == split {
			fs = append(fs, f)
		}
	}
	if len(fs) == 0 {
		return
	}
	fmt.Fprintf(w, "Public minus private: the same statistic on the public part of the hidden answers (the scores the agent was told) minus the private part's (reported above), per task averaged over its trajectories, then over the tasks (95%% interval over tasks). Above 0, the agent's choices fitted the feedback it saw.\n\n")
	fmt.Fprintf(w, "| method | tasks | headroom closed, public - private | delta_r, public - private |\n|---|---|---|---|\n")
	for _, f := range fs {
		fmt.Fprintf(w, "| %s | %d | %s | %s |\n", f.Method, f.Tasks, room(f.Room, f.RoomCI), room(f.Delta, f.DeltaCI))
	}
	fmt.Fprintln(w)
}

// Verdict says, in one sentence, whether RL beat SFT on a split, and
// whether the difference is within the intervals.
func Verdict(s Summary, split string) string {
	var sft, ppo *Headline
	for i := range s.Headlines {
		h := &s.Headlines[i]
		if h.Split != split {
			continue
		}
		switch h.Method {
		case MethodSFT:
			sft = h
		case MethodPPO:
			ppo = h
		}
	}
	if sft == nil || ppo == nil || math.IsNaN(sft.Delta) || math.IsNaN(ppo.Delta) {
		return ""
	}
	if s.PPOIsSFT != "" {
		return fmt.Sprintf("On %s tasks, RL does not beat SFT: the PPO run kept the SFT policy (%s), so SFT+PPO's delta_r %s vs SFT's %s is two evaluations of the same weights.", split, s.PPOIsSFT, pct(ppo.Delta), pct(sft.Delta))
	}
	overlap := math.Abs(ppo.Delta-sft.Delta) <= ppo.DeltaCI+sft.DeltaCI
	qual := ""
	if overlap {
		qual = " (within the 95% intervals: not a clear difference)"
	}
	switch {
	case ppo.Delta > sft.Delta:
		return fmt.Sprintf("On %s tasks, SFT+PPO beats SFT: delta_r %s vs %s%s.", split, pct(ppo.Delta), pct(sft.Delta), qual)
	case ppo.Delta == sft.Delta:
		return fmt.Sprintf("On %s tasks, RL does not beat SFT: both have delta_r %s.", split, pct(ppo.Delta))
	default:
		return fmt.Sprintf("On %s tasks, RL does not beat SFT: SFT+PPO delta_r %s vs SFT %s%s.", split, pct(ppo.Delta), pct(sft.Delta), qual)
	}
}

// PrintHeadline writes the headline table of every split, and the verdicts.
func PrintHeadline(w io.Writer, s Summary) {
	for _, split := range []string{schemas.HeldOut, schemas.HeldIn} {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		n := 0
		for _, h := range s.Headlines {
			if h.Split != split {
				continue
			}
			if n == 0 {
				fmt.Fprintf(tw, "%s\tTASKS\tTRAJ\tDELTA_R\t95%% CI\tIMPROVED\tVALID\tSTEPS\tTIME/TRAJ\n", strings.ToUpper(split))
			}
			n++
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%.0f%%\t%s\t%.1f\t%.1fs\n", h.Method, h.Tasks, h.Trajectories, pct(h.Delta), ci(h.DeltaCI), 100*h.Improved, share(h.Valid, h.AllSteps), h.MeanSteps, h.MeanWallS)
		}
		tw.Flush()
		if v := Verdict(s, split); v != "" {
			fmt.Fprintln(w, v)
		}
	}
	if s.ScoredOn != "" {
		fmt.Fprintln(w, ScoredOnLine(s.ScoredOn))
	}
}

// room is a headroom share with its interval ("n/a" without m_best).
func room(x, half float64) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	if math.IsNaN(half) || half == 0 {
		return pct(x)
	}
	return pct(x) + " ± " + strings.TrimPrefix(ci(half), "±")
}

func pct(x float64) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	if math.Abs(x) < 5e-5 {
		x = 0 // no "-0.00%" for a gain too small to show
	}
	return fmt.Sprintf("%+.2f%%", 100*x)
}

// writeBehaviours writes what each method did on a split's tasks (methods
// that took steps): edit and execute shares of its steps, the share of its
// edits that changed nothing, of its trajectories that ran the script,
// gave a Final Answer and ended on an unrun change, and how many of them
// made a better script and how many of those kept it.
func writeBehaviours(w io.Writer, s Summary, split string) {
	var bs []Behaviour
	for _, b := range s.Behaviours {
		if b.Split == split && b.Steps > 0 {
			bs = append(bs, b)
		}
	}
	if len(bs) == 0 {
		return
	}
	fmt.Fprintf(w, "What the agents did: edits and executions as shares of their steps, edits that left the file unchanged as a share of the edits, trajectories that ran the script at least once, that ended with a Final Answer, and that ended with a change to the script no run followed (edits or undos after the last Execute Script: wasted steps, the score is the last run's) as shares of the trajectories; then the trajectories with a graded run better than the initial script (the run the public part ranked best, scored on the reported answers) and, of those, the ones whose final submission kept a better score (the others made a better script and lost it: undone, edited over, or a worse last run).\n\n")
	fmt.Fprintf(w, "| method | trajectories | steps | edits | unchanged edits | executes | ran the script | final answer | ended on an unrun change | found a better script | kept it |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	pc := func(a, b int) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f%%", 100*float64(a)/float64(b))
	}
	for _, b := range bs {
		fmt.Fprintf(w, "| %s | %d | %d | %s | %s | %s | %s | %s | %s | %d (%s) | %d of %d |\n", b.Method, b.Trajectories, b.Steps, pc(b.Edits, b.Steps), pc(b.Unchanged, b.Edits),
			pc(b.Executes, b.Steps), pc(b.RanScript, b.Trajectories), pc(b.FinalAnswer, b.Trajectories), pc(b.Unrun, b.Trajectories),
			b.Found, pc(b.Found, b.Trajectories), b.Kept, b.Found)
	}
	fmt.Fprintln(w)
}

// share formats a rate of steps as a percentage ("-" without steps).
func share(x float64, steps int) string {
	if steps == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*x)
}

func ci(x float64) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	return fmt.Sprintf("±%.2f%%", 100*x)
}

// readCurves reads the trainers' metrics.jsonl beside their checkpoints;
// a missing file gives an empty curve.
func readCurves(ctx context.Context, st store.Store, cfg Config) Curves {
	return Curves{SFT: readCurve(ctx, st, cfg.SFT), PPO: readCurve(ctx, st, cfg.PPO)}
}

func readCurve(ctx context.Context, st store.Store, dir string) Curve {
	c := Curve{Source: st.URI(dir + "/metrics.jsonl")}
	b, err := store.ReadAll(ctx, st, dir+"/metrics.jsonl")
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			fmt.Fprintf(os.Stderr, "evaluate: %s: %v (no curve)\n", c.Source, err)
		}
		return c
	}
	c.Records = ParseMetrics(b)
	return c
}

// ParseMetrics reads JSON lines of metrics, keeping numeric fields (and
// booleans as 1 or 0, such as a PPO update's "skipped"); lines that do
// not parse are skipped.
func ParseMetrics(b []byte) []map[string]float64 {
	var out []map[string]float64
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<16), 1<<24)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		rec := map[string]float64{}
		for k, v := range m {
			switch v := v.(type) {
			case float64:
				rec[k] = v
			case bool:
				rec[k] = 0
				if v {
					rec[k] = 1
				}
			}
		}
		out = append(out, rec)
	}
	return out
}

// series returns (step, value) pairs of the records that have key.
func (c Curve) series(key string) (xs, ys []float64) {
	for i, r := range c.Records {
		v, ok := r[key]
		if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		x, ok := r["step"]
		if !ok {
			x = float64(i + 1)
		}
		xs, ys = append(xs, x), append(ys, v)
	}
	return xs, ys
}

// writeTranscripts writes, for every task (held-out first) and method,
// the trajectory with the lowest index step by step: each answer (in a
// code block) and the first line of the environment's reply (in a code
// span), so that nothing an agent wrote renders as Markdown. It reports
// whether any row had answers (datasets before eval_results 1.1 have
// none).
func writeTranscripts(w io.Writer, rows []schemas.EvalResult) bool {
	first := map[[2]string]schemas.EvalResult{}
	var keys [][2]string
	for _, r := range rows {
		if len(r.Answers) == 0 {
			continue
		}
		k := [2]string{r.TaskID, r.Method}
		if old, ok := first[k]; !ok || r.Trajectory < old.Trajectory {
			if !ok {
				keys = append(keys, k)
			}
			first[k] = r
		}
	}
	if len(keys) == 0 {
		return false
	}
	sort.SliceStable(keys, func(i, j int) bool {
		if a, b := splitOrder(first[keys[i]].Split), splitOrder(first[keys[j]].Split); a != b {
			return a < b
		}
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return methodRank(keys[i][1]) < methodRank(keys[j][1])
	})
	fmt.Fprintf(w, "# Transcripts\n\nThe first trajectory of every task and method: each step's answer as the agent wrote it, then the action, its outcome and the first line of the environment's reply.\n")
	// A policy's answer may end inside a character (its last token a part
	// of one: generation stops at max_new_tokens): bytes that are not
	// UTF-8 are shown as U+FFFD, so that the file is valid UTF-8.
	valid := func(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }
	for _, k := range keys {
		r := first[k]
		fmt.Fprintf(w, "\n## %s (%s): %s, trajectory %d\n\n", r.TaskID, r.Split, r.Method, r.Trajectory)
		steps := "steps"
		if r.Steps == 1 {
			steps = "step"
		}
		fmt.Fprintf(w, "%s (%s): m_init %.4g, final %.4g, %d %s.\n", r.Metric, r.Direction, r.MInit, r.FinalScore, r.Steps, steps)
		for i, a := range r.Answers {
			fmt.Fprintf(w, "\n%d. ", i+1)
			if i < len(r.Actions) && i < len(r.Outcomes) {
				fmt.Fprintf(w, "**%s** -> %s", r.Actions[i], r.Outcomes[i])
			}
			if i < len(r.Feedback) && r.Feedback[i] != "" {
				fmt.Fprintf(w, ": %s", codeSpan(valid(r.Feedback[i])))
			}
			fmt.Fprintf(w, "\n\n%s\n", fence(valid(a)))
		}
	}
	return true
}

// codeSpan puts one line in a Markdown code span, delimited by more
// backticks than any run inside it: the environment's reply quotes what
// the agent wrote, and a report must not render an agent's links, images
// or emphasis.
func codeSpan(s string) string {
	d := "`"
	for strings.Contains(s, d) {
		d += "`"
	}
	return d + " " + s + " " + d
}

// fence puts s in a Markdown code block indented under a list item, with
// a fence longer than any run of backticks inside it.
func fence(s string) string {
	f := "```"
	for strings.Contains(s, f) {
		f += "`"
	}
	return "   " + f + "\n   " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n   ") + "\n   " + f
}
