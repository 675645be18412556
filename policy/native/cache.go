package native

import (
	"fmt"
	"slices"
)

// Cache holds the keys and values (after RoPE) of every layer, one per
// key/value head (KVHeads: grouped-query attention caches only those), for a fixed
// number of independent sequences ("rows"), for generation: each row
// grows by Extend or Decode and attends only to itself. The token at
// cache slot i of a row has RoPE position i.
//
// Keys are stored transposed, a head's [dh][slots]: a decoding query's
// scores q·kᵀ are then a vector-matrix product over contiguous rows (as
// the values' p·v is), where key rows cost a dot product, with its
// horizontal sum, per cached token.
//
// A row may share another row's first tokens instead of holding a copy
// (Share): its slots [0, plen) are then read from its base row, and its
// own storage holds only the tokens after them. Rows sharing one prompt
// attend to it together, each of its keys read once for all of them
// (decoding is bound by reading the cache, not by arithmetic).
//
// Each row's storage is its own and holds only the slots the row needs:
// from plen (0 for a row that shares nothing) to the most tokens it was
// reserved for (Reserve) or has grown to. A row sharing a prompt with
// others holds only its own continuation, not a prompt's worth of unused
// slots; capacity bounds every row. Storage freed by Reset or Reshape is
// kept and handed to the next row that needs it (the smallest that
// fits), so a cache reused for call after call allocates only when a row
// needs more than any it holds, and holds at most one buffer per row it
// was made with.
type Cache struct {
	rows, capacity    int
	layers, heads, dh int
	own               []rowStore // per row (cap: the rows it was made with)
	free              []rowStore // storage of reset rows, for the next rows that need it
	lens              []int
	base, plen        []int // row r reads slots [0, plen[r]) from row base[r] (itself, plen 0: none)
	// w, when set (PackWeights), holds the dense layers' weights packed
	// for the matrix products of Extend calls of more than gemmSmallM
	// tokens, which would otherwise pack each weight again per call (a
	// batch of rows decoding token by token).
	w *packedWeights
}

// packedWeights is every dense weight of a model in gemm's B panel layout
// (packB), as it was when packed.
type packedWeights struct {
	nr     int // the panel width of the kernels that packed them
	blocks []packedBlock
	lm     []float32
	// always: products of any number of rows read the panels (a bf16
	// base, which a product would otherwise widen at every call).
	always bool
}

type packedBlock struct{ q, k, v, out, ffnIn, ffnUp, ffnOut []float32 }

// of returns target t's packed weights.
func (pb packedBlock) of(t target) []float32 {
	return [numTargets][]float32{pb.q, pb.k, pb.v, pb.out, pb.ffnIn, pb.ffnUp, pb.ffnOut}[t]
}

// PackWeights packs the model's dense weights into c (reusing c's earlier
// packing's memory), for c's next Extend calls: they read the weights as
// they are now. A bf16 base is widened into float32 panels here, once,
// rather than in every product. Call it again after the weights change
// (a Decoder does, each time it is prefilled); a cache never packed
// reads the model's weights as they are at each call.
func (m *Model) PackWeights(c *Cache) {
	cfg, p := m.Config, m.p
	if c.w == nil {
		c.w = &packedWeights{}
	}
	pw := c.w
	if len(pw.blocks) != cfg.Layers {
		pw.blocks = make([]packedBlock, cfg.Layers)
	}
	pack := func(dst []float32, ln linear) []float32 {
		if ln.q != nil {
			// Quantized blocks are read as they are: packed into float32
			// panels, the base would take float32's memory again.
			return nil
		}
		return packB(p, gemmOp{k: ln.in, n: ln.out, b: ln.w, bh: ln.h, ldb: ln.out}, dst, ln.in*ln.out >= parallelMinWork)
	}
	for l := range cfg.Layers {
		w, pb := &m.w.blocks[l], &pw.blocks[l]
		pb.q, pb.k, pb.v = pack(pb.q, w.lin(cfg, tQ)), pack(pb.k, w.lin(cfg, tK)), pack(pb.v, w.lin(cfg, tV))
		pb.out = pack(pb.out, w.lin(cfg, tOut))
		pb.ffnIn, pb.ffnOut = pack(pb.ffnIn, w.lin(cfg, tFFNIn)), pack(pb.ffnOut, w.lin(cfg, tFFNOut))
		if cfg.swiglu() {
			pb.ffnUp = pack(pb.ffnUp, w.lin(cfg, tFFNUp))
		}
	}
	d, v := cfg.DModel, cfg.Vocab
	switch {
	case cfg.TiedEmbed && m.w.embedQ != nil:
		pw.lm = nil
	case cfg.TiedEmbed:
		pw.lm = packB(p, gemmOp{tb: true, k: d, n: v, b: m.w.embed, bh: m.w.embedH, ldb: d}, pw.lm, true)
	default:
		pw.lm = pack(pw.lm, linear{w: m.w.lmW, h: m.w.lmH, q: m.w.lmQ, in: d, out: v})
	}
	pw.nr = kern.nr
	pw.always = len(m.half) > 0
}

