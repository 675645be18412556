package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/mlerl/mlerl/internal/config"
	"github.com/mlerl/mlerl/policy/native"
)

// Config is the shape of the policy and the lengths it reads and writes.
//
// Every prompt is fitted to PromptTokens tokens after BOS (see
// [EncodePrompt]) and every response to ResponseTokens, in SFT, PPO and
// evaluation alike, so Ctx must hold 1 + PromptTokens + ResponseTokens.
type Config struct {
	// Vocab is the trimmed vocabulary size; 0 means "from the vocabulary
	// mapping" (the usual case: the trainer fills it in).
	Vocab  int `yaml:"vocab" help:"vocabulary size (0: from the trimmed vocabulary)"`
	DModel int `yaml:"d_model" help:"embedding width"`
	Heads  int `yaml:"heads" help:"attention heads (d_model must be a multiple, with an even head width)"`
	Layers int `yaml:"layers" help:"transformer blocks"`
	// FFN is the feed-forward width; 0 means 4*d_model.
	FFN int `yaml:"ffn" help:"feed-forward width (0: 4*d_model)"`
	// Ctx bounds BOS + prompt + response, in tokens.
	Ctx int `yaml:"ctx" help:"context length in tokens (BOS + prompt_tokens + response_tokens must fit)"`
	// RoPEBase is the rotary embedding's base (Llama and Qwen use 10,000
	// and more); 0 means 10,000.
	RoPEBase float64 `yaml:"rope_base" help:"rotary position embedding base (0: 10000)"`
	// PromptTokens is the prompt budget after BOS; longer prompts lose
	// their oldest history lines first (see FitPrompt).
	PromptTokens int `yaml:"prompt_tokens" help:"prompt budget in tokens after BOS (longer prompts drop their oldest history lines)"`
	// ResponseTokens is the longest response (the EOS included).
	ResponseTokens int `yaml:"response_tokens" help:"longest response in tokens, EOS included"`

	// The architecture: each field maps 1:1 onto native.Config's field of
	// the same name, and their zero values are mlerl's own model. A
	// Hugging Face policy's come from its config.json (policy/native/doc.go
	// has the table), never from flags; model.json records them, and
	// omits them for mlerl's model, whose model.json stays as it was.
	KVHeads   int       `yaml:"-" json:",omitempty"`
	HeadSize  int       `yaml:"-" json:",omitempty"`
	Norm      string    `yaml:"-" json:",omitempty"`
	NormEps   float64   `yaml:"-" json:",omitempty"`
	FFNKind   string    `yaml:"-" json:",omitempty"`
	NoQKVBias bool      `yaml:"-" json:",omitempty"`
	NoOutBias bool      `yaml:"-" json:",omitempty"`
	NoFFNBias bool      `yaml:"-" json:",omitempty"`
	NoLMBias  bool      `yaml:"-" json:",omitempty"`
	QKNorm    bool      `yaml:"-" json:",omitempty"`
	TiedEmbed bool      `yaml:"-" json:",omitempty"`
	InvFreq   []float64 `yaml:"-" json:",omitempty"`

	// How the weights are trained and stored, resolved from the stage's
	// Tuning (Hugging Face policies only): LoRA adapters on a frozen base
	// (nil: every weight trains), the frozen base's storage (fp32, bf16,
	// quant, q8_0, q4_0 or q4_1: auto is resolved before,
	// ResolveBaseStorage) and activation recomputation. An engine is
	// built from them, so a checkpoint's model.json says how to rebuild
	// its policy. BaseStorage other than
	// fp32 without LoRA is a frozen base stored as a LoRA model's
	// (inference, or a reference): the stages train every weight of such
	// a policy in float32 instead (Tuning).
	LoRA        *LoRAConfig `yaml:"-" json:",omitempty"`
	BaseStorage string      `yaml:"-" json:",omitempty"`
	Recompute   bool        `yaml:"-" json:",omitempty"`
	// QuantActivations is int8 when a policy that only generates asks the
	// native engine for int8 products with its quantized base
	// (ActivationsInt8); "" (float32) otherwise.
	QuantActivations string `yaml:"-" json:",omitempty"`
}

