package env

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func resp(action, input string) string {
	return "Reflection: I looked at the files.\nThought: next step.\nAction: " + action + "\nAction Input: " + input
}

func TestParseActions(t *testing.T) {
	base := Action{Reflection: "I looked at the files.", Thought: "next step."}
	with := func(f func(a *Action)) Action { a := base; f(&a); return a }
	tests := []struct {
		name string
		text string
		want Action
	}{
		{"list files", resp(ListFiles, `{"dir_path": "."}`), with(func(a *Action) { a.Name = ListFiles; a.DirPath = "." })},
		{"understand file", resp(UnderstandFile, `{"file_name": "train.csv", "things_to_look_for": "columns"}`),
			with(func(a *Action) { a.Name = UnderstandFile; a.FileName = "train.csv"; a.ThingsToLookFor = "columns" })},
		{"inspect", resp(InspectScriptLines, `{"script_name": "train.py", "start_line_number": 1, "end_line_number": 30}`),
			with(func(a *Action) {
				a.Name = InspectScriptLines
				a.ScriptName = "train.py"
				a.StartLine = 1
				a.EndLine = 30
			})},
		{"edit segment", resp(EditScriptSegment, `{"script_name": "train.py", "start_line_number": 3, "end_line_number": 4, "edit_text": "x = 1\ny = 2"}`),
			with(func(a *Action) {
				a.Name = EditScriptSegment
				a.ScriptName = "train.py"
				a.StartLine, a.EndLine = 3, 4
				a.EditText = "x = 1\ny = 2"
			})},
		{"edit segment insert (end = start-1), empty text", resp(EditScriptSegment, `{"script_name": "t.py", "start_line_number": 3, "end_line_number": 2, "edit_text": ""}`),
			with(func(a *Action) { a.Name = EditScriptSegment; a.ScriptName = "t.py"; a.StartLine, a.EndLine = 3, 2 })},
		{"edit ai", resp(EditScriptAI, `{"script_name": "train.py", "edit_instruction": "use a scaler", "save_name": "train.py"}`),
			with(func(a *Action) {
				a.Name = EditScriptAI
				a.ScriptName, a.SaveName = "train.py", "train.py"
				a.EditInstruction = "use a scaler"
			})},
		{"execute", resp(ExecuteScript, `{"script_name": "train.py"}`), with(func(a *Action) { a.Name = ExecuteScript; a.ScriptName = "train.py" })},
		{"undo", resp(UndoEditScript, `{"script_name": "train.py"}`), with(func(a *Action) { a.Name = UndoEditScript; a.ScriptName = "train.py" })},
		{"copy", resp(CopyFile, `{"source": "train.py", "destination": "backup.py"}`),
			with(func(a *Action) { a.Name = CopyFile; a.Source = "train.py"; a.Destination = "backup.py" })},
		{"final answer", resp(FinalAnswer, `{"final_answer": "done"}`), with(func(a *Action) { a.Name = FinalAnswer; a.Answer = "done" })},
		{"multi-line input, CRLF, fenced", strings.ReplaceAll("Reflection: a\nb\nThought: c\nAction: Execute Script\nAction Input: ```json\n{\n  \"script_name\": \"train.py\"\n}\n```\n", "\n", "\r\n"),
			Action{Reflection: "a\nb", Thought: "c", Name: ExecuteScript, ScriptName: "train.py"}},
		{"integer written as 2.0", resp(InspectScriptLines, `{"script_name": "t.py", "start_line_number": 2.0, "end_line_number": 2}`),
			with(func(a *Action) { a.Name = InspectScriptLines; a.ScriptName = "t.py"; a.StartLine, a.EndLine = 2, 2 })},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.text)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
			again, err := Parse(Render(got))
			if err != nil || !reflect.DeepEqual(again, got) {
				t.Fatalf("Parse(Render(a)) = %+v, %v; want %+v\nrendered:\n%s", again, err, got, Render(got))
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name  string
		text  string
		kind  FormatErrorKind
		field string
	}{
		{"empty", "", MissingField, FieldReflection},
		{"no action input", "Reflection: a\nThought: b\nAction: List Files\n", MissingField, FieldActionInput},
		{"no thought", "Reflection: a\nAction: List Files\nAction Input: {\"dir_path\": \".\"}", MissingField, FieldThought},
		{"empty reflection", "Reflection:\nThought: b\nAction: List Files\nAction Input: {\"dir_path\": \".\"}", MissingField, FieldReflection},
		{"duplicate action", resp(ListFiles, `{"dir_path": "."}`) + "\nAction: List Files", DuplicateField, FieldAction},
		{"fields out of order", "Thought: b\nReflection: a\nAction: List Files\nAction Input: {\"dir_path\": \".\"}", ExtraText, FieldThought},
		{"text before", "Sure!\nReflection: a\nThought: b\nAction: List Files\nAction Input: {\"dir_path\": \".\"}", ExtraText, ""},
		{"text after json", resp(ListFiles, `{"dir_path": "."} and then run it`), ExtraText, FieldActionInput},
		{"second object", resp(ListFiles, `{"dir_path": "."} {"dir_path": "."}`), ExtraText, FieldActionInput},
		{"text after fence", resp(ListFiles, "```json\n{\"dir_path\": \".\"}\n```\nok"), ExtraText, FieldActionInput},
		{"two-line action", "Reflection: a\nThought: b\nAction: List Files\nplease\nAction Input: {\"dir_path\": \".\"}", ExtraText, FieldAction},
		{"unknown action", resp("Run Script", `{"script_name": "train.py"}`), UnknownAction, FieldAction},
		{"wrong case action", resp("execute script", `{"script_name": "train.py"}`), UnknownAction, FieldAction},
		{"not json", resp(ListFiles, `dir_path = "."`), BadJSON, FieldActionInput},
		{"broken json", resp(ListFiles, `{"dir_path": ".",}`), BadJSON, FieldActionInput},
		{"json array", resp(ListFiles, `["."]`), BadJSON, FieldActionInput},
		{"unterminated fence", resp(ListFiles, "```json\n{\"dir_path\": \".\"}"), BadJSON, FieldActionInput},
		{"python fence", resp(ListFiles, "```python\n{\"dir_path\": \".\"}\n```"), BadJSON, FieldActionInput},
		{"duplicate key", resp(ListFiles, `{"dir_path": ".", "dir_path": "x"}`), BadJSON, "dir_path"},
		{"missing argument", resp(CopyFile, `{"source": "a.py"}`), MissingArgument, "destination"},
		{"missing save_name", resp(EditScriptAI, `{"script_name": "t.py", "edit_instruction": "x"}`), MissingArgument, "save_name"},
		{"unknown argument", resp(ExecuteScript, `{"script_name": "train.py", "args": "--fast"}`), UnknownArgument, "args"},
		{"string for line", resp(InspectScriptLines, `{"script_name": "t.py", "start_line_number": "1", "end_line_number": 2}`), BadArgumentType, "start_line_number"},
		{"fractional line", resp(InspectScriptLines, `{"script_name": "t.py", "start_line_number": 1.5, "end_line_number": 2}`), BadArgumentType, "start_line_number"},
		{"huge line", resp(InspectScriptLines, `{"script_name": "t.py", "start_line_number": 1e300, "end_line_number": 2}`), BadArgumentType, "start_line_number"},
		{"number for name", resp(ExecuteScript, `{"script_name": 3}`), BadArgumentType, "script_name"},
		{"null for name", resp(ExecuteScript, `{"script_name": null}`), BadArgumentType, "script_name"},
		{"zero line", resp(InspectScriptLines, `{"script_name": "t.py", "start_line_number": 0, "end_line_number": 2}`), BadArgumentValue, "start_line_number"},
		{"end before start", resp(InspectScriptLines, `{"script_name": "t.py", "start_line_number": 5, "end_line_number": 2}`), BadArgumentValue, "end_line_number"},
		{"segment end far before start", resp(EditScriptSegment, `{"script_name": "t.py", "start_line_number": 5, "end_line_number": 2, "edit_text": ""}`), BadArgumentValue, "end_line_number"},
		{"empty name", resp(ExecuteScript, `{"script_name": "  "}`), BadArgumentValue, "script_name"},
		{"nul in name", resp(ExecuteScript, `{"script_name": "a\u0000.py"}`), BadArgumentValue, "script_name"},
	}
	seen := map[FormatErrorKind]bool{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.text)
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("got error %v, want a *FormatError", err)
			}
			if fe.Kind != tc.kind || fe.Field != tc.field {
				t.Fatalf("got kind %s field %q (%v), want kind %s field %q", fe.Kind, fe.Field, fe, tc.kind, tc.field)
			}
			if fe.Detail == "" {
				t.Fatal("empty detail")
			}
			seen[fe.Kind] = true
		})
	}
	for _, k := range []FormatErrorKind{MissingField, DuplicateField, UnknownAction, BadJSON, MissingArgument, BadArgumentType, BadArgumentValue, UnknownArgument, ExtraText} {
		if !seen[k] {
			t.Errorf("no test case for kind %s", k)
		}
	}
}

