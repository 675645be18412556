package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// ppoConfig is a tiny model with room for PPO-like shapes: prompts up to
// 80 tokens, actions up to 40, rows of a prompt and its actions longer
// than the context.
func ppoConfig() Config {
	return Config{Vocab: 40, DModel: 32, Heads: 4, Layers: 1, Ctx: 128, PromptTokens: 80, ResponseTokens: 40}
}

// ppoMinibatch packs groups of a prompt and k actions the way train's
// ppoRun.pack does (one row per prompt, the actions after it with the
// prompt as their Prefix, the width the longest row rounded up to 32).
// Prompts are 40 to 80 tokens (compacted to their budget), actions 2 to
// 40.
func ppoMinibatch(r *rand.Rand, cfg Config, groups, k int) (Batch, []int32) {
	var rows [][]group
	width := 0
	for range groups {
		lens := make([]int, k)
		n := cfg.PromptTokens/2 + r.IntN(cfg.PromptTokens/2)
		w := n
		for i := range lens {
			lens[i] = 2 + r.IntN(cfg.ResponseTokens-2)
			w += lens[i]
		}
		rows = append(rows, []group{randGroup(r, cfg.Vocab, n, lens...)})
		width = max(width, w)
	}
	return packGroups((width+31)/32*32, true, rows...)
}

// criticBatch packs n prompts first-fit into rows of at most the context
// without prefixes, as train's packBatches does for the critic warm-up;
// the head positions are the prompts' last tokens.
func criticBatch(r *rand.Rand, cfg Config, n int) (Batch, []int32) {
	var rows [][][]int32
	var used []int
	for range n {
		p := randPrompt(r, cfg.PromptTokens/2+r.IntN(cfg.PromptTokens/2), cfg.Vocab)
		placed := false
		for i := range rows {
			if used[i]+len(p) <= cfg.Ctx {
				rows[i], used[i], placed = append(rows[i], p), used[i]+len(p), true
				break
			}
		}
		if !placed {
			rows, used = append(rows, [][]int32{p}), append(used, len(p))
		}
	}
	b := Batch{B: len(rows), S: min(cfg.Ctx, (slices.Max(used)+31)/32*32)}
	b.Tokens, b.Positions, b.Segments = make([]int32, b.B*b.S), make([]int32, b.B*b.S), make([]int32, b.B*b.S)
	var idx []int32
	for i, row := range rows {
		at := i * b.S
		for s, p := range row {
			for j, tok := range p {
				b.Tokens[at+j], b.Positions[at+j], b.Segments[at+j] = tok, int32(j), int32(s+1)
			}
			at += len(p)
			idx = append(idx, int32(at-1))
		}
	}
	return b, idx
}

