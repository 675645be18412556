package policy

import (
	"fmt"
	"slices"
	"sync"

	"github.com/mlerl/mlerl/policy/native"
)

// The native engine: policy/native, the CPU engine written for this model
// family (the default on CPU). This file adapts it to Engine.

type nativeEngine struct {
	cfg Config
	m   *native.Model
	opt *native.AdamW

	// spare holds closed decoders for NewDecoder to reuse, reshaped to
	// the rows asked for: a cache is tens to hundreds of MB (each row's
	// prompt and continuation, keys and values per layer), and memory
	// allocated afresh for each Generate call (each step of a batch of
	// episodes, with fewer rows as they end) is faulted in page by page
	// again (the Go runtime returns freed memory to the kernel).
	mu    sync.Mutex
	spare []*nativeDecoder
}

// maxSpareDecoders bounds the closed decoders an engine keeps (the
// largest ones): decoders in use at once, as concurrent evaluations have.
const maxSpareDecoders = 2

// NewNativeEngine returns a native engine for cfg with the given weights
// (nil: InitWeights with seed 0).
func NewNativeEngine(cfg Config, weights []Tensor) (Engine, error) {
	if err := cfg.ValidateWithVocab(); err != nil {
		return nil, err
	}
	m, err := native.New(native.Config{Vocab: cfg.Vocab, DModel: cfg.DModel, Heads: cfg.Heads, Layers: cfg.Layers,
		FFN: cfg.FFNWidth(), Ctx: cfg.Ctx, RoPEBase: cfg.Base()}, 0)
	if err != nil {
		return nil, fmt.Errorf("policy native: %w", err)
	}
	e := &nativeEngine{cfg: cfg, m: m}
	e.opt = native.NewAdamW(m, native.DefaultAdamWConfig())
	if weights == nil {
		weights = InitWeights(cfg, 0)
	}
	if err := e.SetWeights(weights); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *nativeEngine) Name() string   { return EngineNative }
func (e *nativeEngine) Config() Config { return e.cfg }
func (e *nativeEngine) Close() error   { return nil }

func (e *nativeEngine) SetOptim(o OptimConfig) {
	e.opt.Config = native.AdamWConfig{Beta1: o.Beta1, Beta2: o.Beta2, Eps: 1e-8, WeightDecay: o.WeightDecay, ClipNorm: o.ClipNorm}
	e.m.DetachValue = o.DetachValue
}

func nativeBatch(b Batch) native.Batch {
	return native.Batch{B: b.B, S: b.S, Tokens: b.Tokens, Positions: b.Positions, Segments: b.Segments, Prefix: b.Prefix}
}

func (e *nativeEngine) Logits(b Batch, idx []int32) ([]float32, []float32, error) {
	if err := b.Check(e.cfg); err != nil {
		return nil, nil, err
	}
	if err := e.m.Forward(nativeBatch(b)); err != nil {
		return nil, nil, fmt.Errorf("policy native: %w", err)
	}
	logits, values, err := e.m.Heads(idx)
	if err != nil {
		return nil, nil, fmt.Errorf("policy native: %w", err)
	}
	return slices.Clone(logits), slices.Clone(values), nil
}

