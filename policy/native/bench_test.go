package native

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// The benchmark shapes of the project: "bench" for SFT throughput and
// "demo" for generation (see BENCHMARKS.md of the repository).
func benchShape() Config {
	return Config{Vocab: 4096, DModel: 128, Heads: 4, Layers: 2, FFN: 512, Ctx: 256}
}

func demoShape() Config {
	return Config{Vocab: 4096, DModel: 256, Heads: 4, Layers: 4, FFN: 1024, Ctx: 512}
}

// Special ids of the policy vocabulary (train/vocab.go).
const (
	benchBOS        = 2
	benchEOS        = 3
	benchNumSpecial = 4
	benchPackWindow = 64
)

// sftBatch is one packed batch with its targets, as train's packBatches
// makes them.
type sftBatch struct {
	Batch
	Targets []int32
	Weights []float32
	Real    int
}

// benchBatches makes the same data as train's BenchmarkSFT: seeded random
// examples (BOS, prompt 20-150 tokens, response 10-100 ending in EOS) over
// a 4,096-id vocabulary, packed first-fit into batches of 8 rows of up to
// 256 tokens, width rounded up to a multiple of 32. The loss is on
// response tokens.
func benchBatches(n int) []sftBatch {
	r := rand.New(rand.NewPCG(1, 2))
	type ex struct {
		toks     []int32
		response int
	}
	var exs []ex
	for len(exs) < n {
		p, q := 20+r.IntN(131), 10+r.IntN(91)
		toks := make([]int32, 1+p+q)
		toks[0] = benchBOS
		for i := 1; i < len(toks); i++ {
			toks[i] = int32(benchNumSpecial + r.IntN(4096-benchNumSpecial))
		}
		toks[len(toks)-1] = benchEOS
		exs = append(exs, ex{toks, 1 + p})
	}
	const rowsPer, ctx = 8, 256
	var rows [][]int
	var used []int
	for i, e := range exs {
		placed := false
		for r := max(0, len(rows)-benchPackWindow); r < len(rows); r++ {
			if used[r]+len(e.toks) <= ctx {
				rows[r], used[r], placed = append(rows[r], i), used[r]+len(e.toks), true
				break
			}
		}
		if !placed {
			rows, used = append(rows, []int{i}), append(used, len(e.toks))
		}
	}
	var out []sftBatch
	for start := 0; start < len(rows); start += rowsPer {
		group := rows[start:min(start+rowsPer, len(rows))]
		width := 0
		for ri := range group {
			width = max(width, used[start+ri])
		}
		width = min(ctx, (width+31)/32*32)
		b := sftBatch{Batch: Batch{B: len(group), S: width}}
		size := b.B * b.S
		b.Tokens, b.Positions, b.Segments = make([]int32, size), make([]int32, size), make([]int32, size)
		b.Targets, b.Weights = make([]int32, size), make([]float32, size)
		for ri, row := range group {
			at := ri * width
			for si, i := range row {
				e := exs[i]
				for t, tok := range e.toks {
					k := at + t
					b.Tokens[k], b.Positions[k], b.Segments[k] = tok, int32(t), int32(si+1)
					if t+1 < len(e.toks) {
						b.Targets[k] = e.toks[t+1]
						if t+1 >= e.response {
							b.Weights[k] = 1
						}
					}
				}
				at += len(e.toks)
				b.Real += len(e.toks)
			}
		}
		out = append(out, b)
	}
	return out
}

// writeBenchData writes batches in scripts/bench_torch.py's format: per
// batch int32 B, S, then int32 tokens, positions, segments, targets and
// float32 weights, each B*S values, little-endian.
func writeBenchData(path string, bs []sftBatch) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, b := range bs {
		for _, v := range []any{[]int32{int32(b.B), int32(b.S)}, b.Tokens, b.Positions, b.Segments, b.Targets, b.Weights} {
			if err := binary.Write(f, binary.LittleEndian, v); err != nil {
				return err
			}
		}
	}
	return f.Close()
}

// headTargets lists the flat positions the loss reads: with full, every
// real token (the LM head on every position, zero weight off the
// response); otherwise only the weighted ones.
func (b sftBatch) headTargets(full bool) (idx, targets []int32, weights []float32) {
	for i, s := range b.Segments {
		if s != 0 && (full || b.Weights[i] != 0) {
			idx, targets, weights = append(idx, int32(i)), append(targets, b.Targets[i]), append(weights, b.Weights[i])
		}
	}
	return idx, targets, weights
}

