package native

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// variantConfigs are tiny shapes of the Hugging Face families (and one
// mix no family has, to show the fields are independent), each with
// heads of another width than DModel/Heads.
func variantConfigs() []struct {
	name string
	cfg  Config
} {
	return []struct {
		name string
		cfg  Config
	}{
		// Llama 3 / SmolLM2: RMSNorm, SwiGLU, GQA, no biases, tied,
		// rescaled RoPE frequencies.
		{"llama", Config{Vocab: 13, DModel: 8, Heads: 4, KVHeads: 2, HeadSize: 4, Layers: 2, FFN: 12, Ctx: 40,
			Norm: NormRMS, NormEps: 1e-5, FFNKind: FFNSwiGLU, NoQKVBias: true, NoOutBias: true, NoFFNBias: true, NoLMBias: true,
			TiedEmbed: true, InvFreq: []float64{0.9, 0.07}}},
		// Qwen2.5: as Llama with q, k, v biases; one key/value head; an
		// untied head without bias.
		{"qwen2", Config{Vocab: 13, DModel: 8, Heads: 4, KVHeads: 1, HeadSize: 4, Layers: 2, FFN: 12, Ctx: 40, RoPEBase: 1e6,
			Norm: NormRMS, FFNKind: FFNSwiGLU, NoOutBias: true, NoFFNBias: true, NoLMBias: true}},
		// Qwen3: q/k norm, no biases, tied, heads wider than D/H.
		{"qwen3", Config{Vocab: 13, DModel: 8, Heads: 2, KVHeads: 1, HeadSize: 6, Layers: 2, FFN: 12, Ctx: 40, RoPEBase: 1e6,
			Norm: NormRMS, FFNKind: FFNSwiGLU, NoQKVBias: true, NoOutBias: true, NoFFNBias: true, QKNorm: true, TiedEmbed: true}},
		// RMSNorm with mlerl's GELU FFN and biases, q/k norm, GQA.
		{"mixed", Config{Vocab: 13, DModel: 8, Heads: 4, KVHeads: 2, Layers: 2, FFN: 12, Ctx: 40, Norm: NormRMS, QKNorm: true}},
	}
}

// newVariantModel is newTestModel for any architecture and options:
// every parameter N(0, 0.3²), norm gains 1 + N(0, 0.3²).
func newVariantModel(t testing.TB, cfg Config, opt Options, seed uint64) *Model {
	t.Helper()
	m, err := NewWithOptions(cfg, opt, seed)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, 99))
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
	}
	return m
}

func TestConfigValidateVariants(t *testing.T) {
	base := Config{Vocab: 13, DModel: 8, Heads: 4, Layers: 1, Ctx: 8}
	for _, tc := range []struct {
		name string
		edit func(c *Config)
		err  string
	}{
		{"gqa", func(c *Config) { c.KVHeads = 2 }, ""},
		{"kv heads do not divide", func(c *Config) { c.KVHeads = 3 }, "multiple of kv heads"},
		{"head size free of d_model", func(c *Config) { c.DModel, c.HeadSize = 10, 4 }, ""},
		{"odd head size", func(c *Config) { c.HeadSize = 5 }, "even"},
		{"unknown norm", func(c *Config) { c.Norm = "batchnorm" }, "norm"},
		{"layernorm eps", func(c *Config) { c.NormEps = 1e-6 }, "fixed"},
		{"rms eps", func(c *Config) { c.Norm, c.NormEps = NormRMS, 1e-6 }, ""},
		{"unknown ffn", func(c *Config) { c.FFNKind = "relu" }, "ffn kind"},
		{"inv freq", func(c *Config) { c.InvFreq = []float64{0.5} }, ""},
		{"inv freq length", func(c *Config) { c.InvFreq = []float64{1, 2} }, "inverse frequencies"},
		{"inv freq negative", func(c *Config) { c.InvFreq = []float64{-1} }, "inverse frequency"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.edit(&c)
			err := c.Validate()
			if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("Validate() = %v, want error containing %q", err, tc.err)
			}
		})
	}
	if !base.Standard() || (Config{Vocab: 1, DModel: 8, Heads: 2, Layers: 1, Ctx: 1, TiedEmbed: true}).Standard() {
		t.Error("Standard: mlerl's config not standard, or a tied one standard")
	}
}

