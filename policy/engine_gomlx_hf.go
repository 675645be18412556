package policy

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/dtypes/bfloat16"
	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/layers/activation"
	"github.com/gomlx/gomlx/ml/layers/attention"
	"github.com/gomlx/gomlx/ml/model"
	"github.com/gomlx/gomlx/ml/nn"
	"github.com/gomlx/gomlx/support/exceptions"

	"github.com/mlerl/mlerl/policy/native"
)

// The GoMLX engine for every architecture policy/native runs: the Hugging
// Face decoder families (Llama / SmolLM2, Qwen2, Qwen3; native's doc.go
// has the table of Config fields per family), with LoRA adapters or full
// fine-tuning. It is the same engine as mlerl's own model's (engine_gomlx.go):
// the same padding to buckets, packed batches with segments, positions and
// shared prefixes, host-side losses, AdamW with global-norm clipping, and
// the decoder's fixed-size caches; only the graphs of a block, the
// embedding and the heads differ (NewGomlxEngineArch selects them), and
// mlerl's own model keeps its graphs as they were.
//
// Supported, each computing what native.Model computes (the agreement tests
// of engine_gomlx_hf_test.go check it on tiny shapes of each family):
//
//   - RMSNorm (x·rsqrt(mean(x²)+eps)·gain, float32) or LayerNorm (eps 1e-5);
//   - SwiGLU (down(silu(gate(x))·up(x))) or the exact-GELU FFN;
//   - grouped-query attention (KVHeads; GoMLX's attention.Core groups the
//     query heads over the key/value heads without copying them), heads of
//     any even HeadSize, independent of DModel/Heads;
//   - optional biases of q/k/v, the attention output, the FFN and the
//     (untied) LM head; Qwen3's RMSNorm over each head of q and k before
//     RoPE; tied embeddings (logits = h·Eᵀ);
//   - RoPE in Hugging Face's rotate_half layout, from RoPEBase or an
//     InvFreq table (Llama 3's rope_scaling), as host-computed tables;
//   - the value head (DetachValue as for mlerl's model);
//   - LoRA (native.LoRAConfig) on any of q, k, v, o, gate, up, down, the
//     base frozen (see archLinear); full fine-tuning without adapters;
//   - a frozen base stored in bfloat16 (GomlxArchOptions.BaseStorage);
//   - generation with the decoder of mlerl's model: caches of KVHeads x
//     HeadSize per token and layer, each distinct prompt prefilled once
//     and its cache gathered into the rows that repeat it (the K samples
//     of one state), logits and values at every step.
//
// Parameters have native's names, shapes ([in, out] dense weights) and
// order (native.Model.Params), so weights move between the two engines and
// checkpoints are interchangeable; the optimiser's state is each engine's
// own, as for mlerl's model.
//
// Not supported, and why:
//
//   - Dropout's masks are not native's bits: native hashes each element's
//     index in its own compact layout of the real tokens; here each
//     adapter's mask is a draw of GoMLX's RNG (Philox) over the padded
//     batch, keyed by Seed and the optimiser's global step. Both drop each
//     value with probability p and scale the kept ones by 1/(1-p) on the
//     adapter's input only, a mask per layer, adapter and step, and neither
//     drops anything outside training: Logits, Gradients and decoding run
//     without dropout; TrainStep runs its forward pass and its gradient
//     with the same masks (the loss it returns is the dropped-out one).
//   - bf16 products: a bfloat16 base (BaseStorage "bf16": half the device
//     memory of the base) is widened to float32 inside the graph and every
//     product runs in float32 (XLA may fuse the conversion into the
//     product; TF32 is the backend's choice, GOMLX_BACKEND's tf32 option).
//     Products with bfloat16 operands and float32 accumulation (DotGeneral
//     can express them) are not offered: they could not be checked on a
//     GPU here, and the pure-Go backend has no fast bf16 products. Native's
//     bf16 base also rounds the products' other operand to bfloat16; the
//     two agree to bf16 rounding of the activations, not of float32.
//   - Merging adapters into the base (native.Model.MergeLoRA) is not done
//     here: Weights gives A, B and the base, and the merge is arithmetic on
//     them (policy/hf's WriteMerged).
//   - The LM head's logits of every requested position come back to the
//     host for the loss (LossFunc is host code, the same for every engine):
//     with a 150k-id vocabulary that is 0.6 MB per position and step each
//     way. A fused on-device cross-entropy would avoid it; SFT on a GPU
//     pays it today.
//   - The decoder attends over the whole context at every step (the
//     pure-Go backend has no dynamic slices; the cache is written through
//     a one-hot mask, engine_gomlx.go): a step costs O(Ctx), not O(length).

