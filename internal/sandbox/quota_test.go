package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func mustWrite(t *testing.T, path string, size int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
}

// deepTree makes levels nested folders under dir through relative
// openat calls (the path of the deepest is far longer than PATH_MAX).
func deepTree(t *testing.T, dir string, levels int) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < levels; i++ {
		name := strings.Repeat("d", 200)
		if err := unix.Mkdirat(fd, name, 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	unix.Close(fd)
}

func TestMeasureWorkspace(t *testing.T) {
	tests := []struct {
		name  string
		make  func(t *testing.T, dir string)
		q     WorkspaceQuota
		want  WorkspaceUsage // Bytes: at least
		maxB  int64          // Bytes: at most (0: no check)
		over  string         // part of the reason ("" not over)
		exact bool           // Entries and Depth exactly
	}{
		{name: "empty", make: func(*testing.T, string) {}, exact: true},
		{name: "files and a folder", make: func(t *testing.T, dir string) {
			mustWrite(t, filepath.Join(dir, "a.csv"), 1000)
			mustWrite(t, filepath.Join(dir, "sub", "b.csv"), 3000)
		}, want: WorkspaceUsage{Bytes: 4000, Entries: 3, Depth: 2}, exact: true},
		{name: "hard links count once", make: func(t *testing.T, dir string) {
			mustWrite(t, filepath.Join(dir, "big"), 1<<20)
			for _, n := range []string{"l1", "l2", "l3"} {
				if err := os.Link(filepath.Join(dir, "big"), filepath.Join(dir, n)); err != nil {
					t.Fatal(err)
				}
			}
		}, want: WorkspaceUsage{Bytes: 1 << 20, Entries: 4, Depth: 1}, maxB: 1<<20 + 64<<10, exact: true},
		{name: "sparse file counts its size", make: func(t *testing.T, dir string) {
			f, err := os.Create(filepath.Join(dir, "sparse"))
			if err != nil {
				t.Fatal(err)
			}
			f.Truncate(1 << 40)
			f.Close()
		}, want: WorkspaceUsage{Bytes: 1 << 40, Entries: 1, Depth: 1}, over: "more than 1 GiB"},
		{name: "symlink is not followed", make: func(t *testing.T, dir string) {
			if err := os.Symlink("/usr", filepath.Join(dir, "usr")); err != nil {
				t.Fatal(err)
			}
		}, want: WorkspaceUsage{Entries: 1, Depth: 1}, maxB: 64 << 10, exact: true},
		{name: "too many files", make: func(t *testing.T, dir string) {
			for i := 0; i < 50; i++ {
				mustWrite(t, filepath.Join(dir, "f", strings.Repeat("x", i+1)), 0)
			}
		}, q: WorkspaceQuota{Files: 20}, want: WorkspaceUsage{Entries: 21}, over: "more than 20 files and folders"},
		{name: "deep tree", make: func(t *testing.T, dir string) { deepTree(t, dir, 100) },
			want: WorkspaceUsage{Depth: MaxWorkspaceDepth + 1}, over: "nested more than 64 deep"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.make(t, dir)
			got, err := MeasureWorkspace(dir, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			if got.Bytes < tc.want.Bytes || (tc.maxB > 0 && got.Bytes > tc.maxB) {
				t.Errorf("bytes: got %d want %d..%d", got.Bytes, tc.want.Bytes, tc.maxB)
			}
			if tc.exact && (got.Entries != tc.want.Entries || got.Depth != tc.want.Depth) {
				t.Errorf("got %+v want %+v", got, tc.want)
			}
			if !tc.exact && (got.Entries < tc.want.Entries || got.Depth < tc.want.Depth) {
				t.Errorf("got %+v want at least %+v", got, tc.want)
			}
			reason := tc.q.Exceeded(got)
			if (tc.over == "") != (reason == "") || !strings.Contains(reason, tc.over) {
				t.Errorf("exceeded: got %q want %q", reason, tc.over)
			}
		})
	}
}

// TestRollback: what a run added goes, at any depth and whatever it is;
// files that grew are cut back; what was there stays.
func TestRollback(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "train.csv"), 100)
	mustWrite(t, filepath.Join(dir, "data", "keep.csv"), 50)
	base, over, err := workspaceBaseline(dir, WorkspaceQuota{})
	if err != nil || over != "" {
		t.Fatal(err, over)
	}
	mustWrite(t, filepath.Join(dir, "new.bin"), 5000)
	mustWrite(t, filepath.Join(dir, "data", "new", "x.bin"), 10)
	deepTree(t, dir, 300)
	f, _ := os.OpenFile(filepath.Join(dir, "train.csv"), os.O_APPEND|os.O_WRONLY, 0)
	f.Write(make([]byte, 1<<20))
	f.Close()
	os.Symlink("/etc", filepath.Join(dir, "etc"))
	os.Link(filepath.Join(dir, "train.csv"), filepath.Join(dir, "hard.csv"))
	unix.Mkfifo(filepath.Join(dir, "pipe"), 0o644)
	mustWrite(t, filepath.Join(dir, "ro", "f"), 1)
	os.Chmod(filepath.Join(dir, "ro"), 0o500)
	if err := rollback(dir, base); err != nil {
		t.Fatal(err)
	}
	var got []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if p != dir {
			rel, _ := filepath.Rel(dir, p)
			got = append(got, rel)
		}
		return nil
	})
	if want := []string{"data", "data/keep.csv", "train.csv"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("left: got %v want %v", got, want)
	}
	if st, err := os.Stat(filepath.Join(dir, "train.csv")); err != nil || st.Size() != 100 {
		t.Errorf("train.csv: got %v, %v want 100 bytes", st, err)
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Errorf("the link's target went too: %v", err)
	}
}

