package main

import (
	"runtime/debug"
	"testing"
)

// TestGCPercent: mlerl collects at its own target unless GOGC says
// otherwise (GOGC=off included).
func TestGCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	tests := []struct {
		gogc string // "" : unset
		set  int    // what the runtime applied from it (the test applies it itself)
		want int
	}{
		{"", 100, defaultGCPercent},
		{"50", 50, 50},
		{"off", -1, -1},
	}
	for _, tt := range tests {
		if tt.gogc == "" {
			t.Setenv("GOGC", "")
		} else {
			t.Setenv("GOGC", tt.gogc)
		}
		debug.SetGCPercent(tt.set)
		if got := setGCPercent(); got != tt.want {
			t.Errorf("GOGC=%q: setGCPercent() = %d, want %d", tt.gogc, got, tt.want)
		}
		if got := debug.SetGCPercent(tt.set); got != tt.want {
			t.Errorf("GOGC=%q: the runtime's target is %d, want %d", tt.gogc, got, tt.want)
		}
	}
}

// TestGCPercentByCommand: the commands that run a policy collect at
// mlerl's target, the others at Go's default.
func TestGCPercentByCommand(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv("GOGC", "")
	for _, tt := range []struct {
		args []string
		want int
	}{
		{[]string{"train", "ppo"}, defaultGCPercent},
		{[]string{"evaluate"}, defaultGCPercent},
		{[]string{"ingest", "tasks"}, 100},
		{[]string{"dataset"}, 100},
	} {
		debug.SetGCPercent(100)
		root := newRootCommand()
		cmd, _, err := root.Find(tt.args)
		if err != nil {
			t.Fatal(err)
		}
		root.PersistentPreRun(cmd, nil)
		if got := debug.SetGCPercent(100); got != tt.want {
			t.Errorf("mlerl %v: GC target %d, want %d", tt.args, got, tt.want)
		}
	}
}
