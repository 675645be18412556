package progress

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
)

// TestLastLine checks the one line a bar leaves in a log, for each way a
// job ends.
func TestLastLine(t *testing.T) {
	tests := []struct {
		name string
		tty  bool
		add  int
		end  func(b *Bar) error
		want string // regexp of the last line
	}{
		{"finished", false, 6, func(b *Bar) error { b.Done(); return nil }, `^rollout: finished 6/6 in \d+s \(\d+\.\d\d/s\)$`},
		{"finished on a terminal", true, 6, func(b *Bar) error { b.Done(); return nil }, `^\r\x1b\[Krollout: finished 6/6 in \d+s \(\d+\.\d\d/s\)$`},
		{"failed part-way", false, 4, func(b *Bar) error { b.Done(); return nil }, `^rollout: stopped at 4/6 after \d+s$`},
		{"interrupted", false, 4, func(b *Bar) error {
			return b.Interrupted(context.Canceled, 3, "trajectories", "rerun the same command to resume")
		}, `^rollout 4/6 \(67%\) `}, // no line of its own: the error is the line

	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			b := NewTo(&buf, tt.tty, "rollout", 6)
			b.Add(tt.add, "x")
			err := tt.end(b)
			b.Done() // a second end prints nothing
			lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
			last := lines[len(lines)-1]
			if tt.tty {
				last = last[strings.LastIndex(last, "\r"):]
			}
			if !regexp.MustCompile(tt.want).MatchString(last) {
				t.Errorf("last line %q, want %s (all output %q)", last, tt.want, buf.String())
			}
			for _, l := range strings.FieldsFunc(buf.String(), func(r rune) bool { return r == '\n' || r == '\r' }) {
				if strings.Count(l, "rollout") > 1 {
					t.Errorf("line %q repeats the label", l)
				}
			}
			if err == nil {
				return
			}
			const want = "rollout: interrupted after 3/6 trajectories; rerun the same command to resume"
			if err.Error() != want || !errors.Is(err, context.Canceled) || !IsInterrupted(err) {
				t.Errorf("Interrupted = %q (wraps Canceled: %v), want %q wrapping context.Canceled", err, errors.Is(err, context.Canceled), want)
			}
		})
	}
}
