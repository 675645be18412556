package policy

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// group is one shared prompt and the actions sampled from it.
type group struct {
	prompt  []int32
	actions [][]int32
}

// packGroups lays out each row's groups as [prompt][action 1][action
// 2]...: the prompt one segment, each action its own segment with the
// prompt as its Prefix and positions from the prompt's length on. With
// shared false each (prompt, action) is instead packed alone, one per
// row, the prompt copied. It returns, per action in order, the flat
// positions whose logits score it: the prompt's last token, then each
// action token.
func packGroups(s int, shared bool, rows ...[]group) (Batch, []int32) {
	if !shared {
		var single [][]group
		for _, row := range rows {
			for _, g := range row {
				for _, a := range g.actions {
					single = append(single, []group{{g.prompt, [][]int32{a}}})
				}
			}
		}
		rows = single
	}
	b := Batch{B: len(rows), S: s}
	n := b.B * s
	b.Tokens, b.Positions, b.Segments = make([]int32, n), make([]int32, n), make([]int32, n)
	if shared {
		b.Prefix = make([]int32, n)
	}
	var idx []int32
	for r, groups := range rows {
		at, seg := r*s, int32(0)
		put := func(toks []int32, pos0, prefix int32) {
			if at+len(toks) > (r+1)*s {
				panic("packGroups: row overflow")
			}
			for j, tok := range toks {
				b.Tokens[at], b.Positions[at], b.Segments[at] = tok, pos0+int32(j), seg
				if shared {
					b.Prefix[at] = prefix
				}
				at++
			}
		}
		for _, g := range groups {
			p := int32(len(g.prompt))
			seg++
			put(g.prompt, 0, 0)
			last, promptSeg := int32(at-1), seg
			for _, a := range g.actions {
				if shared {
					seg++
					put(a, p, promptSeg)
				} else {
					put(a, p, 0)
				}
				idx = append(idx, last)
				for k := range a {
					idx = append(idx, int32(at-len(a)+k))
				}
			}
		}
	}
	return b, idx
}

func randGroup(r *rand.Rand, vocab, prompt int, actions ...int) group {
	g := group{prompt: randPrompt(r, prompt, vocab)}
	for _, n := range actions {
		a := make([]int32, n)
		for i := range a {
			a[i] = int32(NumSpecial + r.IntN(vocab-NumSpecial))
		}
		g.actions = append(g.actions, a)
	}
	return g
}

// prefixBatches returns the same samples packed with shared prompts and
// unshared, with the head positions (one list, in the same order, for
// both) and targets and returns for a loss over them.
func prefixBatches(cfg Config, seed uint64) (shared, alone Batch, idxS, idxA, targets []int32, returns []float32) {
	r := rand.New(rand.NewPCG(seed, 41))
	rows := [][]group{
		{randGroup(r, cfg.Vocab, 14, 5, 3, 6)},
		{randGroup(r, cfg.Vocab, 6, 4), randGroup(r, cfg.Vocab, 9, 2, 7)},
	}
	shared, idxS = packGroups(34, true, rows...)
	alone, idxA = packGroups(22, false, rows...)
	targets, returns = randTargets(r, cfg, len(idxS))
	return shared, alone, idxS, idxA, targets, returns
}

// TestSharedPrefixMatchesUnshared: on each engine, actions packed after
// one shared copy of their prompt (Batch.Prefix) get the logits and
// values of the same samples packed one by one with their own copy, the
// same loss, and the same gradient of every weight (the prompt's is the
// sum over its actions).
func TestSharedPrefixMatchesUnshared(t *testing.T) {
	cfg := tinyConfig()
	shared, alone, idxS, idxA, targets, returns := prefixBatches(cfg, 1)
	if len(idxS) != len(idxA) {
		t.Fatalf("%d shared head positions, %d unshared", len(idxS), len(idxA))
	}
	loss := testLoss(targets, returns, cfg.Vocab)
	for name, e := range engines(t, cfg, 19) {
		ls, vs, err := e.Logits(shared, idxS)
		if err != nil {
			t.Fatal(err)
		}
		la, va, err := e.Logits(alone, idxA)
		if err != nil {
			t.Fatal(err)
		}
		if d := relErr(ls, la); d > 1e-5 {
			t.Errorf("%s: logits with a shared prefix differ from unshared ones (relative %.2g)", name, d)
		}
		if d := relErr(vs, va); d > 1e-5 {
			t.Errorf("%s: values with a shared prefix differ from unshared ones (relative %.2g)", name, d)
		}
		lossS, gs, err := e.Gradients(shared, idxS, loss)
		if err != nil {
			t.Fatal(err)
		}
		lossA, ga, err := e.Gradients(alone, idxA, loss)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(lossS-lossA) > 1e-5*math.Abs(lossA) {
			t.Errorf("%s: loss %v shared, %v unshared", name, lossS, lossA)
		}
		for i := range gs {
			if d := relErr(gs[i].F32, ga[i].F32); d > 1e-4 {
				t.Errorf("%s: gradient of %s with a shared prefix differs from unshared (relative %.2g)", name, gs[i].Name, d)
			}
		}
	}
}

