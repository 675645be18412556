package deps

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFind(t *testing.T) {
	const rel = "qwen3/tokenizer.json"
	put := func(dir string) string {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	exeDir := func() string {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		return filepath.Dir(exe)
	}()

	t.Run("MLERL_DEPS first", func(t *testing.T) {
		deps, wd := t.TempDir(), t.TempDir()
		want := put(deps)
		put(filepath.Join(wd, ".deps"))
		t.Setenv(Env, deps)
		t.Chdir(wd)
		if got, err := Find(rel); err != nil || got != want {
			t.Errorf("got %q, %v; want %q", got, err, want)
		}
	})
	t.Run(".deps in a parent of the working directory", func(t *testing.T) {
		root := t.TempDir()
		want := put(filepath.Join(root, ".deps"))
		sub := filepath.Join(root, "a", "b")
		os.MkdirAll(sub, 0o755)
		t.Setenv(Env, filepath.Join(root, "elsewhere")) // set but empty: looked past
		t.Chdir(sub)
		if got, err := Find(rel); err != nil || got != want {
			t.Errorf("got %q, %v; want %q", got, err, want)
		}
	})
	t.Run("beside the binary", func(t *testing.T) {
		// The test binary's folder is a fresh temporary one: a .deps there
		// is found from any working directory.
		p := put(filepath.Join(exeDir, ".deps"))
		defer os.RemoveAll(filepath.Join(exeDir, ".deps"))
		t.Setenv(Env, "")
		t.Chdir(t.TempDir())
		if got, err := Find(rel); err != nil || got != p {
			t.Errorf("got %q, %v; want %q", got, err, p)
		}
	})
	t.Run("nowhere", func(t *testing.T) {
		wd := t.TempDir()
		t.Setenv(Env, filepath.Join(wd, "deps"))
		t.Chdir(wd)
		_, err := Find(rel)
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("got %v, want ErrNotFound", err)
		}
		for _, want := range []string{
			filepath.Join(wd, "deps", rel) + " ($MLERL_DEPS)",
			filepath.Join(wd, ".deps", rel) + " and the same in each parent folder",
			filepath.Join(exeDir, ".deps", rel) + " and the same in each parent folder",
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		}
	})
}
