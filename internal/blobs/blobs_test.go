package blobs

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/internal/store"
)

func TestTreeRoundTrip(t *testing.T) {
	ctx := context.Background()
	st := store.NewLocal(t.TempDir())
	files := Files{
		"train.py":           {Data: []byte("print('hi')\n"), Mode: 0o755},
		"data/train.csv":     {Data: []byte("a,b\n1,2\n"), Mode: 0o644},
		"data/copy.csv":      {Data: []byte("a,b\n1,2\n"), Mode: 0o644},
		"data/empty.txt":     {Data: []byte{}, Mode: 0o600},
		"deep/er/still/x.md": {Data: []byte("# x"), Mode: 0o644},
	}
	meta := json.RawMessage(`{"history":["step 1"]}`)
	ref, err := PutTree(ctx, st, files, meta)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ref, "sha256:") || len(ref) != 7+64 {
		t.Fatalf("ref: got %q", ref)
	}
	got, tree, err := GetTree(ctx, st, ref)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, files) {
		t.Errorf("files: got %v want %v", got, files)
	}
	if string(tree.Meta) != string(meta) {
		t.Errorf("meta: got %s want %s", tree.Meta, meta)
	}
	var paths []string
	for _, e := range tree.Entries {
		paths = append(paths, e.Path)
	}
	if want := "data/copy.csv data/empty.txt data/train.csv deep/er/still/x.md train.py"; strings.Join(paths, " ") != want {
		t.Errorf("entries: got %q want sorted %q", strings.Join(paths, " "), want)
	}
	// Same files, same reference; identical content stored once.
	again, err := PutTree(ctx, st, files, meta)
	if err != nil || again != ref {
		t.Errorf("PutTree again: got %q, %v want %q", again, err, ref)
	}
	objs, _ := st.List(ctx, Prefix)
	if want := 4 + 1; len(objs) != want { // 4 distinct contents + the listing
		t.Errorf("blobs stored: got %d want %d", len(objs), want)
	}
	// A changed file gives another tree and shares the rest.
	files["train.py"] = File{Data: []byte("print('bye')\n"), Mode: 0o755}
	other, err := PutTree(ctx, st, files, meta)
	if err != nil || other == ref {
		t.Fatalf("changed tree: got %q, %v", other, err)
	}
	objs, _ = st.List(ctx, Prefix)
	if want := 5 + 2; len(objs) != want {
		t.Errorf("blobs after a one-file change: got %d want %d", len(objs), want)
	}
}

func TestGetErrors(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := store.NewLocal(dir)
	ref, err := PutTree(ctx, st, Files{"a.txt": {Data: []byte("content a"), Mode: 0o644}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		ref  string
		prep func()
		want string
	}{
		{"not a ref", "md5:abc", func() {}, "want sha256:<64 hex digits>"},
		{"short hash", "sha256:abc", func() {}, "want sha256:<64 hex digits>"},
		{"not hex", "sha256:" + strings.Repeat("../", 21) + "x", func() {}, "want sha256:<64 hex digits>"},
		{"upper case", "sha256:" + strings.Repeat("A", 64), func() {}, "want sha256:<64 hex digits>"},
		{"a file, not a tree", Ref(Hash([]byte("content a"))), func() {}, "not a tree listing"},
		{"missing tree", "sha256:" + strings.Repeat("0", 64), func() {}, "not found"},
		{"corrupt blob", ref, func() {
			os.WriteFile(filepath.Join(dir, filepath.FromSlash(Prefix), Hash([]byte("content a"))), []byte("content b"), 0o644)
		}, "does not match its hash"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.prep()
			_, _, err := GetTree(ctx, st, c.ref)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v want an error saying %q", err, c.want)
			}
		})
	}
}

func TestDirRoundTrip(t *testing.T) {
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "data", "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "train.py"), []byte("x = 1\n"), 0o755)
	os.WriteFile(filepath.Join(src, "data", "sub", "f.csv"), []byte("1,2\n"), 0o644)
	files, err := ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || files["train.py"].Mode != 0o755 || string(files["data/sub/f.csv"].Data) != "1,2\n" {
		t.Fatalf("ReadDir: got %v", files)
	}
	dst := t.TempDir()
	if err := WriteDir(dst, files); err != nil {
		t.Fatal(err)
	}
	back, err := ReadDir(dst)
	if err != nil || !reflect.DeepEqual(back, files) {
		t.Errorf("WriteDir then ReadDir: got %v, %v want %v", back, err, files)
	}

	os.Symlink("/etc/passwd", filepath.Join(src, "link"))
	if _, err := ReadDir(src); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("ReadDir with a symlink: got %v want an error", err)
	}
	for _, bad := range []string{"../escape.txt", "a/../../escape.txt", "/abs.txt"} {
		if err := WriteDir(t.TempDir(), Files{bad: {Data: []byte("x")}}); err == nil || !strings.Contains(err.Error(), "escapes") {
			t.Errorf("WriteDir(%q): got %v want an escape error", bad, err)
		}
	}
}
