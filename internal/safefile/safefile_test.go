package safefile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// hostile builds a workspace holding every kind of file a script can
// leave, next to a "secret" outside it.
func hostile(t *testing.T) (ws, secret string) {
	t.Helper()
	root := t.TempDir()
	secret = filepath.Join(root, "private", "answers.csv")
	ws = filepath.Join(root, "ws")
	for _, d := range []string{filepath.Dir(secret), ws, filepath.Join(ws, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(secret, []byte("id,label\n1,1\n"), 0o644))
	must(os.WriteFile(filepath.Join(ws, "ok.csv"), []byte("id,label\n1,0\n"), 0o644))
	must(os.WriteFile(filepath.Join(ws, "sub", "inner.txt"), []byte("inner\n"), 0o644))
	must(os.Symlink(secret, filepath.Join(ws, "abs_link.csv")))
	must(os.Symlink("../private/answers.csv", filepath.Join(ws, "rel_link.csv")))
	must(os.Symlink("ok.csv", filepath.Join(ws, "inside_link.csv")))
	// What a script inside the sandbox could write knowing only the layout.
	wd, _ := os.Getwd()
	rel, _ := filepath.Rel(wd, secret)
	must(os.Symlink("/proc/self/cwd/"+rel, filepath.Join(ws, "proc_link.csv")))
	must(os.Symlink(filepath.Dir(secret), filepath.Join(ws, "dirlink")))
	must(os.Link(secret, filepath.Join(ws, "hard.csv")))
	must(unix.Mkfifo(filepath.Join(ws, "fifo.csv"), 0o644))
	f, err := os.Create(filepath.Join(ws, "sparse.csv"))
	must(err)
	must(f.Truncate(1 << 40)) // 1 TiB, no blocks
	f.Close()
	if os.Geteuid() == 0 {
		must(unix.Mknod(filepath.Join(ws, "dev.csv"), unix.S_IFCHR|0o644, int(unix.Mkdev(1, 5)))) // like /dev/zero
	}
	return ws, secret
}

func TestReadFileRefusesWhatIsNotARegularFileInside(t *testing.T) {
	ws, _ := hostile(t)
	cases := []struct {
		name, rel string
		opts      Options
		want      error // nil: readable
		text      string
	}{
		{"regular", "ok.csv", Options{}, nil, ""},
		{"nested", "sub/inner.txt", Options{}, nil, ""},
		{"absolute symlink", "abs_link.csv", Options{}, ErrSymlink, "abs_link.csv is a symbolic link"},
		{"relative symlink out", "rel_link.csv", Options{}, ErrSymlink, "symbolic link"},
		{"symlink inside", "inside_link.csv", Options{}, ErrSymlink, "symbolic link"},
		{"through /proc/self/cwd", "proc_link.csv", Options{}, ErrSymlink, "symbolic link"},
		{"symlinked folder", "dirlink/answers.csv", Options{}, ErrSymlink, "dirlink is a symbolic link"},
		{"hard link", "hard.csv", Options{SingleLink: true}, ErrHardLinked, "has 2 hard links"},
		{"fifo", "fifo.csv", Options{}, ErrNotRegular, "named pipe"},
		{"sparse 1 TiB", "sparse.csv", Options{MaxBytes: 1 << 20}, ErrTooLarge, "is 1 TiB, more than the 1 MiB allowed"},
		{"folder", "sub", Options{}, ErrNotRegular, "is a folder"},
		{"missing", "nope.csv", Options{}, ErrNotExist, "nope.csv does not exist"},
		{"climbing", "../private/answers.csv", Options{}, ErrEscape, "outside the workspace"},
		{"climbing inside", "sub/../../private/answers.csv", Options{}, ErrEscape, "outside the workspace"},
		{"absolute", "/etc/passwd", Options{}, ErrEscape, "absolute path"},
		{"workspace itself", ".", Options{}, ErrNotRegular, "workspace folder itself"},
	}
	if os.Geteuid() == 0 {
		cases = append(cases, struct {
			name, rel string
			opts      Options
			want      error
			text      string
		}{"device", "dev.csv", Options{}, ErrNotRegular, "character device"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			done := make(chan struct{})
			var b []byte
			var err error
			go func() {
				b, err = ReadFile(ws, c.rel, c.opts)
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatalf("ReadFile(%q) blocked", c.rel)
			}
			if c.want == nil {
				if err != nil || len(b) == 0 {
					t.Fatalf("got %q, %v; want the content", b, err)
				}
				return
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("got %q, %v; want %v", b, err, c.want)
			}
			if !strings.Contains(err.Error(), c.text) {
				t.Errorf("message %q does not say %q", err, c.text)
			}
			if strings.Contains(err.Error(), ws) {
				t.Errorf("message %q names the host path", err)
			}
		})
	}
}

func TestReadFileCapsWhatItReads(t *testing.T) {
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "a"), make([]byte, 100), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(ws, "a", Options{MaxBytes: 99}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
	if b, err := ReadFile(ws, "a", Options{MaxBytes: 100}); err != nil || len(b) != 100 {
		t.Fatalf("got %d bytes, %v; want 100", len(b), err)
	}
}

func TestWriteFileNeverWritesThroughALink(t *testing.T) {
	ws, secret := hostile(t)
	for _, rel := range []string{"abs_link.csv", "rel_link.csv", "proc_link.csv", "dirlink/answers.csv", "fifo.csv", "sub"} {
		if err := WriteFile(ws, rel, []byte("pwned"), 0o644); err == nil {
			t.Errorf("WriteFile(%q) succeeded, want a refusal", rel)
		}
	}
	// A hard link is replaced by a file of its own, not written through.
	if err := WriteFile(ws, "hard.csv", []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(secret); string(b) != "id,label\n1,1\n" {
		t.Fatalf("the secret outside the workspace changed: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "hard.csv")); string(b) != "new" {
		t.Fatalf("hard.csv: got %q, want %q", b, "new")
	}
	if err := WriteFile(ws, "a/b/c.py", []byte("x = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(ws, "a", "b", "c.py"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("a/b/c.py: %v, %v; want mode 0600", fi, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(ws, "a", "b")); len(ents) != 1 {
		t.Fatalf("temporary files left behind: %v", ents)
	}
}

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{5: "5 bytes", 1024: "1 KiB", 1536: "1.5 KiB", 256 << 20: "256 MiB", 1 << 40: "1 TiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}
