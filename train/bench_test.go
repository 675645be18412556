package train

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/mlerl/mlerl/schemas"
)

// benchBatches makes the benchmark's SFT data: seeded random examples
// (prompt 20-150 tokens, response 10-100) over a 4,096-id vocabulary,
// packed into batches of 8 rows of 256 tokens. scripts/bench_torch.py
// trains on exactly these batches (see writeBenchData).
func benchBatches(n int) []packedBatch {
	r := rand.New(rand.NewPCG(1, 2))
	var exs []encoded
	for len(exs) < n {
		p, q := 20+r.IntN(131), 10+r.IntN(91)
		toks := make([]int32, 1+p+q)
		toks[0] = BosID
		for i := 1; i < len(toks); i++ {
			toks[i] = int32(NumSpecial + r.IntN(4096-NumSpecial))
		}
		toks[len(toks)-1] = EosID
		exs = append(exs, encoded{Tokens: toks, Response: 1 + p})
	}
	order := make([]int, len(exs))
	for i := range order {
		order[i] = i
	}
	return packBatches(exs, order, 8, 256)
}

// writeBenchData writes the batches for the PyTorch reference: per batch
// int32 B, S, then int32 tokens, positions, segments, targets and float32
// weights, each B*S values, little-endian.
func writeBenchData(path string, bs []packedBatch) error {
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

// BenchmarkSFT measures SFT updates on the benchmark shape (2 layers,
// d=128, ctx 256, 8 packed rows, vocab 4,096) in real (non-padding)
// tokens/s. With MLERL_BENCH_DATA set it also writes the batches there for
// scripts/bench_torch.py.
func BenchmarkSFT(b *testing.B) {
	batches := benchBatches(400)
	if path := os.Getenv("MLERL_BENCH_DATA"); path != "" {
		if err := writeBenchData(path, batches); err != nil {
			b.Fatal(err)
		}
	}
	cfg := BenchModelConfig()
	cfg.Vocab = 4096
	p, err := NewPolicy(mustBackend(), cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	o := DefaultSFTConfig().Optim
	l, err := newLearner(p, o, p.sftLoss)
	if err != nil {
		b.Fatal(err)
	}
	// Compile outside the timing (one graph per batch width).
	seen := map[int]bool{}
	for _, bt := range batches {
		if !seen[bt.S] {
			seen[bt.S] = true
			if _, _, _, err := l.Step(bt.inputs(), 1e-4); err != nil {
				b.Fatal(err)
			}
		}
	}
	real, padded := 0, 0
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		bt := batches[i%len(batches)]
		if _, _, _, err := l.Step(bt.inputs(), 1e-4); err != nil {
			b.Fatal(err)
		}
		real += bt.Real
		padded += bt.B * bt.S
	}
	secs := time.Since(start).Seconds()
	b.ReportMetric(float64(real)/secs, "real_tok/s")
	b.ReportMetric(1-float64(real)/float64(padded), "pad_frac")
	b.ReportMetric(float64(p.NumParams()), "params")
}

// BenchmarkPPO runs PPO updates on the synthetic known-best-action problem
// with a reward that sleeps 20 ms per action, and reports samples/s and the
// split of an update's wall time between generation, waiting for rewards
// (execution not overlapped with generation) and the PPO update.
func BenchmarkPPO(b *testing.B) {
	root := b.TempDir()
	setupPPO(b, root)
	cfg := tinyPPOConfig(root)
	cfg.Updates = max(b.N, 2)
	cfg.MaxNewTokens = 8
	cfg.Workers = 4
	slow := func(ctx context.Context, s schemas.RLState, a string) (Outcome, error) {
		time.Sleep(20 * time.Millisecond)
		return pickD(ctx, s, a)
	}
	b.ResetTimer()
	if err := RunPPOWith(context.Background(), cfg, slow, discard{}); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	ms := readMetrics(b, root, "checkpoints/ppo")
	var sps, gen, wait, upd float64
	for _, m := range ms {
		sps += m["charts/samples_per_s"].(float64)
		gen += m["time/generate_s"].(float64)
		wait += m["time/wait_rewards_s"].(float64)
		upd += m["time/update_s"].(float64)
	}
	n := float64(len(ms))
	b.ReportMetric(sps/n, "samples/s")
	b.ReportMetric(gen/n, "gen_s/update")
	b.ReportMetric(wait/n, "wait_s/update")
	b.ReportMetric(upd/n, "update_s/update")
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
