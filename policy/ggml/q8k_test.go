package ggml

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestQ8KQuantize: each block's scale is its largest magnitude over 127,
// every value is within half a step of x, the largest maps to ±127, the
// sums of 16 are the values' own, an all-zero block has scale 0, and the
// slices are reused when long enough.
func TestQ8KQuantize(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, 3*256)
	for i := range x {
		x[i] = float32(r.NormFloat64() * float64(1+i/256*10))
	}
	clear(x[256:512])
	x[700] = -400
	var q Q8K
	q.Quantize(x)
	if len(q.D) != 3 || len(q.Q) != 768 || len(q.BSums) != 48 {
		t.Fatalf("lengths %d %d %d, want 3 768 48", len(q.D), len(q.Q), len(q.BSums))
	}
	for k := range 3 {
		var amax float64
		for _, v := range x[k*256 : (k+1)*256] {
			amax = max(amax, math.Abs(float64(v)))
		}
		if d := float64(q.D[k]); math.Abs(d-amax/127) > 1e-6*amax {
			t.Errorf("block %d: D %v, want %v", k, d, amax/127)
		}
		for g := range 16 {
			var s int
			for i := k*256 + 16*g; i < k*256+16*g+16; i++ {
				s += int(q.Q[i])
				if e := math.Abs(float64(x[i]) - float64(q.D[k])*float64(q.Q[i])); e > 0.5001*float64(q.D[k]) {
					t.Fatalf("value %d: %v quantized to %d·%v (off by %v)", i, x[i], q.Q[i], q.D[k], e)
				}
			}
			if int(q.BSums[k*16+g]) != s {
				t.Errorf("block %d group %d: BSums %d, want %d", k, g, q.BSums[k*16+g], s)
			}
		}
	}
	if q.D[1] != 0 || q.Q[300] != 0 {
		t.Errorf("zero block: D %v, Q %d", q.D[1], q.Q[300])
	}
	if q.Q[700] != -127 {
		t.Errorf("the largest magnitude: Q %d, want -127", q.Q[700])
	}
	p := &q.Q[0]
	q.Quantize(x[:256])
	if len(q.D) != 1 || &q.Q[0] != p {
		t.Errorf("a shorter vector: %d blocks, slice reused %v", len(q.D), &q.Q[0] == p)
	}
}
