package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
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
// files): each must end killed with a reason naming the quota, and leave
// the workspace as it was.
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

func TestWorkspaceQuota(t *testing.T) {
	lim := Limits{Timeout: 60 * time.Second, WorkspaceBytes: 20 << 20, WorkspaceFiles: 500}
	for rname, r := range runners(t) {
		for _, tc := range quotaScripts {
			t.Run(rname+"/"+tc.name, func(t *testing.T) {
				if strings.HasPrefix(tc.name, "deleted") && os.Geteuid() != 0 {
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
				if tc.reason != "" && (res.Outcome != Killed || !strings.Contains(res.Reason, "quota") || !strings.Contains(res.Reason, tc.reason)) {
					t.Errorf("got %s %q want killed with a reason naming %q\n%s", res.Outcome, res.Reason, tc.reason, res.Stderr)
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
