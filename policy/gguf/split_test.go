package gguf

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The split models in testdata/split were written by llama.cpp's own
// llama-gguf-split (llama-cpp-python 0.3.36's llama.cpp, built by
// scripts/setup_llamacpp.sh) from the tiny files beside them:
//
//	llama-gguf-split --split --split-max-tensors 8 llama.gguf split/llama
//	llama-gguf-split --split --split-max-tensors 10 --no-tensor-first-split qwen3.gguf split/qwen3
//
// three shards each; qwen3's first holds only the metadata.

// TestSplitModels opens each split model by its first shard and checks it
// against the whole file: the same tensors with the same bytes, and Load
// makes the same Hugging Face files of it.
func TestSplitModels(t *testing.T) {
	for _, name := range []string{"llama", "qwen3"} {
		t.Run(name, func(t *testing.T) {
			whole, err := Open(filepath.Join("testdata", name+".gguf"))
			if err != nil {
				t.Fatal(err)
			}
			defer whole.Close()
			split, err := Open(filepath.Join("testdata", "split", name+"-00001-of-00003.gguf"))
			if err != nil {
				t.Fatal(err)
			}
			defer split.Close()
			if len(split.shards) != 2 || len(split.Tensors) != len(whole.Tensors) {
				t.Fatalf("%d shards besides the first, %d tensors; the whole file has %d", len(split.shards), len(split.Tensors), len(whole.Tensors))
			}
			inFirst := 0
			for _, wt := range whole.Tensors {
				want, _, err := whole.Raw(wt.Name)
				if err != nil {
					t.Fatal(err)
				}
				got, st, err := split.Raw(wt.Name)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) || st.Type != wt.Type || st.Elems() != wt.Elems() {
					t.Errorf("tensor %s differs from the whole file's", wt.Name)
				}
				if st.shard == 0 {
					inFirst++
				}
			}
			if name == "qwen3" && inFirst != 0 || name == "llama" && inFirst == 0 {
				t.Errorf("%d tensors in the first shard", inFirst)
			}
			cw, err := Convert(whole)
			if err != nil {
				t.Fatal(err)
			}
			cs, err := Convert(split)
			if err != nil {
				t.Fatal(err)
			}
			for file, want := range cw.Files {
				if !bytes.Equal(cs.Files[file], want) {
					t.Errorf("%s made from the split model differs from the whole file's", file)
				}
			}
			if paths := split.Paths(); len(paths) != 3 || !strings.HasSuffix(paths[2], name+"-00003-of-00003.gguf") {
				t.Errorf("Paths: %v", paths)
			}
			if paths := whole.Paths(); len(paths) != 1 || paths[0] != whole.Path {
				t.Errorf("Paths of a whole file: %v", paths)
			}
		})
	}
}

// TestSplitRefusals: a split model opened by another shard, with a shard
// missing, renamed, or taken from another model, is refused in one line
// naming the file and what to do.
func TestSplitRefusals(t *testing.T) {
	copyShards := func(t *testing.T, name string) string {
		dir := t.TempDir()
		for i := 1; i <= 3; i++ {
			base := filepath.Base(shardPath(name, i, 3))
			b, err := os.ReadFile(filepath.Join("testdata", "split", base))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, base), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	tests := []struct {
		name   string
		layout func(t *testing.T, dir string) string // returns the path to open
		want   string
	}{
		{"a later shard given", func(t *testing.T, dir string) string {
			return filepath.Join(dir, "llama-00002-of-00003.gguf")
		}, "is shard 2 of 3 of a split model (llama.cpp's gguf-split): give llama-00001-of-00003.gguf"},
		{"a shard missing", func(t *testing.T, dir string) string {
			os.Remove(filepath.Join(dir, "llama-00003-of-00003.gguf"))
			return filepath.Join(dir, "llama-00001-of-00003.gguf")
		}, "shard 3 of 3 of the split model"},
		{"the first shard renamed", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "model.gguf")
			os.Rename(filepath.Join(dir, "llama-00001-of-00003.gguf"), p)
			return p
		}, "not named PREFIX-00001-of-00003.gguf"},
		{"a shard of another model", func(t *testing.T, dir string) string {
			b, err := os.ReadFile(filepath.Join("testdata", "split", "qwen3-00003-of-00003.gguf"))
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(dir, "llama-00003-of-00003.gguf"), b, 0o644)
			return filepath.Join(dir, "llama-00001-of-00003.gguf")
		}, "llama-00003-of-00003.gguf: tensor"},
		{"a shard in the wrong place", func(t *testing.T, dir string) string {
			a, b := filepath.Join(dir, "llama-00002-of-00003.gguf"), filepath.Join(dir, "llama-00003-of-00003.gguf")
			os.Rename(a, a+".x")
			os.Rename(b, a)
			os.Rename(a+".x", b)
			return filepath.Join(dir, "llama-00001-of-00003.gguf")
		}, "its split.no is 2 and split.count 3, want 1 and 3: it is not shard 2 of llama-00001-of-00003.gguf's model"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.layout(t, copyShards(t, "llama"))
			f, err := Open(path)
			if err == nil {
				f.Close()
				t.Fatal("opened")
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q, want one line with %q", err, tc.want)
			}
			if _, err := Load(path); err == nil {
				t.Error("Load opened it")
			}
		})
	}
}
