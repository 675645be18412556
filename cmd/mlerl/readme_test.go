package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The documents whose command lines TestDocumentedCommands runs: the
// README, the task suite's and the runbook's, SCIENCE.md's and
// BENCHMARKS.md's current pages, the guide, design and results pages that
// took over the README's sections (each listed, so that one that goes
// missing fails), and every other current document those folders and
// docs/ itself hold (documentGlobs). The history (docs/science/,
// docs/benchmarks/ and the runs' records) quotes the binaries it was made
// with, and is not run.
var documents = []string{
	"README.md", "tasks/README.md", "scripts/RUNBOOK.md", "SCIENCE.md", "BENCHMARKS.md",
	"docs/guide/stages.md", "docs/guide/ppo.md", "docs/guide/experiments.md", "docs/guide/tasks.md",
	"docs/guide/your-own-model.md", "docs/guide/gpu.md", "docs/guide/beyond-one-machine.md",
	"docs/guide/configuration.md", "docs/results/science.md", "docs/reproduce.md",
}

// documentGlobs add the current documents not listed in documents.
var documentGlobs = []string{"docs/*.md", "docs/guide/*.md", "docs/design/*.md", "docs/results/*.md"}

// allDocuments returns documents and what documentGlobs match, each once,
// relative to repo.
func allDocuments(t *testing.T, repo string) []string {
	t.Helper()
	seen := map[string]bool{}
	var out []string
	for _, d := range documents {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	for _, g := range documentGlobs {
		m, err := filepath.Glob(filepath.Join(repo, filepath.FromSlash(g)))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			rel, err := filepath.Rel(repo, f)
			if err != nil {
				t.Fatal(err)
			}
			if rel = filepath.ToSlash(rel); !seen[rel] {
				seen[rel] = true
				out = append(out, rel)
			}
		}
	}
	return out
}

// A pending region of a document holds the intended commands of features
// that other branches are landing, between a line starting
// "<!-- pending-commands" and one starting "<!-- /pending-commands": its
// command lines are checked as any other, but while one of them fails the
// failures are logged, not errors; once all of them pass, the test fails
// until the marks (and the note above them) are removed.
const (
	pendingStart = "<!-- pending-commands"
	pendingEnd   = "<!-- /pending-commands"
)

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
	text    string
	line    int
	block   bool // a line of a code block, not an inline span
	pending int  // the first line of the pending region it is in; 0: none
}

// codeTexts returns the code of a Markdown document: every line of a
// fenced or indented (4 spaces or a tab) code block, and every inline
// code span elsewhere, each with the pending region it is in.
func codeTexts(doc string) []code {
	var out []code
	fenced := false
	pending := 0
	for i, l := range strings.Split(doc, "\n") {
		if !fenced && strings.HasPrefix(l, pendingStart) {
			pending = i + 1
			continue
		}
		if !fenced && strings.HasPrefix(l, pendingEnd) {
			pending = 0
			continue
		}
		if fenceRe.MatchString(l) {
			fenced = !fenced
			continue
		}
		if fenced || strings.HasPrefix(l, "    ") || strings.HasPrefix(l, "\t") {
			out = append(out, code{strings.TrimSpace(l), i + 1, true, pending})
			continue
		}
		for _, m := range inlineRe.FindAllStringSubmatch(l, -1) {
			out = append(out, code{m[1], i + 1, false, pending})
		}
	}
	return out
}

// shellArgs splits what follows "mlerl" into arguments as a shell would:
// a comment (" #" outside quotes) ends it, single and double quotes group
// words and are removed, and redirections (> file, 2> file, >file) are
// dropped.
func shellArgs(s string) []string {
	var out []string
	f := shellFields(s)
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

// shellFields splits s into words at blanks outside quotes, removing the
// quotes, and stops at a comment: a "#" that starts a word.
func shellFields(s string) []string {
	var out []string
	var word strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			word.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				out = append(out, word.String())
				word.Reset()
				inWord = false
			}
		case r == '#' && !inWord:
			return out
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		out = append(out, word.String())
	}
	return out
}

// TestShellArgs pins how a documented command line is split.
func TestShellArgs(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{`rollout --per-task 5 # five`, []string{"rollout", "--per-task", "5"}},
		{`generate --prompt "What is the capital of France?" --json`, []string{"generate", "--prompt", "What is the capital of France?", "--json"}},
		{`experiment --extra_arms 'late: --updates 60' > out.txt 2>&1`, []string{"experiment", "--extra_arms", "late: --updates 60"}},
		{`ls ./data#1`, []string{"ls", "./data#1"}},
	} {
		if got := shellArgs(c.in); strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("shellArgs(%q) = %q, want %q", c.in, got, c.want)
		}
	}
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
	names := allDocuments(t, repo)
	docs := map[string][]byte{}
	for _, name := range names {
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
	// Per pending region (document and first line): how many command
	// lines it holds, and what failed in them.
	type region struct {
		lines    int
		problems []string
	}
	pending := map[string]*region{}
	var regions []string
	for _, name := range names {
		b := docs[name]
		for _, c := range codeTexts(string(b)) {
			where := name + ":" + strconv.Itoa(c.line)
			var problems []string
			found := false
			for _, m := range makeLine.FindAllStringSubmatch(c.text, -1) {
				found = true
				for _, a := range shellArgs(m[1]) {
					if !strings.Contains(a, "=") && !strings.HasPrefix(a, "-") && !targets[a] {
						problems = append(problems, fmt.Sprintf("%s: make %s: no such target in the Makefile", where, a))
					}
				}
			}
			for _, m := range mlerlLine.FindAllStringSubmatch(c.text, -1) {
				found = true
				commands++
				problems = append(problems, checkCommand(t, where, shellArgs(m[1]), c.block)...)
			}
			if c.pending == 0 {
				for _, p := range problems {
					t.Error(p)
				}
				continue
			}
			key := name + ":" + strconv.Itoa(c.pending)
			r := pending[key]
			if r == nil {
				r = &region{}
				pending[key] = r
				regions = append(regions, key)
			}
			if found {
				r.lines++
			}
			r.problems = append(r.problems, problems...)
		}
	}
	for _, key := range regions {
		r := pending[key]
		switch {
		case r.lines == 0:
			t.Errorf("%s: the pending region holds no command line: remove its marks", key)
		case len(r.problems) == 0:
			t.Errorf("%s: every command of the pending region runs now: remove its %q and %q marks and the note that it is pending", key, pendingStart, pendingEnd)
		default:
			for _, p := range r.problems {
				t.Logf("pending (%s): %s", key, p)
			}
		}
	}
	if commands < 20 {
		t.Errorf("found %d mlerl command lines in %v; the extraction is broken", commands, names)
	}
}

// checkCommand runs one documented command line (see
// TestDocumentedCommands) and returns what is wrong with it; whole says it
// is a command line, not a command named in prose, so its arguments must
// be complete.
func checkCommand(t *testing.T, where string, args []string, whole bool) []string {
	t.Helper()
	line := "mlerl " + strings.Join(args, " ")
	cmd, rest, err := newRootCommand().Find(args)
	if err != nil {
		return []string{fmt.Sprintf("%s: %s: %v", where, line, err)}
	}
	if !cmd.Runnable() {
		return []string{fmt.Sprintf("%s: %s: %s is not a command that runs (it has subcommands)", where, line, cmd.CommandPath())}
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return []string{fmt.Sprintf("%s: %s: %v", where, line, err)}
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		if whole {
			return []string{fmt.Sprintf("%s: %s: %v", where, line, err)}
		}
		return nil
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
	return nil
}
