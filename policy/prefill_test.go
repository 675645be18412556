package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
)

// separate turns a decoder's prompt sharing off: every row is prefilled
// as its own prompt, the behaviour the shared prefill must reproduce.
func separate(t testing.TB, d Decoder) {
	t.Helper()
	switch d := d.(type) {
	case *nativeDecoder:
		d.separate = true
	case *gomlxDecoder:
		d.separate = true
	default:
		t.Fatalf("decoder %T has no separate mode", d)
	}
}

// separateEngine is an engine whose decoders never share prompts.
type separateEngine struct {
	Engine
	t testing.TB
}

func (s separateEngine) NewDecoder(rows int) (Decoder, error) {
	d, err := s.Engine.NewDecoder(rows)
	if err == nil {
		separate(s.t, d)
	}
	return d, err
}

func randPrompt(r *rand.Rand, n, vocab int) []int32 {
	p := []int32{BosID}
	for len(p) < n {
		p = append(p, int32(NumSpecial+r.IntN(vocab-NumSpecial)))
	}
	return p
}

// TestPrefillSharesPrompts: prefilling repeated prompts (each distinct
// prompt computed once, the repeats sharing its cache row) gives the same
// logits as prefilling every row on its own: bit for bit at the prompts,
// and after extends that differ between the copies of a prompt (one
// token, several, none) within float rounding (the native engine then
// attends to a shared prompt in one product for all its rows, which sums
// in another order than a row's own product).
func TestPrefillSharesPrompts(t *testing.T) {
	cfg := tinyConfig()
	r := rand.New(rand.NewPCG(21, 22))
	a, b := randPrompt(r, 9, cfg.Vocab), randPrompt(r, 14, cfg.Vocab)
	prompts := [][]int32{a, a, b, a, b, {BosID}, slices.Clone(a)}
	tok := func() int32 { return int32(NumSpecial + r.IntN(cfg.Vocab-NumSpecial)) }
	var steps [][][]int32
	for s := range 3 {
		step := make([][]int32, len(prompts))
		for i := range step {
			switch {
			case s == 1 && i%3 == 0:
				step[i] = []int32{tok(), tok(), tok()}
			case s == 2 && i == 1:
				// row 1 rests this step
			default:
				step[i] = []int32{tok()}
			}
		}
		steps = append(steps, step)
	}
	v := cfg.Vocab
	for name, e := range engines(t, cfg, 13) {
		shared, err := e.NewDecoder(len(prompts))
		if err != nil {
			t.Fatal(err)
		}
		alone, _ := e.NewDecoder(len(prompts))
		separate(t, alone)
		got, err := shared.Prefill(prompts)
		if err != nil {
			t.Fatal(err)
		}
		got = slices.Clone(got)
		want, err := alone.Prefill(prompts)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: shared prefill logits differ from separate ones (relative %.2g)", name, relErr(got, want))
		}
		for s, step := range steps {
			got, err := shared.Extend(step)
			if err != nil {
				t.Fatal(err)
			}
			got = slices.Clone(got)
			want, err := alone.Extend(step)
			if err != nil {
				t.Fatal(err)
			}
			for i := range step {
				if len(step[i]) == 0 {
					continue
				}
				if g, w := got[i*v:(i+1)*v], want[i*v:(i+1)*v]; relErr(g, w) > 1e-5 {
					t.Errorf("%s: extend %d, row %d: logits after a shared prefill differ by %.2g (relative)", name, s, i, relErr(g, w))
				}
			}
		}
		shared.Close()
		alone.Close()
	}
}

