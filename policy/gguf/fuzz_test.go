package gguf

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzOpen: any bytes, given as a GGUF file, are read or refused with an
// error: Open, every tensor's Float32 and Raw, and Load (the Hugging Face
// checkpoint the file converts to, its tokenizer and weights) never
// panic. The seeds are the test files (tiny models of each family, one
// file per tensor type); `go test -fuzz FuzzOpen ./policy/gguf` mutates
// them.
func FuzzOpen(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "*.gguf"))
	for _, s := range seeds {
		if st, err := os.Stat(s); err != nil || st.Size() > 400_000 {
			continue
		}
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "model.gguf")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if file, err := Open(path); err == nil {
			for _, ti := range file.Tensors {
				file.Raw(ti.Name)
				file.Float32(ti.Name)
			}
			file.Close()
		}
		if ck, err := Load(path); err == nil {
			ck.Close()
		}
	})
}