// quotaScripts are hostile scripts against small quotas (20 MiB, 500
// files): each must end killed with a reason naming the quota (held by
// measurement only: that reason), or refused the space by the kernel (an
// OSError naming it), and leave the workspace as it was.
var quotaScripts = []struct {
	name, script, reason string
}{
	{"many 4 MiB files", "for i in range(40):\n    open('f%d.bin' % i, 'wb').write(b'x' * (4 << 20))\nimport time\ntime.sleep(30)\n", "more than 20 MiB"},
	{"one file past the quota", "f = open('big.bin', 'wb')\nfor i in range(40):\n    f.write(b'x' * (1 << 20))\n", "more than 20 MiB"},
	{"file flood", "import os\nos.mkdir('flood')\nfor i in range(20000):\n    open('flood/%d' % i, 'w').close()\nimport time\ntime.sleep(30)\n", "more than 500 files"},
	{"deep tree", "import os\nfor i in range(2000):\n    os.mkdir('d')\n    os.chdir('d')\nimport time\ntime.sleep(30)\n", "nested more than 64 deep"},
	// RLIMIT_FSIZE keeps each file within the quota; three sparse files
	// of 15 MiB hold nothing on disk, but 45 MiB for whoever reads them.
	{"sparse files", "for i in range(3):\n    f = open('sparse%d.bin' % i, 'wb')\n    f.truncate(15 << 20)\n    f.close()\nimport time\ntime.sleep(30)\n", "more than 20 MiB"},
	{"hard-link flood", "import os\nopen('a', 'w').write('x')\nfor i in range(5000):\n    os.link('a', 'l%d' % i)\nimport time\ntime.sleep(30)\n", "more than 500 files"},
	{"deleted open file", "import os, time\nf = open('hidden.bin', 'wb')\nos.unlink('hidden.bin')\nfor i in range(9):\n    f.write(b'x' * (2 << 20))\n    f.flush()\nf2 = open('hidden2.bin', 'wb')\nos.unlink('hidden2.bin')\nfor i in range(9):\n    f2.write(b'x' * (2 << 20))\n    f2.flush()\ntime.sleep(30)\n", "more than 20 MiB"},
	{"grows the data file", "f = open('train.csv', 'ab')\nfor i in range(30):\n    f.write(b'1,2\\n' * (1 << 18))\nf.close()\n", "more than 20 MiB"},
	{"child keeps writing after the parent exits", "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(0.3)\n    for i in range(40):\n        open('c%d.bin' % i, 'wb').write(b'x' * (1 << 20))\n        time.sleep(0.01)\n    os._exit(0)\nopen('parent.txt', 'w').write('done')\n", ""},
}

