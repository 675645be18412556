package native

import (
	"fmt"
	"math"
)

// Config is the shape and architecture of the transformer. The zero
// value of every field after Ctx (and of FFN and RoPEBase) selects mlerl's
// own model: LayerNorm, GELU FFN, multi-head attention, biases on every
// dense layer, an untied LM head. The Hugging Face decoder families set
// the fields after Ctx (doc.go lists them per family).
type Config struct {
	Vocab    int     // token ids are in [0, Vocab)
	DModel   int     // width D of the residual stream
	Heads    int     // query heads H
	Layers   int     // transformer blocks
	FFN      int     // hidden width of the feed-forward layer; 0 means 4*DModel
	Ctx      int     // positions are in [0, Ctx)
	RoPEBase float64 // RoPE frequency base (rope_theta); 0 means 10000

	// KVHeads is the number of key/value heads; each serves Heads/KVHeads
	// query heads (grouped-query attention). 0 means Heads.
	KVHeads int
	// HeadSize is the width of one head; 0 means DModel/Heads (which must
	// then divide). It must be even (RoPE pairs).
	HeadSize int
	// Norm is NormLayer (LayerNorm with gain and offset, eps 1e-5; "" is
	// the same) or NormRMS (x·rsqrt(mean(x²)+NormEps)·gain, in float32
	// as Hugging Face computes it).
	Norm string
	// NormEps is RMSNorm's epsilon (rms_norm_eps); 0 means 1e-6.
	// LayerNorm's is fixed at 1e-5 (0 or 1e-5 here).
	NormEps float64
	// FFNKind is FFNGELU (in, exact GELU, out; "" is the same) or
	// FFNSwiGLU (down(silu(gate(x)) * up(x))).
	FFNKind string
	// NoQKVBias, NoOutBias, NoFFNBias and NoLMBias drop the biases of the
	// query/key/value projections, the attention output, the FFN's
	// matrices and the (untied) LM head.
	NoQKVBias, NoOutBias, NoFFNBias, NoLMBias bool
	// QKNorm applies RMSNorm (weights of HeadSize, eps NormEps) to each
	// head of the queries and keys before RoPE (Qwen3).
	QKNorm bool
	// TiedEmbed makes the LM head the token embedding: logits = h·Eᵀ, no
	// LM head parameters of its own.
	TiedEmbed bool
	// InvFreq, when set, is RoPE's inverse frequency per pair, HeadSize/2
	// values (Llama 3's rope_scaling rescales them); position p rotates
	// pair i by p·InvFreq[i]. nil means RoPEBase^(-2i/HeadSize).
	InvFreq []float64
}

// Norm and FFN kinds of Config.
const (
	NormLayer = "layernorm"
	NormRMS   = "rmsnorm"
	FFNGELU   = "gelu"
	FFNSwiGLU = "swiglu"
)

// lnEps is LayerNorm's epsilon; defaultRMSEps RMSNorm's unless set.
const (
	lnEps         = 1e-5
	defaultRMSEps = 1e-6
)

