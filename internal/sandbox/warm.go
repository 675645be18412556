package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// DefaultPreload is what the warm worker imports before forking children:
// what the built-in tasks' scripts and the idea catalog's edits import.
var DefaultPreload = []string{
	"numpy", "pandas", "scipy", "scipy.sparse", "scipy.sparse.linalg", "scipy.stats", "scipy.optimize",
	"sklearn", "sklearn.base", "sklearn.calibration", "sklearn.cluster", "sklearn.compose",
	"sklearn.datasets", "sklearn.decomposition", "sklearn.discriminant_analysis", "sklearn.ensemble",
	"sklearn.feature_extraction.text", "sklearn.feature_selection", "sklearn.impute",
	"sklearn.kernel_approximation", "sklearn.kernel_ridge", "sklearn.linear_model", "sklearn.metrics",
	"sklearn.model_selection", "sklearn.multiclass", "sklearn.multioutput", "sklearn.naive_bayes",
	"sklearn.neighbors", "sklearn.neural_network", "sklearn.pipeline", "sklearn.preprocessing",
	"sklearn.svm", "sklearn.tree", "sklearn.utils.class_weight",
}

// restartEvery spaces restart attempts of a worker that keeps dying.
const restartEvery = 5 * time.Second

// errWorkerDied: the warm worker exited or its socket broke during a run.
var errWorkerDied = errors.New("warm worker died")

// warmRunner hands runs to a long-lived worker process and falls back to
// cold runs while the worker is down, restarting it in the background.
type warmRunner struct {
	h       *host
	preload []string

	mu         sync.Mutex
	w          *worker
	restarting bool
	lastStart  time.Time // of the last restart attempt: one per restartEvery at most
	closed     bool
	starts     int // workers started, for tests
}

// NewWarm starts a warm worker: one python process that imports
// [DefaultPreload] once and then, per run, forks a child that sandboxes
// itself exactly like a cold run does and executes the script. Runs may be
// concurrent (one child each). When the worker dies, runs fall back to cold
// processes (a run in flight at that moment is killed and re-run cold) and
// the worker is restarted.
func NewWarm(ctx context.Context, python string) (Runner, error) {
	h, err := newHost(python)
	if err != nil {
		return nil, err
	}
	r := &warmRunner{h: h, preload: DefaultPreload}
	w, err := startWorker(ctx, h, r.preload)
	if err != nil {
		h.close()
		return nil, err
	}
	r.w, r.starts = w, 1
	return r, nil
}

func (r *warmRunner) Close() error {
	r.mu.Lock()
	w := r.w
	r.closed, r.w = true, nil
	r.mu.Unlock()
	if w != nil {
		w.close()
	}
	r.h.close()
	return nil
}

// worker returns the live worker, or nil after starting a restart.
func (r *warmRunner) worker() *worker {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w != nil && !r.w.isDead() {
		return r.w
	}
	if !r.restarting && !r.closed && time.Since(r.lastStart) > restartEvery {
		r.restarting, r.lastStart = true, time.Now()
		go r.restart()
	}
	return nil
}

func (r *warmRunner) restart() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := startWorker(ctx, r.h, r.preload)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.restarting = false
	if err != nil || r.closed {
		if w != nil {
			w.close()
		}
		return
	}
	if r.w != nil {
		r.w.close()
	}
	r.w = w
	r.starts++
}

func (r *warmRunner) Run(ctx context.Context, req Request) (Result, error) {
	p, err := r.h.prepare(req)
	if err != nil {
		return Result{}, err
	}
	defer p.cleanup()
	if res, refused := p.refuseOverQuota(); refused {
		return res, nil
	}
	if w := r.worker(); w != nil {
		res, err := w.run(ctx, p)
		if !errors.Is(err, errWorkerDied) {
			res.Warm = true
			return res, err
		}
		r.worker() // start the restart
	}
	return runCold(ctx, r.h.python, p)
}

