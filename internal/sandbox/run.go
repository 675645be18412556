package sandbox

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mlerl/mlerl/internal/safefile"
)

// bootstrap is the Python side of both runners: it sandboxes a fresh
// process (or a forked child of the warm worker) and runs the script in it.
//
//go:embed bootstrap.py
var bootstrap string

// Errors a caller must tell apart from script failures: they are refusals
// or faults of the sandbox itself, not outcomes of the script.
var (
	// ErrPathEscape: the script path is absolute, climbs out of Dir with
	// "..", or resolves (through a symlink) to a file outside Dir.
	ErrPathEscape = errors.New("script path escapes the workspace")
	// ErrSetup: the sandbox could not be set up for the run (namespace,
	// cgroup or limit failure); the script did not start.
	ErrSetup = errors.New("sandbox setup failed")
)

// Isolation levels, from strongest to weakest; see [IsolationLevel].
const (
	// IsolateRoot: the runner is root. Each script gets its own network
	// namespace (loopback only: no host services, no cloud metadata server,
	// no internet) and its own mount namespace whose root is a fresh tmpfs holding read-only binds of the
	// system directories (/usr, /etc, /lib...), /dev/{null,zero,full,random,urandom},
	// a private tmpfs /tmp and /dev/shm, a proc showing only the run's own
	// processes (hidepid), and the workspace read-write at its own path;
	// nothing else of the host filesystem exists (pivot_root, old root
	// detached). The script then runs with no_new_privs as an unprivileged
	// uid/gid of its own (one of 1000 per runner, above 1,000,000, so that
	// concurrent runs cannot see or ptrace each other), so it cannot undo
	// the mounts; the runner hands the workspace to that uid for the run and
	// back to the workspace's owner afterwards. Its workspace is an
	// overlay on a tmpfs of the run's own, whose size the kernel enforces
	// (space.go).
	IsolateRoot = "root"
	// IsolateUserNS: not root, but unprivileged user namespaces work: the
	// same network and filesystem view inside a user namespace, keeping the caller's
	// uid, without /proc (mounting one needs a pid namespace; binding the
	// host's would expose the caller's other processes), so process-based
	// parallelism that reads /proc (joblib's loky backend) fails there.
	// The workspace's tmpfs and overlay work there too (tmpfs mounts in a
	// user namespace; overlay with userxattr, Linux 5.11 or later, and
	// tmpfs's user xattrs, 6.6 or later): the same kernel-enforced
	// workspace size, charged to the caller's own memory cgroup (the
	// runner makes no memory cgroup of its own without root or a delegated
	// cgroup v2 subtree).
	IsolateUserNS = "userns"
	// IsolateNone: neither works. Limits still apply, but the script sees
	// the host filesystem and network: with the caller's permissions, or,
	// when the caller is root, as an unprivileged uid of its own (which
	// still reads world-readable files). The workspace quota is measured
	// only (quota.go), and /tmp is the host's.
	IsolateNone = "none"
)

// sandboxUIDs is how many uids a runner cycles through under IsolateRoot.
const sandboxUIDs = 1000

// DefaultLimits returns the limits a zero field takes: 5 min wall clock,
// 4 GiB of address space, 64 processes, 1 CPU core, 1 MiB of each output
// stream kept, CPU time = wall clock, 2 GiB per written file, killed after
// 64 MiB of output, a workspace of at most 1 GiB and 10,000 files and
// folders (the built-in tasks' largest after a run: 1.2 MiB, 7 entries).
func DefaultLimits() Limits {
	return Limits{Timeout: 5 * time.Minute, MemoryBytes: 4 << 30, MaxProcs: 64, CPUs: 1, MaxOutputBytes: 1 << 20, MaxFileBytes: 2 << 30,
		WorkspaceBytes: 1 << 30, WorkspaceFiles: 10000}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.Timeout <= 0 {
		l.Timeout = d.Timeout
	}
	if l.MemoryBytes <= 0 {
		l.MemoryBytes = d.MemoryBytes
	}
	if l.MaxProcs <= 0 {
		l.MaxProcs = d.MaxProcs
	}
	if !(l.CPUs > 0) { // NaN too
		l.CPUs = d.CPUs
	}
	// More cores than the machine has (+Inf included) is all of them: a
	// quota must stay a finite number of microseconds.
	l.CPUs = min(l.CPUs, float64(runtime.NumCPU()))
	if l.MaxOutputBytes <= 0 {
		l.MaxOutputBytes = d.MaxOutputBytes
	}
	if l.CPUTime <= 0 {
		l.CPUTime = l.Timeout
	}
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = d.MaxFileBytes
	}
	if l.KillOutputBytes <= 0 {
		l.KillOutputBytes = 64 * int64(l.MaxOutputBytes)
	}
	if l.WorkspaceBytes <= 0 {
		l.WorkspaceBytes = d.WorkspaceBytes
	}
	if l.WorkspaceFiles <= 0 {
		l.WorkspaceFiles = d.WorkspaceFiles
	}
	return l
}