func TestRenderGuardsFields(t *testing.T) {
	a := Action{Reflection: "It failed.\nAction: was wrong", Thought: "Retry.\nThought: again", Name: ExecuteScript, ScriptName: "train.py"}
	got, err := Parse(Render(a))
	if err != nil {
		t.Fatalf("Parse(Render(a)): %v\n%s", err, Render(a))
	}
	if got.Reflection != "It failed.\n Action: was wrong" || got.Thought != "Retry.\n Thought: again" || got.ScriptName != "train.py" {
		t.Fatalf("got %+v", got)
	}
}

func TestActionInput(t *testing.T) {
	a := Action{Name: EditScriptSegment, ScriptName: "t.py", StartLine: 1, EndLine: 2, EditText: "if a < b & c:\n    pass"}
	got := a.Input()
	want := `{"script_name": "t.py", "start_line_number": 1, "end_line_number": 2, "edit_text": "if a < b & c:\n    pass"}`
	if got != want {
		t.Fatalf("got %s want %s", got, want)
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range ActionNames() {
		var in []string
		for _, a := range ActionArgs(name) {
			if strings.HasSuffix(a, "_number") {
				in = append(in, `"`+a+`": 2`)
			} else {
				in = append(in, `"`+a+`": "x"`)
			}
		}
		f.Add(resp(name, "{"+strings.Join(in, ", ")+"}"))
	}
	f.Add("")
	f.Add("Reflection: a\nThought: b\nAction: Execute Script\nAction Input: ```json\n{\"script_name\": \"t.py\"}\n```")
	f.Add(resp(ListFiles, `{"dir_path": ".", "dir_path": "."}`))
	f.Add(resp(InspectScriptLines, `{"script_name": "t.py", "start_line_number": 1e400, "end_line_number": -0}`))
	f.Add("Reflection: \xff\nThought: \x00\nAction: List Files\nAction Input: {\"dir_path\": \"\\ud800\"}")
	f.Fuzz(func(t *testing.T, text string) {
		a, err := Parse(text)
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) || fe.Detail == "" {
				t.Fatalf("Parse(%q) returned %v, want a *FormatError with a detail", text, err)
			}
			return
		}
		again, err := Parse(Render(a))
		if err != nil || !reflect.DeepEqual(again, a) {
			t.Fatalf("round trip of %q: got %+v, %v; want %+v", text, again, err, a)
		}
	})
}
