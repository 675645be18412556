package native

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// tree is one shared prompt and its continuations, for prefix batches.
type tree struct {
	prompt []int32
	conts  [][]int32
}

// packTrees lays each row's trees out as [prompt][cont 1][cont 2]...:
// the prompt one segment, each continuation its own segment naming the
// prompt as its prefix, positions continuing from the prompt's length.
// With shared false every continuation is instead its own example with a
// copy of its prompt (the unshared packing of the same samples). It
// returns, per continuation in order, the flat positions whose heads see
// its tokens: the prompt's last token, then every continuation token.
func packTrees(s int, shared bool, rows ...[]tree) (Batch, [][]int32) {
	b := Batch{B: len(rows), S: s}
	n := b.B * s
	b.Tokens, b.Positions, b.Segments = make([]int32, n), make([]int32, n), make([]int32, n)
	if shared {
		b.Prefix = make([]int32, n)
	}
	var heads [][]int32
	for r, trees := range rows {
		at, seg := r*s, int32(0)
		put := func(toks []int32, pos0, prefix int32) []int32 {
			if at+len(toks) > (r+1)*s {
				panic("packTrees: row overflow")
			}
			seg++
			var idx []int32
			for j, tok := range toks {
				b.Tokens[at], b.Positions[at], b.Segments[at] = tok, pos0+int32(j), seg
				if shared {
					b.Prefix[at] = prefix
				}
				idx = append(idx, int32(at))
				at++
			}
			return idx
		}
		for _, tr := range trees {
			p := int32(len(tr.prompt))
			var promptIdx []int32
			if shared {
				promptIdx = put(tr.prompt, 0, 0)
			}
			promptSeg := seg
			for _, c := range tr.conts {
				if !shared {
					promptIdx = put(tr.prompt, 0, 0)
					seg-- // the continuation joins the prompt's segment
					heads = append(heads, append(promptIdx[len(promptIdx)-1:], put(c, p, 0)...))
					continue
				}
				heads = append(heads, append(promptIdx[len(promptIdx)-1:len(promptIdx):len(promptIdx)], put(c, p, promptSeg)...))
			}
		}
	}
	return b, heads
}

func flatten(xs [][]int32) []int32 {
	var out []int32
	for _, x := range xs {
		out = append(out, x...)
	}
	return out
}

func randTrees(r *rand.Rand, vocab int, prompt int, conts ...int) tree {
	t := tree{prompt: randTokens(r, prompt, vocab)}
	for _, c := range conts {
		t.conts = append(t.conts, randTokens(r, c, vocab))
	}
	return t
}

// headLossGrads runs Forward, Heads at idx, a weighted cross-entropy plus
// a value term, and Backward; it returns the logits, the loss and a copy
// of every gradient.
func headLossGrads(t *testing.T, m *Model, b Batch, idx, targets []int32) ([]float32, float64, []float32) {
	t.Helper()
	m.ZeroGrad()
	if err := m.Forward(b); err != nil {
		t.Fatal(err)
	}
	logits, values, err := m.Heads(idx)
	if err != nil {
		t.Fatal(err)
	}
	logits = append([]float32(nil), logits...)
	v := m.Config.Vocab
	dLogits := append([]float32(nil), logits...)
	LogSoftmaxRows(dLogits, v)
	dValues := make([]float32, len(idx))
	loss := 0.0
	for k := range idx {
		loss -= float64(dLogits[k*v+int(targets[k])])
		for j := range v {
			dLogits[k*v+j] = float32(math.Exp(float64(dLogits[k*v+j])))
		}
		dLogits[k*v+int(targets[k])]--
		loss += 0.15 * float64(values[k]*values[k])
		dValues[k] = 0.3 * values[k]
	}
	if err := m.Backward(idx, dLogits, dValues); err != nil {
		t.Fatal(err)
	}
	return logits, loss, append([]float32(nil), m.grad...)
}

// TestPrefixMatchesReference: with shared prefixes (short ones, and ones
// longer than an attention block), logits and values match the float64
// reference at every position, and the gradient along a random direction
// matches the reference loss's central difference.
func TestPrefixMatchesReference(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		rows func(r *rand.Rand, v int) [][]tree
		s    int
	}{
		{"short", Config{Vocab: 13, DModel: 8, Heads: 2, Layers: 2, FFN: 12, Ctx: 40}, func(r *rand.Rand, v int) [][]tree {
			return [][]tree{{randTrees(r, v, 7, 4, 3, 1)}, {randTrees(r, v, 3, 2), randTrees(r, v, 5, 6, 2)}}
		}, 24},
		{"longer than a block", Config{Vocab: 21, DModel: 16, Heads: 2, Layers: 1, FFN: 40, Ctx: 200}, func(r *rand.Rand, v int) [][]tree {
			return [][]tree{{randTrees(r, v, 70, 80, 5, 66)}}
		}, 230},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			m := newTestModel(t, cfg, 31)
			for i := range m.data { // keep activations moderate over long rows
				m.data[i] *= 0.7
			}
			r := rand.New(rand.NewPCG(32, 33))
			b, _ := packTrees(tc.s, true, tc.rows(r, cfg.Vocab)...)
			idx := realPositions(b)
			targets := randTokens(r, len(idx), cfg.Vocab)
			w, c := make([]float64, len(idx)), make([]float64, len(idx))
			for k := range idx {
				w[k], c[k] = 1, 0.3
			}
			ref := newRef(m)
			wantLogits, wantValues := ref.forward(b)
			u := randomDirection(r, m)
			want := directionalDerivative(ref, u, b, idx, targets, w, c)
			forEachKernel(t, func(t *testing.T) {
				logits, _, grads := headLossGrads(t, m, b, idx, targets)
				_, values, _ := m.Heads(idx)
				v := cfg.Vocab
				for k, at := range idx {
					if d := maxRelDiff(logits[k*v:(k+1)*v], wantLogits[at], 1); d > 1e-5 {
						t.Fatalf("position %d: logits differ from the reference by %.2g", at, d)
					}
					if d := math.Abs(float64(values[k]) - wantValues[at]); d > 1e-5*math.Max(1, math.Abs(wantValues[at])) {
						t.Fatalf("position %d: value %g, want %g", at, values[k], wantValues[at])
					}
				}
				got, scale := 0.0, 0.0
				at := 0
				for _, p := range m.Params() {
					for i := range p.Grad {
						g := float64(grads[at+i])
						got += g * u[p.Name][i]
						scale += math.Abs(g * u[p.Name][i])
					}
					at += p.Size()
				}
				if math.Abs(got-want) > 1e-5*scale {
					t.Errorf("directional derivative %.8g, finite differences %.8g (scale %.3g)", got, want, scale)
				}
			})
		})
	}
}

