package native

import "fmt"

// Config is the shape of the transformer. The zero value of FFN and
// RoPEBase selects their defaults.
type Config struct {
	Vocab    int     // token ids are in [0, Vocab)
	DModel   int     // width D of the residual stream
	Heads    int     // attention heads H; head dim D/H must be even (RoPE)
	Layers   int     // transformer blocks
	FFN      int     // hidden width of the feed-forward layer; 0 means 4*DModel
	Ctx      int     // positions are in [0, Ctx)
	RoPEBase float64 // RoPE frequency base; 0 means 10000
}

// resolved returns c with the defaults filled in; derived values are
// computed here and nowhere else.
func (c Config) resolved() Config {
	if c.FFN == 0 {
		c.FFN = 4 * c.DModel
	}
	if c.RoPEBase == 0 {
		c.RoPEBase = 10000
	}
	return c
}

// HeadDim is DModel / Heads.
func (c Config) HeadDim() int { return c.DModel / max(c.Heads, 1) }

// Validate reports whether the shape can be built.
func (c Config) Validate() error {
	r := c.resolved()
	switch {
	case r.Vocab <= 0 || r.DModel <= 0 || r.Heads <= 0 || r.Layers <= 0 || r.Ctx <= 0 || r.FFN <= 0:
		return fmt.Errorf("native: vocab, d_model, heads, layers, ffn and ctx must be positive (got %d, %d, %d, %d, %d, %d)",
			r.Vocab, r.DModel, r.Heads, r.Layers, r.FFN, r.Ctx)
	case r.DModel%r.Heads != 0:
		return fmt.Errorf("native: d_model %d is not a multiple of heads %d", r.DModel, r.Heads)
	case r.HeadDim()%2 != 0:
		return fmt.Errorf("native: head dim %d (d_model/heads) must be even for RoPE", r.HeadDim())
	case r.RoPEBase <= 1:
		return fmt.Errorf("native: rope base %g must be > 1", r.RoPEBase)
	}
	return nil
}
