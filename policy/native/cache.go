package native

import "fmt"

// Cache holds the keys and values (after RoPE) of every layer for a fixed
// number of independent sequences ("rows"), for generation: each row
// grows by Extend or Decode and attends only to itself. The token at
// cache slot i of a row has RoPE position i.
//
// Keys are stored transposed, a head's [dh][capacity]: a decoding query's
// scores q·kᵀ are then a vector-matrix product over contiguous rows (as
// the values' p·v is), where key rows cost a dot product, with its
// horizontal sum, per cached token.
type Cache struct {
	rows, capacity    int
	layers, heads, dh int
	k, v              []float32 // [layers][rows][heads] of [dh][capacity] (keys), [capacity][dh] (values)
	lens              []int
}

// NewCache returns an empty cache of rows sequences of up to capacity
// tokens each (capacity <= Ctx).
func (m *Model) NewCache(rows, capacity int) (*Cache, error) {
	c := m.Config
	if rows <= 0 || capacity <= 0 || capacity > c.Ctx {
		return nil, fmt.Errorf("native: cache of %d rows x %d tokens: need rows > 0 and 0 < capacity <= ctx %d", rows, capacity, c.Ctx)
	}
	size := c.Layers * rows * c.Heads * capacity * c.HeadDim()
	return &Cache{rows: rows, capacity: capacity, layers: c.Layers, heads: c.Heads, dh: c.HeadDim(),
		k: make([]float32, size), v: make([]float32, size), lens: make([]int, rows)}, nil
}

// Rows is the number of sequences the cache holds.
func (c *Cache) Rows() int { return c.rows }

// Capacity is the number of tokens each row may hold.
func (c *Cache) Capacity() int { return c.capacity }

// Len is the number of tokens in row r.
func (c *Cache) Len(r int) int { return c.lens[r] }

// Reset empties row r (its storage is reused).
func (c *Cache) Reset(r int) { c.lens[r] = 0 }

// CopyRow makes row dst a copy of row src (its keys and values, every
// layer and head, and its length), so that both continue from the same
// prefix: a prompt prefilled once serves several samples. dst == src
// does nothing.
func (c *Cache) CopyRow(dst, src int) error {
	if dst < 0 || dst >= c.rows || src < 0 || src >= c.rows {
		return fmt.Errorf("native: cache CopyRow(%d, %d) outside rows [0, %d)", dst, src, c.rows)
	}
	if dst == src {
		return nil
	}
	n := c.lens[src]
	for l := range c.layers {
		for h := range c.heads {
			sk, sv := c.head(l, src, h)
			dk, dv := c.head(l, dst, h)
			for e := range c.dh {
				copy(dk[e*c.capacity:e*c.capacity+n], sk[e*c.capacity:])
			}
			copy(dv[:n*c.dh], sv[:n*c.dh])
		}
	}
	c.lens[dst] = c.lens[src]
	return nil
}

// head returns the keys [dh, capacity] and values [capacity, dh] of layer
// l, row r, head h.
func (c *Cache) head(l, r, h int) (k, v []float32) {
	at := ((l*c.rows+r)*c.heads + h) * c.capacity * c.dh
	n := c.capacity * c.dh
	return c.k[at : at+n : at+n], c.v[at : at+n : at+n]
}

// decodeState holds the buffers of Extend.
type decodeState struct {
	tokens, pos     []int32
	segs            []decodeSeg
	x, ln, q, k, v  []float32 // [T, D]
	att, mid        []float32
	mean, rstd      []float32 // [T]
	pre, act        []float32 // [T, F]
	last, h, hm, hr []float32 // [R, D], [R]
	logits          []float32 // [R, V]
}

type decodeSeg struct{ row, off, n, s0 int }

// Decode appends one token to each of the given cache rows (tokens[i] to
// rows[i]; nil rows means every row in order) and returns the next-token
// logits [len(rows)*Vocab], owned by the model and valid until its next
// Extend or Decode. Finished rows are simply left out of rows.
func (m *Model) Decode(c *Cache, rows []int, tokens []int32) ([]float32, error) {
	if rows == nil {
		rows = make([]int, c.rows)
		for i := range rows {
			rows[i] = i
		}
	}
	if len(tokens) != len(rows) {
		return nil, fmt.Errorf("native: decode got %d tokens for %d rows", len(tokens), len(rows))
	}
	ts := make([][]int32, len(rows))
	for i := range rows {
		ts[i] = tokens[i : i+1]
	}
	return m.Extend(c, rows, ts)
}

