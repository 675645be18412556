package sandbox

// A run's own workspace space: where the kernel holds what a script may
// write (see quota.go for the whole quota).
//
// Under IsolateRoot and IsolateUserNS the script does not write to the
// workspace folder at all. bootstrap.py mounts, in the run's mount
// namespace, a tmpfs of the run's own (size = WorkspaceBytes + spaceSlack,
// nr_inodes = WorkspaceFiles + spaceInodes), and over the workspace's path
// an overlay whose lower layer is the workspace (read-only) and whose upper
// layer is on that tmpfs. Every byte the run writes there is in the tmpfs:
// files it deleted but holds open (in a descriptor, a mapping or a socket's
// queue), space it reserved (fallocate, FALLOC_FL_KEEP_SIZE included) and
// copies of the workspace's files it changed; past the size the kernel
// refuses the write (ENOSPC) at the moment it asks. The pages are charged
// to the run's memory cgroup (cgroup.go). The tmpfs is detached from every
// path before the script starts; its root's descriptor goes to the runner
// (control.go), which reads the upper layer once every process of the run
// is dead: the workspace as the run left it (the lower seen through the
// upper) is measured, and only a run within its quota has its changes
// copied back, by folder handles, into the workspace (new and changed
// files, folders, links and FIFOs; whiteouts and opaque folders remove
// what the run removed). A run over its quota leaves the workspace exactly
// as it was: nothing is copied back. Closing the descriptor frees the
// tmpfs.
//
// Nothing is copied in: a script reads the workspace's files through the
// overlay, and a file it opens for writing is copied up whole (or not at
// all when opened with O_TRUNC). What the runner copies back is what the
// run changed; for the built-in suite's scripts (a submission, a few KiB)
// that and the mounts cost about a millisecond per run (docs/design/sandbox.md).

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/mlerl/mlerl/internal/safefile"
)

// spaceSlack and spaceInodes are what a run's tmpfs holds beyond its
// quota: the overlay's own folders and whiteout, and a margin so that a
// run a little over its quota is measured over it (killed, its changes
// discarded) rather than refused its last write.
const (
	spaceSlack  = 1 << 20
	spaceInodes = 16
)

// runSpace is the run's tmpfs, open in the runner.
type runSpace struct {
	fd int
	// baseInodes is what the tmpfs held when the script started (its
	// root, the overlay's folders).
	baseInodes int64
	// opaque is the xattr that marks an upper folder hiding the lower
	// one: trusted.overlay.opaque, user.overlay.opaque under a user
	// namespace (userxattr).
	opaque string
}

func (s *runSpace) close() {
	if s != nil && s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
}

