package native

import (
	"math/rand/v2"
	"testing"
)

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// fullLogits re-runs the whole sequence through Forward and returns the
// logits at every position.
func fullLogits(t *testing.T, m *Model, seq []int32) []float32 {
	t.Helper()
	b := packRows(len(seq), 0, []example{{seq, 0}})
	if err := m.Forward(b); err != nil {
		t.Fatal(err)
	}
	l, _, err := m.Heads(realPositions(b))
	if err != nil {
		t.Fatal(err)
	}
	return append([]float32(nil), l...)
}

// TestDecodeMatchesForward generates greedily with the cache, rows of
// different prompt lengths stepping together (one stops early, one gets
// a multi-token forced extension mid-way), and checks every step's logits
// against a full re-forward of that row's sequence.
func TestDecodeMatchesForward(t *testing.T) {
	cfg := Config{Vocab: 13, DModel: 8, Heads: 2, Layers: 2, FFN: 12, Ctx: 120}
	m := newTestModel(t, cfg, 21)
	r := rand.New(rand.NewPCG(15, 16))
	v := cfg.Vocab
	for _, tc := range []struct {
		name    string
		prompts []int
		steps   []int // new tokens per row
	}{
		{"batch 1", []int{5}, []int{8}},
		{"batch 3 ragged", []int{3, 70, 6}, []int{9, 4, 9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachKernel(t, func(t *testing.T) {
				rows := len(tc.prompts)
				c, err := m.NewCache(rows, cfg.Ctx)
				if err != nil {
					t.Fatal(err)
				}
				seqs := make([][]int32, rows)
				got := make([][][]float32, rows) // per row, per step: logits after its last token
				all := make([]int, rows)
				prompts := make([][]int32, rows)
				for i := range rows {
					all[i] = i
					prompts[i] = randTokens(r, tc.prompts[i], v)
					seqs[i] = prompts[i]
				}
				logits, err := m.Extend(c, all, prompts)
				if err != nil {
					t.Fatal(err)
				}
				for i := range rows {
					got[i] = append(got[i], append([]float32(nil), logits[i*v:(i+1)*v]...))
				}
				for step := 0; ; step++ {
					var active []int
					var toks []int32
					for i := range rows {
						if step < tc.steps[i] {
							next := argmax(got[i][len(got[i])-1])
							active, toks = append(active, i), append(toks, next)
							seqs[i] = append(seqs[i], next)
						}
					}
					if len(active) == 0 {
						break
					}
					if step == 2 && rows > 1 {
						// Row 0 gets a forced three-token string instead of
						// one token, in the same call as the others' one.
						ext := make([][]int32, len(active))
						for k := range active {
							ext[k] = toks[k : k+1]
						}
						ext[0] = []int32{toks[0], 4, 7}
						seqs[0] = append(seqs[0], 4, 7)
						got[0] = append(got[0], nil, nil) // positions inside the string
						logits, err = m.Extend(c, active, ext)
						if err != nil {
							t.Fatal(err)
						}
						for k, i := range active {
							got[i] = append(got[i], append([]float32(nil), logits[k*v:(k+1)*v]...))
						}
						continue
					}
					logits, err = m.Decode(c, active, toks)
					if err != nil {
						t.Fatal(err)
					}
					for k, i := range active {
						got[i] = append(got[i], append([]float32(nil), logits[k*v:(k+1)*v]...))
					}
				}
				for i := range rows {
					if c.Len(i) != len(seqs[i]) {
						t.Fatalf("row %d: cache holds %d tokens, sequence has %d", i, c.Len(i), len(seqs[i]))
					}
					want := fullLogits(t, m, seqs[i])
					for s, g := range got[i] {
						if g == nil {
							continue
						}
						at := tc.prompts[i] - 1 + s
						if d := maxRelDiff(g, toF64(want[at*v:(at+1)*v]), 1); d > 1e-5 {
							t.Errorf("row %d, position %d: cached logits differ from a full forward by %.2g", i, at, d)
						}
					}
				}
			})
		})
	}
}

