package policy

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/internal/store"
)

// tinyConfig is small enough for gradient checks and every engine.
func tinyConfig() Config {
	return Config{Vocab: 40, DModel: 32, Heads: 4, Layers: 2, Ctx: 64, PromptTokens: 40, ResponseTokens: 20}
}

// testWeights is InitWeights(cfg, seed) plus noise larger than the
// default init, so that attention and LayerNorm are far from their
// trivial regimes and every gradient is sizeable.
func testWeights(cfg Config, seed uint64) []Tensor {
	w := InitWeights(cfg, seed)
	r := rand.New(rand.NewPCG(seed, 9))
	for _, x := range w {
		for i := range x.F32 {
			x.F32[i] += float32(r.NormFloat64() * 0.1)
		}
	}
	return w
}

// engines returns both engines on the same weights.
func engines(t testing.TB, cfg Config, seed uint64) map[string]Engine {
	t.Helper()
	w := testWeights(cfg, seed)
	out := map[string]Engine{}
	for _, name := range []string{EngineNative, EngineGoMLX} {
		e, err := NewEngine(name, cfg, w)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = e
	}
	return out
}

// packedBatch holds two examples packed in row 0 (the second starting at
// position 0 again) and one example with padding in row 1.
func packedBatch(cfg Config, r *rand.Rand) (Batch, []int32) {
	return packedRows(cfg, r, 12, [][]int{{5, 7}, {9}})
}

// packedRows packs examples of random tokens, rows[i] the lengths of row
// i's examples (each its own segment, positions from 0), into rows of
// width s; the heads are at every real position.
func packedRows(cfg Config, r *rand.Rand, s int, rows [][]int) (Batch, []int32) {
	n := len(rows) * s
	b := Batch{B: len(rows), S: s, Tokens: make([]int32, n), Positions: make([]int32, n), Segments: make([]int32, n)}
	var idx []int32
	for row, lens := range rows {
		at := row * s
		for seg, n := range lens {
			for j := range n {
				b.Tokens[at] = int32(NumSpecial + r.IntN(cfg.Vocab-NumSpecial))
				b.Positions[at], b.Segments[at] = int32(j), int32(seg+1)
				idx = append(idx, int32(at))
				at++
			}
		}
	}
	return b, idx
}

// randTargets draws n target tokens and returns (a value head's targets)
// for testLoss, each target then its return.
func randTargets(r *rand.Rand, cfg Config, n int) ([]int32, []float32) {
	targets, returns := make([]int32, n), make([]float32, n)
	for i := range targets {
		targets[i] = int32(NumSpecial + r.IntN(cfg.Vocab-NumSpecial))
		returns[i] = float32(r.NormFloat64())
	}
	return targets, returns
}

// testLoss is cross-entropy on fixed targets plus a squared value error:
// it exercises both heads.
func testLoss(targets []int32, returns []float32, vocab int) LossFunc {
	return func(logits, values, dLogits, dValues []float32) float64 {
		loss := 0.0
		k := len(targets)
		for i, t := range targets {
			row := logits[i*vocab : (i+1)*vocab]
			lp := LogProbs(row, nil, 1)
			loss -= lp[t] / float64(k)
			for j := range row {
				dLogits[i*vocab+j] = float32(math.Exp(lp[j]) / float64(k))
			}
			dLogits[i*vocab+int(t)] -= float32(1 / float64(k))
			d := float64(values[i] - returns[i])
			loss += 0.5 * d * d / float64(k)
			dValues[i] = float32(d / float64(k))
		}
		return loss
	}
}

func relErr(got, want []float32) float64 {
	scale, worst := 0.0, 0.0
	for _, w := range want {
		scale = max(scale, math.Abs(float64(w)))
	}
	for i := range got {
		worst = max(worst, math.Abs(float64(got[i]-want[i])))
	}
	return worst / max(scale, 1e-12)
}

// TestEnginesAgree: on the same weights and batch, the native engine and
// GoMLX give the same logits, values, loss and gradient of every weight,
// on packed examples and on actions sharing a prompt (Batch.Prefix).
func TestEnginesAgree(t *testing.T) {
	cfg := tinyConfig()
	es := engines(t, cfg, 1)
	r := rand.New(rand.NewPCG(2, 3))
	packed, packedIdx := packedBatch(cfg, r)
	shared, _, sharedIdx, _, _, _ := prefixBatches(cfg, 5)
	for _, tc := range []struct {
		name string
		b    Batch
		idx  []int32
	}{{"packed", packed, packedIdx}, {"shared prefix", shared, sharedIdx}} {
		t.Run(tc.name, func(t *testing.T) {
			b, idx := tc.b, tc.idx
			targets, returns := randTargets(r, cfg, len(idx))
			nl, nv, err := es[EngineNative].Logits(b, idx)
			if err != nil {
				t.Fatal(err)
			}
			gl, gv, err := es[EngineGoMLX].Logits(b, idx)
			if err != nil {
				t.Fatal(err)
			}
			if e := relErr(nl, gl); e > 1e-4 {
				t.Errorf("logits differ: relative error %.2g", e)
			}
			if e := relErr(nv, gv); e > 1e-4 {
				t.Errorf("values differ: relative error %.2g", e)
			}
			loss := testLoss(targets, returns, cfg.Vocab)
			nLoss, nGrads, err := es[EngineNative].Gradients(b, idx, loss)
			if err != nil {
				t.Fatal(err)
			}
			gLoss, gGrads, err := es[EngineGoMLX].Gradients(b, idx, loss)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(nLoss-gLoss) > 1e-4*math.Abs(gLoss) {
				t.Errorf("loss: native %v, gomlx %v", nLoss, gLoss)
			}
			for i := range nGrads {
				if nGrads[i].Name != gGrads[i].Name {
					t.Fatalf("gradient %d: %s vs %s", i, nGrads[i].Name, gGrads[i].Name)
				}
				if e := relErr(nGrads[i].F32, gGrads[i].F32); e > 1e-4 {
					t.Errorf("gradient of %s differs: relative error %.2g", nGrads[i].Name, e)
				}
			}
		})
	}
}