// GomlxArchOptions configures NewGomlxEngineArch; the zero value is the
// default: the backend from $GOMLX_BACKEND (else pure Go), native's
// initial weights for seed 0, a float32 base.
type GomlxArchOptions struct {
	// Backend runs the graphs; nil: NewBackend().
	Backend compute.Backend
	// Weights are the initial weights, by native's names, every parameter
	// of the model (frozen base, value head and adapters); nil: the
	// weights native.NewWithOptions(cfg, {LoRA: lora}, Seed) draws, so
	// that both engines start from the same model for the same seed.
	Weights []Tensor
	// Seed draws the initial weights when Weights is nil, and keys the
	// adapters' dropout masks; default 0.
	Seed uint64
	// BaseStorage is how a frozen base (LoRA) keeps its matrices (dense
	// weights, embedding, untied LM head): "bf16" in bfloat16, half the
	// device memory; "fp32", "auto" or "" in float32 (the default: "auto"
	// does not guess what the device's bf16 is worth). Norm gains, biases,
	// adapters and the value head stay float32. bf16 needs adapters.
	BaseStorage string
}

// NewGomlxEngineArch returns a GoMLX engine for any architecture of
// native.Config (mlerl's own model too, though NewGoMLXEngine is its
// usual constructor) with LoRA adapters as lora configures them (Rank 0:
// none, every weight trains). It checks cfg with native.Config.Validate
// and lora as native does; errors name the field.
//
// The engine's Config() is the policy.Config of the shape (Vocab, DModel,
// Heads, Layers, FFN, Ctx, RoPEBase): its HeadDim and Params describe
// mlerl's model, not this one; ArchConfig, ArchLoRA and ArchParams
// (through a type assertion to GomlxArchEngine) describe this one.
// Weights lists every parameter in native's order; Gradients lists the
// trainable ones only (the adapters and the value head under LoRA), in the
// same order.
func NewGomlxEngineArch(cfg native.Config, lora native.LoRAConfig, opt GomlxArchOptions) (Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("policy gomlx: %w", err)
	}
	a, err := newGomlxArch(cfg, lora, opt)
	if err != nil {
		return nil, err
	}
	backend := opt.Backend
	if backend == nil {
		if backend, err = NewBackend(); err != nil {
			return nil, fmt.Errorf("policy gomlx: GoMLX backend: %w", err)
		}
	}
	c := a.c
	e := &gomlxEngine{
		cfg:     Config{Vocab: c.Vocab, DModel: c.DModel, Heads: c.Heads, Layers: c.Layers, FFN: c.FFN, Ctx: c.Ctx, RoPEBase: c.RoPEBase},
		arch:    a,
		backend: backend,
		store:   model.NewStore(),
		params:  a.params(),
		seed:    opt.Seed,
	}
	e.cos, e.sin = archRoPETable(c)
	weights := opt.Weights
	if weights == nil {
		if weights, err = nativeInitialWeights(cfg, lora, opt.Seed, false); err != nil {
			return nil, err
		}
	}
	if err := e.SetWeights(weights); err != nil {
		return nil, err
	}
	return e, nil
}

// GomlxArchEngine is what an engine of NewGomlxEngineArch adds to Engine:
// its architecture (resolved: every default filled in), its adapters and
// its parameters.
type GomlxArchEngine interface {
	Engine
	ArchConfig() native.Config
	ArchLoRA() native.LoRAConfig
	ArchParams() []GomlxParam
}

// GomlxParam is one parameter of an architecture engine: native's name
// and shape, whether it trains, and whether it is stored in bfloat16.
type GomlxParam struct {
	ParamShape
	Trainable bool
	BF16      bool
}

func (e *gomlxEngine) ArchConfig() native.Config {
	if e.arch == nil {
		return native.Config{Vocab: e.cfg.Vocab, DModel: e.cfg.DModel, Heads: e.cfg.Heads, Layers: e.cfg.Layers,
			FFN: e.cfg.FFNWidth(), Ctx: e.cfg.Ctx, RoPEBase: e.cfg.Base()}
	}
	c := e.arch.c
	c.InvFreq = slices.Clone(c.InvFreq)
	return c
}

