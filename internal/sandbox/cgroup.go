package sandbox

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// cgroups is a runner's parent cgroups, one per hierarchy it can write
// (cgroup v1 mounts pids, cpu and cpuacct separately or together; v2 has
// one), under each of which every run gets a child of its own:
//
//   - pids: pids.max = MaxProcs. Unlike RLIMIT_NPROC (per user, and not
//     binding for root) it counts exactly the run's processes and threads;
//     pids.events counts the forks it refused, which is how the runner
//     sees a script that only spawns.
//   - cpu: a quota of Limits.CPUs cores (v2 cpu.max, v1
//     cpu.cfs_quota_us/cfs_period_us), so that 64 spinning processes get
//     the cores of one run, not the host's.
//   - accounting: the run's CPU time (v2 cpu.stat usage_usec, v1
//     cpuacct.usage), every member counted, those that escaped the
//     process group included.
//   - memory: the run's processes and the pages of its tmpfs mounts (its
//     workspace's, /tmp's and /dev/shm's: tmpfs pages are charged to the
//     cgroup of the process that writes them) are charged together to the
//     run's memory cgroup, limited (v2 memory.max, v1
//     memory.limit_in_bytes) to what they may hold together: MemoryBytes
//     plus the tmpfs sizes plus memSlack. Past it the kernel's OOM killer
//     ends a process of the run (outcome killed, Result.Reason says so); a
//     single process meets RLIMIT_AS (MemoryError) first.
//
// Each member list also lets the runner kill every process the script
// left behind, even those that called setsid. A nil *cgroups (no writable
// hierarchy) does nothing.
type cgroups struct {
	hs []*hierarchy
	n  atomic.Int64
}

// hierarchy is the runner's parent cgroup in one hierarchy and what it
// can do there (found by trying, once, when the runner starts).
type hierarchy struct {
	dir  string
	v2   bool
	pids bool
	cpu  bool
	acct bool
	mem  bool
}

// cpuPeriod is the CFS period of the CPU quota: the quota is CPUs x this
// per period (the kernel's default period).
const cpuPeriod = 100 * time.Millisecond

func newCgroups() *cgroups {
	g := &cgroups{}
	seen := map[string]bool{}
	for _, alts := range cgroupCandidates() {
		for _, c := range alts {
			real, err := filepath.EvalSymlinks(c.dir)
			if err != nil || seen[real] {
				continue
			}
			if h := newHierarchy(real, c.v2); h != nil {
				seen[real] = true
				g.hs = append(g.hs, h)
				break
			}
		}
	}
	if len(g.hs) == 0 {
		return nil
	}
	return g
}

// newHierarchy makes the runner's parent cgroup under parent and finds
// what it offers; nil when it offers nothing.
func newHierarchy(parent string, v2 bool) *hierarchy {
	removeStale(parent)
	dir := filepath.Join(parent, fmt.Sprintf("mlerl-sandbox-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil
	}
	h := &hierarchy{dir: dir, v2: v2}
	if v2 {
		// Runs are children of dir: they get the controllers dir's
		// subtree_control enables (each on its own: one refused must not
		// lose the other).
		for _, ctl := range []string{"+pids", "+cpu", "+memory"} {
			os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(ctl), 0)
		}
	}
	// What the hierarchy offers is what a throwaway run child accepts.
	probe := filepath.Join(dir, "probe")
	if os.Mkdir(probe, 0o755) == nil {
		h.pids = os.WriteFile(filepath.Join(probe, "pids.max"), []byte("1"), 0) == nil
		h.cpu = writeCPUQuota(probe, v2, 1) == nil
		_, err := readCPUUsage(probe, v2)
		h.acct = err == nil
		h.mem = writeMemoryLimit(probe, v2, 1<<30) == nil
		os.Remove(probe)
	}
	if !h.pids && !h.cpu && !h.acct && !h.mem {
		os.Remove(dir)
		return nil
	}
	return h
}

type cgroupCandidate struct {
	dir string
	v2  bool
}