// TestGenerateSharedPrompts: sampling K responses per prompt gives the
// same samples with the shared prefill as with every row prefilled on
// its own, and the copies of a prompt still draw different responses.
func TestGenerateSharedPrompts(t *testing.T) {
	cfg := tinyConfig()
	r := rand.New(rand.NewPCG(23, 24))
	a, b := randPrompt(r, 11, cfg.Vocab), randPrompt(r, 6, cfg.Vocab)
	prompts := [][]int32{a, a, a, a, b, b, b, b}
	opts := GenerateOptions{Temperature: 1, MaxNewTokens: 10, Seed: 5}
	for name, e := range engines(t, cfg, 17) {
		got, err := Generator{Engine: e}.Generate(prompts, opts)
		if err != nil {
			t.Fatal(err)
		}
		want, err := Generator{Engine: separateEngine{e, t}}.Generate(prompts, opts)
		if err != nil {
			t.Fatal(err)
		}
		differ := false
		for i := range prompts {
			// The same tokens; log-probabilities equal to rounding (XLA's
			// pure-Go kernels may order a reduction differently for a
			// gathered row: 1 ulp seen without GOEXPERIMENT=simd).
			if !slices.Equal(got[i].Tokens, want[i].Tokens) || !closeF32(got[i].LogProbs, want[i].LogProbs, 1e-5) {
				t.Errorf("%s row %d: shared prefill sampled %v %v, separate %v %v", name, i, got[i].Tokens, got[i].LogProbs, want[i].Tokens, want[i].LogProbs)
			}
			if i > 0 && !slices.Equal(got[i].Tokens, got[0].Tokens) {
				differ = true
			}
		}
		if !differ {
			t.Errorf("%s: every copy of the prompt drew the same response %v", name, got[0].Tokens)
		}
	}
}

// closeF32 reports whether a and b have the same length and differ by at
// most tol everywhere.
func closeF32(a, b []float32, tol float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > tol {
			return false
		}
	}
	return true
}

