package gguf

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// f32SHA is the sha256 of float32 values' little-endian bytes, as
// scripts/gguf_reference.py hashes gguf's dequantized arrays.
func f32SHA(v []float32) string {
	h := sha256.New()
	b := make([]byte, 4<<16)
	for len(v) > 0 {
		n := min(len(v), 1<<16)
		for i, x := range v[:n] {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		clearVectorState()
		h.Write(b[:4*n])
		v = v[n:]
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestDequantizeMatchesGGUF reads one file per tensor type and compares
// the dequantized values with gguf.quants.dequantize's, bit for bit.
func TestDequantizeMatchesGGUF(t *testing.T) {
	raw, err := os.ReadFile("testdata/quants.json")
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]struct {
		Shape       []int
		SHA256      string
		First, Last []float64
	}
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if len(want) != len(readable) {
		t.Fatalf("quants.json has %d types, the reader %d", len(want), len(readable))
	}
	for name, w := range want {
		t.Run(name, func(t *testing.T) {
			f, err := Open(filepath.Join("testdata", "quant-"+name+".gguf"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			info, ok := f.Tensor("t")
			if !ok || info.Type.String() != name {
				t.Fatalf("tensor t: %+v, want type %s", info, name)
			}
			v, _, err := f.Float32("t")
			if err != nil {
				t.Fatal(err)
			}
			if got := info.Shape(); len(got) != 2 || got[0] != w.Shape[0] || got[1] != w.Shape[1] {
				t.Fatalf("shape %v, want %v", got, w.Shape)
			}
			for i, x := range w.First {
				if v[i] != float32(x) && !(math.IsNaN(x) && v[i] != v[i]) {
					t.Errorf("value %d = %g, gguf %g", i, v[i], x)
				}
			}
			for i, x := range w.Last {
				if j := len(v) - len(w.Last) + i; v[j] != float32(x) {
					t.Errorf("value %d = %g, gguf %g", j, v[j], x)
				}
			}
			if got := f32SHA(v); got != w.SHA256 {
				t.Errorf("dequantized values' sha256 %s, gguf's %s", got, w.SHA256)
			}
		})
	}
}

// TestQuantizeQ8_0 checks the writer's Q8_0 against its dequantization:
// each value within half a step (d/2) of its block.
func TestQuantizeQ8_0(t *testing.T) {
	x := make([]float32, 96)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)*0.7)) * float32(1+i%5)
	}
	x[40] = 0 // a block with a zero
	for i := 64; i < 96; i++ {
		x[i] = 0 // an all-zero block: d = 0
	}
	b, err := QuantizeQ8_0(x)
	if err != nil {
		t.Fatal(err)
	}
	y, err := Dequantize(Q8_0, b, len(x))
	if err != nil {
		t.Fatal(err)
	}
	for k := range 3 {
		var amax float64
		for _, v := range x[32*k : 32*k+32] {
			amax = max(amax, math.Abs(float64(v)))
		}
		step := amax / 127
		for i := 32 * k; i < 32*k+32; i++ {
			if d := math.Abs(float64(y[i] - x[i])); d > step/2*1.01+1e-7 {
				t.Errorf("value %d: %g -> %g, off by %g > half a step %g", i, x[i], y[i], d, step/2)
			}
		}
	}
	if _, err := QuantizeQ8_0(x[:33]); err == nil {
		t.Error("33 values quantized to Q8_0 without error")
	}
}

// TestAsQ8_0 rewrites the Q5_0 and IQ4_NL reference blocks as Q8_0 and
// checks that they dequantize to the same float32 values, bit for bit,
// and that BlockFormat keeps both types as q8_0.
func TestAsQ8_0(t *testing.T) {
	for _, typ := range []Type{Q5_0, IQ4_NL} {
		t.Run(typ.String(), func(t *testing.T) {
			f, err := Open(filepath.Join("testdata", "quant-"+typ.String()+".gguf"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			raw, info, err := f.Raw("t")
			if err != nil {
				t.Fatal(err)
			}
			n := info.Dims[0] * info.Dims[1]
			want, err := Dequantize(typ, raw, n)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Dequantize(Q8_0, asQ8_0(typ, raw), n)
			if err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("value %d: %g as Q8_0, %g as %s", i, got[i], want[i], typ)
				}
			}
			if format, ok := BlockFormat(typ); !ok || format != "q8_0" {
				t.Errorf("BlockFormat(%s) = %q, %v", typ, format, ok)
			}
		})
	}
}
