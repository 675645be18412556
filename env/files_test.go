package env

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSummarize(t *testing.T) {
	tests := []struct {
		name, file, data string
		want             []string
	}{
		{"csv", "d.csv", "a,b\n1,2\n3,4\n", []string{"d.csv: 12 bytes, 3 lines.", "CSV with 2 columns and 2 data rows.", "Columns: a, b", "1,2\n3,4\n"}},
		{"ragged csv still summarised", "d.csv", "a,b\n1\n", []string{"CSV with 2 columns and 1 data rows."}},
		{"broken csv falls back to lines", "d.csv", "a,\"b\n1,2\n", []string{"First 2 lines:", "   1  a,\"b"}},
		{"text without final newline", "n.md", "x\ny", []string{"n.md: 3 bytes, 2 lines.", "   2  y"}},
		{"binary", "m.npy", "\x93NUMPY\x00\x01", []string{"It is a binary file."}},
		{"empty", "e.txt", "", []string{"e.txt: 0 bytes, 0 lines.", "First 0 lines:"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Summarize(tc.file, []byte(tc.data))
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("got\n%s\nwant it to contain %q", got, w)
				}
			}
		})
	}
	long := strings.Repeat("line\n", 500)
	if got := Summarize("big.py", []byte(long)); strings.Count(got, "\n") != summaryHeadLines+2 {
		t.Errorf("a long file shows %d lines, want %d", strings.Count(got, "\n")-2, summaryHeadLines)
	}
}

func TestTruncateMiddle(t *testing.T) {
	s := strings.Repeat("a", 100) + strings.Repeat("z", 100)
	got := truncateMiddle(s, 40)
	if !strings.HasPrefix(got, strings.Repeat("a", 10)+"\n...[160 characters cut]...\n") || !strings.HasSuffix(got, strings.Repeat("z", 30)) {
		t.Fatalf("got %q", got)
	}
	// Multi-byte characters are never cut in half: 3-byte runes around
	// both cut points.
	wide := strings.Repeat("€", 100)
	for n := 30; n < 50; n++ {
		if got := truncateMiddle(wide, n); !utf8.ValidString(got) {
			t.Fatalf("truncateMiddle(%d) cut a character: %q", n, got)
		}
	}
	if got := truncateMiddle("short", 40); got != "short" {
		t.Fatalf("got %q", got)
	}
}

func TestParseValMetric(t *testing.T) {
	tests := []struct {
		out  string
		want float64
		ok   bool
	}{
		{"VAL_METRIC accuracy 0.913200\n", 0.9132, true},
		{"x\nVAL_METRIC rmse 1.5\nVAL_METRIC rmse 2.5\n", 2.5, true},
		{"VAL_METRIC accuracy nan\n", 0, false},
		{"val_metric accuracy 0.9\n", 0, false},
		{"the VAL_METRIC accuracy 0.9\n", 0, false},
		{"", 0, false},
	}
	for _, tc := range tests {
		got := parseValMetric(tc.out)
		if (got != nil) != tc.ok || (got != nil && *got != tc.want) {
			t.Errorf("parseValMetric(%q) = %v, want %v (ok %v)", tc.out, got, tc.want, tc.ok)
		}
	}
}