// TestNativeDecoderReuse: a closed native decoder's cache is handed to the
// next NewDecoder of at most as many rows (reshaped), and what it
// generates then equals a fresh engine's samples bit for bit: nothing of
// the earlier call (longer prompts, more rows) leaks into the next, and
// the weights it packs at prefill are the engine's current ones.
func TestNativeDecoderReuse(t *testing.T) {
	cfg := tinyConfig()
	r := rand.New(rand.NewPCG(31, 32))
	long, short := randPrompt(r, 40, cfg.Vocab), randPrompt(r, 5, cfg.Vocab)
	other := randPrompt(r, 9, cfg.Vocab)
	opts := GenerateOptions{Temperature: 1, MaxNewTokens: 12, Seed: 3}
	fresh := func(w []Tensor) Engine {
		e, err := NewEngine(EngineNative, cfg, w)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	gen := func(e Engine, prompts [][]int32) []Sample {
		t.Helper()
		out, err := Generator{Engine: e}.Generate(prompts, opts)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	same := func(what string, got, want []Sample) {
		t.Helper()
		for i := range want {
			if !slices.Equal(got[i].Tokens, want[i].Tokens) || !slices.Equal(got[i].LogProbs, want[i].LogProbs) {
				t.Errorf("%s row %d: reused decoder sampled %v %v, a fresh engine %v %v", what, i, got[i].Tokens, got[i].LogProbs, want[i].Tokens, want[i].LogProbs)
			}
		}
	}
	w := InitWeights(cfg, 9)
	e := fresh(w)
	ne := e.(*nativeEngine)
	rows12 := [][]int32{long, long, long, long, long, long, long, long, long, long, long, long}
	gen(e, rows12)
	if len(ne.spare) != 1 {
		t.Fatalf("%d spare decoders after one closed, want 1", len(ne.spare))
	}
	d0 := ne.spare[0]
	// Generate told the decoder its 12 new tokens: the prompt's row holds
	// the prompt and 12 slots, the 11 rows sharing it 12 slots each.
	slot := int64(2 * 4 * cfg.Layers * cfg.DModel) // a key and a value in every layer (tinyConfig: a key/value head per head)
	if got, want := d0.cache.Bytes(), slot*int64(len(long)+12+11*12); got != want {
		t.Errorf("12 rows sharing a %d-token prompt hold %d bytes of keys and values, want %d", len(long), got, want)
	}
	rows3 := [][]int32{other, short, other}
	same("3 rows in the 12-row cache", gen(e, rows3), gen(fresh(w), rows3))
	if len(ne.spare) != 1 || ne.spare[0] != d0 || d0.cache.MaxRows() != 12 {
		t.Fatal("the 12-row decoder was not reused for 3 rows")
	}
	short12 := [][]int32{short, short, short, short, other, other, other, other, short, other, short, other}
	same("after a longer and a smaller batch", gen(e, short12), gen(fresh(w), short12))
	if len(ne.spare) != 1 || ne.spare[0] != d0 {
		t.Fatal("the 12-row decoder was not reused for 12 rows")
	}

	// New weights: the reused decoder packs them at its next prefill.
	w2 := InitWeights(cfg, 10)
	if err := e.SetWeights(w2); err != nil {
		t.Fatal(err)
	}
	same("after new weights", gen(e, short12), gen(fresh(w2), short12))
}

// TestGenerateRowsInParallel: preparing the rows' distributions in
// parallel draws the same samples as one row at a time: free decoding at
// temperature 1, at 0.7 with top-p 0.9, greedy, and decoding under the
// action grammar (which forces and masks tokens between the draws).
func TestGenerateRowsInParallel(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4)) // parallel even on one core
	cfg := tinyConfig()
	r := rand.New(rand.NewPCG(41, 42))
	var prompts [][]int32
	for i := range 12 {
		if i%3 == 0 {
			prompts = append(prompts, randPrompt(r, 4+i, cfg.Vocab))
		} else {
			prompts = append(prompts, prompts[i-1])
		}
	}
	e, err := NewEngine(EngineNative, cfg, InitWeights(cfg, 5))
	if err != nil {
		t.Fatal(err)
	}
	both := func(what string, gen func() []Sample) {
		t.Helper()
		sampleSerial = true
		want := gen()
		sampleSerial = false
		got := gen()
		for i := range want {
			if !slices.Equal(got[i].Tokens, want[i].Tokens) || !slices.Equal(got[i].LogProbs, want[i].LogProbs) {
				t.Errorf("%s row %d: parallel %v %v, serial %v %v", what, i, got[i].Tokens, got[i].LogProbs, want[i].Tokens, want[i].LogProbs)
			}
		}
	}
	for _, opts := range []GenerateOptions{
		{Temperature: 1, MaxNewTokens: 10, Seed: 1},
		{Temperature: 0.7, TopP: 0.9, MaxNewTokens: 10, Seed: 2},
		{Temperature: 0, MaxNewTokens: 10},
	} {
		both(fmt.Sprintf("free, temperature %g, top-p %g", opts.Temperature, opts.TopP), func() []Sample {
			out, err := Generator{Engine: e}.Generate(prompts, opts)
			if err != nil {
				t.Fatal(err)
			}
			return out
		})
	}
	w := newGrammarWorld(t)
	both("action grammar", func() []Sample { return w.constrainedSamples(t, 7, 12, false, 3) })
}

