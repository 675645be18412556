package env

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/mlerl/mlerl/internal/textutil"
)

// Action names (MLAgentBench).
const (
	ListFiles          = "List Files"
	UnderstandFile     = "Understand File"
	InspectScriptLines = "Inspect Script Lines"
	EditScriptSegment  = "Edit Script Segment"
	EditScriptAI       = "Edit Script (AI)"
	ExecuteScript      = "Execute Script"
	UndoEditScript     = "Undo Edit Script"
	CopyFile           = "Copy File"
	FinalAnswer        = "Final Answer"
)

// Response fields, in the order [Render] writes them.
const (
	FieldReflection  = "Reflection"
	FieldThought     = "Thought"
	FieldAction      = "Action"
	FieldActionInput = "Action Input"
)

var fieldOrder = []string{FieldReflection, FieldThought, FieldAction, FieldActionInput}

// MaxInspectLines bounds Inspect Script Lines.
const MaxInspectLines = 100

// argKind is the JSON type an argument must have.
type argKind int

const (
	argString argKind = iota // a non-empty string
	argText                  // a string, possibly empty
	argLine                  // a positive integer
)

type argSpec struct {
	name string
	kind argKind
}

// actionArgs lists each action's arguments in canonical order; all are
// required.
var actionArgs = map[string][]argSpec{
	ListFiles:          {{"dir_path", argString}},
	UnderstandFile:     {{"file_name", argString}, {"things_to_look_for", argString}},
	InspectScriptLines: {{"script_name", argString}, {"start_line_number", argLine}, {"end_line_number", argLine}},
	EditScriptSegment:  {{"script_name", argString}, {"start_line_number", argLine}, {"end_line_number", argLine}, {"edit_text", argText}},
	EditScriptAI:       {{"script_name", argString}, {"edit_instruction", argString}, {"save_name", argString}},
	ExecuteScript:      {{"script_name", argString}},
	UndoEditScript:     {{"script_name", argString}},
	CopyFile:           {{"source", argString}, {"destination", argString}},
	FinalAnswer:        {{"final_answer", argText}},
}

// ActionNames lists every action name in a stable order.
func ActionNames() []string {
	return []string{ListFiles, UnderstandFile, InspectScriptLines, EditScriptSegment, EditScriptAI, ExecuteScript, UndoEditScript, CopyFile, FinalAnswer}
}

// ActionArgs returns the argument names of an action, in canonical order
// (nil for an unknown action).
func ActionArgs(name string) []string {
	var out []string
	for _, a := range actionArgs[name] {
		out = append(out, a.name)
	}
	return out
}

// ActionArgType returns the JSON Schema type of an action's argument:
// "integer" for line numbers, "string" otherwise, "" when the action has
// no such argument.
func ActionArgType(name, arg string) string {
	for _, a := range actionArgs[name] {
		if a.name == arg {
			if a.kind == argLine {
				return "integer"
			}
			return "string"
		}
	}
	return ""
}

// Action is one parsed agent action. Name is one of the action constants;
// only the fields of that action's arguments are meaningful (the others
// are zero). Line numbers are 1-based and inclusive.
type Action struct {
	Reflection string
	Thought    string
	Name       string

	DirPath         string // List Files
	FileName        string // Understand File
	ThingsToLookFor string // Understand File
	ScriptName      string // Inspect/Edit/Execute/Undo
	StartLine       int    // Inspect Script Lines, Edit Script Segment
	EndLine         int    // Inspect Script Lines, Edit Script Segment
	EditText        string // Edit Script Segment
	EditInstruction string // Edit Script (AI)
	SaveName        string // Edit Script (AI)
	Source          string // Copy File
	Destination     string // Copy File
	Answer          string // Final Answer
}

// field returns a pointer to the Action field holding argument name.
func (a *Action) strField(name string) *string {
	switch name {
	case "dir_path":
		return &a.DirPath
	case "file_name":
		return &a.FileName
	case "things_to_look_for":
		return &a.ThingsToLookFor
	case "script_name":
		return &a.ScriptName
	case "edit_text":
		return &a.EditText
	case "edit_instruction":
		return &a.EditInstruction
	case "save_name":
		return &a.SaveName
	case "source":
		return &a.Source
	case "destination":
		return &a.Destination
	case "final_answer":
		return &a.Answer
	}
	return nil
}