// packedFor returns the weights PackWeights packed, for a product of
// rows rows, when that product would pack them (more than gemmSmallM
// rows, or any number from a bf16 base) with the kernels that packed
// them; nil otherwise (fewer rows read float32 weights in place).
func (c *Cache) packedFor(rows int) *packedWeights {
	if c.w == nil || (rows <= gemmSmallM && !c.w.always) || c.w.nr != kern.nr {
		return nil
	}
	return c.w
}

// NewCache returns an empty cache of rows sequences of up to capacity
// tokens each (capacity <= Ctx).
func (m *Model) NewCache(rows, capacity int) (*Cache, error) {
	c := m.Config
	if rows <= 0 || capacity <= 0 || capacity > c.Ctx {
		return nil, fmt.Errorf("native: cache of %d rows x %d tokens: need rows > 0 and 0 < capacity <= ctx %d", rows, capacity, c.Ctx)
	}
	cache := &Cache{rows: rows, capacity: capacity, layers: c.Layers, heads: c.KVHeads, dh: c.HeadDim(),
		own: make([]rowStore, rows), lens: make([]int, rows), base: make([]int, rows), plen: make([]int, rows)}
	for r := range rows {
		cache.base[r] = r
	}
	return cache, nil
}

// rowStore is one row's keys and values: n slots from its row's plen,
// in every layer and key/value head, one buffer [layers][kv heads] of
// [dh][n] keys then [layers][kv heads] of [n][dh] values.
type rowStore struct {
	buf []float32
	n   int
}

// minGrowth is the fewest slots a row grows by when an Extend outgrows
// its storage (a var for the tests: 1 makes every step grow).
var minGrowth = 64

// Reserve makes row r hold up to n tokens (n <= Capacity) without
// growing its storage again: a caller that knows how long the row will
// get (its prompt and the most tokens it may decode) reserves it once
// instead of letting Extend grow it in steps, each a copy. A row that
// shares another's tokens reserves only the slots after them.
func (c *Cache) Reserve(r, n int) error {
	if r < 0 || r >= c.rows {
		return fmt.Errorf("native: cache Reserve row %d outside [0, %d)", r, c.rows)
	}
	if n > c.capacity {
		return fmt.Errorf("native: cache Reserve(%d, %d): more than its capacity %d", r, n, c.capacity)
	}
	c.ensure(r, n-c.plen[r], 0)
	return nil
}

// ensure gives row r storage for at least need slots of its own (from
// plen), with slack more where it must grow (bounded by capacity),
// keeping the tokens it holds.
func (c *Cache) ensure(r, need, slack int) {
	old := c.own[r]
	if need <= old.n {
		return
	}
	c.own[r] = c.take(min(need+slack, c.capacity-c.plen[r]))
	n := c.own[r].n // the buffer taken may hold more: its own stride
	if held := c.lens[r] - c.plen[r]; held > 0 {
		for l := range c.layers {
			for h := range c.heads {
				ok, ov := c.storeHead(old, l, h)
				nk, nv := c.head(l, r, h)
				for e := range c.dh {
					copy(nk[e*n:e*n+held], ok[e*old.n:e*old.n+held])
				}
				copy(nv[:held*c.dh], ov[:held*c.dh])
			}
		}
	}
	// The old storage is dropped, not kept: a row holds one buffer.
}

