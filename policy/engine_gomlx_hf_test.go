package policy

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/gomlx/core/graph"

	"github.com/mlerl/mlerl/policy/native"
)

// The architecture engine (engine_gomlx_hf.go) against native.Model: the
// same function on tiny shapes of each family, with and without adapters.

// archVariants are tiny shapes of the Hugging Face families (as
// policy/native's variants_test.go has them), and one with LayerNorm and
// the GELU FFN under grouped-query attention, to show the fields are
// independent. Each has heads of another width than DModel/Heads or
// fewer key/value heads than query heads.
func archVariants() []struct {
	name string
	cfg  native.Config
} {
	return []struct {
		name string
		cfg  native.Config
	}{
		// Llama 3 / SmolLM2: RMSNorm, SwiGLU, GQA, no biases, tied,
		// rescaled RoPE frequencies (an InvFreq table).
		{"llama", native.Config{Vocab: 29, DModel: 16, Heads: 4, KVHeads: 2, HeadSize: 4, Layers: 2, FFN: 24, Ctx: 40,
			Norm: native.NormRMS, NormEps: 1e-5, FFNKind: native.FFNSwiGLU, NoQKVBias: true, NoOutBias: true, NoFFNBias: true,
			NoLMBias: true, TiedEmbed: true, InvFreq: []float64{0.9, 0.07}}},
		// Qwen2.5: q, k, v biases; one key/value head; an untied head
		// without bias.
		{"qwen2", native.Config{Vocab: 29, DModel: 16, Heads: 4, KVHeads: 1, HeadSize: 4, Layers: 2, FFN: 24, Ctx: 40, RoPEBase: 1e6,
			Norm: native.NormRMS, FFNKind: native.FFNSwiGLU, NoOutBias: true, NoFFNBias: true, NoLMBias: true}},
		// Qwen3: q/k norm, no biases, tied, heads wider than D/H.
		{"qwen3", native.Config{Vocab: 29, DModel: 16, Heads: 2, KVHeads: 1, HeadSize: 12, Layers: 2, FFN: 24, Ctx: 40, RoPEBase: 1e6,
			Norm: native.NormRMS, FFNKind: native.FFNSwiGLU, NoQKVBias: true, NoOutBias: true, NoFFNBias: true, NoLMBias: true,
			QKNorm: true, TiedEmbed: true}},
		// LayerNorm, GELU and every bias (mlerl's blocks) with GQA and a
		// tied head.
		{"gelu-gqa", native.Config{Vocab: 29, DModel: 16, Heads: 4, KVHeads: 2, Layers: 2, FFN: 24, Ctx: 40, TiedEmbed: true}},
	}
}

// testBackend is one backend for every engine of these tests: on a GPU
// (scripts/gpu_check.sh) one PJRT client instead of one per engine.
func testBackend(t testing.TB) compute.Backend {
	t.Helper()
	sharedBackend.once.Do(func() { sharedBackend.b, sharedBackend.err = NewBackend() })
	if sharedBackend.err != nil {
		t.Fatal(sharedBackend.err)
	}
	return sharedBackend.b
}

var sharedBackend struct {
	once sync.Once
	b    compute.Backend
	err  error
}

// archLoRA is rank-3 adapters on every target of cfg's FFN kind (alpha
// 6: scale 2).
func archLoRA(cfg native.Config) native.LoRAConfig {
	targets := []string{"q", "k_proj", "v", "o", "gate", "up", "down"}
	if cfg.FFNKind != native.FFNSwiGLU {
		targets = []string{"q", "k_proj", "v", "o", "up", "down"}
	}
	return native.LoRAConfig{Rank: 3, Alpha: 6, Targets: targets}
}

