package native

import (
	"math"
)

// refModel is the slow, obvious float64 implementation the tests check
// the engine against: plain loops over the full B x S batch with an
// explicit attention mask, math.Exp and math.Erf.
type refModel struct {
	cfg Config
	p   map[string][]float64
}

func newRef(m *Model) *refModel {
	r := &refModel{cfg: m.Config, p: map[string][]float64{}}
	for _, p := range m.Params() {
		v := make([]float64, len(p.Data))
		for i, x := range p.Data {
			v[i] = float64(x)
		}
		r.p[p.Name] = v
	}
	return r
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

func (r *refModel) dense(x []float64, name string) []float64 {
	w, b := r.p[name+"/dense/weights"], r.p[name+"/dense/biases"]
	out := make([]float64, len(b))
	for j := range out {
		s := b[j]
		for i, v := range x {
			s += v * w[i*len(b)+j]
		}
		out[j] = s
	}
	return out
}

func (r *refModel) rope(x []float64, pos int32) {
	dh := r.cfg.HeadDim()
	half := dh / 2
	for h := 0; h < r.cfg.Heads; h++ {
		v := x[h*dh : (h+1)*dh]
		out := make([]float64, dh)
		for i := 0; i < half; i++ {
			a := float64(pos) * math.Pow(r.cfg.RoPEBase, -2*float64(i)/float64(dh))
			c, s := math.Cos(a), math.Sin(a)
			out[i] = v[i]*c - v[i+half]*s
			out[i+half] = v[i+half]*c + v[i]*s
		}
		copy(v, out)
	}
}

// forward returns the logits and value at every flat position (nil rows
// at padding).
func (r *refModel) forward(b Batch) (logits [][]float64, values []float64) {
	c := r.cfg
	d, dh, n := c.DModel, c.HeadDim(), b.B*b.S
	x := make([][]float64, n)
	for i := range n {
		if b.Segments[i] != 0 {
			t := int(b.Tokens[i])
			x[i] = append([]float64(nil), r.p["/token_embed/embeddings"][t*d:(t+1)*d]...)
		}
	}
	for l := 0; l < c.Layers; l++ {
		pre := "/block_" + itoa(l) + "/"
		q, k, v := make([][]float64, n), make([][]float64, n), make([][]float64, n)
		for i := range n {
			if x[i] == nil {
				continue
			}
			y := r.layerNorm(x[i], pre+"ln_attn")
			q[i], k[i], v[i] = r.dense(y, pre+"q"), r.dense(y, pre+"k"), r.dense(y, pre+"v")
			r.rope(q[i], b.Positions[i])
			r.rope(k[i], b.Positions[i])
		}
		nx := make([][]float64, n)
		for i := range n {
			if x[i] == nil {
				continue
			}
			row := i / b.S
			att := make([]float64, d)
			for h := 0; h < c.Heads; h++ {
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
						s += q[i][h*dh+e] * k[j][h*dh+e]
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
						att[h*dh+e] += scores[kk] / sum * v[j][h*dh+e]
					}
				}
			}
			o := r.dense(att, pre+"out")
			mid := make([]float64, d)
			for j := range mid {
				mid[j] = x[i][j] + o[j]
			}
			hid := r.dense(r.layerNorm(mid, pre+"ln_ffn"), pre+"ffn_in")
			for j, u := range hid {
				hid[j] = u * 0.5 * (1 + math.Erf(u/math.Sqrt2))
			}
			f := r.dense(hid, pre+"ffn_out")
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
		h := r.layerNorm(x[i], "/ln_final")
		logits[i] = r.dense(h, "/lm_head")
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
