// Package train is the trainer stage: a small GoMLX decoder-only policy
// with a value head, trained first by supervised fine-tuning on expert
// (prompt, response) pairs and then by step-wise PPO on expert states.
//
// Where to start:
//   - [RunSFT] (sft.go) reads sft_examples and writes an SFT checkpoint;
//   - [RunPPO] (ppo.go) reads rl_states, loads that checkpoint and runs
//     step-wise PPO with asynchronous reward workers, reading top to bottom
//     in the paper's order;
//   - [Policy] (model.go) is the model: a pre-LayerNorm transformer with an
//     LM head and a scalar value head (the PPO critic);
//   - [Policy.Generate] (generate.go) is the batched sampling loop with a
//     fixed-size KV cache written through a one-hot position mask (the
//     pure-Go backend has no DynamicUpdateSlice);
//   - [Vocab] (vocab.go) trims the tokenizer's vocabulary to the ids seen
//     in the training corpus;
//   - checkpoint.go saves and restores everything a run needs to resume.
//
// The backend comes from mustBackend(): the pure-Go backend by default,
// GOMLX_BACKEND selects another (e.g. XLA on a GPU machine); nothing here
// depends on which.
package train

import (
	"fmt"
	"os"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/ml/layers"
	"github.com/gomlx/gomlx/ml/layers/activation"
	"github.com/gomlx/gomlx/ml/layers/attention"
	"github.com/gomlx/gomlx/ml/layers/norm"
	"github.com/gomlx/gomlx/ml/model"

	"github.com/mlerl/mlerl/internal/config"
)

// ModelConfig is the shape of the policy.
type ModelConfig struct {
	// Vocab is the trimmed vocabulary size; 0 means "from the vocabulary
	// mapping" (the usual case: the trainer fills it in).
	Vocab  int `yaml:"vocab" help:"vocabulary size (0: from the trimmed vocabulary)"`
	DModel int `yaml:"d_model" help:"embedding width"`
	Heads  int `yaml:"heads" help:"attention heads (d_model must be a multiple)"`
	Layers int `yaml:"layers" help:"transformer blocks"`
	// Ctx bounds prompt plus response, in tokens.
	Ctx int `yaml:"ctx" help:"context length in tokens (prompt + response)"`
	// FFN is the feed-forward width; 0 means 4*d_model.
	FFN int `yaml:"ffn" help:"feed-forward width (0: 4*d_model)"`
}

// DemoModelConfig is the CPU demo policy: 4 blocks of width 256, context
// 512; with a trimmed vocabulary of ~4k ids it has about 5.3M parameters
// and trains at a few hundred tokens/s on 2 CPU cores.
func DemoModelConfig() ModelConfig {
	return ModelConfig{DModel: 256, Heads: 4, Layers: 4, Ctx: 512}
}

// Larger documented configurations, for a GPU backend (GOMLX_BACKEND=xla:cuda):
//
//	BenchModelConfig  2 x 128, ctx 256     ~1.5M params (vocab 4k): the benchmark shape
//	SmallModelConfig  8 x 512, ctx 1024    ~30M params
//	MediumModelConfig 12 x 768, ctx 2048   ~110M params (GPT-2 small shape)
func BenchModelConfig() ModelConfig {
	return ModelConfig{DModel: 128, Heads: 4, Layers: 2, Ctx: 256}
}

// SmallModelConfig is a ~30M-parameter policy for a single GPU.
func SmallModelConfig() ModelConfig {
	return ModelConfig{DModel: 512, Heads: 8, Layers: 8, Ctx: 1024}
}

// MediumModelConfig is the GPT-2-small shape (~110M parameters with a 32k vocabulary).
func MediumModelConfig() ModelConfig {
	return ModelConfig{DModel: 768, Heads: 12, Layers: 12, Ctx: 2048}
}

// Validate checks the shape is buildable; keys in errors are relative
// ("ctx"), a stage config nests them ("model.ctx").
func (c ModelConfig) Validate() error {
	switch {
	case c.DModel <= 0:
		return config.Errorf("d_model", c.DModel, "must be positive")
	case c.Heads <= 0:
		return config.Errorf("heads", c.Heads, "must be positive")
	case c.DModel%c.Heads != 0:
		return config.Errorf("heads", c.Heads, "must divide d_model (%d)", c.DModel)
	case c.Layers <= 0:
		return config.Errorf("layers", c.Layers, "must be positive")
	case c.Ctx <= 0:
		return config.Errorf("ctx", c.Ctx, "must be positive")
	case c.FFN < 0:
		return config.Errorf("ffn", c.FFN, "must not be negative (0: 4*d_model)")
	case c.Vocab < NumSpecial:
		return config.Errorf("vocab", c.Vocab, "must be at least %d (the special tokens)", NumSpecial)
	}
	return nil
}

func (c ModelConfig) ffn() int {
	if c.FFN > 0 {
		return c.FFN
	}
	return 4 * c.DModel
}

