package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// coldRunner starts a fresh interpreter per run.
type coldRunner struct {
	h *host
}

// NewCold returns a runner that starts a fresh python process per run
// (about 1-2 s for a script importing numpy, pandas and scikit-learn). The
// sandbox is probed once per interpreter; see [IsolationLevel].
func NewCold(python string) Runner {
	h, err := newHost(python)
	if err != nil {
		return errRunner{err}
	}
	return &coldRunner{h: h}
}

// errRunner is a Runner whose construction failed: every Run reports why.
type errRunner struct{ err error }

func (e errRunner) Run(context.Context, Request) (Result, error) { return Result{}, e.err }
func (e errRunner) Close() error                                 { return nil }

func (c *coldRunner) Close() error {
	c.h.close()
	return nil
}

// Run runs req in a fresh process. Refusals (ErrPathEscape), setup
// failures (ErrSetup) and a done ctx are errors; everything the script did
// is in the Result.
func (c *coldRunner) Run(ctx context.Context, req Request) (Result, error) {
	p, err := c.h.prepare(req)
	if err != nil {
		return Result{}, err
	}
	defer p.cleanup()
	if res, refused := p.refuseOverQuota(); refused {
		return res, nil
	}
	return runCold(ctx, c.h.python, p)
}

func runCold(ctx context.Context, python string, p *prepared) (Result, error) {
	if err := p.attempt(); err != nil {
		return Result{}, err
	}
	defer p.ctl.close()
	cfg, _ := json.Marshal(p.cfg)
	srcR, srcW, err := os.Pipe()
	if err != nil {
		return Result{}, fmt.Errorf("sandbox: %w", err)
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		srcR.Close()
		srcW.Close()
		return Result{}, fmt.Errorf("sandbox: %w", err)
	}
	defer stR.Close()
	cmd := newPythonCmd(python, "cold", string(cfg))
	cmd.ExtraFiles = []*os.File{srcR, stW, p.ctl.child}
	if p.runAs != nil {
		cmd.SysProcAttr.Credential = p.runAs
	}
	var pgid int
	var killOnce sync.Once
	kill := func() {
		killOnce.Do(func() {
			if pgid > 0 {
				syscall.Kill(-pgid, syscall.SIGKILL)
			}
			go p.cg.kill()
		})
	}
	budget := &outputBudget{kill: p.limits.KillOutputBytes, onKill: func() { kill() }}
	out, errOut := newCapture(p.limits.MaxOutputBytes, budget), newCapture(p.limits.MaxOutputBytes, budget)
	cmd.Stdout, cmd.Stderr = out, errOut
	cmd.WaitDelay = time.Second
	start := time.Now()
	err = cmd.Start()
	srcR.Close()
	stW.Close()
	if err != nil {
		srcW.Close()
		return Result{}, fmt.Errorf("sandbox: start %s: %w", python, err)
	}
	p.ctl.start()
	pgid = cmd.Process.Pid
	p.ws.mainPid.Store(int64(pgid))
	go func() {
		srcW.Write(p.source)
		srcW.Close()
	}()
	statusc := make(chan []byte, 1)
	go func() {
		b, _ := readAllLimited(stR, 1<<16)
		statusc <- b
	}()
	var timedOut atomic.Bool
	timer := time.AfterFunc(p.limits.Timeout, func() { timedOut.Store(true); kill() })
	stop := context.AfterFunc(ctx, kill)
	stopWatch := p.watchSpawn(kill)
	stopQuota := p.watchWorkspace(kill)
	werr := cmd.Wait()
	timer.Stop()
	stop()
	spawnReason, quotaReason := stopWatch(), stopQuota()
	dur := time.Since(start)
	if pgid > 0 {
		syscall.Kill(-pgid, syscall.SIGKILL) // stragglers the script left in its group
	}
	status := <-statusc
	res := Result{Duration: dur}
	res.Stdout, res.Truncated = out.result()
	var trunc bool
	res.Stderr, trunc = errOut.result()
	res.Truncated = res.Truncated || trunc
	if string(status) != "R" {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		return res, fmt.Errorf("%w: %s", ErrSetup, strings.TrimPrefix(string(status), "E"))
	}
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) && !errors.Is(werr, exec.ErrWaitDelay) {
		return res, fmt.Errorf("sandbox: wait: %w", werr)
	}
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		res.MaxRSSBytes = ru.Maxrss * 1024
	}
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	if ws.Signaled() {
		res.Signal, res.ExitCode = int(ws.Signal()), -1
	} else {
		res.ExitCode = ws.ExitStatus()
	}
	res.Outcome = classify(timedOut.Load(), budget.killed.Load(), res.ExitCode, res.Signal, res.Stderr)
	p.settle(&res, cpu, spawnReason, quotaReason)
	if ctx.Err() != nil && !timedOut.Load() {
		return res, ctx.Err()
	}
	return res, nil
}