// Native is the native engine's config of c: the shape, then the
// architecture fields one for one (mlerl's model leaves them zero).
func (c Config) Native() native.Config {
	return native.Config{Vocab: c.Vocab, DModel: c.DModel, Heads: c.Heads, Layers: c.Layers, FFN: c.FFNWidth(), Ctx: c.Ctx, RoPEBase: c.Base(),
		KVHeads: c.KVHeads, HeadSize: c.HeadSize, Norm: c.Norm, NormEps: c.NormEps, FFNKind: c.FFNKind,
		NoQKVBias: c.NoQKVBias, NoOutBias: c.NoOutBias, NoFFNBias: c.NoFFNBias, NoLMBias: c.NoLMBias,
		QKNorm: c.QKNorm, TiedEmbed: c.TiedEmbed, InvFreq: c.InvFreq}
}

// Standard reports whether c is mlerl's own architecture, the one every
// engine computes (GoMLX, the ONNX export); Hugging Face architectures
// run on the native engine.
func (c Config) Standard() bool { return c.Native().Standard() && c.LoRA == nil }

// DemoConfig is the CPU demo policy: 4 blocks of width 256 with a
// 640-token context (a 448-token prompt, the rollouts' compact budget,
// and a 160-token response); with a trimmed vocabulary of ~4k ids it has
// about 5.3M parameters.
func DemoConfig() Config {
	return Config{DModel: 256, Heads: 4, Layers: 4, Ctx: 640, PromptTokens: 448, ResponseTokens: 160}
}

// BenchConfig is the benchmark shape: 2 blocks of width 128, ctx 256
// (~1.5M parameters with a 4k vocabulary).
func BenchConfig() Config {
	return Config{DModel: 128, Heads: 4, Layers: 2, Ctx: 256, PromptTokens: 160, ResponseTokens: 95}
}

// SmallConfig is a ~30M-parameter policy for a GPU (GOMLX_BACKEND=xla:cuda).
func SmallConfig() Config {
	return Config{DModel: 512, Heads: 8, Layers: 8, Ctx: 1024, PromptTokens: 768, ResponseTokens: 255}
}

// MediumConfig is the GPT-2-small shape (~110M parameters with a 32k vocabulary).
func MediumConfig() Config {
	return Config{DModel: 768, Heads: 12, Layers: 12, Ctx: 2048, PromptTokens: 1536, ResponseTokens: 511}
}

// Validate checks the shape is buildable and the lengths fit the context,
// each failure one line naming the key (relative to the model block).
func (c Config) Validate() error {
	switch {
	case c.DModel <= 0:
		return config.Errorf("d_model", c.DModel, "must be positive")
	case c.Heads <= 0:
		return config.Errorf("heads", c.Heads, "must be positive")
	case c.HeadSize < 0:
		return config.Errorf("head_size", c.HeadSize, "must not be negative (0: d_model/heads)")
	case c.HeadSize > 0 && c.HeadSize%2 != 0:
		return config.Errorf("head_size", c.HeadSize, "must be even (rotary embeddings rotate pairs)")
	case c.KVHeads < 0 || c.KVHeads > 0 && c.Heads%c.KVHeads != 0:
		return config.Errorf("kv_heads", c.KVHeads, "must divide heads (%d)", c.Heads)
	case c.HeadSize == 0 && c.DModel%c.Heads != 0:
		return config.Errorf("heads", c.Heads, "must divide d_model (%d)", c.DModel)
	case c.HeadSize == 0 && (c.DModel/c.Heads)%2 != 0:
		return config.Errorf("heads", c.Heads, "must leave an even head width (d_model/heads is %d; rotary embeddings rotate pairs)", c.DModel/c.Heads)
	case c.Layers <= 0:
		return config.Errorf("layers", c.Layers, "must be positive")
	case c.Ctx <= 0:
		return config.Errorf("ctx", c.Ctx, "must be positive")
	case c.FFN < 0:
		return config.Errorf("ffn", c.FFN, "must not be negative (0: 4*d_model)")
	case c.Vocab < 0:
		return config.Errorf("vocab", c.Vocab, "must not be negative (0: from the trimmed vocabulary)")
	case !(c.RoPEBase == 0 || c.RoPEBase > 1) || math.IsInf(c.RoPEBase, 0):
		return config.Errorf("rope_base", c.RoPEBase, "must be a number > 1 (0: 10000)")
	case c.PromptTokens < 16:
		return config.Errorf("prompt_tokens", c.PromptTokens, "must be at least 16")
	case c.ResponseTokens < 2:
		return config.Errorf("response_tokens", c.ResponseTokens, "must be at least 2")
	case c.Ctx < 1+c.PromptTokens+c.ResponseTokens:
		return config.Errorf("ctx", c.Ctx, "cannot hold BOS + prompt_tokens %d + response_tokens %d = %d: raise ctx or lower the budgets", c.PromptTokens, c.ResponseTokens, 1+c.PromptTokens+c.ResponseTokens)
	}
	return nil
}

