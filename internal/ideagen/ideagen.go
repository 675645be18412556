// Package ideagen produces candidate improvement ideas for a task, per
// ML-Agent category (data, model, learning): from the built-in catalog
// ([Catalog], the offline default) or from an LLM behind an
// OpenAI-compatible chat endpoint ([Generator]).
//
// Start with [Generator.Generate]: it asks for N distinct ideas as JSON,
// parses the answer tolerantly but strictly ([ParseIdeas]: a JSON object or
// array, inside code fences or followed by chatter; empty, duplicate and
// over-long ideas are rejected and counted), and asks again for the
// shortfall, listing what it already has, up to a number of rounds.
// Retries with backoff and the rate limit come from internal/llm.
package ideagen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"

	"github.com/mlerl/mlerl/internal/catalog"
	"github.com/mlerl/mlerl/internal/llm"
	"github.com/mlerl/mlerl/internal/textutil"
	"github.com/mlerl/mlerl/schemas"
)

// Idea is one candidate idea for a task and category.
type Idea struct {
	// ID is stable: the catalog id for catalog ideas ("data/standard-scaler"),
	// empty for LLM ideas (the stage names them by their text's hash).
	ID       string
	Category string
	Text     string
	// Source is "catalog" or "llm:<model>".
	Source string
	// Edit is the catalog idea's edit as JSON; empty for LLM ideas.
	Edit string
}

// SourceCatalog is the Source of catalog ideas.
const SourceCatalog = "catalog"

// Catalog returns the catalog ideas of one category that apply to the
// task's modality and type, in catalog order.
func Catalog(t schemas.Task, category string) []Idea {
	var out []Idea
	for _, ci := range catalog.ForTask(t.Modality, t.TaskType) {
		if ci.Category == category {
			out = append(out, Idea{ID: ci.ID, Category: ci.Category, Text: ci.Text, Source: SourceCatalog, Edit: ci.Edit.JSON()})
		}
	}
	return out
}

// CategoryMeaning says what each category covers, in the prompt's words.
var CategoryMeaning = map[string]string{
	schemas.CategoryData:     "the data: cleaning, missing-value imputation, scaling, encoding, feature engineering and selection, augmentation, resampling, the validation split (edits the script's data section)",
	schemas.CategoryModel:    "the model: model family, architecture, capacity and the estimator's structural hyper-parameters (edits the script's model section)",
	schemas.CategoryLearning: "the learning: optimiser, learning rate and schedule, iterations or epochs, early stopping, regularisation, class weights, ensembling (edits the script's training section)",
}

// Options control LLM generation.
type Options struct {
	// N is how many ideas to collect per task and category.
	N int
	// MinIdeas is the fewest usable ideas accepted; fewer after MaxRounds
	// is an error.
	MinIdeas int
	// MaxRounds bounds the requests per task and category (the first one
	// plus the re-asks for a shortfall).
	MaxRounds int
	// MaxIdeaChars rejects longer ideas.
	MaxIdeaChars int
	// MaxDescriptionChars truncates the task description in the prompt.
	MaxDescriptionChars int
	Temperature         float64
	MaxTokens           int
}

// DefaultOptions asks for 100 ideas (the paper's pool size), accepts no
// fewer than 10, in at most 4 requests, ideas of at most 300 characters,
// descriptions cut at 4,000 characters, temperature 0.8, 8,192 tokens.
func DefaultOptions() Options {
	return Options{N: 100, MinIdeas: 10, MaxRounds: 4, MaxIdeaChars: 300, MaxDescriptionChars: 4000, Temperature: 0.8, MaxTokens: 8192}
}

// Report counts what one Generate call got.
type Report struct {
	Requests int
	// Returned counts the ideas the answers contained; Usable those kept.
	Returned, Usable int
	// Rejected counts rejected ideas by reason (empty, duplicate,
	// too_long, not_text); Malformed counts answers that did not parse.
	Rejected  map[string]int
	Malformed int
	Usage     llm.Usage
}

// Add accumulates r2 into r.
func (r *Report) Add(r2 Report) {
	r.Requests += r2.Requests
	r.Returned += r2.Returned
	r.Usable += r2.Usable
	r.Malformed += r2.Malformed
	r.Usage.PromptTokens += r2.Usage.PromptTokens
	r.Usage.CompletionTokens += r2.Usage.CompletionTokens
	r.Usage.CostUSD += r2.Usage.CostUSD
	for k, v := range r2.Rejected {
		if r.Rejected == nil {
			r.Rejected = map[string]int{}
		}
		r.Rejected[k] += v
	}
}

