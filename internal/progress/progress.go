// Package progress reports the progress of long jobs: a redrawn bar with
// rate and ETA on a terminal, plain log lines (at most one every few
// seconds) otherwise, so scheduled jobs leave readable logs.
package progress

import (
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
			fmt.Fprintf(b.w, "\r\033[K%s", b.line(now))
		}
		return
	}
	if now.Sub(b.last) >= b.every {
		b.last = now
		fmt.Fprintln(b.w, b.line(now))
	}
}

// SetTotal changes the total (when it becomes known, or shrinks on resume).
func (b *Bar) SetTotal(total int) {
	b.mu.Lock()
	b.total = total
	b.mu.Unlock()
}

func (b *Bar) line(now time.Time) string {
	el := now.Sub(b.start)
	rate := float64(b.done) / el.Seconds()
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s ", b.label)
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
		if b.done > 0 && b.done < b.total {
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

// Done prints the final line.
func (b *Bar) Done() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.finished {
		return
	}
	b.finished = true
	if b.tty {
		fmt.Fprintf(b.w, "\r\033[K%s\n", b.line(time.Now()))
		return
	}
	fmt.Fprintf(b.w, "%s: finished, %s\n", b.label, b.line(time.Now()))
}