// TestPositionInvariance: with rotary positions a response's
// log-probabilities do not change when its example is shifted (positions
// all +7) or left-padded within its row.
func TestPositionInvariance(t *testing.T) {
	cfg := tinyConfig()
	r := rand.New(rand.NewPCG(4, 5))
	toks := make([]int32, 10)
	for i := range toks {
		toks[i] = int32(NumSpecial + r.IntN(cfg.Vocab-NumSpecial))
	}
	for name, e := range engines(t, cfg, 3) {
		base := Batch{B: 1, S: 10, Tokens: toks, Positions: make([]int32, 10), Segments: make([]int32, 10)}
		shifted := Batch{B: 1, S: 10, Tokens: toks, Positions: make([]int32, 10), Segments: make([]int32, 10)}
		padded := Batch{B: 1, S: 16, Tokens: make([]int32, 16), Positions: make([]int32, 16), Segments: make([]int32, 16)}
		var idx, padIdx []int32
		for i := range 10 {
			base.Positions[i], base.Segments[i] = int32(i), 1
			shifted.Positions[i], shifted.Segments[i] = int32(i+7), 1
			padded.Tokens[6+i], padded.Positions[6+i], padded.Segments[6+i] = toks[i], int32(i), 1
			idx, padIdx = append(idx, int32(i)), append(padIdx, int32(6+i))
		}
		want, _, err := e.Logits(base, idx)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := e.Logits(shifted, idx)
		if err != nil {
			t.Fatal(err)
		}
		if d := relErr(got, want); d > 1e-4 {
			t.Errorf("%s: shifted positions change the logits (relative %.2g)", name, d)
		}
		got, _, err = e.Logits(padded, padIdx)
		if err != nil {
			t.Fatal(err)
		}
		if d := relErr(got, want); d > 1e-5 {
			t.Errorf("%s: left padding changes the logits (relative %.2g)", name, d)
		}
	}
}

// TestCachedDecodeMatchesReforward: greedy generation through the KV
// cache (prefill, one-token extends, and multi-token extends as
// jump-forward uses) equals re-running the whole sequence per token.
func TestCachedDecodeMatchesReforward(t *testing.T) {
	cfg := tinyConfig()
	prompts := [][]int32{{BosID, 5, 6, 7}, {BosID, 9, 4, 4, 4, 5, 6, 11, 10, 8}, {BosID}}
	for name, e := range engines(t, cfg, 7) {
		gen := Generator{Engine: e}
		got, err := gen.Generate(prompts, GenerateOptions{MaxNewTokens: 12})
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range prompts {
			want, err := GreedyNoCache(e, p, 12)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got[i].Tokens, want) {
				t.Errorf("%s prompt %d: cached %v, re-forward %v", name, i, got[i].Tokens, want)
			}
		}
		// Several tokens per extend give the logits of one at a time.
		d1, _ := e.NewDecoder(2)
		d2, _ := e.NewDecoder(2)
		if _, err := d1.Prefill(prompts[:2]); err != nil {
			t.Fatal(err)
		}
		d2.Prefill(prompts[:2])
		many, err := d1.Extend([][]int32{{12, 13, 14}, nil})
		if err != nil {
			t.Fatal(err)
		}
		many = slices.Clone(many[:cfg.Vocab])
		var one []float32
		for _, tok := range []int32{12, 13, 14} {
			if one, err = d2.Extend([][]int32{{tok}, nil}); err != nil {
				t.Fatal(err)
			}
		}
		if d := relErr(many, one[:cfg.Vocab]); d > 1e-4 {
			t.Errorf("%s: a 3-token extend differs from 3 one-token extends (relative %.2g)", name, d)
		}
	}
}

