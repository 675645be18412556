package sandbox

// Workspace quotas: how many bytes and how many files and folders a run
// may leave in its workspace (Limits.WorkspaceBytes, WorkspaceFiles), and
// how deep its folders may nest (MaxWorkspaceDepth).
//
// Where the run's namespaces allow it (KernelQuota: IsolateRoot, and
// IsolateUserNS on Linux 6.6 or later), the kernel holds what a run
// writes: its workspace is an overlay on a tmpfs of its own of the
// quota's size (space.go), so that files it deleted but holds open (in a
// descriptor, a mapping, a socket's queue), space it reserved
// (fallocate, FALLOC_FL_KEEP_SIZE included) and every byte it writes are
// refused past WorkspaceBytes + spaceSlack at the moment it asks, and
// nothing reaches the workspace on the host until the run is over and
// measured within its quota. On top of that, and alone under IsolateNone
// (no mount namespace: nothing to mount a tmpfs in), the runner measures:
//
//   - before the run, the workspace is listed (the baseline); a workspace
//     already over its quota is not run at all;
//   - while the script runs, every quotaPoll (more rarely when one
//     measurement takes long: at most a fifth of the runner's time goes
//     to it), the workspace is measured (with a tmpfs: the tmpfs's use,
//     one statfs, and the workspace seen through it; without: the
//     workspace, and the files the run's processes hold open after
//     deleting them, which no listing shows), and the run is killed as
//     soon as it is over (outcome killed, with a Reason naming the quota);
//   - after the run, once every process of it is dead, the workspace is
//     measured again; a run over its quota then is classified the same
//     way, and what it added is taken back: with a tmpfs nothing is copied
//     back; without, every file and folder that was not there before the
//     run is removed, and files that grew are cut back to their size
//     before it. The workspace a run leaves is thus never over its quota.
//
// Sizes count each file once however many names (hard links) it has, as
// the larger of its apparent size and the blocks it holds (a sparse file
// of 1 TiB counts as 1 TiB: whoever reads it later reads that much; the
// tmpfs holds its blocks, RLIMIT_FSIZE its size).
// Every entry counts towards the files quota: files, folders, links,
// FIFOs. Links are never followed; the walk goes through open folder
// handles (openat), so neither a path of any length nor a link swapped in
// mid-walk takes it elsewhere.
//
// Measured only (IsolateNone), the worst case while the script runs is
// what it writes in one poll interval beyond the quota (its write rate,
// held to Limits.CPUs cores, times the interval; each file is also capped
// at the quota by RLIMIT_FSIZE). A script that keeps renaming its files
// from folders not yet listed to folders already listed can hide them
// from a measurement; the one after the run, with no process left to
// move anything, sees them all. The runner cannot see into the
// memory-mapped files that the run deleted but still maps (only into
// those it holds open), into the deleted files whose descriptors are in
// flight in a socket's queue, nor, when it is not root, into any of the
// run's open files (its processes are not dumpable, so their
// /proc/<pid>/fd is root's); without a cgroup it knows only the script's
// own process. /tmp and /dev/shm are separate tmpfs mounts of tmpBytes
// each under isolation (IsolateNone: the host's temporary folder,
// unbounded).

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mlerl/mlerl/internal/safefile"
)

// MaxWorkspaceDepth is how deep folders may nest in a workspace (a
// top-level file is at depth 1): deeper trees are over quota.
const MaxWorkspaceDepth = 64

// quotaPoll is the least time between two measurements of a running
// script's workspace; quotaShare the share of the time measuring may take.
const (
	quotaPoll  = 50 * time.Millisecond
	quotaShare = 5
)

// WorkspaceUsage is what a workspace holds. A measurement stopped at a
// quota reports at least one more than it allows.
type WorkspaceUsage struct {
	// Bytes sums, per distinct file, the larger of its size and the
	// blocks it holds (folders and links: their blocks).
	Bytes int64
	// Entries counts every file, folder, link and other entry below the
	// workspace folder.
	Entries int
	// Depth is the deepest level seen (1: entries of the workspace folder).
	Depth int
}

// WorkspaceQuota bounds a workspace: the zero value of a field takes the
// default of [DefaultLimits].
type WorkspaceQuota struct {
	Bytes int64
	Files int
}

