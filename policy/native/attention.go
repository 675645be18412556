package native

// Causal self-attention over packed rows. A batch's real tokens are laid
// out so that the tokens of each example (a run of equal segment ids in a
// row) are contiguous; a group is one such example. Query i of a group
// attends keys [0, i] of the same group, so examples packed in one row
// never see each other and padding takes no part.
//
// A group may also have a prefix: another group of its row (a prompt
// shared by several continuations, Batch.Prefix) whose every key it
// attends to as well. Its probability rows then hold the prefix's
// columns first, then its own: [np | n], as if the prefix were the start
// of the example. The prefix's key and value gradients collect the
// contributions of all its continuations, so the backward pass runs a
// prefix and its continuations as one task (a family) per head.

// attnBlock is how many query rows attendForward handles at once: the
// scores of a block are computed only up to its last row, which skips
// most of the masked upper triangle.
const attnBlock = 64

// attnBF16MinHead is the smallest head width whose attention products take
// bf16 inputs when the model's do: narrower heads give the products k =
// dh/2 pairs or fewer per micro-kernel call, and per-key conversions, that
// cost more than bf16 saves (BenchmarkSFTStepPair on Zen 5, bf16 /
// float32 per CPU-second: the width-128 shape's dh = 32 went from
// 1.16-1.32x to 1.26-1.39x with float32 attention; the demo shape's dh =
// 64 does better with bf16 attention, 1.43-1.53x against 1.42-1.47x).
const attnBF16MinHead = 64

// group is one example: rows [start, start+n) of the compact activations,
// with its probabilities at probs[off:] (heads x n x (np+n), np the
// prefix's length), and its prefix group (-1: none).
type group struct{ start, n, off, prefix int }

// kv is the keys and values a group's queries attend to besides its own:
// np rows at pk and pv (its prefix; stride d like its own), with the
// prefix's keys (forward) or values (backward) packed for the score
// products in packed.
type kv struct {
	pk, pv []float32
	np     int
	packed []float32
}

// prefixPacks holds, for every group that is a prefix, its keys or values
// per head packed as the B of a transposed product (gemm's panels): each
// continuation's scores then reuse them instead of packing them again for
// every block of 64 queries. offs[g] is group g's offset (-1: not a
// prefix); a head's panels take size(g) values.
type prefixPacks struct {
	offs []int
	buf  []float32
}

func packSize(g group, dh int) int { return (g.n + kern.nr - 1) / kern.nr * kern.nr * dh }

// pack packs src's rows of every prefix group, head by head, on the pool.
func (pp *prefixPacks) pack(p *pool, src []float32, groups []group, heads, dh int) {
	d := heads * dh
	total := 0
	for gi, off := range pp.offs {
		if off >= 0 {
			total = max(total, off+heads*packSize(groups[gi], dh))
		}
	}
	pp.buf = grow(pp.buf, total)
	var todo []int
	for gi, off := range pp.offs {
		if off >= 0 {
			todo = append(todo, gi)
		}
	}
	p.run(len(todo)*heads, func(_, t int) {
		gi, h := todo[t/heads], t%heads
		g, size := groups[gi], packSize(groups[gi], dh)
		at := pp.offs[gi] + h*size
		packB(nil, gemmOp{tb: true, n: g.n, k: dh, b: src[g.start*d+h*dh:], ldb: d}, pp.buf[at:at:at+size], false)
	})
}

// of returns group gi's packed panels for head h (nil: not a prefix).
func (pp *prefixPacks) of(groups []group, gi, h, dh int) []float32 {
	if pp == nil || pp.offs == nil || pp.offs[gi] < 0 {
		return nil
	}
	size := packSize(groups[gi], dh)
	at := pp.offs[gi] + h*size
	return pp.buf[at : at+size]
}

// keys are the keys a block of queries attends to besides a prefix: rows
// of k with the values' stride, or when kt > 0 transposed, dh rows of k
// with stride kt (the KV cache's layout).
type keys struct {
	k  []float32
	kt int
}

// prefixKV returns group g's prefix keys and values for head h, with the
// prefix's packed panels from pp.
func prefixKV(groups []group, g group, k, v []float32, d, h, dh int, pp *prefixPacks) kv {
	if g.prefix < 0 {
		return kv{}
	}
	p := groups[g.prefix]
	at := p.start*d + h*dh
	return kv{pk: k[at:], pv: v[at:], np: p.n, packed: pp.of(groups, g.prefix, h, dh)}
}

// attentionForward is attentionGQAForward with a key/value head per
// query head (multi-head attention).
func attentionForward(p *pool, o, probs, q, k, v []float32, groups []group, pp *prefixPacks, heads, dh int, bf16 bool) {
	attentionGQAForward(p, o, probs, q, k, v, groups, pp, heads, heads, dh, bf16)
}

