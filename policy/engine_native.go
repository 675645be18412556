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
	// the rows asked for: a cache is tens to hundreds of MB (rows x Ctx
	// keys and values per layer), and memory allocated afresh for each
	// Generate call (each step of a batch of episodes, with fewer rows as
	// they end) is faulted in page by page again (the Go runtime returns
	// freed memory to the kernel).
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

func (e *nativeEngine) TrainStep(b Batch, idx []int32, loss LossFunc, lr float64) (float64, float64, error) {
	if err := b.Check(e.cfg); err != nil {
		return 0, 0, err
	}
	e.m.ZeroGrad()
	if err := e.m.Forward(nativeBatch(b)); err != nil {
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

func (e *nativeEngine) Weights() ([]Tensor, error) {
	var out []Tensor
	for _, p := range e.m.Params() {
		out = append(out, Tensor{Name: p.Name, Shape: slices.Clone(p.Shape), F32: slices.Clone(p.Data)})
	}
	return out, nil
}

func (e *nativeEngine) SetWeights(ws []Tensor) error {
	return copyByName(e.m.Params(), ws, "weight", false)
}

// copyByName copies tensors into the engine's named views; every view
// must be given unless partial.
func copyByName(views []native.Param, ts []Tensor, what string, partial bool) error {
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
		if !slices.Equal(t.Shape, p.Shape) || len(t.F32) != len(p.Data) {
			return fmt.Errorf("policy native: %s %s has shape %v (%d values), the model needs %v", what, p.Name, t.Shape, len(t.F32), p.Shape)
		}
		copy(p.Data, t.F32)
	}
	return nil
}

func (e *nativeEngine) OptimizerState() ([]Tensor, error) {
	var out []Tensor
	for _, p := range e.opt.State() {
		out = append(out, Tensor{Name: p.Name, Shape: slices.Clone(p.Shape), F32: slices.Clone(p.Data)})
	}
	return out, nil
}

func (e *nativeEngine) SetOptimizerState(ts []Tensor) error {
	return copyByName(e.opt.State(), ts, "optimiser state", false)
}

type nativeDecoder struct {
	e      *nativeEngine
	cache  *native.Cache
	logits []float32
	// separate turns prompt sharing off (tests compare against it).
	separate bool
	closed   bool
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
		d.logits, d.closed = d.logits[:rows*e.cfg.Vocab], false
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
	for r := range prompts {
		d.cache.Reset(r)
	}
	// The weights as they are now, packed once for this prefill and the
	// decoding steps after it (the engine's weights do not change while a
	// decoder is in use).
	d.e.m.PackWeights(d.cache)
	if d.separate {
		return d.Extend(prompts)
	}
	src := promptSources(prompts)
	first := make([][]int32, len(prompts))
	for i, s := range src {
		if s == i {
			first[i] = prompts[i]
		}
	}
	logits, err := d.Extend(first)
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
		copy(logits[i*v:(i+1)*v], logits[s*v:(s+1)*v])
	}
	return logits, nil
}

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