func (q WorkspaceQuota) withDefaults() WorkspaceQuota {
	d := DefaultLimits()
	if q.Bytes <= 0 {
		q.Bytes = d.WorkspaceBytes
	}
	if q.Files <= 0 {
		q.Files = d.WorkspaceFiles
	}
	return q
}

// Exceeded says how u is over q ("" when it is not).
func (q WorkspaceQuota) Exceeded(u WorkspaceUsage) string {
	q = q.withDefaults()
	switch {
	case u.Depth > MaxWorkspaceDepth:
		return fmt.Sprintf("folders nested more than %d deep", MaxWorkspaceDepth)
	case u.Entries > q.Files:
		return fmt.Sprintf("more than %d files and folders", q.Files)
	case u.Bytes > q.Bytes:
		return fmt.Sprintf("more than %s of files", safefile.Bytes(q.Bytes))
	}
	return ""
}

// errStop ends a walk once a quota is exceeded.
var errStop = errors.New("quota exceeded")

// MeasureWorkspace measures the folder dir without following any link,
// stopping as soon as q is exceeded (the usage then says by what). A
// folder the walk cannot open is an error, so that nothing can be hidden
// in one.
func MeasureWorkspace(dir string, q WorkspaceQuota) (WorkspaceUsage, error) {
	m := newMeasurer(q)
	err := m.walkRoot(dir, nil)
	return m.u, err
}

type inodeKey struct{ dev, ino uint64 }

type measurer struct {
	q    WorkspaceQuota
	u    WorkspaceUsage
	seen map[inodeKey]bool // files with more than one name
	// visit, when set, is called for every entry with its folder's
	// handle and its path relative to the workspace.
	visit func(dirfd int, rel, name string, st *unix.Stat_t) error
}

func newMeasurer(q WorkspaceQuota) *measurer {
	return &measurer{q: q.withDefaults(), seen: map[inodeKey]bool{}}
}

// openDir opens name in dirfd as a folder, never through a link, making it
// readable first when the script took that away (a folder of the runner's
// own uid; root needs no such help).
func openDir(dirfd int, name string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(dirfd, name, flags, 0)
	if errors.Is(err, unix.EACCES) {
		unix.Fchmodat(dirfd, name, 0o700, 0)
		fd, err = unix.Openat(dirfd, name, flags, 0)
	}
	return fd, err
}

// walkRoot walks dir; visit (if set) sees every entry.
func (m *measurer) walkRoot(dir string, visit func(int, string, string, *unix.Stat_t) error) error {
	fd, err := openDir(unix.AT_FDCWD, dir)
	if err != nil {
		return fmt.Errorf("sandbox: measure workspace %s: %w", dir, err)
	}
	defer unix.Close(fd)
	m.visit = visit
	err = m.walk(fd, "", 1)
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

// readNames returns the names in the folder fd, calling each with batches
// so that a folder of a million entries is never held whole.
func readNames(fd int, each func([]string) error) error {
	buf := make([]byte, 32<<10)
	var names []string
	for {
		n, err := unix.ReadDirent(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names[:0])
		if err := each(names); err != nil {
			return err
		}
	}
}

func (m *measurer) walk(dirfd int, rel string, depth int) error {
	return readNames(dirfd, func(names []string) error {
		for _, name := range names {
			var st unix.Stat_t
			if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue // removed since the listing
				}
				return fmt.Errorf("sandbox: measure workspace: %s: %w", filepath.Join(rel, name), err)
			}
			m.u.Entries++
			m.u.Depth = max(m.u.Depth, depth)
			m.add(&st)
			p := name
			if rel != "" {
				p = rel + "/" + name
			}
			if m.visit != nil {
				if err := m.visit(dirfd, p, name, &st); err != nil {
					return err
				}
			}
			if m.q.Exceeded(m.u) != "" {
				return errStop
			}
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				continue
			}
			if depth+1 > MaxWorkspaceDepth {
				m.u.Depth = depth + 1
				return errStop
			}
			fd, err := openDir(dirfd, name)
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
				continue // replaced since it was seen
			}
			if err != nil {
				return fmt.Errorf("sandbox: measure workspace: folder %s: %w", p, err)
			}
			err = m.walk(fd, p, depth+1)
			unix.Close(fd)
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// add counts one entry's bytes: a file with several names once.
func (m *measurer) add(st *unix.Stat_t) {
	alloc := st.Blocks * 512
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		m.u.Bytes += alloc
		return
	}
	if st.Nlink > 1 {
		k := inodeKey{uint64(st.Dev), st.Ino}
		if m.seen[k] {
			return
		}
		m.seen[k] = true
	}
	m.u.Bytes += max(st.Size, alloc)
}

