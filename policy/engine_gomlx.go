package policy

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	_ "github.com/gomlx/compute/gobackend" // the pure-Go backend; GOMLX_BACKEND selects another
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/layers"
	"github.com/gomlx/gomlx/ml/layers/activation"
	"github.com/gomlx/gomlx/ml/layers/attention"
	"github.com/gomlx/gomlx/ml/layers/norm"
	"github.com/gomlx/gomlx/ml/model"
	"github.com/gomlx/gomlx/ml/train/optimizer"
)

// The GoMLX engine: the policy as GoMLX graphs, for XLA on GPUs
// (GOMLX_BACKEND=xla:cuda loads a PJRT plugin) and as the reference the
// native engine is tested against. Graphs are compiled per input shape
// (by XLA, seconds each on a GPU), so every varying size is padded up to
// a bucket (see bucket): a batch's rows and width, its head positions,
// a decoder's rows, distinct prompts and prompt length.
//
// NewGoMLXEngine builds mlerl's own model; NewGomlxEngineArch
// (engine_gomlx_hf.go) any architecture of policy/native, the Hugging
// Face families and LoRA among them, on the same machinery.

// DefaultGoBackendConfig is the pure-Go backend's configuration when
// GOMLX_BACKEND is not set. Ops run one after another (each op still uses
// every core): in compute v0.1.2, running graph nodes in parallel while
// large ops fan out inside them can exhaust the shared worker pool and
// deadlock (observed on 2 cores with the benchmark model).
const DefaultGoBackendConfig = "go:ops_sequential"

// NewBackend returns the backend named by $GOMLX_BACKEND (e.g. "xla:cuda"
// on a GPU machine), or the pure-Go backend with DefaultGoBackendConfig.
func NewBackend() (compute.Backend, error) {
	if _, ok := os.LookupEnv(compute.ConfigEnvVar); ok {
		return compute.New()
	}
	return compute.NewWithConfig(DefaultGoBackendConfig)
}

type gomlxEngine struct {
	cfg Config
	// arch is the architecture of an engine of NewGomlxEngineArch
	// (engine_gomlx_hf.go); nil: mlerl's own model.
	arch *gomlxArch
	// params are the weights in checkpoint order, with whether each
	// trains (every one of mlerl's model) and how it is stored.
	params   []GomlxParam
	seed     uint64 // keys dropout's masks (NewGomlxEngineArch)
	backend  compute.Backend
	store    *model.Store
	optim    OptimConfig
	cos, sin []float32 // RoPE tables [Ctx, HeadDim/2]

	logits  *model.Exec
	grads   *model.Exec
	train   *model.Exec
	prefill *model.Exec
	decode  *model.Exec

	// graphs records, per graph name, the compiled graphs that ran (one
	// per combination of input shapes): the tests count them. graphsMu
	// guards it: decoders and evaluations may call from several goroutines.
	graphsMu sync.Mutex
	graphs   map[string]map[GraphId]bool
	// exact runs every shape as given, unpadded (tests compare against it).
	exact bool
}

// run executes x (the graph called name) and records which of its
// compiled graphs ran.
func (e *gomlxEngine) run(name string, x *model.Exec, args ...any) ([]*tensors.Tensor, error) {
	outs, g, err := x.CallWithGraph(args...)
	if err != nil {
		return nil, err
	}
	e.graphsMu.Lock()
	defer e.graphsMu.Unlock()
	if e.graphs == nil {
		e.graphs = map[string]map[GraphId]bool{}
	}
	if e.graphs[name] == nil {
		e.graphs[name] = map[GraphId]bool{}
	}
	e.graphs[name][g.GraphId()] = true
	return outs, nil
}

// NewGoMLXEngine returns a GoMLX engine for cfg with the given weights
// (nil: InitWeights with seed 0) on backend (nil: NewBackend()).
func NewGoMLXEngine(cfg Config, backend compute.Backend, weights []Tensor) (Engine, error) {
	if err := cfg.ValidateWithVocab(); err != nil {
		return nil, err
	}
	if backend == nil {
		var err error
		if backend, err = NewBackend(); err != nil {
			return nil, fmt.Errorf("policy: GoMLX backend: %w", err)
		}
	}
	e := &gomlxEngine{cfg: cfg, backend: backend, store: model.NewStore()}
	for _, p := range cfg.Params() {
		e.params = append(e.params, GomlxParam{ParamShape: p, Trainable: true})
	}
	e.cos, e.sin = RoPETable(cfg)
	if weights == nil {
		weights = InitWeights(cfg, 0)
	}
	if err := e.SetWeights(weights); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *gomlxEngine) Name() string   { return EngineGoMLX }
func (e *gomlxEngine) Config() Config { return e.cfg }

// SetOptim sets the optimiser; the graphs that depend on it (the train
// step, and the gradients through DetachValue's stop) are rebuilt.
func (e *gomlxEngine) SetOptim(o OptimConfig) { e.optim = o; e.train, e.grads = nil, nil }
func (e *gomlxEngine) Close() error           { return nil }

