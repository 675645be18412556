package native

import "math"

// One forward and one backward function per layer kind, in model order:
// embedding, LayerNorm or RMSNorm, dense (the forward is a gemm with its
// bias and residual, model.go's linearForward with its LoRA adapter),
// RoPE, q/k norm, attention (attention.go), GELU or SwiGLU. Activations
// are row-major [n, width] over the n real (non-padding) tokens of a
// batch. Backward functions accumulate parameter gradients, none for a
// frozen parameter (its gradient view nil).

// rowGrain is how many rows one parallel task handles in row-wise layers.
const rowGrain = 64

func embeddingForward(x, embed []float32, tokens []int32, d int) {
	for i, t := range tokens {
		copy(x[i*d:(i+1)*d], embed[int(t)*d:])
	}
}

func embeddingBackward(dEmbed, dx []float32, tokens []int32, d int) {
	for i, t := range tokens {
		row := dEmbed[int(t)*d : int(t)*d+d]
		for j, g := range dx[i*d : i*d+d] {
			row[j] += g
		}
	}
}

// layerNormForward normalises each row of x over its d values (biased
// variance), keeping mean and 1/std for the backward pass.
func layerNormForward(p *pool, out, mean, rstd, x, gain, offset []float32, n, d int) {
	p.chunks(n, rowGrain, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			mean[i], rstd[i] = kern.lnForward(out[i*d:i*d+d], x[i*d:i*d+d], gain, offset)
		}
	})
}

// lnForwardGeneric is one row of layerNormForward: out = (x-mu)*r*gain +
// offset, with mu the mean of x and r = 1/sqrt(var + lnEps).
func lnForwardGeneric(out, x, gain, offset []float32) (float32, float32) {
	var s float32
	for _, v := range x {
		s += v
	}
	mu := s / float32(len(x))
	var vs float32
	for _, v := range x {
		vs += (v - mu) * (v - mu)
	}
	r := lnRstd(vs, len(x))
	for j, v := range x {
		out[j] = (v-mu)*r*gain[j] + offset[j]
	}
	return mu, r
}

// lnRstd is 1/sqrt(vs/d + lnEps), computed in float64.
func lnRstd(vs float32, d int) float32 {
	return float32(1 / math.Sqrt(float64(vs/float32(d))+lnEps))
}

// layerNormBackward adds the input gradient to dx and the gain and offset
// gradients to dGain and dOffset. part is scratch for per-chunk sums
// (reduced in chunk order, so the result does not depend on scheduling).
func layerNormBackward(p *pool, dx, dGain, dOffset, dOut, x, mean, rstd, gain []float32, n, d int, part []float32) []float32 {
	chunks := (n + rowGrain - 1) / rowGrain
	part = grow(part, chunks*2*d)
	clear(part)
	p.chunks(n, rowGrain, func(w, lo, hi int) {
		pg := part[lo/rowGrain*2*d:][:d]
		po := part[lo/rowGrain*2*d+d:][:d]
		for i := lo; i < hi; i++ {
			kern.lnBackward(dx[i*d:i*d+d], pg, po, dOut[i*d:i*d+d], x[i*d:i*d+d], gain, mean[i], rstd[i])
		}
	})
	for c := range chunks {
		if dGain != nil { // nil: frozen
			kern.axpy(dGain, 1, part[c*2*d:])
			kern.axpy(dOffset, 1, part[c*2*d+d:])
		}
	}
	return part
}

// lnBackwardGeneric is one row of layerNormBackward: with xhat = (x-mu)*r
// and dh = dOut*gain, it adds dOut*xhat to dGain, dOut to dOffset and
// r*(dh - mean(dh) - xhat*mean(dh*xhat)) to dx.
func lnBackwardGeneric(dx, dGain, dOffset, dOut, x, gain []float32, mu, r float32) {
	var m1, m2 float32 // sums of dh and dh*xhat
	for j, g := range dOut {
		xh := (x[j] - mu) * r
		dGain[j] += g * xh
		dOffset[j] += g
		dh := g * gain[j]
		m1 += dh
		m2 += dh * xh
	}
	m1 /= float32(len(dOut))
	m2 /= float32(len(dOut))
	for j, g := range dOut {
		xh := (x[j] - mu) * r
		dx[j] += r * (g*gain[j] - m1 - xh*m2)
	}
}