func (e *gomlxEngine) ArchLoRA() native.LoRAConfig {
	if e.arch == nil {
		return native.LoRAConfig{}
	}
	l := e.arch.lora
	l.Targets = slices.Clone(l.Targets)
	return l
}

func (e *gomlxEngine) ArchParams() []GomlxParam {
	out := slices.Clone(e.params)
	for i := range out {
		out[i].Shape = slices.Clone(out[i].Shape)
	}
	return out
}

// Dense layers of a block, the places an adapter can go (native's order).
const (
	tgQ = iota
	tgK
	tgV
	tgOut
	tgFFNIn // GELU's input, SwiGLU's gate
	tgFFNUp // SwiGLU's up
	tgFFNOut
	numTargets
)

// gomlxArch is an architecture engine's model: native's Config resolved,
// and the adapters.
type gomlxArch struct {
	c        native.Config // every default filled in (resolveArch)
	lora     native.LoRAConfig
	on       [numTargets]bool // the adapted layers
	scale    float64          // alpha / rank
	bf16Base bool
}

// resolveArch fills in native.Config's documented defaults (its field
// comments): FFN 4·DModel, RoPEBase 10000, KVHeads Heads, HeadSize
// DModel/Heads, LayerNorm (eps 1e-5) or RMSNorm (eps 1e-6), the GELU FFN.
// TestGomlxArchResolvesAsNative checks it against native.Model.Config.
func resolveArch(c native.Config) native.Config {
	if c.FFN == 0 {
		c.FFN = 4 * c.DModel
	}
	if c.RoPEBase == 0 {
		c.RoPEBase = 10000
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.HeadSize == 0 {
		c.HeadSize = c.DModel / c.Heads
	}
	if c.Norm == "" {
		c.Norm = native.NormLayer
	}
	if c.NormEps == 0 {
		c.NormEps = 1e-5
		if c.Norm == native.NormRMS {
			c.NormEps = 1e-6
		}
	}
	if c.FFNKind == "" {
		c.FFNKind = native.FFNGELU
	}
	c.InvFreq = slices.Clone(c.InvFreq)
	return c
}

func newGomlxArch(cfg native.Config, lo native.LoRAConfig, opt GomlxArchOptions) (*gomlxArch, error) {
	a := &gomlxArch{c: resolveArch(cfg), lora: lo}
	a.lora.Targets = slices.Clone(lo.Targets)
	switch strings.ToLower(strings.TrimSpace(opt.BaseStorage)) {
	case "", MatmulAuto, native.MatmulFP32:
	case native.MatmulBF16:
		a.bf16Base = true
	default:
		return nil, fmt.Errorf("policy gomlx: base storage %q: want %q or %q (or %q, float32)", opt.BaseStorage, native.MatmulBF16, native.MatmulFP32, MatmulAuto)
	}
	if lo.Rank == 0 {
		if a.bf16Base {
			return nil, fmt.Errorf("policy gomlx: base storage %q needs a frozen base (LoRA adapters): a trained weight keeps float32", opt.BaseStorage)
		}
		return a, nil
	}
	switch {
	case lo.Rank < 0:
		return nil, fmt.Errorf("policy gomlx: lora rank %d must be >= 0", lo.Rank)
	case lo.Alpha < 0 || math.IsNaN(lo.Alpha) || math.IsInf(lo.Alpha, 0):
		return nil, fmt.Errorf("policy gomlx: lora alpha %g must be a finite value >= 0", lo.Alpha)
	case !(lo.Dropout >= 0 && lo.Dropout < 1):
		return nil, fmt.Errorf("policy gomlx: lora dropout %g must be in [0, 1)", lo.Dropout)
	case len(lo.Targets) == 0:
		return nil, fmt.Errorf("policy gomlx: lora rank %d with no targets (want some of q, k, v, o, gate, up, down)", lo.Rank)
	}
	for _, name := range lo.Targets {
		t, err := parseTarget(name, a.swiglu())
		if err != nil {
			return nil, err
		}
		a.on[t] = true
	}
	alpha := lo.Alpha
	if alpha == 0 {
		alpha = float64(lo.Rank)
	}
	a.scale = alpha / float64(lo.Rank)
	return a, nil
}

// parseTarget maps a name LoRAConfig.Targets accepts to its layer, with
// native's rules: PEFT's names (q_proj, ...) too; a SwiGLU FFN has gate,
// up and down, a GELU one up (its input) and down.
func parseTarget(name string, swiglu bool) (int, error) {
	n := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(name)), "_proj")
	switch {
	case n == "q":
		return tgQ, nil
	case n == "k":
		return tgK, nil
	case n == "v":
		return tgV, nil
	case n == "o" || n == "out":
		return tgOut, nil
	case (n == "gate" || n == "ffn_gate") && swiglu:
		return tgFFNIn, nil
	case (n == "up" || n == "ffn_up") && swiglu:
		return tgFFNUp, nil
	case (n == "up" || n == "ffn_in") && !swiglu:
		return tgFFNIn, nil
	case n == "down" || n == "ffn_down" || n == "ffn_out":
		return tgFFNOut, nil
	}
	return 0, fmt.Errorf("policy gomlx: lora target %q: want q, k, v, o, up, down (and gate for a SwiGLU FFN)", name)
}