// embed maps tokens [B,S] to [B,S,D].
func (e *gomlxEngine) embed(scope *model.Scope, tokens *Node) *Node {
	if e.arch != nil {
		return e.archEmbed(tokens)
	}
	// Explicit trailing index axis: layers.Embedding would otherwise read a
	// [B,1] input (one decode step) as B indices.
	return layers.Embedding(scope.In("token_embed"), InsertAxes(tokens, -1), dtypes.Float32, e.cfg.Vocab, e.cfg.DModel)
}

// rope rotates x [B,S,H,Dh] by the angles of positions [B,S] (HF
// Llama/Qwen "rotate half" layout), from the host-computed tables
// [Ctx, Dh/2].
func (e *gomlxEngine) rope(x, positions *Node) *Node {
	g := x.Graph()
	half := x.Shape().Dimensions[3] / 2
	table := func(t []float32) *Node {
		c := Const(g, tensors.FromFlatDataAndDimensions(t, e.cfg.Ctx, half))
		return InsertAxes(Gather(c, InsertAxes(positions, -1)), 2) // [B,S,1,half]
	}
	cos, sin := table(e.cos), table(e.sin)
	x1 := Slice(x, AxisRange(), AxisRange(), AxisRange(), AxisRange(0, half))
	x2 := Slice(x, AxisRange(), AxisRange(), AxisRange(), AxisRange(half))
	return Concatenate([]*Node{Sub(Mul(x1, cos), Mul(x2, sin)), Add(Mul(x2, cos), Mul(x1, sin))}, -1)
}

// packedMask is the boolean attention mask [B,S,1,S] (BSHD scores layout):
// causal within a segment, plus every key of the segment that prefix
// [B,S] names per query (Batch.Prefix; nil: none).
func packedMask(segments, prefix *Node) *Node {
	g := segments.Graph()
	b, s := segments.Shape().Dimensions[0], segments.Shape().Dimensions[1]
	causal := Reshape(LowerTriangular(g, s), 1, s, 1, s)
	q := InsertAxes(segments, 2, 3)    // [B,S,1,1]
	k := Reshape(segments, b, 1, 1, s) // [B,1,1,S]
	mask := LogicalAnd(Equal(q, k), causal)
	if prefix == nil {
		return mask
	}
	pq := InsertAxes(prefix, 2, 3) // [B,S,1,1]
	shared := LogicalAnd(Equal(pq, k), GreaterThan(pq, ScalarZero(g, prefix.DType())))
	return LogicalOr(mask, shared)
}

// block is one pre-LayerNorm transformer block. x is [B,S,D]; mask is
// broadcastable to [B,S,H,Skv]. If cacheK/cacheV ([B,Ctx,H,Dh]) are given,
// the new (rotated) keys and values are written at the positions where
// write ([B,Ctx,1,1], one-hot per row) is 1 and attention runs over the
// cache; otherwise over the block's own keys. It returns the new x and
// the keys and values attention used.
func (e *gomlxEngine) block(scope *model.Scope, x, positions, mask, cacheK, cacheV, write *Node) (out, k, v *Node) {
	b, s := x.Shape().Dimensions[0], x.Shape().Dimensions[1]
	h, dh := e.cfg.Heads, e.cfg.HeadDim()
	y := norm.LayerNorm(scope.In("ln_attn"), x, -1).Epsilon(1e-5).Done()
	q := e.rope(Reshape(layers.Dense(scope.In("q"), y, true, e.cfg.DModel), b, s, h, dh), positions)
	k = e.rope(Reshape(layers.Dense(scope.In("k"), y, true, e.cfg.DModel), b, s, h, dh), positions)
	v = Reshape(layers.Dense(scope.In("v"), y, true, e.cfg.DModel), b, s, h, dh)
	if cacheK != nil {
		k, v = cacheWrite(cacheK, k, write), cacheWrite(cacheV, v, write)
	}
	att, _ := attention.Core(q, k, v, attention.LayoutBSHD, attention.CoreOptions{AttentionMask: mask})
	att = layers.Dense(scope.In("out"), Reshape(att, b, s, e.cfg.DModel), true, e.cfg.DModel)
	x = Add(x, att)
	y = norm.LayerNorm(scope.In("ln_ffn"), x, -1).Epsilon(1e-5).Done()
	y = layers.Dense(scope.In("ffn_in"), y, true, e.cfg.FFNWidth())
	y = activation.Apply(activation.TypeGelu, y)
	y = layers.Dense(scope.In("ffn_out"), y, true, e.cfg.DModel)
	return Add(x, y), k, v
}

// cacheWrite writes the new keys (or values) x [B,1,KV,Dh] into cache
// [B,Ctx,KV,Dh] where write ([B,Ctx,1,1], one-hot per row) is 1:
// cache + write*(new - cache). x broadcasts over Ctx; only the row's
// current position changes.
func cacheWrite(cache, x, write *Node) *Node {
	full := cache.Shape().Dimensions
	w := BroadcastToDims(write, full...)
	return Add(cache, Mul(w, Sub(BroadcastToDims(x, full...), cache)))
}

