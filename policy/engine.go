package policy

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/mlerl/mlerl/internal/config"
)

// Batch is a batch of B packed rows of S positions. Tokens are model ids;
// Positions restart at 0 for every example packed into a row (rotary
// embeddings make only differences of positions matter); Segments number
// the examples of a row from 1, 0 being padding. Attention is causal and
// block-diagonal: a position attends only to earlier positions of its own
// example, so packed examples never see each other.
//
// A prompt shared by several samples (the K actions drawn from one state)
// can be packed once: [prompt: segment s, positions 0..P-1][action 1:
// segment s+1, Prefix s, positions P..][action 2: segment s+2, Prefix s,
// positions P..]... Each action then sees the prompt as if it were packed
// alone with it, and the prompt's gradient is the sum over its actions.
// Such a row may be longer than the context: only positions must fit.
type Batch struct {
	B, S                        int
	Tokens, Positions, Segments []int32
	// Prefix, when not nil, gives per position the segment id (in the same
	// row) of a shared prefix that the position also attends to, all of it;
	// 0: none. A prefix segment lies wholly before every position that names it.
	// Every position of a segment names the same prefix, and a prefix has
	// no prefix itself.
	Prefix []int32
}

// Check validates a batch against cfg.
func (b Batch) Check(cfg Config) error {
	n := b.B * b.S
	if len(b.Tokens) != n || len(b.Positions) != n || len(b.Segments) != n {
		return fmt.Errorf("policy: batch of %dx%d has %d tokens, %d positions, %d segments", b.B, b.S, len(b.Tokens), len(b.Positions), len(b.Segments))
	}
	// With shared prefixes a row (a prompt and its K actions) may be longer
	// than the context; what must fit is every position.
	if b.S > cfg.Ctx && b.Prefix == nil {
		return fmt.Errorf("policy: sequence length %d exceeds the context %d", b.S, cfg.Ctx)
	}
	for i, t := range b.Tokens {
		if t < 0 || int(t) >= cfg.Vocab {
			return fmt.Errorf("policy: token %d at %d is outside the vocabulary [0,%d)", t, i, cfg.Vocab)
		}
		if p := b.Positions[i]; p < 0 || int(p) >= cfg.Ctx {
			return fmt.Errorf("policy: position %d at %d is outside the context [0,%d)", p, i, cfg.Ctx)
		}
	}
	if b.Prefix != nil {
		return b.checkPrefix()
	}
	return nil
}

// checkPrefix validates Prefix: per row, every segment names one prefix
// (or none), an earlier segment of the row without a prefix of its own.
func (b Batch) checkPrefix() error {
	if len(b.Prefix) != b.B*b.S {
		return fmt.Errorf("policy: batch of %dx%d has %d prefix ids, want %d (or none)", b.B, b.S, len(b.Prefix), b.B*b.S)
	}
	type span struct {
		first, last int
		prefix      int32
	}
	for r := range b.B {
		segs := map[int32]*span{}
		var order []int32 // segments by first column, for a stable first error
		for j := range b.S {
			i := r*b.S + j
			s, p := b.Segments[i], b.Prefix[i]
			switch {
			case p < 0:
				return fmt.Errorf("policy: batch row %d, column %d: prefix %d is negative (0: none)", r, j, p)
			case s == 0 && p != 0:
				return fmt.Errorf("policy: batch row %d, column %d: padding names prefix %d (want 0)", r, j, p)
			case s == 0:
				continue
			case p == s:
				return fmt.Errorf("policy: batch row %d, column %d: segment %d names itself as its prefix", r, j, s)
			}
			sp := segs[s]
			if sp == nil {
				segs[s] = &span{first: j, last: j, prefix: p}
				order = append(order, s)
				continue
			}
			if sp.prefix != p {
				return fmt.Errorf("policy: batch row %d: segment %d names prefix %d at column %d and %d at column %d (want one per segment)", r, s, sp.prefix, sp.first, p, j)
			}
			sp.last = j
		}
		for _, s := range order {
			sp := segs[s]
			if sp.prefix == 0 {
				continue
			}
			pre := segs[sp.prefix]
			switch {
			case pre == nil:
				return fmt.Errorf("policy: batch row %d: segment %d names prefix %d, which is not a segment of the row", r, s, sp.prefix)
			case pre.prefix != 0:
				return fmt.Errorf("policy: batch row %d: segment %d names prefix %d, which has prefix %d itself (one level only)", r, s, sp.prefix, pre.prefix)
			case pre.last >= sp.first:
				return fmt.Errorf("policy: batch row %d: prefix %d (columns %d-%d) is not wholly before segment %d, which starts at column %d", r, sp.prefix, pre.first, pre.last, s, sp.first)
			}
		}
	}
	return nil
}