// newNativeArch builds the native engine of a non-standard architecture
// (a Hugging Face family, LoRA): initialised from seed (the base's
// matrices left to be loaded, when there is a base), then base and
// weights written over it by name.
func newNativeArch(cfg Config, seed uint64, base baseSource, weights []Tensor) (Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opt := native.Options{BaseStorage: cfg.BaseStorage, Recompute: cfg.Recompute, LoadedBase: base.load != nil}
	if cfg.BaseStorage == StorageQuant {
		// Each matrix as the GGUF file stores it: the blocks it keeps,
		// float32 for the rest.
		opt.BaseStorage, opt.MatrixStorage = MatmulFP32, base.storage
	}
	if cfg.LoRA != nil {
		opt.LoRA = cfg.LoRA.Native()
	} else if cfg.BaseStorage != MatmulFP32 && cfg.BaseStorage != "" {
		// A base model stored as a LoRA model's is (frozen: only the
		// value head trains), computing what such a model with fresh
		// adapters computes.
		opt.Frozen = true
	}
	m, err := native.NewWithOptions(cfg.Native(), opt, seed)
	if err != nil {
		return nil, fmt.Errorf("policy native: %w", err)
	}
	if cfg.QuantActivations != "" {
		if _, err := m.SetQuantActivations(cfg.QuantActivations); err != nil {
			return nil, fmt.Errorf("policy native: %w", err)
		}
	}
	e := &nativeEngine{cfg: cfg, m: m}
	e.opt = native.NewAdamW(m, native.DefaultAdamWConfig())
	shapes := map[string][]int{}
	for _, p := range m.Params() {
		shapes[p.Name] = p.Shape
	}
	set := func(t Tensor) error {
		want, ok := shapes[t.Name]
		switch {
		case !ok:
			return fmt.Errorf("policy native: the model has no weight %s (%s)", t.Name, cfg.describeArch())
		case t.Blocks != nil && slices.Equal(want, t.Shape):
			if err := m.SetParamBlocks(t.Name, t.Quant, t.Blocks); err != nil {
				return fmt.Errorf("policy native: %w", err)
			}
			return nil
		case !slices.Equal(want, t.Shape) || len(t.F32) != (Tensor{Shape: want}).size():
			return fmt.Errorf("policy native: weight %s has shape %v (%d values), the model needs %v", t.Name, t.Shape, len(t.F32), want)
		}
		return m.SetParam(t.Name, t.F32)
	}
	if base.load != nil {
		if err := base.load(set); err != nil {
			return nil, err
		}
	}
	for _, t := range weights {
		if err := set(t); err != nil {
			return nil, err
		}
	}
	return e, nil
}

func (t Tensor) size() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// describeArch names the architecture in errors.
func (c Config) describeArch() string {
	lora := "no adapters"
	if c.LoRA != nil {
		lora = fmt.Sprintf("LoRA rank %d on %v", c.LoRA.Rank, c.LoRA.Targets)
	}
	return fmt.Sprintf("%d layers of width %d, %s", c.Layers, c.DModel, lora)
}

// TrainStep runs the forward in training mode: LoRA's dropout draws its
// masks there (and nowhere else; mlerl's model has none).
func (e *nativeEngine) TrainStep(b Batch, idx []int32, loss LossFunc, lr float64) (float64, float64, error) {
	if err := b.Check(e.cfg); err != nil {
		return 0, 0, err
	}
	e.m.ZeroGrad()
	e.m.SetTraining(true)
	err := e.m.Forward(nativeBatch(b))
	e.m.SetTraining(false)
	if err != nil {
		return 0, 0, fmt.Errorf("policy native: %w", err)
	}
	logits, values, err := e.m.Heads(idx)
	if err != nil {
		return 0, 0, fmt.Errorf("policy native: %w", err)
	}
	dLogits, dValues := make([]float32, len(logits)), make([]float32, len(values))
	l := loss(logits, values, dLogits, dValues)
	if err := e.m.Backward(idx, dLogits, dValues); err != nil {
		return 0, 0, fmt.Errorf("policy native: %w", err)
	}
	return l, e.opt.Step(e.m, lr), nil
}

func (e *nativeEngine) Gradients(b Batch, idx []int32, loss LossFunc) (float64, []Tensor, error) {
	if err := b.Check(e.cfg); err != nil {
		return 0, nil, err
	}
	e.m.ZeroGrad()
	if err := e.m.Forward(nativeBatch(b)); err != nil {
		return 0, nil, fmt.Errorf("policy native: %w", err)
	}
	logits, values, err := e.m.Heads(idx)
	if err != nil {
		return 0, nil, fmt.Errorf("policy native: %w", err)
	}
	dLogits, dValues := make([]float32, len(logits)), make([]float32, len(values))
	l := loss(logits, values, dLogits, dValues)
	if err := e.m.Backward(idx, dLogits, dValues); err != nil {
		return 0, nil, fmt.Errorf("policy native: %w", err)
	}
	var out []Tensor
	for _, p := range e.m.Params() {
		out = append(out, Tensor{Name: p.Name, Shape: slices.Clone(p.Shape), F32: slices.Clone(p.Grad)})
	}
	return l, out, nil
}

func (e *nativeEngine) Weights() ([]Tensor, error) { return e.weights(false) }

// TrainableWeights is Weights without a frozen base: the adapters and the
// value head of a LoRA model (every weight otherwise).
func (e *nativeEngine) TrainableWeights() ([]Tensor, error) { return e.weights(true) }

