package native

// Causal self-attention over packed rows. A batch's real tokens are laid
// out so that the tokens of each example (a run of equal segment ids in a
// row) are contiguous; a group is one such example. Query i of a group
// attends keys [0, i] of the same group, so examples packed in one row
// never see each other and padding takes no part.

// attnBlock is how many query rows attendForward handles at once: the
// scores of a block are computed only up to its last row, which skips
// most of the masked upper triangle.
const attnBlock = 64

// group is one example: rows [start, start+n) of the compact activations,
// with its probabilities at probs[off:] (heads x n x n).
type group struct{ start, n, off int }

// attentionForward computes, per group and head, o = softmax(q·kᵀ/√dh +
// causal mask)·v, keeping the probabilities for the backward pass.
func attentionForward(p *pool, o, probs, q, k, v []float32, groups []group, heads, dh int) {
	d := heads * dh
	scale := float32(1 / sqrt(float64(dh)))
	p.run(len(groups)*heads, func(w, t int) {
		g, h := groups[t/heads], t%heads
		at := g.start*d + h*dh
		attendForward(&p.ws[w], q[at:], d, k[at:], v[at:], d, o[at:], d,
			probs[g.off+h*g.n*g.n:], g.n, g.n, 0, dh, scale)
	})
}

// attendForward is the attention of t queries (rows of q, stride ldq) on
// keys and values [0, s0+t) (rows of k and v, stride ldk): query i sees
// keys [0, s0+i]. It writes the outputs to o (stride ldo) and the
// probabilities to probs (stride ldp >= s0+t; entries right of each
// block's last row are left untouched).
func attendForward(ws *workspace, q []float32, ldq int, k, v []float32, ldk int, o []float32, ldo int,
	probs []float32, ldp, t, s0, dh int, scale float32) {
	for r0 := 0; r0 < t; r0 += attnBlock {
		r1 := min(t, r0+attnBlock)
		nc := s0 + r1
		gemmSerial(ws, gemmOp{tb: true, m: r1 - r0, n: nc, k: dh, a: q[r0*ldq:], lda: ldq, b: k, ldb: ldk, c: probs[r0*ldp:], ldc: ldp})
		for i := r0; i < r1; i++ {
			row := probs[i*ldp : i*ldp+nc]
			valid := s0 + i + 1
			m := kern.max(row[:valid])
			sum := kern.expShift(row[:valid], m, scale)
			kern.scale(row[:valid], 1/sum)
			clear(row[valid:])
		}
		gemmSerial(ws, gemmOp{m: r1 - r0, n: dh, k: nc, a: probs[r0*ldp:], lda: ldp, b: v, ldb: ldk, c: o[r0*ldo:], ldc: ldo})
	}
}

// attentionBackward computes dq, dk and dv (overwritten) from dOut.
func attentionBackward(p *pool, dq, dk, dv, dOut, probs, q, k, v []float32, groups []group, heads, dh, n int) {
	d := heads * dh
	clear(dk[:n*d])
	clear(dv[:n*d])
	scale := float32(1 / sqrt(float64(dh)))
	p.run(len(groups)*heads, func(w, t int) {
		g, h := groups[t/heads], t%heads
		at := g.start*d + h*dh
		attendBackward(&p.ws[w], dq[at:], dk[at:], dv[at:], dOut[at:], q[at:], k[at:], v[at:], d,
			probs[g.off+h*g.n*g.n:], g.n, dh, scale)
	})
}

// attendBackward is the backward pass of attendForward with s0 = 0 and
// every row of stride ld. dk and dv are accumulated, dq overwritten.
func attendBackward(ws *workspace, dq, dk, dv, dOut, q, k, v []float32, ld int, probs []float32, t, dh int, scale float32) {
	ldp := t
	for r0 := 0; r0 < t; r0 += attnBlock {
		r1 := min(t, r0+attnBlock)
		rb, nc := r1-r0, r1
		ws.buf = grow(ws.buf, rb*nc)
		dS := ws.buf
		// dP = dO·vᵀ, then dS = P∘(dP - rowsum(P∘dP)) * scale.
		gemmSerial(ws, gemmOp{tb: true, m: rb, n: nc, k: dh, a: dOut[r0*ld:], lda: ld, b: v, ldb: ld, c: dS, ldc: nc})
		for i := r0; i < r1; i++ {
			valid := i + 1
			pr := probs[i*ldp : i*ldp+valid]
			dr := dS[(i-r0)*nc : (i-r0+1)*nc]
			delta := kern.dot(pr, dr)
			for j, pj := range pr {
				dr[j] = pj * (dr[j] - delta) * scale
			}
			clear(dr[valid:])
		}
		gemmSerial(ws, gemmOp{m: rb, n: dh, k: nc, a: dS, lda: nc, b: k, ldb: ld, c: dq[r0*ld:], ldc: ld})
		gemmSerial(ws, gemmOp{ta: true, m: nc, n: dh, k: rb, a: dS, lda: nc, b: q[r0*ld:], ldb: ld, c: dk, ldc: ld, acc: true})
		gemmSerial(ws, gemmOp{ta: true, m: nc, n: dh, k: rb, a: probs[r0*ldp:], lda: ldp, b: dOut[r0*ld:], ldb: ld, c: dv, ldc: ld, acc: true})
	}
}
