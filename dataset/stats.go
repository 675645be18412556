package dataset

// The statistics report written beside each dataset version (stats.md, and
// the same numbers as JSON in the manifest's Extra["stats"]), with the
// prompt lengths of the version's exports.

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// StatRow is what the report needs of one row of either dataset.
type StatRow struct {
	TaskID, Split  string
	Outcome        string // the expert step's outcome
	StepIndex      int32
	Reward         float64 // the expert step's reward
	PromptTokens   int     // compact prompt, Qwen tokens
	ResponseTokens int
}

// Stats is the report on one dataset version.
type Stats struct {
	Dataset string `json:"dataset"`
	Version int    `json:"version"`
	Rows    int    `json:"rows"`
	// Tasks lists the rows per task and split, by task id.
	Tasks          []TaskRows     `json:"tasks"`
	Splits         map[string]int `json:"splits"`
	PromptTokens   Dist           `json:"prompt_tokens"`
	ResponseTokens Dist           `json:"response_tokens"`
	StepIndex      Dist           `json:"step_index"`
	Reward         Dist           `json:"reward"`
	Outcomes       map[string]int `json:"outcomes"`
	// Filter holds the builder's kept/dropped counts (SFTCounts or RLCounts).
	Filter any `json:"filter"`
	// Exports describes the files exported with the dataset.
	Exports []ExportStats `json:"exports,omitempty"`
}

// ExportStats describes one export file: its rows and the token lengths
// of its prompts as a chat template renders them ([ChatTokens]).
type ExportStats struct {
	File   string     `json:"file"`   // name under exports/<dataset>/v<N>/
	Format string     `json:"format"` // "verl" or "sharegpt"
	Prompt PromptForm `json:"prompt"`
	Rows   int        `json:"rows"`
	// Note says where the rows come from.
	Note         string `json:"note,omitempty"`
	PromptTokens Dist   `json:"prompt_tokens"`
	// MaxPromptLength is the trainer's limit the prompts were checked
	// against (verl's data.max_prompt_length; 0: none), and OverLimit the
	// rows longer than it.
	MaxPromptLength int `json:"max_prompt_length,omitempty"`
	OverLimit       int `json:"over_limit"`
	// Tokenizer names what counted the tokens: TokenizerQwen3, or the
	// export_tokenizer checkpoint folder.
	Tokenizer string `json:"tokenizer,omitempty"`
	// ExampleTokens (ShareGPT only) are the whole conversations' lengths:
	// prompt, answer and its end of turn, the sequence LLaMA-Factory
	// trains on and cuts at its cutoff_len; CutoffLen is the cutoff they
	// were checked against (0: none) and OverCutoff the rows longer.
	ExampleTokens *Dist `json:"example_tokens,omitempty"`
	CutoffLen     int   `json:"cutoff_len,omitempty"`
	OverCutoff    int   `json:"over_cutoff,omitempty"`
}

// TokenizerQwen3 names the default counter, [QwenChat] with the Qwen3
// tokenizer (internal/tokenizer).
const TokenizerQwen3 = "qwen3"

// SetExamples records the whole conversations' token counts and checks
// them against cutoff (0: no check).
func (e *ExportStats) SetExamples(tokens []int, cutoff int) {
	xs := make([]float64, len(tokens))
	e.CutoffLen, e.OverCutoff = cutoff, 0
	for i, n := range tokens {
		xs[i] = float64(n)
		if cutoff > 0 && n > cutoff {
			e.OverCutoff++
		}
	}
	d := NewDist(xs, tokenEdges)
	e.ExampleTokens = &d
}

// NewExportStats summarises an export's prompt token counts and checks
// them against maxLen (0: no check).
func NewExportStats(file, format string, form PromptForm, tokens []int, maxLen int, note string) ExportStats {
	e := ExportStats{File: file, Format: format, Prompt: form, Rows: len(tokens), Note: note, MaxPromptLength: maxLen}
	xs := make([]float64, len(tokens))
	for i, n := range tokens {
		xs[i] = float64(n)
		if maxLen > 0 && n > maxLen {
			e.OverLimit++
		}
	}
	e.PromptTokens = NewDist(xs, tokenEdges)
	return e
}

