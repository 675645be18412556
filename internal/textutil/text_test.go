package textutil

import (
	"fmt"
	"slices"
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

func TestByCount(t *testing.T) {
	got := ByCount(map[string]int{"success": 5, "format_error": 2, "invalid_edit": 2, "timeout": 9})
	if want := []string{"timeout", "success", "format_error", "invalid_edit"}; !slices.Equal(got, want) {
		t.Errorf("ByCount = %v, want %v", got, want)
	}
	if got := ByCount(nil); len(got) != 0 {
		t.Errorf("ByCount(nil) = %v", got)
	}
}

func ExampleClip() {
	fmt.Println(Clip("Use k-nearest neighbours with k=31 and distance weighting", 24))
	// Output: Use k-nearest neighbours...
}
