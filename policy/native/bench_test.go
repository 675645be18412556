package native

import (
	"encoding/binary"
	"math"
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

// Model FLOPs, for make bench's utilisation against the machine's GEMM
// peak: the matrix products a step's definition needs, 2 per multiply-add:
// the trunk's dense layers per token, attention's two products (q·k and
// p·v) per query-key pair of an example, and the LM head at the positions
// it runs on; backward is twice forward. LayerNorm, GELU, softmax and the
// optimiser are not counted; a masked S x S attention that computes the
// pairs across examples too (PyTorch's) is credited only the real ones.
func denseFLOPs(c Config) float64 {
	c = c.resolved()
	return 2 * float64(c.Layers*(4*c.DModel*c.DModel+2*c.DModel*c.FFN))
}

func attnFLOPs(c Config, pairs float64) float64 { return 4 * float64(c.Layers*c.DModel) * pairs }

func headFLOPs(c Config, positions int) float64 { return 2 * float64(c.DModel*c.Vocab*positions) }

// sftFLOPs is the model FLOPs of one SFT step (forward and backward) on b
// with the LM head at heads positions.
func sftFLOPs(c Config, b Batch, heads int) float64 {
	tokens, pairs := 0, 0.0
	for r := range b.B {
		lens := map[int32]int{}
		for _, s := range b.Segments[r*b.S : (r+1)*b.S] {
			if s != 0 {
				lens[s]++
			}
		}
		for _, n := range lens {
			tokens += n
			pairs += float64(n) * float64(n+1) / 2
		}
	}
	return 3 * (denseFLOPs(c)*float64(tokens) + attnFLOPs(c, pairs) + headFLOPs(c, heads))
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
	benchSFT(b, benchShape(), batches, MatmulFP32, KernelName())
}

// BenchmarkSFTStepBF16 is BenchmarkSFTStep with bf16 products (skipped
// without AVX512_BF16: the plain-Go bf16 kernel is for tests), and
// BenchmarkSFTStepDemo both precisions on the demo recipe's shape (width
// 256, 4 layers), whose larger products take a larger share of a step.
func BenchmarkSFTStepBF16(b *testing.B) {
	if !BF16Native() {
		b.Skip("no AVX512_BF16 on this CPU: bf16 would run the plain-Go kernel")
	}
	benchSFT(b, benchShape(), benchBatches(400), MatmulBF16, bf16Fast.name)
}

func BenchmarkSFTStepDemo(b *testing.B) {
	batches := benchBatches(400)
	modes := []string{MatmulFP32}
	if BF16Native() {
		modes = append(modes, MatmulBF16)
	}
	for _, mode := range modes {
		b.Run("matmul="+mode, func(b *testing.B) { benchSFT(b, demoShape(), batches, mode, KernelName()) })
	}
}

// benchSFT runs the SFT step benchmark on shape with products in mode.
func benchSFT(b *testing.B, shape Config, batches []sftBatch, mode, kernel string) {
	for _, head := range []string{"targets", "full"} {
		b.Run("kernel="+kernel+"/head="+head, func(b *testing.B) {
			m, err := New(shape, 1)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := m.SetMatmul(mode); err != nil {
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
			real, padded, flops := 0, 0, 0.0
			b.ResetTimer()
			start, cpu0 := time.Now(), cpuSeconds()
			for i := 0; i < b.N; i++ {
				step(i)
				bt := batches[i%len(batches)]
				real += bt.Real
				padded += bt.B * bt.S
				flops += sftFLOPs(m.Config, bt.Batch, len(prep[i%len(batches)].idx))
			}
			secs := time.Since(start).Seconds()
			b.ReportMetric(float64(real)/secs, "real_tok/s")
			b.ReportMetric(float64(real)/(cpuSeconds()-cpu0), "real_tok/cpu-s")
			b.ReportMetric(1-float64(real)/float64(padded), "pad_frac")
			b.ReportMetric(flops/float64(real), "flop/tok")
			b.ReportMetric(flops/secs/1e9, "model_GFLOP/s")
		})
	}
}

// BenchmarkSFTStepPair measures bf16 against float32 with their steps
// interleaved in one process: the two models train on the same batches,
// one step each in turn (which goes first alternates), each step's CPU
// and wall time summed apart. Load that drifts on a shared host (another
// tenant, the CPU's clock) then falls on both alike, so the ratio
// bf16_over_fp32 (real tokens per CPU-second, bf16 / float32) is steadier
// than two separate rows' quotient. Skipped without AVX512_BF16.
func BenchmarkSFTStepPair(b *testing.B) {
	if !BF16Native() {
		b.Skip("no AVX512_BF16 on this CPU: bf16 would run the plain-Go kernel")
	}
	batches := benchBatches(400)
	for _, sh := range []struct {
		name  string
		shape Config
	}{{"bench", benchShape()}, {"demo", demoShape()}} {
		for _, head := range []string{"targets", "full"} {
			b.Run("shape="+sh.name+"/head="+head, func(b *testing.B) { benchSFTPair(b, sh.shape, batches, head == "full") })
		}
	}
}

func benchSFTPair(b *testing.B, shape Config, batches []sftBatch, fullHead bool) {
	type side struct {
		m        *Model
		opt      *AdamW
		cpu, sec float64
	}
	var sides [2]*side
	for i, mode := range []string{MatmulFP32, MatmulBF16} {
		m, err := New(shape, 1)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := m.SetMatmul(mode); err != nil {
			b.Fatal(err)
		}
		sides[i] = &side{m: m, opt: NewAdamW(m, AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.01, ClipNorm: 1})}
	}
	step := func(s *side, i int) {
		bt := batches[i%len(batches)]
		idx, t, w := bt.headTargets(fullHead)
		start, cpu0 := time.Now(), cpuSeconds()
		s.m.ZeroGrad()
		if err := s.m.Forward(bt.Batch); err != nil {
			b.Fatal(err)
		}
		if _, err := s.m.CrossEntropyBackward(idx, t, w); err != nil {
			b.Fatal(err)
		}
		s.opt.Step(s.m, 1e-4)
		s.cpu += cpuSeconds() - cpu0
		s.sec += time.Since(start).Seconds()
	}
	for i := range 5 { // warm-up: buffers grow to size
		step(sides[0], i)
		step(sides[1], i)
	}
	for _, s := range sides {
		s.cpu, s.sec = 0, 0
	}
	real := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		first := i % 2
		step(sides[first], i)
		step(sides[1-first], i)
		real += batches[i%len(batches)].Real
	}
	f32, b16 := sides[0], sides[1]
	b.ReportMetric(float64(real)/f32.cpu, "fp32_tok/cpu-s")
	b.ReportMetric(float64(real)/b16.cpu, "bf16_tok/cpu-s")
	b.ReportMetric(f32.cpu/b16.cpu, "bf16_over_fp32")
	b.ReportMetric(f32.sec/b16.sec, "bf16_over_fp32_wall")
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
			var decodeSecs float64
			b.ResetTimer()
			start, cpu0 := time.Now(), cpuSeconds()
			for it := 0; it < b.N; it++ {
				for i := range rows {
					c.Reset(i)
				}
				m.PackWeights(c) // once per prefill, as the policy's decoder does (engine_native.go)
				logits, err := m.Extend(c, all, prompts)
				if err != nil {
					b.Fatal(err)
				}
				decodeSecs += decodeGreedy(b, m, c, all, logits, newTokens)
			}
			secs := time.Since(start).Seconds()
			n := float64(b.N * rows * newTokens)
			// Per row: the prompt's prefill, then newTokens decode steps
			// (each attends to the row so far and runs the LM head; the
			// prefill runs it at the prompt's last token).
			pairs := float64(promptLen) * float64(promptLen+1) / 2
			for t := range newTokens {
				pairs += float64(promptLen + t + 1)
			}
			perRow := denseFLOPs(cfg)*float64(promptLen+newTokens) + attnFLOPs(cfg, pairs) + headFLOPs(cfg, 1+newTokens)
			b.ReportMetric(n/secs, "new_tok/s")
			b.ReportMetric(n/(cpuSeconds()-cpu0), "new_tok/cpu-s")
			b.ReportMetric(n/decodeSecs, "decode_tok/s")
			b.ReportMetric(perRow/newTokens, "flop/tok")
			b.ReportMetric(perRow*float64(b.N*rows)/secs/1e9, "model_GFLOP/s")
		})
	}
}