func (a *gomlxArch) swiglu() bool { return a.c.FFNKind == native.FFNSwiGLU }
func (a *gomlxArch) rms() bool    { return a.c.Norm == native.NormRMS }

// frozen reports whether the base is frozen (adapters present).
func (a *gomlxArch) frozen() bool { return a.lora.Rank > 0 }

// targetName is layer t's name in parameter paths (native's).
func (a *gomlxArch) targetName(t int) string {
	if a.swiglu() {
		return [numTargets]string{"q", "k", "v", "out", "ffn_gate", "ffn_up", "ffn_down"}[t]
	}
	return [numTargets]string{"q", "k", "v", "out", "ffn_in", "ffn_up", "ffn_out"}[t]
}

// dims is layer t's input and output widths.
func (a *gomlxArch) dims(t int) (in, out int) {
	c := a.c
	d, f, qd, kvd := c.DModel, c.FFN, c.Heads*c.HeadSize, c.KVHeads*c.HeadSize
	switch t {
	case tgQ:
		return d, qd
	case tgK, tgV:
		return d, kvd
	case tgOut:
		return qd, d
	case tgFFNIn, tgFFNUp:
		return d, f
	}
	return f, d
}

// bias reports whether layer t has a bias.
func (a *gomlxArch) bias(t int) bool {
	switch t {
	case tgQ, tgK, tgV:
		return !a.c.NoQKVBias
	case tgOut:
		return !a.c.NoOutBias
	}
	return !a.c.NoFFNBias
}

// params lists the parameters in native's order (policy/native/params.go's
// paramTable: the base in model order, the value head, the adapters);
// TestGomlxArchResolvesAsNative checks names, shapes and which train.
func (a *gomlxArch) params() []GomlxParam {
	c := a.c
	d, v := c.DModel, c.Vocab
	var ps []GomlxParam
	// base adds a base parameter: frozen under LoRA, in bfloat16 when a
	// frozen base is stored so and it is a matrix.
	base := func(name string, shape ...int) {
		ps = append(ps, GomlxParam{ParamShape: ParamShape{name, shape}, Trainable: !a.frozen(), BF16: a.bf16Base && len(shape) == 2})
	}
	norm := func(prefix string, width int) {
		if a.rms() {
			base(prefix+"/rms_normalization/gain", width)
			return
		}
		base(prefix+"/layer_normalization/gain", width)
		base(prefix+"/layer_normalization/offset", width)
	}
	base("/token_embed/embeddings", v, d)
	for l := range c.Layers {
		p := fmt.Sprintf("/block_%d/", l)
		dense := func(t int) {
			in, out := a.dims(t)
			base(p+a.targetName(t)+"/dense/weights", in, out)
			if a.bias(t) {
				base(p+a.targetName(t)+"/dense/biases", out)
			}
		}
		norm(p+"ln_attn", d)
		dense(tgQ)
		dense(tgK)
		dense(tgV)
		if c.QKNorm {
			base(p+"q_norm/rms_normalization/gain", c.HeadSize)
			base(p+"k_norm/rms_normalization/gain", c.HeadSize)
		}
		dense(tgOut)
		norm(p+"ln_ffn", d)
		dense(tgFFNIn)
		if a.swiglu() {
			dense(tgFFNUp)
		}
		dense(tgFFNOut)
	}
	norm("/ln_final", d)
	if !c.TiedEmbed {
		base("/lm_head/dense/weights", d, v)
		if !c.NoLMBias {
			base("/lm_head/dense/biases", v)
		}
	}
	ps = append(ps,
		GomlxParam{ParamShape: ParamShape{"/value_head/dense/weights", []int{d, 1}}, Trainable: true},
		GomlxParam{ParamShape: ParamShape{"/value_head/dense/biases", []int{1}}, Trainable: true})
	if !a.frozen() {
		return ps
	}
	r := a.lora.Rank
	for l := range c.Layers {
		for t := range numTargets {
			if !a.on[t] {
				continue
			}
			in, out := a.dims(t)
			p := fmt.Sprintf("/block_%d/%s/", l, a.targetName(t))
			ps = append(ps,
				GomlxParam{ParamShape: ParamShape{p + "lora_a", []int{in, r}}, Trainable: true},
				GomlxParam{ParamShape: ParamShape{p + "lora_b", []int{r, out}}, Trainable: true})
		}
	}
	return ps
}

