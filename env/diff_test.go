package env

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestUnifiedDiff(t *testing.T) {
	tests := []struct {
		name, a, b, want string
	}{
		{"equal", "a\nb\n", "a\nb\n", ""},
		{"one line changed", "a\nb\nc\n", "a\nB\nc\n", "--- f\n+++ f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"},
		{"insert at start", "a\n", "z\na\n", "--- f\n+++ f\n@@ -1 +1,2 @@\n+z\n a\n"},
		{"from empty", "", "x\ny\n", "--- f\n+++ f\n@@ -0,0 +1,2 @@\n+x\n+y\n"},
		{"to empty", "x\n", "", "--- f\n+++ f\n@@ -1 +0,0 @@\n-x\n"},
		{"two hunks", "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n", "1\nX\n3\n4\n5\n6\n7\n8\n9\n10\nY\n12\n",
			"--- f\n+++ f\n@@ -1,5 +1,5 @@\n 1\n-2\n+X\n 3\n 4\n 5\n@@ -8,5 +8,5 @@\n 8\n 9\n 10\n-11\n+Y\n 12\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := UnifiedDiff("f", "f", tc.a, tc.b); got != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

var hunkRe = regexp.MustCompile(`^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@$`)

// applyDiff is a slow, obvious patch applier: the reference the diff is
// checked against.
func applyDiff(a, diff string) (string, error) {
	src := splitLines(a)
	var out []string
	pos := 0 // next unread line of src (0-based)
	lines := splitLines(diff)
	for i := 2; i < len(lines); i++ {
		m := hunkRe.FindStringSubmatch(lines[i])
		if m == nil {
			return "", fmt.Errorf("line %d: %q is not a hunk header", i, lines[i])
		}
		start, _ := strconv.Atoi(m[1])
		n := 1
		if m[2] != "" {
			n, _ = strconv.Atoi(m[2])
		}
		if n == 0 {
			start++ // "-k,0" inserts after line k
		}
		for pos < start-1 {
			out = append(out, src[pos])
			pos++
		}
		for i+1 < len(lines) && !strings.HasPrefix(lines[i+1], "@@") {
			i++
			l := lines[i]
			switch l[0] {
			case ' ', '-':
				if pos >= len(src) || src[pos] != l[1:] {
					return "", fmt.Errorf("line %d: %q does not match source line %d", i, l, pos+1)
				}
				if l[0] == ' ' {
					out = append(out, src[pos])
				}
				pos++
			case '+':
				out = append(out, l[1:])
			}
		}
	}
	out = append(out, src[pos:]...)
	if len(out) == 0 {
		return "", nil
	}
	return strings.Join(out, "\n") + "\n", nil
}

func TestUnifiedDiffApplies(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	gen := func() string {
		n := rng.IntN(30)
		var ls []string
		for i := 0; i < n; i++ {
			ls = append(ls, string(rune('a'+rng.IntN(4))))
		}
		if n == 0 {
			return ""
		}
		return strings.Join(ls, "\n") + "\n"
	}
	for k := 0; k < 2000; k++ {
		a, b := gen(), gen()
		d := UnifiedDiff("x", "x", a, b)
		if a == b {
			continue
		}
		got, err := applyDiff(a, d)
		if err != nil || got != b {
			t.Fatalf("case %d: applying the diff of %q -> %q gives %q, %v\ndiff:\n%s", k, a, b, got, err, d)
		}
		// The diff is minimal: its changed lines match an LCS.
		var changed int
		for _, l := range splitLines(d)[2:] {
			if l[0] == '+' || l[0] == '-' {
				changed++
			}
		}
		if want := len(splitLines(a)) + len(splitLines(b)) - 2*lcsLen(splitLines(a), splitLines(b)); changed != want {
			t.Fatalf("case %d: %d changed lines, want %d", k, changed, want)
		}
	}
}

func lcsLen(x, y []string) int {
	if len(x) == 0 || len(y) == 0 {
		return 0
	}
	if x[0] == y[0] {
		return 1 + lcsLen(x[1:], y[1:])
	}
	memo := make([][]int, len(x)+1)
	for i := range memo {
		memo[i] = make([]int, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				memo[i][j] = memo[i+1][j+1] + 1
			} else {
				memo[i][j] = max(memo[i+1][j], memo[i][j+1])
			}
		}
	}
	return memo[0][0]
}
