package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// control is a run's control socket: a SOCK_SEQPACKET pair whose one end
// the child gets. During its setup, before any user code, the child sends
// one message on it (bootstrap.py's hand_over): its pid, and the file
// descriptors the runner keeps and the script must not have: the root of
// the run's workspace tmpfs (space.go) and the listening sockets of a
// guarded run's markers. Then it closes them and the socket.
type control struct {
	fd    int      // the runner's end
	child *os.File // the child's end, closed here once the child has it
	marks []string // what the runner answers marker k with
	quota WorkspaceQuota
	// opaque is the overlay's opaque xattr for this isolation level.
	opaque string

	done      chan struct{} // closed once the message came (or never will)
	once      sync.Once
	receiving bool
	closed    bool
	pid       int
	err       error
	space     atomic.Pointer[runSpace]
	ls        []*net.UnixListener
	serve     sync.WaitGroup
}

// ctlMessage is what the child sends.
type ctlMessage struct {
	Pid    int   `json:"pid"`
	WS     bool  `json:"ws"`
	Inodes int64 `json:"ws_inodes"`
	Marks  int   `json:"marks"`
}

func newControl(marks []string, q WorkspaceQuota, opaque string) (*control, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox: control socket: %w", err)
	}
	return &control{fd: fds[0], child: os.NewFile(uintptr(fds[1]), "mlerl-control"), marks: marks, quota: q, opaque: opaque, done: make(chan struct{})}, nil
}

// handedOver closes the runner's copy of the child's end: call it once
// the child has its own (started, or sent to the warm worker).
func (c *control) handedOver() {
	if c != nil && c.child != nil {
		c.child.Close()
		c.child = nil
	}
}

// start waits, in the background, for the child's message, and then
// answers its markers: call it once the child started.
func (c *control) start() {
	c.handedOver()
	c.receiving = true
	go c.receive()
}

// receive waits for the child's message and starts answering its
// markers. It returns when the message came, or the child closed its end
// without one (its setup failed), or stopMarks was called.
func (c *control) receive() {
	defer close(c.done)
	buf := make([]byte, 512)
	oob := make([]byte, unix.CmsgSpace(4*(1+len(c.marks)+4)))
	var n, oobn int
	var err error
	for {
		n, oobn, _, _, err = unix.Recvmsg(c.fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil || n == 0 {
		c.err = fmt.Errorf("the sandboxed process sent no control message (%v)", err)
		return
	}
	var fds []int
	if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
		for _, m := range msgs {
			if got, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	var msg ctlMessage
	want := len(c.marks)
	if err := json.Unmarshal(buf[:n], &msg); err != nil || msg.Pid <= 0 || msg.Marks != want || len(fds) != want+btoi(msg.WS) {
		for _, fd := range fds {
			unix.Close(fd)
		}
		c.err = fmt.Errorf("the sandboxed process sent a malformed control message (%q, %d descriptors)", buf[:n], len(fds))
		return
	}
	c.pid = msg.Pid
	if msg.WS {
		c.space.Store(&runSpace{fd: fds[0], baseInodes: msg.Inodes, opaque: c.opaque})
		fds = fds[1:]
	}
	for k, fd := range fds {
		f := os.NewFile(uintptr(fd), "mlerl-mark")
		l, err := net.FileListener(f)
		f.Close() // FileListener made its own copy
		ul, ok := l.(*net.UnixListener)
		if err != nil || !ok {
			if l != nil {
				l.Close()
			}
			continue // that marker prints nothing
		}
		c.ls = append(c.ls, ul)
		c.serve.Add(1)
		go c.answer(ul, c.marks[k])
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// answer writes line to each connection from the script's process (its
// pid, threads included) on marker socket l, and nothing to any other.
func (c *control) answer(l *net.UnixListener, line string) {
	defer c.serve.Done()
	for {
		conn, err := l.AcceptUnix()
		if err != nil {
			return
		}
		pid := 0
		if raw, err := conn.SyscallConn(); err == nil {
			raw.Control(func(fd uintptr) {
				if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
					pid = int(cred.Pid)
				}
			})
		}
		if pid == c.pid {
			conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
			conn.Write([]byte(line))
		}
		conn.Close()
	}
}

// wait returns once the child's message came or never will: its setup
// failed (the child's end is closed) or close was called.
func (c *control) wait() { <-c.done }

// runSpace returns the run's tmpfs once the child handed it over (nil
// before, and for runs without one).
func (c *control) runSpace() *runSpace {
	if c == nil {
		return nil
	}
	return c.space.Load()
}

// stopMarks stops answering markers (the run is over).
func (c *control) stopMarks() {
	if c == nil || !c.receiving {
		return
	}
	c.once.Do(func() {
		unix.Shutdown(c.fd, unix.SHUT_RDWR) // wakes receive if it still waits
	})
	c.wait()
	for _, l := range c.ls {
		l.Close()
	}
	c.serve.Wait()
}

// close releases everything: the socket, the marker listeners and the
// run's tmpfs (whatever the run left there is freed).
func (c *control) close() {
	if c == nil || c.closed {
		return
	}
	c.closed = true
	c.handedOver()
	c.stopMarks()
	unix.Close(c.fd)
	c.space.Load().close()
}