// TestVariantParams: each family's parameter list (names and shapes) is
// what doc.go's table promises.
func TestVariantParams(t *testing.T) {
	for _, tc := range variantConfigs() {
		t.Run(tc.name, func(t *testing.T) {
			m := newVariantModel(t, tc.cfg, Options{}, 1)
			c := m.Config
			shapes := map[string][]int{}
			for _, p := range m.Params() {
				shapes[p.Name] = p.Shape
			}
			want := map[string][]int{
				"/token_embed/embeddings":                 {c.Vocab, c.DModel},
				"/block_1/ln_attn/rms_normalization/gain": {c.DModel},
				"/block_1/q/dense/weights":                {c.DModel, c.QDim()},
				"/block_1/k/dense/weights":                {c.DModel, c.KVDim()},
				"/block_1/out/dense/weights":              {c.QDim(), c.DModel},
				"/ln_final/rms_normalization/gain":        {c.DModel},
				"/value_head/dense/weights":               {c.DModel, 1},
			}
			if c.swiglu() {
				want["/block_0/ffn_gate/dense/weights"] = []int{c.DModel, c.FFN}
				want["/block_0/ffn_up/dense/weights"] = []int{c.DModel, c.FFN}
				want["/block_0/ffn_down/dense/weights"] = []int{c.FFN, c.DModel}
			}
			if c.QKNorm {
				want["/block_0/q_norm/rms_normalization/gain"] = []int{c.HeadDim()}
			}
			if !c.NoQKVBias {
				want["/block_0/v/dense/biases"] = []int{c.KVDim()}
			}
			for name, shape := range want {
				if got, ok := shapes[name]; !ok || len(got) != len(shape) || got[0] != shape[0] || (len(shape) == 2 && got[1] != shape[1]) {
					t.Errorf("%s: shape %v (present %v), want %v", name, got, ok, shape)
				}
			}
			absent := []string{"/block_0/ln_attn/layer_normalization/offset"}
			if c.NoOutBias {
				absent = append(absent, "/block_0/out/dense/biases", "/lm_head/dense/biases")
			}
			for _, name := range absent {
				if _, ok := shapes[name]; ok {
					t.Errorf("%s present", name)
				}
			}
			if _, ok := shapes["/lm_head/dense/weights"]; ok != !c.TiedEmbed {
				t.Errorf("lm head weights present %v with tied %v", ok, c.TiedEmbed)
			}
		})
	}
}

func TestVariantForwardMatchesReference(t *testing.T) {
	for _, tc := range variantConfigs() {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			b := testBatch()
			m := newVariantModel(t, cfg, Options{}, 2)
			wantLogits, wantValues := newRef(m).forward(b)
			idx := realPositions(b)
			forEachKernel(t, func(t *testing.T) {
				if err := m.Forward(b); err != nil {
					t.Fatal(err)
				}
				logits, values, err := m.Heads(idx)
				if err != nil {
					t.Fatal(err)
				}
				for k, at := range idx {
					if d := maxRelDiff(logits[k*cfg.Vocab:(k+1)*cfg.Vocab], wantLogits[at], 1); d > 5e-6 {
						t.Errorf("position %d: logits differ by %.2g (relative)", at, d)
					}
					if d := math.Abs(float64(values[k]) - wantValues[at]); d > 5e-6*math.Max(1, math.Abs(wantValues[at])) {
						t.Errorf("position %d: value %g, want %g", at, values[k], wantValues[at])
					}
				}
			})
		})
	}
}