// Tensor is a named tensor of a checkpoint: float32 weights and moments,
// or int64 counters.
type Tensor struct {
	Name  string
	Shape []int
	F32   []float32
	I64   []int64
	// Blocks, when set (F32 nil), is a base matrix in quantized blocks
	// of format Quant (q8_0, q4_0, q4_1, or a raw format: q5_1, the
	// K-quants, iq4_xs) as a GGUF file stores them: its
	// rows are the outputs of a dense weight (Shape being the native [in,
	// out]) or the embedding's tokens (native.Model.SetParamBlocks).
	Blocks []byte
	Quant  string
}

// LossFunc turns the model's outputs at the requested positions (logits
// [K*V] and values [K]) into a loss and writes its gradient with respect
// to them into dLogits and dValues (zeroed, same shapes). Losses are
// computed on the host, the same code for every engine.
type LossFunc func(logits, values, dLogits, dValues []float32) (loss float64)

// Engine runs the policy's numerics: the native CPU engine (policy/native)
// or GoMLX (policy/gomlx, XLA on GPUs). Both compute the same function of
// the same weights (the engine-agreement tests check logits, losses and
// gradients). An Engine is not safe for concurrent use.
type Engine interface {
	// Name is "native" or "gomlx".
	Name() string
	Config() Config
	// Logits runs the model on b and returns the logits [len(idx)*V] and
	// values [len(idx)] at the flat positions idx (into B*S).
	Logits(b Batch, idx []int32) (logits, values []float32, err error)
	// TrainStep is one update: forward over b, the heads at idx, loss on
	// the host, backward, global-norm clipping and AdamW at learning rate
	// lr (see SetOptim). It returns the loss and the gradient norm before
	// clipping.
	TrainStep(b Batch, idx []int32, loss LossFunc, lr float64) (lossValue, gradNorm float64, err error)
	// Gradients returns the loss and its gradient with respect to every
	// weight (Config.Params order) without updating anything: the
	// engine-agreement tests and gradient checks use it.
	Gradients(b Batch, idx []int32, loss LossFunc) (lossValue float64, grads []Tensor, err error)
	// SetOptim sets the optimiser's hyper-parameters (before TrainStep).
	SetOptim(OptimConfig)
	// NewDecoder starts incremental decoding of rows sequences with a
	// key-value cache.
	NewDecoder(rows int) (Decoder, error)
	// Weights returns a copy of every weight, in Config.Params order.
	Weights() ([]Tensor, error)
	// SetWeights replaces the weights (every name of Config.Params).
	SetWeights([]Tensor) error
	// OptimizerState returns the optimiser's moments and step counters
	// (names are the engine's own), SetOptimizerState restores them.
	OptimizerState() ([]Tensor, error)
	SetOptimizerState([]Tensor) error
	Close() error
}

