package native

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestBF16Base: a LoRA model whose frozen base is stored in bfloat16
// computes, with bf16 products, exactly what the same model with a
// float32 base holding the rounded weights computes (the products round
// their inputs to bf16 either way): logits, values, loss and every
// trainable gradient, bit for bit, with and without recomputation.
// Decoding widens the stored weights and matches to float32 rounding.
func TestBF16Base(t *testing.T) {
	for _, tc := range loraCases() {
		t.Run(tc.name, func(t *testing.T) {
			half, err := NewWithOptions(tc.cfg, Options{LoRA: tc.lo, BaseStorage: MatmulBF16}, 1)
			if err != nil {
				t.Fatal(err)
			}
			full, err := NewWithOptions(tc.cfg, Options{LoRA: tc.lo, BaseStorage: MatmulFP32}, 1)
			if err != nil {
				t.Fatal(err)
			}
			if half.BaseStorage() != MatmulBF16 || full.BaseStorage() != MatmulFP32 || half.Matmul() != MatmulBF16 {
				t.Fatalf("storage %s / %s, half's matmul %s", half.BaseStorage(), full.BaseStorage(), half.Matmul())
			}
			if _, err := full.SetMatmul(MatmulBF16); err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(3, 4))
			for _, p := range half.Params() {
				v := make([]float32, p.Size())
				for i := range v {
					v[i] = float32(0.3 * r.NormFloat64())
					if strings.Contains(p.Name, "gain") {
						v[i]++
					}
				}
				if err := half.SetParam(p.Name, v); err != nil {
					t.Fatal(err)
				}
				if p.BF16 != nil {
					if p.Data != nil || p.Grad != nil || len(p.Shape) != 2 {
						t.Errorf("%s: stored in bf16 but has data %v, grad %v, shape %v", p.Name, p.Data != nil, p.Grad != nil, p.Shape)
					}
					for i := range v {
						v[i] = fromBF16(toBF16(v[i]))
					}
				}
				if err := full.SetParam(p.Name, v); err != nil {
					t.Fatal(err)
				}
			}
			if len(half.half) == 0 || len(half.frozen) >= len(full.frozen) || half.NumParams() != full.NumParams() {
				t.Fatalf("half stores %d bf16 and %d float32 frozen values, full %d", len(half.half), len(half.frozen), len(full.frozen))
			}
			rr := rand.New(rand.NewPCG(5, 6))
			b, heads := packTrees(60, true, []tree{randTrees(rr, 12, 20, 9, 14)}, []tree{randTrees(rr, 12, 15, 22)})
			idx := flatten(heads)
			targets := randTokens(rr, len(idx), tc.cfg.Vocab)
			forEachKernel(t, func(t *testing.T) {
				for _, rec := range []bool{false, true} {
					var out [2][]float32
					var loss [2]float64
					for i, m := range []*Model{half, full} {
						m.Recompute = rec
						heads := forwardHeads(t, m, b, idx)
						m.ZeroGrad()
						if err := m.Forward(b); err != nil {
							t.Fatal(err)
						}
						l, err := m.CrossEntropyBackward(idx, targets, nil)
						if err != nil {
							t.Fatal(err)
						}
						out[i], loss[i] = append(heads, m.grad...), l
					}
					if loss[0] != loss[1] {
						t.Errorf("recompute %v: loss %v with a bf16 base, %v with its rounded float32 copy", rec, loss[0], loss[1])
					}
					for i := range out[0] {
						if out[0][i] != out[1][i] {
							t.Fatalf("recompute %v: output %d: %v with a bf16 base, %v with its rounded float32 copy", rec, i, out[0][i], out[1][i])
						}
					}
				}
				seq := randTokens(rr, 15, tc.cfg.Vocab)
				if d := maxRelDiff(decodeLast(t, half, seq), toF64(decodeLast(t, full, seq)), 1); d > 1e-6 {
					t.Errorf("decoding with a bf16 base differs by %.2g", d)
				}
				one := newCache(t, half, 1, 40)
				half.PackWeights(one) // a bf16 base: packed panels for one row too
				got1, err := half.Extend(one, []int{0}, [][]int32{seq})
				if err != nil {
					t.Fatal(err)
				}
				if d := maxRelDiff(got1, toF64(decodeLast(t, full, seq)), 1); d > 1e-6 {
					t.Errorf("packed decoding of one row with a bf16 base differs by %.2g", d)
				}
				c := newCache(t, half, 10, 40)
				half.PackWeights(c)
				prompts := make([][]int32, 10)
				rows := make([]int, 10)
				for i := range prompts {
					rows[i], prompts[i] = i, seq[:5+i]
				}
				got, err := half.Extend(c, rows, prompts)
				if err != nil {
					t.Fatal(err)
				}
				for i, p := range prompts {
					want := decodeLast(t, full, p)
					if d := maxRelDiff(got[i*tc.cfg.Vocab:(i+1)*tc.cfg.Vocab], toF64(want), 1); d > 1e-6 {
						t.Errorf("packed decoding, row %d, differs by %.2g", i, d)
					}
				}
			})
		})
	}
}

// TestBaseStorageOptions: a base is stored in bfloat16 only when asked
// (the zero value is float32) and only when frozen (adapters, or
// Options.Frozen); "auto" is refused, for its caller to resolve, and so
// is an unknown storage.
func TestBaseStorageOptions(t *testing.T) {
	cfg := variantConfigs()[0].cfg
	lo := LoRAConfig{Rank: 1, Targets: []string{"q"}}
	for _, tc := range []struct {
		opt  Options
		want string // the storage, or the error's text
		err  bool
	}{
		{Options{BaseStorage: MatmulBF16}, "frozen base", true},
		{Options{LoRA: lo, BaseStorage: "fp8"}, "want fp32 or bf16", true},
		{Options{LoRA: lo, BaseStorage: "auto"}, "policy.ResolvePrecision", true},
		{Options{LoRA: lo}, MatmulFP32, false},
		{Options{LoRA: lo, BaseStorage: " BF16"}, MatmulBF16, false},
		{Options{Frozen: true, BaseStorage: MatmulBF16}, MatmulBF16, false},
		{Options{Frozen: true}, MatmulFP32, false},
		{Options{}, MatmulFP32, false},
	} {
		m, err := NewWithOptions(cfg, tc.opt, 1)
		switch {
		case tc.err && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: got %v, want an error containing %q", tc.opt, err, tc.want)
		case !tc.err && err != nil:
			t.Errorf("%+v: %v", tc.opt, err)
		case !tc.err && m.BaseStorage() != tc.want:
			t.Errorf("%+v: base stored in %s, want %s", tc.opt, m.BaseStorage(), tc.want)
		case !tc.err && m.Matmul() != tc.want:
			t.Errorf("%+v: products in %s, want %s (a bfloat16 base's products default to bf16)", tc.opt, m.Matmul(), tc.want)
		}
	}
}