// headGrads runs Forward, Heads at idx, the test loss (weighted
// cross-entropy of targets plus c/2 times the squared value) and
// Backward; it returns the logits.
func headGrads(t *testing.T, m *Model, b Batch, idx, targets []int32, w, c []float64) []float32 {
	t.Helper()
	m.ZeroGrad()
	if err := m.Forward(b); err != nil {
		t.Fatal(err)
	}
	logits, values, err := m.Heads(idx)
	if err != nil {
		t.Fatal(err)
	}
	v := m.Config.Vocab
	dLogits, dValues := make([]float32, len(idx)*v), make([]float32, len(idx))
	for k := range idx {
		z := toF64(logits[k*v : (k+1)*v])
		mx := math.Inf(-1)
		for _, x := range z {
			mx = math.Max(mx, x)
		}
		s := 0.0
		for _, x := range z {
			s += math.Exp(x - mx)
		}
		for j, x := range z {
			g := math.Exp(x-mx) / s
			if j == int(targets[k]) {
				g--
			}
			dLogits[k*v+j] = float32(w[k] * g)
		}
		dValues[k] = float32(c[k] * float64(values[k]))
	}
	logits = append([]float32(nil), logits...)
	if err := m.Backward(idx, dLogits, dValues); err != nil {
		t.Fatal(err)
	}
	return logits
}

// fdGradients returns the reference loss's central differences for every
// element of the named parameters.
func fdGradients(ref *refModel, names []string, b Batch, idx, targets []int32, w, c []float64) map[string][]float64 {
	want := map[string][]float64{}
	const h = 1e-5
	for _, name := range names {
		vals := ref.p[name]
		g := make([]float64, len(vals))
		for i := range vals {
			x := vals[i]
			vals[i] = x + h
			lp := refLoss2(ref, b, idx, targets, w, c)
			vals[i] = x - h
			lm := refLoss2(ref, b, idx, targets, w, c)
			vals[i] = x
			g[i] = (lp - lm) / (2 * h)
		}
		want[name] = g
	}
	return want
}

// lossSetup draws the test loss's head positions (a few per example,
// one repeated), targets and weights for testBatch.
func lossSetup(r *rand.Rand, vocab int) (idx, targets []int32, w, c []float64) {
	idx = []int32{1, 4, 5, 7, 10, 13, 16, 4}
	targets = randTokens(r, len(idx), vocab)
	w, c = make([]float64, len(idx)), make([]float64, len(idx))
	for k := range idx {
		w[k], c[k] = 0.5+r.Float64(), r.Float64()
	}
	return idx, targets, w, c
}

// TestVariantGradientsMatchFiniteDifferences checks every gradient of
// every architecture (full fine-tuning) against central differences of
// the float64 reference.
func TestVariantGradientsMatchFiniteDifferences(t *testing.T) {
	for _, tc := range variantConfigs() {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			b := testBatch()
			m := newVariantModel(t, cfg, Options{}, 3)
			ref := newRef(m)
			r := rand.New(rand.NewPCG(7, 8))
			idx, targets, w, c := lossSetup(r, cfg.Vocab)
			var names []string
			for _, p := range m.Params() {
				names = append(names, p.Name)
			}
			want := fdGradients(ref, names, b, idx, targets, w, c)
			forEachKernel(t, func(t *testing.T) {
				headGrads(t, m, b, idx, targets, w, c)
				for _, p := range m.Params() {
					if d := maxRelDiff(p.Grad, want[p.Name], 1e-3); d > 2e-5 {
						t.Errorf("%s: gradient differs from finite differences by %.2g (relative to its largest element)", p.Name, d)
					}
				}
			})
		})
	}
}

// TestVariantPrefixDirectional: with shared prompts longer than an
// attention block (tree attention) and grouped heads, logits match the
// reference and the gradient along a random direction matches the
// reference loss's central difference.
func TestVariantPrefixDirectional(t *testing.T) {
	for _, tc := range variantConfigs() {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Vocab, cfg.Ctx, cfg.Layers = 21, 200, 1
			m := newVariantModel(t, cfg, Options{}, 31)
			for _, p := range m.Params() {
				for i := range p.Data { // keep activations moderate over long rows
					p.Data[i] *= 0.7
				}
			}
			r := rand.New(rand.NewPCG(32, 33))
			b, _ := packTrees(200, true, []tree{randTrees(r, cfg.Vocab, 70, 80, 5, 40)}, []tree{randTrees(r, cfg.Vocab, 9, 4)})
			idx := realPositions(b)
			targets := randTokens(r, len(idx), cfg.Vocab)
			w, c := make([]float64, len(idx)), make([]float64, len(idx))
			for k := range idx {
				w[k], c[k] = 1, 0.3
			}
			ref := newRef(m)
			wantLogits, _ := ref.forward(b)
			u := randomDirection(r, m)
			want := directionalDerivative(ref, u, b, idx, targets, w, c)
			forEachKernel(t, func(t *testing.T) {
				logits := headGrads(t, m, b, idx, targets, w, c)
				v := cfg.Vocab
				for k, at := range idx {
					if d := maxRelDiff(logits[k*v:(k+1)*v], wantLogits[at], 1); d > 1e-5 {
						t.Fatalf("position %d: logits differ from the reference by %.2g", at, d)
					}
				}
				got, scale := 0.0, 0.0
				for _, p := range m.Params() {
					for i, g := range p.Grad {
						got += float64(g) * u[p.Name][i]
						scale += math.Abs(float64(g) * u[p.Name][i])
					}
				}
				if math.Abs(got-want) > 1e-5*scale {
					t.Errorf("directional derivative %.8g, finite differences %.8g (scale %.3g)", got, want, scale)
				}
			})
		})
	}
}