// Generator asks an LLM for ideas.
type Generator struct {
	client *llm.Client
	opts   Options
}

// New returns a generator using client.
func New(client *llm.Client, opts Options) *Generator {
	return &Generator{client: client, opts: opts}
}

// Source is the Source of the ideas this generator makes: "llm:<model>".
func (g *Generator) Source() string { return "llm:" + g.client.Model() }

// Generate collects up to N usable ideas of one category for the task.
// An answer that does not parse costs a round; a request that fails after
// the client's retries (HTTP errors, timeouts) ends the call with an error.
// Fewer than MinIdeas usable ideas after MaxRounds is an error too.
func (g *Generator) Generate(ctx context.Context, t schemas.Task, category string) ([]Idea, Report, error) {
	rep := Report{Rejected: map[string]int{}}
	seen := map[string]bool{}
	var ideas []Idea
	var lastProblem string
	for round := 0; round < g.opts.MaxRounds && len(ideas) < g.opts.N; round++ {
		need := g.opts.N - len(ideas)
		temp := g.opts.Temperature
		resp, err := g.client.Chat(ctx, llm.ChatRequest{
			Messages: []llm.Message{
				{Role: "system", Content: systemPrompt},
				{Role: "user", Content: g.prompt(t, category, need, ideas)},
			},
			Temperature: &temp,
			MaxTokens:   g.opts.MaxTokens,
			JSON:        true,
		})
		if err != nil {
			return nil, rep, fmt.Errorf("task %s, category %s: %w", t.TaskID, category, err)
		}
		rep.Requests++
		rep.Usage.PromptTokens += resp.Usage.PromptTokens
		rep.Usage.CompletionTokens += resp.Usage.CompletionTokens
		rep.Usage.CostUSD += resp.Usage.CostUSD
		items, err := ParseIdeas(resp.Content)
		if err != nil {
			rep.Malformed++
			lastProblem = err.Error()
			if resp.FinishReason == "length" {
				lastProblem += fmt.Sprintf(" (the answer was cut at max_tokens %d)", g.opts.MaxTokens)
			}
			continue
		}
		rep.Returned += len(items)
		got := 0
		for _, it := range items {
			text, reason := g.check(it, seen)
			if reason != "" {
				rep.Rejected[reason]++
				continue
			}
			if len(ideas) == g.opts.N {
				break // more than asked for: keep the first N
			}
			ideas = append(ideas, Idea{Category: category, Text: text, Source: g.Source()})
			got++
		}
		if got == 0 {
			lastProblem = fmt.Sprintf("no usable idea among %d returned", len(items))
		}
	}
	rep.Usable = len(ideas)
	if len(ideas) < g.opts.MinIdeas {
		msg := fmt.Sprintf("task %s, category %s: %d usable ideas after %d requests, want at least %d", t.TaskID, category, len(ideas), rep.Requests, g.opts.MinIdeas)
		if lastProblem != "" {
			msg += " (last problem: " + lastProblem + ")"
		}
		return nil, rep, errors.New(msg + "; try another model, a higher max_rounds or a lower min_ideas")
	}
	return ideas, rep, nil
}

// check cleans one parsed item; it returns the rejection reason if any.
func (g *Generator) check(item any, seen map[string]bool) (string, string) {
	text, ok := itemText(item)
	if !ok {
		return "", "not_text"
	}
	text = strings.Join(strings.Fields(text), " ")
	text = listMarker.ReplaceAllString(text, "") // "1. ", "- " the model put inside the string
	switch {
	case text == "":
		return "", "empty"
	case len([]rune(text)) > g.opts.MaxIdeaChars:
		return "", "too_long"
	}
	key := dedupKey(text)
	if seen[key] {
		return "", "duplicate"
	}
	seen[key] = true
	return text, ""
}

var listMarker = regexp.MustCompile(`^(?:[-*•]|\d{1,3}[.)])\s+`)

// dedupKey folds case, punctuation and spacing, so that two ideas differing
// only in those count as duplicates.
func dedupKey(s string) string {
	return strings.Join(strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}), " ")
}

// itemText accepts a string, or an object with an "idea", "text",
// "description" or "title" string field.
func itemText(item any) (string, bool) {
	switch v := item.(type) {
	case string:
		return v, true
	case map[string]any:
		for _, k := range []string{"idea", "text", "description", "title"} {
			if s, ok := v[k].(string); ok {
				return s, true
			}
		}
	}
	return "", false
}