func (c ModelConfig) headDim() int { return c.DModel / c.Heads }

// NumParams is the number of trainable parameters of the shape.
func (c ModelConfig) NumParams() int {
	d, f := c.DModel, c.ffn()
	block := 2*2*d + // two LayerNorms
		4*(d*d+d) + // q, k, v, out
		d*f + f + f*d + d
	return c.Vocab*d + c.Ctx*d + c.Layers*block + 2*d + (d*c.Vocab + c.Vocab) + (d + 1)
}

// Policy is the model: its shape, the backend and the variables (weights,
// and the optimizer's moments once trained). Its methods build and run
// graphs; compiled graphs are cached per input shape.
type Policy struct {
	Cfg     ModelConfig
	Backend compute.Backend
	Store   *model.Store

	fwd     *model.Exec // full forward: logits and values at every position
	prefill *model.Exec // prompt forward: last logits, value and the KV cache
	decode  *model.Exec // one token with the KV cache
	logp    *model.Exec // log-probs of given targets
}

// NewPolicy makes a policy with freshly initialised weights (seeded).
func NewPolicy(backend compute.Backend, cfg ModelConfig, seed int64) (*Policy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	st := model.NewStore()
	if err := st.SetRNGStateFromSeed(seed); err != nil {
		return nil, fmt.Errorf("model: seeding: %w", err)
	}
	p := &Policy{Cfg: cfg, Backend: backend, Store: st}
	return p, nil
}

// batchInput is one packed or padded batch as the graphs consume it.
//
// Tokens [B,S] are model ids; Positions [B,S] restart at 0 for every
// example packed into a row; Segments [B,S] number the examples of a row
// from 1 (0 is padding). Attention is causal and block-diagonal: a query
// attends only to keys of its own segment, so packed examples never see
// each other, and padding (segment 0) attends only to padding.
type batchInput struct {
	Tokens, Positions, Segments []int32
	B, S                        int
}

// embed maps tokens and positions to [B,S,D].
func (p *Policy) embed(scope *model.Scope, tokens, positions *Node) *Node {
	// Explicit trailing index axis: layers.Embedding would otherwise read a
	// [B,1] input (one decode step) as B indices.
	x := layers.Embedding(scope.In("token_embed"), InsertAxes(tokens, -1), dtypes.Float32, p.Cfg.Vocab, p.Cfg.DModel)
	pe := layers.Embedding(scope.In("pos_embed"), InsertAxes(positions, -1), dtypes.Float32, p.Cfg.Ctx, p.Cfg.DModel)
	return Add(x, pe)
}

// packedMask is the boolean attention mask [B,S,1,S] (BSHD scores layout):
// causal within a segment.
func packedMask(segments *Node) *Node {
	g := segments.Graph()
	s := segments.Shape().Dimensions[1]
	causal := Reshape(LowerTriangular(g, s), 1, s, 1, s)
	q := InsertAxes(segments, 2, 3)                                 // [B,S,1,1]
	k := Reshape(segments, segments.Shape().Dimensions[0], 1, 1, s) // [B,1,1,S]
	return LogicalAnd(Equal(q, k), causal)
}

// block is one pre-LayerNorm transformer block. x is [B,S,D]; mask is
// broadcastable to [B,S,H,Skv]. If cacheK/cacheV ([B,Ctx,H,Dh]) are given,
// the new keys and values are written at the positions where write
// ([B,Ctx,1,1], one-hot per row) is 1 and attention runs over the cache;
// otherwise over the block's own keys. It returns the new x and the keys
// and values attention used.
func (p *Policy) block(scope *model.Scope, x, mask, cacheK, cacheV, write *Node) (out, k, v *Node) {
	b, s := x.Shape().Dimensions[0], x.Shape().Dimensions[1]
	h, dh := p.Cfg.Heads, p.Cfg.headDim()
	y := norm.LayerNorm(scope.In("ln_attn"), x, -1).Epsilon(1e-5).Done()
	q := Reshape(layers.Dense(scope.In("q"), y, true, p.Cfg.DModel), b, s, h, dh)
	k = Reshape(layers.Dense(scope.In("k"), y, true, p.Cfg.DModel), b, s, h, dh)
	v = Reshape(layers.Dense(scope.In("v"), y, true, p.Cfg.DModel), b, s, h, dh)
	if cacheK != nil {
		// One-hot write: cache + write*(new - cache). k is [B,1,H,Dh] and
		// broadcasts over Ctx; only the row's current position changes.
		full := cacheK.Shape().Dimensions
		w := BroadcastToDims(write, full...)
		k = Add(cacheK, Mul(w, Sub(BroadcastToDims(k, full...), cacheK)))
		v = Add(cacheV, Mul(w, Sub(BroadcastToDims(v, full...), cacheV)))
	}
	att, _ := attention.Core(q, k, v, attention.LayoutBSHD, attention.CoreOptions{AttentionMask: mask})
	att = layers.Dense(scope.In("out"), Reshape(att, b, s, p.Cfg.DModel), true, p.Cfg.DModel)
	x = Add(x, att)
	y = norm.LayerNorm(scope.In("ln_ffn"), x, -1).Epsilon(1e-5).Done()
	y = layers.Dense(scope.In("ffn_in"), y, true, p.Cfg.ffn())
	y = activation.Apply(activation.TypeGelu, y)
	y = layers.Dense(scope.In("ffn_out"), y, true, p.Cfg.DModel)
	return Add(x, y), k, v
}