// attentionGQAForward computes, per group and query head, o =
// softmax(q·kᵀ/√dh + mask)·v over the group's prefix and its own earlier
// keys, keeping the probabilities for the backward pass. q and o have
// heads heads per row, k and v kvHeads: query head h reads key/value head
// h/(heads/kvHeads) (grouped-query attention; kvHeads = heads is plain
// multi-head attention).
func attentionGQAForward(p *pool, o, probs, q, k, v []float32, groups []group, pp *prefixPacks, heads, kvHeads, dh int, bf16 bool) {
	dq, dkv, per := heads*dh, kvHeads*dh, heads/kvHeads
	scale := float32(1 / sqrt(float64(dh)))
	bf16 = bf16 && dh >= attnBF16MinHead
	if pp != nil {
		pp.pack(p, k, groups, kvHeads, dh)
	}
	p.run(len(groups)*heads, func(w, t int) {
		g, h := groups[t/heads], t%heads
		kh := h / per
		at, kat := g.start*dq+h*dh, g.start*dkv+kh*dh
		pre := prefixKV(groups, g, k, v, dkv, kh, dh, pp)
		ldp := pre.np + g.n
		attendForward(&p.ws[w], q[at:], dq, pre, keys{k: k[kat:]}, v[kat:], dkv, o[at:], dq,
			probs[g.off+h*g.n*ldp:], ldp, g.n, 0, dh, scale, bf16)
	})
}

// attendForward is the attention of t queries (rows of q, stride ldq) on
// the prefix keys and values of pre, then keys and values [0, s0+t) (ks,
// and rows of v with stride ldk): query i sees all of pre and keys [0,
// s0+i]. It writes the outputs to o (stride ldo) and the probabilities to
// probs (stride ldp >= pre.np+s0+t: the prefix's columns, then the
// others; entries right of each block's last row are left untouched).
// With bf16 its products of more than gemmSmallM rows take bf16 inputs.
func attendForward(ws *workspace, q []float32, ldq int, pre kv, ks keys, v []float32, ldk int, o []float32, ldo int,
	probs []float32, ldp, t, s0, dh int, scale float32, bf16 bool) {
	np := pre.np
	var kT, vB *bf16Panels
	if bf16 && t > gemmSmallM && ks.kt == 0 {
		kT, vB = attnPanels(ws, ks.k, v, ldk, s0+t, dh)
	}
	for r0 := 0; r0 < t; r0 += attnBlock {
		r1 := min(t, r0+attnBlock)
		nc := s0 + r1
		if np > 0 {
			gemmSerial(ws, gemmOp{tb: true, m: r1 - r0, n: np, k: dh, a: q[r0*ldq:], lda: ldq, b: pre.pk, ldb: ldk, c: probs[r0*ldp:], ldc: ldp, packed: pre.packed, bf16: bf16})
		}
		scores := gemmOp{tb: true, m: r1 - r0, n: nc, k: dh, a: q[r0*ldq:], lda: ldq, b: ks.k, ldb: ldk, c: probs[r0*ldp+np:], ldc: ldp, bf16: bf16, bf16B: kT}
		if ks.kt > 0 {
			scores.tb, scores.ldb = false, ks.kt
		}
		gemmSerial(ws, scores)
		for i := r0; i < r1; i++ {
			row := probs[i*ldp : i*ldp+np+nc]
			valid := np + s0 + i + 1
			m := kern.max(row[:valid])
			sum := kern.expShift(row[:valid], m, scale)
			kern.scale(row[:valid], 1/sum)
			clear(row[valid:])
		}
		if np > 0 {
			gemmSerial(ws, gemmOp{m: r1 - r0, n: dh, k: np, a: probs[r0*ldp:], lda: ldp, b: pre.pv, ldb: ldk, c: o[r0*ldo:], ldc: ldo, bf16: bf16})
		}
		gemmSerial(ws, gemmOp{m: r1 - r0, n: dh, k: nc, a: probs[r0*ldp+np:], lda: ldp, b: v, ldb: ldk, c: o[r0*ldo:], ldc: ldo, acc: np > 0, bf16: bf16, bf16B: vB})
	}
}

// attentionBackward is attentionGQABackward with a key/value head per
// query head.
func attentionBackward(p *pool, dq, dk, dv, dOut, probs, q, k, v []float32, groups []group, families [][]int32, pp *prefixPacks, heads, dh, n int, bf16 bool) {
	attentionGQABackward(p, dq, dk, dv, dOut, probs, q, k, v, groups, families, pp, heads, heads, dh, n, bf16)
}

