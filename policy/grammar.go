package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/internal/catalog"
)

// Grammar-constrained action decoding (what xgrammar, outlines and
// llguidance do for servers, here inside the policy's own generation
// loop). The response format is a byte-level automaton:
//
//	Reflection: <one line of free text>
//	Thought: <one line of free text>
//	Action: <one of the action names>
//	Action Input: {"<arg>": <value>, ...}
//
// with exactly the chosen action's arguments in canonical order, each
// value of its JSON type, and where values are enumerable only those: the
// workspace's files (its .py files for scripts), line numbers within the
// script, and for Edit Script (AI) the instructions the offline editor
// can carry out on the current script (the plan's ideas first, then the
// task's catalog ideas). A token is allowed when the automaton accepts
// all its bytes; masks are computed by walking a byte trie of the
// vocabulary, and cached for states whose mask does not depend on what
// came before (inside free text). What the automaton fixes (field names,
// a forced argument key, the rest of an enumerated value once only one
// candidate is left) is appended without sampling (jump-forward),
// tokenised together with the last tokens so that the result is the
// tokenizer's own split. When the token budget runs low the automaton
// forces its shortest completion, so every constrained response parses.

// GrammarContext holds what the grammar enumerates for one state.
type GrammarContext struct {
	// Files are the workspace's files (nil: any non-empty path).
	Files []string
	// Lines are the line counts of scripts (absent: up to 9999).
	Lines map[string]int
	// Ideas are the instructions Edit Script (AI) may give (nil: any;
	// empty: none, and Edit Script (AI) is not offered).
	Ideas []string
	// Undoable are the scripts with an edit to undo (nil: unknown, any
	// script; empty: none, and Undo Edit Script is not offered).
	Undoable []string
	// NoEdit leaves out Edit Script (AI) and Edit Script Segment, NoUndo
	// Undo Edit Script: on an episode's last step, where they cannot
	// change the score (agents.State's fields of the same names).
	NoEdit, NoUndo bool
	// OneLine writes Action Input on one line, as terse SFT responses do;
	// false writes it as env.Render does (one argument per line).
	OneLine bool
	// DashThoughts fixes Reflection and Thought to "-", what terse SFT
	// responses hold there: the response's only free text left is in free
	// arguments (PPO's free_text: force).
	DashThoughts bool
}

// NewGrammarContext builds the context of a prompt state: its workspace
// files and script, the ideas the offline editor can carry out on that
// script (the plan's first, then the task's catalog ideas), and whether
// edits and undos are left out on the episode's last step.
func NewGrammarContext(st agents.State, plan []string, oneLine bool) GrammarContext {
	gc := GrammarContext{Files: st.Files, Undoable: st.Undoable, NoEdit: st.NoEdit, NoUndo: st.NoUndo, OneLine: oneLine}
	if st.Script != "" {
		gc.Lines = map[string]int{"train.py": len(strings.Split(strings.TrimSuffix(st.Script, "\n"), "\n"))}
	}
	if st.Script != "" {
		gc.Ideas = []string{}
		seen := map[string]bool{}
		add := func(text string) {
			idea, ok := catalog.Lookup(text)
			if !ok || seen[idea.ID] {
				return
			}
			// An idea the editor cannot carry out on this script is not
			// offered, nor one whose edit would leave it as it is (already
			// applied: a replace op applied again).
			if out, err := catalog.Apply(st.Script, idea.Edit); err != nil || out == st.Script {
				return
			}
			seen[idea.ID] = true
			gc.Ideas = append(gc.Ideas, idea.Text)
		}
		for _, p := range plan {
			add(p)
		}
		for _, p := range st.Plan {
			add(p)
		}
		for _, i := range catalog.ForTask(st.Modality, st.TaskType) {
			add(i.Text)
		}
	}
	return gc
}

// Limits of free text under the grammar.
const (
	grammarFreeLine = 300  // bytes of Reflection or Thought
	grammarFreeArg  = 200  // bytes of a free string argument
	grammarFreeText = 2000 // bytes of edit_text or final_answer
	grammarMaxLine  = 9999 // line numbers when the script's length is unknown
)

// segment kinds of the automaton's program.
const (
	segLit    = iota // a fixed string
	segLine          // free text on one line, at least one non-space byte; ends at '\n'
	segChoice        // one of options (prefix-free); the action name
	segStr           // a JSON string (quotes included), free or one of options
	segInt           // a JSON integer within bounds
	segEnd           // complete: only EOS
)

type segment struct {
	kind     int
	lit      string
	options  []string // segChoice, segStr (JSON-quoted) when enumerated; sorted
	index    []int    // segChoice: the action index of each option
	cap      int      // segLine, segStr free: content bytes
	nonEmpty bool     // segStr free: needs a non-space byte
	arg      string   // segStr/segInt: the argument name
}

