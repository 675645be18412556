// Package safefile reads and writes files inside a folder that untrusted
// code controls (an agent's workspace), from the host side, without ever
// being led outside it.
//
// A script can leave anything in its workspace: a symbolic link to the
// task's hidden answers (absolute, relative, or through /proc/self/cwd), a
// hard link, a named pipe that blocks whoever opens it for reading, a
// device node, a sparse file of terabytes. The host side reads workspace
// files (the submission the grader scores, snapshots, Understand File,
// Copy File, the script the instrumenter rewrites, the script shown in a
// prompt) only through [ReadFile], which:
//
//   - walks the path one component at a time with openat(2) and
//     O_NOFOLLOW, so no symbolic link is followed anywhere on the path
//     (not even one that stays inside the folder), and ".." or absolute
//     paths are refused before any system call;
//   - lstats the last component before opening it and refuses anything
//     that is not a regular file, so a FIFO or a device is never opened;
//   - opens it with O_NONBLOCK and checks, on the open descriptor, that it
//     is the same regular file (no swap between the check and the open);
//   - refuses files larger than the caller's limit, before reading, and
//     reads at most limit bytes even if the file grows meanwhile;
//   - optionally refuses a file with more than one hard link.
//
// [WriteFile] writes the same way (no link followed, only regular files
// replaced). Errors are *[Error] values whose text names the path relative
// to the folder, never the host's absolute path, so they can be shown to
// the agent.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// Kinds of refusal; an *Error wraps one of them (errors.Is works).
var (
	ErrEscape     = errors.New("path leaves the folder")
	ErrSymlink    = errors.New("symbolic link")
	ErrNotRegular = errors.New("not a regular file")
	ErrTooLarge   = errors.New("file too large")
	ErrHardLinked = errors.New("file has several hard links")
	ErrNotExist   = errors.New("no such file")
)

// Error is a refused or failed access to Path (relative to the folder).
type Error struct {
	Path   string
	Kind   error  // one of the Err... values, or the system error
	Detail string // the specifics, phrased for the agent
}

func (e *Error) Error() string {
	if e.Detail != "" {
		return e.Path + " " + e.Detail
	}
	return e.Path + ": " + e.Kind.Error()
}

func (e *Error) Unwrap() error { return e.Kind }

// Options bound a read.
type Options struct {
	// MaxBytes refuses larger files (0: no limit).
	MaxBytes int64
	// SingleLink refuses a file with more than one hard link (a hard link
	// can point at a file the reader may read but the folder's owner
	// should not see through it).
	SingleLink bool
}

