package onnxpeer

import (
	"fmt"
	"math"

	"github.com/mlerl/mlerl/policy/native"
)

// Graphs is a native policy exported as the two ONNX models of
// generation, with the shape they were built for.
type Graphs struct {
	Config native.Config // resolved: FFN and RoPEBase filled in

	// Prefill maps input_ids int64 [batch, seq] to logits float32
	// [batch, vocab] at each row's last position, and per layer l
	// present_key_l and present_value_l float32 [batch, heads, seq,
	// head_dim] (keys after RoPE, as the native cache holds them).
	Prefill []byte

	// Decode maps input_ids int64 [batch, 1] (one new token per row)
	// and per layer past_key_l, past_value_l [batch, heads, past,
	// head_dim] to logits [batch, vocab] and present_key_l,
	// present_value_l [batch, heads, past+1, head_dim]. The new token's
	// position is past (every row holds the same number of tokens).
	Decode []byte

	// DecodeInPlace is Decode for a cache that the caller keeps in
	// place: it maps input_ids [batch, 1], position int64 [1] (the
	// number of tokens each row holds) and per layer cache_key_l,
	// cache_value_l [batch, heads, capacity, head_dim] (slots from
	// position on are ignored) to logits [batch, vocab] and the new
	// token's new_key_l, new_value_l [batch, heads, 1, head_dim], which
	// the caller writes at slot position. Unlike Decode it never copies
	// the cache (Decode's Concat copies all of it every step); its
	// attention reads every slot of capacity, the ones not yet filled
	// masked.
	DecodeInPlace []byte
}

// Input and output names of the graphs.
const (
	InputIDs = "input_ids"
	Logits   = "logits"
)

// PastKey names layer l's cached keys, an input of Decode.
func PastKey(l int) string { return fmt.Sprintf("past_key_%d", l) }

// PastValue names layer l's cached values, an input of Decode.
func PastValue(l int) string { return fmt.Sprintf("past_value_%d", l) }

// PresentKey names layer l's keys with the new tokens', an output of
// both graphs.
func PresentKey(l int) string { return fmt.Sprintf("present_key_%d", l) }

// PresentValue names layer l's values with the new tokens', an output
// of both graphs.
func PresentValue(l int) string { return fmt.Sprintf("present_value_%d", l) }

// Position is DecodeInPlace's position input.
const Position = "position"

// CacheKey names layer l's keys, an input of DecodeInPlace.
func CacheKey(l int) string { return fmt.Sprintf("cache_key_%d", l) }

// CacheValue names layer l's values, an input of DecodeInPlace.
func CacheValue(l int) string { return fmt.Sprintf("cache_value_%d", l) }

// NewKey names layer l's keys of the new token, an output of
// DecodeInPlace.
func NewKey(l int) string { return fmt.Sprintf("new_key_%d", l) }

// NewValue names layer l's values of the new token, an output of
// DecodeInPlace.
func NewValue(l int) string { return fmt.Sprintf("new_value_%d", l) }

// lnEps is the native engine's LayerNorm epsilon (policy/native layers.go).
const lnEps = 1e-5

// Export writes m's weights (as they are now: the trunk and the LM head;
// the value head is not part of generation) into the prefill and the
// two decode graphs. The graphs compute the native forward pass: token embedding;
// per block pre-LayerNorm (biased variance, eps 1e-5), q/k/v dense
// layers with biases, RoPE ("rotate_half": pairs (x[i], x[i+dh/2]),
// position p's angle p * base^(-2i/dh)), causal softmax(q·kᵀ/√dh)·v, the
// output dense layer and the residual, LayerNorm, dense, exact (erf)
// GELU, dense and the residual; then the final LayerNorm and the untied
// LM head with its bias.
func Export(m *native.Model) (Graphs, error) {
	c := m.Config
	if !c.Standard() {
		return Graphs{}, fmt.Errorf("onnxpeer: only mlerl's own architecture exports (this model has norm %s, ffn %s, %d kv heads of %d, tied %v)",
			c.Norm, c.FFNKind, c.KVHeads, c.HeadDim(), c.TiedEmbed)
	}
	w, err := collect(m)
	if err != nil {
		return Graphs{}, err
	}
	cosT, sinT := ropeTables(c)
	return Graphs{
		Config:        c,
		Prefill:       build(c, w, cosT, sinT, prefillGraph),
		Decode:        build(c, w, cosT, sinT, decodeGraph),
		DecodeInPlace: build(c, w, cosT, sinT, inPlaceGraph),
	}, nil
}