func TestBatchCheckPrefix(t *testing.T) {
	cfg := tinyConfig()
	r := rand.New(rand.NewPCG(3, 4))
	// Row 0: prompt (segment 1, columns 0-4), actions 2 (5-7) and 3 (8-9),
	// padding; row 1: prompt (1, 0-2), action 2 (3-6), padding.
	good, _ := packGroups(12, true, []group{randGroup(r, cfg.Vocab, 5, 3, 2)}, []group{randGroup(r, cfg.Vocab, 3, 4)})
	if err := good.Check(cfg); err != nil {
		t.Fatalf("a good batch: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(b *Batch)
		err  string
	}{
		{"length", func(b *Batch) { b.Prefix = b.Prefix[:5] }, "prefix ids"},
		{"negative", func(b *Batch) { b.Prefix[5] = -1 }, "negative"},
		{"padding", func(b *Batch) { b.Prefix[11] = 1 }, "padding names prefix 1"},
		{"itself", func(b *Batch) { b.Prefix[5] = 2 }, "names itself"},
		{"two prefixes in a segment", func(b *Batch) { b.Prefix[6] = 0 }, "segment 2 names prefix 1 at column 5 and 0 at column 6"},
		{"not in the row", func(b *Batch) { b.Prefix[15], b.Prefix[16], b.Prefix[17], b.Prefix[18] = 3, 3, 3, 3 }, "prefix 3, which is not a segment of the row"},
		{"nested", func(b *Batch) { b.Prefix[8], b.Prefix[9] = 2, 2 }, "has prefix 1 itself"},
		{"after", func(b *Batch) { b.Prefix[5], b.Prefix[6], b.Prefix[7] = 3, 3, 3; b.Prefix[8], b.Prefix[9] = 0, 0 }, "not wholly before segment 2"},
		{"interleaved", func(b *Batch) { b.Segments[6], b.Prefix[6] = 1, 0 }, "prefix 1 (columns 0-6) is not wholly before segment 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := good
			b.Segments = append([]int32(nil), good.Segments...)
			b.Prefix = append([]int32(nil), good.Prefix...)
			tc.edit(&b)
			err := b.Check(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("got %v, want an error containing %q", err, tc.err)
			}
		})
	}
}

// TestSharedPrefixTrainStep: on each engine, training steps on the
// shared packing follow the unshared packing's loss curve (each loss
// after the first is that of the weights the previous steps made).
func TestSharedPrefixTrainStep(t *testing.T) {
	cfg := tinyConfig()
	shared, alone, idxS, idxA, targets, returns := prefixBatches(cfg, 2)
	loss := testLoss(targets, returns, cfg.Vocab)
	opt := OptimConfig{LR: 3e-3, Beta1: 0.9, Beta2: 0.95, WeightDecay: 0.01, ClipNorm: 1}
	a, b := engines(t, cfg, 23), engines(t, cfg, 23)
	for _, name := range []string{EngineNative, EngineGoMLX} {
		es, ea := a[name], b[name]
		es.SetOptim(opt)
		ea.SetOptim(opt)
		var curve []float64
		for step := range 5 {
			ls, _, err := es.TrainStep(shared, idxS, loss, opt.LR)
			if err != nil {
				t.Fatal(err)
			}
			la, _, err := ea.TrainStep(alone, idxA, loss, opt.LR)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(ls-la) > 1e-4*math.Abs(la) {
				t.Errorf("%s step %d: loss %.6f shared, %.6f unshared", name, step, ls, la)
			}
			curve = append(curve, ls)
		}
		if curve[len(curve)-1] >= curve[0] {
			t.Errorf("%s: the loss did not fall: %v", name, curve)
		}
	}
}