// usage returns the bytes and inodes the run holds in its tmpfs now.
func (s *runSpace) usage() (bytes, inodes int64, err error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(s.fd, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize, int64(st.Files-st.Ffree) - s.baseInodes, nil
}

// over says how what the run holds in its tmpfs is over q ("" when it is
// not): one statfs, cheap enough for every poll.
func (s *runSpace) over(q WorkspaceQuota) string {
	b, n, err := s.usage()
	switch {
	case err != nil:
		return "its workspace could not be measured (" + err.Error() + ")"
	case b > q.Bytes:
		return fmt.Sprintf("more than %s of files (deleted files still open and reserved space included)", safefile.Bytes(q.Bytes))
	case n > int64(q.Files):
		return fmt.Sprintf("more than %d files and folders", q.Files)
	}
	return ""
}

// upper opens the overlay's upper folder.
func (s *runSpace) upper() (int, error) {
	return openDir(s.fd, "upper")
}

func isWhiteout(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

func isDir(st *unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFDIR }

// isOpaque reports whether the upper folder fd hides the lower folder of
// its name (the run removed it and made a new one).
func (s *runSpace) isOpaque(fd int) bool {
	var b [4]byte
	n, err := unix.Fgetxattr(fd, s.opaque, b[:])
	return err == nil && n == 1 && b[0] == 'y'
}

// measureMerged measures the workspace dir as the run left it: dir seen
// through the upper layer, stopping as soon as q is exceeded.
func (s *runSpace) measureMerged(dir string, q WorkspaceQuota) (WorkspaceUsage, error) {
	m := newMeasurer(q)
	lfd, err := openDir(unix.AT_FDCWD, dir)
	if err != nil {
		return m.u, fmt.Errorf("sandbox: measure workspace %s: %w", dir, err)
	}
	defer unix.Close(lfd)
	ufd, err := s.upper()
	if err != nil {
		return m.u, fmt.Errorf("sandbox: measure the run's files: %w", err)
	}
	defer unix.Close(ufd)
	err = m.walkMerged(s, lfd, ufd, "", 1)
	if errors.Is(err, errStop) {
		return m.u, nil
	}
	return m.u, err
}

// walkMerged measures the folder that the lower folder lfd (-1: none)
// and the upper folder ufd make together.
func (m *measurer) walkMerged(s *runSpace, lfd, ufd int, rel string, depth int) error {
	shadow := map[string]bool{} // the upper's names: entries and whiteouts
	err := readNames(ufd, func(names []string) error {
		for _, name := range names {
			var st unix.Stat_t
			if err := unix.Fstatat(ufd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				return fmt.Errorf("sandbox: measure the run's files: %s: %w", joinRel(rel, name), err)
			}
			shadow[name] = true
			if len(shadow) > 2*m.q.Files+2 {
				// Whiteouts share one inode: only their names bound them.
				m.u.Entries = m.q.Files + 1
				return errStop
			}
			if isWhiteout(&st) {
				continue
			}
			m.u.Entries++
			m.u.Depth = max(m.u.Depth, depth)
			m.add(&st)
			if m.q.Exceeded(m.u) != "" {
				return errStop
			}
			if !isDir(&st) {
				continue
			}
			if depth+1 > MaxWorkspaceDepth {
				m.u.Depth = depth + 1
				return errStop
			}
			cu, err := openDir(ufd, name)
			if replaced(err) {
				continue
			}
			if err != nil {
				return fmt.Errorf("sandbox: measure the run's files: folder %s: %w", joinRel(rel, name), err)
			}
			cl := -1
			var lst unix.Stat_t
			if lfd >= 0 && !s.isOpaque(cu) && unix.Fstatat(lfd, name, &lst, unix.AT_SYMLINK_NOFOLLOW) == nil && isDir(&lst) {
				if cl, err = openDir(lfd, name); err != nil {
					if cl = -1; !replaced(err) {
						unix.Close(cu)
						return fmt.Errorf("sandbox: measure workspace: folder %s: %w", joinRel(rel, name), err)
					}
				}
			}
			err = m.walkMerged(s, cl, cu, joinRel(rel, name), depth+1)
			unix.Close(cu)
			if cl >= 0 {
				unix.Close(cl)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil || lfd < 0 {
		return err
	}
	// The lower's entries the upper neither replaced nor removed.
	return readNames(lfd, func(names []string) error {
		for _, name := range names {
			if shadow[name] {
				continue
			}
			var st unix.Stat_t
			if err := unix.Fstatat(lfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				return fmt.Errorf("sandbox: measure workspace: %s: %w", joinRel(rel, name), err)
			}
			m.u.Entries++
			m.u.Depth = max(m.u.Depth, depth)
			m.add(&st)
			if m.q.Exceeded(m.u) != "" {
				return errStop
			}
			if !isDir(&st) {
				continue
			}
			if depth+1 > MaxWorkspaceDepth {
				m.u.Depth = depth + 1
				return errStop
			}
			fd, err := openDir(lfd, name)
			if replaced(err) {
				continue
			}
			if err != nil {
				return fmt.Errorf("sandbox: measure workspace: folder %s: %w", joinRel(rel, name), err)
			}
			err = m.walk(fd, joinRel(rel, name), depth+1)
			unix.Close(fd)
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// replaced reports whether opening a folder failed because it is no
// longer one (removed or replaced since it was listed).
func replaced(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP)
}

func joinRel(rel, name string) string {
	if rel == "" {
		return name
	}
	return rel + "/" + name
}

// applier copies a run's upper layer back into the workspace, by folder
// handles, never writing more than the quota (the merged measurement
// before it bounds an honest copy; this bounds a copy raced by a process
// the run left behind under a user namespace, where no cgroup kills them).
type applier struct {
	s     *runSpace
	rm    *remover
	q     WorkspaceQuota
	bytes int64
	n     int
	// links holds the first copy of each upper file with several names,
	// so that its other names become links to it, as in the run's view.
	links map[uint64]*os.File
}

// applyTo copies the upper layer into the workspace dir.
func (s *runSpace) applyTo(dir string, q WorkspaceQuota) error {
	lfd, err := openDir(unix.AT_FDCWD, dir)
	if err != nil {
		return fmt.Errorf("sandbox: copy the run's files back: %w", err)
	}
	defer unix.Close(lfd)
	ufd, err := s.upper()
	if err != nil {
		return fmt.Errorf("sandbox: copy the run's files back: %w", err)
	}
	defer unix.Close(ufd)
	a := &applier{s: s, rm: &remover{root: lfd}, q: q.withDefaults(), links: map[uint64]*os.File{}}
	defer func() {
		for _, f := range a.links {
			f.Close()
		}
	}()
	err = a.apply(lfd, ufd, "", 1)
	if err != nil {
		return fmt.Errorf("sandbox: copy the run's files back: %w", err)
	}
	return a.rm.empty()
}

var errGrew = errors.New("the run's files grew past the quota while being copied back")

// count adds one entry to what the copy wrote.
func (a *applier) count() error {
	if a.n++; a.n > a.q.Files {
		return errGrew
	}
	return nil
}

// removeAt removes name in lfd, whatever it is (a missing name is fine).
func (a *applier) removeAt(lfd int, name string) error {
	return a.rm.remove(lfd, name)
}

func (a *applier) apply(lfd, ufd int, rel string, depth int) error {
	if depth > MaxWorkspaceDepth {
		return fmt.Errorf("%s: folders nested more than %d deep", rel, MaxWorkspaceDepth)
	}
	return readNames(ufd, func(names []string) error {
		for _, name := range names {
			var st unix.Stat_t
			if err := unix.Fstatat(ufd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				return err
			}
			p := joinRel(rel, name)
			if isWhiteout(&st) {
				if err := a.removeAt(lfd, name); err != nil {
					return err
				}
				continue
			}
			if err := a.count(); err != nil {
				return err
			}
			var err error
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFDIR:
				err = a.dir(lfd, ufd, name, p, &st, depth)
			case unix.S_IFREG:
				err = a.file(lfd, ufd, name, &st)
			case unix.S_IFLNK:
				err = a.symlink(lfd, ufd, name)
			case unix.S_IFIFO:
				if err = a.removeAt(lfd, name); err == nil {
					err = unix.Mkfifoat(lfd, name, st.Mode&0o777)
				}
			default:
				// A socket the run bound: nothing to copy; the name is
				// gone from the run's view of the workspace.
				err = a.removeAt(lfd, name)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
		return nil
	})
}

func (a *applier) dir(lfd, ufd int, name, rel string, st *unix.Stat_t, depth int) error {
	cu, err := openDir(ufd, name)
	if err != nil {
		return err
	}
	defer unix.Close(cu)
	var lst unix.Stat_t
	exists := unix.Fstatat(lfd, name, &lst, unix.AT_SYMLINK_NOFOLLOW) == nil
	if exists && (!isDir(&lst) || a.s.isOpaque(cu)) {
		if err := a.removeAt(lfd, name); err != nil {
			return err
		}
		exists = false
	}
	if !exists {
		if err := unix.Mkdirat(lfd, name, 0o700); err != nil {
			return err
		}
	}
	cl, err := openDir(lfd, name)
	if err != nil {
		return err
	}
	defer unix.Close(cl)
	if err := a.apply(cl, cu, rel, depth+1); err != nil {
		return err
	}
	return unix.Fchmod(cl, st.Mode&0o777)
}

func (a *applier) file(lfd, ufd int, name string, st *unix.Stat_t) error {
	sfd, err := unix.Openat(ufd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	src := os.NewFile(uintptr(sfd), name)
	defer src.Close()
	var cur unix.Stat_t
	if err := unix.Fstat(sfd, &cur); err != nil {
		return err
	}
	if cur.Mode&unix.S_IFMT != unix.S_IFREG || cur.Ino != st.Ino {
		return errors.New("replaced while being copied back")
	}
	// A name that had other names in the workspace gets a file of its own,
	// as the overlay gave it one when the run wrote it.
	if err := a.removeAt(lfd, name); err != nil {
		return err
	}
	if first, ok := a.links[cur.Ino]; ok && cur.Nlink > 1 {
		return unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(int(first.Fd())), lfd, name, unix.AT_SYMLINK_FOLLOW)
	}
	dfd, err := unix.Openat(lfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	dst := os.NewFile(uintptr(dfd), name)
	left := a.q.Bytes - a.bytes
	n, err := io.Copy(dst, io.LimitReader(src, left+1))
	if a.bytes += n; err == nil && a.bytes > a.q.Bytes {
		err = errGrew
	}
	if err == nil {
		err = unix.Fchmod(dfd, cur.Mode&0o777)
	}
	if err == nil {
		err = unix.UtimesNanoAt(lfd, name, []unix.Timespec{cur.Atim, cur.Mtim}, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err != nil || cur.Nlink <= 1 {
		dst.Close()
		return err
	}
	a.links[cur.Ino] = dst
	return nil
}

func (a *applier) symlink(lfd, ufd int, name string) error {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(ufd, name, buf)
	if err != nil {
		return err
	}
	if err := a.removeAt(lfd, name); err != nil {
		return err
	}
	return unix.Symlinkat(string(buf[:n]), lfd, name)
}
