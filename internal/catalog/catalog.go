// Package catalog holds the built-in idea catalog: concrete improvement
// ideas in the three ML-Agent categories (data, model, learning) for the
// built-in tasks, each carrying the edit that the offline editor applies to
// a task's train.py.
//
// Built-in scripts are divided into named sections (see tasks/README.md):
//
//	# === data ===
//	...
//	# === end data ===
//
// An [Edit] is a list of operations on sections. Start with [All],
// [ForTask], [Lookup] and [Apply].
package catalog

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/mlerl/mlerl/internal/textutil"
)

// Section names of a built-in train.py, in file order.
var Sections = []string{"imports", "data", "model", "training", "evaluate"}

// Op is one operation on one section of a script.
type Op struct {
	Section string `json:"section"`
	// Op is "replace" (the section's body becomes Code), "append" or
	// "prepend" (Code is added at the end or start of the body), or "sub"
	// (the regular expression Pattern is replaced by Repl; it must match).
	Op      string `json:"op"`
	Code    string `json:"code,omitempty"`
	Pattern string `json:"pattern,omitempty"`
	Repl    string `json:"repl,omitempty"`
}

// Edit is a concrete edit: operations applied in order.
type Edit struct {
	Ops []Op `json:"ops"`
}

// JSON renders the edit for the ideas dataset's edit column.
func (e Edit) JSON() string {
	b, _ := json.Marshal(e)
	return string(b)
}

// ParseEdit reads an edit from its JSON form.
func ParseEdit(s string) (Edit, error) {
	var e Edit
	if err := json.Unmarshal([]byte(s), &e); err != nil {
		return e, fmt.Errorf("edit %q: %w", textutil.Clip(s, 80), err)
	}
	return e, nil
}

// Idea is one catalog idea.
type Idea struct {
	ID       string `json:"id"` // stable, e.g. "data/standard-scaler"
	Category string `json:"category"`
	// Text is the idea as an agent reads it and as an edit instruction.
	Text string `json:"text"`
	// Modalities and TaskTypes restrict where the idea applies (empty: all).
	Modalities []string `json:"modalities,omitempty"`
	TaskTypes  []string `json:"task_types,omitempty"`
	Edit       Edit     `json:"edit"`
}

// Applies reports whether the idea applies to a task of that modality and type.
func (i Idea) Applies(modality, taskType string) bool {
	return matches(i.Modalities, modality) && matches(i.TaskTypes, taskType)
}

func matches(list []string, v string) bool {
	if len(list) == 0 {
		return true
	}
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// ForTask returns the catalog ideas applicable to a task, in catalog order.
func ForTask(modality, taskType string) []Idea {
	var out []Idea
	for _, i := range All() {
		if i.Applies(modality, taskType) {
			out = append(out, i)
		}
	}
	return out
}

// Normalize folds an instruction for lookup: lower case, single spaces,
// no trailing punctuation.
func Normalize(s string) string {
	s = strings.ToLower(strings.Join(strings.Fields(s), " "))
	return strings.TrimRight(s, ".!; ")
}

// Lookup finds the catalog idea whose text (or id) the instruction names:
// the first idea of All whose normalized text equals the instruction's,
// or whose id is the instruction.
func Lookup(instruction string) (Idea, bool) {
	ix := lookupIndex()
	t, okT := ix.byText[Normalize(instruction)]
	d, okD := ix.byID[strings.TrimSpace(instruction)]
	switch {
	case okT && (!okD || t < d):
		return ix.all[t], true
	case okD:
		return ix.all[d], true
	}
	return Idea{}, false
}

// lookupIndex maps each normalized idea text and each id to its first
// index in All, built once: Lookup runs for every catalog idea of a task
// whenever a policy's action grammar is built (every step of every
// episode), and normalizing the whole catalog each time was a sixth of a
// PPO update's CPU time (BENCHMARKS.md, issue 33).
var lookupIndex = sync.OnceValue(func() ideaIndex {
	ix := ideaIndex{all: All(), byText: map[string]int{}, byID: map[string]int{}}
	for k, i := range ix.all {
		if _, ok := ix.byText[Normalize(i.Text)]; !ok {
			ix.byText[Normalize(i.Text)] = k
		}
		if _, ok := ix.byID[i.ID]; !ok {
			ix.byID[i.ID] = k
		}
	}
	return ix
})

type ideaIndex struct {
	all          []Idea
	byText, byID map[string]int
}

var sectionRe = regexp.MustCompile(`(?m)^# === ([a-z_]+) ===\n`)

// Apply carries out an edit on a script and returns the new script. It
// fails, naming the operation, when a section is missing or a pattern does
// not match: an edit that cannot be carried out is invalid, never partial.
func Apply(script string, e Edit) (string, error) {
	if len(e.Ops) == 0 {
		return "", fmt.Errorf("edit has no operations")
	}
	for k, op := range e.Ops {
		start, end, err := findSection(script, op.Section)
		if err != nil {
			return "", fmt.Errorf("edit op %d: %w", k+1, err)
		}
		body := script[start:end]
		switch op.Op {
		case "replace":
			body = withNewline(op.Code)
		case "append":
			body = body + withNewline(op.Code)
		case "prepend":
			body = withNewline(op.Code) + body
		case "sub":
			re, err := regexp.Compile(op.Pattern)
			if err != nil {
				return "", fmt.Errorf("edit op %d: bad pattern %q: %v", k+1, op.Pattern, err)
			}
			if !re.MatchString(body) {
				return "", fmt.Errorf("edit op %d: pattern %q not found in section %q", k+1, op.Pattern, op.Section)
			}
			body = re.ReplaceAllString(body, op.Repl)
		default:
			return "", fmt.Errorf("edit op %d: unknown op %q (want replace, append, prepend or sub)", k+1, op.Op)
		}
		script = script[:start] + body + script[end:]
	}
	return script, nil
}

// CheckSections reports whether script has every section of [Sections]
// (the edits' targets), naming the first one missing.
func CheckSections(script string) error {
	for _, name := range Sections {
		if _, _, err := findSection(script, name); err != nil {
			return err
		}
	}
	return nil
}

// findSection returns the byte range of a section's body (between its
// header line and its end line).
func findSection(script, name string) (int, int, error) {
	header := "# === " + name + " ===\n"
	footer := "# === end " + name + " ===\n"
	i := strings.Index(script, header)
	if i < 0 {
		return 0, 0, fmt.Errorf("section %q not found (the script has no %q line)", name, strings.TrimSpace(header))
	}
	start := i + len(header)
	j := strings.Index(script[start:], footer)
	if j < 0 {
		return 0, 0, fmt.Errorf("section %q has no %q line", name, strings.TrimSpace(footer))
	}
	return start, start + j, nil
}

func withNewline(s string) string {
	if s != "" && !strings.HasSuffix(s, "\n") {
		return s + "\n"
	}
	return s
}
