package onnxpeer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/policy/native"
)

// The tests export a small random native model, run the graphs with ONNX
// Runtime and compare them with the native engine on the same weights.

// tol is the agreement asked of the two engines' logits: the largest
// absolute difference over a step's logits, relative to the largest
// absolute logit of the native engine's (float32 in both, summed in
// different orders).
const tol = 1e-4

// testRunner skips the test when the ONNX Runtime library is not
// installed, as internal/embed's ONNX tests do.
func testRunner(t *testing.T, m *native.Model, inPlace bool) *Runner {
	t.Helper()
	lib, err := Library()
	if err != nil {
		t.Skip("ONNX Runtime library not installed: run `make setup`")
	}
	g, err := Export(m)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(g, Options{LibraryPath: lib, Threads: 2, InPlace: inPlace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// tinyModel is a small native model with random weights far from the
// initialisation's (biases, LayerNorm offsets and gains away from 0 and
// 1, dense weights of scale 1/√in), so that every part of the function
// (the attention's scale and mask, RoPE, each bias) moves the logits.
func tinyModel(t *testing.T, seed uint64) *native.Model {
	t.Helper()
	m, err := native.New(native.Config{Vocab: 97, DModel: 32, Heads: 4, Layers: 2, Ctx: 64}, seed)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, 99))
	for _, p := range m.Params() {
		var scale, mean float64
		switch {
		case strings.HasSuffix(p.Name, "/gain"):
			mean, scale = 1, 0.2
		case strings.HasSuffix(p.Name, "/offset"), strings.HasSuffix(p.Name, "/biases"):
			scale = 0.2
		case p.Name == "/token_embed/embeddings":
			scale = 1
		default: // dense weights [in, out]
			scale = 1.5 / math.Sqrt(float64(p.Shape[0]))
		}
		for i := range p.Data {
			p.Data[i] = float32(mean + scale*r.NormFloat64())
		}
	}
	return m
}

func randPrompts(r *rand.Rand, rows, n, vocab int) [][]int32 {
	ps := make([][]int32, rows)
	for i := range ps {
		for range n {
			ps[i] = append(ps[i], int32(r.IntN(vocab)))
		}
	}
	return ps
}

// maxRelDiff is max |got - want| / max |want| over every value.
func maxRelDiff(got, want []float32) float64 {
	var d, w float64
	for i := range want {
		d = max(d, math.Abs(float64(got[i])-float64(want[i])))
		w = max(w, math.Abs(float64(want[i])))
	}
	return d / max(w, 1e-30)
}

// nativeLastLogits is the native engine's full forward (no cache) over
// every prompt, with the LM head at each prompt's last token.
func nativeLastLogits(t *testing.T, m *native.Model, prompts [][]int32) []float32 {
	t.Helper()
	rows, s := len(prompts), len(prompts[0])
	b := native.Batch{B: rows, S: s, Tokens: slices.Concat(prompts...),
		Positions: make([]int32, rows*s), Segments: make([]int32, rows*s)}
	idx := make([]int32, rows)
	for i := range rows {
		for j := range s {
			b.Positions[i*s+j], b.Segments[i*s+j] = int32(j), 1
		}
		idx[i] = int32(i*s + s - 1)
	}
	if err := m.Forward(b); err != nil {
		t.Fatal(err)
	}
	logits, _, err := m.Heads(idx)
	if err != nil {
		t.Fatal(err)
	}
	return slices.Clone(logits)
}

// decodeModes are the runner's two ways to decode.
var decodeModes = []struct {
	name    string
	inPlace bool
}{{"decode", false}, {"in place", true}}

// TestPrefillDecodeMatchNative runs both engines side by side, the
// native one with its KV cache (Extend, then Decode), feeding both the
// native engine's greedy tokens, and compares the logits of prefill and
// of every decode step (both decode graphs); prefill's also against the
// native full forward.
func TestPrefillDecodeMatchNative(t *testing.T) {
	m := tinyModel(t, 1)
	v := m.Config.Vocab
	for _, mode := range decodeModes {
		r := testRunner(t, m, mode.inPlace)
		for _, tc := range []struct {
			name             string
			rows, plen, gens int
		}{
			{"batch 1", 1, 9, 12},
			{"batch 1, one-token prompt", 1, 1, 6},
			{"batch 3", 3, 17, 10},
			{"batch 5, long", 5, 40, 24},
			{"batch 2, to the context's end", 2, 30, 34},
		} {
			t.Run(mode.name+"/"+tc.name, func(t *testing.T) {
				prompts := randPrompts(rand.New(rand.NewPCG(uint64(tc.rows), uint64(tc.plen))), tc.rows, tc.plen, v)
				all := make([]int, tc.rows)
				for i := range all {
					all[i] = i
				}
				nc, err := m.NewCache(tc.rows, tc.plen+tc.gens)
				if err != nil {
					t.Fatal(err)
				}
				oc, err := r.NewCache(tc.rows, tc.plen+tc.gens)
				if err != nil {
					t.Fatal(err)
				}
				full := nativeLastLogits(t, m, prompts)
				want, err := m.Extend(nc, all, prompts)
				if err != nil {
					t.Fatal(err)
				}
				got, err := r.Prefill(oc, prompts)
				if err != nil {
					t.Fatal(err)
				}
				if d := maxRelDiff(got, want); d > tol {
					t.Errorf("prefill: logits differ from the native Extend's by %.3g (relative), want <= %g", d, tol)
				}
				if d := maxRelDiff(got, full); d > tol {
					t.Errorf("prefill: logits differ from the native Forward's by %.3g (relative), want <= %g", d, tol)
				}
				worst := 0.0
				toks := make([]int32, tc.rows)
				for step := range tc.gens {
					for i := range toks {
						toks[i] = Argmax(want[i*v : (i+1)*v])
					}
					if want, err = m.Decode(nc, nil, toks); err != nil {
						t.Fatal(err)
					}
					if got, err = r.Decode(oc, toks); err != nil {
						t.Fatal(err)
					}
					d := maxRelDiff(got, want)
					worst = max(worst, d)
					if d > tol {
						t.Errorf("decode step %d (position %d): logits differ from the native Decode's by %.3g (relative), want <= %g", step, tc.plen+step, d, tol)
					}
				}
				t.Logf("%d rows, %d-token prompts: largest relative difference of the %d decode steps %.2g", tc.rows, tc.plen, tc.gens, worst)
			})
		}
	}
}

// TestGreedyMatchesNative compares whole greedy generations: the
// runner's Greedy against the native engine's cached greedy loop, at
// batch 1 and 4 (different prompts of the same length).
func TestGreedyMatchesNative(t *testing.T) {
	m := tinyModel(t, 2)
	v := m.Config.Vocab
	const plen, n = 11, 30
	for _, mode := range decodeModes {
		r := testRunner(t, m, mode.inPlace)
		for _, rows := range []int{1, 4} {
			t.Run(fmt.Sprintf("%s/batch %d", mode.name, rows), func(t *testing.T) {
				prompts := randPrompts(rand.New(rand.NewPCG(7, uint64(rows))), rows, plen, v)
				got, err := r.Greedy(prompts, n)
				if err != nil {
					t.Fatal(err)
				}
				all := make([]int, rows)
				for i := range all {
					all[i] = i
				}
				c, err := m.NewCache(rows, plen+n)
				if err != nil {
					t.Fatal(err)
				}
				logits, err := m.Extend(c, all, prompts)
				if err != nil {
					t.Fatal(err)
				}
				want := make([][]int32, rows)
				toks := make([]int32, rows)
				for step := range n {
					for i := range toks {
						toks[i] = Argmax(logits[i*v : (i+1)*v])
						want[i] = append(want[i], toks[i])
					}
					if step < n-1 {
						if logits, err = m.Decode(c, nil, toks); err != nil {
							t.Fatal(err)
						}
					}
				}
				for i := range rows {
					if !slices.Equal(got[i], want[i]) {
						t.Errorf("row %d: greedy tokens\ngot  %v\nwant %v", i, got[i], want[i])
					}
				}
				// The tokens must not be trivially constant: the test would
				// then not see a wrong cache.
				if distinct := len(uniq(want[0])); distinct < 3 {
					t.Errorf("row 0: native greedy output %v has only %d distinct tokens; pick other weights", want[0], distinct)
				}
			})
		}
	}
}

func uniq(s []int32) []int32 {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

// TestErrors checks the runner's refusals: they name what is wrong.
func TestErrors(t *testing.T) {
	m := tinyModel(t, 3)
	r := testRunner(t, m, false)
	c, err := r.NewCache(2, 8)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		run  func() error
		want string
	}{
		{"cache over ctx", func() error { _, err := r.NewCache(1, 65); return err }, "capacity <= ctx 64"},
		{"decode before prefill", func() error { _, err := r.Decode(c, []int32{1, 2}); return err }, "at least one (Prefill)"},
		{"ragged prompts", func() error { _, err := r.Prefill(c, [][]int32{{1, 2}, {3}}); return err }, "same length"},
		{"prompt count", func() error { _, err := r.Prefill(c, [][]int32{{1}}); return err }, "1 prompts for a cache of 2 rows"},
		{"token outside vocab", func() error { _, err := r.Prefill(c, [][]int32{{1}, {97}}); return err }, "outside the vocabulary"},
		{"prompt over capacity", func() error { _, err := r.Prefill(c, randPrompts(rand.New(rand.NewPCG(1, 1)), 2, 9, 97)); return err }, "capacity 8"},
		{"cache full", func() error {
			if _, err := r.Prefill(c, randPrompts(rand.New(rand.NewPCG(1, 1)), 2, 8, 97)); err != nil {
				return err
			}
			_, err := r.Decode(c, []int32{1, 2})
			return err
		}, "room for one more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got error %v, want one containing %q", err, tc.want)
			}
		})
	}
	// The runtime is loaded by now: New reaches the graphs.
	if _, err := New(Graphs{}, Options{}); err == nil || !strings.Contains(err.Error(), "loading the prefill graph") {
		t.Errorf("New with empty graphs: got error %v, want one about loading the prefill graph", err)
	}
}