// denseBackward adds xᵀ·dOut to dw and the column sums of dOut to db, and
// sets dx = dOut·wᵀ (adds to it when accDx); dx may be nil. x is [n, in],
// w (ln.w) is [in, dout], stored in bfloat16 as ln.h or in quantized
// blocks as ln.q (rows dout of in: wᵀ) when it is a frozen base so
// stored; a frozen weight or bias has no gradient (dw, db nil), and its
// products are skipped. xta, when not nil, is xᵀ converted for bf16
// (shareBF16A). With bf16 the products' inputs are rounded to bfloat16.
func denseBackward(p *pool, bf16 bool, xta *bf16Input, dx, dw, db, dOut, x []float32, ln linear, n, in, dout int, accDx bool) {
	if dw != nil {
		gemm(p, gemmOp{ta: true, m: in, n: dout, k: n, a: x, lda: in, b: dOut, ldb: dout, c: dw, ldc: dout, acc: true, bf16: bf16, bf16A: xta})
	}
	if db != nil {
		p.chunks(dout, 256, func(_, lo, hi int) {
			dbs := db[lo:hi]
			for i := range n {
				kern.axpy(dbs, 1, dOut[i*dout+lo:])
			}
		})
	}
	if dx != nil {
		op := gemmOp{tb: true, m: n, n: in, k: dout, a: dOut, lda: dout, b: ln.w, bh: ln.h, ldb: dout, c: dx, ldc: in, acc: accDx, bf16: bf16}
		if ln.q != nil {
			op.tb, op.bq = false, ln.q // wᵀ's rows are its rows
		}
		gemm(p, op)
	}
}

// ropeTables returns cos and sin of pos*f_i for every position in [0,
// ctx) and pair i in [0, dh/2), computed in float64, with f_i =
// c.InvFreq[i], or base^(-2i/dh). (Hugging Face rounds f_i and the angle
// to float32: its angles differ by up to about pos·2⁻²⁴ rad.)
func ropeTables(c Config) (cos, sin []float32) {
	ctx, dh, base := c.Ctx, c.HeadDim(), c.RoPEBase
	half := dh / 2
	cos, sin = make([]float32, ctx*half), make([]float32, ctx*half)
	for p := range ctx {
		for i := range half {
			a := float64(p) * math.Pow(base, -2*float64(i)/float64(dh))
			if c.InvFreq != nil {
				a = float64(p) * c.InvFreq[i]
			}
			cos[p*half+i], sin[p*half+i] = float32(math.Cos(a)), float32(math.Sin(a))
		}
	}
	return cos, sin
}

// ropeForward rotates each head of each row of x (in place) by its
// position, HF "rotate_half" convention: the pair is (x[i], x[i+dh/2]).
// With inverse it applies the transposed rotation: the backward pass.
func ropeForward(p *pool, x []float32, pos []int32, n, heads, dh int, cos, sin []float32, inverse bool) {
	half, d := dh/2, heads*dh
	p.chunks(n, rowGrain*2, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			c := cos[int(pos[i])*half : int(pos[i])*half+half]
			s := sin[int(pos[i])*half : int(pos[i])*half+half]
			for h := range heads {
				kern.rope(x[i*d+h*dh:i*d+h*dh+half], x[i*d+h*dh+half:i*d+h*dh+dh], c, s, inverse)
			}
		}
	})
}

// ropeGeneric is one head's rotation in ropeForward: (a, b) <- (a·c - b·s,
// b·c + a·s), s negated when inverse.
func ropeGeneric(a, b, c, s []float32, inverse bool) {
	for j := range a {
		sj := s[j]
		if inverse {
			sj = -sj
		}
		a[j], b[j] = a[j]*c[j]-b[j]*sj, b[j]*c[j]+a[j]*sj
	}
}

func geluForward(p *pool, out, in []float32) {
	p.chunks(len(out), 1<<14, func(_, lo, hi int) { kern.gelu(out[lo:hi], in[lo:hi]) })
}

// geluBackward sets dIn = dOut * GELU'(in); dIn may alias dOut.
func geluBackward(p *pool, dIn, dOut, in []float32) {
	p.chunks(len(dIn), 1<<14, func(_, lo, hi int) { kern.geluBackward(dIn[lo:hi], dOut[lo:hi], in[lo:hi]) })
}

// rmsNormForward normalises each row of x over its d values:
// out = x·r·gain with r = 1/sqrt(mean(x²) + eps), keeping r.
func rmsNormForward(p *pool, out, rstd, x, gain []float32, n, d int, eps float64) {
	p.chunks(n, rowGrain, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			rstd[i] = kern.rmsForward(out[i*d:i*d+d], x[i*d:i*d+d], gain, eps)
		}
	})
}

