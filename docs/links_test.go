package docs

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

var (
	// inlineLink is [text](target) or ![alt](target), with an optional
	// title; the target may be written <in angle brackets>.
	inlineLink = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s()]+(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)`)
	// refDef is a reference definition, [label]: target.
	refDef = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s+(<[^>]*>|\S+)`)
	// htmlLink is an href or src attribute of inline HTML.
	htmlLink = regexp.MustCompile(`(?i)<(?:a|img)\b[^>]*\s(?:href|src)\s*=\s*["']([^"']+)["']`)
	// htmlAnchor is an anchor an HTML element names.
	htmlAnchor = regexp.MustCompile(`(?i)<[a-z]+\b[^>]*\s(?:id|name)\s*=\s*["']([^"']+)["']`)
	fence      = regexp.MustCompile("^ {0,3}(```|~~~)")
	atxHeading = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$`)
	setextLine = regexp.MustCompile(`^ {0,3}(=+|-+)\s*$`)
	scheme     = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
)

// prose returns a Markdown document's lines with code removed (fenced
// blocks blanked, inline code spans cut out), so that a link-shaped text
// in code is not taken for a link; line numbers are kept.
func prose(doc string) []string {
	lines := strings.Split(doc, "\n")
	in := ""
	for i, l := range lines {
		if m := fence.FindStringSubmatch(l); m != nil && (in == "" || m[1] == in) {
			if in == "" {
				in = m[1]
			} else {
				in = ""
			}
			lines[i] = ""
			continue
		}
		if in != "" {
			lines[i] = ""
			continue
		}
		lines[i] = withoutCodeSpans(l)
	}
	return lines
}

// withoutCodeSpans cuts the inline code spans out of a line: a run of
// backticks up to the next run of the same length (an unmatched run is
// literal text).
func withoutCodeSpans(l string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(l, '`')
		if i < 0 {
			return b.String() + l
		}
		n := i
		for n < len(l) && l[n] == '`' {
			n++
		}
		run := l[i:n]
		end := -1
		for j := n; j < len(l); {
			k := strings.Index(l[j:], run)
			if k < 0 {
				break
			}
			k += j
			m := k + len(run)
			if (m == len(l) || l[m] != '`') && (l[k-1] != '`') {
				end = m
				break
			}
			for m < len(l) && l[m] == '`' {
				m++
			}
			j = m
		}
		if end < 0 {
			b.WriteString(l[:n])
			l = l[n:]
			continue
		}
		b.WriteString(l[:i])
		l = l[end:]
	}
}

// links returns the link targets of a document with their line numbers.
func links(doc string) (targets []string, lineNos []int) {
	for i, l := range prose(doc) {
		for _, re := range []*regexp.Regexp{inlineLink, refDef, htmlLink} {
			for _, m := range re.FindAllStringSubmatch(l, -1) {
				targets = append(targets, strings.TrimSuffix(strings.TrimPrefix(m[1], "<"), ">"))
				lineNos = append(lineNos, i+1)
			}
		}
	}
	return targets, lineNos
}

