package progress

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
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

// TestResume checks that units an earlier run did count in done/total but
// not in this run's rate and ETA (a resumed job read 35 units in no time:
// "eta 0s 13534416.09/s").
func TestResume(t *testing.T) {
	var buf bytes.Buffer
	b := NewTo(&buf, false, "train ppo", 40)
	b.Resume(35)
	if got := buf.String(); !strings.HasSuffix(got, "train ppo: resumed at 35/40\n") {
		t.Errorf("log %q, want a line saying where it resumed", got)
	}
	if l := b.line(b.start.Add(10 * time.Second)); !strings.HasPrefix(l, "35/40 (88%) 0.00/s elapsed 10s") {
		t.Errorf("line before this run's first unit = %q, want no ETA and a rate of 0", l)
	}
	b.Add(1, "")
	if l := b.line(b.start.Add(10 * time.Second)); !strings.HasPrefix(l, "36/40 (90%) eta 40s 0.10/s elapsed 10s") {
		t.Errorf("line after one unit in 10s = %q, want 4 left at 0.10/s", l)
	}
	b.Add(4, "")
	b.Done()
	if last := buf.String()[strings.LastIndex(strings.TrimSuffix(buf.String(), "\n"), "\n")+1:]; !regexp.MustCompile(`^train ppo: finished 40/40 in \d+s, 35 of them resumed \(\d+\.\d\d/s\)\n$`).MatchString(last) {
		t.Errorf("last line %q, want the units resumed named", last)
	}
}