// event is one message from the worker.
type event struct {
	ID      int64   `json:"id"`
	Event   string  `json:"event"`
	Pid     int     `json:"pid"`
	OK      bool    `json:"ok"`
	Error   string  `json:"error"`
	Code    *int    `json:"code"`
	Signal  int     `json:"signal"`
	MaxRSS  int64   `json:"maxrss_kb"`
	CPUSecs float64 `json:"cpu_s"`
}

// worker is one running bootstrap.py in serve mode, talking over a
// SOCK_SEQPACKET socket: one JSON message per datagram, file descriptors
// (the child's source pipe, stdout and stderr) passed with SCM_RIGHTS.
type worker struct {
	cmd  *exec.Cmd
	conn *net.UnixConn
	wmu  sync.Mutex
	next atomic.Int64
	log  *capture

	mu      sync.Mutex
	pending map[int64]chan event
	dead    chan struct{}
	exited  chan struct{} // closed when the process has been waited for
	once    sync.Once
}

func startWorker(ctx context.Context, h *host, preload []string) (*worker, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox: socketpair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "worker-sock"), os.NewFile(uintptr(fds[1]), "worker-sock-child")
	defer ours.Close()
	fc, err := net.FileConn(ours)
	if err != nil {
		theirs.Close()
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	cfg, _ := json.Marshal(childConfig{Preload: preload})
	cmd := newPythonCmd(h.python, "serve", string(cfg))
	cmd.ExtraFiles = []*os.File{theirs}
	w := &worker{cmd: cmd, conn: fc.(*net.UnixConn), pending: map[int64]chan event{}, dead: make(chan struct{}), exited: make(chan struct{}), log: newCapture(64<<10, nil)}
	cmd.Stdout, cmd.Stderr = w.log, w.log
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		fc.Close()
		return nil, fmt.Errorf("sandbox: start warm worker %s: %w", h.python, err)
	}
	ready := make(chan event, 1)
	w.pending[0] = ready
	go w.readLoop()
	go func() {
		cmd.Wait()
		close(w.exited)
		w.die()
	}()
	select {
	case <-ready:
		return w, nil
	case <-w.dead:
		log, _ := w.log.result()
		return nil, fmt.Errorf("sandbox: warm worker exited while starting: %s", lastLines(log, 5))
	case <-ctx.Done():
		w.close()
		return nil, ctx.Err()
	}
}

func (w *worker) isDead() bool {
	select {
	case <-w.dead:
		return true
	default:
		return false
	}
}

func (w *worker) die() {
	w.once.Do(func() {
		close(w.dead)
		w.conn.Close()
	})
}

// close ends the worker: closing the socket makes it kill its children and
// exit; the process group is killed in case it does not.
func (w *worker) close() {
	w.die()
	select {
	case <-w.exited:
	case <-time.After(2 * time.Second):
		syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
		<-w.exited
	}
}

func (w *worker) readLoop() {
	buf := make([]byte, 1<<16)
	for {
		n, _, _, _, err := w.conn.ReadMsgUnix(buf, nil)
		if err != nil || n == 0 {
			w.die()
			return
		}
		var ev event
		if json.Unmarshal(buf[:n], &ev) != nil {
			continue
		}
		w.mu.Lock()
		ch := w.pending[ev.ID]
		w.mu.Unlock()
		if ch != nil {
			ch <- ev
		}
	}
}

func (w *worker) send(msg any, fds []int) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	var oob []byte
	if len(fds) > 0 {
		oob = syscall.UnixRights(fds...)
	}
	w.wmu.Lock()
	defer w.wmu.Unlock()
	_, _, err = w.conn.WriteMsgUnix(b, oob, nil)
	return err
}