// TestVariantDecodeMatchesForward: for every architecture, the KV-cache
// decoder (rows of different lengths, a row sharing another's prompt,
// multi-token extensions, packed and unpacked weights) gives the logits
// of a full forward over each row's sequence.
func TestVariantDecodeMatchesForward(t *testing.T) {
	for _, tc := range variantConfigs() {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Ctx = 100
			m := newVariantModel(t, cfg, Options{}, 21)
			checkDecode(t, m)
		})
	}
}

// checkDecode runs rows of prompts through the cache (row 3 sharing row
// 0's prompt; 12 rows when packed, over gemmSmallM, else 3 with the
// sharer), then decode steps and a forced string, checking each step's
// logits against full forwards.
func checkDecode(t *testing.T, m *Model) {
	t.Helper()
	cfg := m.Config
	v := cfg.Vocab
	forEachKernel(t, func(t *testing.T) {
		for _, packed := range []bool{false, true} {
			r := rand.New(rand.NewPCG(15, 16))
			rows := 4
			if packed {
				rows = 12
			}
			c, err := m.NewCache(rows, cfg.Ctx)
			if err != nil {
				t.Fatal(err)
			}
			if packed {
				m.PackWeights(c)
			}
			seqs := make([][]int32, rows)
			var fill []int
			var prompts [][]int32
			for i := range rows {
				if i == 3 {
					continue
				}
				seqs[i] = randTokens(r, 3+5*i%17, v)
				fill, prompts = append(fill, i), append(prompts, seqs[i])
			}
			check := func(rs []int, ext [][]int32) {
				t.Helper()
				got, err := m.Extend(c, rs, ext)
				if err != nil {
					t.Fatal(err)
				}
				got = append([]float32(nil), got...)
				for k, row := range rs {
					seqs[row] = append(seqs[row], ext[k]...)
					want := fullLogits(t, m, seqs[row])
					at := len(seqs[row]) - 1
					if d := maxRelDiff(got[k*v:(k+1)*v], toF64(want[at*v:(at+1)*v]), 1); d > 2e-5 {
						t.Errorf("packed %v: row %d at %d tokens differs from a full forward by %.2g", packed, row, len(seqs[row]), d)
					}
				}
			}
			seqsBefore := make([][]int32, rows)
			for i, p := range prompts {
				seqsBefore[fill[i]] = p
				seqs[fill[i]] = nil
			}
			check(fill, prompts)
			if err := c.Share(3, 0); err != nil {
				t.Fatal(err)
			}
			seqs[3] = append([]int32(nil), seqs[0]...)
			all := make([]int, rows)
			for i := range all {
				all[i] = i
			}
			for step := range 3 {
				ext := make([][]int32, rows)
				for i := range ext {
					ext[i] = randTokens(r, 1, v)
				}
				if step == 1 {
					ext[2] = randTokens(r, 3, v) // a forced string
				}
				check(all, ext)
			}
		}
	})
}