// quotaRunners are the runners of the quota tests: the package's cold and
// warm ones (a workspace tmpfs of their own where KernelQuota) and, where
// that is so, a cold one held by measurement only, as under IsolateNone.
func quotaRunners(t *testing.T) map[string]Runner {
	t.Helper()
	rs := runners(t)
	if !KernelQuota(python(t)) {
		return rs
	}
	h, err := newHost(python(t))
	if err != nil {
		t.Fatal(err)
	}
	h.space = false
	m := &coldRunner{h: h}
	t.Cleanup(func() { m.Close() })
	rs["measured"] = m
	return rs
}

// refused reports whether res is a run the kernel refused space: it
// failed on ENOSPC.
func refused(res Result) bool {
	return res.Outcome == ScriptError && strings.Contains(res.Stderr, "No space left on device")
}

func TestWorkspaceQuota(t *testing.T) {
	lim := Limits{Timeout: 60 * time.Second, WorkspaceBytes: 20 << 20, WorkspaceFiles: 500}
	kernel := KernelQuota(python(t))
	for rname, r := range quotaRunners(t) {
		measured := rname == "measured" || !kernel
		for _, tc := range quotaScripts {
			t.Run(rname+"/"+tc.name, func(t *testing.T) {
				if measured && strings.HasPrefix(tc.name, "deleted") && os.Geteuid() != 0 {
					t.Skip("only root sees into a run's open files (its processes are not dumpable)")
				}
				ws, _ := workspace(t, tc.script)
				mustWrite(t, filepath.Join(ws, "train.csv"), 4096)
				before, _ := MeasureWorkspace(ws, WorkspaceQuota{})
				start := time.Now()
				res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py", Limits: lim})
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s in %v: %s", res.Outcome, time.Since(start).Round(time.Millisecond), res.Reason)
				switch {
				case tc.reason == "":
				case measured && (res.Outcome != Killed || !strings.Contains(res.Reason, "quota") || !strings.Contains(res.Reason, tc.reason)):
					t.Errorf("got %s %q want killed with a reason naming %q\n%s", res.Outcome, res.Reason, tc.reason, res.Stderr)
				case !measured && !refused(res) && (res.Outcome != Killed || !strings.Contains(res.Reason, "quota")):
					t.Errorf("got %s %q want killed for its quota, or refused space\n%s", res.Outcome, res.Reason, res.Stderr)
				}
				// The child writes after the run ended: its work dies with
				// the run where a cgroup holds it; elsewhere the check after
				// the run catches what it wrote by then.
				time.Sleep(600 * time.Millisecond)
				after, err := MeasureWorkspace(ws, WorkspaceQuota{})
				if err != nil {
					t.Fatal(err)
				}
				if after.Bytes > lim.WorkspaceBytes || after.Entries > lim.WorkspaceFiles || after.Depth > MaxWorkspaceDepth {
					t.Errorf("the workspace holds %+v after the run, over the quota", after)
				}
				if tc.reason != "" && (after.Bytes > before.Bytes+64<<10 || after.Entries != before.Entries) {
					t.Errorf("the workspace holds %+v after the run, %+v before: what the run added was not taken back", after, before)
				}
				if st, err := os.Stat(filepath.Join(ws, "train.csv")); err != nil || st.Size() != 4096 {
					t.Errorf("train.csv after the run: %v %v, want its 4096 bytes", st, err)
				}
			})
		}
	}
}