// TestTrainingCurvesAgree: a short training run from the same weights
// follows the same loss curve on both engines.
func TestTrainingCurvesAgree(t *testing.T) {
	cfg := tinyConfig()
	es := engines(t, cfg, 11)
	r := rand.New(rand.NewPCG(6, 7))
	b, idx := packedBatch(cfg, r)
	targets := make([]int32, len(idx))
	for i := range targets {
		targets[i] = int32(NumSpecial + r.IntN(cfg.Vocab-NumSpecial))
	}
	loss := testLoss(targets, make([]float32, len(idx)), cfg.Vocab)
	opt := OptimConfig{LR: 3e-3, Beta1: 0.9, Beta2: 0.95, WeightDecay: 0.01, ClipNorm: 1}
	curves := map[string][]float64{}
	for name, e := range es {
		e.SetOptim(opt)
		for range 12 {
			l, _, err := e.TrainStep(b, idx, loss, opt.LR)
			if err != nil {
				t.Fatal(err)
			}
			curves[name] = append(curves[name], l)
		}
	}
	n, g := curves[EngineNative], curves[EngineGoMLX]
	for i := range n {
		if math.Abs(n[i]-g[i]) > 2e-3*math.Abs(g[i]) {
			t.Errorf("step %d: native loss %.5f, gomlx %.5f", i, n[i], g[i])
		}
	}
	if n[len(n)-1] > 0.7*n[0] {
		t.Errorf("the loss did not fall: %v", n)
	}
}

// TestCheckpointAcrossEngines: weights saved by one engine load into the
// other and give the same logits; optimiser state is restored only by the
// engine that wrote it.
func TestCheckpointAcrossEngines(t *testing.T) {
	ctx := context.Background()
	st := store.NewLocal(t.TempDir())
	cfg := tinyConfig()
	es := engines(t, cfg, 5)
	r := rand.New(rand.NewPCG(8, 9))
	b, idx := packedBatch(cfg, r)
	targets := make([]int32, len(idx))
	loss := testLoss(targets, make([]float32, len(idx)), cfg.Vocab)
	es[EngineNative].SetOptim(OptimConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, ClipNorm: 1})
	if _, _, err := es[EngineNative].TrainStep(b, idx, loss, 1e-3); err != nil {
		t.Fatal(err)
	}
	if err := SaveCheckpoint(ctx, st, "ck", 1, es[EngineNative], Checkpoint{Config: map[string]string{"k": "v"}, Vocab: NewVocab(nil), State: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	sub, _ := LatestCheckpoint(ctx, st, "ck")
	if _, err := LoadCheckpoint(ctx, st, sub, nil, nil); err == nil {
		t.Fatal("a checkpoint whose vocab.json disagrees with model.json must not load")
	}
	v := NewVocab(seq(NumSpecial, tinyConfig().Vocab))
	if err := SaveCheckpoint(ctx, st, "ck", 2, es[EngineNative], Checkpoint{Config: map[string]string{"k": "v"}, Vocab: v, State: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	sub, _ = LatestCheckpoint(ctx, st, "ck")
	ck, err := LoadCheckpoint(ctx, st, sub, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, _, _ := es[EngineNative].Logits(b, idx)
	for _, name := range []string{EngineNative, EngineGoMLX} {
		e, resumed, err := ck.Engine(nil, name, true)
		if err != nil {
			t.Fatal(err)
		}
		if resumed != (name == EngineNative) {
			t.Errorf("%s: optimiser state resumed %v", name, resumed)
		}
		got, _, _ := e.Logits(b, idx)
		if d := relErr(got, want); d > 1e-4 {
			t.Errorf("%s: logits after loading differ (relative %.2g)", name, d)
		}
	}
}

// seq returns the ints in [lo, hi) minus NumSpecial, as tokenizer ids for
// a vocabulary of hi model ids.
func seq(lo, hi int) []int {
	var out []int
	for i := lo; i < hi; i++ {
		out = append(out, i-NumSpecial)
	}
	return out
}

// TestDetachValueKeepsTheTrunk: with DetachValue a value-only loss moves
// the value head alone; without it, the trunk too. Both engines, each
// switched on, off and on again (SetOptim must rebuild what it changes).
func TestDetachValueKeepsTheTrunk(t *testing.T) {
	cfg := tinyConfig()
	r := rand.New(rand.NewPCG(21, 1))
	b, idx := packedBatch(cfg, r)
	valueOnly := func(_, values, _, dValues []float32) float64 {
		l := 0.0
		for i, v := range values {
			l += 0.5 * float64(v-1) * float64(v-1)
			dValues[i] = v - 1
		}
		return l
	}
	for name, e := range engines(t, cfg, 13) {
		for _, detach := range []bool{true, false, true} {
			e.SetOptim(OptimConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, DetachValue: detach})
			_, grads, err := e.Gradients(b, idx, valueOnly)
			if err != nil {
				t.Fatal(err)
			}
			var head, trunk float64
			for _, g := range grads {
				sq := 0.0
				for _, x := range g.F32 {
					sq += float64(x) * float64(x)
				}
				if strings.HasPrefix(g.Name, "/value_head/") {
					head += sq
				} else {
					trunk += sq
				}
			}
			if head == 0 {
				t.Errorf("%s detach=%v: the value head has no gradient", name, detach)
			}
			if detach && trunk != 0 {
				t.Errorf("%s: detached value loss reached the trunk (|g|^2 %g)", name, trunk)
			}
			if !detach && trunk == 0 {
				t.Errorf("%s: attached value loss left the trunk without gradient", name)
			}
		}
		e.Close()
	}
}
