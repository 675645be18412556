package onnxpeer

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/mlerl/mlerl/internal/deps"
	"github.com/mlerl/mlerl/internal/ortenv"
	"github.com/mlerl/mlerl/policy/native"
)

// LibraryRel is where `make setup` installs the ONNX Runtime library,
// relative to the deps folder (see internal/deps).
const LibraryRel = "onnxruntime/libonnxruntime.so.1"

// ErrNoRuntime is wrapped when the ONNX Runtime shared library cannot be
// found or loaded.
var ErrNoRuntime = ortenv.ErrNoRuntime

// Library finds the ONNX Runtime library `make setup` installs. The
// error wraps ErrNoRuntime.
func Library() (string, error) {
	p, err := deps.Find(LibraryRel)
	if err != nil {
		return "", fmt.Errorf("onnxpeer: %w: %v; run `make setup`, which installs it (from the npm package onnxruntime-node)", ErrNoRuntime, err)
	}
	return p, nil
}

// initRuntime loads the ONNX Runtime library once per process
// (ortenv.Init, shared with the embedder), with how to get one when it
// cannot.
func initRuntime(path string) error {
	if err := ortenv.Init(path); err != nil {
		return fmt.Errorf("onnxpeer: %w: run `make setup`, which installs it", err)
	}
	return nil
}

// Options configure [New]. The zero value is the default.
type Options struct {
	// LibraryPath is the ONNX Runtime shared library; empty: [Library].
	LibraryPath string
	// Threads is ONNX Runtime's intra-op thread count; <= 0 means
	// runtime.GOMAXPROCS(0), the size of the native engine's worker pool.
	Threads int
	// NoSpinning turns off the spin-waiting of ONNX Runtime's intra-op
	// threads between tasks (session.intra_op.allow_spinning = 0); by
	// default they spin, as ONNX Runtime's own default.
	NoSpinning bool
	// InPlace decodes with Graphs.DecodeInPlace: the cache stays in one
	// buffer per tensor that the runner updates with each new token's
	// keys and values, instead of Decode's past -> present copy.
	InPlace bool
}

// Runner runs the prefill and decode graphs of an exported policy with
// ONNX Runtime on the CPU. A Runner is not safe for concurrent use.
type Runner struct {
	cfg              native.Config
	threads          int
	inPlace          bool
	newKV            [][]float32 // in place: per layer the new token's keys, then its values [rows, heads, 1, head_dim]
	prefill, decode  *ort.DynamicAdvancedSession
	prefillOutputs   []string
	decodeInputs     []string
	decodeOutputs    []string
	ids              []int64
	logits           []float32 // [rows, vocab] of the last call
	inputs, outputs  []ort.Value
	tensorsToDestroy []ort.Value
}

// New loads the ONNX Runtime library (once per process), and g's
// prefill graph and the decode graph o asks for (Decode, or
// DecodeInPlace) into sessions with the thread settings of o. The
// caller calls Close.
func New(g Graphs, o Options) (*Runner, error) {
	if o.LibraryPath == "" {
		p, err := Library()
		if err != nil {
			return nil, err
		}
		o.LibraryPath = p
	}
	if o.Threads <= 0 {
		o.Threads = runtime.GOMAXPROCS(0)
	}
	if err := initRuntime(o.LibraryPath); err != nil {
		return nil, err
	}
	r := &Runner{cfg: g.Config, threads: o.Threads, inPlace: o.InPlace}
	r.prefillOutputs = []string{Logits}
	r.decodeInputs = []string{InputIDs}
	r.decodeOutputs = []string{Logits}
	decode := g.Decode
	if o.InPlace {
		r.decodeInputs = append(r.decodeInputs, Position)
		decode = g.DecodeInPlace
	}
	for l := range g.Config.Layers {
		r.prefillOutputs = append(r.prefillOutputs, PresentKey(l), PresentValue(l))
		if o.InPlace {
			r.decodeInputs = append(r.decodeInputs, CacheKey(l), CacheValue(l))
			r.decodeOutputs = append(r.decodeOutputs, NewKey(l), NewValue(l))
		} else {
			r.decodeInputs = append(r.decodeInputs, PastKey(l), PastValue(l))
			r.decodeOutputs = append(r.decodeOutputs, PresentKey(l), PresentValue(l))
		}
	}
	opts, err := ort.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("onnxpeer: session options: %w", err)
	}
	defer opts.Destroy()
	if err := opts.SetIntraOpNumThreads(o.Threads); err != nil {
		return nil, fmt.Errorf("onnxpeer: setting %d intra-op threads: %w", o.Threads, err)
	}
	if err := opts.SetInterOpNumThreads(1); err != nil {
		return nil, fmt.Errorf("onnxpeer: setting 1 inter-op thread: %w", err)
	}
	if err := opts.AddSessionConfigEntry("session.intra_op.allow_spinning", strconv.Itoa(boolInt(!o.NoSpinning))); err != nil {
		return nil, fmt.Errorf("onnxpeer: setting session.intra_op.allow_spinning: %w", err)
	}
	r.prefill, err = ort.NewDynamicAdvancedSessionWithONNXData(g.Prefill, []string{InputIDs}, r.prefillOutputs, opts)
	if err != nil {
		return nil, fmt.Errorf("onnxpeer: loading the prefill graph: %w", err)
	}
	r.decode, err = ort.NewDynamicAdvancedSessionWithONNXData(decode, r.decodeInputs, r.decodeOutputs, opts)
	if err != nil {
		r.prefill.Destroy()
		return nil, fmt.Errorf("onnxpeer: loading the decode graph: %w", err)
	}
	return r, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Threads is the intra-op thread count of the sessions.