// resolved returns c with the defaults filled in; derived values are
// computed here and nowhere else.
func (c Config) resolved() Config {
	if c.FFN == 0 {
		c.FFN = 4 * c.DModel
	}
	if c.RoPEBase == 0 {
		c.RoPEBase = 10000
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.HeadSize == 0 && c.Heads > 0 {
		c.HeadSize = c.DModel / c.Heads
	}
	if c.Norm == "" {
		c.Norm = NormLayer
	}
	if c.NormEps == 0 {
		c.NormEps = lnEps
		if c.Norm == NormRMS {
			c.NormEps = defaultRMSEps
		}
	}
	if c.FFNKind == "" {
		c.FFNKind = FFNGELU
	}
	return c
}

// HeadDim is the width of one head: HeadSize, or DModel / Heads.
func (c Config) HeadDim() int {
	if c.HeadSize > 0 {
		return c.HeadSize
	}
	return c.DModel / max(c.Heads, 1)
}

// QDim is the width of the queries (and the attention's output): Heads x
// HeadDim.
func (c Config) QDim() int { return c.Heads * c.HeadDim() }

// KVDim is the width of the keys and of the values: KVHeads x HeadDim.
func (c Config) KVDim() int {
	kv := c.KVHeads
	if kv == 0 {
		kv = c.Heads
	}
	return kv * c.HeadDim()
}

// rms reports whether the norms are RMSNorm.
func (c Config) rms() bool { return c.Norm == NormRMS }

// swiglu reports whether the FFN is SwiGLU.
func (c Config) swiglu() bool { return c.FFNKind == FFNSwiGLU }

// Standard reports whether c is mlerl's own architecture (every field
// after Ctx at its zero value, or spelled out as the default): the model
// the GoMLX engine and the ONNX export also compute.
func (c Config) Standard() bool {
	r := c.resolved()
	return r.KVHeads == r.Heads && r.HeadSize*r.Heads == r.DModel && r.Norm == NormLayer && r.FFNKind == FFNGELU &&
		!r.NoQKVBias && !r.NoOutBias && !r.NoFFNBias && !r.NoLMBias && !r.QKNorm && !r.TiedEmbed && r.InvFreq == nil
}

// Validate reports whether the shape can be built.
func (c Config) Validate() error {
	r := c.resolved()
	switch {
	case r.Vocab <= 0 || r.DModel <= 0 || r.Heads <= 0 || r.Layers <= 0 || r.Ctx <= 0 || r.FFN <= 0:
		return fmt.Errorf("native: vocab, d_model, heads, layers, ffn and ctx must be positive (got %d, %d, %d, %d, %d, %d)",
			r.Vocab, r.DModel, r.Heads, r.Layers, r.FFN, r.Ctx)
	case c.HeadSize < 0 || c.KVHeads < 0:
		return fmt.Errorf("native: head size %d and kv heads %d must not be negative", c.HeadSize, c.KVHeads)
	case c.HeadSize == 0 && r.DModel%r.Heads != 0:
		return fmt.Errorf("native: d_model %d is not a multiple of heads %d (set HeadSize for heads of another width)", r.DModel, r.Heads)
	case r.HeadDim()%2 != 0:
		return fmt.Errorf("native: head dim %d must be even for RoPE", r.HeadDim())
	case r.Heads%r.KVHeads != 0:
		return fmt.Errorf("native: heads %d is not a multiple of kv heads %d", r.Heads, r.KVHeads)
	case r.RoPEBase <= 1:
		return fmt.Errorf("native: rope base %g must be > 1", r.RoPEBase)
	case r.Norm != NormLayer && r.Norm != NormRMS:
		return fmt.Errorf("native: norm %q: want %q or %q", c.Norm, NormLayer, NormRMS)
	case r.Norm == NormLayer && r.NormEps != lnEps:
		return fmt.Errorf("native: norm eps %g: LayerNorm's is fixed at %g", c.NormEps, lnEps)
	case r.NormEps < 0 || math.IsNaN(r.NormEps) || math.IsInf(r.NormEps, 0):
		return fmt.Errorf("native: norm eps %g must be a finite value >= 0", c.NormEps)
	case r.FFNKind != FFNGELU && r.FFNKind != FFNSwiGLU:
		return fmt.Errorf("native: ffn kind %q: want %q or %q", c.FFNKind, FFNGELU, FFNSwiGLU)
	case r.InvFreq != nil && len(r.InvFreq) != r.HeadDim()/2:
		return fmt.Errorf("native: %d rope inverse frequencies for head dim %d (want %d)", len(r.InvFreq), r.HeadDim(), r.HeadDim()/2)
	}
	for i, f := range r.InvFreq {
		if !(f >= 0) || math.IsInf(f, 0) {
			return fmt.Errorf("native: rope inverse frequency %d is %g; want a finite value >= 0", i, f)
		}
	}
	return nil
}
