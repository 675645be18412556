package agents

import (
	"strings"
	"testing"

	"github.com/mlerl/mlerl/internal/tokenizer"
)

func TestNewOptionsFor(t *testing.T) {
	// Without the tokenizer, NewOptions counts approximately and a
	// recorded qwen3 counter cannot be honoured.
	auto, qwen, qwenErr := CounterQwen3, CounterQwen3, ""
	if _, err := tokenizer.Default(); err != nil {
		auto, qwen, qwenErr = CounterApprox, "", "run `make setup`"
	}
	tests := []struct {
		name, counter string
		want          string // the counter used; "" when an error is wanted
		err           string
	}{
		{"unrecorded: as NewOptions", "", auto, ""},
		{"approx", CounterApprox, CounterApprox, ""},
		{"qwen3", CounterQwen3, qwen, qwenErr},
		{"unknown", "bpe", "", `unknown token counter "bpe"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := NewOptionsFor(Prompts{FullBudget: 100, CompactBudget: 50, Counter: tc.counter}, 7)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.CountName != tc.want || o.FullBudget != 100 || o.CompactBudget != 50 || o.MaxSteps != 7 {
				t.Errorf("got %+v, want counter %s, budgets 100/50, 7 steps", o, tc.want)
			}
			if got := o.Prompts(); got != (Prompts{100, 50, tc.want, CompactFormat1}) {
				t.Errorf("Prompts() = %+v, want it to name counter %s", got, tc.want)
			}
			if tc.want == CounterApprox && o.Count("12345678") != 2 {
				t.Errorf("approx counts %d tokens in 8 bytes, want 2", o.Count("12345678"))
			}
		})
	}
}

// TestCompactFormats: a current score below the initial script's, after a
// first run, is marked worse in format 2 and not in format 1 (what
// rollouts recorded before formats, and render so); the best run's own
// comparison marks it in both; Prompts carries the format, and one newer
// than this binary's is refused.
func TestCompactFormats(t *testing.T) {
	best := func(v float64) *float64 { return &v }
	first := State{TaskID: "t", Title: "T", Metric: "accuracy", Direction: "higher", MInit: 0.66, Current: 0.64, Best: best(0.64), Step: 5, MaxSteps: 8, Script: "x = 1"}
	second := first
	second.Best = best(0.70) // an earlier run scored better
	kept := first
	kept.Current, kept.Best = 0.71, best(0.71)
	lower := first
	lower.Direction, lower.MInit, lower.Current, lower.Best = "lower", 5.0, 6.0, best(6.0)
	v1, err := NewOptionsFor(Prompts{FullBudget: 1000, CompactBudget: 400}, 8)
	if err != nil {
		t.Fatal(err)
	}
	v2 := NewOptions(1000, 400, 8)
	if v1.Format != CompactFormat1 || v2.Format != CompactFormat || v2.Prompts().Format != CompactFormat {
		t.Fatalf("formats: recorded none -> %d, new -> %d (Prompts %d); want %d and %d", v1.Format, v2.Format, v2.Prompts().Format, CompactFormat1, CompactFormat)
	}
	const mark = "(worse than the best)"
	for _, c := range []struct {
		name   string
		s      State
		v1, v2 bool
	}{
		{"first run below the initial score", first, false, true},
		{"below an earlier better run", second, true, true},
		{"an improving run", kept, false, false},
		{"lower is better, first run above the initial", lower, false, true},
	} {
		if got := strings.Contains(v1.Compact(c.s), mark); got != c.v1 {
			t.Errorf("%s: format 1 marked %v, want %v", c.name, got, c.v1)
		}
		if got := strings.Contains(v2.Compact(c.s), mark); got != c.v2 {
			t.Errorf("%s: format 2 marked %v, want %v", c.name, got, c.v2)
		}
	}
	if _, err := NewOptionsFor(Prompts{FullBudget: 1000, CompactBudget: 400, Format: CompactFormat + 1}, 8); err == nil || !strings.Contains(err.Error(), "compact format") {
		t.Errorf("a newer format: got %v, want a refusal naming it", err)
	}
}