func (r *Runner) Threads() int { return r.threads }

// Config is the shape of the exported model.
func (r *Runner) Config() native.Config { return r.cfg }

// Close releases the sessions (the process-wide runtime stays loaded).
func (r *Runner) Close() error {
	var errs []error
	for _, s := range []*ort.DynamicAdvancedSession{r.prefill, r.decode} {
		if s != nil {
			errs = append(errs, s.Destroy())
		}
	}
	r.prefill, r.decode = nil, nil
	return errors.Join(errs...)
}

// Cache holds the keys and values of every layer for a fixed number of
// rows that grow together (every row holds the same number of tokens),
// in two buffers per tensor. With Decode, a step reads the past from
// one, [rows, heads, n, head_dim], and writes the extended cache into
// the other. In place, buffer 0 holds it as [rows, heads, capacity,
// head_dim] and buffer 1 is prefill's scratch.
type Cache struct {
	rows, capacity, n int
	k, v              [2][][]float32 // [buffer][layer], capacity tokens of room per row
	cur               int            // the buffer that holds the cache now
}

// NewCache returns an empty cache of rows sequences of up to capacity
// tokens each (capacity <= Ctx).
func (r *Runner) NewCache(rows, capacity int) (*Cache, error) {
	c := r.cfg
	if rows <= 0 || capacity <= 0 || capacity > c.Ctx {
		return nil, fmt.Errorf("onnxpeer: cache of %d rows x %d tokens: need rows > 0 and 0 < capacity <= ctx %d", rows, capacity, c.Ctx)
	}
	cache := &Cache{rows: rows, capacity: capacity}
	size := rows * c.Heads * capacity * c.HeadDim()
	for b := range 2 {
		for range c.Layers {
			cache.k[b] = append(cache.k[b], make([]float32, size))
			cache.v[b] = append(cache.v[b], make([]float32, size))
		}
	}
	return cache, nil
}

// Rows is the number of sequences the cache holds.
func (c *Cache) Rows() int { return c.rows }

// Len is the number of tokens each row holds.
func (c *Cache) Len() int { return c.n }

// tensor wraps data as an ONNX Runtime tensor of shape dims, to be
// destroyed after the run.
func tensor[T ort.TensorData](r *Runner, data []T, dims ...int) (ort.Value, error) {
	s := make(ort.Shape, len(dims))
	for i, d := range dims {
		s[i] = int64(d)
	}
	t, err := ort.NewTensor(s, data)
	if err != nil {
		return nil, err
	}
	r.tensorsToDestroy = append(r.tensorsToDestroy, t)
	return t, nil
}

func (r *Runner) destroyTensors() {
	for _, t := range r.tensorsToDestroy {
		t.Destroy()
	}
	r.tensorsToDestroy = r.tensorsToDestroy[:0]
}

// setIDs checks the token ids and fills r.ids.
func (r *Runner) setIDs(tokens [][]int32) error {
	r.ids = r.ids[:0]
	for i, row := range tokens {
		for j, t := range row {
			if t < 0 || int(t) >= r.cfg.Vocab {
				return fmt.Errorf("onnxpeer: row %d, token %d: id %d outside the vocabulary [0, %d)", i, j, t, r.cfg.Vocab)
			}
			r.ids = append(r.ids, int64(t))
		}
	}
	return nil
}