// Extend appends tokens[i] (one or more tokens: a prompt, or a forced
// string) to cache row rows[i] for each i, running them through the model
// attending to the row's earlier tokens, and returns the logits after the
// last token of each row [len(rows)*Vocab], owned by the model and valid
// until its next Extend or Decode.
func (m *Model) Extend(c *Cache, rows []int, tokens [][]int32) ([]float32, error) {
	cfg, ds, p := m.Config, &m.dec, m.p
	if len(tokens) != len(rows) {
		return nil, fmt.Errorf("native: extend got %d token lists for %d rows", len(tokens), len(rows))
	}
	if c.layers != cfg.Layers || c.heads != cfg.Heads || c.dh != cfg.HeadDim() {
		return nil, fmt.Errorf("native: cache shape (%d layers, %d heads of %d) does not match the model", c.layers, c.heads, c.dh)
	}
	ds.tokens, ds.pos, ds.segs = ds.tokens[:0], ds.pos[:0], ds.segs[:0]
	for i, r := range rows {
		if r < 0 || r >= c.rows {
			return nil, fmt.Errorf("native: cache row %d outside [0, %d)", r, c.rows)
		}
		for _, s := range ds.segs {
			if s.row == r {
				return nil, fmt.Errorf("native: cache row %d listed twice", r)
			}
		}
		s0, n := c.lens[r], len(tokens[i])
		if n == 0 || s0+n > c.capacity {
			return nil, fmt.Errorf("native: row %d: %d tokens + %d new must be in (0, capacity %d]", r, s0, n, c.capacity)
		}
		ds.segs = append(ds.segs, decodeSeg{row: r, off: len(ds.tokens), n: n, s0: s0})
		for j, t := range tokens[i] {
			if t < 0 || int(t) >= cfg.Vocab {
				return nil, fmt.Errorf("native: row %d: token %d outside the vocabulary [0, %d)", r, t, cfg.Vocab)
			}
			ds.tokens, ds.pos = append(ds.tokens, t), append(ds.pos, int32(s0+j))
		}
	}
	t, d, f, dh, heads := len(ds.tokens), cfg.DModel, cfg.FFN, cfg.HeadDim(), cfg.Heads
	for _, s := range []*[]float32{&ds.x, &ds.ln, &ds.q, &ds.k, &ds.v, &ds.att, &ds.mid} {
		*s = grow(*s, t*d)
	}
	ds.mean, ds.rstd = grow(ds.mean, t), grow(ds.rstd, t)
	ds.pre, ds.act = grow(ds.pre, t*f), grow(ds.act, t*f)
	scale := float32(1 / sqrt(float64(dh)))

	embeddingForward(ds.x, m.w.embed, ds.tokens, d)
	for l := range cfg.Layers {
		w := &m.w.blocks[l]
		layerNormForward(p, ds.ln, ds.mean, ds.rstd, ds.x, w.lnAttnGain, w.lnAttnOffset, t, d)
		denseForward(p, ds.q, ds.ln, w.qW, w.qB, nil, t, d, d)
		denseForward(p, ds.k, ds.ln, w.kW, w.kB, nil, t, d, d)
		denseForward(p, ds.v, ds.ln, w.vW, w.vB, nil, t, d, d)
		ropeForward(p, ds.q, ds.pos, t, heads, dh, m.cos, m.sin, false)
		ropeForward(p, ds.k, ds.pos, t, heads, dh, m.cos, m.sin, false)
		for _, s := range ds.segs {
			for h := range heads {
				ck, cv := c.head(l, s.row, h)
				for j := range s.n {
					for e, x := range ds.k[(s.off+j)*d+h*dh : (s.off+j)*d+h*dh+dh] {
						ck[e*c.capacity+s.s0+j] = x
					}
					copy(cv[(s.s0+j)*dh:(s.s0+j+1)*dh], ds.v[(s.off+j)*d+h*dh:])
				}
			}
		}
		work := 0
		for _, s := range ds.segs {
			work += 2 * s.n * (s.s0 + s.n) * d
		}
		p.runWork(len(ds.segs)*heads, work, func(wk, task int) {
			s, h := ds.segs[task/heads], task%heads
			ck, cv := c.head(l, s.row, h)
			ws := &p.ws[wk]
			ldp := s.s0 + s.n
			ws.buf = grow(ws.buf, s.n*ldp)
			at := s.off*d + h*dh
			attendForward(ws, ds.q[at:], d, kv{}, keys{k: ck, kt: c.capacity}, cv, dh, ds.att[at:], d, ws.buf, ldp, s.n, s.s0, dh, scale)
		})
		denseForward(p, ds.mid, ds.att, w.outW, w.outB, ds.x, t, d, d)
		layerNormForward(p, ds.ln, ds.mean, ds.rstd, ds.mid, w.lnFFNGain, w.lnFFNOffset, t, d)
		denseForward(p, ds.pre, ds.ln, w.ffnInW, w.ffnInB, nil, t, d, f)
		geluForward(p, ds.act, ds.pre)
		denseForward(p, ds.x, ds.act, w.ffnOutW, w.ffnOutB, ds.mid, t, f, d)
	}
	for _, s := range ds.segs {
		c.lens[s.row] += s.n
	}
	// Heads at each row's last new token.
	r := len(ds.segs)
	ds.last, ds.h = grow(ds.last, r*d), grow(ds.h, r*d)
	ds.hm, ds.hr = grow(ds.hm, r), grow(ds.hr, r)
	for i, s := range ds.segs {
		copy(ds.last[i*d:(i+1)*d], ds.x[(s.off+s.n-1)*d:])
	}
	layerNormForward(p, ds.h, ds.hm, ds.hr, ds.last, m.w.lnFinalGain, m.w.lnFinalOffset, r, d)
	ds.logits = grow(ds.logits, r*cfg.Vocab)
	denseForward(p, ds.logits, ds.h, m.w.lmW, m.w.lmB, nil, r, d, cfg.Vocab)
	return ds.logits, nil
}
