package sandbox

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
)

// capture keeps the first and the last half of a stream's bytes and
// counts the rest, so that a script printing gigabytes costs the runner a
// fixed amount of memory while the end of the output (where the metric
// line usually is) survives.
type capture struct {
	mu     sync.Mutex
	half   int
	head   []byte
	tail   []byte // last bytes beyond head, at most 2*half before compaction
	total  int64
	budget *outputBudget

	// Lines of the left-out middle that carry keepMark (instrumentation
	// markers) are kept, so partial credit survives a chatty script.
	line     []byte // the current line of the left-out bytes
	lineLong bool   // it grew past maxKeptLine: not a marker
	kept     []byte
	keptN    int
}

// keepMark starts the marker lines of env's instrumenter; at most
// maxKeptLines of at most maxKeptLine bytes are kept from the middle.
const (
	keepMark     = "@@MLERL "
	maxKeptLine  = 256
	maxKeptLines = 64
)

// dropped scans bytes leaving the kept window for marker lines.
func (c *capture) dropped(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		part := b
		if i >= 0 {
			part = b[:i+1]
		}
		if !c.lineLong {
			if len(c.line)+len(part) > maxKeptLine {
				c.lineLong, c.line = true, c.line[:0]
			} else {
				c.line = append(c.line, part...)
			}
		}
		if i < 0 {
			return
		}
		if !c.lineLong && c.keptN < maxKeptLines && bytes.Contains(c.line, []byte(keepMark)) {
			c.kept = append(c.kept, c.line...)
			c.keptN++
		}
		c.line, c.lineLong = c.line[:0], false
		b = b[i+1:]
	}
}

// outputBudget is shared by a run's stdout and stderr: past kill bytes in
// all, onKill is called once.
type outputBudget struct {
	total  atomic.Int64
	kill   int64
	once   sync.Once
	killed atomic.Bool
	onKill func()
}

func (b *outputBudget) add(n int) {
	if b.total.Add(int64(n)) > b.kill {
		b.once.Do(func() {
			b.killed.Store(true)
			b.onKill()
		})
	}
}

func newCapture(max int, b *outputBudget) *capture {
	h := max / 2
	if h < 1 {
		h = 1
	}
	return &capture{half: h, budget: b}
}

// Write never fails: the pipe must keep draining or the script blocks.
func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	n := len(p)
	c.total += int64(n)
	if room := c.half - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	if len(p) >= c.half {
		c.dropped(c.tail)
		c.dropped(p[:len(p)-c.half])
		c.tail = append(c.tail[:0], p[len(p)-c.half:]...)
	} else if len(p) > 0 {
		c.tail = append(c.tail, p...)
		if len(c.tail) > 2*c.half {
			c.dropped(c.tail[:len(c.tail)-c.half])
			c.tail = append(c.tail[:0], c.tail[len(c.tail)-c.half:]...)
		}
	}
	c.mu.Unlock()
	if c.budget != nil {
		c.budget.add(n)
	}
	return n, nil
}

// result returns the kept text and whether bytes were left out.
func (c *capture) result() (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tail := c.tail
	var kept []byte
	if len(tail) > c.half {
		// Scan what result leaves out of the tail, on a copy of the state.
		cc := capture{line: append([]byte(nil), c.line...), lineLong: c.lineLong, kept: append([]byte(nil), c.kept...), keptN: c.keptN}
		cc.dropped(tail[:len(tail)-c.half])
		kept = cc.kept
		tail = tail[len(tail)-c.half:]
	} else {
		kept = c.kept
	}
	n := int64(len(c.head) + len(tail))
	if n == c.total {
		return string(c.head) + string(tail), false
	}
	return fmt.Sprintf("%s\n[... %d bytes of output left out ...]\n%s%s", c.head, c.total-n, kept, tail), true
}

// drain copies r into c until EOF or until r is closed.
func drain(r *os.File, c *capture, done *sync.WaitGroup) {
	defer done.Done()
	io.Copy(c, r)
}

func readAllLimited(r io.Reader, n int64) ([]byte, error) {
	return io.ReadAll(io.LimitReader(r, n))
}

// newPythonCmd starts the bootstrap in mode with cfg, in its own process
// group, with a scrubbed environment and / as working directory (the
// bootstrap must never import from the workspace before it is sandboxed).
func newPythonCmd(python, mode, cfg string) *exec.Cmd {
	cmd := exec.Command(python, "-s", "-c", bootstrap, mode, cfg)
	cmd.Dir = "/"
	cmd.Env = envList(baseEnv("/", os.TempDir()))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}