// spaceAttacks hold disk that no walk of the workspace sees, as much as
// they can (2 GiB or more), then wait: deleted files whose descriptors
// are in flight in a socket's queue (in no process's descriptor table),
// deleted files kept by mappings grown a page at a time, and space
// reserved past the files' sizes (FALLOC_FL_KEEP_SIZE, which RLIMIT_FSIZE
// does not bound). Each catches the kernel's refusal and keeps what it got.
var spaceAttacks = []struct{ name, script string }{
	{"deleted files in a socket's queue", `import os, socket
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
held = 0
try:
    for i in range(128):
        fd = os.open('h%d' % i, os.O_CREAT | os.O_RDWR)
        os.unlink('h%d' % i)
        socket.send_fds(a, [b'x'], [fd])
        for j in range(16):
            os.write(fd, b'x' * (1 << 20))
            held += 1
        os.close(fd)
except OSError as e:
    print('refused after', held, 'MiB:', e)
import time
time.sleep(30)
`},
	{"deleted files kept by mappings", `import mmap, os
maps = []
for i in range(128):
    fd = os.open('m%d' % i, os.O_CREAT | os.O_RDWR)
    os.ftruncate(fd, 16 << 20)
    m = mmap.mmap(fd, 16 << 20)
    os.close(fd)
    os.unlink('m%d' % i)
    maps.append(m)
    for off in range(0, 16 << 20, 4096):
        m[off] = 1
import time
time.sleep(30)
`},
	{"reservations past the file size", `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
fds, got = [], 0
for i in range(4096):
    fd = os.open('r%d' % i, os.O_CREAT | os.O_RDWR)
    fds.append(fd)
    if libc.fallocate(fd, 1, 0, 1 << 30) == 0:
        got += 1 << 10
    elif libc.fallocate(fd, 1, 0, 1 << 20) == 0:
        got += 1
    else:
        print('refused after', got, 'MiB, errno', ctypes.get_errno())
        break
import time
time.sleep(30)
`},
}

// hostFree is the free space of the file system holding dir.
func hostFree(t *testing.T, dir string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// TestKernelQuota: what a walk of the workspace cannot see is held by
// the kernel: the run is killed (or refused space) within seconds, not
// classified success, the host's disk under the workspace never loses
// more than a fraction of what the script tried to hold, and the
// workspace is left as it was.
func TestKernelQuota(t *testing.T) {
	py := python(t)
	if !KernelQuota(py) {
		t.Skip("no workspace tmpfs at this isolation level: the quota is measured only")
	}
	lim := Limits{Timeout: 60 * time.Second, WorkspaceBytes: 20 << 20, WorkspaceFiles: 500}
	r := runners(t)["warm"]
	for _, tc := range spaceAttacks {
		t.Run(tc.name, func(t *testing.T) {
			ws, _ := workspace(t, tc.script)
			before, _ := MeasureWorkspace(ws, WorkspaceQuota{})
			free := hostFree(t, ws)
			low := free
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
						low = min(low, hostFree(t, ws))
					}
				}
			}()
			start := time.Now()
			res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py", Limits: lim})
			close(stop)
			wg.Wait()
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s (signal %d) in %v: %s %s; host free space fell by %d MiB at most", res.Outcome, res.Signal, took.Round(time.Millisecond), res.Reason, strings.TrimSpace(res.Stdout), (free-low)>>20)
			if res.Outcome != Killed && !refused(res) {
				t.Errorf("got %s %q, want killed or refused space\n%s", res.Outcome, res.Reason, res.Stderr)
			}
			if took > 20*time.Second {
				t.Errorf("the run took %v: nothing stopped it before its time limit", took)
			}
			// Other processes share the disk: a margin well below the 2 GiB
			// the script tried for.
			if free-low > 256<<20 {
				t.Errorf("the host's free space fell by %d MiB during the run", (free-low)>>20)
			}
			after, _ := MeasureWorkspace(ws, WorkspaceQuota{})
			if after.Entries != before.Entries || after.Bytes > before.Bytes+64<<10 {
				t.Errorf("the workspace holds %+v after the run, %+v before", after, before)
			}
		})
	}
}