// params holds the model's tensors by checkpoint name.
type params map[string]native.Param

// collect reads m's parameters and checks that every tensor the graphs
// need is there with the shape the config implies.
func collect(m *native.Model) (params, error) {
	c := m.Config
	p := params{}
	for _, x := range m.Params() {
		p[x.Name] = x
	}
	d, f, v := c.DModel, c.FFN, c.Vocab
	want := map[string][]int{
		"/token_embed/embeddings":              {v, d},
		"/ln_final/layer_normalization/gain":   {d},
		"/ln_final/layer_normalization/offset": {d},
		"/lm_head/dense/weights":               {d, v},
		"/lm_head/dense/biases":                {v},
	}
	for l := range c.Layers {
		b := fmt.Sprintf("/block_%d/", l)
		for _, n := range []string{"ln_attn", "ln_ffn"} {
			want[b+n+"/layer_normalization/gain"] = []int{d}
			want[b+n+"/layer_normalization/offset"] = []int{d}
		}
		for _, n := range []string{"q", "k", "v", "out"} {
			want[b+n+"/dense/weights"] = []int{d, d}
			want[b+n+"/dense/biases"] = []int{d}
		}
		want[b+"ffn_in/dense/weights"], want[b+"ffn_in/dense/biases"] = []int{d, f}, []int{f}
		want[b+"ffn_out/dense/weights"], want[b+"ffn_out/dense/biases"] = []int{f, d}, []int{d}
	}
	for name, shape := range want {
		x, ok := p[name]
		if !ok {
			return nil, fmt.Errorf("onnxpeer: export: the model has no parameter %s", name)
		}
		if fmt.Sprint(x.Shape) != fmt.Sprint(shape) {
			return nil, fmt.Errorf("onnxpeer: export: parameter %s has shape %v, want %v for config %+v", name, x.Shape, shape, c)
		}
	}
	return p, nil
}

// ropeTables returns the RoPE tables as the graphs use them, [Ctx,
// head_dim]: cos = [cos | cos] and sin = [-sin | sin] of position p's
// angles p * base^(-2i/dh), i < dh/2 (computed in float64 and rounded,
// as the native engine does), so that rope(x) = x*cos +
// concat(x2, x1)*sin for the halves x1, x2 of x.
func ropeTables(c native.Config) (cos, sin []float32) {
	dh := c.HeadDim()
	half := dh / 2
	cos, sin = make([]float32, c.Ctx*dh), make([]float32, c.Ctx*dh)
	for p := range c.Ctx {
		for i := range half {
			a := float64(p) * math.Pow(c.RoPEBase, -2*float64(i)/float64(dh))
			co, si := float32(math.Cos(a)), float32(math.Sin(a))
			cos[p*dh+i], cos[p*dh+half+i] = co, co
			sin[p*dh+i], sin[p*dh+half+i] = -si, si
		}
	}
	return cos, sin
}

// graphKind is which of the three graphs build writes.
type graphKind int

const (
	prefillGraph graphKind = iota
	decodeGraph            // past and present caches, [B, H, past(+1), dh]
	inPlaceGraph           // a fixed-capacity cache in, the new token's keys and values out
)