// Prefill empties c and runs prompts (one per cache row, all of the same
// length) through the prefill graph, keeping their keys and values in c.
// It returns the next-token logits [rows*Vocab], owned by the runner and
// valid until its next Prefill or Decode.
func (r *Runner) Prefill(c *Cache, prompts [][]int32) ([]float32, error) {
	cfg := r.cfg
	if len(prompts) != c.rows {
		return nil, fmt.Errorf("onnxpeer: prefill got %d prompts for a cache of %d rows", len(prompts), c.rows)
	}
	t := len(prompts[0])
	for i, p := range prompts {
		if len(p) != t {
			return nil, fmt.Errorf("onnxpeer: prefill: prompt %d has %d tokens, prompt 0 has %d; the rows of one prefill must have the same length", i, len(p), t)
		}
	}
	if t == 0 || t > c.capacity {
		return nil, fmt.Errorf("onnxpeer: prefill: %d tokens per prompt must be in (0, capacity %d]", t, c.capacity)
	}
	if err := r.setIDs(prompts); err != nil {
		return nil, err
	}
	defer r.destroyTensors()
	r.logits = grow(r.logits, c.rows*cfg.Vocab)
	ids, err := tensor(r, r.ids, c.rows, t)
	if err != nil {
		return nil, fmt.Errorf("onnxpeer: prefill input: %w", err)
	}
	r.outputs = r.outputs[:0]
	lg, err := tensor(r, r.logits, c.rows, cfg.Vocab)
	if err != nil {
		return nil, fmt.Errorf("onnxpeer: prefill logits: %w", err)
	}
	r.outputs = append(r.outputs, lg)
	for l := range cfg.Layers {
		for _, buf := range [][]float32{c.k[0][l], c.v[0][l]} {
			x, err := tensor(r, buf, c.rows, cfg.Heads, t, cfg.HeadDim())
			if err != nil {
				return nil, fmt.Errorf("onnxpeer: prefill cache of layer %d: %w", l, err)
			}
			r.outputs = append(r.outputs, x)
		}
	}
	if err := r.prefill.Run([]ort.Value{ids}, r.outputs); err != nil {
		return nil, fmt.Errorf("onnxpeer: running the prefill graph on %d x %d tokens: %w", c.rows, t, err)
	}
	c.cur, c.n = 0, t
	if r.inPlace { // spread each row and head's t slots over capacity
		dh := cfg.HeadDim()
		for l := range cfg.Layers {
			for _, kv := range []*[2][][]float32{&c.k, &c.v} {
				dst, src := kv[1][l], kv[0][l]
				for bh := range c.rows * cfg.Heads {
					copy(dst[bh*c.capacity*dh:bh*c.capacity*dh+t*dh], src[bh*t*dh:(bh+1)*t*dh])
				}
				kv[0][l], kv[1][l] = dst, src
			}
		}
	}
	return r.logits, nil
}

// Decode appends one token to every row of c (tokens[i] to row i) and
// returns the next-token logits [rows*Vocab], owned by the runner and
// valid until its next Prefill or Decode.
func (r *Runner) Decode(c *Cache, tokens []int32) ([]float32, error) {
	cfg := r.cfg
	if len(tokens) != c.rows {
		return nil, fmt.Errorf("onnxpeer: decode got %d tokens for a cache of %d rows", len(tokens), c.rows)
	}
	if c.n == 0 || c.n+1 > c.capacity {
		return nil, fmt.Errorf("onnxpeer: decode: the cache holds %d tokens per row; it must hold at least one (Prefill) and room for one more (capacity %d)", c.n, c.capacity)
	}
	if err := r.setIDs([][]int32{tokens}); err != nil {
		return nil, err
	}
	defer r.destroyTensors()
	r.logits = grow(r.logits, c.rows*cfg.Vocab)
	ids, err := tensor(r, r.ids, c.rows, 1)
	if err != nil {
		return nil, fmt.Errorf("onnxpeer: decode input: %w", err)
	}
	r.inputs, r.outputs = append(r.inputs[:0], ids), r.outputs[:0]
	lg, err := tensor(r, r.logits, c.rows, cfg.Vocab)
	if err != nil {
		return nil, fmt.Errorf("onnxpeer: decode logits: %w", err)
	}
	r.outputs = append(r.outputs, lg)
	if r.inPlace {
		return r.decodeInPlace(c)
	}
	next := 1 - c.cur
	for l := range cfg.Layers {
		for _, pair := range [][2][]float32{{c.k[c.cur][l], c.k[next][l]}, {c.v[c.cur][l], c.v[next][l]}} {
			past, err := tensor(r, pair[0], c.rows, cfg.Heads, c.n, cfg.HeadDim())
			if err != nil {
				return nil, fmt.Errorf("onnxpeer: decode cache of layer %d: %w", l, err)
			}
			present, err := tensor(r, pair[1], c.rows, cfg.Heads, c.n+1, cfg.HeadDim())
			if err != nil {
				return nil, fmt.Errorf("onnxpeer: decode cache of layer %d: %w", l, err)
			}
			r.inputs, r.outputs = append(r.inputs, past), append(r.outputs, present)
		}
	}
	if err := r.decode.Run(r.inputs, r.outputs); err != nil {
		return nil, fmt.Errorf("onnxpeer: running the decode graph on %d rows at position %d: %w", c.rows, c.n, err)
	}
	c.cur, c.n = next, c.n+1
	return r.logits, nil
}