// TestWorkspaceQuotaRespected: a run within its quota keeps what it wrote,
// and one that starts over its quota does not run.
func TestWorkspaceQuotaRespected(t *testing.T) {
	lim := Limits{Timeout: 60 * time.Second, WorkspaceBytes: 20 << 20, WorkspaceFiles: 500}
	for rname, r := range runners(t) {
		t.Run(rname, func(t *testing.T) {
			ws, _ := workspace(t, "import os\nos.mkdir('out')\nfor i in range(100):\n    open('out/%d.bin' % i, 'wb').write(b'x' * 100000)\nprint('ok')\n")
			res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py", Limits: lim})
			if err != nil || res.Outcome != Success || res.Stdout != "ok\n" {
				t.Fatalf("got %s %q %v: %s", res.Outcome, res.Reason, err, res.Stderr)
			}
			if u, _ := MeasureWorkspace(ws, WorkspaceQuota{}); u.Entries != 102 || u.Bytes < 100*100000 {
				t.Errorf("the run's files: got %+v", u)
			}
			mustWrite(t, filepath.Join(ws, "over.bin"), 21<<20)
			res, err = r.Run(context.Background(), Request{Dir: ws, Script: "train.py", Limits: lim})
			if err != nil || res.Outcome != Killed || !strings.Contains(res.Reason, "over its quota before the script started") {
				t.Errorf("over the quota before: got %s %q %v", res.Outcome, res.Reason, err)
			}
		})
	}
}

// copyBackScript changes a workspace in every way the copy-back must
// carry over: files changed, appended, replaced, removed and renamed;
// folders removed, replaced by files, made anew with the old name; files
// replaced by folders; hard links (new, and one name of an old pair
// rewritten: the other keeps the old content), symlinks, a FIFO, modes and
// a modification time.
const copyBackScript = `import os, shutil
open('data/train.csv', 'a').write('3,4\n')
open('keep.txt', 'w').write('rewritten')
os.remove('gone.txt')
os.rename('old.txt', 'renamed.txt')
shutil.rmtree('olddir')
os.remove('dir2file/x')
os.rmdir('dir2file')
open('dir2file', 'w').write('now a file')
os.remove('file2dir')
os.mkdir('file2dir')
open('file2dir/inner', 'w').write('inner')
shutil.rmtree('remade')
os.mkdir('remade')
open('remade/fresh', 'w').write('fresh')
open('pair_a', 'w').write('new a')
open('new.bin', 'wb').write(b'\0' * 5000)
os.link('new.bin', 'new_link.bin')
os.symlink('data/train.csv', 'link.csv')
os.mkfifo('fifo')
os.chmod('run.sh', 0o755)
os.utime('keep.txt', ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
os.makedirs('a/b/c')
open('a/b/c/deep.txt', 'w').write('deep')
`

// treeState describes every entry under dir: kind, mode, content or link
// target, and which names share an inode.
func treeState(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	inodes := map[uint64]string{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		desc := fmt.Sprintf("%o", st.Mode)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, _ := os.ReadFile(p)
			desc += " " + string(b)
			if st.Nlink > 1 {
				if other, ok := inodes[st.Ino]; ok {
					desc += " linked to " + other
				}
				inodes[st.Ino] = rel
			}
			if rel == "keep.txt" {
				desc += fmt.Sprintf(" mtime %d", st.Mtim.Nano())
			}
		case unix.S_IFLNK:
			target, _ := os.Readlink(p)
			desc += " -> " + target
		}
		out[rel] = desc
		return nil
	})
	return out
}