// addDeleted counts the files on device dev that the processes pids hold
// open or mapped after deleting them: they take space but no listing
// shows them. Processes that end meanwhile are skipped.
func (m *measurer) addDeleted(pids []int, dev uint64) {
	for _, pid := range pids {
		base := "/proc/" + strconv.Itoa(pid)
		ents, _ := os.ReadDir(base + "/fd")
		for _, e := range ents {
			target, err := os.Readlink(base + "/fd/" + e.Name())
			if err != nil || !strings.HasSuffix(target, " (deleted)") {
				continue
			}
			var st unix.Stat_t
			if unix.Stat(base+"/fd/"+e.Name(), &st) != nil || uint64(st.Dev) != dev || st.Nlink != 0 {
				continue
			}
			k := inodeKey{uint64(st.Dev), st.Ino}
			if !m.seen[k] {
				m.seen[k] = true
				m.u.Bytes += max(st.Size, st.Blocks*512)
			}
		}
		m.addDeletedMaps(base+"/maps", dev)
	}
}

// addDeletedMaps counts deleted files mapped into a process (their mapped
// length: their size cannot be read without CAP_SYS_ADMIN).
func (m *measurer) addDeletedMaps(path string, dev uint64) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	want := fmt.Sprintf("%02x:%02x", unix.Major(dev), unix.Minor(dev))
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasSuffix(line, " (deleted)") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 6 || fields[3] != want {
			continue
		}
		ino, err1 := strconv.ParseUint(fields[4], 10, 64)
		lo, hi, ok := strings.Cut(fields[0], "-")
		start, err2 := strconv.ParseUint(lo, 16, 64)
		end, err3 := strconv.ParseUint(hi, 16, 64)
		if !ok || errors.Join(err1, err2, err3) != nil || ino == 0 || end < start {
			continue
		}
		k := inodeKey{dev, ino}
		if !m.seen[k] {
			m.seen[k] = true
			m.u.Bytes += int64(end - start)
		}
	}
}

// baselineEntry is what a path held before the run.
type baselineEntry struct {
	dir  bool
	size int64
}