// quota is the workspace quota of l.
func (l Limits) quota() WorkspaceQuota {
	return WorkspaceQuota{Bytes: l.WorkspaceBytes, Files: l.WorkspaceFiles}
}

// tmpBytes is the size of the private /tmp and /dev/shm tmpfs of an
// isolated script (tmpfs pages are host memory outside RLIMIT_AS).
const tmpBytes = 512 << 20

// childConfig is what bootstrap.py reads: the command line of a cold run,
// or one request message to the warm worker.
type childConfig struct {
	Op          string            `json:"op,omitempty"`
	WS          *spaceConfig      `json:"ws,omitempty"`
	Marks       int               `json:"marks,omitempty"`
	ID          int64             `json:"id,omitempty"`
	Dir         string            `json:"dir"`
	Script      string            `json:"script"`
	Isolation   string            `json:"isolation"`
	Root        string            `json:"root"`
	Scratch     string            `json:"scratch,omitempty"`
	TmpBytes    int64             `json:"tmp_bytes"`
	UID         int               `json:"uid"`
	GID         int               `json:"gid"`
	CgroupProcs []string          `json:"cgroup_procs,omitempty"`
	PidsCgroup  bool              `json:"pids_cgroup"`
	MaxProcs    int               `json:"max_procs"`
	Limits      childLimits       `json:"limits"`
	Env         map[string]string `json:"env"`
	Preload     []string          `json:"preload,omitempty"`
	Guard       bool              `json:"guard,omitempty"`
}

// spaceConfig sizes a run's workspace tmpfs (space.go).
type spaceConfig struct {
	Bytes  int64 `json:"bytes"`
	Inodes int   `json:"inodes"`
}

// space returns the tmpfs of a run held to q.
func space(q WorkspaceQuota) *spaceConfig {
	q = q.withDefaults()
	return &spaceConfig{Bytes: q.Bytes + spaceSlack, Inodes: q.Files + spaceInodes}
}

type childLimits struct {
	MemoryBytes int64 `json:"memory_bytes"`
	CPUSeconds  int64 `json:"cpu_seconds"`
	FileBytes   int64 `json:"file_bytes"`
}

// baseEnv is the whole environment of a script; HOME is the workspace.
func baseEnv(home, tmp string) map[string]string {
	return map[string]string{
		"PATH":                    "/usr/local/bin:/usr/bin:/bin",
		"HOME":                    home,
		"TMPDIR":                  tmp,
		"LANG":                    "C.UTF-8",
		"LC_ALL":                  "C.UTF-8",
		"PYTHONHASHSEED":          "0",
		"PYTHONUNBUFFERED":        "1",
		"PYTHONDONTWRITEBYTECODE": "1",
		"OMP_NUM_THREADS":         "1",
		"OPENBLAS_NUM_THREADS":    "1",
		"MKL_NUM_THREADS":         "1",
		"NUMEXPR_NUM_THREADS":     "1",
		"MPLBACKEND":              "Agg",
		"MPLCONFIGDIR":            filepath.Join(tmp, "matplotlib"),
		"USER":                    "sandbox", // the sandbox uid has no passwd entry
		"LOGNAME":                 "sandbox",
	}
}

func envList(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}