// TestCopyBack: the workspace after a run in its own tmpfs is what the
// same script leaves when it runs directly on a copy of the workspace, but
// for one difference of the overlay: a file that had several names before
// the run gets a copy of its own at the name the run writes (the other
// names keep the old content).
func TestCopyBack(t *testing.T) {
	py := python(t)
	if !KernelQuota(py) {
		t.Skip("no workspace tmpfs at this isolation level")
	}
	layout := func(dir string) {
		for rel, content := range map[string]string{"data/train.csv": "1,2\n", "keep.txt": "keep", "gone.txt": "gone", "old.txt": "old",
			"olddir/f": "f", "olddir/sub/g": "g", "dir2file/x": "x", "file2dir": "file", "remade/stale": "stale", "pair_a": "pair", "run.sh": "echo"} {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, rel), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Link(filepath.Join(dir, "pair_a"), filepath.Join(dir, "pair_b")); err != nil {
			t.Fatal(err)
		}
	}
	direct := t.TempDir()
	layout(direct)
	if err := os.WriteFile(filepath.Join(direct, "train.py"), []byte(copyBackScript), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "train.py")
	cmd.Dir = direct
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("direct run: %v %s", err, out)
	}
	for name, r := range runners(t) {
		t.Run(name, func(t *testing.T) {
			ws, _ := workspace(t, copyBackScript)
			layout(ws)
			res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py", Limits: Limits{Timeout: 60 * time.Second}})
			if err != nil || res.Outcome != Success {
				t.Fatalf("got %s %v %s", res.Outcome, err, res.Stderr)
			}
			want, got := treeState(t, direct), treeState(t, ws)
			want["pair_b"] = "100644 pair"
			for rel, w := range want {
				if got[rel] != w {
					t.Errorf("%s: got %q want %q", rel, got[rel], w)
				}
			}
			for rel, g := range got {
				if _, ok := want[rel]; !ok {
					t.Errorf("%s: %q should not be there", rel, g)
				}
			}
		})
	}
}

// TestMemoryCgroup: a run's processes together are held to its memory
// cgroup (MemoryBytes + the tmpfs sizes + memSlack, about 1.5 GiB here)
// where the runner makes one: ten children of 180 MiB each, each within
// RLIMIT_AS, pass it together, and the kernel ends some of them (the
// script sees them killed) or the script itself (outcome killed, with a
// reason naming the limit).
func TestMemoryCgroup(t *testing.T) {
	r := runners(t)["cold"].(*coldRunner) // a warm child maps more than 256 MiB already
	if !r.h.cg.has(func(h *hierarchy) bool { return h.mem }) {
		t.Skip("no memory cgroup here")
	}
	ws, _ := workspace(t, `import os, time
kids = []
for i in range(10):
    pid = os.fork()
    if pid == 0:
        b = bytearray(180 << 20)
        for j in range(0, len(b), 4096):
            b[j] = 1
        time.sleep(1)
        os._exit(0)
    kids.append(pid)
print('killed', sum(os.WIFSIGNALED(os.waitpid(pid, 0)[1]) for pid in kids))
`)
	res, err := r.Run(context.Background(), Request{Dir: ws, Script: "train.py", Limits: Limits{Timeout: 60 * time.Second, MemoryBytes: 256 << 20, WorkspaceBytes: 20 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %q: %s", res.Outcome, res.Stdout, res.Reason)
	if !(res.Outcome == Success && strings.HasPrefix(res.Stdout, "killed ") && res.Stdout != "killed 0\n") &&
		!(res.Outcome == Killed && strings.Contains(res.Reason, "memory limit")) {
		t.Errorf("got %s %q %q: the children's 1.8 GiB passed the run's limit", res.Outcome, res.Stdout, res.Reason)
	}
}