// take returns storage of at least n slots: the smallest free buffer
// that holds them, else a new one (the smallest free buffer is dropped
// then, so the cache holds at most one buffer per row).
func (c *Cache) take(n int) rowStore {
	best := -1
	for i, f := range c.free {
		if f.n >= n && (best < 0 || f.n < c.free[best].n) {
			best = i
		}
	}
	if best >= 0 {
		s := c.free[best]
		c.free = slices.Delete(c.free, best, best+1)
		return s
	}
	held := len(c.free)
	for _, s := range c.own[:cap(c.own)] {
		if s.buf != nil {
			held++
		}
	}
	if held >= cap(c.own) && len(c.free) > 0 {
		small := 0
		for i, f := range c.free {
			if f.n < c.free[small].n {
				small = i
			}
		}
		c.free = slices.Delete(c.free, small, small+1)
	}
	return rowStore{buf: make([]float32, 2*c.layers*c.heads*c.dh*n), n: n}
}

// release moves row r's storage to the free buffers.
func (c *Cache) release(r int) {
	if c.own[r].buf != nil {
		c.free = append(c.free, c.own[r])
		c.own[r] = rowStore{}
	}
}

// Bytes is the memory the cache's keys and values hold, rows' and free.
func (c *Cache) Bytes() int64 {
	var n int64
	for _, s := range append(c.own[:cap(c.own)], c.free...) {
		n += 4 * int64(len(s.buf))
	}
	return n
}

// Reshape empties the cache and makes it hold rows sequences (of the same
// capacity), reusing its memory: rows may be at most the rows it was
// made with. A decoder reuses one cache for calls of different batch
// sizes this way instead of allocating (and page-faulting in) a new one.
func (c *Cache) Reshape(rows int) error {
	if rows <= 0 || rows > cap(c.lens) {
		return fmt.Errorf("native: cache reshaped to %d rows: it holds 1 to %d", rows, cap(c.lens))
	}
	c.ResetAll() // every row's storage freed (rows past c.rows hold none)
	c.rows = rows
	c.own, c.lens, c.base, c.plen = c.own[:rows], c.lens[:rows], c.base[:rows], c.plen[:rows]
	c.ResetAll() // the rows it now holds, emptied
	return nil
}

// ResetAll empties every row, all their storage free for the rows that
// need it next.
func (c *Cache) ResetAll() {
	for r := range c.rows {
		c.release(r)
		c.lens[r], c.base[r], c.plen[r] = 0, r, 0
	}
}

// MaxRows is the most rows the cache can be reshaped to.
func (c *Cache) MaxRows() int { return cap(c.lens) }

// Rows is the number of sequences the cache holds.
func (c *Cache) Rows() int { return c.rows }

// Capacity is the number of tokens each row may hold.
func (c *Cache) Capacity() int { return c.capacity }

// Len is the number of tokens in row r.
func (c *Cache) Len(r int) int { return c.lens[r] }

// Reset empties row r and ends its sharing of another row's tokens. Its
// storage goes to the next row that needs it, unless other rows still
// read its tokens (Extend refuses to refill it below them until they are
// reset too).
func (c *Cache) Reset(r int) {
	if _, n := c.sharer(r); n == 0 {
		c.release(r)
	}
	c.lens[r], c.base[r], c.plen[r] = 0, r, 0
}

// CopyRow makes row dst a copy of row src (its keys and values, every
// layer and head, and its length), so that both continue from the same
// prefix: a prompt prefilled once serves several samples. A src that
// shares a base row's tokens leaves dst sharing them too. dst == src
// does nothing; a dst whose tokens another row shares is refused.
func (c *Cache) CopyRow(dst, src int) error {
	if err := c.fork("CopyRow", dst, src); err != nil || dst == src {
		return err
	}
	from, n := c.plen[src], c.lens[src]
	c.lens[dst], c.plen[dst] = 0, from // dst's tokens are not kept
	c.ensure(dst, n-from, 0)
	held, sn, dn := n-from, c.own[src].n, c.own[dst].n
	for l := range c.layers {
		for h := range c.heads {
			sk, sv := c.head(l, src, h)
			dk, dv := c.head(l, dst, h)
			for e := range c.dh {
				copy(dk[e*dn:e*dn+held], sk[e*sn:e*sn+held])
			}
			copy(dv[:held*c.dh], sv[:held*c.dh])
		}
	}
	c.lens[dst] = n
	c.base[dst] = c.base[src]
	if c.base[dst] == src { // src holds all its tokens: so does dst now
		c.base[dst] = dst
	}
	return nil
}