// ppoCalls runs the engine calls of a PPO run with the shapes PPO
// varies: per update a generation (decoders of 8 rows with two prompts of
// 4 copies, and of the fewer rows an episode's live environments leave),
// two minibatches of 2 groups or 1 (reference logits, values, two epochs
// of train steps, one gradient), and a critic warm-up batch. It returns
// the distinct input shapes each graph was called with.
func ppoCalls(t *testing.T, e Engine, updates int) map[string]map[string]bool {
	t.Helper()
	cfg := e.Config()
	r := rand.New(rand.NewPCG(33, 34))
	shapes := map[string]map[string]bool{}
	note := func(graph string, format string, args ...any) {
		if shapes[graph] == nil {
			shapes[graph] = map[string]bool{}
		}
		shapes[graph][fmt.Sprintf(format, args...)] = true
	}
	loss := func(n int) LossFunc {
		targets, returns := randTargets(r, cfg, n)
		return testLoss(targets, returns, cfg.Vocab)
	}
	forward := func(b Batch, idx []int32) {
		if _, _, err := e.Logits(b, idx); err != nil {
			t.Fatal(err)
		}
		note("logits", "%dx%d k%d prefix %v", b.B, b.S, len(idx), b.Prefix != nil)
	}
	train := func(b Batch, idx []int32) {
		if _, _, err := e.TrainStep(b, idx, loss(len(idx)), 1e-3); err != nil {
			t.Fatal(err)
		}
		note("logits", "%dx%d k%d prefix %v", b.B, b.S, len(idx), b.Prefix != nil)
		note("train", "%dx%d k%d prefix %v", b.B, b.S, len(idx), b.Prefix != nil)
	}
	decode := func(rows int) {
		d, err := e.NewDecoder(rows)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		n := func() int { return cfg.PromptTokens/2 + r.IntN(cfg.PromptTokens/2) }
		a, b := randPrompt(r, n(), cfg.Vocab), randPrompt(r, n(), cfg.Vocab)
		prompts := make([][]int32, rows)
		for i := range prompts {
			prompts[i] = a
			if i >= rows/2 {
				prompts[i] = b
			}
		}
		if _, err := d.Prefill(prompts); err != nil {
			t.Fatal(err)
		}
		note("prefill", "rows %d prompt %d", rows, max(len(a), len(b)))
		for step := range 3 {
			toks := make([][]int32, rows)
			for i := range toks {
				if i != step { // a finished row
					toks[i] = []int32{int32(NumSpecial + r.IntN(cfg.Vocab-NumSpecial))}
				}
			}
			if _, err := d.Extend(toks); err != nil {
				t.Fatal(err)
			}
		}
		note("decode", "rows %d", rows)
	}
	for u := range updates {
		decode(8)       // gen_batch 8: 2 states x 4 actions
		decode(8 - u%8) // an episode's live environments
		for range 2 {
			// Minibatches of 2 groups (2 states), 1 when a state was drawn twice.
			b, idx := ppoMinibatch(r, cfg, 1+min(1, r.IntN(4)), 4)
			forward(b, idx)     // reference log-probabilities
			forward(b, idx[:4]) // values
			train(b, idx)       // epoch 1
			train(b, idx)       // epoch 2
			if _, _, err := e.Gradients(b, idx, loss(len(idx))); err != nil {
				t.Fatal(err)
			}
			note("logits", "%dx%d k%d prefix %v", b.B, b.S, len(idx), true)
			note("gradients", "%dx%d k%d prefix %v", b.B, b.S, len(idx), true)
		}
		b, idx := criticBatch(r, cfg, 16)
		train(b, idx)
	}
	return shapes
}

// compiledGraphs is the number of graphs e compiled (and ran), by graph.
func compiledGraphs(e Engine) map[string]int {
	out := map[string]int{}
	for name, gs := range e.(*gomlxEngine).graphs {
		out[name] = len(gs)
	}
	return out
}

// gomlxPair returns two GoMLX engines on the same weights: one that pads
// every shape to its bucket and one that runs them as given.
func gomlxPair(t testing.TB, cfg Config, seed uint64) (padded, exact *gomlxEngine) {
	t.Helper()
	w := testWeights(cfg, seed)
	var es [2]*gomlxEngine
	for i := range es {
		e, err := NewGoMLXEngine(cfg, nil, w)
		if err != nil {
			t.Fatal(err)
		}
		es[i] = e.(*gomlxEngine)
		es[i].SetOptim(OptimConfig{LR: 3e-3, Beta1: 0.9, Beta2: 0.95, WeightDecay: 0.01, ClipNorm: 1})
	}
	es[1].exact = true
	return es[0], es[1]
}