const systemPrompt = "You are an expert machine-learning engineer who improves training scripts. " +
	"You propose concrete, self-contained ideas, each a single edit an engineer could carry out at once. " +
	"Answer with JSON only."

func (g *Generator) prompt(t schemas.Task, category string, n int, have []Idea) string {
	var b strings.Builder
	dir := "higher is better"
	if t.Direction == schemas.LowerIsBetter {
		dir = "lower is better"
	}
	fmt.Fprintf(&b, "Task: %s (%s)\nModality: %s. Task type: %s. Metric: %s (%s).\n\n", t.Title, t.TaskID, t.Modality, t.TaskType, t.Metric, dir)
	desc := strings.TrimSpace(t.Description)
	if r := []rune(desc); len(r) > g.opts.MaxDescriptionChars {
		desc = string(r[:g.opts.MaxDescriptionChars]) + " [...]"
	}
	fmt.Fprintf(&b, "Task description:\n%s\n\n", desc)
	b.WriteString("The training script train.py has the sections data (loading, preprocessing, features), model (model construction), training (fitting, iterations, regularisation, ensembling) and evaluate (computes the validation metric; not to be changed).\n\n")
	fmt.Fprintf(&b, "Propose %d distinct, concrete ideas in the category %q, that is, ideas about %s.\n", n, category, CategoryMeaning[category])
	fmt.Fprintf(&b, "Each idea is one sentence of at most %d characters that names the exact technique and its parameters", g.opts.MaxIdeaChars)
	if ex := Catalog(t, category); len(ex) > 0 {
		fmt.Fprintf(&b, ", for example %q", ex[0].Text)
	}
	b.WriteString(". Ideas must differ in substance, not only in wording, and must suit this task.\n")
	if len(have) > 0 {
		b.WriteString("\nThese ideas are already taken; do not repeat or reword them:\n")
		for _, i := range have {
			fmt.Fprintf(&b, "- %s\n", i.Text)
		}
	}
	fmt.Fprintf(&b, "\nAnswer with a JSON object of this form and nothing else: {\"ideas\": [\"first idea\", \"second idea\"]}")
	return b.String()
}

// ParseIdeas extracts the list of ideas from a model's answer. It accepts
// a JSON object whose "ideas" field (or only array field) is the list, or a
// bare JSON array; the JSON may sit in a ``` code fence or be preceded or
// followed by other text. List items are returned as decoded (strings or
// objects); the caller checks them. It fails when no JSON list is found.
func ParseIdeas(content string) ([]any, error) {
	s := strings.TrimSpace(content)
	if i := strings.Index(s, "```"); i >= 0 { // prefer a fenced block
		rest := s[i+3:]
		if nl := strings.IndexByte(rest, '\n'); nl >= 0 {
			rest = rest[nl+1:] // drop the language tag line
		}
		if j := strings.Index(rest, "```"); j >= 0 {
			rest = rest[:j]
		}
		s = strings.TrimSpace(rest)
	}
	start := strings.IndexAny(s, "{[")
	if start < 0 {
		return nil, fmt.Errorf("no JSON in the answer: %q", textutil.Clip(content, 120))
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(s[start:])))
	var v any
	if err := dec.Decode(&v); err != nil { // Decode stops after the first value: trailing text is ignored
		return nil, fmt.Errorf("malformed JSON in the answer (%v): %q", err, textutil.Clip(s[start:], 120))
	}
	switch v := v.(type) {
	case []any:
		return v, nil
	case map[string]any:
		if list, ok := v["ideas"].([]any); ok {
			return list, nil
		}
		var lists [][]any
		for _, x := range v {
			if l, ok := x.([]any); ok {
				lists = append(lists, l)
			}
		}
		if len(lists) == 1 {
			return lists[0], nil
		}
		return nil, fmt.Errorf("JSON object without an \"ideas\" list: %q", textutil.Clip(s[start:], 120))
	}
	return nil, fmt.Errorf("JSON answer is neither a list nor an object: %q", textutil.Clip(s[start:], 120))
}

// Merge returns the catalog ideas followed by the generated ones that are
// not rewordings of a catalog idea (same words after folding case,
// punctuation and spacing): the catalog idea, which carries an edit, wins.
func Merge(catalogIdeas, generated []Idea) []Idea {
	out := append([]Idea{}, catalogIdeas...)
	seen := map[string]bool{}
	for _, i := range catalogIdeas {
		seen[dedupKey(i.Text)] = true
	}
	for _, i := range generated {
		if !seen[dedupKey(i.Text)] {
			out = append(out, i)
		}
	}
	return out
}