func (e *nativeEngine) weights(trainable bool) ([]Tensor, error) {
	var out []Tensor
	for _, p := range e.m.Params() {
		if trainable && !p.Trainable() {
			continue
		}
		data := slices.Clone(p.Data)
		if data == nil { // stored in bfloat16: widened
			var err error
			if data, err = e.m.ParamValues(p.Name); err != nil {
				return nil, fmt.Errorf("policy native: %w", err)
			}
		}
		out = append(out, Tensor{Name: p.Name, Shape: slices.Clone(p.Shape), F32: data})
	}
	return out, nil
}

func (e *nativeEngine) SetWeights(ws []Tensor) error {
	return copyByName(e.m, e.m.Params(), ws, "weight", false)
}

// copyByName copies tensors into the engine's named views; every view
// must be given unless partial. A view stored in bfloat16 (a frozen base)
// is written through m.SetParam, which rounds into it; m is nil for views
// that are not the model's (the optimiser's).
func copyByName(m *native.Model, views []native.Param, ts []Tensor, what string, partial bool) error {
	byName := map[string]Tensor{}
	for _, t := range ts {
		byName[t.Name] = t
	}
	for _, p := range views {
		t, ok := byName[p.Name]
		if !ok {
			if partial {
				continue
			}
			return fmt.Errorf("policy native: %s %s missing", what, p.Name)
		}
		if !slices.Equal(t.Shape, p.Shape) || len(t.F32) != p.Size() {
			return fmt.Errorf("policy native: %s %s has shape %v (%d values), the model needs %v", what, p.Name, t.Shape, len(t.F32), p.Shape)
		}
		if p.Data == nil && m != nil {
			if err := m.SetParam(p.Name, t.F32); err != nil {
				return fmt.Errorf("policy native: %w", err)
			}
			continue
		}
		copy(p.Data, t.F32)
	}
	return nil
}

// dropoutStepName is the optimiser-state entry of a LoRA model with
// dropout that counts its training forwards: a resumed run continues the
// sequence of dropout masks instead of repeating its first ones.
const dropoutStepName = "/native/dropout_step"

func (e *nativeEngine) OptimizerState() ([]Tensor, error) {
	var out []Tensor
	for _, p := range e.opt.State() {
		out = append(out, Tensor{Name: p.Name, Shape: slices.Clone(p.Shape), F32: slices.Clone(p.Data)})
	}
	if lo := e.m.LoRA(); lo.Rank > 0 && lo.Dropout > 0 {
		out = append(out, Tensor{Name: dropoutStepName, Shape: []int{1}, I64: []int64{int64(e.m.DropoutStep())}})
	}
	return out, nil
}

func (e *nativeEngine) SetOptimizerState(ts []Tensor) error {
	for _, t := range ts {
		if t.Name == dropoutStepName && len(t.I64) == 1 {
			e.m.SetDropoutStep(uint64(t.I64[0]))
		}
	}
	return copyByName(nil, e.opt.State(), ts, "optimiser state", false)
}

type nativeDecoder struct {
	e      *nativeEngine
	cache  *native.Cache
	logits []float32
	// separate turns prompt sharing off (tests compare against it).
	separate bool
	closed   bool
	expect   int // ExpectNew's tokens after each prompt (0: not said)
}

func (e *nativeEngine) NewDecoder(rows int) (Decoder, error) {
	e.mu.Lock()
	best := -1 // the smallest spare that holds rows
	for i, d := range e.spare {
		if m := d.cache.MaxRows(); m >= rows && (best < 0 || m < e.spare[best].cache.MaxRows()) {
			best = i
		}
	}
	if best >= 0 {
		d := e.spare[best]
		e.spare = slices.Delete(e.spare, best, best+1)
		e.mu.Unlock()
		if err := d.cache.Reshape(rows); err != nil {
			return nil, fmt.Errorf("policy native: %w", err)
		}
		d.logits, d.closed, d.expect = d.logits[:rows*e.cfg.Vocab], false, 0
		return d, nil
	}
	e.mu.Unlock()
	c, err := e.m.NewCache(rows, e.cfg.Ctx)
	if err != nil {
		return nil, fmt.Errorf("policy native: %w", err)
	}
	return &nativeDecoder{e: e, cache: c, logits: make([]float32, rows*e.cfg.Vocab)}, nil
}