// layer runs block l (block, or archBlock for an architecture engine,
// which alone uses drop).
func (e *gomlxEngine) layer(scope *model.Scope, l int, x, positions, mask, cacheK, cacheV, write *Node, drop *dropout) (out, k, v *Node) {
	if e.arch != nil {
		return e.archBlock(l, x, positions, mask, cacheK, cacheV, write, drop)
	}
	return e.block(scope.In("block_%d", l), x, positions, mask, cacheK, cacheV, write)
}

// heads applies the final LayerNorm, the LM head and the value head to
// hidden states [..., D]: logits [..., V] and values [...].
func (e *gomlxEngine) heads(scope *model.Scope, x *Node) (logits, values *Node) {
	if e.arch != nil {
		return e.archHeads(x)
	}
	x = norm.LayerNorm(scope.In("ln_final"), x, -1).Epsilon(1e-5).Done()
	logits = layers.Dense(scope.In("lm_head"), x, true, e.cfg.Vocab)
	if e.optim.DetachValue {
		x = StopGradient(x) // the critic learns without moving the trunk
	}
	values = layers.Dense(scope.In("value_head"), x, true, 1)
	return logits, Squeeze(values, -1)
}

// trunk runs the blocks over a packed batch (prefix may be nil; rng,
// dropout's RNG state, nil but in a training step of adapters with
// dropout): hidden states [B,S,D].
func (e *gomlxEngine) trunk(scope *model.Scope, tokens, positions, segments, prefix, rng *Node) *Node {
	x := e.embed(scope, tokens)
	mask := packedMask(segments, prefix)
	drop := e.newDropout(rng)
	for l := range e.cfg.Layers {
		x, _, _ = e.layer(scope, l, x, positions, mask, nil, nil, nil, drop)
	}
	return x
}

// outputsAt is the heads at flat indices idx [K] (into B*S): logits [K,V]
// and values [K]. The LM head runs only where it is needed.
func (e *gomlxEngine) outputsAt(scope *model.Scope, tokens, positions, segments, prefix, rng, idx *Node) (logits, values *Node) {
	hidden := e.trunk(scope, tokens, positions, segments, prefix, rng)
	d := hidden.Shape().Dimensions
	flatH := Reshape(hidden, d[0]*d[1], d[2])
	return e.heads(scope, Gather(flatH, InsertAxes(idx, -1)))
}

// bucket rounds n up to a power of two. A graph is compiled once per
// combination of its inputs' sizes, seconds each with XLA where a step
// of these models takes milliseconds on a GPU: one size per doubling of
// each dimension keeps the combinations few, for at most twice the work.
func bucket(n int) int {
	b := 1
	for b < n {
		b *= 2
	}
	return b
}

// padBatch checks b against the engine's config (Batch.Check), then pads
// it to bucketed sizes for the graphs: rows to bucket(B),
// width to bucket(S) (at least 32, at most the context when S fits in
// it), the new positions padding (segment 0, position 0, no prefix: no
// real position attends to them, and they attend only to each other),
// and maps the head positions idx (flat into B*S) into the padded batch,
// their count padded to at least 64 and a bucket with zeros (heads whose
// outputs are dropped and whose loss gradient is zero). The caller
// slices the outputs back to len(idx).
func (e *gomlxEngine) padBatch(b Batch, idx []int32) (Batch, []int32, error) {
	if err := b.Check(e.cfg); err != nil {
		return Batch{}, nil, err
	}
	if e.exact {
		return b, idx, nil
	}
	rows, width := bucket(b.B), max(32, bucket(b.S))
	if b.S <= e.cfg.Ctx {
		width = min(width, e.cfg.Ctx)
	}
	// Never more heads than positions, unless idx repeats some.
	k := max(len(idx), min(max(64, bucket(len(idx))), rows*width))
	pidx := make([]int32, k)
	for i, j := range idx {
		pidx[i] = j/int32(b.S)*int32(width) + j%int32(b.S)
	}
	if rows == b.B && width == b.S {
		return b, pidx, nil
	}
	p := Batch{B: rows, S: width}
	n := rows * width
	p.Tokens, p.Positions, p.Segments = make([]int32, n), make([]int32, n), make([]int32, n)
	if b.Prefix != nil {
		p.Prefix = make([]int32, n)
	}
	for r := range b.B {
		src, dst := r*b.S, r*width
		copy(p.Tokens[dst:], b.Tokens[src:src+b.S])
		copy(p.Positions[dst:], b.Positions[src:src+b.S])
		copy(p.Segments[dst:], b.Segments[src:src+b.S])
		if b.Prefix != nil {
			copy(p.Prefix[dst:], b.Prefix[src:src+b.S])
		}
	}
	return p, pidx, nil
}

func batchTensors(b Batch) []any {
	return []any{
		tensors.FromFlatDataAndDimensions(b.Tokens, b.B, b.S),
		tensors.FromFlatDataAndDimensions(b.Positions, b.B, b.S),
		tensors.FromFlatDataAndDimensions(b.Segments, b.B, b.S),
	}
}

// prefixArgs is the graphs' optional last input: Batch.Prefix when set.
// Batches without one run graphs compiled without it (the mask as before).
func prefixArgs(b Batch) []any {
	if b.Prefix == nil {
		return nil
	}
	return []any{tensors.FromFlatDataAndDimensions(b.Prefix, b.B, b.S)}
}

