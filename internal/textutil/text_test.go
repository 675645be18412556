package textutil

import (
	"fmt"
	"testing"
	"unicode/utf8"
)

func TestClip(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly", 7, "exactly"},
		{"a longer line", 6, "a long..."},
		{"héllo", 2, "h..."}, // é is two bytes: no half rune
		{"日本語", 4, "日..."},
		{"abc", 0, "..."},
	} {
		got := Clip(c.in, c.n)
		if got != c.want || !utf8.ValidString(got) {
			t.Errorf("Clip(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

func ExampleClip() {
	fmt.Println(Clip("Use k-nearest neighbours with k=31 and distance weighting", 24))
	// Output: Use k-nearest neighbours...
}
