package native

import "math"

// refModel is the slow, obvious float64 implementation the tests check
// the engine against: plain loops over the full B x S batch with an
// explicit attention mask, math.Exp and math.Erf. It computes every
// architecture of Config (LayerNorm or RMSNorm, GELU or SwiGLU, grouped
// key/value heads, q/k norm, tied embeddings, any RoPE frequencies) and
// LoRA adapters, reading the parameters by name; a parameter absent from
// p (a bias the architecture lacks) is zero.
type refModel struct {
	cfg Config
	p   map[string][]float64
	// loraScale is the adapters' alpha/rank.
	loraScale float64
	// drop, when not nil, applies the model's dropout masks to the
	// adapters' inputs (dropKey of the given step); slot maps flat batch
	// positions to the engine's compact rows, which the masks index.
	drop *refDropout
}

type refDropout struct {
	seed, step uint64
	p          float64
	slot       []int32
}

func newRef(m *Model) *refModel {
	r := &refModel{cfg: m.Config, p: map[string][]float64{}, loraScale: float64(m.lora.scale)}
	for _, p := range m.Params() {
		v := make([]float64, p.Size())
		for i := range v {
			if p.Data != nil {
				v[i] = float64(p.Data[i])
			} else {
				v[i] = float64(fromBF16(p.BF16[i]))
			}
		}
		r.p[p.Name] = v
	}
	return r
}

// norm applies the config's norm named name (its gain, and LayerNorm's
// offset) to x.
func (r *refModel) norm(x []float64, name string) []float64 {
	if r.cfg.rms() {
		return r.rmsNorm(x, r.p[name+"/rms_normalization/gain"])
	}
	return r.layerNorm(x, name)
}

func (r *refModel) layerNorm(x []float64, name string) []float64 {
	g, o := r.p[name+"/layer_normalization/gain"], r.p[name+"/layer_normalization/offset"]
	d := len(x)
	mu := 0.0
	for _, v := range x {
		mu += v
	}
	mu /= float64(d)
	va := 0.0
	for _, v := range x {
		va += (v - mu) * (v - mu)
	}
	va /= float64(d)
	out := make([]float64, d)
	for j, v := range x {
		out[j] = (v-mu)/math.Sqrt(va+1e-5)*g[j] + o[j]
	}
	return out
}

func (r *refModel) rmsNorm(x, g []float64) []float64 {
	ms := 0.0
	for _, v := range x {
		ms += v * v
	}
	ms /= float64(len(x))
	out := make([]float64, len(x))
	for j, v := range x {
		out[j] = v / math.Sqrt(ms+r.cfg.NormEps) * g[j]
	}
	return out
}

// dense is the layer named name: x·W + b, plus its adapter's scale·
// (dropout(x)·A)·B when it has one. row is x's flat batch position (for
// the dropout mask; -1: none), layer and t name the adapter's mask.
func (r *refModel) dense(x []float64, name string) []float64 {
	return r.denseAt(x, name, -1, 0, 0)
}

func (r *refModel) denseAt(x []float64, name string, row, layer int, t target) []float64 {
	w, b := r.p[name+"/dense/weights"], r.p[name+"/dense/biases"]
	out := make([]float64, len(w)/len(x))
	for j := range out {
		s := 0.0
		if b != nil {
			s = b[j]
		}
		for i, v := range x {
			s += v * w[i*len(out)+j]
		}
		out[j] = s
	}
	a, bb := r.p[name+"/lora_a"], r.p[name+"/lora_b"]
	if a == nil {
		return out
	}
	in := len(x)
	xd := append([]float64(nil), x...)
	if r.drop != nil && row >= 0 {
		key := dropKey(r.drop.seed, r.drop.step, layer, t)
		base := int(r.drop.slot[row]) * in
		for i := range xd {
			if dropped(key, base+i, dropThreshold(r.drop.p)) {
				xd[i] = 0
			} else {
				xd[i] /= 1 - r.drop.p
			}
		}
	}
	rank := len(a) / in
	u := make([]float64, rank)
	for k := range u {
		for i, v := range xd {
			u[k] += v * a[i*rank+k]
		}
	}
	for j := range out {
		s := 0.0
		for k, uk := range u {
			s += uk * bb[k*len(out)+j]
		}
		out[j] += r.loraScale * s
	}
	return out
}

// rope rotates each of the heads heads of x by position pos.
func (r *refModel) rope(x []float64, pos int32, heads int) {
	dh := r.cfg.HeadDim()
	half := dh / 2
	for h := 0; h < heads; h++ {
		v := x[h*dh : (h+1)*dh]
		out := make([]float64, dh)
		for i := 0; i < half; i++ {
			f := math.Pow(r.cfg.RoPEBase, -2*float64(i)/float64(dh))
			if r.cfg.InvFreq != nil {
				f = r.cfg.InvFreq[i]
			}
			a := float64(pos) * f
			c, s := math.Cos(a), math.Sin(a)
			out[i] = v[i]*c - v[i+half]*s
			out[i+half] = v[i+half]*c + v[i]*s
		}
		copy(v, out)
	}
}