// decodeInPlace is Decode with Graphs.DecodeInPlace, its inputs
// (r.inputs) and outputs (r.outputs) started with the token ids and the
// logits.
func (r *Runner) decodeInPlace(c *Cache) ([]float32, error) {
	cfg := r.cfg
	h, dh := cfg.Heads, cfg.HeadDim()
	pos, err := tensor(r, []int64{int64(c.n)}, 1)
	if err != nil {
		return nil, fmt.Errorf("onnxpeer: decode position: %w", err)
	}
	r.inputs = append(r.inputs, pos)
	if len(r.newKV) != 2*cfg.Layers {
		r.newKV = make([][]float32, 2*cfg.Layers)
	}
	for l := range cfg.Layers {
		for i, buf := range [][]float32{c.k[0][l], c.v[0][l]} {
			x, err := tensor(r, buf, c.rows, h, c.capacity, dh)
			if err != nil {
				return nil, fmt.Errorf("onnxpeer: decode cache of layer %d: %w", l, err)
			}
			r.newKV[2*l+i] = grow(r.newKV[2*l+i], c.rows*h*dh)
			y, err := tensor(r, r.newKV[2*l+i], c.rows, h, 1, dh)
			if err != nil {
				return nil, fmt.Errorf("onnxpeer: decode new keys and values of layer %d: %w", l, err)
			}
			r.inputs, r.outputs = append(r.inputs, x), append(r.outputs, y)
		}
	}
	if err := r.decode.Run(r.inputs, r.outputs); err != nil {
		return nil, fmt.Errorf("onnxpeer: running the in-place decode graph on %d rows at position %d: %w", c.rows, c.n, err)
	}
	for l := range cfg.Layers {
		for i, buf := range [][]float32{c.k[0][l], c.v[0][l]} {
			src := r.newKV[2*l+i]
			for bh := range c.rows * h {
				copy(buf[(bh*c.capacity+c.n)*dh:(bh*c.capacity+c.n+1)*dh], src[bh*dh:(bh+1)*dh])
			}
		}
	}
	c.n++
	return r.logits, nil
}

// Greedy prefills prompts (all of the same length) and decodes n new
// tokens per row, each the argmax of its logits (the lowest id on a
// tie), and returns them [rows][n].
func (r *Runner) Greedy(prompts [][]int32, n int) ([][]int32, error) {
	if len(prompts) == 0 || n <= 0 {
		return nil, fmt.Errorf("onnxpeer: greedy needs prompts and n > 0 (got %d prompts, n %d)", len(prompts), n)
	}
	c, err := r.NewCache(len(prompts), len(prompts[0])+n-1)
	if err != nil {
		return nil, err
	}
	logits, err := r.Prefill(c, prompts)
	if err != nil {
		return nil, err
	}
	v := r.cfg.Vocab
	out := make([][]int32, len(prompts))
	toks := make([]int32, len(prompts))
	for step := range n {
		for i := range toks {
			toks[i] = Argmax(logits[i*v : (i+1)*v])
			out[i] = append(out[i], toks[i])
		}
		if step == n-1 {
			break
		}
		if logits, err = r.Decode(c, toks); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Argmax is the index of the largest value of x, the lowest one on a tie
// (the greedy choice of policy's sampler).
func Argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}