// slug is the anchor GitHub gives a heading: its text without markup,
// lower-cased, every character but letters, digits, spaces, hyphens and
// underscores dropped, spaces made hyphens.
func slug(heading string) string {
	heading = inlineLink.ReplaceAllStringFunc(heading, func(s string) string { // [text](url) -> text
		return s[strings.Index(s, "[")+1 : strings.LastIndex(s, "](")]
	})
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '_', r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// anchors returns the anchors of a Markdown document: its headings'
// slugs (a repeated one numbered -1, -2... as GitHub does) and the ids
// and names of its HTML elements.
func anchors(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	add := func(h string) {
		s := slug(strings.TrimSpace(h))
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	lines := prose(doc)
	raw := strings.Split(doc, "\n")
	for i, l := range lines {
		if m := atxHeading.FindStringSubmatch(raw[i]); m != nil && l != "" {
			add(m[2])
		} else if i > 0 && setextLine.MatchString(l) {
			// A line of = or - under a paragraph's line makes that line a
			// heading; - under a list item or a table row is a rule.
			prev := strings.TrimSpace(lines[i-1])
			if prev != "" && !strings.HasPrefix(prev, "|") && (strings.Contains(l, "=") || !strings.HasPrefix(prev, "- ")) {
				add(raw[i-1])
			}
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(raw[i], -1) {
			out[m[1]] = true
		}
	}
	return out
}

// pendingDocs are documents that other branches are writing and this
// checkout's documents already link to, each with the branch that brings
// it: a link to one passes while the file is missing (logged), and is
// checked as any other once it exists. Only a whole file is excused: an
// #anchor into a missing document still fails. Remove an entry once its
// branch is merged (the test logs when a listed file exists).
var pendingDocs = map[string]string{}

// TestMarkdownLinks: every relative link of every committed Markdown file
// (inline links and images, reference definitions, HTML href and src)
// names a committed file or folder of the repository, and an anchor
// (#heading) names a heading or an HTML id of the Markdown file it points
// into. Links with a scheme (https:, mailto:) are not fetched. A link to
// one of pendingDocs passes while that file is missing.
func TestMarkdownLinks(t *testing.T) {
	files := committed(t)
	exists := map[string]bool{"": true} // the root
	for _, f := range files {
		exists[f] = true
		for d := path.Dir(f); d != "."; d = path.Dir(d) {
			exists[d] = true
		}
	}
	for f, branch := range pendingDocs {
		if exists[f] {
			t.Logf("%s (pending from %s) is in the repository now: remove it from pendingDocs", f, branch)
		}
	}
	docs := map[string]string{}
	anchorsOf := func(rel string) map[string]bool {
		if _, ok := docs[rel]; !ok {
			docs[rel], _ = text(t, rel)
		}
		return anchors(docs[rel])
	}
	checkedLinks := 0
	for _, rel := range files {
		if path.Ext(rel) != ".md" {
			continue
		}
		doc, ok := text(t, rel)
		if !ok {
			continue
		}
		docs[rel] = doc
		targets, lineNos := links(doc)
		for i, target := range targets {
			if scheme.MatchString(target) || strings.HasPrefix(target, "//") {
				continue
			}
			checkedLinks++
			where := fmt.Sprintf("%s:%d: link %s", rel, lineNos[i], target)
			file, anchor, _ := strings.Cut(target, "#")
			if f, err := url.PathUnescape(file); err == nil {
				file = f
			}
			dest := rel // a bare #anchor is this page's
			if file != "" {
				if strings.HasPrefix(file, "/") {
					dest = path.Clean(strings.TrimPrefix(file, "/")) // from the repository's root, as GitHub reads it
				} else {
					dest = path.Join(path.Dir(rel), file)
				}
			}
			switch {
			case dest == ".." || strings.HasPrefix(dest, "../"):
				t.Errorf("%s: points outside the repository (a clone does not have it): link a copy or a page that describes it", where)
			case !exists[strings.TrimSuffix(dest, "/")] && dest != "." && pendingDocs[dest] != "" && anchor == "":
				t.Logf("%s: %s is not in the repository yet (pending from %s)", where, dest, pendingDocs[dest])
			case !exists[strings.TrimSuffix(dest, "/")] && dest != ".":
				t.Errorf("%s: %s is not in the repository", where, dest)
			case anchor != "" && path.Ext(dest) == ".md" && !anchorsOf(dest)[anchor]:
				t.Errorf("%s: %s has no heading or id %q", where, dest, anchor)
			}
		}
	}
	if checkedLinks < 100 {
		t.Errorf("checked %d relative links: the link finder is wrong", checkedLinks)
	}
}

// TestLinkFinder pins what counts as a link, an anchor and a slug.
func TestLinkFinder(t *testing.T) {
	doc := "# Bring your own model\n\n" +
		"See [the guide](docs/guide.md#step-2-train), ![plot](a%20b.png \"title\") and [x](<odd name.md>).\n" +
		"`[not](a-link.md)` and\n```\n[not](either.md)\n```\n" +
		"[ref]: ../shared/SEEDS.md\n<a href=\"x.html\">x</a> [web](https://example.com/x)\n" +
		"## Step 2: train (`mlerl train`)\n## Step 2: train (`mlerl train`)\nSetext heading\n---\n<a name=\"here\"></a>\n"
	got, _ := links(doc)
	want := []string{"docs/guide.md#step-2-train", "a%20b.png", "odd name.md", "../shared/SEEDS.md", "https://example.com/x", "x.html"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("links:\n got %q\nwant %q", got, want)
	}
	a := anchors(doc)
	for _, w := range []string{"bring-your-own-model", "step-2-train-mlerl-train", "step-2-train-mlerl-train-1", "setext-heading", "here"} {
		if !a[w] {
			t.Errorf("anchors lack %q: %v", w, a)
		}
	}
	if s := slug("The `evaluate` stage: [delta_r](x.md) & more!"); s != "the-evaluate-stage-delta_r--more" {
		t.Errorf("slug %q", s)
	}
}