// headNorm applies RMSNorm with gain g to each of the heads heads of x.
func (r *refModel) headNorm(x []float64, heads int, g []float64) {
	dh := r.cfg.HeadDim()
	for h := range heads {
		copy(x[h*dh:(h+1)*dh], r.rmsNorm(x[h*dh:(h+1)*dh], g))
	}
}

// forward returns the logits and value at every flat position (nil rows
// at padding).
func (r *refModel) forward(b Batch) (logits [][]float64, values []float64) {
	c := r.cfg
	d, dh, n := c.DModel, c.HeadDim(), b.B*b.S
	per := c.Heads / c.KVHeads
	embed := r.p["/token_embed/embeddings"]
	x := make([][]float64, n)
	for i := range n {
		if b.Segments[i] != 0 {
			t := int(b.Tokens[i])
			x[i] = append([]float64(nil), embed[t*d:(t+1)*d]...)
		}
	}
	ffnIn, ffnOut := "ffn_in", "ffn_out"
	if c.swiglu() {
		ffnIn, ffnOut = "ffn_gate", "ffn_down"
	}
	for l := 0; l < c.Layers; l++ {
		pre := "/block_" + itoa(l) + "/"
		q, k, v := make([][]float64, n), make([][]float64, n), make([][]float64, n)
		for i := range n {
			if x[i] == nil {
				continue
			}
			y := r.norm(x[i], pre+"ln_attn")
			q[i], k[i], v[i] = r.denseAt(y, pre+"q", i, l, tQ), r.denseAt(y, pre+"k", i, l, tK), r.denseAt(y, pre+"v", i, l, tV)
			if c.QKNorm {
				r.headNorm(q[i], c.Heads, r.p[pre+"q_norm/rms_normalization/gain"])
				r.headNorm(k[i], c.KVHeads, r.p[pre+"k_norm/rms_normalization/gain"])
			}
			r.rope(q[i], b.Positions[i], c.Heads)
			r.rope(k[i], b.Positions[i], c.KVHeads)
		}
		nx := make([][]float64, n)
		for i := range n {
			if x[i] == nil {
				continue
			}
			row := i / b.S
			att := make([]float64, c.Heads*dh)
			for h := 0; h < c.Heads; h++ {
				kh := h / per
				var keys []int
				for j := row * b.S; j < (row+1)*b.S; j++ {
					own := b.Segments[j] == b.Segments[i] && j <= i
					prefix := b.Prefix != nil && b.Prefix[i] != 0 && b.Segments[j] == b.Prefix[i]
					if own || prefix {
						keys = append(keys, j)
					}
				}
				scores := make([]float64, len(keys))
				mx := math.Inf(-1)
				for kk, j := range keys {
					s := 0.0
					for e := 0; e < dh; e++ {
						s += q[i][h*dh+e] * k[j][kh*dh+e]
					}
					scores[kk] = s / math.Sqrt(float64(dh))
					mx = math.Max(mx, scores[kk])
				}
				sum := 0.0
				for kk := range scores {
					scores[kk] = math.Exp(scores[kk] - mx)
					sum += scores[kk]
				}
				for kk, j := range keys {
					for e := 0; e < dh; e++ {
						att[h*dh+e] += scores[kk] / sum * v[j][kh*dh+e]
					}
				}
			}
			o := r.denseAt(att, pre+"out", i, l, tOut)
			mid := make([]float64, d)
			for j := range mid {
				mid[j] = x[i][j] + o[j]
			}
			y := r.norm(mid, pre+"ln_ffn")
			hid := r.denseAt(y, pre+ffnIn, i, l, tFFNIn)
			if c.swiglu() {
				up := r.denseAt(y, pre+"ffn_up", i, l, tFFNUp)
				for j, g := range hid {
					hid[j] = g / (1 + math.Exp(-g)) * up[j]
				}
			} else {
				for j, u := range hid {
					hid[j] = u * 0.5 * (1 + math.Erf(u/math.Sqrt2))
				}
			}
			f := r.denseAt(hid, pre+ffnOut, i, l, tFFNOut)
			for j := range mid {
				mid[j] += f[j]
			}
			nx[i] = mid
		}
		x = nx
	}
	logits, values = make([][]float64, n), make([]float64, n)
	for i := range n {
		if x[i] == nil {
			continue
		}
		h := r.norm(x[i], "/ln_final")
		if c.TiedEmbed {
			logits[i] = make([]float64, c.Vocab)
			for t := range logits[i] {
				for j, hv := range h {
					logits[i][t] += hv * embed[t*d+j]
				}
			}
		} else {
			logits[i] = r.dense(h, "/lm_head")
		}
		values[i] = r.dense(h, "/value_head")[0]
	}
	return logits, values
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}