// heads applies the final LayerNorm, the LM head and the value head to
// hidden states [..., D]: logits [..., V] and values [...].
func (p *Policy) heads(scope *model.Scope, x *Node) (logits, values *Node) {
	x = norm.LayerNorm(scope.In("ln_final"), x, -1).Epsilon(1e-5).Done()
	logits = layers.Dense(scope.In("lm_head"), x, true, p.Cfg.Vocab)
	values = layers.Dense(scope.In("value_head"), x, true, 1)
	return logits, Squeeze(values, -1)
}

// forwardGraph is the full forward over a packed batch: logits [B,S,V] and
// values [B,S].
func (p *Policy) forwardGraph(scope *model.Scope, tokens, positions, segments *Node) (logits, values *Node) {
	return p.heads(scope, p.trunk(scope, tokens, positions, segments))
}

// trunk runs the blocks over a packed batch: hidden states [B,S,D] before
// the final LayerNorm.
func (p *Policy) trunk(scope *model.Scope, tokens, positions, segments *Node) *Node {
	x := p.embed(scope, tokens, positions)
	mask := packedMask(segments)
	for l := range p.Cfg.Layers {
		x, _, _ = p.block(scope.In("block_%d", l), x, mask, nil, nil, nil)
	}
	return x
}

// gatherRows picks hidden states [B,S,D] at flat indices idx [K] (into
// B*S): [K,D]. Losses apply the heads only where they are needed (the
// response targets, the value positions): with a 4k vocabulary the LM head
// and its softmax cost as much as two blocks per token.
func gatherRows(hidden, idx *Node) *Node {
	d := hidden.Shape().Dimensions
	flatH := Reshape(hidden, d[0]*d[1], d[2])
	return Gather(flatH, InsertAxes(idx, -1))
}

// Forward runs the full forward pass and returns logits [B*S*V] and values
// [B*S] as flat row-major slices.
func (p *Policy) Forward(in batchInput) (logits, values []float32, err error) {
	if err := p.checkInput(in); err != nil {
		return nil, nil, err
	}
	if p.fwd == nil {
		p.fwd, err = model.NewExec(p.Backend, p.Store, func(scope *model.Scope, tokens, positions, segments *Node) (*Node, *Node) {
			return p.forwardGraph(scope, tokens, positions, segments)
		})
		if err != nil {
			return nil, nil, fmt.Errorf("model: forward graph: %w", err)
		}
	}
	outs, err := p.fwd.Exec(in.tensors()...)
	if err != nil {
		return nil, nil, fmt.Errorf("model: forward: %w", err)
	}
	logits, err = flat(outs[0])
	if err != nil {
		return nil, nil, err
	}
	values, err = flat(outs[1])
	return logits, values, err
}

func (p *Policy) checkInput(in batchInput) error {
	n := in.B * in.S
	if len(in.Tokens) != n || len(in.Positions) != n || len(in.Segments) != n {
		return fmt.Errorf("model: batch of %dx%d has %d tokens, %d positions, %d segments", in.B, in.S, len(in.Tokens), len(in.Positions), len(in.Segments))
	}
	if in.S > p.Cfg.Ctx {
		return fmt.Errorf("model: sequence length %d exceeds the context %d", in.S, p.Cfg.Ctx)
	}
	for i, t := range in.Tokens {
		if t < 0 || int(t) >= p.Cfg.Vocab {
			return fmt.Errorf("model: token %d at %d is outside the vocabulary [0,%d)", t, i, p.Cfg.Vocab)
		}
		if pos := in.Positions[i]; pos < 0 || int(pos) >= p.Cfg.Ctx {
			return fmt.Errorf("model: position %d at %d is outside the context [0,%d)", pos, i, p.Cfg.Ctx)
		}
	}
	return nil
}

func (in batchInput) tensors() []any {
	return []any{
		i32Tensor(in.Tokens, in.B, in.S),
		i32Tensor(in.Positions, in.B, in.S),
		i32Tensor(in.Segments, in.B, in.S),
	}
}

// NumParams counts the policy's trainable variables (after a graph was built).
func (p *Policy) NumParams() int {
	n := 0
	for v := range p.Store.IterVariables() {
		if v.Trainable && v.Shape().DType == dtypes.Float32 && !isOptimizerVar(v.Path()) {
			n += v.Shape().Size()
		}
	}
	return n
}

func isOptimizerVar(path string) bool {
	return len(path) > 11 && path[:12] == "/optimizers/" || path == "/global_step"
}

var _ = shapes.Make

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
