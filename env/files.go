package env

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/mlerl/mlerl/internal/llm"
	"github.com/mlerl/mlerl/internal/safefile"
	"github.com/mlerl/mlerl/internal/textutil"
)

// maxFileBytes bounds what an action reads from a workspace file.
const maxFileBytes = 32 << 20

// resolve checks a file argument and returns its clean workspace-relative
// path ("." for the workspace itself) and its absolute path. Absolute
// paths, paths that climb out with "..", and paths through symlinks are
// refused.
func (e *Env) resolve(name string) (rel, abs string, err error) {
	n := strings.TrimSpace(name)
	switch {
	case n == "":
		return "", "", refuse("empty file name")
	case strings.ContainsRune(n, 0):
		return "", "", refuse("file name contains a NUL character")
	case filepath.IsAbs(n) || strings.HasPrefix(n, "/") || strings.HasPrefix(n, `\`) || strings.HasPrefix(n, "~"):
		return "", "", refuse("%q is an absolute path; file arguments are relative to the workspace", textutil.Clip(n, 80))
	}
	c := path.Clean(filepath.ToSlash(n))
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", "", refuse("%q is outside the workspace", textutil.Clip(n, 80))
	}
	// No component may be a symlink (it could point anywhere).
	cur := e.dir
	if c != "." {
		for _, part := range strings.Split(c, "/") {
			cur = filepath.Join(cur, part)
			fi, err := os.Lstat(cur)
			if errors.Is(err, fs.ErrNotExist) {
				break
			}
			if err != nil {
				return "", "", refuse("%s: %v", c, why(err))
			}
			if fi.Mode()&fs.ModeSymlink != 0 {
				return "", "", refuse("%s is a symlink; the environment does not follow symlinks", textutil.Clip(n, 80))
			}
		}
	}
	return c, filepath.Join(e.dir, filepath.FromSlash(c)), nil
}

// readFile reads an existing regular workspace file through
// internal/safefile: no link is followed, nothing but a regular file of
// at most maxFileBytes is read, and a FIFO or device is never opened.
func (e *Env) readFile(rel, _ string) ([]byte, error) {
	b, err := e.ReadFile(rel, maxFileBytes)
	var se *safefile.Error
	switch {
	case errors.Is(err, safefile.ErrNotExist):
		return nil, &refusal{msg: fmt.Sprintf("%s does not exist in the workspace%s", rel, e.nearby(rel)), cause: err}
	case errors.As(err, &se):
		return nil, &refusal{msg: se.Error(), cause: err}
	}
	return b, err
}

// ReadFile reads the workspace file rel as the host side must read
// anything a script may have left: through internal/safefile (no link
// followed, regular files only, at most limit bytes, never blocking). A
// refusal is a *safefile.Error whose text names rel, not the host path.
func (e *Env) ReadFile(rel string, limit int64) ([]byte, error) {
	return safefile.ReadFile(e.dir, rel, safefile.Options{MaxBytes: limit})
}

// regularOrAbsent refuses rel when something other than a regular file
// stands there (a later write would replace it).
func (e *Env) regularOrAbsent(rel string) error {
	f, err := safefile.Open(e.dir, rel, safefile.Options{})
	if err == nil {
		return f.Close()
	}
	var se *safefile.Error
	switch {
	case errors.Is(err, safefile.ErrNotExist):
		return nil
	case errors.As(err, &se):
		return refuse("%s", se.Error())
	}
	return err
}

// nearby lists the files of the workspace root, for refusal messages.
func (e *Env) nearby(string) string {
	ents, err := os.ReadDir(e.dir)
	if err != nil || len(ents) == 0 {
		return ""
	}
	var names []string
	for _, d := range ents {
		names = append(names, displayName(d.Name()))
	}
	sort.Strings(names)
	if len(names) > 20 {
		names = append(names[:20], "...")
	}
	return " (the workspace holds: " + strings.Join(names, ", ") + ")"
}

// displayName is a file name as an observation shows it: as it is, or
// quoted with escapes (as in JSON, "a\nb") when it holds a control
// character, a line or paragraph separator or bytes that are not UTF-8,
// or starts with a quote (so that a quoted name is never ambiguous). A
// name is one line of a listing: a script could otherwise name a file
// "x\nThe script scored 1.0" and write lines of its choosing into the
// agent's observation.
func displayName(name string) string {
	odd := func(r rune) bool { return unicode.IsControl(r) || unicode.In(r, unicode.Zl, unicode.Zp) }
	if !utf8.ValidString(name) || strings.IndexFunc(name, odd) >= 0 || strings.HasPrefix(name, `"`) {
		return strconv.Quote(name)
	}
	return name
}

// writeFile saves content at rel, pushing the previous version (or its
// absence) onto rel's undo stack. Whatever stood at rel is replaced, never
// written through (internal/safefile).
func (e *Env) writeFile(rel, _ string, content []byte) error {
	if rel == "." {
		return refuse("cannot write to the workspace folder itself")
	}
	var backup *[]byte
	old, err := e.readFile(rel, "")
	oldSize := int64(-1)
	switch {
	case err == nil:
		backup, oldSize = &old, int64(len(old))
	case errors.Is(err, safefile.ErrNotExist):
	default:
		return err
	}
	if err := e.checkWrite(rel, int64(len(content)), oldSize); err != nil {
		return err
	}
	if err := safefile.WriteFile(e.dir, rel, content, 0o644); err != nil {
		var se *safefile.Error
		if errors.As(err, &se) {
			return refuse("%s", se.Error())
		}
		return err
	}
	e.s.Backups[rel] = append(e.s.Backups[rel], backup)
	e.s.Edited = true
	return nil
}

// why returns the cause of a path error (without the absolute path,
// which the agent need not see).
func why(err error) error {
	if u := errors.Unwrap(err); u != nil {
		return u
	}
	return err
}

func (e *Env) listFiles(a Action, r *StepResult) error {
	rel, abs, err := e.resolve(a.DirPath)
	if err != nil {
		return err
	}
	ents, err := os.ReadDir(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return refuse("%s does not exist", rel)
	}
	if err != nil {
		return refuse("%s is not a folder", rel)
	}
	var lines []string
	for _, d := range ents {
		switch {
		case d.IsDir():
			lines = append(lines, displayName(d.Name())+"/")
		case d.Type()&fs.ModeSymlink != 0:
			lines = append(lines, displayName(d.Name())+"@")
		default:
			lines = append(lines, displayName(d.Name()))
		}
	}
	sort.Strings(lines)
	r.Outcome = OutcomeSuccess
	if len(lines) == 0 {
		r.Observation = rel + " is empty."
		return nil
	}
	r.Observation = strings.Join(lines, "\n") + "\n"
	return nil
}

func (e *Env) inspect(a Action, r *StepResult) error {
	rel, abs, err := e.resolve(a.ScriptName)
	if err != nil {
		return err
	}
	b, err := e.readFile(rel, abs)
	if err != nil {
		return err
	}
	lines := splitLines(string(b))
	if a.EndLine-a.StartLine+1 > MaxInspectLines {
		return refuse("at most %d lines can be inspected at once (asked for %d to %d)", MaxInspectLines, a.StartLine, a.EndLine)
	}
	if a.StartLine > len(lines) {
		return refuse("%s has %d lines; start_line_number %d is past its end", rel, len(lines), a.StartLine)
	}
	end := min(a.EndLine, len(lines))
	var sb strings.Builder
	fmt.Fprintf(&sb, "Here are the lines (the file ends at line %d):\n\n", len(lines))
	for i := a.StartLine; i <= end; i++ {
		sb.WriteString(lines[i-1])
		sb.WriteString("\n")
	}
	r.Outcome = OutcomeSuccess
	r.Observation = sb.String()
	return nil
}

func (e *Env) editSegment(a Action, r *StepResult) error {
	rel, abs, err := e.resolve(a.ScriptName)
	if err != nil {
		return err
	}
	b, err := e.readFile(rel, abs)
	if err != nil {
		return err
	}
	lines := splitLines(string(b))
	if a.StartLine > len(lines)+1 {
		return refuse("%s has %d lines; start_line_number %d is past its end (use %d to append)", rel, len(lines), a.StartLine, len(lines)+1)
	}
	if a.EndLine > len(lines) {
		return refuse("%s has %d lines; end_line_number %d is past its end", rel, len(lines), a.EndLine)
	}
	var out []string
	out = append(out, lines[:a.StartLine-1]...)
	out = append(out, splitLines(a.EditText)...)
	out = append(out, lines[a.EndLine:]...)
	next := strings.Join(out, "\n")
	if len(out) > 0 {
		next += "\n"
	}
	return e.saveEdit(rel, abs, string(b), next, r)
}

// UnchangedEditPrefix starts the reply to an edit that left its file as
// it was ("The edit left train.py unchanged."); evaluation counts such
// edits by it.
const UnchangedEditPrefix = "The edit left "

// saveEdit writes an edit's result and shows its diff.
func (e *Env) saveEdit(rel, abs, old, next string, r *StepResult) error {
	r.Outcome = OutcomeSuccess
	if next == old {
		r.Observation = UnchangedEditPrefix + rel + " unchanged."
		r.unchanged = true
		return nil
	}
	if err := e.writeFile(rel, abs, []byte(next)); err != nil {
		return err
	}
	r.saved = rel
	r.Observation = "The edited file is saved to " + rel + ". Here is the diff, please check if the edit is correct and desirable:\n\n" + UnifiedDiff(rel, rel, old, next)
	return nil
}

func (e *Env) editAI(ctx context.Context, a Action, r *StepResult) error {
	rel, abs, err := e.resolve(a.ScriptName)
	if err != nil {
		return err
	}
	saveRel, saveAbs, err := e.resolve(a.SaveName)
	if err != nil {
		return err
	}
	old, err := e.readFile(rel, abs)
	if err != nil && !errors.Is(err, safefile.ErrNotExist) {
		return err
	} // a missing script is edited from empty (creating a new file)
	var prevSave string
	if saveRel != rel {
		if err := e.regularOrAbsent(saveRel); err != nil {
			return err
		}
		if b, err := e.readFile(saveRel, saveAbs); err == nil {
			prevSave = string(b)
		}
	} else {
		prevSave = string(old)
	}
	next, usage, err := e.cfg.Editor.Edit(ctx, string(old), a.EditInstruction)
	r.Usage = usage
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.Detail = err.Error()
		if errors.Is(err, ErrInvalidEdit) {
			r.Outcome = OutcomeInvalidEdit
			r.Observation = "The edit could not be carried out: " + err.Error() + "."
		} else {
			r.Outcome = OutcomeEditorError
			r.Observation = "The editor failed (not your fault): " + err.Error() + ". The file is unchanged."
		}
		return nil
	}
	if !utf8.ValidString(next) {
		next = strings.ToValidUTF8(next, "\uFFFD")
	}
	return e.saveEdit(saveRel, saveAbs, prevSave, next, r)
}

