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
			if got := o.Prompts(); got != (Prompts{100, 50, tc.want}) {
				t.Errorf("Prompts() = %+v, want it to name counter %s", got, tc.want)
			}
			if tc.want == CounterApprox && o.Count("12345678") != 2 {
				t.Errorf("approx counts %d tokens in 8 bytes, want 2", o.Count("12345678"))
			}
		})
	}
}