// rmsForwardGeneric is one row of rmsNormForward, in float32 as Hugging
// Face's LlamaRMSNorm computes it (the square root in float64, rounded):
// out = (x·r)·gain.
func rmsForwardGeneric(out, x, gain []float32, eps float64) float32 {
	var ss float32
	for _, v := range x {
		ss += v * v
	}
	r := rmsRstd(ss, len(x), eps)
	for j, v := range x {
		out[j] = v * r * gain[j]
	}
	return r
}

// rmsRstd is 1/sqrt(ss/d + eps), computed in float64.
func rmsRstd(ss float32, d int, eps float64) float32 {
	return float32(1 / math.Sqrt(float64(ss/float32(d))+eps))
}

// rmsNormBackward adds the input gradient to dx and, when dGain is not
// nil, the gain's gradient to dGain; part is scratch for per-chunk sums
// (reduced in chunk order, as layerNormBackward's).
func rmsNormBackward(p *pool, dx, dGain, dOut, x, rstd, gain []float32, n, d int, part []float32) []float32 {
	chunks := (n + rowGrain - 1) / rowGrain
	part = grow(part, chunks*d)
	clear(part)
	p.chunks(n, rowGrain, func(_, lo, hi int) {
		pg := part[lo/rowGrain*d:][:d]
		for i := lo; i < hi; i++ {
			kern.rmsBackward(dx[i*d:i*d+d], pg, dOut[i*d:i*d+d], x[i*d:i*d+d], gain, rstd[i])
		}
	})
	if dGain != nil {
		for c := range chunks {
			kern.axpy(dGain, 1, part[c*d:])
		}
	}
	return part
}

// rmsBackwardGeneric is one row of rmsNormBackward: with xhat = x·r and
// g = dOut·gain, it adds dOut·xhat to dGain and r·(g - xhat·mean(g·xhat))
// to dx.
func rmsBackwardGeneric(dx, dGain, dOut, x, gain []float32, r float32) {
	var m2 float32
	for j, g := range dOut {
		xh := x[j] * r
		dGain[j] += g * xh
		m2 += g * gain[j] * xh
	}
	m2 /= float32(len(dOut))
	for j, g := range dOut {
		dx[j] += r * (g*gain[j] - x[j]*r*m2)
	}
}

// headNormForward is QKNorm: RMSNorm over each head (dh values, weights
// gain) of each of the n rows of x (heads heads per row), into out.
func headNormForward(p *pool, out, rstd, x, gain []float32, n, heads, dh int, eps float64) {
	rmsNormForward(p, out, rstd, x, gain, n*heads, dh, eps)
}

// headNormBackward is headNormForward's backward pass: dx is set (not
// added to), the gain's gradient added to dGain (nil: frozen).
func headNormBackward(p *pool, dx, dGain, dOut, x, rstd, gain []float32, n, heads, dh int, part []float32) []float32 {
	clear(dx[:n*heads*dh])
	return rmsNormBackward(p, dx, dGain, dOut, x, rstd, gain, n*heads, dh, part)
}

// swigluForward sets out = silu(gate)·up, silu(g) = g·sigmoid(g).
func swigluForward(p *pool, out, gate, up []float32) {
	p.chunks(len(out), 1<<14, func(_, lo, hi int) { kern.swiglu(out[lo:hi], gate[lo:hi], up[lo:hi]) })
}

// swigluBackward sets dGate and dUp from dOut (dUp may alias dOut).
func swigluBackward(p *pool, dGate, dUp, dOut, gate, up []float32) {
	p.chunks(len(dOut), 1<<14, func(_, lo, hi int) {
		kern.swigluBackward(dGate[lo:hi], dUp[lo:hi], dOut[lo:hi], gate[lo:hi], up[lo:hi])
	})
}

// swigluGeneric is one stretch of swigluForward: s = 1/(1+exp(-g)),
// out = (g·s)·u.
func swigluGeneric(out, gate, up []float32) {
	gate, up = gate[:len(out)], up[:len(out)]
	for i, g := range gate {
		s := 1 / (1 + expf(-g))
		out[i] = g * s * up[i]
	}
}

// swigluBackwardGeneric is one stretch of swigluBackward: with s =
// sigmoid(g), dUp = dOut·g·s and dGate = dOut·u·s·(1 + g·(1-s)).
func swigluBackwardGeneric(dGate, dUp, dOut, gate, up []float32) {
	n := len(dOut)
	dGate, dUp, gate, up = dGate[:n], dUp[:n], gate[:n], up[:n]
	for i, d := range dOut {
		g, u := gate[i], up[i]
		s := 1 / (1 + expf(-g))
		dUp[i] = d * (g * s)
		dGate[i] = d * u * s * (1 + g*(1-s))
	}
}