// grammar is the automaton of one context: the head (up to the action
// name) and one program per action.
type grammar struct {
	ctx     GrammarContext
	head    []segment
	actions []string
	progs   [][]segment // per action, after its name
	files   []string    // JSON-quoted workspace files
	scripts []string    // JSON-quoted .py files
	dirs    []string
	ideas   []string
}

// choiceSegment is a choice among names, sorted, remembering the id of
// each one (ids[i] is names[i]'s).
func choiceSegment(names []string, ids []int) segment {
	order := make([]int, len(names))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return names[order[a]] < names[order[b]] })
	seg := segment{kind: segChoice}
	for _, i := range order {
		seg.options = append(seg.options, names[i])
		seg.index = append(seg.index, ids[i])
	}
	return seg
}

func sortedUnique(opts []string) []string {
	out := append([]string(nil), opts...)
	sort.Strings(out)
	j := 0
	for i, o := range out {
		if i == 0 || o != out[j-1] {
			out[j] = o
			j++
		}
	}
	return out[:j]
}

func jsonQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func newGrammar(gc GrammarContext) *grammar {
	g := &grammar{ctx: gc, actions: env.ActionNames()}
	if gc.Files != nil {
		dirs := map[string]bool{".": true}
		for _, f := range gc.Files {
			g.files = append(g.files, jsonQuote(f))
			if strings.HasSuffix(f, ".py") {
				g.scripts = append(g.scripts, jsonQuote(f))
			}
			for d := f; strings.Contains(d, "/"); {
				d = d[:strings.LastIndex(d, "/")]
				dirs[d] = true
			}
		}
		for d := range dirs {
			g.dirs = append(g.dirs, jsonQuote(d))
		}
		sort.Strings(g.dirs)
	}
	for _, i := range gc.Ideas {
		g.ideas = append(g.ideas, jsonQuote(i))
	}
	var names []string
	var ids []int
	for i, a := range g.actions {
		if a == env.UndoEditScript && gc.Undoable != nil && len(gc.Undoable) == 0 {
			continue // nothing to undo: the environment would refuse it
		}
		if a == env.EditScriptAI && gc.Ideas != nil && len(gc.Ideas) == 0 {
			continue // no idea the editor can carry out that would change the script
		}
		if gc.NoEdit && (a == env.EditScriptAI || a == env.EditScriptSegment) || gc.NoUndo && a == env.UndoEditScript {
			continue // the last step: the change would never be run, nor scored
		}
		names, ids = append(names, a+"\n"), append(ids, i)
	}
	g.head = []segment{
		{kind: segLit, lit: env.FieldReflection + ": "},
		{kind: segLine, cap: grammarFreeLine},
		{kind: segLit, lit: env.FieldThought + ": "},
		{kind: segLine, cap: grammarFreeLine},
		{kind: segLit, lit: env.FieldAction + ": "},
		choiceSegment(names, ids),
	}
	if gc.DashThoughts {
		g.head = []segment{
			{kind: segLit, lit: env.FieldReflection + ": -\n" + env.FieldThought + ": -\n" + env.FieldAction + ": "},
			choiceSegment(names, ids),
		}
	}
	open, sep, close := "{\n    ", ",\n    ", "\n}"
	if gc.OneLine {
		open, sep, close = "{", ", ", "}"
	}
	for _, a := range g.actions {
		prog := []segment{{kind: segLit, lit: env.FieldActionInput + ": " + open}}
		for i, arg := range env.ActionArgs(a) {
			key := jsonQuote(arg) + ": "
			if i > 0 {
				key = sep + key
			}
			prog = append(prog, segment{kind: segLit, lit: key}, g.value(a, arg))
		}
		prog = append(prog, segment{kind: segLit, lit: close}, segment{kind: segEnd})
		g.progs = append(g.progs, prog)
	}
	return g
}

// value is the segment of one argument's value.
func (g *grammar) value(action, arg string) segment {
	enum := func(opts []string) segment {
		if opts == nil {
			return segment{kind: segStr, cap: grammarFreeArg, nonEmpty: true, arg: arg}
		}
		return segment{kind: segStr, options: sortedUnique(opts), arg: arg}
	}
	switch arg {
	case "start_line_number", "end_line_number":
		return segment{kind: segInt, arg: arg}
	case "edit_text", "final_answer":
		return segment{kind: segStr, cap: grammarFreeText, arg: arg}
	case "things_to_look_for":
		return segment{kind: segStr, cap: grammarFreeArg, nonEmpty: true, arg: arg}
	case "dir_path":
		return enum(g.dirs)
	case "file_name", "source":
		return enum(g.files)
	case "destination":
		return segment{kind: segStr, cap: grammarFreeArg, nonEmpty: true, arg: arg}
	case "edit_instruction":
		if g.ideas == nil {
			return segment{kind: segStr, cap: grammarFreeArg, nonEmpty: true, arg: arg}
		}
		return segment{kind: segStr, options: sortedUnique(g.ideas), arg: arg}
	case "script_name", "save_name":
		if action == env.UndoEditScript && g.ctx.Undoable != nil {
			var quoted []string
			for _, f := range g.ctx.Undoable {
				quoted = append(quoted, jsonQuote(f))
			}
			return enum(quoted)
		}
		if g.files == nil {
			return enum(nil)
		}
		return enum(g.scripts)
	}
	return enum(nil)
}