// archRoPETable is native's RoPE table for c: cos and sin of pos·ω_i,
// [Ctx, HeadSize/2], in float64 rounded to float32, ω_i from InvFreq or
// RoPEBase^(-2i/HeadSize) (the same expression as native's, so the same
// bits).
func archRoPETable(c native.Config) (cos, sin []float32) {
	half := c.HeadSize / 2
	cos, sin = make([]float32, c.Ctx*half), make([]float32, c.Ctx*half)
	for p := range c.Ctx {
		for i := range half {
			a := float64(p) * math.Pow(c.RoPEBase, -2*float64(i)/float64(c.HeadSize))
			if c.InvFreq != nil {
				a = float64(p) * c.InvFreq[i]
			}
			cos[p*half+i], sin[p*half+i] = float32(math.Cos(a)), float32(math.Sin(a))
		}
	}
	return cos, sin
}

// nativeInitialWeights are the weights native.NewWithOptions draws for
// cfg, lora and seed (the base in float32 whatever the CPU); with
// loadedBase the base's matrices are zero, to be loaded, and the value
// head and adapters those the native engine draws for a loaded base
// (native.Options.LoadedBase), so that both engines start alike.
func nativeInitialWeights(cfg native.Config, lora native.LoRAConfig, seed uint64, loadedBase bool) ([]Tensor, error) {
	m, err := native.NewWithOptions(cfg, native.Options{LoRA: lora, BaseStorage: native.MatmulFP32, LoadedBase: loadedBase}, seed)
	if err != nil {
		return nil, fmt.Errorf("policy gomlx: initial weights: %w", err)
	}
	ps := m.Params()
	out := make([]Tensor, len(ps))
	for i, p := range ps {
		out[i] = Tensor{Name: p.Name, Shape: p.Shape, F32: p.Data}
	}
	return out, nil
}

// paramTensor is w as the tensor variable p holds: float32, or bfloat16
// (rounded to nearest even) when p is stored so.
func paramTensor(p GomlxParam, w []float32) *tensors.Tensor {
	if !p.BF16 {
		return tensors.FromFlatDataAndDimensions(slices.Clone(w), p.Shape...)
	}
	h := make([]bfloat16.BFloat16, len(w))
	for i, x := range w {
		h[i] = bfloat16.FromFloat32(x)
	}
	return tensors.FromFlatDataAndDimensions(h, p.Shape...)
}

// tensorF32 copies a variable's value as float32 (widening bfloat16).
func tensorF32(t *tensors.Tensor) ([]float32, error) {
	var out []float32
	var ferr error
	err := t.ConstFlatData(func(flat any) {
		switch f := flat.(type) {
		case []float32:
			out = slices.Clone(f)
		case []bfloat16.BFloat16:
			out = make([]float32, len(f))
			for i, h := range f {
				out[i] = h.Float32()
			}
		default:
			ferr = fmt.Errorf("dtype %s is not a weight's", t.DType())
		}
	})
	if err == nil {
		err = ferr
	}
	return out, err
}

// The graphs of an architecture engine. Variables are read by their full
// names (the store holds every one from SetWeights on), so no layer
// creates any: a missing one is a panic the graph's Exec returns as an
// error.

// variable is the node of the variable named name in g, as stored.
func (e *gomlxEngine) variable(g *Graph, name string) *Node {
	v := e.store.GetVariable(name)
	if v == nil {
		exceptions.Panicf("policy gomlx: no variable %s", name)
	}
	return v.NodeValue(g)
}