// workspaceBaseline lists dir before a run: every entry's kind and size,
// for [rollback]. over says how the workspace already exceeds q.
func workspaceBaseline(dir string, q WorkspaceQuota) (base map[string]baselineEntry, over string, err error) {
	m := newMeasurer(q)
	base = map[string]baselineEntry{}
	err = m.walkRoot(dir, func(_ int, rel, _ string, st *unix.Stat_t) error {
		base[rel] = baselineEntry{dir: st.Mode&unix.S_IFMT == unix.S_IFDIR, size: st.Size}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	return base, q.Exceeded(m.u), nil
}

// rollback takes back what a run added to dir: every entry not in base
// (or of another kind) is removed, and regular files that grew are cut
// back to their size in base. Call it only once every process of the run
// is dead.
func rollback(dir string, base map[string]baselineEntry) error {
	rootfd, err := openDir(unix.AT_FDCWD, dir)
	if err != nil {
		return fmt.Errorf("sandbox: take back the workspace: %w", err)
	}
	defer unix.Close(rootfd)
	r := &remover{root: rootfd}
	err = r.prune(rootfd, "", base, 1)
	return errors.Join(err, r.empty())
}

// remover deletes trees of any depth with a constant number of open
// folders: a folder that is not empty is moved to the workspace root under
// a fresh name, and emptied there in turn.
type remover struct {
	root  int
	queue []string // moved folders to empty, in the root
	n     int
}

func (r *remover) prune(dirfd int, rel string, base map[string]baselineEntry, depth int) error {
	var stale, grown, dirs []string
	err := readNames(dirfd, func(names []string) error {
		for _, name := range names {
			p := name
			if rel != "" {
				p = rel + "/" + name
			}
			if rel == "" && strings.HasPrefix(name, trashPrefix) {
				stale = append(stale, name)
				continue
			}
			var st unix.Stat_t
			if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				continue
			}
			b, ok := base[p]
			isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
			switch {
			case !ok || b.dir != isDir || (!isDir && st.Mode&unix.S_IFMT != unix.S_IFREG):
				stale = append(stale, name)
			case isDir:
				dirs = append(dirs, name)
			case st.Size > b.size:
				grown = append(grown, name)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range stale {
		errs = append(errs, r.remove(dirfd, name))
	}
	for _, name := range grown {
		p := name
		if rel != "" {
			p = rel + "/" + name
		}
		errs = append(errs, truncateAt(dirfd, name, base[p].size))
	}
	if depth < MaxWorkspaceDepth {
		for _, name := range dirs {
			p := name
			if rel != "" {
				p = rel + "/" + name
			}
			fd, err := openDir(dirfd, name)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			errs = append(errs, r.prune(fd, p, base, depth+1))
			unix.Close(fd)
		}
	}
	return errors.Join(errs...)
}

// truncateAt cuts the regular file name in dirfd back to size.
func truncateAt(dirfd int, name string, size int64) error {
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sandbox: cut %s back: %w", name, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return err
	}
	return unix.Ftruncate(fd, size)
}

// trashPrefix names the folders a remover empties in the workspace root.
const trashPrefix = ".mlerl-trash-"

// remove deletes name in dirfd, whatever it is.
func (r *remover) remove(dirfd int, name string) error {
	if err := unix.Unlinkat(dirfd, name, 0); err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if dirfd == r.root && strings.HasPrefix(name, trashPrefix) {
		r.queue = append(r.queue, name)
		return nil
	}
	r.n++
	tmp := fmt.Sprintf("%s%d-%d", trashPrefix, os.Getpid(), r.n)
	if err := unix.Renameat(dirfd, name, r.root, tmp); err != nil {
		return fmt.Errorf("sandbox: remove %s: %w", name, err)
	}
	r.queue = append(r.queue, tmp)
	return nil
}

// empty removes the queued folders, moving their non-empty subfolders to
// the root in turn.
func (r *remover) empty() error {
	for steps := 0; len(r.queue) > 0; steps++ {
		if steps > 1<<22 {
			return errors.New("sandbox: remove what the run left: giving up after 4 million folders")
		}
		name := r.queue[len(r.queue)-1]
		if err := unix.Unlinkat(r.root, name, unix.AT_REMOVEDIR); err == nil || errors.Is(err, unix.ENOENT) {
			r.queue = r.queue[:len(r.queue)-1]
			continue
		}
		fd, err := openDir(r.root, name)
		if err != nil {
			return fmt.Errorf("sandbox: remove what the run left: %w", err)
		}
		unix.Fchmod(fd, 0o700) // a folder the script made read-only
		var children []string
		err = readNames(fd, func(names []string) error {
			children = append(children, names...)
			if len(children) >= 4096 {
				r.removeChildren(fd, children)
				children = children[:0]
			}
			return nil
		})
		r.removeChildren(fd, children)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("sandbox: remove what the run left: %w", err)
		}
	}
	return nil
}

func (r *remover) removeChildren(fd int, names []string) {
	for _, c := range names {
		if unix.Unlinkat(fd, c, 0) == nil || unix.Unlinkat(fd, c, unix.AT_REMOVEDIR) == nil {
			continue
		}
		r.n++
		tmp := fmt.Sprintf("%s%d-%d", trashPrefix, os.Getpid(), r.n)
		if unix.Renameat(fd, c, r.root, tmp) == nil {
			r.queue = append(r.queue, tmp)
		}
	}
}

// workspaceWatch measures a running script's workspace.
type workspaceWatch struct {
	dir string
	q   WorkspaceQuota
	dev uint64
	cg  *runCgroup
	// mainPid is the script's process, what is known of the run without
	// a cgroup that lists its members.
	mainPid atomic.Int64
}

// pids returns the run's processes.
func (w *workspaceWatch) pids() []int {
	if m := w.cg.members(); len(m) > 0 {
		return m
	}
	if pid := w.mainPid.Load(); pid > 0 {
		return []int{int(pid)}
	}
	return nil
}

// over measures once: the reason the workspace is over its quota, or "".
func (w *workspaceWatch) over() string {
	m := newMeasurer(w.q)
	if err := m.walkRoot(w.dir, nil); err != nil {
		return "its workspace could not be measured (" + err.Error() + ")"
	}
	if r := w.q.Exceeded(m.u); r != "" {
		return r
	}
	m.addDeleted(w.pids(), w.dev)
	return w.q.Exceeded(m.u)
}

// watchWorkspace measures the run's workspace until stop is called and
// calls kill once it is over its quota. stop returns why it killed the
// run ("" when it did not).
func (p *prepared) watchWorkspace(kill func()) (stop func() string) {
	done := make(chan struct{})
	var reason atomic.Pointer[string]
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		wait := quotaPoll
		for {
			select {
			case <-done:
				return
			case <-time.After(wait):
			}
			t0 := time.Now()
			r := ""
			if sp := p.ctl.runSpace(); sp != nil {
				r = sp.over(p.ws.q)
				if r == "" {
					// What the tmpfs's size cannot see: sparse sizes,
					// links, folders' depth, the workspace's own files.
					u, err := sp.measureMerged(p.ws.dir, p.ws.q)
					if err != nil {
						r = "its workspace could not be measured (" + err.Error() + ")"
					} else {
						r = p.ws.q.Exceeded(u)
					}
				}
			} else if p.cfg.WS == nil {
				r = p.ws.over()
			}
			if r != "" {
				msg := "the script's workspace grew past its quota: " + r
				reason.Store(&msg)
				kill()
				return
			}
			wait = max(quotaPoll, quotaShare*time.Since(t0))
		}
	}()
	var once sync.Once
	return func() string {
		once.Do(func() { close(done) })
		wg.Wait()
		if r := reason.Load(); r != nil {
			return *r
		}
		return ""
	}
}

// refuseOverQuota returns the result of a run that does not start
// because its workspace is over its quota already.
func (p *prepared) refuseOverQuota() (Result, bool) {
	if p.preOver == "" {
		return Result{}, false
	}
	return Result{Outcome: Killed, ExitCode: -1, Reason: "the workspace was over its quota before the script started: " + p.preOver}, true
}

// finishWorkspace checks the workspace once every process of the run is
// dead; a run over its quota (now, or earlier: watchReason) is classified
// killed and what it added is taken back. A run with a tmpfs of its own
// (space.go) has its changes copied back only when it is within its quota.
func (p *prepared) finishWorkspace(res *Result, watchReason string) error {
	if p.cfg.WS != nil {
		return p.finishSpace(res, watchReason)
	}
	reason := watchReason
	if r := p.ws.over(); r != "" && reason == "" {
		reason = "the script left its workspace over its quota: " + r
	}
	if reason == "" {
		return nil
	}
	res.Outcome, res.Reason = Killed, reason+"; what it added was removed"
	return rollback(p.cfg.Dir, p.baseline)
}

// finishSpace measures the workspace as the run left it in its tmpfs and
// copies the run's changes back when it is within its quota; a run over it
// is killed and leaves the workspace as it was. A copy that fails half-way
// (the host's disk full, a file replaced meanwhile) is taken back to the
// workspace as it was before the run, as far as rollback can.
func (p *prepared) finishSpace(res *Result, watchReason string) error {
	sp := p.ctl.runSpace()
	if sp == nil {
		// The child never handed its tmpfs over: its setup failed (the
		// run is an error already), or the sandbox lost it.
		if res.Outcome != "" {
			res.Outcome, res.Reason = Killed, "the sandbox lost the run's workspace (a fault of the sandbox, not of the script); what it wrote was not kept"
		}
		return nil
	}
	q := p.limits.quota()
	reason := watchReason
	if reason == "" {
		u, err := sp.measureMerged(p.cfg.Dir, q)
		switch {
		case err != nil:
			reason = "its workspace could not be measured (" + err.Error() + ")"
		case q.Exceeded(u) != "":
			reason = "the script left its workspace over its quota: " + q.Exceeded(u)
		}
	}
	if reason != "" {
		res.Outcome, res.Reason = Killed, reason+"; what it wrote was not kept"
		return nil
	}
	if err := sp.applyTo(p.cfg.Dir, q); err != nil {
		res.Outcome, res.Reason = Killed, "its files could not be copied back to the workspace ("+err.Error()+"); what it wrote was not kept"
		return rollback(p.cfg.Dir, p.baseline)
	}
	if r := p.ws.over(); r != "" {
		res.Outcome, res.Reason = Killed, "the script left its workspace over its quota: "+r+"; what it added was removed"
		return rollback(p.cfg.Dir, p.baseline)
	}
	return nil
}