// host holds what every run of one runner shares: the interpreter, the
// isolation level, the empty directory new roots are mounted on, and the
// parent cgroups.
type host struct {
	python    string
	isolation string
	// scratch is the empty folder each run's workspace tmpfs is first
	// mounted on, in the run's mount namespace (bootstrap.py).
	scratch string
	// space: runs get a workspace tmpfs of their own (the probe found
	// that tmpfs and overlay mounts work at this isolation level).
	space   bool
	root    string
	cg      *cgroups
	tmp     string // TMPDIR for IsolateNone
	uidBase int    // first sandbox uid (IsolateRoot)
	runs    atomic.Int64
	// runAs, when set, starts cold children as that user: what a non-root
	// caller's children are (the tests of IsolateUserNS, run as root).
	runAs *syscall.Credential
}

func newHost(python string) (*host, error) {
	removeStaleRoots()
	root, err := os.MkdirTemp("", fmt.Sprintf("mlerl-sandbox-root-%d-", os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	scratch, err := os.MkdirTemp("", fmt.Sprintf("mlerl-sandbox-root-%d-ws-", os.Getpid()))
	if err != nil {
		os.Remove(root)
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	h := &host{python: python, root: root, scratch: scratch, cg: newCgroups(), tmp: os.TempDir(), uidBase: 1_000_000 + sandboxUIDs*mrand.IntN(1_000_000)}
	h.isolation, h.space = isolation(python)
	return h, nil
}

// removeStaleRoots removes the (empty) mount-point directories of runners
// whose process is gone without Close.
func removeStaleRoots() {
	ents, _ := os.ReadDir(os.TempDir())
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "mlerl-sandbox-root-")
		if !ok {
			continue
		}
		pidStr, _, found := strings.Cut(rest, "-")
		if pid, err := strconv.Atoi(pidStr); found && err == nil && syscall.Kill(pid, 0) != nil {
			os.Remove(filepath.Join(os.TempDir(), e.Name())) // only if empty
		}
	}
}

func (h *host) close() {
	os.Remove(h.root)
	os.Remove(h.scratch)
	h.cg.close()
}

// prepared is a validated request ready to hand to a child.
type prepared struct {
	cfg     childConfig
	limits  Limits
	source  []byte
	marks   []string   // the guarded run's marker lines: held here only
	opaque  string     // the overlay's opaque xattr (space.go)
	cg      *runCgroup // nil: none could be made
	ctl     *control   // the current attempt's control socket
	runAs   *syscall.Credential
	cleanup func()
	// ws measures the workspace; baseline is what it held before the run
	// (what a run over its quota is taken back to); preOver says how it
	// was already over its quota then (the run does not start).
	ws       *workspaceWatch
	baseline map[string]baselineEntry
	preOver  string
}

// prepare validates req, reads the script when no Source is given, creates
// the run's cgroups and, under IsolateRoot, hands the workspace to the
// sandbox uid.
func (h *host) prepare(req Request) (*prepared, error) {
	dir, script, err := resolveScript(req)
	if err != nil {
		return nil, err
	}
	source := req.Source
	if source == nil {
		if source, err = os.ReadFile(filepath.Join(dir, script)); err != nil {
			return nil, fmt.Errorf("sandbox: read script: %w", err)
		}
	}
	lim := req.Limits.withDefaults()
	tmp := "/tmp"
	if h.isolation == IsolateNone {
		tmp = h.tmp
	}
	cfg := childConfig{
		Dir: dir, Script: script, Isolation: h.isolation, Root: h.root, Scratch: h.scratch, TmpBytes: tmpBytes,
		UID: -1, GID: -1, MaxProcs: lim.MaxProcs,
		Limits: childLimits{MemoryBytes: lim.MemoryBytes, CPUSeconds: int64((lim.CPUTime + time.Second - 1) / time.Second), FileBytes: min(lim.MaxFileBytes, lim.WorkspaceBytes)},
		Env:    baseEnv(dir, tmp),
	}
	if req.Marks != nil {
		// The marker lines stay in the runner, which answers each marker's
		// socket with its line (control.go): they never enter the script's
		// process before their marker runs.
		cfg.Guard, cfg.Marks = true, len(req.Marks)
	}
	memBytes := lim.MemoryBytes + memSlack
	if h.isolation != IsolateNone {
		memBytes += 2 * tmpBytes
	}
	opaque := "trusted.overlay.opaque"
	if h.isolation == IsolateUserNS {
		opaque = "user.overlay.opaque"
	}
	if h.space {
		cfg.WS = space(lim.quota())
		memBytes += cfg.WS.Bytes
	}
	p := &prepared{cfg: cfg, limits: lim, source: source, marks: req.Marks, opaque: opaque, runAs: h.runAs}
	base, over, err := workspaceBaseline(dir, lim.quota())
	if err != nil {
		return nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return nil, fmt.Errorf("sandbox: workspace %s: %w", dir, err)
	}
	p.baseline, p.preOver = base, over
	p.ws = &workspaceWatch{dir: dir, q: lim.quota(), dev: uint64(st.Dev)}
	var cleanups []func()
	p.cleanup = func() {
		for _, f := range cleanups {
			f()
		}
	}
	if rc := h.cg.create(lim.MaxProcs, lim.CPUs, memBytes); rc != nil {
		p.cg = rc
		p.cfg.CgroupProcs, p.cfg.PidsCgroup = rc.procs(), rc.pids != ""
		cleanups = append(cleanups, rc.remove)
		p.ws.cg = rc
	}
	if h.isolation == IsolateRoot || (h.isolation == IsolateNone && os.Geteuid() == 0) {
		// The workspace belongs to the run's uid while it runs, and to the
		// workspace's owner again afterwards (new files included), once
		// every process of the run is dead.
		uid := h.uidBase + int(h.runs.Add(1)%sandboxUIDs)
		p.cfg.UID, p.cfg.GID = uid, uid
		cleanups = append(cleanups, func() { chownTree(dir, int(st.Uid), int(st.Gid)) })
		if err := chownTree(dir, uid, uid); err != nil {
			p.cleanup()
			return nil, fmt.Errorf("sandbox: hand the workspace to uid %d: %w", uid, err)
		}
	}
	return p, nil
}

// A run whose forks pids.max keeps refusing does nothing but spawn (a
// fork bomb that survives its failed forks spins until its time limit):
// after spawnKillAfter of refusals, never spawnGap apart, it is killed. A
// script that meets the limit once (a pool too large for it) and goes on
// is left alone. The gap is not one poll: a refused fork is slow (the
// kernel copies the process's memory map before the pids check), so a
// bomb of large processes held to one core may see none in a window.
const (
	spawnPoll      = 250 * time.Millisecond
	spawnGap       = time.Second
	spawnKillAfter = 3 * time.Second
)

// watchSpawn watches the run's refused forks and calls kill once they
// have not stopped for spawnKillAfter. The returned stop ends the watch
// and returns why it killed the run ("" when it did not). Without a pids
// cgroup there is nothing to watch: RLIMIT_NPROC's refusals are invisible
// to the runner.
func (p *prepared) watchSpawn(kill func()) (stop func() string) {
	last, ok := p.cg.forkFailures()
	if !ok {
		return func() string { return "" }
	}
	done := make(chan struct{})
	var reason string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(spawnPoll)
		defer tick.Stop()
		// since: when the current streak of refusals began; hit: the
		// window that saw the last refusal.
		var since, hit time.Time
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				n, ok := p.cg.forkFailures()
				if !ok {
					return
				}
				if n == last {
					if now.Sub(hit) > spawnGap {
						since = time.Time{}
					}
					continue
				}
				last = n
				if since.IsZero() {
					since = now.Add(-spawnPoll)
				}
				hit = now
				if now.Sub(since) >= spawnKillAfter {
					reason = fmt.Sprintf("the script kept creating processes beyond the limit of %d (processes and threads at once) for %d s", p.limits.MaxProcs, int(spawnKillAfter/time.Second))
					kill()
					return
				}
			}
		}
	}()
	var once sync.Once
	return func() string {
		once.Do(func() { close(done) })
		wg.Wait()
		return reason
	}
}

