package native

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// allTargets adapts every dense layer of a block.
var allTargets = []string{"q", "k", "v", "o", "gate", "up", "down"}

// loraCases are the architectures the adapter tests run on: a SwiGLU
// family (every target) and mlerl's own model (its FFN's up and down).
func loraCases() []struct {
	name string
	cfg  Config
	lo   LoRAConfig
} {
	return []struct {
		name string
		cfg  Config
		lo   LoRAConfig
	}{
		{"llama", variantConfigs()[0].cfg, LoRAConfig{Rank: 2, Alpha: 3, Targets: allTargets}},
		{"qwen3", variantConfigs()[2].cfg, LoRAConfig{Rank: 3, Targets: []string{"q_proj", "v_proj", "down_proj"}}},
		{"mlerl", tinyConfig(), LoRAConfig{Rank: 2, Alpha: 4, Targets: []string{"q", "k", "v", "o", "up", "down"}}},
	}
}

// TestLoRAParams: adapters are listed after the base with PEFT's shapes
// in the model's layout (A [in, r], B [r, out]); the base is frozen (no
// gradient), adapters and the value head train, and A starts within
// ±1/sqrt(in), B at zero.
func TestLoRAParams(t *testing.T) {
	cfg := variantConfigs()[0].cfg
	m, err := NewWithOptions(cfg, Options{LoRA: LoRAConfig{Rank: 2, Targets: []string{"q", "down"}}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	trainable := 0
	names := map[string]Param{}
	for _, p := range m.Params() {
		names[p.Name] = p
		frozen := !strings.Contains(p.Name, "lora_") && !strings.Contains(p.Name, "value_head")
		if p.Trainable() == frozen {
			t.Errorf("%s: trainable %v", p.Name, p.Trainable())
		}
		if p.Trainable() {
			trainable += p.Size()
		}
	}
	if trainable != m.NumTrainable() {
		t.Errorf("trainable sizes sum to %d, NumTrainable %d", trainable, m.NumTrainable())
	}
	a, b := names["/block_1/q/lora_a"], names["/block_1/ffn_down/lora_b"]
	if len(a.Shape) != 2 || a.Shape[0] != 8 || a.Shape[1] != 2 || b.Shape[0] != 2 || b.Shape[1] != 8 {
		t.Fatalf("lora shapes %v, %v; want [8 2], [2 8]", a.Shape, b.Shape)
	}
	bound := float32(1 / math.Sqrt(8))
	nonzero := false
	for _, v := range a.Data {
		if v < -bound || v > bound {
			t.Errorf("A value %v outside ±%v", v, bound)
		}
		nonzero = nonzero || v != 0
	}
	for _, v := range b.Data {
		if v != 0 {
			t.Fatalf("B starts at %v, want 0", v)
		}
	}
	if !nonzero {
		t.Error("A is all zero")
	}
	if _, ok := names["/block_0/k/lora_a"]; ok {
		t.Error("k is adapted though not a target")
	}
	for _, tc := range []struct {
		lo  LoRAConfig
		err string
	}{
		{LoRAConfig{Rank: 2}, "no targets"},
		{LoRAConfig{Rank: 2, Targets: []string{"gate_proj"}}, ""},
		{LoRAConfig{Rank: 2, Targets: []string{"lm_head"}}, "lora target"},
		{LoRAConfig{Rank: 2, Targets: []string{"q"}, Dropout: 1}, "dropout"},
		{LoRAConfig{Rank: -1, Targets: []string{"q"}}, "rank"},
	} {
		_, err := NewWithOptions(cfg, Options{LoRA: tc.lo}, 1)
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%+v: got %v, want an error containing %q", tc.lo, err, tc.err)
		}
	}
	if _, err := NewWithOptions(tinyConfig(), Options{LoRA: LoRAConfig{Rank: 1, Targets: []string{"gate"}}}, 1); err == nil {
		t.Error("a gate adapter on a GELU FFN: got no error")
	}
}

// TestLoRAGradientsMatchFiniteDifferences: with the base frozen, the
// adapters' and the value head's gradients (B non-zero, so every term
// carries weight) match central differences of the reference, which also
// shows the input gradient flows through every frozen layer; with
// dropout on, the same holds for the mask the step drew. Float32
// arithmetic: the base is stored in float32 and the products are
// float32 (a bfloat16 base's arithmetic is TestBF16Base's).
func TestLoRAGradientsMatchFiniteDifferences(t *testing.T) {
	for _, tc := range loraCases() {
		for _, dropout := range []float64{0, 0.3} {
			name := tc.name
			if dropout > 0 {
				name += "/dropout"
			}
			t.Run(name, func(t *testing.T) {
				lo := tc.lo
				lo.Dropout = dropout
				m := newVariantModel(t, tc.cfg, Options{LoRA: lo, BaseStorage: MatmulFP32}, 3)
				if m.BaseStorage() != MatmulFP32 || m.Matmul() != MatmulFP32 {
					t.Fatalf("base %s, products %s; want fp32 and fp32", m.BaseStorage(), m.Matmul())
				}
				b := testBatch()
				r := rand.New(rand.NewPCG(7, 8))
				idx, targets, w, c := lossSetup(r, tc.cfg.Vocab)
				if err := m.Forward(b); err != nil { // the batch's compact rows, for the masks
					t.Fatal(err)
				}
				ref := newRef(m)
				if dropout > 0 {
					ref.drop = &refDropout{seed: m.seed, p: dropout, slot: append([]int32(nil), m.acts.slot...)}
				}
				var names []string
				for _, p := range m.Params() {
					if p.Trainable() {
						names = append(names, p.Name)
					}
				}
				forEachKernel(t, func(t *testing.T) {
					m.SetTraining(dropout > 0)
					if ref.drop != nil {
						ref.drop.step = m.forwards
					}
					want := fdGradients(ref, names, b, idx, targets, w, c)
					headGrads(t, m, b, idx, targets, w, c)
					m.SetTraining(false)
					for _, p := range m.Params() {
						if !p.Trainable() {
							continue
						}
						if d := maxRelDiff(p.Grad, want[p.Name], 1e-3); d > 2e-5 {
							t.Errorf("%s: gradient differs from finite differences by %.2g", p.Name, d)
						}
					}
				})
			})
		}
	}
}

// TestLoRAZeroBEqualsBase: fresh adapters (B = 0) change nothing, in
// every storage of the base (float32, bfloat16, quantized blocks) and
// precision of the products (and int8 inputs to the blocks): a LoRA model
// computes bit for bit what the same base without adapters computes
// (Options.Frozen: a base model in the LoRA model's storage) in Forward
// (logits and values), in the SFT loss and the value head's gradient,
// and in decoding (one row reading the weights in place, several rows
// through packed weights), on every kernel tier. The adapter adds
// (x·A)·0 = +0 to each output of its layer, which leaves every value as
// it is (-0 would become +0, but no product ends at -0: every sum starts
// from +0). A frozen float32 base also computes what the fully trainable
// model does.
func TestLoRAZeroBEqualsBase(t *testing.T) {
	for _, tc := range loraCases() {
		zeroBEqualsBase(t, tc.name, tc.cfg, tc.lo, []string{MatmulFP32, MatmulBF16})
	}
	// A base in quantized blocks (quant.go), on architectures whose
	// matrices' rows are whole blocks: the blocks copied as they are.
	for _, tc := range quantConfigs() {
		zeroBEqualsBase(t, tc.name, tc.cfg, tc.lo, quantStorages)
	}
}

// zeroBEqualsBase is TestLoRAZeroBEqualsBase for one architecture and
// adapter configuration, in each of the base storages given.
func zeroBEqualsBase(t *testing.T, name string, cfg Config, lo LoRAConfig, storages []string) {
	for _, storage := range storages {
		for _, matmul := range []string{MatmulFP32, MatmulBF16, ActivationsInt8} {
			if _, q := parseQuant(storage); matmul == ActivationsInt8 && !q {
				continue // int8 inputs are the quantized products' (with fp32 ones otherwise)
			}
			t.Run(name+"/base="+storage+"/matmul="+matmul, func(t *testing.T) {
				base := newVariantModel(t, cfg, Options{Frozen: true, BaseStorage: storage}, 5)
				m, err := NewWithOptions(cfg, Options{LoRA: lo, BaseStorage: storage}, 5)
				if err != nil {
					t.Fatal(err)
				}
				copyParams(t, m, base)
				models := []*Model{base, m}
				if storage == MatmulFP32 {
					full := newVariantModel(t, cfg, Options{}, 5)
					for _, p := range base.Params() {
						v, _ := base.ParamValues(p.Name)
						if err := full.SetParam(p.Name, v); err != nil {
							t.Fatal(err)
						}
					}
					models = append(models, full)
				}
				for _, x := range models {
					if matmul == ActivationsInt8 {
						if _, err := x.SetQuantActivations(ActivationsInt8); err != nil {
							t.Fatal(err)
						}
						continue
					}
					if _, err := x.SetMatmul(matmul); err != nil {
						t.Fatal(err)
					}
				}
				if base.BaseStorage() != storage || m.BaseStorage() != storage || base.NumTrainable() != cfgValueHead(cfg) {
					t.Fatalf("storage %s / %s, %d trainable values in the frozen base; want %s and the value head's %d",
						base.BaseStorage(), m.BaseStorage(), base.NumTrainable(), storage, cfgValueHead(cfg))
				}
				b := testBatch()
				idx := realPositions(b)
				targets := randTokens(rand.New(rand.NewPCG(3, 3)), len(idx), cfg.Vocab)
				seq := randTokens(rand.New(rand.NewPCG(9, 9)), 12, cfg.Vocab)
				forEachKernel(t, func(t *testing.T) {
					var outs [][]float32
					for _, x := range models {
						out := forwardHeads(t, x, b, idx)
						x.ZeroGrad()
						if err := x.Forward(b); err != nil {
							t.Fatal(err)
						}
						loss, err := x.CrossEntropyBackward(idx, targets, nil)
						if err != nil {
							t.Fatal(err)
						}
						out = append(out, float32(loss))
						for _, p := range x.Params() {
							if strings.HasPrefix(p.Name, "/value_head/") {
								out = append(out, p.Grad...)
							}
						}
						out = append(out, decodeLast(t, x, seq)...)
						out = append(out, decodeSteps(t, x, seq, 3)...) // one row, token by token
						c := newCache(t, x, 10, 40)
						x.PackWeights(c)
						prompts, rows := make([][]int32, 10), make([]int, 10)
						for i := range prompts {
							rows[i], prompts[i] = i, seq[:2+i]
						}
						out = append(out, extendCopy(t, x, c, rows, prompts)...)
						outs = append(outs, out)
					}
					for k, got := range outs[1:] {
						for i, w := range outs[0] {
							if math.Float32bits(got[i]) != math.Float32bits(w) {
								t.Fatalf("model %d: output %d: %v (bits %#x), the frozen base without adapters %v (bits %#x)",
									k+1, i, got[i], math.Float32bits(got[i]), w, math.Float32bits(w))
							}
						}
					}
				})
			})
		}
	}
}

// cfgValueHead is the value head's size: DModel weights and a bias.
func cfgValueHead(c Config) int { return c.DModel + 1 }

// forwardHeads returns a copy of the logits and then the values at idx.
func forwardHeads(t *testing.T, m *Model, b Batch, idx []int32) []float32 {
	t.Helper()
	if err := m.Forward(b); err != nil {
		t.Fatal(err)
	}
	l, v, err := m.Heads(idx)
	if err != nil {
		t.Fatal(err)
	}
	return append(append([]float32(nil), l...), v...)
}

// decodeLast prefills seq in a fresh cache and returns the logits after
// it.
func decodeLast(t *testing.T, m *Model, seq []int32) []float32 {
	t.Helper()
	c, err := m.NewCache(1, len(seq))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Extend(c, []int{0}, [][]int32{seq})
	if err != nil {
		t.Fatal(err)
	}
	return append([]float32(nil), l...)
}

// TestLoRAMerge: merging folds scale·A·B into each base weight (checked
// against a float64 product) and zeroes B. A float32 base holds W +
// scale·A·B to float32 rounding and the logits stay as they were (to
// float32 rounding). A bfloat16 base holds that sum rounded to nearest
// bfloat16: within half a bfloat16 step (bf16HalfStep) of the float64
// sum, plus the float32 rounding of the sum the merge computes first.
func TestLoRAMerge(t *testing.T) {
	for _, tc := range loraCases() {
		for _, storage := range []string{MatmulFP32, MatmulBF16} {
			t.Run(tc.name+"/base="+storage, func(t *testing.T) {
				m := newVariantModel(t, tc.cfg, Options{LoRA: tc.lo, BaseStorage: storage}, 6)
				if m.BaseStorage() != storage {
					t.Fatalf("base stored in %s, want %s", m.BaseStorage(), storage)
				}
				b := testBatch()
				idx := realPositions(b)
				before := forwardHeads(t, m, b, idx)
				name := "/block_1/v"
				w0, _ := m.ParamValues(name + "/dense/weights")
				a, _ := m.ParamValues(name + "/lora_a")
				bb, _ := m.ParamValues(name + "/lora_b")
				if err := m.MergeLoRA(); err != nil {
					t.Fatal(err)
				}
				if storage == MatmulFP32 {
					after := forwardHeads(t, m, b, idx)
					if d := maxRelDiff(after, toF64(before), 1); d > 2e-6 {
						t.Errorf("merged logits differ by %.2g", d)
					}
				}
				w1, _ := m.ParamValues(name + "/dense/weights")
				rank, out := tc.lo.Rank, len(bb)/tc.lo.Rank
				for i := range len(w0) / out {
					for j := range out {
						s, mag := 0.0, math.Abs(float64(w0[i*out+j]))
						for k := range rank {
							p := float64(m.lora.scale) * float64(a[i*rank+k]) * float64(bb[k*out+j])
							s += p
							mag += math.Abs(p)
						}
						want := float64(w0[i*out+j]) + s
						// Float32 products and sums of rank+1 terms: at
						// most (rank+1)·2⁻²⁴ of their magnitudes.
						tol := float64(rank+1) * 0x1p-24 * mag
						if storage == MatmulBF16 {
							tol += bf16HalfStep(math.Abs(want) + tol) // rounding the float32 sum, within tol of want
						}
						if d := math.Abs(float64(w1[i*out+j]) - want); d > tol {
							t.Fatalf("merged weight (%d, %d) is %v, W + scale·A·B is %v: off by %.3g, allowed %.3g", i, j, w1[i*out+j], want, d, tol)
						}
					}
				}
				bb, _ = m.ParamValues(name + "/lora_b")
				for _, v := range bb {
					if v != 0 {
						t.Fatal("B not zero after merging")
					}
				}
			})
		}
	}
}

// TestLoRADropout: dropout acts only in training Forwards: with training
// off (and in decoding) a model with dropout computes what one without
// computes, bit for bit; with it on, each Forward draws a new mask.
func TestLoRADropout(t *testing.T) {
	tc := loraCases()[0]
	lo := tc.lo
	plain := newVariantModel(t, tc.cfg, Options{LoRA: lo}, 8)
	lo.Dropout = 0.5
	m := newVariantModel(t, tc.cfg, Options{LoRA: lo}, 8)
	b := testBatch()
	idx := realPositions(b)
	want := forwardHeads(t, plain, b, idx)
	same := func(x, y []float32) bool {
		for i := range x {
			if x[i] != y[i] {
				return false
			}
		}
		return true
	}
	if !same(forwardHeads(t, m, b, idx), want) {
		t.Error("dropout acted with training off")
	}
	seq := randTokens(rand.New(rand.NewPCG(1, 1)), 10, tc.cfg.Vocab)
	if !same(decodeLast(t, m, seq), decodeLast(t, plain, seq)) {
		t.Error("dropout acted in decoding")
	}
	m.SetTraining(true)
	t1, t2 := forwardHeads(t, m, b, idx), forwardHeads(t, m, b, idx)
	if m.DropoutStep() != 2 {
		t.Errorf("dropout step %d after two training Forwards", m.DropoutStep())
	}
	m.SetDropoutStep(1) // a resumed run: the second step's masks again
	if !same(forwardHeads(t, m, b, idx), t2) {
		t.Error("SetDropoutStep(1) does not draw the second Forward's masks")
	}
	m.SetTraining(false)
	if same(t1, want) || same(t1, t2) {
		t.Errorf("training Forwards: same as eval %v, same as each other %v; want neither", same(t1, want), same(t1, t2))
	}
	if !same(forwardHeads(t, m, b, idx), want) {
		t.Error("eval after training differs")
	}
}

// TestLoRATrainsOnlyAdapters: AdamW holds moments for the adapters and
// the value head only, and a step moves them while the frozen base keeps
// every bit.
func TestLoRATrainsOnlyAdapters(t *testing.T) {
	tc := loraCases()[0]
	m := newVariantModel(t, tc.cfg, Options{LoRA: tc.lo}, 9)
	opt := NewAdamW(m, DefaultAdamWConfig())
	for _, s := range opt.State() {
		if !strings.Contains(s.Name, "lora_") && !strings.Contains(s.Name, "value_head") && s.Name != "/native_adamw/step" {
			t.Errorf("optimiser state for %s", s.Name)
		}
	}
	frozen := append([]float32(nil), m.frozen...)
	adapters := append([]float32(nil), m.data...)
	b := testBatch()
	idx := realPositions(b)
	m.ZeroGrad()
	if err := m.Forward(b); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CrossEntropyBackward(idx, make([]int32, len(idx)), nil); err != nil {
		t.Fatal(err)
	}
	opt.Step(m, 1e-2)
	for i := range frozen {
		if m.frozen[i] != frozen[i] {
			t.Fatalf("frozen value %d moved", i)
		}
	}
	moved := 0
	for i := range adapters {
		if m.data[i] != adapters[i] {
			moved++
		}
	}
	if moved < len(adapters)/2 {
		t.Errorf("%d of %d trainable values moved", moved, len(adapters))
	}
}

// TestRecomputeSameGradients: recomputing each block's activations in
// the backward pass gives the same logits, loss and gradients as keeping
// them, bit for bit (the recomputation runs the same kernels on the same
// inputs, dropout masks included), for mlerl's model, the families, LoRA
// with dropout and shared prompts.
func TestRecomputeSameGradients(t *testing.T) {
	type run struct {
		name string
		cfg  Config
		opt  Options
	}
	runs := []run{{"mlerl", tinyConfig(), Options{}}}
	for _, v := range variantConfigs() {
		runs = append(runs, run{v.name, v.cfg, Options{}})
	}
	for _, l := range loraCases() {
		lo := l.lo
		lo.Dropout = 0.2
		runs = append(runs, run{"lora-" + l.name, l.cfg, Options{LoRA: lo}})
	}
	for _, tc := range runs {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(50, 51))
			b, heads := packTrees(40, true, []tree{randTrees(r, 12, 9, 4, 6)}, []tree{randTrees(r, 12, 5, 3), randTrees(r, 12, 7, 8)})
			idx := flatten(heads)
			targets := randTokens(r, len(idx), tc.cfg.Vocab)
			forEachKernel(t, func(t *testing.T) {
				for _, mode := range []string{MatmulFP32, MatmulBF16} {
					recomputeSame(t, tc.cfg, tc.opt, mode, b, idx, targets)
				}
			})
		})
	}
}

