package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The documents whose command lines TestDocumentedCommands runs.
var documents = []string{"README.md", "tasks/README.md", "scripts/RUNBOOK.md", "docs/gguf.md"}

// Where a documented command starts: at the start of a code text, after a
// shell separator (; & | && || or an opening parenthesis), or after a shell
// keyword (then, do, until, while).
const cmdStart = `(?:^|[;&|(]\s*|\b(?:then|do|until|while)\s+)`

var (
	mlerlLine = regexp.MustCompile(cmdStart + `(?:\./)?(?:bin/)?mlerl\s+([^;&|\n]+)`)
	makeLine  = regexp.MustCompile(cmdStart + `make\s+([^;&|\n]+)`)
	inlineRe  = regexp.MustCompile("`([^`\n]+)`")
	fenceRe   = regexp.MustCompile("^\\s*(```|~~~)")
	targetRe  = regexp.MustCompile(`(?m)^([A-Za-z0-9_-]+):`)
)

// code is a piece of code in a document.
type code struct {
	text  string
	line  int
	block bool // a line of a code block, not an inline span
}

// codeTexts returns the code of a Markdown document: every line of a
// fenced or indented (4 spaces or a tab) code block, and every inline
// code span elsewhere.
func codeTexts(doc string) []code {
	var out []code
	fenced := false
	for i, l := range strings.Split(doc, "\n") {
		if fenceRe.MatchString(l) {
			fenced = !fenced
			continue
		}
		if fenced || strings.HasPrefix(l, "    ") || strings.HasPrefix(l, "\t") {
			out = append(out, code{strings.TrimSpace(l), i + 1, true})
			continue
		}
		for _, m := range inlineRe.FindAllStringSubmatch(l, -1) {
			out = append(out, code{m[1], i + 1, false})
		}
	}
	return out
}

// shellArgs splits what follows "mlerl" into arguments: a comment (" #")
// ends it, and redirections (> file, 2> file, >file) are dropped.
func shellArgs(s string) []string {
	if i := strings.Index(s, " #"); i >= 0 {
		s = s[:i]
	}
	var out []string
	f := strings.Fields(s)
	for i := 0; i < len(f); i++ {
		switch a := f[i]; {
		case a == ">" || a == ">>" || a == "2>" || a == "<":
			i++
		case strings.HasPrefix(a, ">") || strings.HasPrefix(a, "2>"):
		default:
			out = append(out, a)
		}
	}
	return out
}

// TestDocumentedCommands runs every command line the documents quote.
//
// A command line is found in code only (fenced or indented blocks, and
// inline code spans), where "mlerl", "bin/mlerl" or "./bin/mlerl" starts a
// command (see cmdStart: also after ; & | ( and then/do/until/while). Each
// runs in process with --print-config (a stage) or --help (anything else),
// so nothing is read or written, in a folder holding the rollout.yaml the
// documents name (written by --print-config). It fails when the command
// or a flag is wrong, or when a code-block line has the wrong number of
// arguments (inline code may name a command in prose: "`mlerl ls`
// lists"); an error of the stage itself (a placeholder such as i/K or
// <dir>) is only logged. A "make <target>" line must name a target of the
// Makefile.
func TestDocumentedCommands(t *testing.T) {
	repo := filepath.Join("..", "..")
	mk, err := os.ReadFile(filepath.Join(repo, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range targetRe.FindAllStringSubmatch(string(mk), -1) {
		targets[m[1]] = true
	}
	docs := map[string][]byte{}
	for _, name := range documents {
		if docs[name], err = os.ReadFile(filepath.Join(repo, name)); err != nil {
			t.Fatal(err)
		}
	}
	// The documents' rollout.yaml: what --print-config writes.
	t.Chdir(t.TempDir())
	out, err := run(t, "rollout", "--print-config")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("rollout.yaml", []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	commands := 0
	for _, name := range documents {
		b := docs[name]
		for _, c := range codeTexts(string(b)) {
			where := name + ":" + strconv.Itoa(c.line)
			for _, m := range makeLine.FindAllStringSubmatch(c.text, -1) {
				for _, a := range shellArgs(m[1]) {
					if !strings.Contains(a, "=") && !strings.HasPrefix(a, "-") && !targets[a] {
						t.Errorf("%s: make %s: no such target in the Makefile", where, a)
					}
				}
			}
			for _, m := range mlerlLine.FindAllStringSubmatch(c.text, -1) {
				commands++
				checkCommand(t, where, shellArgs(m[1]), c.block)
			}
		}
	}
	if commands < 20 {
		t.Errorf("found %d mlerl command lines in %v; the extraction is broken", commands, documents)
	}
}

// checkCommand runs one documented command line (see
// TestDocumentedCommands); whole says it is a command line, not a command
// named in prose, so its arguments must be complete.
func checkCommand(t *testing.T, where string, args []string, whole bool) {
	t.Helper()
	line := "mlerl " + strings.Join(args, " ")
	cmd, rest, err := newRootCommand().Find(args)
	if err != nil {
		t.Errorf("%s: %s: %v", where, line, err)
		return
	}
	if !cmd.Runnable() {
		t.Errorf("%s: %s: %s is not a command that runs (it has subcommands)", where, line, cmd.CommandPath())
		return
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Errorf("%s: %s: %v", where, line, err)
		return
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		if whole {
			t.Errorf("%s: %s: %v", where, line, err)
		}
		return
	}
	extra := "--help"
	if cmd.Flags().Lookup("print-config") != nil {
		extra = "--print-config"
	}
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append(append([]string{}, args...), extra))
	if err := root.Execute(); err != nil {
		t.Logf("%s: %s %s: the stage says: %v", where, line, extra, err)
	}
}