// settle kills what is left of the run (every member of its cgroups, those
// that left the process group included) and records in res the CPU time
// it used and the cores it was held to. The CPU time is the cgroup's count
// when there is one, else fallback: the script process's own and its
// waited-for children's (wait4), which misses processes it left behind.
// Then the workspace is measured: a run over its quota is killed (see
// quota.go), whatever else it did.
func (p *prepared) settle(res *Result, fallback time.Duration, spawnReason, quotaReason string) {
	p.cg.kill()
	p.ctl.stopMarks()
	res.CPUTime = fallback
	if d, ok := p.cg.cpuTime(); ok {
		res.CPUTime = d
	}
	if p.cg != nil {
		res.CPUs = p.cg.cpus
	}
	if spawnReason != "" && res.Outcome != OutputLimit {
		res.Outcome, res.Reason = Killed, spawnReason
	}
	if n := p.cg.oomKills(); n > 0 && res.Outcome == Killed && res.Reason == "" {
		res.Reason = fmt.Sprintf("the run's processes and files together passed its memory limit of %s (the kernel ended %d of its processes)", safefile.Bytes(p.cg.memMax), n)
	}
	p.guardStopped(res)
	if err := p.finishWorkspace(res, quotaReason); err != nil {
		res.Reason += " (not all of it: " + err.Error() + ")"
	}
	p.ctl.close()
}