func TestCacheErrors(t *testing.T) {
	m := newTestModel(t, tinyConfig(), 22)
	if _, err := m.NewCache(1, 41); err == nil {
		t.Error("cache larger than ctx: got no error")
	}
	c, _ := m.NewCache(2, 4)
	if _, err := m.Extend(c, []int{0}, [][]int32{{1, 2, 3, 4, 5}}); err == nil {
		t.Error("overflowing the cache: got no error")
	}
	if _, err := m.Decode(c, []int{1, 1}, []int32{1, 2}); err == nil {
		t.Error("a row listed twice: got no error")
	}
	if _, err := m.Decode(c, []int{2}, []int32{1}); err == nil {
		t.Error("row out of range: got no error")
	}
}

// TestCacheCopyRow: a row forked with CopyRow continues exactly as the
// row it was copied from would (and as a row prefilled on its own), its
// old, longer contents gone; the source row is not disturbed.
func TestCacheCopyRow(t *testing.T) {
	cfg := Config{Vocab: 13, DModel: 8, Heads: 2, Layers: 2, FFN: 12, Ctx: 40}
	m := newTestModel(t, cfg, 23)
	r := rand.New(rand.NewPCG(17, 18))
	v := cfg.Vocab
	prompt, old := randTokens(r, 9, v), randTokens(r, 20, v)
	ext0, ext2 := randTokens(r, 3, v), randTokens(r, 4, v)
	c, _ := m.NewCache(3, cfg.Ctx)
	if _, err := m.Extend(c, []int{0, 2}, [][]int32{prompt, old}); err != nil {
		t.Fatal(err)
	}
	if err := c.CopyRow(2, 0); err != nil {
		t.Fatal(err)
	}
	if c.Len(2) != len(prompt) {
		t.Fatalf("copied row holds %d tokens, want %d", c.Len(2), len(prompt))
	}
	got, err := m.Extend(c, []int{0, 2}, [][]int32{ext0, ext2})
	if err != nil {
		t.Fatal(err)
	}
	got = append([]float32(nil), got...)
	for i, ext := range [][]int32{ext0, ext2} {
		want := fullLogits(t, m, append(append([]int32(nil), prompt...), ext...))
		at := len(prompt) + len(ext) - 1
		if d := maxRelDiff(got[i*v:(i+1)*v], toF64(want[at*v:(at+1)*v]), 1); d > 1e-5 {
			t.Errorf("row %d after the fork differs from a full forward by %.2g", []int{0, 2}[i], d)
		}
	}
	if err := c.CopyRow(3, 0); err == nil {
		t.Error("CopyRow to a row out of range: got no error")
	}
}