// With RowSeeds a row's sample does not depend on the rows batched with
// it: the same prompts generated together, one by one and in other
// groupings and orders draw the same tokens.
func TestGenerateRowSeeds(t *testing.T) {
	cfg := tinyConfig()
	r := rand.New(rand.NewPCG(43, 44))
	var prompts [][]int32
	var seeds []uint64
	for i := range 9 {
		prompts = append(prompts, randPrompt(r, 4+2*i, cfg.Vocab))
		seeds = append(seeds, uint64(1000+i))
	}
	e, err := NewEngine(EngineNative, cfg, InitWeights(cfg, 5))
	if err != nil {
		t.Fatal(err)
	}
	gen := func(rows []int, opts GenerateOptions) []Sample {
		t.Helper()
		ps, ss := make([][]int32, len(rows)), make([]uint64, len(rows))
		for j, i := range rows {
			ps[j], ss[j] = prompts[i], seeds[i]
		}
		opts.RowSeeds = ss
		out, err := Generator{Engine: e}.Generate(ps, opts)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, opts := range []GenerateOptions{
		{Temperature: 1, MaxNewTokens: 12, Seed: 1},
		{Temperature: 0.7, TopP: 0.9, MaxNewTokens: 12, Seed: 2},
	} {
		all := gen([]int{0, 1, 2, 3, 4, 5, 6, 7, 8}, opts)
		other := Generator{Engine: e}
		shared, err := other.Generate(prompts, GenerateOptions{Temperature: opts.Temperature, TopP: opts.TopP, MaxNewTokens: opts.MaxNewTokens, Seed: opts.Seed})
		if err != nil {
			t.Fatal(err)
		}
		differ := 0
		for _, split := range [][][]int{{{4}, {8, 0, 2}, {7, 6, 5, 3, 1}}, {{3}, {2}, {1}, {0}, {8, 7, 6, 5, 4}}} {
			for _, rows := range split {
				for j, s := range gen(rows, opts) {
					i := rows[j]
					if !slices.Equal(s.Tokens, all[i].Tokens) {
						t.Errorf("temperature %g, rows %v: row %d drew %v, in the whole batch %v", opts.Temperature, rows, i, s.Tokens, all[i].Tokens)
					}
					for q := range s.LogProbs {
						if d := s.LogProbs[q] - all[i].LogProbs[q]; d > 1e-5 || d < -1e-5 {
							t.Errorf("row %d token %d: log-prob %g, in the whole batch %g", i, q, s.LogProbs[q], all[i].LogProbs[q])
						}
					}
				}
			}
		}
		for i := range all { // the row seeds are in use: the shared stream draws otherwise
			if !slices.Equal(shared[i].Tokens, all[i].Tokens) {
				differ++
			}
		}
		if differ == 0 {
			t.Errorf("temperature %g: the row seeds drew what the shared seed draws", opts.Temperature)
		}
	}
	if _, err := (Generator{Engine: e}).Generate(prompts[:2], GenerateOptions{Temperature: 1, MaxNewTokens: 4, RowSeeds: seeds[:3]}); err == nil {
		t.Error("3 row seeds for 2 prompts: no error")
	}
}

// TestPrefillInChunks: prefilling the rows in groups of a few tokens
// (prefillChunkTokens, one prompt longer than a group alone) gives the
// logits one forward over all of them gives, at the prompts and after a
// decoding step, to float rounding (products of fewer rows may take the
// unpacked path).
func TestPrefillInChunks(t *testing.T) {
	defer func(n int) { prefillChunkTokens = n }(prefillChunkTokens)
	cfg := tinyConfig()
	r := rand.New(rand.NewPCG(25, 26))
	a, b, c := randPrompt(r, 7, cfg.Vocab), randPrompt(r, 30, cfg.Vocab), randPrompt(r, 4, cfg.Vocab)
	prompts := [][]int32{a, b, a, c, randPrompt(r, 12, cfg.Vocab), c}
	step := make([][]int32, len(prompts))
	for i := range step {
		step[i] = []int32{int32(NumSpecial + r.IntN(cfg.Vocab-NumSpecial))}
	}
	e, err := NewEngine(EngineNative, cfg, InitWeights(cfg, 19))
	if err != nil {
		t.Fatal(err)
	}
	run := func(chunk int) (prefill, next []float32) {
		t.Helper()
		prefillChunkTokens = chunk
		d, err := e.NewDecoder(len(prompts))
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		l, err := d.Prefill(prompts)
		if err != nil {
			t.Fatal(err)
		}
		prefill = slices.Clone(l)
		l, err = d.Extend(step)
		if err != nil {
			t.Fatal(err)
		}
		return prefill, slices.Clone(l)
	}
	wantP, wantN := run(1 << 30)
	for _, chunk := range []int{1, 10, 20} {
		gotP, gotN := run(chunk)
		if d := relErr(gotP, wantP); d > 1e-5 {
			t.Errorf("chunks of %d tokens: prefill logits differ by %.2g (relative)", chunk, d)
		}
		if d := relErr(gotN, wantN); d > 1e-5 {
			t.Errorf("chunks of %d tokens: logits after a step differ by %.2g (relative)", chunk, d)
		}
	}
}