// TestGomlxPaddingChangesNothing: the GoMLX engine's padding of batches
// (rows, width, head positions) and decoders (rows) to buckets gives the
// logits, values, loss, gradients, training steps and decoded logits of
// the same engine running the shapes as given.
func TestGomlxPaddingChangesNothing(t *testing.T) {
	cfg := ppoConfig()
	padded, exact := gomlxPair(t, cfg, 5)
	r := rand.New(rand.NewPCG(7, 8))
	// Examples packed without prefixes in 3 rows of 44 (padded to 4 of
	// 64), heads at every real position (111, padded to 128).
	packed, packedIdx := packedRows(cfg, r, 44, [][]int{{20, 24}, {30}, {10, 12, 15}})
	shared, sharedIdx := ppoMinibatch(r, cfg, 3, 4)
	for _, tc := range []struct {
		name string
		b    Batch
		idx  []int32
	}{{"packed", packed, packedIdx}, {"shared prefix", shared, sharedIdx}} {
		t.Run(tc.name, func(t *testing.T) {
			b, idx := tc.b, tc.idx
			pb, pidx, err := padded.padBatch(b, idx)
			if err != nil {
				t.Fatal(err)
			}
			if pb.B == b.B || pb.S == b.S || len(pidx) == len(idx) {
				t.Fatalf("batch %dx%d with %d heads padded to %dx%d with %d: the test needs every size padded", b.B, b.S, len(idx), pb.B, pb.S, len(pidx))
			}
			targets, returns := randTargets(r, cfg, len(idx))
			loss := testLoss(targets, returns, cfg.Vocab)
			pl, pv, err := padded.Logits(b, idx)
			if err != nil {
				t.Fatal(err)
			}
			el, ev, err := exact.Logits(b, idx)
			if err != nil {
				t.Fatal(err)
			}
			if len(pl) != len(el) || len(pv) != len(ev) {
				t.Fatalf("padded: %d logits and %d values, exact %d and %d", len(pl), len(pv), len(el), len(ev))
			}
			if d := relErr(pl, el); d > 1e-5 {
				t.Errorf("logits differ: relative %.2g", d)
			}
			if d := relErr(pv, ev); d > 1e-5 {
				t.Errorf("values differ: relative %.2g", d)
			}
			plv, pg, err := padded.Gradients(b, idx, loss)
			if err != nil {
				t.Fatal(err)
			}
			elv, eg, err := exact.Gradients(b, idx, loss)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(plv-elv) > 1e-5*math.Abs(elv) {
				t.Errorf("loss %.7f padded, %.7f exact", plv, elv)
			}
			for i := range eg {
				if d := relErr(pg[i].F32, eg[i].F32); d > 1e-4 {
					t.Errorf("gradient of %s differs: relative %.2g", eg[i].Name, d)
				}
			}
			for step := range 3 {
				pl, pn, err := padded.TrainStep(b, idx, loss, 3e-3)
				if err != nil {
					t.Fatal(err)
				}
				el, en, err := exact.TrainStep(b, idx, loss, 3e-3)
				if err != nil {
					t.Fatal(err)
				}
				if math.Abs(pl-el) > 1e-4*math.Abs(el) || math.Abs(pn-en) > 1e-4*en {
					t.Errorf("step %d: loss %.6f, gradient norm %.6f padded; %.6f, %.6f exact", step, pl, pn, el, en)
				}
			}
			pw, _ := padded.Weights()
			ew, _ := exact.Weights()
			for i := range ew {
				if d := relErr(pw[i].F32, ew[i].F32); d > 1e-4 {
					t.Errorf("after 3 steps %s differs: relative %.2g", ew[i].Name, d)
				}
			}
		})
	}
	// Decoders of 3 and 5 rows (4 and 8 padded), on the weights not
	// trained above: repeated and distinct prompts, then one token per
	// row, several (jump-forward) and none.
	padded, exact = gomlxPair(t, cfg, 6)
	for _, rows := range []int{3, 5} {
		prompts := make([][]int32, rows)
		for i := range prompts {
			prompts[i] = randPrompt(r, 5+r.IntN(30), cfg.Vocab)
		}
		prompts[rows-1] = prompts[0]
		dp, _ := padded.NewDecoder(rows)
		de, _ := exact.NewDecoder(rows)
		if p := dp.(*gomlxDecoder).padded; p == rows {
			t.Fatalf("a decoder of %d rows runs %d: the test needs them padded", rows, p)
		}
		pl, err := dp.Prefill(prompts)
		if err != nil {
			t.Fatal(err)
		}
		el, err := de.Prefill(prompts)
		if err != nil {
			t.Fatal(err)
		}
		if d := relErr(pl, el); len(pl) != len(el) || d > 1e-5 {
			t.Errorf("%d rows: prefill logits differ: %d and %d, relative %.2g", rows, len(pl), len(el), d)
		}
		for step := range 3 {
			toks := make([][]int32, rows)
			for i := range toks {
				if i != step {
					for range 1 + (i+step)%3 {
						toks[i] = append(toks[i], int32(NumSpecial+r.IntN(cfg.Vocab-NumSpecial)))
					}
				}
			}
			pl, err := dp.Extend(toks)
			if err != nil {
				t.Fatal(err)
			}
			el, err := de.Extend(toks)
			if err != nil {
				t.Fatal(err)
			}
			for i, ts := range toks {
				v := cfg.Vocab
				if d := relErr(pl[i*v:(i+1)*v], el[i*v:(i+1)*v]); len(ts) > 0 && d > 1e-5 {
					t.Errorf("%d rows, extend %d, row %d: logits differ: relative %.2g", rows, step, i, d)
				}
			}
		}
		dp.Close()
		de.Close()
	}
}