// attempt makes the control socket of one attempt at the run (a warm
// run whose worker died is attempted again cold).
func (p *prepared) attempt() error {
	p.ctl.close()
	c, err := newControl(p.marks, p.limits.quota(), p.opaque)
	if err != nil {
		return err
	}
	p.ctl = c
	return nil
}

// chownTree hands dir and everything in it to uid and gid, by folder
// handles (paths of any length), never through a link.
func chownTree(dir string, uid, gid int) error {
	if err := os.Lchown(dir, uid, gid); err != nil {
		return err
	}
	m := newMeasurer(WorkspaceQuota{Bytes: math.MaxInt64, Files: math.MaxInt})
	return m.walkRoot(dir, func(dirfd int, _, name string, _ *unix.Stat_t) error {
		return unix.Fchownat(dirfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
	})
}

// resolveScript returns the workspace's real path and the cleaned script
// path, refusing scripts outside the workspace.
func resolveScript(req Request) (dir, script string, err error) {
	if req.Dir == "" {
		return "", "", errors.New("sandbox: empty workspace Dir")
	}
	dir, err = filepath.Abs(req.Dir)
	if err == nil {
		dir, err = filepath.EvalSymlinks(dir)
	}
	if err != nil {
		return "", "", fmt.Errorf("sandbox: workspace %s: %w", req.Dir, err)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return "", "", fmt.Errorf("sandbox: workspace %s is not a directory", req.Dir)
	}
	s := req.Script
	if s == "" {
		return "", "", errors.New("sandbox: empty Script")
	}
	if filepath.IsAbs(s) || strings.ContainsRune(s, 0) {
		return "", "", fmt.Errorf("%w: %q is not a path relative to the workspace", ErrPathEscape, s)
	}
	clean := filepath.Clean(s)
	if clean == ".." || strings.HasPrefix(clean, "../") || clean == "." {
		return "", "", fmt.Errorf("%w: %q climbs out of the workspace", ErrPathEscape, s)
	}
	full := filepath.Join(dir, clean)
	real, err := filepath.EvalSymlinks(full)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && req.Source != nil {
			// The instrumented copy may run for a file that is gone; its
			// parent must still be inside the workspace.
			parent, perr := filepath.EvalSymlinks(filepath.Dir(full))
			if perr == nil && (parent == dir || strings.HasPrefix(parent, dir+"/")) {
				return dir, clean, nil
			}
		}
		return "", "", fmt.Errorf("sandbox: script %q: %w", s, err)
	}
	if !strings.HasPrefix(real, dir+"/") {
		return "", "", fmt.Errorf("%w: %q resolves to %s", ErrPathEscape, s, real)
	}
	if st, err := os.Stat(real); err != nil || !st.Mode().IsRegular() {
		return "", "", fmt.Errorf("sandbox: script %q is not a regular file", s)
	}
	return dir, clean, nil
}

// guardExit is the exit status of a guarded run that bootstrap.py's
// guard stopped; guardLine starts the line it writes on stderr.
const (
	guardExit = 111
	guardLine = "mlerl sandbox: the run was stopped: "
)

// guardStopped classifies a guarded run the guard stopped as killed, with
// its reason.
func (p *prepared) guardStopped(res *Result) {
	if !p.cfg.Guard || res.ExitCode != guardExit {
		return
	}
	i := strings.LastIndex(res.Stderr, guardLine)
	if i < 0 {
		return
	}
	why, _, _ := strings.Cut(res.Stderr[i+len(guardLine):], "\n")
	res.Outcome, res.Reason = Killed, "the sandbox stopped the script: "+why
}