// TestPrefixEqualsUnshared: a shared prompt with its continuations gives
// the logits and values of the same samples packed one by one, each with
// its own copy of the prompt, and the loss's gradient of every weight:
// the prompt's gradient is the sum over its continuations.
func TestPrefixEqualsUnshared(t *testing.T) {
	cfg := Config{Vocab: 21, DModel: 16, Heads: 2, Layers: 2, FFN: 40, Ctx: 200}
	m := newTestModel(t, cfg, 34)
	for i := range m.data {
		m.data[i] *= 0.7
	}
	r := rand.New(rand.NewPCG(35, 36))
	rows := [][]tree{{randTrees(r, cfg.Vocab, 70, 9, 72, 1)}, {randTrees(r, cfg.Vocab, 4, 3), randTrees(r, cfg.Vocab, 20, 5, 8)}}
	shared, sharedHeads := packTrees(160, true, rows...)
	// Unshared: one (prompt, continuation) sample per row.
	var single [][]tree
	for _, row := range rows {
		for _, tr := range row {
			for _, c := range tr.conts {
				single = append(single, []tree{{prompt: tr.prompt, conts: [][]int32{c}}})
			}
		}
	}
	alone, aloneHeads := packTrees(160, false, single...)
	idxS, idxA := flatten(sharedHeads), flatten(aloneHeads)
	if len(idxS) != len(idxA) {
		t.Fatalf("%d shared head positions, %d unshared", len(idxS), len(idxA))
	}
	targets := randTokens(r, len(idxS), cfg.Vocab)
	forEachKernel(t, func(t *testing.T) {
		lS, lossS, gS := headLossGrads(t, m, shared, idxS, targets)
		lA, lossA, gA := headLossGrads(t, m, alone, idxA, targets)
		if d := maxRelDiff(lS, toF64(lA), 1); d > 1e-5 {
			t.Errorf("logits with a shared prefix differ from unshared ones by %.2g", d)
		}
		if math.Abs(lossS-lossA) > 1e-5*math.Abs(lossA) {
			t.Errorf("loss %v shared, %v unshared", lossS, lossA)
		}
		at := 0
		for _, p := range m.Params() {
			if d := maxRelDiff(gS[at:at+p.Size()], toF64(gA[at:at+p.Size()]), 1e-3); d > 1e-4 {
				t.Errorf("%s: gradient with a shared prefix differs from unshared by %.2g", p.Name, d)
			}
			at += p.Size()
		}
	})
}

func TestPrefixBatchErrors(t *testing.T) {
	m := newTestModel(t, tinyConfig(), 37)
	r := rand.New(rand.NewPCG(38, 39))
	// Row 0: prompt (segment 1, columns 0-4), continuations 2 (5-7) and 3
	// (8-9); row 1: prompt (1, 0-2), continuation 2 (3-6), padding.
	good, _ := packTrees(12, true, []tree{randTrees(r, 12, 5, 3, 2)}, []tree{randTrees(r, 12, 3, 4)})
	if err := m.Forward(good); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(b *Batch)
		err  string
	}{
		{"short prefix", func(b *Batch) { b.Prefix = b.Prefix[1:] }, "prefix ids"},
		{"unknown segment", func(b *Batch) { b.Prefix[5], b.Prefix[6], b.Prefix[7] = 9, 9, 9 }, "not an earlier segment"},
		{"itself", func(b *Batch) { b.Prefix[5], b.Prefix[6], b.Prefix[7] = 2, 2, 2 }, "not an earlier segment"},
		{"later segment", func(b *Batch) { b.Prefix[5], b.Prefix[6], b.Prefix[7] = 3, 3, 3; b.Prefix[8], b.Prefix[9] = 0, 0 }, "not an earlier segment"},
		{"mixed within a segment", func(b *Batch) { b.Prefix[6] = 0 }, "names prefixes"},
		{"nested", func(b *Batch) { b.Prefix[8], b.Prefix[9] = 2, 2 }, "has a prefix itself"},
		{"padding", func(b *Batch) { b.Prefix[23] = 1 }, "padding"},
		{"not wholly before", func(b *Batch) { b.Segments[9] = 1; b.Prefix[9] = 0 }, "not wholly before"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := good
			b.Segments = append([]int32(nil), good.Segments...)
			b.Prefix = append([]int32(nil), good.Prefix...)
			tc.edit(&b)
			if err := m.Forward(b); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("got %v, want an error containing %q", err, tc.err)
			}
		})
	}
}