// Share makes row dst continue from row src's tokens without copying
// them: dst reads src's slots [0, Len(src)) as its own first tokens and
// holds only what it appends after them. src must hold its tokens itself
// (it shares none), and while dst shares them src may grow but not be
// refilled below that length (Extend refuses it until dst is reset).
func (c *Cache) Share(dst, src int) error {
	if err := c.fork("Share", dst, src); err != nil {
		return err
	}
	if dst == src {
		return fmt.Errorf("native: cache Share(%d, %d): a row cannot share its own tokens", dst, src)
	}
	if c.base[src] != src {
		return fmt.Errorf("native: cache Share(%d, %d): row %d itself shares row %d's tokens; share from row %d", dst, src, src, c.base[src], c.base[src])
	}
	c.lens[dst], c.base[dst], c.plen[dst] = c.lens[src], src, c.lens[src]
	return nil
}

// fork checks the rows of CopyRow and Share: both in range, and dst's
// tokens not shared by another row.
func (c *Cache) fork(op string, dst, src int) error {
	if dst < 0 || dst >= c.rows || src < 0 || src >= c.rows {
		return fmt.Errorf("native: cache %s(%d, %d) outside rows [0, %d)", op, dst, src, c.rows)
	}
	if dst == src {
		return nil
	}
	if r, n := c.sharer(dst); n > 0 {
		return fmt.Errorf("native: cache %s(%d, %d): row %d shares row %d's first %d tokens; reset row %d first", op, dst, src, r, dst, n, r)
	}
	return nil
}

// sharer returns a row that shares row r's tokens and the most tokens any
// row shares from r (0: none).
func (c *Cache) sharer(r int) (row, n int) {
	row = -1
	for x, b := range c.base {
		if b == r && x != r && c.plen[x] > n {
			row, n = x, c.plen[x]
		}
	}
	return row, n
}

// head returns row r's own keys [dh, n] and values [n, dh] of layer l,
// key/value head h: its n slots from plen[r] (stride returns n).
func (c *Cache) head(l, r, h int) (k, v []float32) { return c.storeHead(c.own[r], l, h) }

func (c *Cache) storeHead(s rowStore, l, h int) (k, v []float32) {
	n := s.n * c.dh
	at := (l*c.heads + h) * n
	vat := c.layers*c.heads*n + at
	return s.buf[at : at+n : at+n], s.buf[vat : vat+n : vat+n]
}

// stride is row r's key stride: the slots its storage holds.
func (c *Cache) stride(r int) int { return c.own[r].n }

// decodeState holds the buffers of Extend.
type decodeState struct {
	tokens, pos     []int32
	segs            []decodeSeg
	groups          []decodeGroup
	x, ln, mid      []float32 // [T, D]
	q, k, v, att    []float32 // [T, QDim], [T, KVDim] x 2, [T, QDim]
	qPre, kPre      []float32 // QKNorm: before the norm
	qRstd, kRstd    []float32
	mean, rstd      []float32 // [T]
	pre, act, up    []float32 // [T, F]
	lora            loraActs  // an adapter's scratch
	last, h, hm, hr []float32 // [R, D], [R]
	logits          []float32 // [R, V]
}

type decodeSeg struct{ row, off, n, s0 int }

// decodeGroup is the segments (indices into segs) that attend to the same
// shared tokens, slots [0, plen) of row base, before their own; plen 0 is
// a single segment that reads only its own row.
type decodeGroup struct {
	base, plen int
	segs       []int
}

