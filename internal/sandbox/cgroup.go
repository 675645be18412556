package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// pidsCgroup is a parent pids cgroup under which each run gets its own
// child with pids.max = MaxProcs. Unlike RLIMIT_NPROC (per user, and not
// binding for root) it counts exactly the run's processes and threads, and
// its member list lets the runner kill every process the script left
// behind, even those that called setsid. A nil *pidsCgroup (no writable
// pids hierarchy) does nothing.
type pidsCgroup struct {
	dir string
	n   atomic.Int64
}

func newPidsCgroup() *pidsCgroup {
	var parents []string
	if st, err := os.Stat("/sys/fs/cgroup/pids"); err == nil && st.IsDir() {
		parents = append(parents, "/sys/fs/cgroup/pids") // cgroup v1
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(string(b), "pids") {
		if own, err := os.ReadFile("/proc/self/cgroup"); err == nil {
			for _, l := range strings.Split(string(own), "\n") {
				if p, ok := strings.CutPrefix(l, "0::"); ok {
					parents = append(parents, filepath.Join("/sys/fs/cgroup", p)) // cgroup v2
				}
			}
		}
	}
	for _, p := range parents {
		removeStale(p)
		dir := filepath.Join(p, fmt.Sprintf("mlerl-sandbox-%d-%d", os.Getpid(), time.Now().UnixNano()))
		if err := os.Mkdir(dir, 0o755); err != nil {
			continue
		}
		g := &pidsCgroup{dir: dir}
		// A child must accept pids.max; v2 also needs the controller enabled.
		os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+pids"), 0)
		if _, cleanup, err := g.create(1); err == nil {
			cleanup()
			return g
		}
		os.Remove(dir)
	}
	return nil
}

// create makes a run's cgroup and returns its cgroup.procs path and a
// cleanup that kills every member and removes it.
func (g *pidsCgroup) create(max int) (string, func(), error) {
	if g == nil {
		return "", func() {}, nil
	}
	dir := filepath.Join(g.dir, "run-"+strconv.FormatInt(g.n.Add(1), 10))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.Itoa(max)), 0); err != nil {
		os.Remove(dir)
		return "", nil, err
	}
	return filepath.Join(dir, "cgroup.procs"), func() { killCgroup(dir); removeCgroup(dir) }, nil
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

func (g *pidsCgroup) close() {
	if g != nil {
		removeCgroup(g.dir)
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