// archPair returns a native model and a GoMLX engine on the same weights:
// every parameter N(0, 0.3²) (norm gains 1 + N(0, 0.3²)), the adapters'
// B too, so that every adapter changes the function.
func archPair(t testing.TB, cfg native.Config, lo native.LoRAConfig, seed uint64) (*native.Model, *gomlxEngine) {
	t.Helper()
	m, err := native.NewWithOptions(cfg, native.Options{LoRA: lo, BaseStorage: native.MatmulFP32}, seed)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, 99))
	var ws []Tensor
	for _, p := range m.Params() {
		v := make([]float32, p.Size())
		for i := range v {
			v[i] = float32(0.3 * r.NormFloat64())
			if strings.Contains(p.Name, "gain") {
				v[i]++
			}
		}
		if err := m.SetParam(p.Name, v); err != nil {
			t.Fatal(err)
		}
		ws = append(ws, Tensor{Name: p.Name, Shape: p.Shape, F32: v})
	}
	e, err := NewGomlxEngineArch(cfg, lo, GomlxArchOptions{Backend: testBackend(t), Weights: ws, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	return m, e.(*gomlxEngine)
}

// nativeHeads runs m on b and returns copies of its logits and values at idx.
func nativeHeads(t testing.TB, m *native.Model, b Batch, idx []int32) (logits, values []float32) {
	t.Helper()
	if err := m.Forward(nativeBatch(b)); err != nil {
		t.Fatal(err)
	}
	l, v, err := m.Heads(idx)
	if err != nil {
		t.Fatal(err)
	}
	return slices.Clone(l), slices.Clone(v)
}

// nativeGrads is Engine.Gradients on m: the loss and the gradient of
// every trainable parameter, in Params order.
func nativeGrads(t testing.TB, m *native.Model, b Batch, idx []int32, loss LossFunc) (float64, []Tensor) {
	t.Helper()
	m.ZeroGrad()
	logits, values := nativeHeads(t, m, b, idx)
	dl, dv := make([]float32, len(logits)), make([]float32, len(values))
	l := loss(logits, values, dl, dv)
	if err := m.Backward(idx, dl, dv); err != nil {
		t.Fatal(err)
	}
	return l, trainableGrads(m)
}

// trainableGrads copies m's gradients of its trainable parameters.
func trainableGrads(m *native.Model) []Tensor {
	var out []Tensor
	for _, p := range m.Params() {
		if p.Trainable() {
			out = append(out, Tensor{Name: p.Name, Shape: p.Shape, F32: slices.Clone(p.Grad)})
		}
	}
	return out
}

// sftLoss is SFT's loss on the host: the weighted mean negative
// log-likelihood of targets (native.Model.CrossEntropy's), no value loss;
// the log-softmax in float32 by native's kernel, as train's loss does.
func sftLoss(targets []int32, weights []float32, vocab int) LossFunc {
	return func(logits, _, dLogits, _ []float32) float64 {
		copy(dLogits, logits)
		native.LogSoftmaxRows(dLogits, vocab)
		wsum := 0.0
		for _, w := range weights {
			wsum += float64(w)
		}
		loss := 0.0
		for i, tg := range targets {
			row := dLogits[i*vocab : (i+1)*vocab]
			w := float64(weights[i]) / wsum
			loss -= w * float64(row[tg])
			for j, lp := range row {
				row[j] = float32(w * math.Exp(float64(lp)))
			}
			row[tg] -= float32(w)
		}
		return loss
	}
}

// archBatches is a packed batch (two examples in row 0, one with padding
// in row 1) with SFT targets and weights at its heads, and actions
// sharing prompts (Batch.Prefix) with a loss on both heads.
func archBatches(cfg native.Config, seed uint64) (packed Batch, pidx, targets []int32, weights []float32, shared Batch, sidx []int32, loss LossFunc) {
	pc := Config{Vocab: cfg.Vocab, Ctx: cfg.Ctx}
	r := rand.New(rand.NewPCG(seed, 17))
	packed, pidx = packedRows(pc, r, 14, [][]int{{6, 8}, {11}})
	targets = make([]int32, len(pidx))
	weights = make([]float32, len(pidx))
	for i := range targets {
		targets[i] = int32(r.IntN(cfg.Vocab))
		weights[i] = float32(r.IntN(3)) // 0 (a prompt token), 1 or 2
	}
	weights[0] = 1
	shared, _, sidx, _, st, sr := prefixBatches(pc, seed)
	return packed, pidx, targets, weights, shared, sidx, testLoss(st, sr, cfg.Vocab)
}

// TestGomlxArchResolvesAsNative: the architecture engine fills in
// native.Config's defaults as native does, and lists native's parameters
// (names, shapes, order, which train), for every family, with and
// without adapters and a bfloat16 base.
func TestGomlxArchResolvesAsNative(t *testing.T) {
	for _, v := range archVariants() {
		for _, lo := range []native.LoRAConfig{{}, archLoRA(v.cfg)} {
			t.Run(v.name+map[bool]string{true: "/lora", false: "/full"}[lo.Rank > 0], func(t *testing.T) {
				m, err := native.NewWithOptions(v.cfg, native.Options{LoRA: lo}, 1)
				if err != nil {
					t.Fatal(err)
				}
				storage := ""
				if lo.Rank > 0 {
					storage = native.MatmulBF16
				}
				e, err := NewGomlxEngineArch(v.cfg, lo, GomlxArchOptions{Backend: testBackend(t), BaseStorage: storage})
				if err != nil {
					t.Fatal(err)
				}
				ae := e.(GomlxArchEngine)
				if got := ae.ArchConfig(); !reflect.DeepEqual(got, m.Config) {
					t.Errorf("resolved config\n got %+v\nwant %+v", got, m.Config)
				}
				want := m.Params()
				got := ae.ArchParams()
				if len(got) != len(want) {
					t.Fatalf("%d parameters, native has %d", len(got), len(want))
				}
				for i, p := range want {
					g := got[i]
					if g.Name != p.Name || !slices.Equal(g.Shape, p.Shape) || g.Trainable != p.Trainable() {
						t.Errorf("parameter %d: %s %v trainable %v; native's %s %v trainable %v", i, g.Name, g.Shape, g.Trainable, p.Name, p.Shape, p.Trainable())
					}
					if wantBF16 := storage != "" && !p.Trainable() && len(p.Shape) == 2; g.BF16 != wantBF16 {
						t.Errorf("%s: stored in bfloat16 %v, want %v", g.Name, g.BF16, wantBF16)
					}
				}
			})
		}
	}
}

// TestGomlxArchAgreesWithNative: on the same weights and batches the
// GoMLX engine and native.Model give the same logits and values (packed
// examples; actions sharing a prompt), the same SFT loss and gradient of
// every trainable weight, and the same loss and gradients of a loss on
// both heads; every family, full fine-tuning and LoRA on every target.
func TestGomlxArchAgreesWithNative(t *testing.T) {
	// Relative to the largest |value| of each tensor; measured on the CPU
	// (pure-Go backend): at most 2.3e-6 and 8.6e-6. The margin is for the
	// GPU's other summation orders (scripts/gpu_check.sh runs this there).
	const tolOut, tolGrad = 2e-5, 1e-4
	for _, v := range archVariants() {
		for _, lo := range []native.LoRAConfig{{}, archLoRA(v.cfg)} {
			t.Run(v.name+map[bool]string{true: "/lora", false: "/full"}[lo.Rank > 0], func(t *testing.T) {
				m, e := archPair(t, v.cfg, lo, 3)
				packed, pidx, targets, weights, shared, sidx, loss := archBatches(v.cfg, 5)
				worstOut, worstGrad := 0.0, 0.0
				for _, tc := range []struct {
					name string
					b    Batch
					idx  []int32
				}{{"packed", packed, pidx}, {"shared prefix", shared, sidx}} {
					nl, nv := nativeHeads(t, m, tc.b, tc.idx)
					gl, gv, err := e.Logits(tc.b, tc.idx)
					if err != nil {
						t.Fatal(err)
					}
					for what, d := range map[string]float64{"logits": relErr(gl, nl), "values": relErr(gv, nv)} {
						worstOut = max(worstOut, d)
						if d > tolOut {
							t.Errorf("%s: %s differ: relative %.2g", tc.name, what, d)
						}
					}
				}
				// SFT: native's fused cross-entropy against the host loss.
				m.ZeroGrad()
				if err := m.Forward(nativeBatch(packed)); err != nil {
					t.Fatal(err)
				}
				nLoss, err := m.CrossEntropyBackward(pidx, targets, weights)
				if err != nil {
					t.Fatal(err)
				}
				type gradCase struct {
					name   string
					nLoss  float64
					nGrads []Tensor
					b      Batch
					idx    []int32
					loss   LossFunc
					values bool // the loss reads the value head
				}
				cases := []gradCase{{"sft", nLoss, trainableGrads(m), packed, pidx, sftLoss(targets, weights, v.cfg.Vocab), false}}
				l2, g2 := nativeGrads(t, m, shared, sidx, loss)
				cases = append(cases, gradCase{"both heads, shared prefix", l2, g2, shared, sidx, loss, true})
				for _, tc := range cases {
					gLoss, gGrads, err := e.Gradients(tc.b, tc.idx, tc.loss)
					if err != nil {
						t.Fatal(err)
					}
					if math.Abs(gLoss-tc.nLoss) > 1e-5*math.Abs(tc.nLoss) {
						t.Errorf("%s: loss native %.7g, gomlx %.7g", tc.name, tc.nLoss, gLoss)
					}
					if len(gGrads) != len(tc.nGrads) {
						t.Fatalf("%s: %d gradients, native has %d", tc.name, len(gGrads), len(tc.nGrads))
					}
					for i, ng := range tc.nGrads {
						gg := gGrads[i]
						if gg.Name != ng.Name || !slices.Equal(gg.Shape, ng.Shape) {
							t.Fatalf("%s: gradient %d is %s %v, native's %s %v", tc.name, i, gg.Name, gg.Shape, ng.Name, ng.Shape)
						}
						if strings.HasPrefix(ng.Name, "/value_head/") && !tc.values {
							continue // zero on both sides: no relative error to take
						}
						d := relErr(gg.F32, ng.F32)
						worstGrad = max(worstGrad, d)
						if d > tolGrad {
							t.Errorf("%s: gradient of %s differs: relative %.2g", tc.name, ng.Name, d)
						}
					}
				}
				t.Logf("worst relative difference: outputs %.2g, gradients %.2g", worstOut, worstGrad)
			})
		}
	}
}

// lastLogits is the logits after seq, by a full forward pass.
func lastLogits(t testing.TB, e Engine, seq []int32) []float32 {
	t.Helper()
	n := len(seq)
	b := Batch{B: 1, S: n, Tokens: seq, Positions: make([]int32, n), Segments: make([]int32, n)}
	for i := range n {
		b.Positions[i], b.Segments[i] = int32(i), 1
	}
	l, _, err := e.Logits(b, []int32{int32(n - 1)})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestGomlxArchDecoder: the decoder's logits (prefill with a repeated
// prompt computed once, then one-token and multi-token extends, some rows
// idle) equal full forward passes over the same sequences, for every
// family with adapters (the cache holds KVHeads x HeadSize per token).
func TestGomlxArchDecoder(t *testing.T) {
	for _, v := range archVariants() {
		t.Run(v.name, func(t *testing.T) {
			_, e := archPair(t, v.cfg, archLoRA(v.cfg), 7)
			vocab := v.cfg.Vocab
			seqs := [][]int32{{3, 5, 7, 11, 2}, {3, 5, 7, 11, 2}, {1, 4, 9, 16, 25, 6, 13, 28, 0}}
			d, err := e.NewDecoder(len(seqs))
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			check := func(step string, logits []float32, rows ...int) {
				t.Helper()
				for _, r := range rows {
					want := lastLogits(t, e, seqs[r])
					if diff := relErr(logits[r*vocab:(r+1)*vocab], want); diff > 2e-5 {
						t.Errorf("%s, row %d: decoder logits differ from a full forward pass (relative %.2g)", step, r, diff)
					}
				}
			}
			logits, err := d.Prefill(slices.Clone(seqs))
			if err != nil {
				t.Fatal(err)
			}
			check("prefill", logits, 0, 1, 2)
			for i, ext := range [][][]int32{{{8}, {17, 4}, nil}, {{1, 2, 3}, nil, {27}}, {{5}, {6}, {7}}} {
				for r, toks := range ext {
					seqs[r] = append(seqs[r], toks...)
				}
				logits, err := d.Extend(ext)
				if err != nil {
					t.Fatal(err)
				}
				var rows []int
				for r, toks := range ext {
					if len(toks) > 0 {
						rows = append(rows, r)
					}
				}
				check("extend "+string(rune('1'+i)), logits, rows...)
			}
		})
	}
}

// TestGomlxArchWeightsRoundTrip: Weights gives native's names, shapes
// and order and the values it was given; they load back (and into a
// native model, which then computes the same logits); a missing or
// misshapen weight is refused, naming it.
func TestGomlxArchWeightsRoundTrip(t *testing.T) {
	v := archVariants()[2] // qwen3: q/k norms and a tied head
	m, e := archPair(t, v.cfg, archLoRA(v.cfg), 11)
	ws, err := e.Weights()
	if err != nil {
		t.Fatal(err)
	}
	ps := m.Params()
	if len(ws) != len(ps) {
		t.Fatalf("%d weights, native has %d", len(ws), len(ps))
	}
	for i, p := range ps {
		if ws[i].Name != p.Name || !slices.Equal(ws[i].Shape, p.Shape) || !slices.Equal(ws[i].F32, p.Data) {
			t.Errorf("weight %d: %s %v is not native's %s %v with its values", i, ws[i].Name, ws[i].Shape, p.Name, p.Shape)
		}
	}
	// Into a fresh native model (another seed): the same function.
	m2, err := native.NewWithOptions(v.cfg, native.Options{LoRA: archLoRA(v.cfg), BaseStorage: native.MatmulFP32}, 99)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if err := m2.SetParam(w.Name, w.F32); err != nil {
			t.Fatal(err)
		}
	}
	packed, pidx, _, _, _, _, _ := archBatches(v.cfg, 1)
	want, _ := nativeHeads(t, m, packed, pidx)
	got, _ := nativeHeads(t, m2, packed, pidx)
	if !slices.Equal(got, want) {
		t.Error("a native model loaded with the GoMLX engine's weights computes other logits")
	}
	// Back into the engine, changed: Weights returns what was set.
	for i := range ws {
		for j := range ws[i].F32 {
			ws[i].F32[j] *= 0.5
		}
	}
	if err := e.SetWeights(ws); err != nil {
		t.Fatal(err)
	}
	again, err := e.Weights()
	if err != nil {
		t.Fatal(err)
	}
	for i := range ws {
		if !slices.Equal(again[i].F32, ws[i].F32) {
			t.Errorf("%s: Weights after SetWeights differs from what was set", ws[i].Name)
		}
	}
	for _, tc := range []struct {
		name string
		edit func([]Tensor) []Tensor
		want string
	}{
		{"missing", func(ws []Tensor) []Tensor { return ws[1:] }, "/token_embed/embeddings missing"},
		{"misshapen", func(ws []Tensor) []Tensor {
			ws[len(ws)-1].Shape = []int{1, 1}
			return ws
		}, "lora_b has shape [1 1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := tc.edit(slices.Clone(ws))
			if err := e.SetWeights(bad); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("SetWeights: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestGomlxArchInitialWeights: without weights the engine starts from the
// model native.NewWithOptions draws for the same seed (adapters' B zero:
// the base's function).
func TestGomlxArchInitialWeights(t *testing.T) {
	v := archVariants()[1]
	lo := archLoRA(v.cfg)
	m, err := native.NewWithOptions(v.cfg, native.Options{LoRA: lo, BaseStorage: native.MatmulFP32}, 42)
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewGomlxEngineArch(v.cfg, lo, GomlxArchOptions{Backend: testBackend(t), Seed: 42})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := e.Weights()
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range m.Params() {
		if ws[i].Name != p.Name || !slices.Equal(ws[i].F32, p.Data) {
			t.Errorf("%s: initial weights differ from native's for the same seed", p.Name)
		}
	}
}

// TestGomlxArchLoRATrains: LoRA training steps on both engines from the
// same weights follow the same loss curve; the GoMLX engine's base does
// not move (bit for bit) while its adapters do, and its optimiser keeps
// moments only for the adapters and the value head.
func TestGomlxArchLoRATrains(t *testing.T) {
	v := archVariants()[1]
	m, e := archPair(t, v.cfg, archLoRA(v.cfg), 13)
	packed, pidx, targets, weights, _, _, _ := archBatches(v.cfg, 2)
	loss := sftLoss(targets, weights, v.cfg.Vocab)
	o := OptimConfig{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, WeightDecay: 0.01, ClipNorm: 1}
	e.SetOptim(o)
	opt := native.NewAdamW(m, native.AdamWConfig{Beta1: o.Beta1, Beta2: o.Beta2, Eps: 1e-8, WeightDecay: o.WeightDecay, ClipNorm: o.ClipNorm})
	before, err := e.Weights()
	if err != nil {
		t.Fatal(err)
	}
	var nCurve, gCurve []float64
	for range 6 {
		m.ZeroGrad()
		if err := m.Forward(nativeBatch(packed)); err != nil {
			t.Fatal(err)
		}
		nl, err := m.CrossEntropyBackward(pidx, targets, weights)
		if err != nil {
			t.Fatal(err)
		}
		nNorm := opt.Step(m, o.LR)
		gl, gNorm, err := e.TrainStep(packed, pidx, loss, o.LR)
		if err != nil {
			t.Fatal(err)
		}
		// The first step's gradients are the same function's; after it,
		// Adam's early, nearly sign-sized updates amplify float32
		// rounding differences (0.2% in the norm by step 5 here).
		tol := 1e-5
		if len(nCurve) > 0 {
			tol = 1e-2
		}
		if math.Abs(nNorm-gNorm) > tol*nNorm {
			t.Errorf("step %d: gradient norm native %.6g, gomlx %.6g", len(nCurve), nNorm, gNorm)
		}
		nCurve, gCurve = append(nCurve, nl), append(gCurve, gl)
	}
	for i := range nCurve {
		if math.Abs(nCurve[i]-gCurve[i]) > 1e-3*nCurve[i] {
			t.Errorf("step %d: loss native %.6f, gomlx %.6f", i, nCurve[i], gCurve[i])
		}
	}
	if gCurve[len(gCurve)-1] > 0.9*gCurve[0] {
		t.Errorf("the loss did not fall: %v", gCurve)
	}
	after, err := e.Weights()
	if err != nil {
		t.Fatal(err)
	}
	trainable := map[string]bool{}
	for _, p := range e.ArchParams() {
		trainable[p.Name] = p.Trainable
	}
	for i := range before {
		same := slices.Equal(before[i].F32, after[i].F32)
		switch name := before[i].Name; {
		case !trainable[name] && !same:
			t.Errorf("frozen %s changed", name)
		case strings.HasSuffix(name, "lora_a") || strings.HasSuffix(name, "lora_b"):
			if same {
				t.Errorf("adapter %s did not change", name)
			}
		}
	}
	state, err := e.OptimizerState()
	if err != nil {
		t.Fatal(err)
	}
	moments := 0
	for _, s := range state {
		if !strings.Contains(s.Name, "_moment") {
			continue
		}
		moments++
		if !strings.Contains(s.Name, "lora_") && !strings.Contains(s.Name, "/value_head/") {
			t.Errorf("optimiser state %s belongs to a frozen weight", s.Name)
		}
	}
	want := 0
	for _, p := range e.ArchParams() {
		if p.Trainable {
			want += 2
		}
	}
	if moments != want {
		t.Errorf("%d moment tensors, want %d (two per trainable tensor)", moments, want)
	}
}

// TestGomlxArchDropout: adapters' dropout acts in training steps only:
// Logits and Gradients equal the engine's without dropout; a gradient
// with masks (gradients with an RNG state) is the derivative of the loss
// under the same masks (central differences), masks follow the state,
// and TrainStep's loss is the dropped-out one.
func TestGomlxArchDropout(t *testing.T) {
	v := archVariants()[1]
	lo := archLoRA(v.cfg)
	_, plain := archPair(t, v.cfg, lo, 17)
	lo.Dropout = 0.3
	_, e := archPair(t, v.cfg, lo, 17)
	packed, pidx, targets, weights, _, _, _ := archBatches(v.cfg, 3)
	loss := sftLoss(targets, weights, v.cfg.Vocab)
	want, _, err := plain.Logits(packed, pidx)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := e.Logits(packed, pidx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Error("Logits with dropout configured differ from Logits without: evaluation must not drop")
	}
	plainLoss, _, err := plain.Gradients(packed, pidx, loss)
	if err != nil {
		t.Fatal(err)
	}
	rng, err := e.dropoutState()
	if err != nil {
		t.Fatal(err)
	}
	lossAt := func(rngSeed int64) float64 {
		t.Helper()
		st, err := graph.RNGStateFromSeed(rngSeed)
		if err != nil {
			t.Fatal(err)
		}
		l, _, err := e.gradients(packed, pidx, loss, st)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	dropLoss, grads, err := e.gradients(packed, pidx, loss, rng)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(dropLoss-plainLoss) < 1e-4*plainLoss {
		t.Errorf("the loss with dropout masks %.6f is the loss without %.6f", dropLoss, plainLoss)
	}
	if a, b := lossAt(1), lossAt(1); a != b {
		t.Errorf("the same RNG state gives losses %.7f and %.7f", a, b)
	}
	if a, b := lossAt(1), lossAt(2); a == b {
		t.Errorf("two RNG states give the same loss %.7f", a)
	}
	// Central differences on a few entries of two adapters, masks fixed.
	ws, err := e.Weights()
	if err != nil {
		t.Fatal(err)
	}
	gradOf := map[string][]float32{}
	for _, g := range grads {
		gradOf[g.Name] = g.F32
	}
	for i, w := range ws {
		if w.Name != "/block_0/q/lora_a" && w.Name != "/block_1/ffn_down/lora_b" {
			continue
		}
		for _, j := range []int{0, len(w.F32) / 2, len(w.F32) - 1} {
			const h = 1e-3 // 1e-2 is past the loss's curvature here
			x := w.F32[j]
			fd := 0.0
			for _, s := range []float64{1, -1} {
				ws[i].F32[j] = x + float32(s*h)
				if err := e.SetWeights(ws); err != nil {
					t.Fatal(err)
				}
				l, _, err := e.gradients(packed, pidx, loss, rng)
				if err != nil {
					t.Fatal(err)
				}
				fd += s * l / (2 * h)
			}
			ws[i].F32[j] = x
			g := float64(gradOf[w.Name][j])
			if math.Abs(fd-g) > 1e-3+1e-2*math.Abs(g) {
				t.Errorf("%s[%d]: gradient %.6g, central difference %.6g", w.Name, j, g, fd)
			}
		}
	}
	if err := e.SetWeights(ws); err != nil {
		t.Fatal(err)
	}
	e.SetOptim(OptimConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.95})
	stepLoss, _, err := e.TrainStep(packed, pidx, loss, 1e-3)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(stepLoss-dropLoss) > 1e-5*dropLoss {
		t.Errorf("the first TrainStep's loss %.7f is not the loss under its masks %.7f", stepLoss, dropLoss)
	}
}

// TestGomlxArchBF16Base: a frozen base stored in bfloat16 computes what a
// float32 engine computes with the base rounded to bfloat16, and Weights
// gives the rounded values.
func TestGomlxArchBF16Base(t *testing.T) {
	v := archVariants()[0]
	lo := archLoRA(v.cfg)
	_, e := archPair(t, v.cfg, lo, 19)
	ws, err := e.Weights()
	if err != nil {
		t.Fatal(err)
	}
	half, err := NewGomlxEngineArch(v.cfg, lo, GomlxArchOptions{Backend: testBackend(t), Weights: ws, BaseStorage: "bf16"})
	if err != nil {
		t.Fatal(err)
	}
	rounded := make([]Tensor, len(ws))
	bf16 := 0
	for i, p := range half.(GomlxArchEngine).ArchParams() {
		rounded[i] = Tensor{Name: ws[i].Name, Shape: ws[i].Shape, F32: slices.Clone(ws[i].F32)}
		if p.BF16 {
			bf16++
			for j, x := range rounded[i].F32 {
				rounded[i].F32[j] = math.Float32frombits(roundBF16(math.Float32bits(x)))
			}
		}
	}
	if bf16 == 0 {
		t.Fatal("no parameter is stored in bfloat16")
	}
	got, err := half.Weights()
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if !slices.Equal(got[i].F32, rounded[i].F32) {
			t.Errorf("%s: Weights of the bfloat16 base is not the input rounded to bfloat16", got[i].Name)
		}
	}
	ref, err := NewGomlxEngineArch(v.cfg, lo, GomlxArchOptions{Backend: testBackend(t), Weights: rounded})
	if err != nil {
		t.Fatal(err)
	}
	packed, pidx, targets, weights, _, _, _ := archBatches(v.cfg, 4)
	wl, _, err := ref.Logits(packed, pidx)
	if err != nil {
		t.Fatal(err)
	}
	gl, _, err := half.Logits(packed, pidx)
	if err != nil {
		t.Fatal(err)
	}
	if d := relErr(gl, wl); d > 1e-5 {
		t.Errorf("logits of the bfloat16 base differ from float32 on rounded weights (relative %.2g)", d)
	}
	loss := sftLoss(targets, weights, v.cfg.Vocab)
	_, wg, err := ref.Gradients(packed, pidx, loss)
	if err != nil {
		t.Fatal(err)
	}
	_, gg, err := half.Gradients(packed, pidx, loss)
	if err != nil {
		t.Fatal(err)
	}
	for i := range wg {
		if d := relErr(gg[i].F32, wg[i].F32); d > 1e-5 {
			t.Errorf("gradient of %s differs with a bfloat16 base (relative %.2g)", wg[i].Name, d)
		}
	}
}

// roundBF16 rounds float32 bits to the nearest bfloat16 (ties to even),
// as bits of the float32 it stands for: a plain reference for the
// engine's conversion.
func roundBF16(b uint32) uint32 {
	lsb := (b >> 16) & 1
	return (b + 0x7fff + lsb) &^ 0xffff
}

// TestGomlxArchRefusals: bad architectures, adapters and storage are
// refused, each naming what is wrong.
func TestGomlxArchRefusals(t *testing.T) {
	base := archVariants()[1].cfg
	lora := archLoRA(base)
	for _, tc := range []struct {
		name    string
		cfg     func(c native.Config) native.Config
		lora    func(l native.LoRAConfig) native.LoRAConfig
		storage string
		want    string
	}{
		{"heads do not divide", func(c native.Config) native.Config { c.HeadSize, c.Heads, c.KVHeads = 0, 3, 0; return c }, nil, "", "multiple of heads"},
		{"kv heads", func(c native.Config) native.Config { c.KVHeads = 3; return c }, nil, "", "kv heads"},
		{"negative rank", nil, func(l native.LoRAConfig) native.LoRAConfig { l.Rank = -1; return l }, "", "lora rank -1"},
		{"dropout 1", nil, func(l native.LoRAConfig) native.LoRAConfig { l.Dropout = 1; return l }, "", "lora dropout 1"},
		{"no targets", nil, func(l native.LoRAConfig) native.LoRAConfig { l.Targets = nil; return l }, "", "no targets"},
		{"unknown target", nil, func(l native.LoRAConfig) native.LoRAConfig { l.Targets = []string{"q", "embed"}; return l }, "", `lora target "embed"`},
		{"gate of a GELU FFN", func(c native.Config) native.Config { c.FFNKind = native.FFNGELU; return c }, nil, "", `lora target "gate"`},
		{"bf16 without adapters", nil, func(native.LoRAConfig) native.LoRAConfig { return native.LoRAConfig{} }, "bf16", "needs a frozen base"},
		{"unknown storage", nil, nil, "fp16", `base storage "fp16"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, l := base, lora
			if tc.cfg != nil {
				c = tc.cfg(c)
			}
			if tc.lora != nil {
				l = tc.lora(l)
			}
			_, err := NewGomlxEngineArch(c, l, GomlxArchOptions{Backend: testBackend(t), BaseStorage: tc.storage})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewGomlxEngineArch: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestGomlxOptimizerStateResumes: an engine given another's weights and
// optimiser state continues its training as the original does (Adam's
// moments and step counters are all in the state), for mlerl's model and
// for LoRA: bit for bit on the CPU; to 1e-6 where a GPU's scatter-adds
// (the embedding's gradient) sum in another order each run.
func TestGomlxOptimizerStateResumes(t *testing.T) {
	cfg := tinyConfig()
	v := archVariants()[1]
	lo := archLoRA(v.cfg)
	for _, tc := range []struct {
		name string
		make func(ws []Tensor) (Engine, error)
	}{
		{"mlerl", func(ws []Tensor) (Engine, error) {
			if ws == nil {
				ws = testWeights(cfg, 3)
			}
			return NewGoMLXEngine(cfg, testBackend(t), ws)
		}},
		{"qwen2 lora", func(ws []Tensor) (Engine, error) {
			return NewGomlxEngineArch(v.cfg, lo, GomlxArchOptions{Backend: testBackend(t), Weights: ws, Seed: 3})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := tc.make(nil)
			if err != nil {
				t.Fatal(err)
			}
			c := a.Config()
			r := rand.New(rand.NewPCG(4, 4))
			b, idx := packedRows(Config{Vocab: c.Vocab, Ctx: c.Ctx}, r, 12, [][]int{{5, 7}, {9}})
			targets, returns := randTargets(r, Config{Vocab: c.Vocab}, len(idx))
			loss := testLoss(targets, returns, c.Vocab)
			o := OptimConfig{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, WeightDecay: 0.01, ClipNorm: 1}
			a.SetOptim(o)
			for range 3 {
				if _, _, err := a.TrainStep(b, idx, loss, o.LR); err != nil {
					t.Fatal(err)
				}
			}
			ws, err := a.Weights()
			if err != nil {
				t.Fatal(err)
			}
			st, err := a.OptimizerState()
			if err != nil {
				t.Fatal(err)
			}
			moments := 0
			for _, s := range st {
				if strings.HasSuffix(s.Name, "_1st_moment") {
					moments++
				}
			}
			want := 0
			for _, p := range a.(*gomlxEngine).params {
				if p.Trainable {
					want++
				}
			}
			if moments != want {
				t.Errorf("optimiser state holds %d first moments, want one per trainable weight (%d)", moments, want)
			}
			resumed, err := tc.make(ws)
			if err != nil {
				t.Fatal(err)
			}
			if err := resumed.SetOptimizerState(st); err != nil {
				t.Fatal(err)
			}
			resumed.SetOptim(o)
			for step := range 2 {
				la, na, err := a.TrainStep(b, idx, loss, o.LR)
				if err != nil {
					t.Fatal(err)
				}
				lr, nr, err := resumed.TrainStep(b, idx, loss, o.LR)
				if err != nil {
					t.Fatal(err)
				}
				if math.Abs(la-lr) > 1e-6*la || math.Abs(na-nr) > 1e-6*na {
					t.Errorf("step %d after resuming: loss %.7f, norm %.7f; the original's %.7f, %.7f", step, lr, nr, la, na)
				}
			}
			wa, _ := a.Weights()
			wr, _ := resumed.Weights()
			exact := true
			for i := range wa {
				exact = exact && slices.Equal(wa[i].F32, wr[i].F32)
				if d := relErr(wr[i].F32, wa[i].F32); d > 1e-6 {
					t.Errorf("%s differs after 2 steps from the resumed state (relative %.2g)", wa[i].Name, d)
				}
			}
			t.Logf("weights after resuming equal bit for bit: %v", exact)
			bad := []Tensor{{Name: "gomlx:/token_embed/embeddings", Shape: []int{1}, F32: []float32{0}}}
			if err := resumed.SetOptimizerState(bad); err == nil || !strings.Contains(err.Error(), "names a weight") {
				t.Errorf("optimiser state naming a weight: %v, want a refusal", err)
			}
		})
	}
}

// TestGomlxArchDetachValue: with DetachValue a value-only loss trains the
// value head alone (the adapters get no gradient), without it the
// adapters too; native agrees on both.
func TestGomlxArchDetachValue(t *testing.T) {
	v := archVariants()[0]
	m, e := archPair(t, v.cfg, archLoRA(v.cfg), 23)
	_, _, _, _, shared, sidx, _ := archBatches(v.cfg, 6)
	valueOnly := func(_, values, _, dValues []float32) float64 {
		l := 0.0
		for i, x := range values {
			l += 0.5 * float64(x-1) * float64(x-1)
			dValues[i] = x - 1
		}
		return l
	}
	for _, detach := range []bool{true, false, true} {
		e.SetOptim(OptimConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, DetachValue: detach})
		m.DetachValue = detach
		_, grads, err := e.Gradients(shared, sidx, valueOnly)
		if err != nil {
			t.Fatal(err)
		}
		_, want := nativeGrads(t, m, shared, sidx, valueOnly)
		var head, adapters float64
		for i, g := range grads {
			for _, x := range g.F32 {
				if strings.HasPrefix(g.Name, "/value_head/") {
					head += float64(x) * float64(x)
				} else {
					adapters += float64(x) * float64(x)
				}
			}
			if d := relErr(g.F32, want[i].F32); d > 1e-4 {
				t.Errorf("detach=%v: gradient of %s differs from native's (relative %.2g)", detach, g.Name, d)
			}
		}
		if head == 0 || (detach && adapters != 0) || (!detach && adapters == 0) {
			t.Errorf("detach=%v: |value head gradient|² %g, |adapter gradients|² %g", detach, head, adapters)
		}
	}
}