// BenchmarkSFTStep measures full SFT steps (forward, cross-entropy,
// backward, AdamW) on the bench shape in real (non-padding) tokens/s,
// with the LM head at the response targets only and at every position.
// With MLERL_BENCH_DATA set it writes the batches for
// scripts/bench_torch.py.
func BenchmarkSFTStep(b *testing.B) {
	batches := benchBatches(400)
	if path := os.Getenv("MLERL_BENCH_DATA"); path != "" {
		if err := writeBenchData(path, batches); err != nil {
			b.Fatal(err)
		}
	}
	for _, head := range []string{"targets", "full"} {
		b.Run("kernel="+KernelName()+"/head="+head, func(b *testing.B) {
			m, err := New(benchShape(), 1)
			if err != nil {
				b.Fatal(err)
			}
			opt := NewAdamW(m, AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.01, ClipNorm: 1})
			type prepared struct {
				idx, targets []int32
				weights      []float32
			}
			prep := make([]prepared, len(batches))
			for i, bt := range batches {
				idx, t, w := bt.headTargets(head == "full")
				prep[i] = prepared{idx, t, w}
			}
			step := func(i int) {
				bt, p := batches[i%len(batches)], prep[i%len(batches)]
				m.ZeroGrad()
				if err := m.Forward(bt.Batch); err != nil {
					b.Fatal(err)
				}
				if _, err := m.CrossEntropyBackward(p.idx, p.targets, p.weights); err != nil {
					b.Fatal(err)
				}
				opt.Step(m, 1e-4)
			}
			for i := range 5 { // warm-up: buffers grow to size
				step(i)
			}
			real, padded := 0, 0
			b.ResetTimer()
			start, cpu0 := time.Now(), cpuSeconds()
			for i := 0; i < b.N; i++ {
				step(i)
				real += batches[i%len(batches)].Real
				padded += batches[i%len(batches)].B * batches[i%len(batches)].S
			}
			secs := time.Since(start).Seconds()
			b.ReportMetric(float64(real)/secs, "real_tok/s")
			b.ReportMetric(float64(real)/(cpuSeconds()-cpu0), "real_tok/cpu-s")
			b.ReportMetric(1-float64(real)/float64(padded), "pad_frac")
		})
	}
}

// BenchmarkGenerate measures generation on the demo shape: a 300-token
// prompt per row, then 160 new tokens per row (greedy), batch 1 and 8.
// new_tok/s counts the new tokens over the whole time, prefill included;
// decode_tok/s counts them over the decode steps only.
func BenchmarkGenerate(b *testing.B) {
	const promptLen, newTokens = 300, 160
	cfg := demoShape()
	m, err := New(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	for _, rows := range []int{1, 8} {
		b.Run("kernel="+KernelName()+"/batch="+itoa(rows), func(b *testing.B) {
			r := rand.New(rand.NewPCG(3, 4))
			prompts := make([][]int32, rows)
			all := make([]int, rows)
			for i := range prompts {
				prompts[i] = randTokens(r, promptLen, cfg.Vocab)
				all[i] = i
			}
			c, err := m.NewCache(rows, promptLen+newTokens)
			if err != nil {
				b.Fatal(err)
			}
			toks := make([]int32, rows)
			var decodeSecs float64
			b.ResetTimer()
			start, cpu0 := time.Now(), cpuSeconds()
			for it := 0; it < b.N; it++ {
				for i := range rows {
					c.Reset(i)
				}
				logits, err := m.Extend(c, all, prompts)
				if err != nil {
					b.Fatal(err)
				}
				t0 := time.Now()
				for range newTokens {
					for i := range rows {
						toks[i] = argmax(logits[i*cfg.Vocab : (i+1)*cfg.Vocab])
					}
					if logits, err = m.Decode(c, all, toks); err != nil {
						b.Fatal(err)
					}
				}
				decodeSecs += time.Since(t0).Seconds()
			}
			secs := time.Since(start).Seconds()
			n := float64(b.N * rows * newTokens)
			b.ReportMetric(n/secs, "new_tok/s")
			b.ReportMetric(n/(cpuSeconds()-cpu0), "new_tok/cpu-s")
			b.ReportMetric(n/decodeSecs, "decode_tok/s")
		})
	}
}