// TestGQAEqualsMHA: a model with 2 key/value heads for 4 query heads
// computes what the multi-head model whose key and value projections
// repeat each of its heads for its two query heads computes, and its key
// and value gradients are those of the copies summed.
func TestGQAEqualsMHA(t *testing.T) {
	gqaCfg := Config{Vocab: 13, DModel: 8, Heads: 4, KVHeads: 2, HeadSize: 4, Layers: 2, FFN: 12, Ctx: 40, Norm: NormRMS, FFNKind: FFNSwiGLU}
	mhaCfg := gqaCfg
	mhaCfg.KVHeads = 4
	gqa := newVariantModel(t, gqaCfg, Options{}, 41)
	mha := newVariantModel(t, mhaCfg, Options{}, 41)
	dh, per := 4, 2
	for _, p := range gqa.Params() {
		isKV := strings.Contains(p.Name, "/k/dense/") || strings.Contains(p.Name, "/v/dense/")
		if !isKV {
			if err := mha.SetParam(p.Name, p.Data); err != nil {
				t.Fatal(err)
			}
			continue
		}
		rows, cols := 1, p.Shape[len(p.Shape)-1]
		if len(p.Shape) == 2 {
			rows = p.Shape[0]
		}
		wide := make([]float32, rows*cols*per)
		for i := range rows {
			for h := range 4 {
				copy(wide[i*cols*per+h*dh:i*cols*per+h*dh+dh], p.Data[i*cols+(h/per)*dh:])
			}
		}
		if err := mha.SetParam(p.Name, wide); err != nil {
			t.Fatal(err)
		}
	}
	b := testBatch()
	r := rand.New(rand.NewPCG(42, 43))
	idx, targets, w, c := lossSetup(r, gqaCfg.Vocab)
	forEachKernel(t, func(t *testing.T) {
		lg := headGrads(t, gqa, b, idx, targets, w, c)
		lm := headGrads(t, mha, b, idx, targets, w, c)
		if d := maxRelDiff(lg, toF64(lm), 1); d > 1e-6 {
			t.Errorf("logits differ by %.2g", d)
		}
		mg := map[string][]float32{}
		for _, p := range mha.Params() {
			mg[p.Name] = p.Grad
		}
		for _, p := range gqa.Params() {
			want := toF64(mg[p.Name])
			if strings.Contains(p.Name, "/k/dense/") || strings.Contains(p.Name, "/v/dense/") {
				cols := p.Shape[len(p.Shape)-1]
				want = make([]float64, len(p.Grad))
				for i := range len(p.Grad) / cols {
					for h := range 4 {
						for e := range dh {
							want[i*cols+(h/per)*dh+e] += float64(mg[p.Name][i*cols*per+h*dh+e])
						}
					}
				}
			}
			if d := maxRelDiff(p.Grad, want, 1e-3); d > 1e-5 {
				t.Errorf("%s: gradient differs from the multi-head model's by %.2g", p.Name, d)
			}
		}
	})
}

// TestTiedEqualsUntied: a tied model computes what an untied one whose
// LM head is the embedding's transpose computes; its embedding's
// gradient is the untied embedding's plus the head's, transposed.
func TestTiedEqualsUntied(t *testing.T) {
	tiedCfg := variantConfigs()[0].cfg
	untiedCfg := tiedCfg
	untiedCfg.TiedEmbed = false
	tied := newVariantModel(t, tiedCfg, Options{}, 44)
	untied := newVariantModel(t, untiedCfg, Options{}, 44)
	for _, p := range tied.Params() {
		if err := untied.SetParam(p.Name, p.Data); err != nil {
			t.Fatal(err)
		}
	}
	e, _ := tied.ParamValues("/token_embed/embeddings")
	if err := untied.SetParamOutIn("/lm_head/dense/weights", e); err != nil { // Eᵀ: E is [V, D], the head [D, V]
		t.Fatal(err)
	}
	b := testBatch()
	r := rand.New(rand.NewPCG(45, 46))
	idx, targets, w, c := lossSetup(r, tiedCfg.Vocab)
	forEachKernel(t, func(t *testing.T) {
		lt := headGrads(t, tied, b, idx, targets, w, c)
		lu := headGrads(t, untied, b, idx, targets, w, c)
		if d := maxRelDiff(lt, toF64(lu), 1); d > 1e-6 {
			t.Errorf("logits differ by %.2g", d)
		}
		v, d := tiedCfg.Vocab, tiedCfg.DModel
		var ge, gh []float32
		for _, p := range untied.Params() {
			switch p.Name {
			case "/token_embed/embeddings":
				ge = p.Grad
			case "/lm_head/dense/weights":
				gh = p.Grad
			}
		}
		want := make([]float64, v*d)
		for i := range v {
			for j := range d {
				want[i*d+j] = float64(ge[i*d+j]) + float64(gh[j*v+i])
			}
		}
		if dd := maxRelDiff(tied.g.embed, want, 1e-3); dd > 1e-5 {
			t.Errorf("tied embedding gradient differs by %.2g", dd)
		}
	})
}