// TestCacheShare: rows that share a base row's prompt (Share) decode as
// rows holding a copy would, alone or together with the base row and an
// unrelated row in one call, through one- and multi-token extensions; a
// row copied from a sharer keeps sharing; and the sharing's rules are
// enforced.
func TestCacheShare(t *testing.T) {
	cfg := Config{Vocab: 13, DModel: 8, Heads: 2, Layers: 2, FFN: 12, Ctx: 60}
	m := newTestModel(t, cfg, 24)
	r := rand.New(rand.NewPCG(19, 20))
	v := cfg.Vocab
	forEachKernel(t, func(t *testing.T) {
		prompt, other := randTokens(r, 11, v), randTokens(r, 6, v)
		c, _ := m.NewCache(5, cfg.Ctx)
		if _, err := m.Extend(c, []int{0, 4}, [][]int32{prompt, other}); err != nil {
			t.Fatal(err)
		}
		for _, dst := range []int{1, 2} {
			if err := c.Share(dst, 0); err != nil {
				t.Fatal(err)
			}
		}
		seqs := [][]int32{prompt, prompt, prompt, nil, other}
		for i := range seqs {
			seqs[i] = append([]int32(nil), seqs[i]...)
		}
		check := func(rows []int, ext [][]int32) {
			t.Helper()
			got, err := m.Extend(c, rows, ext)
			if err != nil {
				t.Fatal(err)
			}
			got = append([]float32(nil), got...)
			for k, row := range rows {
				seqs[row] = append(seqs[row], ext[k]...)
				if c.Len(row) != len(seqs[row]) {
					t.Fatalf("row %d holds %d tokens, its sequence %d", row, c.Len(row), len(seqs[row]))
				}
				want := fullLogits(t, m, seqs[row])
				at := len(seqs[row]) - 1
				if d := maxRelDiff(got[k*v:(k+1)*v], toF64(want[at*v:(at+1)*v]), 1); d > 1e-5 {
					t.Errorf("row %d at %d tokens differs from a full forward by %.2g", row, len(seqs[row]), d)
				}
			}
		}
		check([]int{1, 2}, [][]int32{{3}, {5}})                          // the sharers alone
		check([]int{2, 0, 4, 1}, [][]int32{{7}, {1, 2}, {9}, {4, 4, 6}}) // with the base row, an unrelated row, forced strings
		if err := c.CopyRow(3, 2); err != nil {                          // a copy of a sharer shares too
			t.Fatal(err)
		}
		seqs[3] = append([]int32(nil), seqs[2]...)
		check([]int{3, 2, 1}, [][]int32{{8}, {2}, {0, 11}})

		if err := c.Share(3, 1); err == nil {
			t.Error("sharing from a row that itself shares: got no error")
		}
		if err := c.Share(0, 4); err == nil {
			t.Error("sharing into a row whose tokens others share: got no error")
		}
		if err := c.CopyRow(0, 4); err == nil {
			t.Error("copying into a row whose tokens others share: got no error")
		}
		if err := c.Share(1, 1); err == nil {
			t.Error("a row sharing its own tokens: got no error")
		}
		c.Reset(0)
		if _, err := m.Extend(c, []int{0}, [][]int32{other}); err == nil {
			t.Error("refilling a row whose tokens others share: got no error")
		}
		for _, row := range []int{1, 2, 3} {
			c.Reset(row)
		}
		if _, err := m.Extend(c, []int{0}, [][]int32{other}); err != nil {
			t.Errorf("refilling a row after its sharers were reset: %v", err)
		}
	})
}

// TestPackWeightsDecodeSame: a cache whose weights were packed once
// (PackWeights) decodes bit for bit as one that packs them in every
// product, on steps of more rows than gemmSmallM (the packed path) and of
// fewer (the in-place path); after the weights change, packing again
// follows them, while the stale packing still computes with the old ones
// (which shows the packed path is the one being compared).
func TestPackWeightsDecodeSame(t *testing.T) {
	cfg := Config{Vocab: 40, DModel: 16, Heads: 2, Layers: 2, FFN: 24, Ctx: 64}
	const rows = 12
	forEachKernel(t, func(t *testing.T) {
		m := newTestModel(t, cfg, 5)
		r := rand.New(rand.NewPCG(7, 8))
		packed, plain := newCache(t, m, rows, cfg.Ctx), newCache(t, m, rows, cfg.Ctx)
		m.PackWeights(packed)
		all := make([]int, rows)
		prompts := make([][]int32, rows)
		for i := range prompts {
			all[i] = i
			prompts[i] = randTokens(r, 3+r.IntN(20), cfg.Vocab)
		}
		step := func(rs []int, toks [][]int32) (a, b []float32) {
			t.Helper()
			return extendCopy(t, m, packed, rs, toks), extendCopy(t, m, plain, rs, toks)
		}
		same := func(what string, rs []int, toks [][]int32) {
			t.Helper()
			a, b := step(rs, toks)
			for i := range a {
				if a[i] != b[i] {
					t.Fatalf("%s: logit %d: packed %v, unpacked %v", what, i, a[i], b[i])
				}
			}
		}
		same("prefill", all, prompts)
		for s := range 4 {
			toks := make([][]int32, rows)
			for i := range toks {
				toks[i] = randTokens(r, 1, cfg.Vocab)
			}
			same("decode step "+string(rune('0'+s)), all, toks)
		}
		few := []int{1, 4, 9}
		same("3 rows", few, [][]int32{randTokens(r, 1, cfg.Vocab), randTokens(r, 1, cfg.Vocab), randTokens(r, 1, cfg.Vocab)})

		// New weights: the stale packing differs, a new one agrees again.
		for _, w := range [][]float32{m.w.blocks[0].qW, m.w.blocks[1].ffnOutW, m.w.lmW} {
			for i := range w {
				w[i] *= 1.5
			}
		}
		toks := make([][]int32, rows)
		for i := range toks {
			toks[i] = randTokens(r, 1, cfg.Vocab)
		}
		stale, fresh := step(all, toks)
		differs := false
		for i := range stale {
			differs = differs || stale[i] != fresh[i]
		}
		if !differs {
			t.Fatal("a stale packing computed with the new weights: the packed path was not used")
		}
		// Re-run the step on both from the same state: reset and refill.
		for _, c := range []*Cache{packed, plain} {
			for i := range rows {
				c.Reset(i)
			}
		}
		m.PackWeights(packed)
		same("repacked prefill", all, prompts)
		same("repacked decode", all, toks)
	})
}