// Clean checks a relative path and returns it cleaned, slash-separated.
// Empty, absolute and climbing paths are refused with ErrEscape.
func Clean(rel string) (string, error) {
	r := strings.ReplaceAll(rel, `\`, "/")
	switch {
	case r == "" || strings.ContainsRune(r, 0):
		return "", &Error{Path: fmt.Sprintf("%q", rel), Kind: ErrEscape, Detail: "is not a usable file name"}
	case strings.HasPrefix(r, "/"):
		return "", &Error{Path: rel, Kind: ErrEscape, Detail: "is an absolute path; paths are relative to the workspace"}
	}
	c := path.Clean(r)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", &Error{Path: rel, Kind: ErrEscape, Detail: "is outside the workspace"}
	}
	return c, nil
}

// openDir opens the folder dir itself and then each folder of rel's
// parent path, never following a symbolic link. It returns a descriptor
// of rel's parent folder and rel's last component.
func openDir(dir, rel string) (fd int, base string, err error) {
	c, err := Clean(rel)
	if err != nil {
		return -1, "", err
	}
	if c == "." {
		return -1, "", &Error{Path: rel, Kind: ErrNotRegular, Detail: "is the workspace folder itself"}
	}
	fd, err = unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", fmt.Errorf("safefile: open folder: %w", err)
	}
	parts := strings.Split(c, "/")
	for i, p := range parts[:len(parts)-1] {
		next, err := unix.Openat(fd, p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			cerr := componentError(strings.Join(parts[:i+1], "/"), dirfdStat(fd, p), err)
			unix.Close(fd)
			return -1, "", cerr
		}
		unix.Close(fd)
		fd = next
	}
	return fd, parts[len(parts)-1], nil
}

// dirfdStat lstats name in the folder fd (for error messages).
func dirfdStat(fd int, name string) *unix.Stat_t {
	var st unix.Stat_t
	if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return nil
	}
	return &st
}

// componentError explains why a folder component of a path could not be
// opened.
func componentError(rel string, st *unix.Stat_t, err error) error {
	switch {
	case errors.Is(err, unix.ENOENT):
		return &Error{Path: rel, Kind: ErrNotExist, Detail: "does not exist"}
	case st != nil && st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return &Error{Path: rel, Kind: ErrSymlink, Detail: "is a symbolic link; links are not followed"}
	case st != nil && st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return &Error{Path: rel, Kind: ErrNotRegular, Detail: "is not a folder"}
	}
	return &Error{Path: rel, Kind: err, Detail: "cannot be opened: " + err.Error()}
}

// kindOf names a file type for messages.
func kindOf(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return "a symbolic link"
	case unix.S_IFIFO:
		return "a named pipe (FIFO)"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFDIR:
		return "a folder"
	}
	return "not a regular file"
}

// checkRegular refuses anything but a regular file within opts' bounds.
func checkRegular(rel string, st *unix.Stat_t, opts Options) error {
	switch mode := st.Mode & unix.S_IFMT; {
	case mode == unix.S_IFLNK:
		return &Error{Path: rel, Kind: ErrSymlink, Detail: "is a symbolic link, not a regular file; links are not followed"}
	case mode != unix.S_IFREG:
		return &Error{Path: rel, Kind: ErrNotRegular, Detail: "is " + kindOf(st.Mode) + ", not a regular file"}
	case opts.SingleLink && st.Nlink > 1:
		return &Error{Path: rel, Kind: ErrHardLinked, Detail: fmt.Sprintf("has %d hard links; it must be a file of its own", st.Nlink)}
	case opts.MaxBytes > 0 && st.Size > opts.MaxBytes:
		return &Error{Path: rel, Kind: ErrTooLarge, Detail: fmt.Sprintf("is %s, more than the %s allowed", Bytes(st.Size), Bytes(opts.MaxBytes))}
	}
	return nil
}

// Open opens the regular file rel inside dir for reading, with the checks
// of the package doc. The caller closes it.
func Open(dir, rel string, opts Options) (*os.File, error) {
	fd, base, err := openDir(dir, rel)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	c, _ := Clean(rel)
	var before unix.Stat_t
	if err := unix.Fstatat(fd, base, &before, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, &Error{Path: c, Kind: ErrNotExist, Detail: "does not exist"}
		}
		return nil, &Error{Path: c, Kind: err, Detail: "cannot be read: " + err.Error()}
	}
	if err := checkRegular(c, &before, opts); err != nil {
		return nil, err
	}
	ffd, err := unix.Openat(fd, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, &Error{Path: c, Kind: ErrSymlink, Detail: "is a symbolic link, not a regular file; links are not followed"}
		}
		return nil, &Error{Path: c, Kind: err, Detail: "cannot be read: " + err.Error()}
	}
	var after unix.Stat_t
	if err := unix.Fstat(ffd, &after); err != nil {
		unix.Close(ffd)
		return nil, &Error{Path: c, Kind: err, Detail: "cannot be read: " + err.Error()}
	}
	if after.Dev != before.Dev || after.Ino != before.Ino {
		unix.Close(ffd)
		return nil, &Error{Path: c, Kind: ErrNotRegular, Detail: "changed while it was being opened"}
	}
	if err := checkRegular(c, &after, opts); err != nil {
		unix.Close(ffd)
		return nil, err
	}
	return os.NewFile(uintptr(ffd), c), nil
}

// ReadFile reads the regular file rel inside dir (see the package doc).
// At most opts.MaxBytes are read even if the file grows while it is read.
func ReadFile(dir, rel string, opts Options) ([]byte, error) {
	f, err := Open(dir, rel, opts)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if opts.MaxBytes > 0 {
		r = io.LimitReader(f, opts.MaxBytes+1)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, &Error{Path: f.Name(), Kind: err, Detail: "cannot be read: " + err.Error()}
	}
	if opts.MaxBytes > 0 && int64(len(b)) > opts.MaxBytes {
		return nil, &Error{Path: f.Name(), Kind: ErrTooLarge, Detail: fmt.Sprintf("grew past the %s allowed while being read", Bytes(opts.MaxBytes))}
	}
	return b, nil
}

// WriteFile writes data to rel inside dir, creating the missing folders
// of its path (mode 0755). No link is followed: a symbolic link, FIFO or
// device at rel or on its path is refused, not written through.
func WriteFile(dir, rel string, data []byte, perm os.FileMode) error {
	c, err := Clean(rel)
	if err != nil {
		return err
	}
	if c == "." {
		return &Error{Path: rel, Kind: ErrNotRegular, Detail: "is the workspace folder itself"}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("safefile: open folder: %w", err)
	}
	defer func() { unix.Close(fd) }()
	parts := strings.Split(c, "/")
	for i, p := range parts[:len(parts)-1] {
		if err := unix.Mkdirat(fd, p, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return &Error{Path: strings.Join(parts[:i+1], "/"), Kind: err, Detail: "cannot be created: " + err.Error()}
		}
		next, err := unix.Openat(fd, p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return componentError(strings.Join(parts[:i+1], "/"), dirfdStat(fd, p), err)
		}
		unix.Close(fd)
		fd = next
	}
	base := parts[len(parts)-1]
	if st := dirfdStat(fd, base); st != nil {
		if err := checkRegular(c, st, Options{}); err != nil {
			return err
		}
	}
	// A fresh file renamed over the old one: whatever stood at rel (a hard
	// link to another file included) is replaced, never written through.
	tmp := fmt.Sprintf(".%s.mlerl-%d", base, os.Getpid())
	ffd, err := unix.Openat(fd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
	if errors.Is(err, unix.EEXIST) {
		unix.Unlinkat(fd, tmp, 0)
		ffd, err = unix.Openat(fd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
	}
	if err != nil {
		return &Error{Path: c, Kind: err, Detail: "cannot be written: " + err.Error()}
	}
	f := os.NewFile(uintptr(ffd), c)
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Chmod(perm.Perm()) // umask-free
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = unix.Renameat(fd, tmp, fd, base)
	}
	if werr != nil {
		unix.Unlinkat(fd, tmp, 0)
		return &Error{Path: c, Kind: werr, Detail: "cannot be written: " + werr.Error()}
	}
	return nil
}

// Bytes formats a byte count for messages (1.5 MiB, 3 GiB).
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	s := fmt.Sprintf("%.1f", v)
	s = strings.TrimSuffix(s, ".0")
	return s + " " + string("KMGTPE"[exp]) + "iB"
}