// Decoder decodes rows sequences incrementally.
type Decoder interface {
	// Prefill starts row i with prompts[i] (positions from 0) and returns
	// the logits [rows*V] at each prompt's last token. Identical prompts
	// are computed once and their cache rows forked, so prefilling K
	// copies of a prompt costs about as much as one.
	Prefill(prompts [][]int32) (logits []float32, err error)
	// Extend appends tokens[i] to row i (rows given none are left as they
	// are: finished rows cost nothing) in one forward call, and returns the
	// logits [rows*V] at each extended row's new last token; entries of
	// other rows are unspecified. Several tokens per row is the
	// jump-forward of constrained decoding.
	Extend(tokens [][]int32) (logits []float32, err error)
	Close()
}

// newTokensExpecter is a Decoder that sizes its cache for the tokens its
// rows will decode when told how many (before Prefill); Generate tells
// it. Decoders without it size their caches as they do.
type newTokensExpecter interface{ ExpectNew(n int) }

// promptSources maps each prompt to the first row holding the same tokens
// (src[i] == i for the first of each distinct prompt). Decoders prefill
// only those rows and fork their caches to the others: the K samples
// drawn from one state share one prompt, computed once.
func promptSources(prompts [][]int32) []int {
	src := make([]int, len(prompts))
	first := make(map[string]int, len(prompts))
	for i, p := range prompts {
		key := string(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(p))), 4*len(p)))
		if j, ok := first[key]; ok {
			src[i] = j
			continue
		}
		first[key], src[i] = i, i
	}
	return src
}

// OptimConfig configures AdamW, the learning-rate schedule and clipping,
// shared by SFT and PPO.
type OptimConfig struct {
	LR          float64 `yaml:"lr" help:"peak learning rate"`
	MinLRRatio  float64 `yaml:"min_lr_ratio" help:"cosine floor as a fraction of lr"`
	WarmupSteps int     `yaml:"warmup_steps" help:"linear warmup steps"`
	WeightDecay float64 `yaml:"weight_decay" help:"AdamW decoupled weight decay"`
	Beta1       float64 `yaml:"beta1" help:"AdamW beta1"`
	Beta2       float64 `yaml:"beta2" help:"AdamW beta2"`
	ClipNorm    float64 `yaml:"clip_norm" help:"clip the global gradient norm to this (0: off)"`
	// DetachValue keeps the value loss's gradient out of the trunk: the
	// value head learns on the trunk's features without moving them (PPO's
	// critic, a separate head; set by the trainer, not a YAML key).
	DetachValue bool `yaml:"-"`
}

// Validate checks the optimiser settings, each failure one line naming
// the key (relative to the optim block).
func (o OptimConfig) Validate() error {
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	switch {
	case !(o.LR > 0) || !finite(o.LR):
		return config.Errorf("lr", o.LR, "must be a positive number")
	case !(o.MinLRRatio >= 0 && o.MinLRRatio <= 1):
		return config.Errorf("min_lr_ratio", o.MinLRRatio, "must be in [0, 1] (a fraction of lr)")
	case o.WarmupSteps < 0:
		return config.Errorf("warmup_steps", o.WarmupSteps, "must not be negative")
	case !(o.WeightDecay >= 0) || !finite(o.WeightDecay):
		return config.Errorf("weight_decay", o.WeightDecay, "must be a number >= 0")
	case !(o.Beta1 >= 0 && o.Beta1 < 1):
		return config.Errorf("beta1", o.Beta1, "must be in [0, 1)")
	case !(o.Beta2 >= 0 && o.Beta2 < 1):
		return config.Errorf("beta2", o.Beta2, "must be in [0, 1)")
	case !(o.ClipNorm >= 0) || !finite(o.ClipNorm):
		return config.Errorf("clip_norm", o.ClipNorm, "must be a number >= 0 (0: off)")
	}
	return nil
}