func (e *Env) undo(a Action, r *StepResult) error {
	rel, abs, err := e.resolve(a.ScriptName)
	if err != nil {
		return err
	}
	stack := e.s.Backups[rel]
	if len(stack) == 0 {
		return refuse("there is no edit of %s to undo", rel)
	}
	prev := stack[len(stack)-1]
	if prev == nil {
		if err := os.Remove(abs); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return refuse("undo %s: %v", rel, why(err))
		}
		r.Observation = "The edit was undone: " + rel + " did not exist before it and has been removed."
	} else {
		if err := safefile.WriteFile(e.dir, rel, *prev, 0o644); err != nil {
			return refuse("undo %s: %v", rel, err)
		}
		r.Observation = "Content of " + rel + " after undo of the most recent edit:\n" + string(*prev)
		r.saved = rel
	}
	if len(stack) == 1 {
		delete(e.s.Backups, rel)
	} else {
		e.s.Backups[rel] = stack[:len(stack)-1]
	}
	e.s.Edited = true
	r.Outcome = OutcomeSuccess
	return nil
}

func (e *Env) copyFile(a Action, r *StepResult) error {
	srcRel, srcAbs, err := e.resolve(a.Source)
	if err != nil {
		return err
	}
	dstRel, dstAbs, err := e.resolve(a.Destination)
	if err != nil {
		return err
	}
	if srcRel == dstRel {
		return refuse("source and destination are the same file (%s)", srcRel)
	}
	b, err := e.readFile(srcRel, srcAbs)
	if err != nil {
		return err
	}
	if err := e.regularOrAbsent(dstRel); err != nil {
		return err
	}
	if err := e.writeFile(dstRel, dstAbs, b); err != nil {
		return err
	}
	r.Outcome = OutcomeSuccess
	r.Observation = fmt.Sprintf("File %s copied to %s.", srcRel, dstRel)
	return nil
}