// run executes one prepared request in a forked child.
func (w *worker) run(ctx context.Context, p *prepared) (Result, error) {
	id := w.next.Add(1)
	events := make(chan event, 2)
	w.mu.Lock()
	w.pending[id] = events
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.pending, id)
		w.mu.Unlock()
	}()

	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	pipe := func() (*os.File, *os.File, error) {
		r, wr, err := os.Pipe()
		if err == nil {
			files = append(files, r, wr)
		}
		return r, wr, err
	}
	srcR, srcW, err1 := pipe()
	outR, outW, err2 := pipe()
	errR, errW, err3 := pipe()
	err4 := p.attempt()
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		closeAll()
		return Result{}, fmt.Errorf("sandbox: %w", err)
	}
	defer p.ctl.close()
	cfg := p.cfg
	cfg.Op, cfg.ID = "run", id
	start := time.Now()
	err := w.send(cfg, []int{int(srcR.Fd()), int(outW.Fd()), int(errW.Fd()), int(p.ctl.child.Fd())})
	srcR.Close()
	outW.Close()
	errW.Close()
	p.ctl.start()
	if err != nil {
		srcW.Close()
		outR.Close()
		errR.Close()
		return Result{}, fmt.Errorf("%w: %v", errWorkerDied, err)
	}
	go func() {
		srcW.Write(p.source)
		srcW.Close()
	}()

	var killed atomic.Bool
	var pid atomic.Int64
	kill := func() {
		if killed.Swap(true) {
			return
		}
		w.send(map[string]any{"op": "kill", "id": id}, nil)
		go p.cg.kill()
	}
	budget := &outputBudget{kill: p.limits.KillOutputBytes, onKill: kill}
	out, errOut := newCapture(p.limits.MaxOutputBytes, budget), newCapture(p.limits.MaxOutputBytes, budget)
	var drained sync.WaitGroup
	drained.Add(2)
	go drain(outR, out, &drained)
	go drain(errR, errOut, &drained)
	finish := func() {
		// Output pipes close when every holder exits; a straggler that
		// escaped the process group must not hold the run forever.
		done := make(chan struct{})
		go func() { drained.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Second):
		}
		outR.Close()
		errR.Close()
		drained.Wait()
	}

	var timedOut atomic.Bool
	timer := time.AfterFunc(p.limits.Timeout, func() { timedOut.Store(true); kill() })
	defer timer.Stop()
	stop := context.AfterFunc(ctx, kill)
	defer stop()
	stopWatch := p.watchSpawn(kill)
	defer stopWatch()
	stopQuota := p.watchWorkspace(kill)
	defer stopQuota()

	var started event
	for {
		select {
		case ev := <-events:
			switch ev.Event {
			case "started":
				started = ev
				pid.Store(int64(ev.Pid))
				p.ws.mainPid.Store(int64(ev.Pid))
				continue
			case "exit":
			}
			dur := time.Since(start)
			finish()
			res := Result{Duration: dur, MaxRSSBytes: ev.MaxRSS * 1024}
			var t1, t2 bool
			res.Stdout, t1 = out.result()
			res.Stderr, t2 = errOut.result()
			res.Truncated = t1 || t2
			if !started.OK {
				if ctx.Err() != nil {
					return res, ctx.Err()
				}
				return res, fmt.Errorf("%w: %s", ErrSetup, started.Error)
			}
			if ev.Signal != 0 {
				res.Signal, res.ExitCode = ev.Signal, -1
			} else if ev.Code != nil {
				res.ExitCode = *ev.Code
			}
			res.Outcome = classify(timedOut.Load(), budget.killed.Load(), res.ExitCode, res.Signal, res.Stderr)
			spawnReason, quotaReason := stopWatch(), stopQuota()
			p.settle(&res, time.Duration(ev.CPUSecs*float64(time.Second)), spawnReason, quotaReason)
			if ctx.Err() != nil && !timedOut.Load() {
				return res, ctx.Err()
			}
			return res, nil
		case <-w.dead:
			if p := pid.Load(); p > 0 {
				syscall.Kill(-int(p), syscall.SIGKILL)
			}
			p.cg.kill()
			finish()
			return Result{}, errWorkerDied
		}
	}
}