// gstate is the automaton's state: a small value, copied freely while
// masks are computed.
type gstate struct {
	action   int16 // chosen action (-1: still in the head)
	seg      int16 // segment index in the current program
	off      int32 // bytes consumed in the segment
	lo, hi   int32 // segChoice/enumerated segStr: candidates [lo, hi) still matching
	num      int32 // segInt: the value so far
	start    int32 // the start_line_number given
	script   int16 // the script_name given (index into the segment's options, -1: none)
	nonSpace bool  // segLine/free segStr: a non-space byte was seen
	esc      bool  // free segStr: after a backslash
}

func (g *grammar) initial() gstate {
	s := gstate{action: -1, script: -1}
	g.enter(&s)
	return s
}

func (g *grammar) prog(s *gstate) []segment {
	if s.action < 0 {
		return g.head
	}
	return g.progs[s.action]
}

// enter resets the per-segment fields for the segment s now points at.
func (g *grammar) enter(s *gstate) {
	s.off, s.num, s.nonSpace, s.esc = 0, 0, false, false
	s.lo, s.hi = 0, int32(len(g.prog(s)[s.seg].options))
}

// next advances to the following segment.
func (g *grammar) next(s *gstate) {
	s.seg++
	g.enter(s)
}

// lines is the line count of the script chosen in this action (0: unknown).
func (g *grammar) lines(s *gstate) int {
	if g.ctx.Lines == nil || s.script < 0 {
		return 0
	}
	var name string
	_ = json.Unmarshal([]byte(g.scripts[s.script]), &name)
	return g.ctx.Lines[name]
}

// intBounds are the allowed values of a line-number argument.
func (g *grammar) intBounds(s *gstate, seg segment) (lo, hi int) {
	n := g.lines(s)
	if n == 0 {
		n = grammarMaxLine
	}
	start := int(s.start)
	switch action := g.actions[s.action]; {
	case seg.arg == "start_line_number" && action == env.EditScriptSegment:
		return 1, n + 1
	case seg.arg == "start_line_number":
		return 1, n
	case action == env.InspectScriptLines:
		return start, min(max(n, start), start+env.MaxInspectLines-1)
	default: // Edit Script Segment's end: start-1 (an insertion) to n
		return max(1, start-1), max(n, max(1, start-1))
	}
}

// narrow keeps the candidates of a sorted option list whose byte at off
// is c; it reports whether any is left.
func narrow(opts []string, s *gstate, c byte) bool {
	off := int(s.off)
	lo := int(s.lo) + sort.Search(int(s.hi-s.lo), func(i int) bool {
		o := opts[int(s.lo)+i]
		return len(o) > off && o[off] >= c
	})
	hi := int(s.lo) + sort.Search(int(s.hi-s.lo), func(i int) bool {
		o := opts[int(s.lo)+i]
		return len(o) > off && o[off] > c
	})
	// Options shorter than off+1 sort first and were matched fully before:
	// none remain here because option lists are prefix-free.
	if lo >= hi {
		return false
	}
	s.lo, s.hi = int32(lo), int32(hi)
	s.off++
	return true
}

// step feeds one byte and reports whether the automaton accepts it (s is
// then advanced; on false s is left in an unspecified state).
func (g *grammar) step(s *gstate, c byte) bool {
	for {
		seg := g.prog(s)[s.seg]
		switch seg.kind {
		case segEnd:
			return false
		case segLit:
			if seg.lit[s.off] != c {
				return false
			}
			s.off++
			if int(s.off) == len(seg.lit) {
				g.next(s)
			}
			return true
		case segLine:
			switch {
			case c == '\n':
				if !s.nonSpace {
					return false
				}
				g.next(s)
				return true
			case c == '\r' || c == 0 || int(s.off) >= seg.cap:
				return false
			}
			s.off++
			if c != ' ' && c != '\t' {
				s.nonSpace = true
			}
			return true
		case segChoice:
			if !narrow(seg.options, s, c) {
				return false
			}
			if s.hi-s.lo == 1 && len(seg.options[s.lo]) == int(s.off) {
				s.action, s.seg = int16(seg.index[s.lo]), 0
				g.enter(s)
			}
			return true
		case segStr:
			if seg.options != nil {
				if !narrow(seg.options, s, c) {
					return false
				}
				if s.hi-s.lo == 1 && len(seg.options[s.lo]) == int(s.off) {
					if seg.arg == "script_name" {
						s.script = int16(s.lo)
					}
					g.next(s)
				}
				return true
			}
			return g.stepFreeStr(s, seg, c)
		case segInt:
			lo, hi := g.intBounds(s, seg)
			if c >= '0' && c <= '9' {
				v := int(s.num)*10 + int(c-'0')
				if (s.off == 0 && c == '0') || !canComplete(v, lo, hi) {
					return false
				}
				s.num, s.off = int32(v), s.off+1
				return true
			}
			if s.off == 0 || int(s.num) < lo {
				return false
			}
			if seg.arg == "start_line_number" {
				s.start = s.num
			}
			g.next(s)
			continue // the byte belongs to the next segment
		}
	}
}