// LRAt is the learning rate at step (0-based) of total: linear warmup to
// LR over WarmupSteps, then a cosine down to LR*MinLRRatio at total. It is
// computed on the host, so a resumed run continues the same schedule.
func (o OptimConfig) LRAt(step, total int) float64 {
	if step < o.WarmupSteps {
		return o.LR * float64(step+1) / float64(o.WarmupSteps)
	}
	span := total - o.WarmupSteps
	if span <= 0 {
		return o.LR
	}
	frac := math.Min(1, float64(step-o.WarmupSteps)/float64(span))
	floor := o.LR * o.MinLRRatio
	return floor + (o.LR-floor)*0.5*(1+math.Cos(math.Pi*frac))
}

// Engine names for the stages' `engine` key.
const (
	EngineNative = "native"
	EngineGoMLX  = "gomlx"
)

// NewEngine returns the named engine for cfg with the given weights (nil:
// InitWeights(cfg, 0)): "native" (the CPU engine, the default) or "gomlx"
// (GoMLX on the backend GOMLX_BACKEND names: XLA on a GPU machine).
// mlerl's own model; a Hugging Face policy's engines come from
// [Policy.NewEngine].
func NewEngine(name string, cfg Config, weights []Tensor) (Engine, error) {
	return buildEngine(name, cfg, 0, weights, baseSource{})
}

// weightSource gives an engine its base weights one tensor at a time, by
// native name in the engine's layout (a Hugging Face folder's, streamed
// so that the engine holds the only full copy).
type weightSource func(set func(Tensor) error) error

// baseSource is a Hugging Face policy's base for an engine: its weights,
// and under base_storage quant the storage of each matrix a GGUF file
// keeps in quantized blocks (native.Options.MatrixStorage; those
// tensors come as blocks, Tensor.Blocks).
type baseSource struct {
	load    weightSource
	storage map[string]string
}

// buildEngine is the one place the `engine` key chooses an engine. mlerl's
// model (cfg.Standard) takes every weight from weights. Another
// architecture starts from seed (fresh adapters and value head), takes
// its base from base, then weights (a checkpoint's trained tensors) on
// top.
func buildEngine(name string, cfg Config, seed uint64, weights []Tensor, base baseSource) (Engine, error) {
	switch name {
	case EngineNative:
		if cfg.Standard() {
			return NewNativeEngine(cfg, weights)
		}
		return newNativeArch(cfg, seed, base, weights)
	case EngineGoMLX:
		if cfg.Standard() {
			return NewGoMLXEngine(cfg, nil, weights)
		}
		if QuantizedStorage(cfg.BaseStorage) {
			return nil, fmt.Errorf("base_storage %s: a base in quantized blocks is the %s engine's (the %s engine stores fp32 or bf16)", cfg.BaseStorage, EngineNative, EngineGoMLX)
		}
		return newGomlxPolicyEngine(cfg, seed, base.load, weights)
	}
	return nil, fmt.Errorf("engine %q is not known (known: %s, %s)", name, EngineNative, EngineGoMLX)
}

// NewEngine builds the named engine of the policy. mlerl's model takes
// weights (nil: InitWeights(Model, 0)). A Hugging Face policy loads its
// base from the folder (and the adapter it starts from), draws fresh
// adapters and a fresh value head from seed, then takes weights (a
// checkpoint's trained tensors, by native name) on top.
func (p *Policy) NewEngine(name string, seed uint64, weights []Tensor) (Engine, error) {
	if p.hf == nil {
		return buildEngine(name, p.Model, seed, weights, baseSource{})
	}
	return buildEngine(name, p.Model, seed, weights, baseSource{load: p.loadBase, storage: p.matrixStorage()})
}

// TrainableWeights returns the weights of e that train (every weight of
// mlerl's model; a LoRA model's adapters and value head): what a
// checkpoint of a frozen base needs to hold.
func TrainableWeights(e Engine) ([]Tensor, error) {
	if t, ok := e.(interface{ TrainableWeights() ([]Tensor, error) }); ok {
		return t.TrainableWeights()
	}
	return e.Weights()
}
