// Package textutil holds small string helpers shared by the stages and the
// environment.
package textutil

import (
	"cmp"
	"maps"
	"slices"
	"unicode/utf8"
)

// Clip returns s when it has at most n bytes, else its first n bytes,
// backed off to a rune boundary so that the result stays valid UTF-8,
// followed by "...".
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n < 0 {
		n = 0
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// ByCount returns a tally's keys, the most frequent first and ties in
// name order: the order a tally is shown in.
func ByCount(m map[string]int) []string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		return cmp.Or(cmp.Compare(m[b], m[a]), cmp.Compare(a, b))
	})
	return keys
}