// Warning is the line to print when prompts exceed MaxPromptLength, or
// conversations CutoffLen ("" when none does).
func (e ExportStats) Warning() string {
	if e.OverCutoff > 0 && e.ExampleTokens != nil {
		// LLaMA-Factory keeps the start of an overlong prompt and cuts the
		// rest, the state's end with the generation prompt, without a word.
		return fmt.Sprintf("warning: %d of %d examples of %s are longer than LLaMA-Factory's cutoff_len %d tokens (longest %.0f, prompt and answer): it cuts the end of their prompts without a warning; set cutoff_len to %.0f or more",
			e.OverCutoff, e.Rows, e.File, e.CutoffLen, e.ExampleTokens.Max, e.ExampleTokens.Max)
	}
	if e.OverLimit == 0 {
		return ""
	}
	fix := fmt.Sprintf("raise data.max_prompt_length to %.0f or more", e.PromptTokens.Max)
	if e.Prompt == PromptFull {
		fix += " or export the policy's prompt (verl_prompt: policy)"
	}
	return fmt.Sprintf("warning: %d of %d prompts of %s are longer than verl's data.max_prompt_length %d tokens (longest %.0f): verl drops them (filter_overlong_prompts) or stops (truncation: error); %s",
		e.OverLimit, e.Rows, e.File, e.MaxPromptLength, e.PromptTokens.Max, fix)
}

// TaskRows counts one task's rows.
type TaskRows struct {
	TaskID string `json:"task_id"`
	Split  string `json:"split"`
	Rows   int    `json:"rows"`
}

