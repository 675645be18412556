package store_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/internal/store"
)

// testStore is the contract every backend meets; TestLocal and TestGCS
// run it.
func testStore(t *testing.T, st store.Store) {
	ctx := context.Background()
	t.Run("create read stat list delete", func(t *testing.T) {
		data := []byte("hello, object")
		if err := store.WriteAll(ctx, st, "a/b/c.txt", data, store.CreateOptions{ContentType: "text/plain"}); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"a/b/d.txt", "a/bb.txt", "ab/x.txt"} {
			if err := store.WriteAll(ctx, st, k, []byte(k), store.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		got, err := store.ReadAll(ctx, st, "a/b/c.txt")
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("ReadAll: got %q, %v want %q", got, err, data)
		}
		info, err := st.Stat(ctx, "a/b/c.txt")
		if err != nil || info.Size != int64(len(data)) || info.Key != "a/b/c.txt" || info.ModTime.IsZero() {
			t.Errorf("Stat: got %+v, %v", info, err)
		}
		lists := []struct {
			prefix string
			want   string
		}{
			{"a/", "a/b/c.txt a/b/d.txt a/bb.txt"},
			{"a/b/", "a/b/c.txt a/b/d.txt"},
			{"a/b", "a/b/c.txt a/b/d.txt a/bb.txt"},
			{"a", "a/b/c.txt a/b/d.txt a/bb.txt ab/x.txt"},
			{"", "a/b/c.txt a/b/d.txt a/bb.txt ab/x.txt"},
			{"zzz/", ""},
		}
		for _, l := range lists {
			objs, err := st.List(ctx, l.prefix)
			if err != nil {
				t.Fatalf("List(%q): %v", l.prefix, err)
			}
			var keys []string
			for _, o := range objs {
				keys = append(keys, o.Key)
			}
			if got := strings.Join(keys, " "); got != l.want {
				t.Errorf("List(%q): got %q want %q", l.prefix, got, l.want)
			}
		}
		dirs := []struct{ prefix, want string }{
			{"", "a ab"},
			{"a/", "b"},
			{"a", "b"},
			{"a/b/", ""},
			{"nope/", ""},
		}
		for _, d := range dirs {
			got, err := store.Dirs(ctx, st, d.prefix)
			if err != nil {
				t.Fatalf("Dirs(%q): %v", d.prefix, err)
			}
			if strings.Join(got, " ") != d.want {
				t.Errorf("Dirs(%q): got %q want %q", d.prefix, strings.Join(got, " "), d.want)
			}
			// The generic fallback agrees with the backend's own.
			got, _ = store.Dirs(ctx, listOnly{st}, d.prefix)
			if strings.Join(got, " ") != d.want {
				t.Errorf("Dirs(%q) by listing: got %q want %q", d.prefix, strings.Join(got, " "), d.want)
			}
		}
		if err := st.Delete(ctx, "a/b/c.txt"); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Stat(ctx, "a/b/c.txt"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Stat after Delete: got %v want ErrNotFound", err)
		}
		if _, err := st.Open(ctx, "a/b/c.txt"); !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "c.txt") {
			t.Errorf("Open after Delete: got %v want ErrNotFound naming the key", err)
		}
		if err := st.Delete(ctx, "a/b/c.txt"); err != nil {
			t.Errorf("Delete of a missing object: got %v want nil", err)
		}
		if ok, err := store.Exists(ctx, st, "a/bb.txt"); !ok || err != nil {
			t.Errorf("Exists: got %v, %v", ok, err)
		}
	})
	t.Run("ranged ReadAt", func(t *testing.T) {
		data := []byte("0123456789abcdefghij")
		if err := store.WriteAll(ctx, st, "r/obj", data, store.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		o, err := st.Open(ctx, "r/obj")
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		if o.Size() != int64(len(data)) {
			t.Errorf("Size: got %d want %d", o.Size(), len(data))
		}
		cases := []struct {
			off     int64
			n       int
			want    string
			wantEOF bool
		}{
			{0, 4, "0123", false},
			{10, 5, "abcde", false},
			{15, 5, "fghij", false},
			{17, 5, "hij", true},
			{20, 3, "", true},
			{25, 1, "", true},
		}
		for _, c := range cases {
			buf := make([]byte, c.n)
			n, err := o.ReadAt(buf, c.off)
			if string(buf[:n]) != c.want || (err == io.EOF) != c.wantEOF || (err != nil && err != io.EOF) {
				t.Errorf("ReadAt(%d, %d): got %q, %v want %q (EOF %v)", c.n, c.off, buf[:n], err, c.want, c.wantEOF)
			}
		}
		// Sequential reads still work after ranged ones.
		all, err := io.ReadAll(o)
		if err != nil || !bytes.Equal(all, data) {
			t.Errorf("Read: got %q, %v", all, err)
		}
	})
	t.Run("IfNotExists refuses the second writer", func(t *testing.T) {
		opts := store.CreateOptions{IfNotExists: true}
		w1, err := st.Create(ctx, "x/_MANIFEST.json", opts)
		if err != nil {
			t.Fatal(err)
		}
		w2, err := st.Create(ctx, "x/_MANIFEST.json", opts)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w1, "first")
		io.WriteString(w2, "second")
		if err := w1.Close(); err != nil {
			t.Fatalf("first Close: %v", err)
		}
		if err := w2.Close(); !errors.Is(err, store.ErrExists) || !strings.Contains(err.Error(), "x/_MANIFEST.json") {
			t.Fatalf("second Close: got %v want ErrExists naming the key", err)
		}
		if got, _ := store.ReadAll(ctx, st, "x/_MANIFEST.json"); string(got) != "first" {
			t.Errorf("content: got %q want first", got)
		}
		// Without IfNotExists a write replaces the object.
		if err := store.WriteAll(ctx, st, "x/_MANIFEST.json", []byte("third"), store.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if got, _ := store.ReadAll(ctx, st, "x/_MANIFEST.json"); string(got) != "third" {
			t.Errorf("content after overwrite: got %q want third", got)
		}
	})
	t.Run("Abort leaves nothing", func(t *testing.T) {
		w, err := st.Create(ctx, "ab/orted/part.parquet", store.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, strings.Repeat("x", 1000))
		if err := w.Abort(); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Stat(ctx, "ab/orted/part.parquet"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Stat: got %v want ErrNotFound", err)
		}
		if objs, err := st.List(ctx, "ab/orted/"); err != nil || len(objs) != 0 {
			t.Errorf("List: got %v, %v want nothing", objs, err)
		}
		if err := w.Close(); err == nil {
			t.Errorf("Close after Abort: got nil want an error")
		}
	})
	t.Run("unfinished write is invisible", func(t *testing.T) {
		w, err := st.Create(ctx, "inv/obj", store.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Abort()
		io.WriteString(w, "partial")
		if _, err := st.Stat(ctx, "inv/obj"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Stat before Close: got %v want ErrNotFound", err)
		}
		if objs, _ := st.List(ctx, "inv/"); len(objs) != 0 {
			t.Errorf("List before Close: got %v want nothing", objs)
		}
	})
	t.Run("bad keys", func(t *testing.T) {
		for _, k := range []string{"", "../x", "/abs", "a/../../x", "."} {
			if _, err := st.Create(ctx, k, store.CreateOptions{}); err == nil {
				t.Errorf("Create(%q): got nil want an error", k)
			}
			if _, err := st.Open(ctx, k); err == nil {
				t.Errorf("Open(%q): got nil want an error", k)
			}
		}
	})
}

// listOnly hides a backend's DirLister.
type listOnly struct{ store.Store }