// Prefill runs each distinct prompt once; the rows that repeat it share
// its cache row's tokens (decoding reads them once for all its rows) and
// get a copy of its logits.
func (d *nativeDecoder) Prefill(prompts [][]int32) ([]float32, error) {
	if len(prompts) != d.cache.Rows() {
		return nil, fmt.Errorf("policy native: %d prompts for %d rows", len(prompts), d.cache.Rows())
	}
	d.cache.ResetAll()
	// The weights as they are now, packed once for this prefill and the
	// decoding steps after it (the engine's weights do not change while a
	// decoder is in use).
	d.e.m.PackWeights(d.cache)
	// Each row's storage sized once for its prompt and the tokens it may
	// decode (ExpectNew), where the caller said how many.
	reserve := func(r int) error {
		if d.expect <= 0 {
			return nil
		}
		if err := d.cache.Reserve(r, min(len(prompts[r])+d.expect, d.cache.Capacity())); err != nil {
			return fmt.Errorf("policy native: %w", err)
		}
		return nil
	}
	if d.separate {
		for r := range prompts {
			if err := reserve(r); err != nil {
				return nil, err
			}
		}
		return d.prefillChunks(prompts)
	}
	src := promptSources(prompts)
	first := make([][]int32, len(prompts))
	for i, s := range src {
		if s == i {
			first[i] = prompts[i]
			if err := reserve(i); err != nil {
				return nil, err
			}
		}
	}
	logits, err := d.prefillChunks(first)
	if err != nil {
		return nil, err
	}
	v := d.e.cfg.Vocab
	for i, s := range src {
		if s == i {
			continue
		}
		if err := d.cache.Share(i, s); err != nil {
			return nil, fmt.Errorf("policy native: %w", err)
		}
		if err := reserve(i); err != nil {
			return nil, err
		}
		copy(logits[i*v:(i+1)*v], logits[s*v:(s+1)*v])
	}
	return logits, nil
}

// prefillChunkTokens bounds the tokens of one prefill forward. An
// Extend call's activations grow with its tokens (about 34 KB a token
// for SmolLM2-135M) and the model keeps its buffers at their largest, so
// 24 distinct 600-token prompts prefilled in one call would hold half a
// GB of activations for the rest of the run; in groups of 2,048 tokens
// they hold a seventh of that, and a product of 2,048 rows is as fast
// per token as a longer one (the weights are packed once per prefill).
var prefillChunkTokens = 2048 // a var for the tests

// prefillChunks extends the rows given tokens in groups of at most
// prefillChunkTokens tokens (a longer prompt alone), in row order, and
// returns the decoder's logits (every extended row's entry set).
func (d *nativeDecoder) prefillChunks(tokens [][]int32) ([]float32, error) {
	part := make([][]int32, len(tokens))
	n := 0
	flush := func() error {
		if n == 0 {
			return nil
		}
		_, err := d.Extend(part)
		clear(part)
		n = 0
		return err
	}
	for i, t := range tokens {
		if len(t) == 0 {
			continue
		}
		if n > 0 && n+len(t) > prefillChunkTokens {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		part[i], n = t, n+len(t)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return d.logits, nil
}

// ExpectNew tells the decoder that each row will grow by at most n
// tokens after its prompt, so that Prefill sizes the rows' storage once
// (Generate calls it with MaxNewTokens).
func (d *nativeDecoder) ExpectNew(n int) { d.expect = n }

func (d *nativeDecoder) Extend(tokens [][]int32) ([]float32, error) {
	var rows []int
	var toks [][]int32
	for r, t := range tokens {
		if len(t) > 0 {
			rows, toks = append(rows, r), append(toks, t)
		}
	}
	if len(rows) == 0 {
		return d.logits, nil
	}
	out, err := d.e.m.Extend(d.cache, rows, toks)
	if err != nil {
		return nil, fmt.Errorf("policy native: %w", err)
	}
	v := d.e.cfg.Vocab
	for i, r := range rows {
		copy(d.logits[r*v:(r+1)*v], out[i*v:(i+1)*v])
	}
	return d.logits, nil
}

// Close hands the decoder's cache to the engine for its next NewDecoder
// of at most as many rows (reshaped then, and reset when prefilled).
func (d *nativeDecoder) Close() {
	if d.closed {
		return
	}
	d.closed = true
	e := d.e
	e.mu.Lock()
	defer e.mu.Unlock()
	e.spare = append(e.spare, d)
	if len(e.spare) > maxSpareDecoders {
		small := 0
		for i, s := range e.spare {
			if s.cache.MaxRows() < e.spare[small].cache.MaxRows() {
				small = i
			}
		}
		e.spare = slices.Delete(e.spare, small, small+1)
	}
}

// SetMatmul sets the precision of the model's training products (see
// SetMatmul in engine.go).
func (e *nativeEngine) SetMatmul(mode string) (string, error) { return e.m.SetMatmul(mode) }