// canComplete reports whether the digits typed so far (value v) are, or
// can grow into, a number in [lo, hi].
func canComplete(v, lo, hi int) bool {
	if v >= lo && v <= hi {
		return true
	}
	for p := 10; v*p <= hi; p *= 10 {
		if v*p+p-1 >= lo {
			return true
		}
	}
	return false
}

func (g *grammar) stepFreeStr(s *gstate, seg segment, c byte) bool {
	switch {
	case s.off == 0:
		if c != '"' {
			return false
		}
	case s.esc:
		if !strings.ContainsRune(`"\\/bfnrt`, rune(c)) {
			return false
		}
		s.esc, s.nonSpace = false, true
	case c == '"':
		if seg.nonEmpty && !s.nonSpace {
			return false
		}
		g.next(s)
		return true
	case c == '\\':
		if int(s.off) > seg.cap {
			return false
		}
		s.esc = true
	case c < 0x20 || int(s.off) > seg.cap:
		return false
	default:
		if c != ' ' {
			s.nonSpace = true
		}
	}
	s.off++
	return true
}

// done reports whether the response is complete (only EOS may follow).
func (g *grammar) done(s *gstate) bool {
	return s.action >= 0 && g.prog(s)[s.seg].kind == segEnd
}

// completion is the shortest text that completes the response from s
// (what the automaton forces when the token budget runs out), and fixed
// is the text it forces from s because it offers no choice there.
func (g *grammar) completion(s gstate) string {
	var b strings.Builder
	for !g.done(&s) {
		seg := g.prog(&s)[s.seg]
		var c byte
		switch seg.kind {
		case segLit:
			c = seg.lit[s.off]
		case segLine:
			c = '\n'
			if !s.nonSpace {
				c = '-'
			}
		case segChoice:
			c = seg.options[s.lo][s.off]
			if s.off == 0 {
				// The shortest harmless action: List Files.
				for i, o := range seg.options {
					if o == env.ListFiles+"\n" {
						c = seg.options[i][0]
					}
				}
			}
		case segStr:
			switch {
			case seg.options != nil:
				c = seg.options[s.lo][s.off]
			case s.off == 0 || s.esc:
				c = '"'
				if s.esc {
					c = 'n'
				}
			case seg.nonEmpty && !s.nonSpace:
				c = '-'
			default:
				c = '"'
			}
		case segInt:
			lo, hi := g.intBounds(&s, seg)
			if int(s.num) >= lo && s.off > 0 {
				c = g.progs[s.action][s.seg+1].lit[0]
				break
			}
			for d := byte('0'); d <= '9'; d++ {
				if (s.off > 0 || d > '0') && canComplete(int(s.num)*10+int(d-'0'), lo, hi) {
					c = d
					break
				}
			}
		}
		if !g.step(&s, c) {
			break // cannot happen: every case picks an accepted byte
		}
		b.WriteByte(c)
	}
	return b.String()
}

// closeFree is the shortest text that ends the free text s is in (a
// Reflection or Thought line, a free string argument), then what is fixed
// after it; "" when s is not in free text.
func (g *grammar) closeFree(s gstate) string {
	seg := g.prog(&s)[s.seg]
	var close string
	switch {
	case seg.kind == segLine:
		close = "\n"
		if !s.nonSpace {
			close = "-\n"
		}
	case seg.kind == segStr && seg.options == nil && s.off > 0:
		if s.esc {
			close = "n"
		}
		if seg.nonEmpty && !s.nonSpace && !s.esc {
			close += "-"
		}
		close += `"`
	default:
		return ""
	}
	for i := range len(close) {
		if !g.step(&s, close[i]) {
			return ""
		}
	}
	return close + g.fixed(s)
}