func newCache(t *testing.T, m *Model, rows, capacity int) *Cache {
	t.Helper()
	c, err := m.NewCache(rows, capacity)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// extendCopy is Extend with its logits copied (the model reuses them).
func extendCopy(t *testing.T, m *Model, c *Cache, rows []int, toks [][]int32) []float32 {
	t.Helper()
	l, err := m.Extend(c, rows, toks)
	if err != nil {
		t.Fatal(err)
	}
	return append([]float32(nil), l...)
}

// TestCacheReshape: a cache reshaped to fewer rows holds only those, all
// empty, and cannot grow past the rows it was made with.
func TestCacheReshape(t *testing.T) {
	cfg := Config{Vocab: 13, DModel: 8, Heads: 2, Layers: 2, FFN: 12, Ctx: 20}
	m := newTestModel(t, cfg, 3)
	c := newCache(t, m, 4, cfg.Ctx)
	if _, err := m.Extend(c, []int{0, 3}, [][]int32{{1, 2, 3}, {4}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Reshape(2); err != nil {
		t.Fatal(err)
	}
	if c.Rows() != 2 || c.MaxRows() != 4 || c.Len(0) != 0 || c.Len(1) != 0 {
		t.Fatalf("reshaped: rows %d, max %d, lens %d %d; want 2, 4, 0 0", c.Rows(), c.MaxRows(), c.Len(0), c.Len(1))
	}
	if _, err := m.Extend(c, []int{2}, [][]int32{{1}}); err == nil {
		t.Error("row 2 of a 2-row cache was extended")
	}
	for _, rows := range []int{0, 5} {
		if err := c.Reshape(rows); err == nil {
			t.Errorf("reshaped to %d rows of at most 4", rows)
		}
	}
	if err := c.Reshape(4); err != nil || c.Rows() != 4 || c.Len(3) != 0 {
		t.Errorf("back to 4 rows: %v, rows %d, row 3 length %d", err, c.Rows(), c.Len(3))
	}
}

// TestCacheGrowsInSteps runs the cache's tests again with rows that grow
// by one slot at a time, each Extend past a row's storage a copy into a
// larger one: decoding, forks and sharing must not see the difference.
func TestCacheGrowsInSteps(t *testing.T) {
	defer func(g int) { minGrowth = g }(minGrowth)
	minGrowth = 1
	t.Run("decode", TestDecodeMatchesForward)
	t.Run("copy row", TestCacheCopyRow)
	t.Run("share", TestCacheShare)
	t.Run("packed weights", TestPackWeightsDecodeSame)
}

// TestCacheHoldsOnlyWhatRowsNeed: rows reserved for their prompt and
// continuation hold exactly that, a row sharing a prompt only its own
// continuation, and decoding within the reservation allocates nothing;
// a cache reused call after call, the rows' roles swapped, holds at most
// one buffer per row, each at most the capacity, and a call like an
// earlier one allocates nothing new.
func TestCacheHoldsOnlyWhatRowsNeed(t *testing.T) {
	cfg := Config{Vocab: 13, DModel: 8, Heads: 2, Layers: 2, FFN: 12, Ctx: 100}
	m := newTestModel(t, cfg, 31)
	r := rand.New(rand.NewPCG(33, 34))
	const rows, prompt, decode = 8, 40, 10
	c := newCache(t, m, rows, cfg.Ctx)
	slot := int64(2 * 4 * c.layers * c.heads * c.dh) // bytes: a key and a value in every layer and head
	// call fills rows bases[0] and bases[1] with a prompt each, the other
	// rows sharing them three apiece, reserved for decode tokens more,
	// then decodes them.
	call := func(bases [2]int, reserve bool) {
		t.Helper()
		c.ResetAll()
		for _, b := range bases {
			if reserve {
				if err := c.Reserve(b, prompt+decode); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := m.Extend(c, []int{b}, [][]int32{randTokens(r, prompt, cfg.Vocab)}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range rows {
			if i == bases[0] || i == bases[1] {
				continue
			}
			if err := c.Share(i, bases[i%2]); err != nil {
				t.Fatal(err)
			}
			if reserve {
				if err := c.Reserve(i, prompt+decode); err != nil {
					t.Fatal(err)
				}
			}
		}
		reserved := c.Bytes()
		all := make([]int, rows)
		for i := range all {
			all[i] = i
		}
		for range decode {
			if _, err := m.Decode(c, all, randTokens(r, rows, cfg.Vocab)); err != nil {
				t.Fatal(err)
			}
		}
		if reserve && c.Bytes() != reserved {
			t.Errorf("decoding within the reservation went from %d to %d bytes", reserved, c.Bytes())
		}
	}
	call([2]int{0, 1}, true)
	if want := slot * (2*(prompt+decode) + 6*decode); c.Bytes() != want {
		t.Errorf("reserved rows hold %d bytes, want %d (2 prompts and their continuations, 6 continuations)", c.Bytes(), want)
	}
	most := slot * rows * int64(cfg.Ctx) // the old layout: every row at the full capacity
	for i, bases := range [][2]int{{4, 5}, {6, 7}, {4, 5}, {2, 3}} {
		call(bases, i%2 == 0)
		if b, n := c.Bytes(), len(c.free)+rows; b > most || n > rows {
			t.Errorf("call %d: %d bytes in %d buffers, want at most %d in %d", i, b, n, most, rows)
		}
	}
	before := c.Bytes()
	call([2]int{2, 3}, false)
	if c.Bytes() != before {
		t.Errorf("a call like the last one grew the cache from %d to %d bytes", before, c.Bytes())
	}
	c.ResetAll()
	if err := c.Reserve(0, cfg.Ctx+1); err == nil {
		t.Error("Reserve past the capacity: got no error")
	}
}

// TestCacheGrowsIntoALargerFreeBuffer: a row that outgrows its storage
// while a larger buffer is free takes that buffer, keys restrided to its
// slots, and decodes on as a full forward does.
func TestCacheGrowsIntoALargerFreeBuffer(t *testing.T) {
	defer func(g int) { minGrowth = g }(minGrowth)
	minGrowth = 1
	cfg := Config{Vocab: 13, DModel: 8, Heads: 2, Layers: 2, FFN: 12, Ctx: 80}
	m := newTestModel(t, cfg, 35)
	r := rand.New(rand.NewPCG(36, 37))
	v := cfg.Vocab
	c := newCache(t, m, 2, cfg.Ctx)
	seq := randTokens(r, 3, v)
	if _, err := m.Extend(c, []int{0, 1}, [][]int32{seq, randTokens(r, 40, v)}); err != nil {
		t.Fatal(err)
	}
	small := c.own[0].n
	c.Reset(1) // row 1's 40-odd slots are free now
	for range 6 {
		next := randTokens(r, 1, v)
		got := extendCopy(t, m, c, []int{0}, [][]int32{next})
		seq = append(seq, next...)
		want := fullLogits(t, m, seq)
		at := len(seq) - 1
		if d := maxRelDiff(got[:v], toF64(want[at*v:(at+1)*v]), 1); d > 1e-5 {
			t.Fatalf("row 0 at %d tokens differs from a full forward by %.2g", len(seq), d)
		}
	}
	if c.own[0].n <= small || c.own[0].n < 40 {
		t.Errorf("row 0 grew from %d to %d slots, want the freed buffer of 40 or more", small, c.own[0].n)
	}
}
