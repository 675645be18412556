// Package progress reports the progress of long jobs: a redrawn bar with
// rate and ETA on a terminal, plain log lines (at most one every few
// seconds) otherwise, so scheduled jobs leave readable logs.
//
// A job ends its [Bar] one of three ways, each leaving one line that says
// what happened: [Bar.Done] when it ran to the end ("rollout: finished
// 6/6 in 1m2s, 0.10/s"), [Bar.Interrupted] when its context was cancelled
// (a signal) part-way, returning an [*InterruptedError] that carries the
// line and what a rerun does, or [Bar.Done] after a failure, which then
// says where it stopped and leaves the why to the caller's error.
package progress

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// Bar tracks done/total units of one job. It is safe for concurrent use.
type Bar struct {
	mu       sync.Mutex
	w        io.Writer
	tty      bool
	label    string
	total    int
	done     int
	resumed  int // units an earlier run did (Resume): not in this run's rate
	start    time.Time
	last     time.Time
	every    time.Duration
	note     string
	finished bool
}

// New starts a bar writing to stderr. total may be 0 when unknown.
func New(label string, total int) *Bar {
	return NewTo(os.Stderr, isTerminal(os.Stderr), label, total)
}

// NewTo starts a bar on w; tty selects redrawing versus log lines.
func NewTo(w io.Writer, tty bool, label string, total int) *Bar {
	b := &Bar{w: w, tty: tty, label: label, total: total, start: time.Now(), every: 5 * time.Second}
	if !tty {
		b.every = 10 * time.Second
		fmt.Fprintf(w, "%s: started, %d to do\n", label, total)
	}
	return b
}

func isTerminal(f *os.File) bool {
	if os.Getenv("CI") != "" || os.Getenv("TERM") == "dumb" {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Add marks n more units done, with an optional note (the last item's name).
func (b *Bar) Add(n int, note string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done += n
	if note != "" {
		b.note = note
	}
	now := time.Now()
	if b.tty {
		if now.Sub(b.last) >= 100*time.Millisecond || b.done == b.total {
			b.last = now
			fmt.Fprintf(b.w, "\r\033[K%s %s", b.label, b.line(now))
		}
		return
	}
	if now.Sub(b.last) >= b.every {
		b.last = now
		fmt.Fprintf(b.w, "%s %s\n", b.label, b.line(now))
	}
}

// Resume marks n units as done by an earlier run of the job (a resumed
// checkpoint or dataset): they count in done/total, not in this run's
// rate, its ETA or its final line's rate, which would otherwise read as n
// units done in no time. A log gets one line saying where it resumed.
func (b *Bar) Resume(n int) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done += n
	b.resumed += n
	if !b.tty {
		fmt.Fprintf(b.w, "%s: resumed at %s\n", b.label, b.count())
	}
}

// SetTotal changes the total (when it becomes known, or shrinks on resume).
func (b *Bar) SetTotal(total int) {
	b.mu.Lock()
	b.total = total
	b.mu.Unlock()
}

// line is the bar's state without its label: "[===   ] 4/6 (67%) eta
// 20s 0.10/s elapsed 40s note".
func (b *Bar) line(now time.Time) string {
	el := now.Sub(b.start)
	rate := float64(b.done-b.resumed) / el.Seconds()
	var sb strings.Builder
	if b.total > 0 {
		frac := float64(b.done) / float64(b.total)
		if frac > 1 {
			frac = 1
		}
		if b.tty {
			const width = 24
			fill := int(frac * width)
			fmt.Fprintf(&sb, "[%s%s] ", strings.Repeat("=", fill), strings.Repeat(" ", width-fill))
		}
		fmt.Fprintf(&sb, "%d/%d (%.0f%%)", b.done, b.total, 100*frac)
		if b.done > b.resumed && b.done < b.total {
			eta := time.Duration(float64(b.total-b.done) / rate * float64(time.Second))
			fmt.Fprintf(&sb, " eta %s", eta.Round(time.Second))
		}
	} else {
		fmt.Fprintf(&sb, "%d", b.done)
	}
	fmt.Fprintf(&sb, " %.2f/s elapsed %s", rate, el.Round(time.Second))
	if b.note != "" {
		fmt.Fprintf(&sb, " %s", b.note)
	}
	return sb.String()
}

// complete reports whether every unit is done (or the total is unknown).
func (b *Bar) complete() bool { return b.total <= 0 || b.done >= b.total }

// count is "4/6", or "4" when the total is unknown.
func (b *Bar) count() string {
	if b.total > 0 {
		return fmt.Sprintf("%d/%d", b.done, b.total)
	}
	return fmt.Sprint(b.done)
}

// end prints the bar's last line, replacing the redrawn one on a
// terminal. Only the first call prints.
func (b *Bar) end(text string) {
	if b.finished {
		return
	}
	b.finished = true
	if b.tty {
		fmt.Fprint(b.w, "\r\033[K")
	}
	if text != "" {
		fmt.Fprintln(b.w, text)
	}
}

// Done prints the final line: "label: finished 6/6 in 1m2s (0.10/s)"
// ("finished 6/6 in 20s, 4 of them resumed (0.10/s)" after Resume), or,
// when fewer units than the total were done (the job failed; its error
// says why), "label: stopped at 4/6 after 40s". Later calls print nothing.
func (b *Bar) Done() {
	b.mu.Lock()
	defer b.mu.Unlock()
	el := time.Since(b.start)
	if b.complete() {
		resumed := ""
		if b.resumed > 0 {
			resumed = fmt.Sprintf(", %d of them resumed", b.resumed)
		}
		b.end(fmt.Sprintf("%s: finished %s in %s%s (%.2f/s)", b.label, b.count(), el.Round(time.Second), resumed, float64(b.done-b.resumed)/el.Seconds()))
		return
	}
	b.end(fmt.Sprintf("%s: stopped at %s after %s", b.label, b.count(), el.Round(time.Second)))
}

// InterruptedError is what a job stopped by its context part-way returns:
// one line saying how far it got and what a rerun does. It wraps the
// context's error, so errors.Is(err, context.Canceled) holds.
type InterruptedError struct {
	Label, Unit string
	Done, Total int
	// Rerun says what running the same command again does.
	Rerun string
	Err   error
}

func (e *InterruptedError) Error() string {
	n := fmt.Sprint(e.Done)
	if e.Total > 0 {
		n = fmt.Sprintf("%d/%d", e.Done, e.Total)
	}
	return fmt.Sprintf("%s: interrupted after %s %s; %s", e.Label, n, e.Unit, e.Rerun)
}

func (e *InterruptedError) Unwrap() error { return e.Err }

// Interrupted ends the bar without a line of its own and returns the
// *InterruptedError for a job that cause (the context's error) stopped
// after done of its units: "label: interrupted after 4/6 trajectories;
// rerun". done is the caller's count of units that are safe (written),
// which may lag the bar's.
func (b *Bar) Interrupted(cause error, done int, unit, rerun string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.end("")
	return &InterruptedError{Label: b.label, Unit: unit, Done: done, Total: b.total, Rerun: rerun, Err: cause}
}

// IsInterrupted reports whether err is, or wraps, an *InterruptedError.
func IsInterrupted(err error) bool {
	var ie *InterruptedError
	return errors.As(err, &ie)
}