// BenchmarkGenerateShared measures generation as step-wise PPO runs it:
// 8 states' 448-token prompts, each prefilled once, K=4 rows per state
// (32 rows) then decoding 96 new tokens each (greedy). fork=copy gives
// each row a copy of its prompt's cache row (CopyRow: every row's decode
// reads its own copy of the prompt's keys and values); fork=share lets
// the 4 rows share it (Share: one product per state reads them once).
// new_tok/s counts the new tokens over the whole time, prefill included.
func BenchmarkGenerateShared(b *testing.B) {
	const states, k, promptLen, newTokens = 8, 4, 448, 96
	cfg := ppoShape()
	m, err := New(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	for _, fork := range []string{"copy", "share"} {
		b.Run("kernel="+KernelName()+"/fork="+fork, func(b *testing.B) {
			r := rand.New(rand.NewPCG(5, 6))
			prompts, firsts := make([][]int32, states), make([]int, states)
			for i := range prompts {
				prompts[i] = randTokens(r, promptLen, cfg.Vocab)
				firsts[i] = i * k
			}
			rows := states * k
			all := make([]int, rows)
			for i := range all {
				all[i] = i
			}
			c, err := m.NewCache(rows, promptLen+newTokens)
			if err != nil {
				b.Fatal(err)
			}
			logits := make([]float32, rows*cfg.Vocab) // each row's first logits, its prompt's
			var decodeSecs float64
			b.ResetTimer()
			start, cpu0 := time.Now(), cpuSeconds()
			for it := 0; it < b.N; it++ {
				for i := range rows {
					c.Reset(i)
				}
				m.PackWeights(c) // once per prefill, as the policy's decoder does (engine_native.go)
				first, err := m.Extend(c, firsts, prompts)
				if err != nil {
					b.Fatal(err)
				}
				for s, src := range firsts {
					for j := range k {
						if j > 0 {
							fn := c.Share
							if fork == "copy" {
								fn = c.CopyRow
							}
							if err := fn(src+j, src); err != nil {
								b.Fatal(err)
							}
						}
						copy(logits[(src+j)*cfg.Vocab:(src+j+1)*cfg.Vocab], first[s*cfg.Vocab:(s+1)*cfg.Vocab])
					}
				}
				decodeSecs += decodeGreedy(b, m, c, all, logits, newTokens)
			}
			secs := time.Since(start).Seconds()
			n := float64(b.N * rows * newTokens)
			b.ReportMetric(n/secs, "new_tok/s")
			b.ReportMetric(n/(cpuSeconds()-cpu0), "new_tok/cpu-s")
			b.ReportMetric(n/decodeSecs, "decode_tok/s")
		})
	}
}

// decodeGreedy runs n greedy decode steps on cache rows all, starting
// from logits (Vocab per row, in the order of all), and returns their wall
// seconds.
func decodeGreedy(b *testing.B, m *Model, c *Cache, all []int, logits []float32, n int) float64 {
	v := m.Config.Vocab
	toks := make([]int32, len(all))
	t0 := time.Now()
	for range n {
		for i := range all {
			toks[i] = argmax(logits[i*v : (i+1)*v])
		}
		var err error
		if logits, err = m.Decode(c, all, toks); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(t0).Seconds()
}

// ppoShape is the demo policy (policy.DemoConfig with a 4,096-id
// vocabulary): a 448-token prompt and a 160-token response fit its
// 640-token context.
func ppoShape() Config {
	return Config{Vocab: 4096, DModel: 256, Heads: 4, Layers: 4, FFN: 1024, Ctx: 640}
}

// ppoBatch is one PPO learner minibatch: its packing, the head positions
// (per sample: its last prompt token, whose value is V(s) and whose
// logits score the first action token, then each action token but the
// last) with their targets, and where each sample's value is among them.
type ppoBatch struct {
	Batch
	idx, targets []int32
	valueAt      []int
	real, sample int // tokens the engine processes; prompt+action tokens of every sample
}

// ppoBatches packs states x k samples (seeded: prompts of 400-448
// tokens, actions of 40-96) twice: each sample alone with a copy of its
// prompt, one per row (as train's pack does today), and each state's
// prompt once with its k actions after it (Batch.Prefix), one state per
// row. Both give the same head positions in the same order.
func ppoBatches(states, k int, seed uint64) (unshared, shared ppoBatch) {
	r := rand.New(rand.NewPCG(seed, 7))
	vocab := ppoShape().Vocab
	type state struct {
		prompt  []int32
		actions [][]int32
	}
	sts := make([]state, states)
	for i := range sts {
		sts[i].prompt = randTokens(r, 400+r.IntN(49), vocab)
		for range k {
			sts[i].actions = append(sts[i].actions, randTokens(r, 40+r.IntN(57), vocab))
		}
	}
	pack := func(rows [][]int, share bool) ppoBatch { // rows: per row, its states' samples (state*k + j)
		var pb ppoBatch
		width := 0
		for _, row := range rows {
			n := 0
			for si, s := range row {
				st := sts[s/k]
				if !share || si == 0 {
					n += len(st.prompt)
				}
				n += len(st.actions[s%k])
			}
			width = max(width, n)
		}
		width = (width + 31) / 32 * 32
		pb.Batch = Batch{B: len(rows), S: width}
		size := pb.B * width
		pb.Tokens, pb.Positions, pb.Segments = make([]int32, size), make([]int32, size), make([]int32, size)
		if share {
			pb.Prefix = make([]int32, size)
		}
		for ri, row := range rows {
			at, seg := ri*width, int32(0)
			put := func(toks []int32, pos0, prefix int32) {
				seg++
				for j, t := range toks {
					pb.Tokens[at], pb.Positions[at], pb.Segments[at] = t, pos0+int32(j), seg
					if share {
						pb.Prefix[at] = prefix
					}
					at++
				}
				pb.real += len(toks)
			}
			last := 0
			for si, s := range row {
				st, a := sts[s/k], sts[s/k].actions[s%k]
				p := int32(len(st.prompt))
				switch {
				case !share:
					put(st.prompt, 0, 0)
					seg--
					last = at - 1
					put(a, p, 0)
				case si == 0:
					put(st.prompt, 0, 0)
					last = at - 1
					put(a, p, 1)
				default:
					put(a, p, 1)
				}
				pb.sample += len(st.prompt) + len(a)
				pb.valueAt = append(pb.valueAt, len(pb.idx))
				pb.idx, pb.targets = append(pb.idx, int32(last)), append(pb.targets, a[0])
				for t := 1; t < len(a); t++ {
					pb.idx, pb.targets = append(pb.idx, int32(at-len(a)+t-1)), append(pb.targets, a[t])
				}
			}
		}
		return pb
	}
	var alone, byState [][]int
	for s := range states * k {
		alone = append(alone, []int{s})
	}
	for i := range states {
		var row []int
		for j := range k {
			row = append(row, i*k+j)
		}
		byState = append(byState, row)
	}
	return pack(alone, false), pack(byState, true)
}

// ppoLossGrad is a PPO-shaped loss on the heads' outputs, written into
// dLogits and dValues: the clipped surrogate of each action token's
// log-probability (advantage ±1, old log-probability a little off the
// current one), an entropy bonus and the value error. It costs what a
// host PPO loss costs: one softmax per action token.
func ppoLossGrad(logits, values, dLogits, dValues []float32, targets []int32, valueAt []int, vocab int) {
	const clip, entCoef, vfCoef = 0.2, 0.01, 0.5
	inv := 1 / float32(len(targets))
	for i, t := range targets {
		z, dz := logits[i*vocab:(i+1)*vocab], dLogits[i*vocab:(i+1)*vocab]
		copy(dz, z)
		mx := kern.max(dz)
		sum := kern.expShift(dz, mx, 1) // dz = exp(z - mx)
		kern.scale(dz, 1/sum)           // dz = p
		lse := mx + float32(math.Log(float64(sum)))
		var h float32
		for j, p := range dz {
			h -= p * (z[j] - lse)
		}
		logp := z[t] - lse
		adv := float32(1 - 2*(i%2))
		ratio := float32(math.Exp(float64(logp - (logp + 0.05*float32(i%3-1)))))
		dLogp := float32(0)
		if ratio >= 1-clip && ratio <= 1+clip {
			dLogp = -adv * ratio * inv
		}
		for j, p := range dz {
			dz[j] = dLogp*p + entCoef*inv*p*((z[j]-lse)+h)
		}
		dz[t] -= dLogp
	}
	clear(dValues)
	for _, at := range valueAt {
		dValues[at] = vfCoef * (values[at] - 0.5) / float32(len(valueAt))
	}
}

// BenchmarkPPOLearner measures PPO learner steps on the demo shape: 4
// states x K=8 actions of 40-96 tokens on 400-448-token prompts, the LM
// head at the 2,200-odd action positions and the value head at each
// sample's last prompt token, a PPO-shaped host loss, backward and AdamW.
// "unshared" packs each sample with its own copy of the prompt (32 rows);
// "shared" packs each state's prompt once with its 8 actions after it
// (Batch.Prefix, 4 rows). "sft" is the SFT step on the unshared packing
// with the same head positions (fused cross-entropy): the SFT rate of the
// same engine and shape. real_tok/s counts the tokens the engine
// processes, sample_tok/s the prompt+action tokens of every sample (what
// the step represents). Where the CPU has AVX512_BF16 the three steps
// also run with bf16 products (kernel=avx512-bf16/...): make bench's bf16
// column of these rows.
func BenchmarkPPOLearner(b *testing.B) {
	unshared, shared := ppoBatches(4, 8, 1)
	kernels := []struct{ name, matmul string }{{KernelName(), MatmulFP32}}
	if BF16Native() {
		kernels = append(kernels, struct{ name, matmul string }{bf16Fast.name, MatmulBF16})
	}
	for _, kn := range kernels {
		for _, tc := range []struct {
			name string
			pb   ppoBatch
			sft  bool
		}{{"sft", unshared, true}, {"unshared", unshared, false}, {"shared", shared, false}} {
			benchPPOLearner(b, kn.name, kn.matmul, tc.name, tc.pb, tc.sft)
		}
	}
}

// benchPPOLearner is one case of BenchmarkPPOLearner: the step on pb
// (the SFT step with sft) with products in matmul.
func benchPPOLearner(b *testing.B, kernel, matmul, name string, pb ppoBatch, sft bool) {
	b.Run("kernel="+kernel+"/"+name, func(b *testing.B) {
		cfg := ppoShape()
		m, err := New(cfg, 1)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := m.SetMatmul(matmul); err != nil {
			b.Fatal(err)
		}
		opt := NewAdamW(m, AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.01, ClipNorm: 1})
		var dLogits, dValues []float32
		step := func() {
			m.ZeroGrad()
			if err := m.Forward(pb.Batch); err != nil {
				b.Fatal(err)
			}
			if sft {
				if _, err := m.CrossEntropyBackward(pb.idx, pb.targets, nil); err != nil {
					b.Fatal(err)
				}
			} else {
				logits, values, err := m.Heads(pb.idx)
				if err != nil {
					b.Fatal(err)
				}
				dLogits, dValues = grow(dLogits, len(logits)), grow(dValues, len(values))
				ppoLossGrad(logits, values, dLogits, dValues, pb.targets, pb.valueAt, cfg.Vocab)
				if err := m.Backward(pb.idx, dLogits, dValues); err != nil {
					b.Fatal(err)
				}
			}
			opt.Step(m, 1e-5)
		}
		step() // warm-up: buffers grow to size
		b.ResetTimer()
		start, cpu0 := time.Now(), cpuSeconds()
		for range b.N {
			step()
		}
		secs, cpu := time.Since(start).Seconds(), cpuSeconds()-cpu0
		b.ReportMetric(float64(b.N*pb.real)/secs, "real_tok/s")
		b.ReportMetric(float64(b.N*pb.sample)/secs, "sample_tok/s")
		b.ReportMetric(float64(b.N*pb.real)/cpu, "real_tok/cpu-s")
		b.ReportMetric(float64(b.N*pb.sample)/cpu, "sample_tok/cpu-s")
	})
}