// ValidateWithVocab is Validate plus a vocabulary check (once the
// vocabulary is known).
func (c Config) ValidateWithVocab() error {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Vocab < NumSpecial {
		return config.Errorf("vocab", c.Vocab, "must be at least %d (the special tokens)", NumSpecial)
	}
	return nil
}

// FFNWidth is the feed-forward width.
func (c Config) FFNWidth() int {
	if c.FFN > 0 {
		return c.FFN
	}
	return 4 * c.DModel
}

// HeadDim is the width of one attention head: HeadSize, or d_model/heads.
func (c Config) HeadDim() int {
	if c.HeadSize > 0 {
		return c.HeadSize
	}
	return c.DModel / c.Heads
}

// Base is the rotary base.
func (c Config) Base() float64 {
	if c.RoPEBase > 0 {
		return c.RoPEBase
	}
	return 10000
}

// ParamShape is one weight tensor of the model: its checkpoint name (the
// GoMLX variable path; both engines use it) and shape.
type ParamShape struct {
	Name  string
	Shape []int
}

// Size is the number of elements.
func (p ParamShape) Size() int {
	n := 1
	for _, d := range p.Shape {
		n *= d
	}
	return n
}

// Params lists the model's weights in canonical order: the token
// embedding; per block the attention LayerNorm, q, k, v, out, the FFN
// LayerNorm, ffn_in, ffn_out; the final LayerNorm, the LM head and the
// value head. Dense weights are [in, out] (y = x W + b).
func (c Config) Params() []ParamShape {
	d, f, v := c.DModel, c.FFNWidth(), c.Vocab
	ps := []ParamShape{{"/token_embed/embeddings", []int{v, d}}}
	ln := func(prefix string) []ParamShape {
		return []ParamShape{{prefix + "/layer_normalization/gain", []int{d}}, {prefix + "/layer_normalization/offset", []int{d}}}
	}
	dense := func(prefix string, in, out int) []ParamShape {
		return []ParamShape{{prefix + "/dense/weights", []int{in, out}}, {prefix + "/dense/biases", []int{out}}}
	}
	for l := range c.Layers {
		b := fmt.Sprintf("/block_%d/", l)
		ps = append(ps, ln(b+"ln_attn")...)
		for _, name := range []string{"q", "k", "v", "out"} {
			ps = append(ps, dense(b+name, d, d)...)
		}
		ps = append(ps, ln(b+"ln_ffn")...)
		ps = append(ps, dense(b+"ffn_in", d, f)...)
		ps = append(ps, dense(b+"ffn_out", f, d)...)
	}
	ps = append(ps, ln("/ln_final")...)
	ps = append(ps, dense("/lm_head", d, v)...)
	ps = append(ps, dense("/value_head", d, 1)...)
	return ps
}

// NumParams is the number of parameters: every weight of mlerl's model;
// for another architecture the base, the value head and the adapters
// (native.Model's count, frozen weights included).
func (c Config) NumParams() int {
	if !c.Standard() {
		base, adapters := c.nativeCounts()
		return base + adapters
	}
	n := 0
	for _, p := range c.Params() {
		n += p.Size()
	}
	return n
}