// attentionGQABackward computes dq, dk and dv (overwritten) from dOut,
// for attentionGQAForward's heads. One task per family (a group without a
// prefix, then every group that names it) and key/value head: the
// family's groups, and the query heads that share the key/value head, add
// to the same rows of dk and dv, always in the same order.
func attentionGQABackward(p *pool, dq, dk, dv, dOut, probs, q, k, v []float32, groups []group, families [][]int32, pp *prefixPacks, heads, kvHeads, dh, n int, bf16 bool) {
	dqd, dkv, per := heads*dh, kvHeads*dh, heads/kvHeads
	clear(dk[:n*dkv])
	clear(dv[:n*dkv])
	scale := float32(1 / sqrt(float64(dh)))
	bf16 = bf16 && dh >= attnBF16MinHead
	if pp != nil {
		pp.pack(p, v, groups, kvHeads, dh) // the prefix's values, for dP = dO·vᵀ
	}
	p.run(len(families)*kvHeads, func(w, t int) {
		kh := t % kvHeads
		for h := kh * per; h < (kh+1)*per; h++ {
			for _, gi := range families[t/kvHeads] {
				g := groups[gi]
				at, kat := g.start*dqd+h*dh, g.start*dkv+kh*dh
				pre := prefixKV(groups, g, k, v, dkv, kh, dh, pp)
				var dpk, dpv []float32
				if g.prefix >= 0 {
					pat := groups[g.prefix].start*dkv + kh*dh
					dpk, dpv = dk[pat:], dv[pat:]
				}
				ldp := pre.np + g.n
				attendBackward(&p.ws[w], dq[at:], dk[kat:], dv[kat:], dpk, dpv, dOut[at:], q[at:], pre, k[kat:], v[kat:], dqd, dkv,
					probs[g.off+h*g.n*ldp:], g.n, dh, scale, bf16)
			}
		}
	})
}

// attendBackward is the backward pass of attendForward with s0 = 0: the
// queries' rows (dq, dOut, q) of stride ldq, the keys' and values' (dk,
// dv, k, v and the prefix's dpk, dpv) of stride ldk, probabilities of
// stride pre.np+t. dk, dv and the prefix's dpk, dpv are accumulated, dq
// overwritten.
func attendBackward(ws *workspace, dq, dk, dv, dpk, dpv, dOut, q []float32, pre kv, k, v []float32, ldq, ldk int,
	probs []float32, t, dh int, scale float32, bf16 bool) {
	np := pre.np
	ldp := np + t
	var vT, kB *bf16Panels
	if bf16 && t > gemmSmallM {
		vT, kB = attnPanels(ws, v, k, ldk, t, dh)
	}
	for r0 := 0; r0 < t; r0 += attnBlock {
		r1 := min(t, r0+attnBlock)
		rb, nc := r1-r0, r1
		lds := np + nc
		ws.buf = grow(ws.buf, rb*lds)
		dS := ws.buf
		// dP = dO·vᵀ, then dS = P∘(dP - rowsum(P∘dP)) * scale.
		if np > 0 {
			gemmSerial(ws, gemmOp{tb: true, m: rb, n: np, k: dh, a: dOut[r0*ldq:], lda: ldq, b: pre.pv, ldb: ldk, c: dS, ldc: lds, packed: pre.packed, bf16: bf16})
		}
		gemmSerial(ws, gemmOp{tb: true, m: rb, n: nc, k: dh, a: dOut[r0*ldq:], lda: ldq, b: v, ldb: ldk, c: dS[np:], ldc: lds, bf16: bf16, bf16B: vT})
		for i := r0; i < r1; i++ {
			valid := np + i + 1
			pr := probs[i*ldp : i*ldp+valid]
			dr := dS[(i-r0)*lds : (i-r0+1)*lds]
			kern.softmaxGrad(dr, pr, kern.dot(pr, dr), scale)
			clear(dr[valid:])
		}
		if np > 0 {
			gemmSerial(ws, gemmOp{m: rb, n: dh, k: np, a: dS, lda: lds, b: pre.pk, ldb: ldk, c: dq[r0*ldq:], ldc: ldq, bf16: bf16})
			gemmSerial(ws, gemmOp{ta: true, m: np, n: dh, k: rb, a: dS, lda: lds, b: q[r0*ldq:], ldb: ldq, c: dpk, ldc: ldk, acc: true, bf16: bf16})
			gemmSerial(ws, gemmOp{ta: true, m: np, n: dh, k: rb, a: probs[r0*ldp:], lda: ldp, b: dOut[r0*ldq:], ldb: ldq, c: dpv, ldc: ldk, acc: true, bf16: bf16})
		}
		gemmSerial(ws, gemmOp{m: rb, n: dh, k: nc, a: dS[np:], lda: lds, b: k, ldb: ldk, c: dq[r0*ldq:], ldc: ldq, acc: np > 0, bf16: bf16, bf16B: kB})
		gemmSerial(ws, gemmOp{ta: true, m: nc, n: dh, k: rb, a: dS[np:], lda: lds, b: q[r0*ldq:], ldb: ldq, c: dk, ldc: ldk, acc: true, bf16: bf16})
		gemmSerial(ws, gemmOp{ta: true, m: nc, n: dh, k: rb, a: probs[r0*ldp+np:], lda: ldp, b: dOut[r0*ldq:], ldb: ldq, c: dv, ldc: ldk, acc: true, bf16: bf16})
	}
}

// softmaxGradGeneric is the softmax's backward for one row of scores:
// d[j] = p[j]*(d[j]-delta)*scale, delta = sum p[j]*d[j].
func softmaxGradGeneric(d, p []float32, delta, scale float32) {
	for j, pj := range p {
		d[j] = pj * (d[j] - delta) * scale
	}
}