// attentionGroups groups segs by the tokens they share: the rows sharing
// a base row's first plen tokens, with the base row itself when it is
// extended too (past plen, as Extend ensures). It appends to gs.
func (c *Cache) attentionGroups(gs []decodeGroup, segs []decodeSeg) []decodeGroup {
	at := func(base, plen int) int {
		for i, g := range gs {
			if g.plen > 0 && g.base == base && g.plen == plen {
				return i
			}
		}
		return -1
	}
	var mine []int // segments of base rows, placed after the sharers
	for i, s := range segs {
		if c.plen[s.row] == 0 {
			mine = append(mine, i)
			continue
		}
		b, n := c.base[s.row], c.plen[s.row]
		if g := at(b, n); g >= 0 {
			gs[g].segs = append(gs[g].segs, i)
			continue
		}
		gs = append(gs, decodeGroup{base: b, plen: n, segs: []int{i}})
	}
	for _, i := range mine {
		r := segs[i].row
		if _, n := c.sharer(r); n > 0 {
			if g := at(r, n); g >= 0 {
				gs[g].segs = append(gs[g].segs, i)
				continue
			}
		}
		gs = append(gs, decodeGroup{segs: []int{i}})
	}
	return gs
}

// attendShared is the attention of a group's queries at layer l, for
// the nh query heads from h0 that read key/value head kh: every query of
// every segment, each of those heads, reads the shared keys and values
// (row g.base, slots [0, g.plen)) in one product, then its own row's
// slots [g.plen, s0+j] (query j of a segment starting at slot s0). The
// queries are rows of q, the outputs rows of o (stride d, the heads'
// columns). A group without shared tokens (plen 0) is one row attending
// only to itself: its grouped query heads then still read its keys and
// values once for all of them.
func (c *Cache) attendShared(ws *workspace, l, h0, nh, kh int, g decodeGroup, segs []decodeSeg, q, o []float32, d int, scale float32) {
	dh, np := c.dh, g.plen
	tot, ldp := 0, np
	for _, i := range g.segs {
		s := segs[i]
		tot += s.n * nh
		ldp = max(ldp, s.s0+s.n)
	}
	ws.buf = grow(ws.buf, tot*(2*dh+ldp))
	qg, og, probs := ws.buf[:tot*dh], ws.buf[tot*dh:2*tot*dh], ws.buf[2*tot*dh:]
	// Rows in (segment, query, head) order: a query's heads are adjacent,
	// contiguous in q.
	row := 0
	for _, i := range g.segs {
		s := segs[i]
		for j := range s.n {
			copy(qg[(row+j*nh)*dh:(row+(j+1)*nh)*dh], q[(s.off+j)*d+h0*dh:])
		}
		row += s.n * nh
	}
	var bk, bv []float32
	if np > 0 {
		bk, bv = c.head(l, g.base, kh)
		gemmSerial(ws, gemmOp{m: tot, n: np, k: dh, a: qg, lda: dh, b: bk, ldb: c.stride(g.base), c: probs, ldc: ldp})
	}
	row = 0
	for _, i := range g.segs {
		s := segs[i]
		// The row's own slots from np: a sharer's storage starts there,
		// the base row's (extended with its sharers) at 0.
		ok, _ := c.head(l, s.row, kh)
		at := np - c.plen[s.row]
		gemmSerial(ws, gemmOp{m: s.n * nh, n: s.s0 + s.n - np, k: dh, a: qg[row*dh:], lda: dh, b: ok[at:], ldb: c.stride(s.row), c: probs[row*ldp+np:], ldc: ldp})
		for r := range s.n * nh {
			p := probs[(row+r)*ldp : (row+r+1)*ldp]
			valid := s.s0 + r/nh + 1
			m := kern.max(p[:valid])
			sum := kern.expShift(p[:valid], m, scale)
			kern.scale(p[:valid], 1/sum)
			clear(p[valid:])
		}
		row += s.n * nh
	}
	if np > 0 {
		gemmSerial(ws, gemmOp{m: tot, n: dh, k: np, a: probs, lda: ldp, b: bv, ldb: dh, c: og, ldc: dh})
	} else {
		clear(og)
	}
	row = 0
	for _, i := range g.segs {
		s := segs[i]
		_, ov := c.head(l, s.row, kh)
		at := np - c.plen[s.row]
		gemmSerial(ws, gemmOp{m: s.n * nh, n: dh, k: s.s0 + s.n - np, a: probs[row*ldp+np:], lda: ldp, b: ov[at*dh:], ldb: dh, c: og[row*dh:], ldc: dh, acc: true})
		for j := range s.n {
			copy(o[(s.off+j)*d+h0*dh:(s.off+j)*d+(h0+nh)*dh], og[(row+j*nh)*dh:])
		}
		row += s.n * nh
	}
}

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
	if c.layers != cfg.Layers || c.heads != cfg.KVHeads || c.dh != cfg.HeadDim() {
		return nil, fmt.Errorf("native: cache shape (%d layers, %d kv heads of %d) does not match the model", c.layers, c.heads, c.dh)
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
		if x, pinned := c.sharer(r); s0 < pinned {
			return nil, fmt.Errorf("native: row %d: row %d shares its first %d tokens, so it cannot be refilled from token %d; reset row %d first", r, x, pinned, s0, x)
		}
		ds.segs = append(ds.segs, decodeSeg{row: r, off: len(ds.tokens), n: n, s0: s0})
		for j, t := range tokens[i] {
			if t < 0 || int(t) >= cfg.Vocab {
				return nil, fmt.Errorf("native: row %d: token %d outside the vocabulary [0, %d)", r, t, cfg.Vocab)
			}
			ds.tokens, ds.pos = append(ds.tokens, t), append(ds.pos, int32(s0+j))
		}
	}
	for _, s := range ds.segs {
		// Storage for the new tokens, grown by a quarter more (at least
		// minGrowth) where the row outgrows it.
		need := s.s0 + s.n - c.plen[s.row]
		c.ensure(s.row, need, max(need/4, minGrowth))
	}
	ds.groups = c.attentionGroups(ds.groups[:0], ds.segs)
	t, d, f, dh := len(ds.tokens), cfg.DModel, cfg.FFN, cfg.HeadDim()
	heads, kvHeads, qd, kvd := cfg.Heads, cfg.KVHeads, cfg.QDim(), cfg.KVDim()
	per := heads / kvHeads
	for _, s := range []*[]float32{&ds.x, &ds.ln, &ds.mid} {
		*s = grow(*s, t*d)
	}
	ds.q, ds.att = grow(ds.q, t*qd), grow(ds.att, t*qd)
	ds.k, ds.v = grow(ds.k, t*kvd), grow(ds.v, t*kvd)
	ds.mean, ds.rstd = grow(ds.mean, t), grow(ds.rstd, t)
	ds.pre, ds.act = grow(ds.pre, t*f), grow(ds.act, t*f)
	q, k := ds.q, ds.k
	if cfg.QKNorm {
		ds.qPre, ds.kPre = grow(ds.qPre, t*qd), grow(ds.kPre, t*kvd)
		ds.qRstd, ds.kRstd = grow(ds.qRstd, t*heads), grow(ds.kRstd, t*kvHeads)
		q, k = ds.qPre, ds.kPre
	}
	if cfg.swiglu() {
		ds.up = grow(ds.up, t*f)
	}
	scale := float32(1 / sqrt(float64(dh)))

	pw := c.packedFor(t)
	m.embed(ds.x, ds.tokens)
	for l := range cfg.Layers {
		w := &m.w.blocks[l]
		var pk packedBlock
		if pw != nil {
			pk = pw.blocks[l]
		}
		lin := func(tg target, out, x, res []float32) {
			m.linearForward(l, tg, out, x, nil, res, t, &ds.lora, false, pk.of(tg), false)
		}
		m.normForward(ds.ln, ds.mean, ds.rstd, ds.x, w.lnAttnGain, w.lnAttnOffset, t)
		lin(tQ, q, ds.ln, nil)
		lin(tK, k, ds.ln, nil)
		lin(tV, ds.v, ds.ln, nil)
		if cfg.QKNorm {
			headNormForward(p, ds.q, ds.qRstd, ds.qPre, w.qNorm, t, heads, dh, cfg.NormEps)
			headNormForward(p, ds.k, ds.kRstd, ds.kPre, w.kNorm, t, kvHeads, dh, cfg.NormEps)
		}
		ropeForward(p, ds.q, ds.pos, t, heads, dh, m.cos, m.sin, false)
		ropeForward(p, ds.k, ds.pos, t, kvHeads, dh, m.cos, m.sin, false)
		for _, s := range ds.segs {
			n, at := c.stride(s.row), s.s0-c.plen[s.row] // own slots from plen
			for h := range kvHeads {
				ck, cv := c.head(l, s.row, h)
				for j := range s.n {
					for e, x := range ds.k[(s.off+j)*kvd+h*dh : (s.off+j)*kvd+h*dh+dh] {
						ck[e*n+at+j] = x
					}
					copy(cv[(at+j)*dh:(at+j+1)*dh], ds.v[(s.off+j)*kvd+h*dh:])
				}
			}
		}
		work := 0
		for _, s := range ds.segs {
			work += 2 * s.n * (s.s0 + s.n) * qd
		}
		// One task per group and key/value head: its query heads read
		// the head's cached keys and values together where they can.
		p.runWork(len(ds.groups)*kvHeads, work, func(wk, task int) {
			g, kh := ds.groups[task/kvHeads], task%kvHeads
			ws := &p.ws[wk]
			s := ds.segs[g.segs[0]]
			if g.plen > 0 || (per > 1 && s.n == 1) {
				c.attendShared(ws, l, kh*per, per, kh, g, ds.segs, ds.q, ds.att, qd, scale)
				return
			}
			// A row's own tokens, more than one (a prompt): causal
			// blocks per query head.
			ck, cv := c.head(l, s.row, kh)
			ldp := s.s0 + s.n
			for h := kh * per; h < (kh+1)*per; h++ {
				ws.buf = grow(ws.buf, s.n*ldp)
				at := s.off*qd + h*dh
				attendForward(ws, ds.q[at:], qd, kv{}, keys{k: ck, kt: c.stride(s.row)}, cv, dh, ds.att[at:], qd, ws.buf, ldp, s.n, s.s0, dh, scale, false)
			}
		})
		lin(tOut, ds.mid, ds.att, ds.x)
		m.normForward(ds.ln, ds.mean, ds.rstd, ds.mid, w.lnFFNGain, w.lnFFNOffset, t)
		lin(tFFNIn, ds.pre, ds.ln, nil)
		if cfg.swiglu() {
			lin(tFFNUp, ds.up, ds.ln, nil)
			swigluForward(p, ds.act, ds.pre, ds.up)
		} else {
			geluForward(p, ds.act, ds.pre)
		}
		lin(tFFNOut, ds.x, ds.act, ds.mid)
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
	m.normForward(ds.h, ds.hm, ds.hr, ds.last, m.w.lnFinalGain, m.w.lnFinalOffset, r)
	ds.logits = grow(ds.logits, r*cfg.Vocab)
	var lm []float32
	if pw := c.packedFor(r); pw != nil {
		lm = pw.lm
	}
	if cfg.TiedEmbed && lm == nil && r <= gemmSmallM && m.w.embed != nil {
		tiedHeadFew(p, ds.logits, ds.h, m.w.embed, r, d, cfg.Vocab)
		return ds.logits, nil
	}
	m.lmForward(ds.logits, ds.h, r, false, lm)
	return ds.logits, nil
}

// tiedHeadFew is the tied LM head (logits = h·Eᵀ) of a few rows
// (decoding): each embedding row is read once, for all rows of h, its
// dot products spread over the workers by vocabulary range (a
// transposed product would pack all of E first).
func tiedHeadFew(p *pool, logits, h, e []float32, rows, d, v int) {
	p.runWork((v+1023)/1024, 8*v*d, func(_, t int) {
		for j := t * 1024; j < min(v, (t+1)*1024); j++ {
			ej := e[j*d : j*d+d]
			for i := range rows {
				logits[i*v+j] = kern.dot(h[i*d:i*d+d], ej)
			}
		}
	})
}