// NumTrainable is the number of parameters that train: all of them, or
// with LoRA the adapters and the value head.
func (c Config) NumTrainable() int {
	if c.LoRA == nil {
		return c.NumParams()
	}
	_, adapters := c.nativeCounts()
	return adapters + c.DModel + 1
}

// nativeCounts counts a non-standard architecture's parameters: the base
// with its value head, and the LoRA adapters.
func (c Config) nativeCounts() (base, adapters int) {
	n := c.Native()
	d, f, v, qd, kvd := c.DModel, c.FFNWidth(), c.Vocab, n.QDim(), n.KVDim()
	norm := d
	if c.Norm != native.NormRMS {
		norm = 2 * d
	}
	bias := func(no bool, w int) int {
		if no {
			return 0
		}
		return w
	}
	ffnMats := 2
	if c.FFNKind == native.FFNSwiGLU {
		ffnMats = 3
	}
	layer := 2*norm + d*qd + 2*d*kvd + qd*d + ffnMats*d*f +
		bias(c.NoQKVBias, qd+2*kvd) + bias(c.NoOutBias, d) + bias(c.NoFFNBias, (ffnMats-1)*f+d)
	if c.QKNorm {
		layer += 2 * c.HeadDim()
	}
	base = v*d + c.Layers*layer + norm + d + 1
	if !c.TiedEmbed {
		base += d*v + bias(c.NoLMBias, v)
	}
	if lo := c.LoRA; lo != nil {
		dims := map[string][2]int{"q": {d, qd}, "k": {d, kvd}, "v": {d, kvd}, "o": {qd, d}, "gate": {d, f}, "up": {d, f}, "down": {f, d}}
		for _, t := range lo.Targets {
			io := dims[strings.TrimSuffix(t, "_proj")]
			adapters += c.Layers * lo.Rank * (io[0] + io[1])
		}
	}
	return base, adapters
}

// InitWeights returns freshly initialised weights for cfg, the same for
// both engines: embeddings and dense weights normal with std 0.02 (the
// residual outputs, out and ffn_out, scaled by 1/sqrt(2*layers) as in
// GPT-2), LayerNorm gains 1, offsets and biases 0.
func InitWeights(cfg Config, seed uint64) []Tensor {
	r := rand.New(rand.NewPCG(seed, 0x706f6c69))
	resid := 0.02 / math.Sqrt(2*float64(cfg.Layers))
	var out []Tensor
	for _, p := range cfg.Params() {
		t := Tensor{Name: p.Name, Shape: p.Shape, F32: make([]float32, p.Size())}
		switch {
		case hasSuffix(p.Name, "/gain"):
			for i := range t.F32 {
				t.F32[i] = 1
			}
		case hasSuffix(p.Name, "/offset"), hasSuffix(p.Name, "/biases"):
		default:
			std := 0.02
			if hasSuffix(p.Name, "/out/dense/weights") || hasSuffix(p.Name, "/ffn_out/dense/weights") {
				std = resid
			}
			for i := range t.F32 {
				t.F32[i] = float32(r.NormFloat64() * std)
			}
		}
		out = append(out, t)
	}
	return out
}

func hasSuffix(s, suf string) bool { return len(s) >= len(suf) && s[len(s)-len(suf):] == suf }

// RoPETable returns cos and sin of the rotary angles, [Ctx, HeadDim/2]
// each, computed in float64: angle(pos, i) = pos * base^(-2i/HeadDim).
// Both engines read the same table.
func RoPETable(cfg Config) (cos, sin []float32) {
	half := cfg.HeadDim() / 2
	cos, sin = make([]float32, cfg.Ctx*half), make([]float32, cfg.Ctx*half)
	for p := range cfg.Ctx {
		for i := range half {
			a := float64(p) * math.Pow(cfg.Base(), -2*float64(i)/float64(cfg.HeadDim()))
			cos[p*half+i], sin[p*half+i] = float32(math.Cos(a)), float32(math.Sin(a))
		}
	}
	return cos, sin
}