// cgroupCandidates lists, per hierarchy, where the runner may create its
// parent, best first: under its own cgroup (so that the runner's own
// limits, a container's, still hold for its runs), then, for v1, at the
// root of the mount.
func cgroupCandidates() [][]cgroupCandidate {
	own := map[string]string{} // v1 controller, or "" for v2 -> own path
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			parts := strings.SplitN(l, ":", 3)
			if len(parts) != 3 {
				continue
			}
			if parts[0] == "0" && parts[1] == "" {
				own[""] = parts[2]
				continue
			}
			for _, ctl := range strings.Split(parts[1], ",") {
				own[ctl] = parts[2]
			}
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		if p, ok := own[""]; ok {
			return [][]cgroupCandidate{{{filepath.Join("/sys/fs/cgroup", p), true}}}
		}
		return nil
	}
	var out [][]cgroupCandidate
	for _, ctl := range []string{"pids", "cpu", "cpuacct", "memory"} {
		mount := filepath.Join("/sys/fs/cgroup", ctl)
		if st, err := os.Stat(mount); err != nil || !st.IsDir() {
			continue
		}
		var alts []cgroupCandidate
		if p, ok := own[ctl]; ok && p != "/" {
			alts = append(alts, cgroupCandidate{filepath.Join(mount, p), false})
		}
		out = append(out, append(alts, cgroupCandidate{mount, false}))
	}
	return out
}

// writeCPUQuota holds the cgroup dir to cpus cores.
func writeCPUQuota(dir string, v2 bool, cpus float64) error {
	period := cpuPeriod.Microseconds()
	quota := max(int64(math.Round(cpus*float64(period))), 1000) // the kernel's minimum is 1 ms
	if v2 {
		return os.WriteFile(filepath.Join(dir, "cpu.max"), []byte(fmt.Sprintf("%d %d", quota, period)), 0)
	}
	if err := os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte(strconv.FormatInt(period, 10)), 0); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte(strconv.FormatInt(quota, 10)), 0)
}

// writeMemoryLimit limits the memory the members of the cgroup dir hold
// together to n bytes.
func writeMemoryLimit(dir string, v2 bool, n int64) error {
	if v2 {
		return os.WriteFile(filepath.Join(dir, "memory.max"), []byte(strconv.FormatInt(n, 10)), 0)
	}
	return os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(strconv.FormatInt(n, 10)), 0)
}

// memSlack is what a run's memory cgroup allows beyond MemoryBytes and
// its tmpfs sizes: kernel memory charged to it (page tables, sockets,
// folder entries) and the warm child's pages that copy on write.
const memSlack = 256 << 20

// readCPUUsage returns the CPU time the members of dir used, past and
// present.
func readCPUUsage(dir string, v2 bool) (time.Duration, error) {
	if !v2 {
		b, err := os.ReadFile(filepath.Join(dir, "cpuacct.usage"))
		if err != nil {
			return 0, err
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return time.Duration(ns), err
	}
	v, err := readKey(filepath.Join(dir, "cpu.stat"), "usage_usec")
	return time.Duration(v) * time.Microsecond, err
}

// readKey reads the value of key from a flat-keyed cgroup file ("key N"
// lines: cpu.stat, pids.events).
func readKey(path, key string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == key {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s", path, key)
}

// runCgroup is one run's cgroups, one per hierarchy of its runner.
type runCgroup struct {
	dirs   []string // every run cgroup, to join, kill and remove
	pids   string   // the one with pids.max ("" none)
	acct   string   // the one that counts CPU time ("" none)
	acctV2 bool
	v2     []bool // per dirs: a v2 cgroup (cgroup.kill)
	cpus   float64
	mem    string // the one with the memory limit ("" none)
	memV2  bool
	memMax int64
}

// create makes a run's cgroups: pids.max = maxProcs, a quota of cpus
// cores and a memory limit of memBytes where the hierarchies allow. A
// hierarchy whose child cannot be made or limited is left out of the run
// (its limit falls back: see the package doc); create never fails.
func (g *cgroups) create(maxProcs int, cpus float64, memBytes int64) *runCgroup {
	if g == nil {
		return nil
	}
	rc := &runCgroup{}
	name := "run-" + strconv.FormatInt(g.n.Add(1), 10)
	for _, h := range g.hs {
		dir := filepath.Join(h.dir, name)
		if os.Mkdir(dir, 0o755) != nil {
			continue
		}
		ok := false
		if h.pids && os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.Itoa(maxProcs)), 0) == nil {
			rc.pids, ok = dir, true
		}
		if h.cpu && writeCPUQuota(dir, h.v2, cpus) == nil {
			rc.cpus, ok = cpus, true
		}
		if h.acct {
			rc.acct, rc.acctV2, ok = dir, h.v2, true
		}
		if h.mem && writeMemoryLimit(dir, h.v2, memBytes) == nil {
			rc.mem, rc.memV2, rc.memMax, ok = dir, h.v2, memBytes, true
		}
		if !ok {
			os.Remove(dir)
			continue
		}
		rc.dirs = append(rc.dirs, dir)
		rc.v2 = append(rc.v2, h.v2)
	}
	if len(rc.dirs) == 0 {
		return nil
	}
	return rc
}