func (a *Action) intField(name string) *int {
	switch name {
	case "start_line_number":
		return &a.StartLine
	case "end_line_number":
		return &a.EndLine
	}
	return nil
}

// Input returns the action's arguments as a JSON object with keys in
// canonical order (the steps dataset's action_input column).
func (a Action) Input() string {
	var b bytes.Buffer
	b.WriteString("{")
	for i, s := range actionArgs[a.Name] {
		if i > 0 {
			b.WriteString(", ")
		}
		k, _ := json.Marshal(s.name)
		b.Write(k)
		b.WriteString(": ")
		b.Write(a.argJSON(s))
	}
	b.WriteString("}")
	return b.String()
}

func (a Action) argJSON(s argSpec) []byte {
	var v []byte
	if s.kind == argLine {
		v, _ = json.Marshal(*a.intField(s.name))
	} else {
		v = marshalNoEscape(*a.strField(s.name))
	}
	return v
}

// marshalNoEscape encodes a string as JSON without HTML escaping (so code
// with < and & stays readable).
func marshalNoEscape(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return bytes.TrimRight(b.Bytes(), "\n")
}

// Render returns the canonical text of an action: the four fields, one
// per line, the Action Input as indented JSON with arguments in canonical
// order. Parse(Render(a)) returns a again for any action Parse accepts. A
// line of Reflection or Thought that starts like a field ("Action: ...")
// is indented by one space so that it stays part of its field.
func Render(a Action) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s\n", FieldReflection, guardFields(a.Reflection))
	fmt.Fprintf(&b, "%s: %s\n", FieldThought, guardFields(a.Thought))
	fmt.Fprintf(&b, "%s: %s\n", FieldAction, a.Name)
	fmt.Fprintf(&b, "%s: {\n", FieldActionInput)
	specs := actionArgs[a.Name]
	for i, s := range specs {
		k, _ := json.Marshal(s.name)
		fmt.Fprintf(&b, "    %s: %s", k, a.argJSON(s))
		if i < len(specs)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("}")
	return b.String()
}

// guardFields indents the lines of free text that would start a field.
func guardFields(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		for _, f := range fieldOrder {
			if i > 0 && strings.HasPrefix(l, f+":") {
				lines[i] = " " + l
				break
			}
		}
	}
	return strings.Join(lines, "\n")
}

// FormatErrorKind classifies a response that does not parse.
type FormatErrorKind string

// Format error kinds.
const (
	MissingField     FormatErrorKind = "missing_field"     // a required field line is absent or empty
	DuplicateField   FormatErrorKind = "duplicate_field"   // a field appears twice
	UnknownAction    FormatErrorKind = "unknown_action"    // Action names no known action
	BadJSON          FormatErrorKind = "bad_json"          // Action Input is not one JSON object
	MissingArgument  FormatErrorKind = "missing_argument"  // a required argument is absent
	BadArgumentType  FormatErrorKind = "bad_argument_type" // an argument has the wrong JSON type
	BadArgumentValue FormatErrorKind = "bad_argument_value"
	UnknownArgument  FormatErrorKind = "unknown_argument" // an argument the action does not take
	ExtraText        FormatErrorKind = "extra_text"       // text outside the fields
)

// FormatError says exactly what is wrong with a response. Field is the
// response field or action argument concerned ("" when none).
type FormatError struct {
	Kind   FormatErrorKind
	Field  string
	Detail string
}

func (e *FormatError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("format error (%s): %s", e.Kind, e.Detail)
	}
	return fmt.Sprintf("format error (%s) in %q: %s", e.Kind, e.Field, e.Detail)
}

func formatErr(kind FormatErrorKind, field, format string, args ...any) *FormatError {
	return &FormatError{Kind: kind, Field: field, Detail: fmt.Sprintf(format, args...)}
}