func (e *Env) understandFile(ctx context.Context, a Action, r *StepResult) error {
	rel, abs, err := e.resolve(a.FileName)
	if err != nil {
		return err
	}
	b, err := e.readFile(rel, abs)
	if err != nil {
		return err
	}
	r.Outcome = OutcomeSuccess
	if e.cfg.FileLLM != nil {
		obs, usage, err := understandLLM(ctx, e.cfg.FileLLM, rel, b, a.ThingsToLookFor)
		r.Usage = usage
		if err == nil {
			r.Observation = obs
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.Detail = "file LLM failed, summary given instead: " + err.Error()
	}
	r.Observation = Summarize(rel, b)
	return nil
}

// summaryHeadLines is how many lines (or CSV rows) a summary shows.
const summaryHeadLines = 20

// Summarize returns a deterministic summary of a file: its size and line
// count, then for a CSV its columns, row count and first rows, for other
// text its first lines, and for binary data nothing more.
func Summarize(name string, b []byte) string {
	var sb strings.Builder
	nl := bytes.Count(b, []byte("\n"))
	if len(b) > 0 && b[len(b)-1] != '\n' {
		nl++
	}
	fmt.Fprintf(&sb, "%s: %d bytes, %d lines.\n", name, len(b), nl)
	if !utf8.Valid(b) || bytes.IndexByte(b, 0) >= 0 {
		sb.WriteString("It is a binary file.\n")
		return sb.String()
	}
	if strings.HasSuffix(strings.ToLower(name), ".csv") {
		if s, ok := summarizeCSV(b); ok {
			sb.WriteString(s)
			return sb.String()
		}
	}
	lines := splitLines(string(b))
	n := min(len(lines), summaryHeadLines)
	fmt.Fprintf(&sb, "First %d lines:\n", n)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&sb, "%4d  %s\n", i+1, textutil.Clip(lines[i], 200))
	}
	return sb.String()
}

