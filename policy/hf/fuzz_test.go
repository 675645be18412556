package hf

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzSafetensors: any bytes, read as a safetensors file, are parsed or
// refused with an error, and every tensor the header names reads as
// float32 or is refused: never a panic. The seeds are the test
// checkpoints' files; `go test -fuzz FuzzSafetensors ./policy/hf` mutates
// them.
func FuzzSafetensors(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "ckpt", "*", "*.safetensors"))
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
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := NewFile(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		for _, n := range file.Names() {
			file.Float32(n)
		}
	})
}