// f32 widens a bfloat16 base weight for a float32 product.
func f32(x *Node) *Node {
	if x.DType() == dtypes.Float32 {
		return x
	}
	return ConvertDType(x, dtypes.Float32)
}

// dropout is one graph's adapter dropout: rng is the RNG state, advanced
// by every mask drawn (in the order the graph is built, so a forward pass
// and the train step's recomputation of it draw the same masks from the
// same state). A nil dropout drops nothing.
type dropout struct {
	rng *Node
	p   float64
}

// newDropout returns the dropout of a graph given its RNG state input
// (nil: none).
func (e *gomlxEngine) newDropout(rng *Node) *dropout {
	if rng == nil || e.arch == nil || e.arch.lora.Dropout == 0 {
		return nil
	}
	return &dropout{rng: rng, p: e.arch.lora.Dropout}
}

// apply zeroes each value of x with probability p and scales the others
// by 1/(1-p).
func (d *dropout) apply(x *Node) *Node {
	if d == nil {
		return x
	}
	var u *Node
	d.rng, u = RandomUniform(d.rng, x.Shape())
	keep := ConvertDType(GreaterOrEqual(u, Scalar(x.Graph(), x.DType(), d.p)), x.DType())
	return Mul(x, MulScalar(keep, 1/(1-d.p)))
}

// archEmbed maps tokens [B,S] to [B,S,D].
func (e *gomlxEngine) archEmbed(tokens *Node) *Node {
	table := e.variable(tokens.Graph(), "/token_embed/embeddings")
	return f32(Gather(table, InsertAxes(tokens, -1)))
}

// rmsNorm is x·rsqrt(mean(x²)+eps)·gain over the last axis (as a
// division by the square root: GoMLX has no gradient of Rsqrt).
func rmsNorm(x, gain *Node, eps float64) *Node {
	ms := ReduceAndKeep(Square(x), ReduceMean, -1)
	return Mul(Div(x, Sqrt(AddScalar(ms, eps))), ExpandLeftToRank(gain, x.Rank()))
}

// archNorm applies the norm named prefix (ln_attn, ln_ffn, ln_final) to
// x over its last axis: RMSNorm, or LayerNorm with native's eps.
func (e *gomlxEngine) archNorm(prefix string, x *Node) *Node {
	g := x.Graph()
	if e.arch.rms() {
		return rmsNorm(x, e.variable(g, prefix+"/rms_normalization/gain"), e.arch.c.NormEps)
	}
	r := x.Rank()
	mean := ReduceAndKeep(x, ReduceMean, -1)
	xc := Sub(x, mean)
	variance := ReduceAndKeep(Square(xc), ReduceMean, -1)
	y := Div(xc, Sqrt(AddScalar(variance, e.arch.c.NormEps)))
	gain := ExpandLeftToRank(e.variable(g, prefix+"/layer_normalization/gain"), r)
	offset := ExpandLeftToRank(e.variable(g, prefix+"/layer_normalization/offset"), r)
	return Add(Mul(y, gain), offset)
}

// archLinear is block l's dense layer t on x [..., in]: x·W (+ b), plus
// the adapter's scale·(dropout(x)·A)·B when the layer has one. Under LoRA
// W and b are frozen variables (not trainable: the gradient graphs take
// no derivative with respect to them and AdamW keeps no moments for
// them) while the gradient still flows through W to x; a bfloat16 W is
// widened first.
func (e *gomlxEngine) archLinear(l, t int, x *Node, drop *dropout) *Node {
	a, g := e.arch, x.Graph()
	name := fmt.Sprintf("/block_%d/%s", l, a.targetName(t))
	var bias *Node
	if a.bias(t) {
		bias = e.variable(g, name+"/dense/biases")
	}
	y := nn.Dense(x, f32(e.variable(g, name+"/dense/weights")), bias, compute.DenseLayoutInputOutputs)
	if !a.on[t] {
		return y
	}
	u := nn.Dense(drop.apply(x), e.variable(g, name+"/lora_a"), nil, compute.DenseLayoutInputOutputs)
	u = MulScalar(u, a.scale)
	return Add(y, nn.Dense(u, e.variable(g, name+"/lora_b"), nil, compute.DenseLayoutInputOutputs))
}

