package train

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/policy/native"
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
		toks[0] = policy.BosID
		for i := 1; i < len(toks); i++ {
			toks[i] = int32(policy.NumSpecial + r.IntN(4096-policy.NumSpecial))
		}
		toks[len(toks)-1] = policy.EosID
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
// tokens/s, per engine and with the LM head at the response targets only
// (as the trainer does) or at every position (as a plain training loop
// does). With MLERL_BENCH_DATA set it also writes the batches there for
// scripts/bench_torch.py.
func BenchmarkSFT(b *testing.B) {
	batches := benchBatches(400)
	if path := os.Getenv("MLERL_BENCH_DATA"); path != "" {
		if err := writeBenchData(path, batches); err != nil {
			b.Fatal(err)
		}
	}
	cfg := policy.BenchConfig()
	cfg.Vocab = 4096
	for _, engine := range []string{policy.EngineNative, policy.EngineGoMLX} {
		for _, head := range []string{"targets", "full"} {
			b.Run(engine+"/"+head, func(b *testing.B) {
				if engine == policy.EngineGoMLX && os.Getenv("MLERL_BENCH_GOMLX") == "" {
					b.Skip("set MLERL_BENCH_GOMLX=1 (GoMLX on CPU is 10-40x slower)")
				}
				eng, err := policy.NewEngine(engine, cfg, policy.InitWeights(cfg, 1))
				if err != nil {
					b.Fatal(err)
				}
				eng.SetOptim(DefaultSFTConfig().Optim)
				step := func(bt packedBatch) {
					idx, targets, weights, _ := bt.targets()
					if head == "full" {
						idx, targets, weights = allPositions(bt)
					}
					if _, _, err := eng.TrainStep(bt.Batch, idx, sftLoss(targets, weights, cfg.Vocab), 1e-4); err != nil {
						b.Fatal(err)
					}
				}
				step(batches[0]) // warm up (GoMLX compiles its graphs)
				real, padded := 0, 0
				b.ResetTimer()
				start := time.Now()
				for i := 0; i < b.N; i++ {
					bt := batches[i%len(batches)]
					step(bt)
					real += bt.Real
					padded += bt.B * bt.S
				}
				secs := time.Since(start).Seconds()
				b.ReportMetric(float64(real)/secs, "real_tok/s")
				b.ReportMetric(1-float64(real)/float64(padded), "pad_frac")
				b.ReportMetric(float64(cfg.NumParams()), "params")
			})
		}
	}
}

// allPositions lists every real position of a batch as a target (weight
// 1 on response targets, 0 elsewhere): the LM head then runs everywhere.
func allPositions(bt packedBatch) (idx, targets []int32, weights []float32) {
	for i, s := range bt.Segments {
		if s != 0 {
			idx, targets, weights = append(idx, int32(i)), append(targets, bt.Targets[i]), append(weights, bt.Weights[i])
		}
	}
	return idx, targets, weights
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

// BenchmarkSFTLoss measures SFT's loss and gradient on the host for 160
// target tokens over SmolLM2's 49,152-token vocabulary (a demo-recipe
// row's response), CPU seconds per call: "vector" is sftLossStats as it
// is (the probabilities by native.ExpRows), "mathexp" the same
// gradient with math.Exp per value (what it did before), the baseline.
// Run with GOMAXPROCS=1 to compare one core's work.
func BenchmarkSFTLoss(b *testing.B) {
	const rows, vocab = 160, 49152
	r := rand.New(rand.NewPCG(3, 4))
	logits := make([]float32, rows*vocab)
	for i := range logits {
		logits[i] = float32(4 * r.NormFloat64())
	}
	targets, weights, act := make([]int32, rows), make([]float32, rows), make([]bool, rows)
	for i := range targets {
		targets[i], weights[i], act[i] = int32(r.IntN(vocab)), 1, i < 4
	}
	d := make([]float32, len(logits))
	run := func(name string, f func()) {
		b.Run(name, func(b *testing.B) {
			c := cpuSeconds()
			for range b.N {
				f()
			}
			b.ReportMetric((cpuSeconds()-c)/float64(b.N), "cpu-s/op")
		})
	}
	var st actionNLL
	loss := sftLossStats(targets, weights, act, vocab, &st)
	run("vector", func() { loss(logits, nil, d, nil) })
	run("mathexp", func() {
		copy(d, logits)
		native.LogSoftmaxRows(d, vocab)
		for i, t := range targets {
			row := d[i*vocab : (i+1)*vocab]
			coef := float32(1.0 / rows)
			for j, lp := range row {
				row[j] = coef * float32(math.Exp(float64(lp)))
			}
			row[t] -= coef
		}
	})
}