// recomputeSame compares one step with and without recomputation.
func recomputeSame(t *testing.T, cfg Config, opt Options, mode string, b Batch, idx, targets []int32) {
	t.Helper()
	var grads [2][]float32
	var losses [2]float64
	for i, rec := range []bool{false, true} {
		m := newVariantModel(t, cfg, opt, 52)
		if _, err := m.SetMatmul(mode); err != nil {
			t.Fatal(err)
		}
		m.Recompute = rec
		m.SetTraining(true)
		m.ZeroGrad()
		if err := m.Forward(b); err != nil {
			t.Fatal(err)
		}
		loss, err := m.CrossEntropyBackward(idx, targets, nil)
		if err != nil {
			t.Fatal(err)
		}
		grads[i], losses[i] = append([]float32(nil), m.grad...), loss
		if rec && len(m.acts.blocks) != 1 {
			t.Errorf("recompute kept %d blocks' activations", len(m.acts.blocks))
		}
	}
	if losses[0] != losses[1] {
		t.Errorf("%s: loss %v kept, %v recomputed", mode, losses[0], losses[1])
	}
	for i := range grads[0] {
		if grads[0][i] != grads[1][i] {
			t.Fatalf("%s: gradient %d: %v kept, %v recomputed", mode, i, grads[0][i], grads[1][i])
		}
	}
}