// archBlock is block l of an architecture engine, with block's contract
// (engine_gomlx.go): x [B,S,D]; mask broadcastable to [B,S,H,Skv]; with
// caches ([B,Ctx,KVHeads,HeadSize]) the new keys and values are written
// where write is 1 and attention runs over the cache. It returns the new
// x and the keys and values attention used.
func (e *gomlxEngine) archBlock(l int, x, positions, mask, cacheK, cacheV, write *Node, drop *dropout) (out, k, v *Node) {
	c := e.arch.c
	g := x.Graph()
	b, s := x.Shape().Dimensions[0], x.Shape().Dimensions[1]
	dh := c.HeadSize
	p := fmt.Sprintf("/block_%d/", l)
	y := e.archNorm(p+"ln_attn", x)
	q := Reshape(e.archLinear(l, tgQ, y, drop), b, s, c.Heads, dh)
	k = Reshape(e.archLinear(l, tgK, y, drop), b, s, c.KVHeads, dh)
	v = Reshape(e.archLinear(l, tgV, y, drop), b, s, c.KVHeads, dh)
	if c.QKNorm {
		q = rmsNorm(q, e.variable(g, p+"q_norm/rms_normalization/gain"), c.NormEps)
		k = rmsNorm(k, e.variable(g, p+"k_norm/rms_normalization/gain"), c.NormEps)
	}
	q, k = e.rope(q, positions), e.rope(k, positions)
	if cacheK != nil {
		k, v = cacheWrite(cacheK, k, write), cacheWrite(cacheV, v, write)
	}
	att, _ := attention.Core(q, k, v, attention.LayoutBSHD, attention.CoreOptions{AttentionMask: mask})
	x = Add(x, e.archLinear(l, tgOut, Reshape(att, b, s, c.Heads*dh), drop))
	y = e.archNorm(p+"ln_ffn", x)
	if e.arch.swiglu() {
		gate := e.archLinear(l, tgFFNIn, y, drop)
		y = Mul(activation.Apply(activation.TypeSwish, gate), e.archLinear(l, tgFFNUp, y, drop))
	} else {
		y = activation.Apply(activation.TypeGelu, e.archLinear(l, tgFFNIn, y, drop))
	}
	return Add(x, e.archLinear(l, tgFFNOut, y, drop)), k, v
}

// archHeads applies the final norm, the LM head (h·Eᵀ when tied) and the
// value head to hidden states [K, D]: logits [K, V] and values [K].
func (e *gomlxEngine) archHeads(x *Node) (logits, values *Node) {
	c, g := e.arch.c, x.Graph()
	x = e.archNorm("/ln_final", x)
	if c.TiedEmbed {
		logits = Einsum("kd,vd->kv", x, f32(e.variable(g, "/token_embed/embeddings")))
	} else {
		var bias *Node
		if !c.NoLMBias {
			bias = e.variable(g, "/lm_head/dense/biases")
		}
		logits = nn.Dense(x, f32(e.variable(g, "/lm_head/dense/weights")), bias, compute.DenseLayoutInputOutputs)
	}
	if e.optim.DetachValue {
		x = StopGradient(x) // the critic learns without moving the trunk
	}
	values = nn.Dense(x, e.variable(g, "/value_head/dense/weights"), e.variable(g, "/value_head/dense/biases"), compute.DenseLayoutInputOutputs)
	return logits, Squeeze(values, -1)
}

// dropoutState is the RNG state of the next training step's masks, a
// function of the seed and the optimiser's global step (saved with its
// state, so a resumed run draws new masks, not the first ones again).
func (e *gomlxEngine) dropoutState() (*tensors.Tensor, error) {
	var step int64
	if v := e.store.GetVariable("/global_step"); v != nil {
		t, err := v.Value()
		if err != nil {
			return nil, fmt.Errorf("policy gomlx: global step: %w", err)
		}
		s, err := tensors.CopyFlatData[int64](t)
		if err != nil || len(s) != 1 {
			return nil, fmt.Errorf("policy gomlx: global step of shape %s: %v", t.Shape(), err)
		}
		step = s[0]
	}
	st, err := RNGStateFromSeed(int64(mix64(e.seed ^ mix64(uint64(step)))))
	if err != nil {
		return nil, fmt.Errorf("policy gomlx: dropout state: %w", err)
	}
	return st, nil
}

// mix64 is SplitMix64's output function: nearby seeds and steps give
// unrelated states.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