// Parse reads an agent response. The response must consist of the field
// lines "Reflection:", "Thought:", "Action:" and "Action Input:" (each at
// the start of a line, in this order, each exactly once); Reflection and
// Thought may span several lines, Action is one line naming an action, and
// Action Input is one JSON object (optionally inside one ```json code
// fence) holding exactly that action's arguments, followed by nothing but
// white space. Windows line ends are accepted. Every failure is a
// *FormatError; Parse never panics.
func Parse(text string) (Action, error) {
	var a Action
	text = strings.ReplaceAll(text, "\r\n", "\n")
	fields, err := splitFields(text)
	if err != nil {
		return a, err
	}
	a.Reflection = fields[FieldReflection]
	a.Thought = fields[FieldThought]
	a.Name = fields[FieldAction]
	if strings.Contains(a.Name, "\n") {
		return a, formatErr(ExtraText, FieldAction, "the Action line must hold only the action name; put reasoning in Thought")
	}
	specs, ok := actionArgs[a.Name]
	if !ok {
		return a, formatErr(UnknownAction, FieldAction, "%q is not an action; %s", textutil.Clip(a.Name, 60), suggestAction(a.Name))
	}
	raw, ferr := unfence(fields[FieldActionInput])
	if ferr != nil {
		return a, ferr
	}
	args, ferr := decodeObject(raw)
	if ferr != nil {
		return a, ferr
	}
	known := map[string]bool{}
	for _, s := range specs {
		known[s.name] = true
		v, ok := args[s.name]
		if !ok {
			return a, formatErr(MissingArgument, s.name, "%s needs %q; its arguments are %s", a.Name, s.name, strings.Join(ActionArgs(a.Name), ", "))
		}
		if err := setArg(&a, s, v); err != nil {
			return a, err
		}
	}
	var extra []string
	for k := range args {
		if !known[k] {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return a, formatErr(UnknownArgument, extra[0], "%s does not take %q; its arguments are %s", a.Name, extra[0], strings.Join(ActionArgs(a.Name), ", "))
	}
	if (a.Name == InspectScriptLines || a.Name == EditScriptSegment) && a.EndLine < a.StartLine-1 {
		return a, formatErr(BadArgumentValue, "end_line_number", "end_line_number %d is before start_line_number %d", a.EndLine, a.StartLine)
	}
	if a.Name == InspectScriptLines && a.EndLine < a.StartLine {
		return a, formatErr(BadArgumentValue, "end_line_number", "end_line_number %d is before start_line_number %d", a.EndLine, a.StartLine)
	}
	return a, nil
}

// splitFields cuts the response into its four fields.
func splitFields(text string) (map[string]string, error) {
	type at struct {
		name       string
		line, body int // byte offsets of the field line and of its value
	}
	var found []at
	seen := map[string]bool{}
	off := 0
	for _, line := range strings.SplitAfter(text, "\n") {
		for _, f := range fieldOrder {
			if strings.HasPrefix(line, f+":") {
				if seen[f] {
					return nil, formatErr(DuplicateField, f, "the field %q appears more than once; answer with one action per response", f)
				}
				seen[f] = true
				found = append(found, at{f, off, off + len(f) + 1})
				break
			}
		}
		off += len(line)
	}
	for _, f := range fieldOrder {
		if !seen[f] {
			return nil, formatErr(MissingField, f, "no line starts with %q; a response has the fields %s, each at the start of a line", f+":", strings.Join(fieldOrder, ", "))
		}
	}
	for i, f := range found {
		if f.name != fieldOrder[i] {
			return nil, formatErr(ExtraText, f.name, "fields out of order: want %s", strings.Join(fieldOrder, ", then "))
		}
	}
	if lead := strings.TrimSpace(text[:found[0].line]); lead != "" {
		return nil, formatErr(ExtraText, "", "text before %q: %q; start the response with the Reflection field", FieldReflection+":", textutil.Clip(lead, 60))
	}
	out := map[string]string{}
	for i, f := range found {
		end := len(text)
		if i+1 < len(found) {
			end = found[i+1].line
		}
		v := strings.TrimSpace(text[f.body:end])
		if v == "" {
			return nil, formatErr(MissingField, f.name, "the field %q is empty", f.name)
		}
		out[f.name] = v
	}
	return out, nil
}

// unfence strips one optional ```json ... ``` fence around the input.
func unfence(s string) (string, *FormatError) {
	if !strings.HasPrefix(s, "```") {
		return s, nil
	}
	nl := strings.IndexByte(s, '\n')
	if nl < 0 {
		return "", formatErr(BadJSON, FieldActionInput, "an unterminated code fence; write the JSON object directly")
	}
	if lang := strings.TrimSpace(s[3:nl]); lang != "" && lang != "json" {
		return "", formatErr(BadJSON, FieldActionInput, "a %q code fence; Action Input is a JSON object", textutil.Clip(lang, 20))
	}
	body := s[nl+1:]
	end := strings.LastIndex(body, "```")
	if end < 0 {
		return "", formatErr(BadJSON, FieldActionInput, "an unterminated code fence; write the JSON object directly")
	}
	if rest := strings.TrimSpace(body[end+3:]); rest != "" {
		return "", formatErr(ExtraText, FieldActionInput, "text after the Action Input: %q", textutil.Clip(rest, 60))
	}
	return strings.TrimSpace(body[:end]), nil
}

// decodeObject reads exactly one JSON object; duplicate keys are refused.
func decodeObject(s string) (map[string]json.RawMessage, *FormatError) {
	if !strings.HasPrefix(s, "{") {
		return nil, formatErr(BadJSON, FieldActionInput, "Action Input must be a JSON object starting with '{', got %q", textutil.Clip(s, 40))
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, formatErr(BadJSON, FieldActionInput, "not valid JSON: %v", err)
	}
	if rest := strings.TrimSpace(s[dec.InputOffset():]); rest != "" {
		return nil, formatErr(ExtraText, FieldActionInput, "text after the JSON object: %q; end the response after the Action Input", textutil.Clip(rest, 60))
	}
	// Walk the keys to catch duplicates, which Unmarshal silently merges.
	kd := json.NewDecoder(bytes.NewReader(raw))
	kd.UseNumber()
	if _, err := kd.Token(); err != nil {
		return nil, formatErr(BadJSON, FieldActionInput, "not valid JSON: %v", err)
	}
	out := map[string]json.RawMessage{}
	for kd.More() {
		t, err := kd.Token()
		if err != nil {
			return nil, formatErr(BadJSON, FieldActionInput, "not valid JSON: %v", err)
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := kd.Decode(&v); err != nil {
			return nil, formatErr(BadJSON, FieldActionInput, "not valid JSON: %v", err)
		}
		if _, dup := out[k]; dup {
			return nil, formatErr(BadJSON, k, "the argument %q appears twice", k)
		}
		out[k] = v
	}
	return out, nil
}

func setArg(a *Action, s argSpec, v json.RawMessage) *FormatError {
	switch s.kind {
	case argString, argText:
		var str string
		if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &str) != nil {
			return formatErr(BadArgumentType, s.name, "%q must be a JSON string, got %s", s.name, textutil.Clip(string(v), 40))
		}
		if s.kind == argString && strings.TrimSpace(str) == "" {
			return formatErr(BadArgumentValue, s.name, "%q must not be empty", s.name)
		}
		if strings.ContainsRune(str, 0) {
			return formatErr(BadArgumentValue, s.name, "%q contains a NUL character", s.name)
		}
		*a.strField(s.name) = str
	case argLine:
		var n json.Number
		if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) || json.Unmarshal(v, &n) != nil {
			return formatErr(BadArgumentType, s.name, "%q must be a JSON integer, got %s", s.name, textutil.Clip(string(v), 40))
		}
		f, err := n.Float64()
		if err != nil || f != math.Trunc(f) || math.Abs(f) > 1e9 {
			return formatErr(BadArgumentType, s.name, "%q must be an integer, got %s", s.name, textutil.Clip(n.String(), 40))
		}
		if f < 1 {
			return formatErr(BadArgumentValue, s.name, "%q must be at least 1 (lines are numbered from 1), got %s", s.name, n.String())
		}
		*a.intField(s.name) = int(f)
	}
	return nil
}

// suggestAction names the valid actions, the closest first when the name
// differs only in case or spacing.
func suggestAction(name string) string {
	fold := func(s string) string { return strings.ToLower(strings.Join(strings.Fields(s), " ")) }
	for _, n := range ActionNames() {
		if fold(n) == fold(name) {
			return fmt.Sprintf("did you mean %q? (names are case-sensitive)", n)
		}
	}
	return "the actions are " + strings.Join(ActionNames(), ", ")
}