// fixed is the text the automaton admits only one way from s (up to the
// next choice).
func (g *grammar) fixed(s gstate) string {
	var b strings.Builder
	for !g.done(&s) {
		seg := g.prog(&s)[s.seg]
		var c byte
		switch {
		case seg.kind == segLit:
			c = seg.lit[s.off]
		case (seg.kind == segChoice || seg.kind == segStr && seg.options != nil) && s.hi-s.lo == 1:
			c = seg.options[s.lo][s.off]
		case seg.kind == segStr && seg.options == nil && s.off == 0:
			c = '"'
		default:
			return b.String()
		}
		if !g.step(&s, c) {
			return b.String()
		}
		b.WriteByte(c)
	}
	return b.String()
}

// cacheKey identifies states whose token mask is the same whatever came
// before: inside free text far from its length cap (the common case of a
// long Reflection); ok is false for other states.
func (g *grammar) cacheKey(s gstate) (key [3]int32, ok bool) {
	seg := g.prog(&s)[s.seg]
	const margin = 128 // longer than any token
	switch {
	case seg.kind == segLine && int(s.off)+margin < seg.cap:
		return [3]int32{int32(s.action), int32(s.seg), b2i(s.nonSpace)}, true
	case seg.kind == segStr && seg.options == nil && s.off > 0 && !s.esc && int(s.off)+margin < seg.cap:
		return [3]int32{int32(s.action), int32(s.seg), 2 + b2i(s.nonSpace)}, true
	}
	return key, false
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// The masks' tables. A grammar state's mask is the set of tokens all of
// whose bytes the automaton accepts from it: a walk of a byte trie of the
// vocabulary's tokens, pruned at the first byte refused. Inside free text
// (a Reflection line, a free string argument) nearly every token is
// accepted whatever the grammar around it, so that walk would visit the
// whole trie (a million nodes for Qwen's 151k tokens): there, as
// XGrammar does with its context-independent tokens, the tokens whose
// every byte keeps the automaton inside the same free text (plain tokens:
// no newline for a line, no quote, backslash or control byte for a
// string, at most freeTokenMax bytes) come from a set computed once per
// vocabulary, and only the others (a few thousand) are walked.

// byteTrie is a trie of token byte strings in flat arrays: node i's
// children are nodes[kids[i]:kids[i+1]]-style ranges (kidLo, kidHi),
// sorted by byte, and the tokens ending at it ids[idLo:idHi].
type byteTrie struct {
	nodes []trieNode
	ids   []int32
}

type trieNode struct {
	b            byte
	idLo, idHi   int32
	kidLo, kidHi int32
}

// newByteTrie builds the trie of the tokens (id, bytes) given; empty
// byte strings are left out.
func newByteTrie(toks []tokenBytes) *byteTrie {
	sorted := slices.Clone(toks)
	sorted = slices.DeleteFunc(sorted, func(t tokenBytes) bool { return len(t.b) == 0 })
	slices.SortFunc(sorted, func(a, b tokenBytes) int {
		if c := bytes.Compare(a.b, b.b); c != 0 {
			return c
		}
		return int(a.id - b.id)
	})
	t := &byteTrie{nodes: []trieNode{{}}}
	// fill makes node n's tokens and children from sorted[lo:hi], every
	// one of which has node n's depth-byte prefix; children are allocated
	// together (contiguous) before any of them is filled.
	var fill func(n int32, lo, hi, depth int)
	fill = func(n int32, lo, hi, depth int) {
		t.nodes[n].idLo = int32(len(t.ids))
		for lo < hi && len(sorted[lo].b) == depth {
			t.ids = append(t.ids, sorted[lo].id)
			lo++
		}
		t.nodes[n].idHi = int32(len(t.ids))
		type span struct{ lo, hi int }
		var groups []span
		for i := lo; i < hi; {
			j := i + 1
			for j < hi && sorted[j].b[depth] == sorted[i].b[depth] {
				j++
			}
			groups = append(groups, span{i, j})
			i = j
		}
		first := int32(len(t.nodes))
		for _, g := range groups {
			t.nodes = append(t.nodes, trieNode{b: sorted[g.lo].b[depth]})
		}
		t.nodes[n].kidLo, t.nodes[n].kidHi = first, first+int32(len(groups))
		for k, g := range groups {
			fill(first+int32(k), g.lo, g.hi, depth+1)
		}
	}
	fill(0, 0, len(sorted), 0)
	return t
}

// walk adds to mask every token whose bytes g accepts from s.
func (t *byteTrie) walk(g *grammar, s gstate, mask Bitset) {
	var rec func(n int32, s gstate)
	rec = func(n int32, s gstate) {
		node := &t.nodes[n]
		for _, id := range t.ids[node.idLo:node.idHi] {
			mask.Set(id)
		}
		for k := node.kidLo; k < node.kidHi; k++ {
			s2 := s
			if g.step(&s2, t.nodes[k].b) {
				rec(k, s2)
			}
		}
	}
	rec(0, s)
}

type tokenBytes struct {
	id int32
	b  []byte
}

// freeTokenMax is the longest plain token: free text this far from its
// length cap accepts every plain token (the cache's margin, below).
const freeTokenMax = 128

// freeKind is a kind of free text: a line, or the inside of a JSON string.
type freeKind int

const (
	freeLine freeKind = iota
	freeString
	numFreeKinds
)

// plainByte reports whether c keeps free text of kind k going.
func plainByte(k freeKind, c byte) bool {
	if k == freeLine {
		return c != '\n' && c != '\r' && c != 0
	}
	return c != '"' && c != '\\' && c >= 0x20
}

// freeTables are one kind of free text's context-independent tokens:
// the plain ones as a mask and by length (for states near the length
// cap), and a trie of the rest, which the automaton walks.
type freeTables struct {
	plain   Bitset
	byLen   []int32 // plain ids sorted by byte length
	lens    []int   // their lengths, ascending
	depends *byteTrie
}

// grammarTables are what every constraint of one policy shares: each
// model id's bytes, their trie, and the free-text tables.
type grammarTables struct {
	bytes [][]byte
	trie  *byteTrie
	free  [numFreeKinds]freeTables
	// single marks the bytes that have a one-byte token: text made of
	// them can always be written. A Hugging Face vocabulary may lack some
	// (SmolLM2's has no token for 0x04, 0xf1 and 19 more); tokenizer.Read
	// requires tab, newline, carriage return and printable ASCII, which
	// covers every byte the action format itself writes.
	single [256]bool
}

var tablesCache sync.Map // Policy.tablesKey() -> *grammarTables

// tables returns the policy's grammar tables, built on first use.
func (p *Policy) tables() *grammarTables {
	key := p.tablesKey()
	if t, ok := tablesCache.Load(key); ok {
		return t.(*grammarTables)
	}
	tablesBuild.Lock()
	defer tablesBuild.Unlock()
	if t, ok := tablesCache.Load(key); ok {
		return t.(*grammarTables)
	}
	n := p.Size()
	t := &grammarTables{bytes: make([][]byte, n)}
	var all []tokenBytes
	for m := range int32(n) {
		if b := p.TokenBytes(m); len(b) > 0 {
			t.bytes[m] = b
			all = append(all, tokenBytes{m, b})
			if len(b) == 1 {
				t.single[b[0]] = true
			}
		}
	}
	t.trie = newByteTrie(all)
	for k := range numFreeKinds {
		ft := &t.free[k]
		ft.plain = NewBitset(n)
		var dep []tokenBytes
		for _, tb := range all {
			plain := len(tb.b) <= freeTokenMax
			for _, c := range tb.b {
				plain = plain && plainByte(k, c)
			}
			if plain {
				ft.plain.Set(tb.id)
				ft.byLen = append(ft.byLen, tb.id)
			} else {
				dep = append(dep, tb)
			}
		}
		slices.SortStableFunc(ft.byLen, func(a, b int32) int { return len(t.bytes[a]) - len(t.bytes[b]) })
		for _, id := range ft.byLen {
			ft.lens = append(ft.lens, len(t.bytes[id]))
		}
		ft.depends = newByteTrie(dep)
	}
	tablesCache.Store(key, t)
	return t
}

// actionConstraint is the Constraint of one row.
type actionConstraint struct {
	p     *Policy
	g     *grammar
	t     *grammarTables
	s     gstate
	text  []byte  // the response so far
	toks  []int32 // its tokens
	cache map[[3]int32]Bitset
	// margin bounds how much one sampled token can lengthen the shortest
	// completion (choosing a long action, or a long idea): the budget is
	// tight when it cannot absorb that.
	margin int
}

// jumpMargin is the longest shortest-completion of an action's input plus
// the longest enumerated value, in tokens, plus slack.
func (c *actionConstraint) jumpMargin() int {
	count := func(s string) int {
		ids, err := c.p.Encode(s)
		if err != nil {
			return len(s)
		}
		return len(ids)
	}
	m := 0
	for a := range c.g.progs {
		s := gstate{action: int16(a), script: -1}
		c.g.enter(&s)
		m = max(m, count(c.g.completion(s)))
	}
	longest := 0
	for _, opts := range [][]string{c.g.files, c.g.ideas, c.g.dirs} {
		for _, o := range opts {
			longest = max(longest, count(o))
		}
	}
	return m + longest + 4
}

// ActionGrammar returns the constraint of one response under gc. Values
// the policy's vocabulary cannot write (a file or idea holding a byte that
// has no token, as JSON writes it) are not offered: a response could
// never complete them.
func (gen Generator) ActionGrammar(gc GrammarContext) Constraint {
	t := gen.Policy.tables()
	g := newGrammar(writable(gc, &t.single))
	return &actionConstraint{p: gen.Policy, g: g, t: t, s: g.initial(), cache: map[[3]int32]Bitset{}}
}

// writable returns gc without the files, ideas and undoable scripts whose
// JSON-quoted bytes are not all in single (a list emptied stays non-nil:
// none to offer, not any).
func writable(gc GrammarContext, single *[256]bool) GrammarContext {
	keep := func(opts []string) []string {
		if opts == nil {
			return nil
		}
		out := make([]string, 0, len(opts))
		for _, o := range opts {
			ok := true
			for _, c := range []byte(jsonQuote(o)) {
				ok = ok && single[c]
			}
			if ok {
				out = append(out, o)
			}
		}
		return out
	}
	gc.Files, gc.Ideas, gc.Undoable = keep(gc.Files), keep(gc.Ideas), keep(gc.Undoable)
	return gc
}

// freeState says whether s is inside free text past its opening (a line,
// or a free string after its quote and not after a backslash), which
// kind, and how many more bytes the automaton accepts in it.
func (g *grammar) freeState(s gstate) (k freeKind, room int, ok bool) {
	seg := g.prog(&s)[s.seg]
	switch {
	case seg.kind == segLine:
		return freeLine, seg.cap - int(s.off), true
	case seg.kind == segStr && seg.options == nil && s.off > 0 && !s.esc:
		return freeString, seg.cap - int(s.off) + 1, true
	}
	return 0, 0, false
}

// Allowed adds the ids whose bytes the automaton accepts from the current
// state and after which the response can still be completed within limit
// tokens (EOS only once the response is complete).
func (c *actionConstraint) Allowed(mask Bitset, limit int) error {
	if c.g.done(&c.s) {
		mask.Set(c.p.EOS())
		return nil
	}
	key, cacheable := c.g.cacheKey(c.s)
	if cacheable {
		if m, ok := c.cache[key]; ok {
			copy(mask, m)
			return nil
		}
	}
	if k, room, ok := c.g.freeState(c.s); ok {
		// The plain tokens that fit the room left, then a walk of the rest.
		ft := &c.t.free[k]
		if room >= freeTokenMax {
			copy(mask, ft.plain)
		} else {
			n, _ := slices.BinarySearch(ft.lens, room+1)
			for _, id := range ft.byLen[:n] {
				mask.Set(id)
			}
		}
		ft.depends.walk(c.g, c.s, mask)
	} else {
		c.t.trie.walk(c.g, c.s, mask)
	}
	if mask.Count() == 0 {
		return fmt.Errorf("grammar: no token continues %q", c.text)
	}
	if cacheable {
		c.cache[key] = append(Bitset(nil), mask...)
		return nil
	}
	if err := c.fitBudget(mask, limit); err != nil {
		return err
	}
	return nil
}

// InFreeText reports whether the next token is written inside free text
// (a Reflection or Thought line, a free string argument such as
// things_to_look_for or edit_text): text that the environment does not
// act on, or not as a choice among options. PPO leaves such tokens out
// of its policy-gradient and KL terms (free_text: mask).
func (c *actionConstraint) InFreeText() bool {
	if c.g.done(&c.s) {
		return false
	}
	seg := c.g.prog(&c.s)[c.s.seg]
	return seg.kind == segLine || seg.kind == segStr && seg.options == nil
}

// Accept advances the automaton by the token's bytes.
func (c *actionConstraint) Accept(tok int32) error {
	if c.p.IsStop(tok) {
		return nil
	}
	for _, b := range c.t.bytes[tok] {
		if !c.g.step(&c.s, b) {
			return fmt.Errorf("grammar: token %q does not continue %q", c.t.bytes[tok], c.text)
		}
	}
	c.text = append(c.text, c.t.bytes[tok]...)
	c.toks = append(c.toks, tok)
	return nil
}

// Forced returns the tokens the grammar fixes next: EOS once complete;
// when the budget of limit tokens runs low, the end of the free text being
// written, or the whole shortest completion when no choice fits anymore;
// else the fixed text up to the next choice, tokenised together with the
// last tokens so that the split is the tokenizer's own (when the tokenizer
// would merge the fixed text into the last token, it is tokenised on its
// own: still the same text).
func (c *actionConstraint) Forced(limit int) ([]int32, error) {
	if c.g.done(&c.s) {
		return []int32{c.p.EOS()}, nil
	}
	comp := c.g.completion(c.s)
	compToks, err := c.encodeAfter(comp)
	if err != nil {
		return nil, err
	}
	// The shortest completion, then EOS, always fits: the masks and the
	// forcing below keep it so (if a tokenisation surprise ever broke it,
	// the completion is forced anyway and the budget cuts it).
	if len(compToks)+1+budgetSlack >= limit {
		return compToks, nil
	}
	if close := c.g.closeFree(c.s); close != "" {
		// In free text: end it while what follows still fits, counting the
		// pieces as they will be tokenised (closing text now, the rest later).
		closeToks, err := c.encodeAfter(close)
		if err != nil {
			return nil, err
		}
		after := c.s
		for i := range len(close) {
			c.g.step(&after, close[i])
		}
		rest, err := c.p.Encode(c.g.completion(after))
		if err != nil {
			return nil, err
		}
		if needClose := len(closeToks) + len(rest) + 1 + budgetSlack; needClose+freeMargin >= limit {
			if needClose <= limit {
				return closeToks, nil
			}
			return compToks, nil
		}
	}
	fixed := c.g.fixed(c.s)
	if fixed == "" {
		return nil, nil
	}
	toks, err := c.encodeAfter(fixed)
	if err != nil {
		return nil, err
	}
	// The fixed text's last token is left to the model (under the mask)
	// unless the response ends there: the tokenizer would often merge it
	// with what follows ("Action: " then "Execute" is written ":" " Execute",
	// the space going with the word), and a forced split the policy never
	// saw in training derails it.
	end := c.s
	for i := range len(fixed) {
		c.g.step(&end, fixed[i])
	}
	if !c.g.done(&end) && len(toks) > 0 {
		toks = toks[:len(toks)-1]
	}
	return toks, nil
}

// freeMargin is how close to the budget free text may run before the
// grammar ends it, and budgetSlack what the estimates keep in reserve for
// tokenisations of pieces that differ from the whole's.
const (
	freeMargin  = 3
	budgetSlack = 2
)

// fitBudget removes from mask the tokens after which the shortest
// completion (and EOS) no longer fits in limit tokens. It only works when
// the budget could matter (a choice of action or value whose completions
// differ in length), since it encodes a completion per candidate.
func (c *actionConstraint) fitBudget(mask Bitset, limit int) error {
	seg := c.g.prog(&c.s)[c.s.seg]
	if seg.kind == segLine || seg.kind == segStr && seg.options == nil {
		return nil // Forced ends free text in time
	}
	if c.margin == 0 {
		c.margin = c.jumpMargin()
	}
	here, err := c.encodeAfter(c.g.completion(c.s))
	if err != nil {
		return err
	}
	if len(here)+c.margin < limit {
		return nil
	}
	for w := range mask {
		for bits := mask[w]; bits != 0; bits &= bits - 1 {
			id := int32(w*64 + trailingZeros(bits))
			if id == c.p.EOS() {
				continue
			}
			s := c.s
			ok := true
			for _, b := range c.t.bytes[id] {
				if ok = c.g.step(&s, b); !ok {
					break
				}
			}
			if !ok {
				continue
			}
			n := 0
			if !c.g.done(&s) {
				ids, err := c.p.Encode(c.g.completion(s))
				if err != nil {
					return err
				}
				n = len(ids)
			}
			if 1+n+1+budgetSlack > limit {
				mask[w] &^= 1 << (uint(id) & 63)
			}
		}
	}
	if mask.Count() == 0 {
		// Estimates of pieces can disagree with the whole by a token: take
		// the shortest completion's first token.
		mask.Set(here[0])
	}
	return nil
}

func trailingZeros(x uint64) int {
	n := 0
	for x&1 == 0 {
		x >>= 1
		n++
	}
	return n
}

// encodeAfter tokenises text as it would be tokenised after the response
// so far: the last tokens' text plus text, keeping the part after those
// tokens when the tokenizer reproduces them (else text on its own).
func (c *actionConstraint) encodeAfter(text string) ([]int32, error) {
	k := min(2, len(c.toks))
	prev := string(c.text[len(c.text)-len(c.tokText(c.toks[len(c.toks)-k:])):])
	ids, err := c.p.Encode(prev + text)
	if err == nil && len(ids) >= k && int32sEqual(ids[:k], c.toks[len(c.toks)-k:]) {
		return ids[k:], nil
	}
	return c.p.Encode(text)
}

func (c *actionConstraint) tokText(toks []int32) []byte {
	var b []byte
	for _, t := range toks {
		b = append(b, c.t.bytes[t]...)
	}
	return b
}

func int32sEqual(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// GrammarText returns text that holds every token of the action grammar:
// the field names, the action names and argument keys, JSON punctuation
// and digits (the vocabulary must be able to write them as they are
// written in training).
func GrammarText() string {
	var b strings.Builder
	for _, a := range env.ActionNames() {
		var args []string
		for _, k := range env.ActionArgs(a) {
			kq, _ := json.Marshal(k)
			args = append(args, string(kq)+": \"x\"")
		}
		b.WriteString("Reflection: -\nThought: -\nAction: " + a + "\nAction Input: {" + strings.Join(args, ", ") + "}\n")
	}
	b.WriteString("0123456789 10 20 50 100\n")
	return b.String()
}