// trailing returns a graph's optional last inputs from inputs[i:]:
// Batch.Prefix (int32 [B,S], prefixArgs) and dropout's RNG state (uint64,
// rngArgs), each nil when not given. They differ in dtype, so either may
// come without the other.
func trailing(inputs []*Node, i int) (prefix, rng *Node) {
	for _, x := range inputs[min(i, len(inputs)):] {
		if x.DType() == dtypes.Uint64 {
			rng = x
		} else {
			prefix = x
		}
	}
	return prefix, rng
}

// rngArgs is the graphs' optional last input: dropout's RNG state, when
// a training step draws masks.
func rngArgs(rng *tensors.Tensor) []any {
	if rng == nil {
		return nil
	}
	return []any{rng}
}

// flatF32 copies a float32 tensor to a Go slice and frees it.
func flatF32(t *tensors.Tensor) ([]float32, error) {
	defer t.FinalizeAll()
	out, err := tensors.CopyFlatData[float32](t)
	if err != nil {
		return nil, fmt.Errorf("policy gomlx: reading output %s: %w", t.Shape(), err)
	}
	return out, nil
}

func (e *gomlxEngine) Logits(b Batch, idx []int32) ([]float32, []float32, error) {
	pb, pidx, err := e.padBatch(b, idx)
	if err != nil {
		return nil, nil, err
	}
	logits, values, err := e.forward(pb, pidx, nil)
	if err != nil {
		return nil, nil, err
	}
	return logits[:len(idx)*e.cfg.Vocab], values[:len(idx)], nil
}

