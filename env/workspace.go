package env

import (
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Episode workspaces are folders named
//
//	mlerl-ws-<pid>-<host>-<task>-<random>
//
// under Config.WorkDir (the system temp folder by default): pid is the
// process that made it, host an 8-hex-digit hash of its host name. Close
// removes a workspace; a process killed without running it (SIGKILL, the
// OOM killer, a preempted batch job) leaves its open episodes' folders
// behind, a PPO update's worth of them (tens of folders holding task
// data). So the first workspace a process makes under a folder first
// removes the ones there that a process of this host made and that is no
// longer running (sweepStale). A folder of another host (a WorkDir on a
// shared file system) or of a running process is never touched; names in
// another form (mlerl's before this scheme) are left for the user.

// hostTag is this host's tag in workspace names.
var hostTag = func() string {
	name, _ := os.Hostname()
	h := fnv.New32a()
	h.Write([]byte(name))
	return fmt.Sprintf("%08x", h.Sum32())
}()

// workspacePattern is os.MkdirTemp's pattern for a workspace of task.
func workspacePattern(task string) string {
	return fmt.Sprintf("mlerl-ws-%d-%s-%s-", os.Getpid(), hostTag, safeName(task))
}

// workspaceOwner parses a workspace folder's name: the pid and host tag
// of the process that made it; ok is false for any other name.
func workspaceOwner(name string) (pid int, host string, ok bool) {
	rest, ok := strings.CutPrefix(name, "mlerl-ws-")
	if !ok {
		return 0, "", false
	}
	p, rest, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, "", false
	}
	pid, err := strconv.Atoi(p)
	if err != nil || pid <= 0 || len(rest) < 9 || rest[8] != '-' {
		return 0, "", false
	}
	for _, c := range rest[:8] {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return 0, "", false
		}
	}
	return pid, rest[:8], true
}

// running reports whether a process with this pid exists (one of another
// user counts: EPERM).
func running(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}

// swept holds the folders already swept by this process.
var swept sync.Map

// sweepStale removes, once per folder and process, the workspaces under
// dir ("" for the system temp folder) left by processes of this host that
// are no longer running, and returns how many it removed.
func sweepStale(dir string) int {
	if dir == "" {
		dir = os.TempDir()
	}
	if _, done := swept.LoadOrStore(dir, true); done {
		return 0
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		pid, host, ok := workspaceOwner(e.Name())
		if !ok || !e.IsDir() || host != hostTag || pid == os.Getpid() || running(pid) {
			continue
		}
		if os.RemoveAll(filepath.Join(dir, e.Name())) == nil {
			n++
		}
	}
	return n
}