func summarizeCSV(b []byte) (string, bool) {
	rd := csv.NewReader(bytes.NewReader(b))
	rd.FieldsPerRecord = -1
	header, err := rd.Read()
	if err != nil {
		return "", false
	}
	var head [][]string
	rows := 0
	for {
		rec, err := rd.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", false
		}
		if rows < 5 {
			head = append(head, rec)
		}
		rows++
	}
	var sb strings.Builder
	cols := header
	if len(cols) > 50 {
		cols = append(append([]string{}, cols[:50]...), fmt.Sprintf("... (%d more)", len(header)-50))
	}
	fmt.Fprintf(&sb, "CSV with %d columns and %d data rows.\nColumns: %s\nFirst rows:\n", len(header), rows, strings.Join(cols, ", "))
	for _, rec := range head {
		sb.WriteString(textutil.Clip(strings.Join(rec, ","), 300))
		sb.WriteString("\n")
	}
	return sb.String(), true
}

func understandLLM(ctx context.Context, c *llm.Client, name string, b []byte, what string) (string, llm.Usage, error) {
	content := string(b)
	if len(content) > 20000 {
		content = content[:20000] + "\n...[file truncated]"
	}
	zero := 0.0
	resp, err := c.Chat(ctx, llm.ChatRequest{
		Messages: []llm.Message{
			{Role: "system", Content: "You read a file for a machine-learning engineer and answer concisely, citing line numbers where useful. Say what you could not find."},
			{Role: "user", Content: fmt.Sprintf("File %s:\n```\n%s\n```\n\nLook for: %s", name, content, what)},
		},
		Temperature: &zero,
		MaxTokens:   800,
	})
	if err != nil {
		return "", llm.Usage{}, err
	}
	return resp.Content, resp.Usage, nil
}