// forward runs the logits graph on a padded batch (padBatch): the logits
// [len(idx)*V] and values [len(idx)] at every padded head position; with
// rng (nil: none), with dropout's masks drawn from it.
func (e *gomlxEngine) forward(b Batch, idx []int32, rng *tensors.Tensor) ([]float32, []float32, error) {
	if e.logits == nil {
		var err error
		e.logits, err = model.NewExec(e.backend, e.store, func(scope *model.Scope, inputs []*Node) []*Node {
			prefix, rng := trailing(inputs, 4)
			lg, vl := e.outputsAt(scope, inputs[0], inputs[1], inputs[2], prefix, rng, inputs[3])
			return []*Node{lg, vl}
		})
		if err != nil {
			return nil, nil, fmt.Errorf("policy gomlx: logits graph: %w", err)
		}
	}
	args := append(append(batchTensors(b), tensors.FromFlatDataAndDimensions(idx, len(idx))), prefixArgs(b)...)
	outs, err := e.run("logits", e.logits, append(args, rngArgs(rng)...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("policy gomlx: logits: %w", err)
	}
	logits, err := flatF32(outs[0])
	if err != nil {
		return nil, nil, err
	}
	values, err := flatF32(outs[1])
	if err != nil {
		return nil, nil, err
	}
	return logits, values, nil
}

// hostLoss runs the forward pass on the padded batch (with dropout's
// masks from rng, nil: none) and the loss on the host at the real heads
// (the first k of the padded ones). The gradients it returns cover every
// padded head, zero past the real ones.
func (e *gomlxEngine) hostLoss(b Batch, idx []int32, k int, loss LossFunc, rng *tensors.Tensor) (lossValue float64, dLogits, dValues []float32, err error) {
	logits, values, err := e.forward(b, idx, rng)
	if err != nil {
		return 0, nil, nil, err
	}
	v := e.cfg.Vocab
	dLogits, dValues = make([]float32, len(logits)), make([]float32, len(values))
	lossValue = loss(logits[:k*v], values[:k], dLogits[:k*v], dValues[:k])
	return lossValue, dLogits, dValues, nil
}

type withGradients interface {
	UpdateGraphWithGradients(scope *model.Scope, grads []*Node, lossDType dtypes.DType)
}

// TrainStep runs the logits graph, the host loss, then one graph that
// recomputes the forward pass, takes the gradient of
// sum(logits*dLogits) + sum(values*dValues) (whose gradient with respect
// to every trainable weight is the loss's, by the chain rule), clips it
// and applies AdamW. Adapters with dropout draw their masks from one RNG
// state per step, the same in both graphs.
func (e *gomlxEngine) TrainStep(b Batch, idx []int32, loss LossFunc, lr float64) (float64, float64, error) {
	b, pidx, err := e.padBatch(b, idx)
	if err != nil {
		return 0, 0, err
	}
	var rng *tensors.Tensor
	if e.arch != nil && e.arch.frozen() && e.arch.lora.Dropout > 0 {
		if rng, err = e.dropoutState(); err != nil {
			return 0, 0, err
		}
		defer rng.FinalizeAll()
	}
	lossValue, dLogits, dValues, err := e.hostLoss(b, pidx, len(idx), loss, rng)
	if err != nil {
		return 0, 0, err
	}
	if e.train == nil {
		o := e.optim
		opt := optimizer.Adam().Betas(o.Beta1, o.Beta2).WeightDecay(o.WeightDecay).Epsilon(1e-8).Done()
		upd, ok := opt.(withGradients)
		if !ok {
			return 0, 0, fmt.Errorf("policy gomlx: the Adam optimizer does not take precomputed gradients")
		}
		e.train, err = model.NewExec(e.backend, e.store, func(scope *model.Scope, inputs []*Node) *Node {
			tokens, positions, segments, idx, dl, dv, lr := inputs[0], inputs[1], inputs[2], inputs[3], inputs[4], inputs[5], inputs[6]
			prefix, rng := trailing(inputs, 7)
			lg, vl := e.outputsAt(scope, tokens, positions, segments, prefix, rng, idx)
			pseudo := Add(ReduceAllSum(Mul(lg, dl)), ReduceAllSum(Mul(vl, dv)))
			grads := scope.BuildTrainableVariablesGradientsGraph(pseudo)
			var sq *Node
			for _, gr := range grads {
				s := ReduceAllSum(Square(gr))
				if sq == nil {
					sq = s
				} else {
					sq = Add(sq, s)
				}
			}
			norm := Sqrt(sq)
			if o.ClipNorm > 0 {
				scale := Min(OnesLike(norm), Div(Scalar(norm.Graph(), norm.DType(), o.ClipNorm), Add(norm, Scalar(norm.Graph(), norm.DType(), 1e-6))))
				for i := range grads {
					grads[i] = Mul(grads[i], scale)
				}
			}
			optimizer.LearningRateVar(scope, dtypes.Float32, o.LR).SetNodeValue(lr)
			upd.UpdateGraphWithGradients(scope, grads, pseudo.DType())
			return norm
		})
		if err != nil {
			return 0, 0, fmt.Errorf("policy gomlx: train graph: %w", err)
		}
	}
	kp := len(pidx)
	args := append(batchTensors(b),
		tensors.FromFlatDataAndDimensions(pidx, kp),
		tensors.FromFlatDataAndDimensions(dLogits, kp, e.cfg.Vocab),
		tensors.FromFlatDataAndDimensions(dValues, kp),
		tensors.FromFlatDataAndDimensions([]float32{float32(lr)}))
	outs, err := e.run("train", e.train, append(append(args, prefixArgs(b)...), rngArgs(rng)...)...)
	if err != nil {
		return 0, 0, fmt.Errorf("policy gomlx: train step: %w", err)
	}
	n, err := flatF32(outs[0])
	if err != nil {
		return 0, 0, err
	}
	return lossValue, float64(n[0]), nil
}

// Gradients runs the logits graph, the host loss, then a graph that takes
// the gradient of sum(logits*dLogits) + sum(values*dValues) with respect
// to every trainable weight (all of mlerl's model's), without dropout.
func (e *gomlxEngine) Gradients(b Batch, idx []int32, loss LossFunc) (float64, []Tensor, error) {
	return e.gradients(b, idx, loss, nil)
}

// gradients is Gradients with dropout's masks drawn from rng (nil: none),
// in the forward pass and its gradient alike.
func (e *gomlxEngine) gradients(b Batch, idx []int32, loss LossFunc, rng *tensors.Tensor) (float64, []Tensor, error) {
	b, pidx, err := e.padBatch(b, idx)
	if err != nil {
		return 0, nil, err
	}
	lossValue, dLogits, dValues, err := e.hostLoss(b, pidx, len(idx), loss, rng)
	if err != nil {
		return 0, nil, err
	}
	var params []GomlxParam
	for _, p := range e.params {
		if p.Trainable {
			params = append(params, p)
		}
	}
	if e.grads == nil {
		e.grads, err = model.NewExec(e.backend, e.store, func(scope *model.Scope, inputs []*Node) []*Node {
			prefix, rng := trailing(inputs, 6)
			lg, vl := e.outputsAt(scope, inputs[0], inputs[1], inputs[2], prefix, rng, inputs[3])
			pseudo := Add(ReduceAllSum(Mul(lg, inputs[4])), ReduceAllSum(Mul(vl, inputs[5])))
			nodes := make([]*Node, len(params))
			for i, p := range params {
				nodes[i] = e.store.GetVariable(p.Name).NodeValue(pseudo.Graph())
			}
			return Gradient(pseudo, nodes...)
		})
		if err != nil {
			return 0, nil, fmt.Errorf("policy gomlx: gradient graph: %w", err)
		}
	}
	kp := len(pidx)
	args := append(batchTensors(b), tensors.FromFlatDataAndDimensions(pidx, kp),
		tensors.FromFlatDataAndDimensions(dLogits, kp, e.cfg.Vocab), tensors.FromFlatDataAndDimensions(dValues, kp))
	outs, err := e.run("gradients", e.grads, append(append(args, prefixArgs(b)...), rngArgs(rng)...)...)
	if err != nil {
		return 0, nil, fmt.Errorf("policy gomlx: gradients: %w", err)
	}
	grads := make([]Tensor, len(params))
	for i, p := range params {
		data, err := flatF32(outs[i])
		if err != nil {
			return 0, nil, err
		}
		grads[i] = Tensor{Name: p.Name, Shape: slices.Clone(p.Shape), F32: data}
	}
	return lossValue, grads, nil
}

// Weights returns every weight in checkpoint order, as float32 (a
// bfloat16 base widened).
func (e *gomlxEngine) Weights() ([]Tensor, error) { return e.weights(false) }

// TrainableWeights returns the weights that train, in checkpoint order:
// every one of mlerl's model, the adapters and value head of a frozen
// base (what a checkpoint of it holds; the base stays on the device).
func (e *gomlxEngine) TrainableWeights() ([]Tensor, error) { return e.weights(true) }

func (e *gomlxEngine) weights(trainable bool) ([]Tensor, error) {
	var out []Tensor
	for _, p := range e.params {
		if trainable && !p.Trainable {
			continue
		}
		v := e.store.GetVariable(p.Name)
		if v == nil {
			return nil, fmt.Errorf("policy gomlx: no variable %s", p.Name)
		}
		t, err := v.Value()
		if err != nil {
			return nil, fmt.Errorf("policy gomlx: variable %s: %w", p.Name, err)
		}
		data, err := tensorF32(t)
		if err != nil {
			return nil, fmt.Errorf("policy gomlx: variable %s: %w", p.Name, err)
		}
		out = append(out, Tensor{Name: p.Name, Shape: slices.Clone(p.Shape), F32: data})
	}
	return out, nil
}

// SetWeights replaces every weight (each must be given, with its shape);
// a weight stored in bfloat16 is rounded to nearest even.
func (e *gomlxEngine) SetWeights(ws []Tensor) error {
	byName := map[string]Tensor{}
	for _, w := range ws {
		byName[w.Name] = w
	}
	for _, p := range e.params {
		w, ok := byName[p.Name]
		if !ok {
			return fmt.Errorf("policy gomlx: weight %s missing", p.Name)
		}
		if !slices.Equal(w.Shape, p.Shape) || len(w.F32) != p.Size() {
			return fmt.Errorf("policy gomlx: weight %s has shape %v (%d values), the model needs %v", p.Name, w.Shape, len(w.F32), p.Shape)
		}
		if err := e.setVar(p.Name, paramTensor(p, w.F32), p.Trainable); err != nil {
			return err
		}
	}
	return nil
}

func (e *gomlxEngine) setVar(name string, t *tensors.Tensor, trainable bool) error {
	if v := e.store.GetVariable(name); v != nil {
		if err := v.SetValue(t); err != nil {
			return fmt.Errorf("policy gomlx: variable %s: %w", name, err)
		}
		return nil
	}
	v, err := e.store.CreateVariable(name, t)
	if err != nil {
		return fmt.Errorf("policy gomlx: variable %s: %w", name, err)
	}
	v.SetTrainable(trainable)
	return nil
}

// isWeight reports whether path is one of the weights; every other
// variable of the store is the optimiser's: its learning rate and global
// step (/optimizers/, /global_step) and Adam's step counter and moments
// (/AdamOptimizer/...).
func (e *gomlxEngine) isWeight(path string) bool {
	for _, p := range e.params {
		if p.Name == path {
			return true
		}
	}
	return false
}

// OptimizerState returns every variable of the optimiser (all but the
// weights), named "gomlx:" and its path.
func (e *gomlxEngine) OptimizerState() ([]Tensor, error) {
	var out []Tensor
	for v := range e.store.IterVariables() {
		if e.isWeight(v.Path()) {
			continue
		}
		t, err := v.Value()
		if err != nil {
			return nil, fmt.Errorf("policy gomlx: variable %s: %w", v.Path(), err)
		}
		ts := Tensor{Name: "gomlx:" + v.Path(), Shape: slices.Clone(t.Shape().Dimensions)}
		var ferr error
		err = t.ConstFlatData(func(flat any) {
			switch f := flat.(type) {
			case []float32:
				ts.F32 = slices.Clone(f)
			case []int64:
				ts.I64 = slices.Clone(f)
			default:
				ferr = fmt.Errorf("policy gomlx: optimiser variable %s has dtype %s", v.Path(), t.DType())
			}
		})
		if err == nil {
			err = ferr
		}
		if err != nil {
			return nil, err
		}
		out = append(out, ts)
	}
	return out, nil
}

// SetOptimizerState restores what OptimizerState returned (of an engine
// of the same model).
func (e *gomlxEngine) SetOptimizerState(ts []Tensor) error {
	for _, t := range ts {
		name, ok := strings.CutPrefix(t.Name, "gomlx:")
		if !ok {
			return fmt.Errorf("policy gomlx: optimiser state %s was written by another engine", t.Name)
		}
		if e.isWeight(name) {
			return fmt.Errorf("policy gomlx: optimiser state %s names a weight of the model", t.Name)
		}
		var tt *tensors.Tensor
		switch {
		case t.F32 != nil:
			tt = tensors.FromFlatDataAndDimensions(slices.Clone(t.F32), t.Shape...)
		case t.I64 != nil:
			tt = tensors.FromFlatDataAndDimensions(slices.Clone(t.I64), t.Shape...)
		default:
			return fmt.Errorf("policy gomlx: optimiser state %s is empty", t.Name)
		}
		if err := e.setVar(name, tt, false); err != nil {
			return err
		}
	}
	return nil
}

// The decoder: prefill the prompts once into fixed-size caches
// [B,Ctx,KV,Dh] per layer (KV the key/value heads: H for mlerl's model,
// KVHeads under grouped-query attention), then decode one token per row and call, writing
// each new key and value through a one-hot position mask (the pure-Go
// backend has no DynamicUpdateSlice). Extend with several tokens loops
// over them (one call each): the jump-forward saving is the native
// engine's.

type gomlxDecoder struct {
	e    *gomlxEngine
	rows int
	// padded is rows rounded up to a bucket: the graphs' rows. Rows past
	// rows are padding: prompt 0's cache, then token 0 written at
	// position 0 every step; nothing reads them.
	padded int
	pos    []int32 // next free position per row (padded rows: 0)
	caches []*tensors.Tensor
	// separate turns prompt sharing off (tests compare against it).
	separate bool
}

func (e *gomlxEngine) NewDecoder(rows int) (Decoder, error) {
	if rows < 1 {
		return nil, fmt.Errorf("policy gomlx: decoder for %d rows", rows)
	}
	padded := bucket(rows)
	if e.exact {
		padded = rows
	}
	return &gomlxDecoder{e: e, rows: rows, padded: padded, pos: make([]int32, padded)}, nil
}

// promptBucket rounds a prompt length up so that few prefill graphs are
// compiled (one per bucket).
func promptBucket(n, ctx int) int {
	b := 16
	for b < n {
		b *= 2
	}
	return min(b, ctx)
}

// prefillGraph runs the distinct prompts [B',P] (right-padded; lastIdx
// [B'] is the index of each row's last real token) and returns, for each
// of the decoder's B rows, the outputs of its prompt's row rowMap[i]
// [B]: the logits [B,V] and value [B] at lastIdx, then every layer's
// keys and values padded to the full context [B,Ctx,KV,Dh]. Repeated
// prompts are thus computed once and forked by a gather.
func (e *gomlxEngine) prefillGraph(scope *model.Scope, inputs []*Node) []*Node {
	tokens, lastIdx, rowMap := inputs[0], inputs[1], InsertAxes(inputs[2], -1)
	g := tokens.Graph()
	b, s := tokens.Shape().Dimensions[0], tokens.Shape().Dimensions[1]
	positions := BroadcastToDims(Iota(g, tokens.Shape(), 1), b, s)
	real := LessOrEqual(positions, InsertAxes(lastIdx, -1))
	segments := ConvertDType(real, tokens.DType()) // 1 real, 0 padding
	x := e.embed(scope, tokens)
	mask := packedMask(segments, nil)
	outs := make([]*Node, 2, 2+2*e.cfg.Layers)
	for l := range e.cfg.Layers {
		var k, v *Node
		x, k, v = e.layer(scope, l, x, positions, mask, nil, nil, nil, nil)
		if pad := e.cfg.Ctx - s; pad > 0 {
			kd := k.Shape().Dimensions // [B',P,KV,Dh]
			zeros := Zeros(g, shapes.Make(k.DType(), b, pad, kd[2], kd[3]))
			k = Concatenate([]*Node{k, zeros}, 1)
			v = Concatenate([]*Node{v, zeros}, 1)
		}
		outs = append(outs, Gather(k, rowMap), Gather(v, rowMap))
	}
	// Select the last real position of each row with a one-hot sum (no
	// dynamic slicing needed).
	pick := ConvertDType(Equal(positions, InsertAxes(lastIdx, -1)), x.DType()) // [B',P]
	last := ReduceSum(Mul(x, InsertAxes(pick, -1)), 1)                         // [B',D]
	outs[0], outs[1] = e.heads(scope, Gather(last, rowMap))
	return outs
}

// decodeGraph feeds one token per row (tokens [B,1] at positions pos [B])
// through the cached model: inputs[2:] are the layers' keys and values
// [B,Ctx,KV,Dh]. Returns logits [B,V], values [B] and the updated caches.
func (e *gomlxEngine) decodeGraph(scope *model.Scope, inputs []*Node) []*Node {
	tokens, pos := inputs[0], inputs[1]
	g := tokens.Graph()
	b := tokens.Shape().Dimensions[0]
	ctx := e.cfg.Ctx
	positions := InsertAxes(pos, -1) // [B,1]
	slots := Iota(g, shapes.Make(pos.DType(), 1, ctx), 1)
	mask := Reshape(LessOrEqual(slots, positions), b, 1, 1, ctx)                          // [B,1,1,Ctx]
	write := Reshape(ConvertDType(Equal(slots, positions), dtypes.Float32), b, ctx, 1, 1) // [B,Ctx,1,1]
	x := e.embed(scope, tokens)
	outs := make([]*Node, 2, 2+2*e.cfg.Layers)
	for l := range e.cfg.Layers {
		var k, v *Node
		x, k, v = e.layer(scope, l, x, positions, mask, inputs[2+2*l], inputs[3+2*l], write, nil)
		outs = append(outs, k, v)
	}
	logits, values := e.heads(scope, Squeeze(x, 1))
	outs[0], outs[1] = logits, values
	return outs
}

func (d *gomlxDecoder) Prefill(prompts [][]int32) ([]float32, error) {
	e := d.e
	if len(prompts) != d.rows {
		return nil, fmt.Errorf("policy gomlx: %d prompts for %d rows", len(prompts), d.rows)
	}
	maxLen := 0
	for i, p := range prompts {
		if len(p) == 0 || len(p) >= e.cfg.Ctx {
			return nil, fmt.Errorf("policy gomlx: prompt %d has %d tokens (want 1 to %d)", i, len(p), e.cfg.Ctx-1)
		}
		maxLen = max(maxLen, len(p))
		d.pos[i] = int32(len(p))
	}
	// The graph runs each distinct prompt once (their count rounded up to
	// a bucket, so that few graphs are compiled) and gathers its cache and
	// logits into the rows that repeat it.
	src := promptSources(prompts)
	if d.separate {
		for i := range src {
			src[i] = i
		}
	}
	rowMap := make([]int32, d.padded) // padded rows: prompt 0
	var distinct []int
	for i, s := range src {
		if s == i {
			rowMap[i] = int32(len(distinct))
			distinct = append(distinct, i)
		} else {
			rowMap[i] = rowMap[s]
		}
	}
	nb, pb := min(bucket(len(distinct)), d.padded), promptBucket(maxLen, e.cfg.Ctx)
	if e.exact {
		nb, pb = len(distinct), maxLen
	}
	tokens := make([]int32, nb*pb)
	lastIdx := make([]int32, nb) // rows past the distinct prompts: one pad token, never read
	for j, i := range distinct {
		copy(tokens[j*pb:], prompts[i])
		lastIdx[j] = int32(len(prompts[i]) - 1)
	}
	var err error
	if e.prefill == nil {
		if e.prefill, err = model.NewExec(e.backend, e.store, e.prefillGraph); err != nil {
			return nil, fmt.Errorf("policy gomlx: prefill graph: %w", err)
		}
		if e.decode, err = model.NewExec(e.backend, e.store, e.decodeGraph); err != nil {
			return nil, fmt.Errorf("policy gomlx: decode graph: %w", err)
		}
	}
	outs, err := e.run("prefill", e.prefill, tensors.FromFlatDataAndDimensions(tokens, nb, pb), tensors.FromFlatDataAndDimensions(lastIdx, nb),
		tensors.FromFlatDataAndDimensions(rowMap, d.padded))
	if err != nil {
		return nil, fmt.Errorf("policy gomlx: prefill: %w", err)
	}
	d.release()
	d.caches = outs[2:]
	outs[1].FinalizeAll()
	logits, err := flatF32(outs[0])
	if err != nil {
		return nil, err
	}
	return logits[:d.rows*e.cfg.Vocab], nil
}

func (d *gomlxDecoder) Extend(tokens [][]int32) ([]float32, error) {
	e := d.e
	if len(tokens) != d.rows || d.caches == nil {
		return nil, fmt.Errorf("policy gomlx: extend %d rows of a decoder of %d (prefilled: %v)", len(tokens), d.rows, d.caches != nil)
	}
	steps := 0
	for i, ts := range tokens {
		steps = max(steps, len(ts))
		if int(d.pos[i])+len(ts) > e.cfg.Ctx {
			return nil, fmt.Errorf("policy gomlx: row %d would exceed the context %d", i, e.cfg.Ctx)
		}
	}
	logits := make([]float32, d.rows*e.cfg.Vocab)
	for t := range steps {
		next, stepPos := make([]int32, d.padded), make([]int32, d.padded)
		for i := range d.padded {
			// Rows with no token at this step (and padded rows) write
			// padding at their next free slot without advancing: the slot
			// is rewritten by the row's next real token before anything
			// attends to it.
			stepPos[i] = min(d.pos[i], int32(e.cfg.Ctx-1))
			if i < d.rows && t < len(tokens[i]) {
				next[i] = tokens[i][t]
			}
		}
		args := []any{tensors.FromFlatDataAndDimensions(next, d.padded, 1), tensors.FromFlatDataAndDimensions(stepPos, d.padded)}
		for _, c := range d.caches {
			args = append(args, c)
		}
		outs, err := e.run("decode", e.decode, args...)
		if err != nil {
			return nil, fmt.Errorf("policy gomlx: decode: %w", err)
		}
		d.release()
		d.caches = outs[2:]
		step, err := flatF32(outs[0])
		outs[1].FinalizeAll()
		if err != nil {
			return nil, err
		}
		for i, ts := range tokens {
			if t < len(ts) {
				copy(logits[i*e.cfg.Vocab:(i+1)*e.cfg.Vocab], step[i*e.cfg.Vocab:(i+1)*e.cfg.Vocab])
				d.pos[i]++
			}
		}
	}
	return logits, nil
}

func (d *gomlxDecoder) release() {
	for _, c := range d.caches {
		c.FinalizeAll()
	}
	d.caches = nil
}

func (d *gomlxDecoder) Close() { d.release() }