// build writes one of the graphs.
func build(c native.Config, p params, cosT, sinT []float32, kind graphKind) []byte {
	d, h, dh, v := c.DModel, c.Heads, c.HeadDim(), c.Vocab
	g := newGraph([]string{"mlerl-policy-prefill", "mlerl-policy-decode", "mlerl-policy-decode-in-place"}[kind])
	weight := func(n string) string { // a parameter as an initializer
		x := p[n]
		dims := make([]int64, len(x.Shape))
		for i, s := range x.Shape {
			dims[i] = int64(s)
		}
		return g.floats(n, dims, x.Data)
	}
	var seqDim dim = "seq"
	if kind != prefillGraph {
		seqDim = 1
	}
	ids := g.input(InputIDs, dtInt64, "batch", seqDim)
	var cache [][2]string // per layer: keys, values
	switch kind {
	case decodeGraph:
		for l := range c.Layers {
			cache = append(cache, [2]string{
				g.input(PastKey(l), dtFloat, "batch", h, "past", dh),
				g.input(PastValue(l), dtFloat, "batch", h, "past", dh),
			})
		}
	case inPlaceGraph:
		for l := range c.Layers {
			cache = append(cache, [2]string{
				g.input(CacheKey(l), dtFloat, "batch", h, "capacity", dh),
				g.input(CacheValue(l), dtFloat, "batch", h, "capacity", dh),
			})
		}
	}

	// Positions: [0, seq) in prefill, past (the cache's length) in
	// decode. The RoPE tables' rows for them are sliced out of the full
	// [Ctx, dh] tables.
	cosAll := g.floats("rope_cos", []int64{int64(c.Ctx), int64(dh)}, cosT)
	sinAll := g.floats("rope_sin", []int64{int64(c.Ctx), int64(dh)}, sinT)
	var from, to string // 1-d [1] int64
	switch kind {
	case prefillGraph:
		from = g.ints(false, 0)
		to = g.op("Slice", []string{g.op("Shape", []string{ids}), g.ints(false, 1), g.ints(false, 2)})
	case decodeGraph:
		from = g.op("Slice", []string{g.op("Shape", []string{cache[0][0]}), g.ints(false, 2), g.ints(false, 3)})
		to = g.op("Add", []string{from, g.ints(false, 1)})
	case inPlaceGraph:
		from = g.input(Position, dtInt64, 1)
		to = g.op("Add", []string{from, g.ints(false, 1)})
	}
	cos := g.op("Slice", []string{cosAll, from, to, g.ints(false, 0)}) // [T, dh]
	sin := g.op("Slice", []string{sinAll, from, to, g.ints(false, 0)})

	// The masks added to the scaled scores. Prefill's is causal, [T, T]:
	// 0 on and below the diagonal, -inf above. A decoding query sees
	// every cached key: no mask; in place, the slots at and after the
	// position are not the row's yet: [capacity], 0 before position,
	// -inf from it on (the new key's score is computed apart).
	var mask, last, capacity1 string
	switch kind {
	case prefillGraph:
		seq := g.op("Gather", []string{g.op("Shape", []string{ids}), g.ints(true, 1)}) // 0-d T
		r := g.op("Range", []string{g.ints(true, 0), seq, g.ints(true, 1)})
		future := g.op("Greater", []string{
			g.op("Unsqueeze", []string{r, g.ints(false, 0)}), // key index j, [1, T]
			g.op("Unsqueeze", []string{r, g.ints(false, 1)}), // query index i, [T, 1]
		})
		mask = g.op("Where", []string{future, g.scalarF(float32(math.Inf(-1))), g.scalarF(0)})
		last = g.op("Sub", []string{seq, g.ints(true, 1)})
	case inPlaceGraph:
		shape := g.op("Shape", []string{cache[0][0]})
		capacity := g.op("Gather", []string{shape, g.ints(true, 2)}) // 0-d
		capacity1 = g.op("Slice", []string{shape, g.ints(false, 2), g.ints(false, 3)})
		slots := g.op("Range", []string{g.ints(true, 0), capacity, g.ints(true, 1)})
		notYet := g.op("GreaterOrEqual", []string{slots, from}) // [capacity]
		mask = g.op("Where", []string{notYet, g.scalarF(float32(math.Inf(-1))), g.scalarF(0)})
	}

	layerNorm := func(x, prefix string) string {
		return g.op("LayerNormalization", []string{x, weight(prefix + "/layer_normalization/gain"), weight(prefix + "/layer_normalization/offset")},
			intAttr("axis", -1), floatAttr("epsilon", lnEps))
	}
	// Graph outputs are named by the nodes that compute them (no
	// Identity after them): ONNX Runtime then writes them straight into
	// the caller's buffers instead of copying them there.
	dense := func(x, prefix, out string) string {
		return g.opTo("Add", out, []string{g.op("MatMul", []string{x, weight(prefix + "/dense/weights")}), weight(prefix + "/dense/biases")})
	}
	heads := func(x, out string) string { // [B, T, D] -> [B, H, T, dh]
		r := g.op("Reshape", []string{x, g.ints(false, 0, 0, int64(h), int64(dh))})
		return g.opTo("Transpose", out, []string{r}, intsAttr("perm", 0, 2, 1, 3))
	}
	rope := func(x, out string) string {
		x1, x2 := g.fresh("half"), g.fresh("half")
		g.node("Split", []string{x, g.ints(false, int64(dh/2), int64(dh/2))}, []string{x1, x2}, intAttr("axis", 3))
		rot := g.op("Concat", []string{x2, x1}, intAttr("axis", 3))
		return g.opTo("Add", out, []string{g.op("Mul", []string{x, cos}), g.op("Mul", []string{rot, sin})})
	}
	scale := g.scalarF(float32(1 / math.Sqrt(float64(dh))))
	scores := func(q, k string) string { // q·kᵀ/√dh, [B, H, T, S]
		s := g.op("MatMul", []string{q, g.op("Transpose", []string{k}, intsAttr("perm", 0, 1, 3, 2))})
		return g.op("Mul", []string{s, scale})
	}

	x := g.op("Gather", []string{weight("/token_embed/embeddings"), ids}, intAttr("axis", 0)) // [B, T, D]
	for l := range c.Layers {
		b := fmt.Sprintf("/block_%d/", l)
		ln := layerNorm(x, b+"ln_attn")
		q := rope(heads(dense(ln, b+"q", ""), ""), "")
		var att string // [B, H, T, dh]
		switch kind {
		case prefillGraph:
			k := rope(heads(dense(ln, b+"k", ""), ""), PresentKey(l))
			vv := heads(dense(ln, b+"v", ""), PresentValue(l))
			g.output(PresentKey(l), dtFloat, "batch", h, "seq", dh)
			g.output(PresentValue(l), dtFloat, "batch", h, "seq", dh)
			s := g.op("Add", []string{scores(q, k), mask})
			att = g.op("MatMul", []string{g.op("Softmax", []string{s}, intAttr("axis", -1)), vv})
		case decodeGraph:
			k := g.opTo("Concat", PresentKey(l), []string{cache[l][0], rope(heads(dense(ln, b+"k", ""), ""), "")}, intAttr("axis", 2))
			vv := g.opTo("Concat", PresentValue(l), []string{cache[l][1], heads(dense(ln, b+"v", ""), "")}, intAttr("axis", 2))
			g.output(PresentKey(l), dtFloat, "batch", h, "past_plus_1", dh)
			g.output(PresentValue(l), dtFloat, "batch", h, "past_plus_1", dh)
			att = g.op("MatMul", []string{g.op("Softmax", []string{scores(q, k)}, intAttr("axis", -1)), vv})
		case inPlaceGraph:
			// One softmax over [cached slots | the new key]; the cache is
			// read where it lies, never copied.
			k := rope(heads(dense(ln, b+"k", ""), ""), NewKey(l))
			vv := heads(dense(ln, b+"v", ""), NewValue(l))
			g.output(NewKey(l), dtFloat, "batch", h, 1, dh)
			g.output(NewValue(l), dtFloat, "batch", h, 1, dh)
			sc := g.op("Add", []string{scores(q, cache[l][0]), mask}) // [B, H, 1, capacity]
			p := g.op("Softmax", []string{g.op("Concat", []string{sc, scores(q, k)}, intAttr("axis", 3))}, intAttr("axis", -1))
			pc := g.op("Slice", []string{p, g.ints(false, 0), capacity1, g.ints(false, 3)})             // the cached slots'
			pn := g.op("Slice", []string{p, capacity1, g.ints(false, math.MaxInt64), g.ints(false, 3)}) // the new key's
			att = g.op("Add", []string{g.op("MatMul", []string{pc, cache[l][1]}), g.op("MatMul", []string{pn, vv})})
		}
		att = g.op("Transpose", []string{att}, intsAttr("perm", 0, 2, 1, 3))
		att = g.op("Reshape", []string{att, g.ints(false, 0, 0, int64(d))})
		mid := g.op("Add", []string{x, dense(att, b+"out", "")})

		pre := dense(layerNorm(mid, b+"ln_ffn"), b+"ffn_in", "")
		// GELU(x) = 0.5 * x * (1 + erf(x / √2)), the native engine's exact GELU.
		e := g.op("Erf", []string{g.op("Div", []string{pre, g.scalarF(float32(math.Sqrt2))})})
		act := g.op("Mul", []string{g.op("Mul", []string{pre, g.op("Add", []string{e, g.scalarF(1)})}), g.scalarF(0.5)})
		x = g.op("Add", []string{mid, dense(act, b+"ffn_out", "")})
	}
	if kind == prefillGraph {
		x = g.op("Gather", []string{x, last}, intAttr("axis", 1)) // the last position, [B, D]
	} else {
		x = g.op("Squeeze", []string{x, g.ints(false, 1)}) // [B, D]
	}
	dense(layerNorm(x, "/ln_final"), "/lm_head", Logits)
	g.output(Logits, dtFloat, "batch", v)
	return g.model()
}