// TestSetParamLayouts: SetParamOutIn takes Hugging Face's [out, in] and
// ParamOutIn gives it back; both refuse what does not fit.
func TestSetParamLayouts(t *testing.T) {
	m := newVariantModel(t, variantConfigs()[1].cfg, Options{}, 47)
	name := "/block_0/q/dense/weights" // [8, 16]
	hf := make([]float32, 16*8)
	for i := range hf {
		hf[i] = float32(i)
	}
	if err := m.SetParamOutIn(name, hf); err != nil {
		t.Fatal(err)
	}
	got, _ := m.ParamValues(name)
	if got[3*16+5] != hf[5*8+3] { // W[in 3, out 5] = HF[out 5, in 3]
		t.Errorf("W[3][5] = %v, want HF[5][3] = %v", got[3*16+5], hf[5*8+3])
	}
	back, err := m.ParamOutIn(name)
	if err != nil {
		t.Fatal(err)
	}
	for i := range hf {
		if back[i] != hf[i] {
			t.Fatalf("ParamOutIn element %d is %v, want %v", i, back[i], hf[i])
		}
	}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"unknown", m.SetParam("/nope", nil), "no parameter"},
		{"short", m.SetParam(name, hf[1:]), "got 127 values"},
		{"vector", m.SetParamOutIn("/block_0/q/dense/biases", make([]float32, 16)), "not a matrix"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, tc.err, tc.want)
		}
	}
}

// TestCrossEntropyChunksSameBits: CrossEntropyBackward over positions in
// chunks (aligned to the GEMMs' k blocks, the last one longer) gives the
// loss and every gradient of one pass over all of them, bit for bit, for
// an untied head with a bias and a tied one, in float32 and bf16
// products.
func TestCrossEntropyChunksSameBits(t *testing.T) {
	saved := ceChunkRows
	defer func() { ceChunkRows = saved }()
	for _, tc := range []struct {
		name string
		cfg  Config
	}{{"mlerl", tinyConfig()}, {"llama", variantConfigs()[0].cfg}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Ctx = 300
			r := rand.New(rand.NewPCG(60, 61))
			b := packRows(280, 12, []example{{randTokens(r, 270, 12), 0}}, []example{{randTokens(r, 150, 12), 0}, {randTokens(r, 120, 12), 3}},
				[]example{{randTokens(r, 260, 12), 0}})
			idx := realPositions(b)
			targets := randTokens(r, len(idx), cfg.Vocab)
			weights := make([]float32, len(idx))
			for i := range weights {
				weights[i] = float32(i % 4)
			}
			forEachKernel(t, func(t *testing.T) {
				for _, mode := range []string{MatmulFP32, MatmulBF16} {
					var grads [2][]float32
					var losses [2]float64
					for i, rows := range []int{1 << 30, ceChunkAlign} {
						ceChunkRows = func(int) int { return rows }
						m := newVariantModel(t, cfg, Options{}, 62)
						if _, err := m.SetMatmul(mode); err != nil {
							t.Fatal(err)
						}
						if err := m.Forward(b); err != nil {
							t.Fatal(err)
						}
						l, err := m.CrossEntropyBackward(idx, targets, weights)
						if err != nil {
							t.Fatal(err)
						}
						grads[i], losses[i] = append([]float32(nil), m.grad...), l
					}
					if losses[0] != losses[1] {
						t.Errorf("%s: loss %v in one pass, %v in chunks", mode, losses[0], losses[1])
					}
					for i := range grads[0] {
						if grads[0][i] != grads[1][i] {
							t.Fatalf("%s: gradient %d: %v in one pass, %v in chunks", mode, i, grads[0][i], grads[1][i])
						}
					}
				}
			})
		})
	}
}