// TestGomlxCompiledShapesBounded: over the shapes of a PPO run of 12
// updates (ppoCalls), the GoMLX engine compiles a handful of graphs each
// (the buckets the shapes fall in: 1 or 2 rows of widths 128 and 256 with
// 64 to 256 heads, the critic's batch; decoders of 1 to 8 rows in 4
// buckets), where running the shapes as given compiles one per distinct
// shape, and more with every update.
func TestGomlxCompiledShapesBounded(t *testing.T) {
	cfg := ppoConfig()
	padded, exact := gomlxPair(t, cfg, 1)
	shapes := ppoCalls(t, padded, 12)
	ppoCalls(t, exact, 12)
	got, ref := compiledGraphs(padded), compiledGraphs(exact)
	bound := map[string]int{"logits": 8, "train": 6, "gradients": 4, "prefill": 6, "decode": 4}
	for _, name := range []string{"logits", "train", "gradients", "prefill", "decode"} {
		t.Logf("%s: %d distinct input shapes; graphs compiled: %d padded, %d as given", name, len(shapes[name]), got[name], ref[name])
		if ref[name] != len(shapes[name]) {
			t.Errorf("%s: %d graphs compiled for %d distinct input shapes as given", name, ref[name], len(shapes[name]))
		}
		if got[name] > bound[name] {
			t.Errorf("%s: %d graphs compiled, want at most %d", name, got[name], bound[name])
		}
	}
}

// TestGomlxRefusesBadBatches: Logits, TrainStep and Gradients check the
// batch before padding it, padded or exact, and say what is wrong.
func TestGomlxRefusesBadBatches(t *testing.T) {
	cfg := ppoConfig()
	padded, exact := gomlxPair(t, cfg, 3)
	r := rand.New(rand.NewPCG(5, 6))
	b, idx := packedRows(cfg, r, 20, [][]int{{7, 9}, {12}})
	b.Tokens[3] = int32(cfg.Vocab) // past the vocabulary
	want := b.Check(cfg)
	if want == nil {
		t.Fatal("the test's batch passes Batch.Check")
	}
	targets, returns := randTargets(r, cfg, len(idx))
	loss := testLoss(targets, returns, cfg.Vocab)
	for name, e := range map[string]*gomlxEngine{"padded": padded, "exact": exact} {
		_, _, err := e.Logits(b, idx)
		if err == nil || err.Error() != want.Error() {
			t.Errorf("%s Logits: %v, want %v", name, err, want)
		}
		_, _, err = e.TrainStep(b, idx, loss, 1e-3)
		if err == nil || err.Error() != want.Error() {
			t.Errorf("%s TrainStep: %v, want %v", name, err, want)
		}
		_, _, err = e.Gradients(b, idx, loss)
		if err == nil || err.Error() != want.Error() {
			t.Errorf("%s Gradients: %v, want %v", name, err, want)
		}
	}
}