// procs returns the cgroup.procs files the script's first process joins.
func (rc *runCgroup) procs() []string {
	if rc == nil {
		return nil
	}
	out := make([]string, len(rc.dirs))
	for i, d := range rc.dirs {
		out[i] = filepath.Join(d, "cgroup.procs")
	}
	return out
}

// members returns the pids of the run's processes (none when it has no
// cgroup that lists them).
func (rc *runCgroup) members() []int {
	if rc == nil || len(rc.dirs) == 0 {
		return nil
	}
	b, _ := os.ReadFile(filepath.Join(rc.dirs[0], "cgroup.procs"))
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out
}

// kill SIGKILLs every member of the run.
func (rc *runCgroup) kill() {
	if rc == nil {
		return
	}
	for i, d := range rc.dirs {
		if rc.v2[i] {
			os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0) // kernel >= 5.14; the loop below otherwise
		}
		killCgroup(d)
	}
}

// cpuTime returns the CPU time the run's processes used.
func (rc *runCgroup) cpuTime() (time.Duration, bool) {
	if rc == nil || rc.acct == "" {
		return 0, false
	}
	d, err := readCPUUsage(rc.acct, rc.acctV2)
	return d, err == nil
}

// oomKills returns how many processes of the run the kernel's OOM killer
// ended for its memory limit.
func (rc *runCgroup) oomKills() int64 {
	if rc == nil || rc.mem == "" {
		return 0
	}
	var n int64
	if rc.memV2 {
		n, _ = readKey(filepath.Join(rc.mem, "memory.events"), "oom_kill")
	} else {
		n, _ = readKey(filepath.Join(rc.mem, "memory.oom_control"), "oom_kill")
	}
	return n
}

// forkFailures returns how many forks pids.max has refused the run so far.
func (rc *runCgroup) forkFailures() (int64, bool) {
	if rc == nil || rc.pids == "" {
		return 0, false
	}
	n, err := readKey(filepath.Join(rc.pids, "pids.events"), "max")
	return n, err == nil
}

// remove kills what is left and removes the run's cgroups.
func (rc *runCgroup) remove() {
	if rc == nil {
		return
	}
	rc.kill()
	for _, d := range rc.dirs {
		removeCgroup(d)
	}
}

// killCgroup SIGKILLs the members of dir until none are left (a fork bomb
// keeps forking while it is being killed, but pids.max bounds it).
func killCgroup(dir string) {
	for i := 0; i < 200; i++ {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil || len(strings.TrimSpace(string(b))) == 0 {
			return
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func removeCgroup(dir string) {
	for i := 0; i < 100; i++ {
		if err := os.Remove(dir); err == nil || os.IsNotExist(err) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (g *cgroups) close() {
	if g == nil {
		return
	}
	for _, h := range g.hs {
		removeCgroup(h.dir)
	}
}

// removeStale removes the cgroups left by runners whose process is gone
// (killed before Close).
func removeStale(parent string) {
	ents, _ := os.ReadDir(parent)
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "mlerl-sandbox-")
		if !ok || !e.IsDir() {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		runs, _ := os.ReadDir(dir)
		for _, r := range runs {
			if r.IsDir() {
				killCgroup(filepath.Join(dir, r.Name()))
				os.Remove(filepath.Join(dir, r.Name()))
			}
		}
		os.Remove(dir)
	}
}