// memoryErrorRe matches the last line of a traceback ending in
// MemoryError (numpy's _ArrayMemoryError included).
var memoryErrorRe = regexp.MustCompile(`(?m)^(\w+\.)*\w*MemoryError\b.*$`)

// classify turns how a run ended into an Outcome. A script that raises
// MemoryError itself is classified oom too: the class is the script's own
// report, and rewards treat oom as a corner case, never as a success.
func classify(timedOut, outputKilled bool, exitCode, signal int, stderr string) Outcome {
	switch {
	case outputKilled:
		return OutputLimit
	case timedOut || signal == int(syscall.SIGXCPU):
		return Timeout
	case signal != 0:
		return Killed
	case exitCode == 0:
		return Success
	case memoryErrorRe.MatchString(lastLines(stderr, 3)):
		return OOM
	default:
		return ScriptError
	}
}

func lastLines(s string, n int) string {
	s = strings.TrimRight(s, "\n ")
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '\n' {
			n--
			if n == 0 {
				return s[i+1:]
			}
		}
	}
	return s
}

// IsolationLevel reports the strongest isolation that works for python on
// this machine (IsolateRoot, IsolateUserNS or IsolateNone). It is probed
// once per interpreter by sandboxing a throwaway process.
func IsolationLevel(python string) string {
	l, _ := isolation(python)
	return l
}

// KernelQuota reports whether runs of python on this machine write to a
// workspace tmpfs of their own whose size the kernel enforces (space.go):
// under IsolateRoot and IsolateUserNS where tmpfs and overlay mounts work
// in the run's namespaces. Otherwise the workspace quota is measured only.
func KernelQuota(python string) bool {
	_, s := isolation(python)
	return s
}

// isolation probes the isolation level and whether the workspace tmpfs
// works at it: a level without the tmpfs is still preferred to a weaker
// one.
func isolation(python string) (string, bool) {
	isoMu.Lock()
	defer isoMu.Unlock()
	if l, ok := isoCache[python]; ok {
		return l.level, l.space
	}
	l := isoResult{level: IsolateNone}
	modes := []string{IsolateUserNS}
	if os.Geteuid() == 0 {
		modes = []string{IsolateRoot, IsolateUserNS}
	}
	for _, m := range modes {
		if err := probe(python, m, true); err == nil {
			l = isoResult{m, true}
			break
		}
		if err := probe(python, m, false); err == nil {
			l.level = m
			break
		}
	}
	isoCache[python] = l
	return l.level, l.space
}

type isoResult struct {
	level string
	space bool
}

var (
	isoMu    sync.Mutex
	isoCache = map[string]isoResult{}
)

func probe(python, mode string, withSpace bool) error {
	root, err := os.MkdirTemp("", "mlerl-sandbox-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	ws := filepath.Join(root, "ws")
	nr := filepath.Join(root, "root")
	scratch := filepath.Join(root, "scratch")
	for _, d := range []string{ws, nr, scratch} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	cfg := childConfig{Dir: ws, Script: "probe.py", Isolation: mode, Root: nr, Scratch: scratch, TmpBytes: 1 << 20, UID: -1, GID: -1, Env: baseEnv(ws, "/tmp")}
	if withSpace && mode != IsolateNone {
		cfg.WS = &spaceConfig{Bytes: 1 << 20, Inodes: 64}
	}
	if mode == IsolateRoot {
		cfg.UID, cfg.GID = 65534, 65534
	}
	b, _ := json.Marshal(cfg)
	stR, stW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer stR.Close()
	cmd := newPythonCmd(python, "probe", string(b))
	cmd.ExtraFiles = []*os.File{nil, stW}
	if err := cmd.Start(); err != nil {
		stW.Close()
		return err
	}
	stW.Close()
	status, _ := readAllLimited(stR, 4096)
	cmd.Wait()
	if string(status) != "R" {
		return fmt.Errorf("%w: %s", ErrSetup, strings.TrimPrefix(string(status), "E"))
	}
	return nil
}