// Dist summarises a distribution: order statistics and a histogram.
type Dist struct {
	N    int     `json:"n"`
	Min  float64 `json:"min"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	Max  float64 `json:"max"`
	// Edges e0 < e1 < ... bound the bins (-inf,e0), [e0,e1), ..., [en,+inf);
	// Counts has len(Edges)+1 entries.
	Edges  []float64 `json:"edges"`
	Counts []int     `json:"counts"`
}

// Histogram edges: token lengths in powers of two; rewards around zero.
var (
	tokenEdges  = []float64{0, 32, 64, 128, 256, 512, 1024, 2048, 4096}
	stepEdges   = []float64{0, 1, 2, 3, 5, 8, 13, 21}
	rewardEdges = []float64{-1, -0.5, -0.1, -1e-9, 1e-9, 0.1, 0.5, 1}
)

// NewDist summarises xs with the given histogram edges. Empty xs give a
// Dist with N=0 and zero counts.
func NewDist(xs []float64, edges []float64) Dist {
	d := Dist{N: len(xs), Edges: edges, Counts: make([]int, len(edges)+1)}
	if len(xs) == 0 {
		return d
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	sum := 0.0
	for _, x := range s {
		sum += x
		d.Counts[sort.Search(len(edges), func(i int) bool { return edges[i] > x })]++
	}
	d.Min, d.Max, d.Mean = s[0], s[len(s)-1], sum/float64(len(s))
	d.P50, d.P90 = quantile(s, 0.5), quantile(s, 0.9)
	return d
}

// quantile of sorted s by the nearest-rank method.
func quantile(s []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// ComputeStats builds the report on rows; filter is the builder's counts.
func ComputeStats(dataset string, version int, rows []StatRow, filter any) Stats {
	st := Stats{Dataset: dataset, Version: version, Rows: len(rows), Splits: map[string]int{}, Outcomes: map[string]int{}, Filter: filter}
	per := map[[2]string]int{}
	var prompt, resp, step, reward []float64
	for _, r := range rows {
		per[[2]string{r.TaskID, r.Split}]++
		st.Splits[r.Split]++
		st.Outcomes[r.Outcome]++
		prompt = append(prompt, float64(r.PromptTokens))
		resp = append(resp, float64(r.ResponseTokens))
		step = append(step, float64(r.StepIndex))
		reward = append(reward, r.Reward)
	}
	for k, n := range per {
		st.Tasks = append(st.Tasks, TaskRows{TaskID: k[0], Split: k[1], Rows: n})
	}
	sort.Slice(st.Tasks, func(i, j int) bool {
		if st.Tasks[i].TaskID != st.Tasks[j].TaskID {
			return st.Tasks[i].TaskID < st.Tasks[j].TaskID
		}
		return st.Tasks[i].Split < st.Tasks[j].Split
	})
	st.PromptTokens = NewDist(prompt, tokenEdges)
	st.ResponseTokens = NewDist(resp, tokenEdges)
	st.StepIndex = NewDist(step, stepEdges)
	st.Reward = NewDist(reward, rewardEdges)
	return st
}

// WriteMarkdown renders the report as Markdown (what stats.md holds and
// the stage prints).
func (s Stats) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s v%d: %d rows\n\n", s.Dataset, s.Version, s.Rows)
	fmt.Fprintf(&b, "Splits: %s\n\n", countsLine(s.Splits))
	fmt.Fprintf(&b, "Filter: %s\n\n", filterLine(s.Filter))
	b.WriteString("| task | split | rows |\n|---|---|---:|\n")
	for _, t := range s.Tasks {
		fmt.Fprintf(&b, "| %s | %s | %d |\n", t.TaskID, t.Split, t.Rows)
	}
	b.WriteString("\n")
	writeDist(&b, "Prompt tokens (compact, Qwen)", s.PromptTokens, "%.0f")
	writeDist(&b, "Response tokens (Qwen)", s.ResponseTokens, "%.0f")
	writeDist(&b, "Step index", s.StepIndex, "%.0f")
	writeDist(&b, "Expert step reward", s.Reward, "%.3g")
	fmt.Fprintf(&b, "Outcomes: %s\n", countsLine(s.Outcomes))
	if len(s.Exports) > 0 {
		b.WriteString("\n")
	}
	for _, e := range s.Exports {
		writeExport(&b, e)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeExport renders an export's section: what its prompts are, their
// token lengths, and the check against the trainer's limit.
func writeExport(b *strings.Builder, e ExportStats) {
	shape := "compact, one user message"
	switch e.Prompt {
	case PromptPolicy:
		shape = "policy, mlerl's system message and the compact prompt as the user message: what mlerl prompts a Hugging Face policy with (its model.prompt_tokens must cover the longest prompt below, or mlerl shortens the prompt the policy reads)"
	case PromptFull:
		shape = "full, a system message (role, tools, answer format) and a user message (the state)"
	}
	if e.Format == "sharegpt" {
		shape += ", as the system column and the human turn"
	}
	fmt.Fprintf(b, "## Export %s: prompt tokens\n\n", e.File)
	fmt.Fprintf(b, "%d rows", e.Rows)
	if e.Note != "" {
		fmt.Fprintf(b, " (%s)", e.Note)
	}
	fmt.Fprintf(b, ". Prompt: %s. ", shape)
	if e.Tokenizer == "" || e.Tokenizer == TokenizerQwen3 {
		b.WriteString("Tokens: Qwen3's, of the messages in ChatML with the generation prompt (`<|im_start|>role\\n...<|im_end|>\\n` per message, then `<|im_start|>assistant\\n`), as `apply_chat_template(prompt, add_generation_prompt=True)` counts them; another model's tokenizer counts differently (`mlerl dataset --export_tokenizer DIR` counts with its own).\n\n")
	} else {
		fmt.Fprintf(b, "Tokens: those of the checkpoint %s, its tokenizer and chat template with the generation prompt, as `apply_chat_template(prompt, add_generation_prompt=True)` counts them.\n\n", e.Tokenizer)
	}
	if e.MaxPromptLength > 0 {
		if w := e.Warning(); w != "" {
			fmt.Fprintf(b, "**%s**\n\n", strings.TrimPrefix(w, "warning: "))
		} else if e.Rows > 0 {
			fmt.Fprintf(b, "Every prompt fits verl's data.max_prompt_length %d.\n\n", e.MaxPromptLength)
		}
	}
	writeDistBody(b, e.PromptTokens, "%.0f")
	if e.ExampleTokens != nil {
		b.WriteString("Whole examples (prompt, answer and its end of turn: what LLaMA-Factory trains on; set its cutoff_len to at least the longest):\n\n")
		if e.CutoffLen > 0 && e.Rows > 0 {
			if e.OverCutoff > 0 {
				fmt.Fprintf(b, "**%s**\n\n", strings.TrimPrefix(e.Warning(), "warning: "))
			} else {
				fmt.Fprintf(b, "Every example fits LLaMA-Factory's cutoff_len %d.\n\n", e.CutoffLen)
			}
		}
		writeDistBody(b, *e.ExampleTokens, "%.0f")
	}
}

func writeDist(b *strings.Builder, title string, d Dist, f string) {
	fmt.Fprintf(b, "## %s\n\n", title)
	writeDistBody(b, d, f)
}

// writeDistBody renders a distribution: its order statistics and the
// histogram of its non-empty range of bins.
func writeDistBody(b *strings.Builder, d Dist, f string) {
	if d.N == 0 {
		b.WriteString("(no rows)\n\n")
		return
	}
	fmt.Fprintf(b, "n %d, min "+f+", mean %.1f, p50 "+f+", p90 "+f+", max "+f+"\n\n", d.N, d.Min, d.Mean, d.P50, d.P90, d.Max)
	b.WriteString("| bin | rows | |\n|---|---:|---|\n")
	peak := 0
	for _, c := range d.Counts {
		peak = max(peak, c)
	}
	// Only the bins from the first to the last non-empty one.
	lo, hi := 0, len(d.Counts)-1
	for lo < hi && d.Counts[lo] == 0 {
		lo++
	}
	for hi > lo && d.Counts[hi] == 0 {
		hi--
	}
	for i := lo; i <= hi; i++ {
		c := d.Counts[i]
		fmt.Fprintf(b, "| %s | %d | %s |\n", binLabel(d.Edges, i, f), c, strings.Repeat("#", (30*c+peak-1)/max(peak, 1)))
	}
	b.WriteString("\n")
}

func binLabel(edges []float64, i int, f string) string {
	// Edges within 1e-6 of zero bound the "exactly zero" bin of rewards.
	e := func(x float64) string {
		if math.Abs(x) < 1e-6 {
			return "0"
		}
		return fmt.Sprintf(f, x)
	}
	switch {
	case i == 0:
		return "< " + e(edges[0])
	case i == len(edges):
		return ">= " + e(edges[i-1])
	case edges[i-1] < 0 && edges[i] > 0 && edges[i]-edges[i-1] < 1e-6:
		return "0"
	case edges[i-1] > 0 && edges[i-1] < 1e-6:
		return "(0, " + e(edges[i]) + ")"
	default:
		return "[" + e(edges[i-1]) + ", " + e(edges[i]) + ")"
	}
}

func countsLine(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		name := k
		if name == "" {
			name = "(none)"
		}
		parts[i] = fmt.Sprintf("%s %d", name, m[k])
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func filterLine(f any) string {
	switch c := f.(type) {
	case SFTCounts:
		line := fmt.Sprintf("%d steps -> %d kept; dropped: format_error %d, refused %d, duplicate %d, too_long %d, held_out %d, empty_prompt %d",
			c.Steps, c.Kept, c.FormatError, c.Refused, c.Duplicate, c.TooLong, c.HeldOut, c.EmptyPrompt)
		if v := c.Variants; v.Made > 0 || v.NotPlan > 0 || v.NoPool > 0 {
			line += fmt.Sprintf("; the steps include %d plan variants of %d expert edits (skipped: instruction not in the plan %d, no other idea %d)",
				v.Made, v.Edits, v.NotPlan, v.NoPool)
		}
		return line
	case RLCounts:
		return fmt.Sprintf("%d steps -> %d kept; dropped: held_out %d, no_snapshot %d, empty_prompt %d, duplicate %d, sampled_out %d",
			c.Steps, c.Kept, c.HeldOut, c.NoSnapshot, c.EmptyPrompt, c.Duplicate, c.Sampled)
	default:
		return fmt.Sprint(f)
	}
}
