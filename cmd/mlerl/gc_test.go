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