// TestDropoutMask: dropout's mask is dropped's and a kept value is
// x*(1/(1-p)), element by element and bit for bit, whatever the chunk
// boundaries and row widths (the vector loop's blocks of 32 start
// anywhere a draw starts), in place too; and it drops about p of the
// values.
func TestDropoutMask(t *testing.T) {
	const n, p = 300, 0.3
	r := rand.New(rand.NewPCG(9, 10))
	keep := float32(1 / (1 - p))
	for _, in := range []int{37, 64, 1, 33} {
		x := make([]float32, n*in)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		xd := make([]float32, n*in)
		dropout(workers(), xd, x, 12345, p, n, in)
		inPlace := append([]float32(nil), x...)
		dropout(workers(), inPlace, inPlace, 12345, p, n, in)
		drops := 0
		for i, v := range xd {
			want := x[i] * keep
			if dropped(12345, i, dropThreshold(p)) {
				want = 0
				drops++
			}
			if math.Float32bits(v) != math.Float32bits(want) || math.Float32bits(inPlace[i]) != math.Float32bits(want) {
				t.Fatalf("in %d, element %d: %v (in place %v), want %v", in, i, v, inPlace[i], want)
			}
		}
		if frac := float64(drops) / float64(n*in); math.Abs(frac-p) > 0.02 {
			t.Errorf("in %d: dropped %.3f of the values, want about %.1f", in, frac, p)
		}
	}
}
