package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl/policy/native"
)

// gpuHFShape is a Hugging Face shape for TestGPUHFShape with the demo
// recipe's lengths: a row is BOS, a prompt and a response.
type gpuHFShape struct {
	cfg              native.Config
	prompt, response int
}

// gpuHFShapes: Qwen2.5-0.5B (hidden 896, 24 layers, 14 heads, 2 KV heads
// of 64, intermediate 4864, vocab 151,936, tied, q/k/v biases, rope_theta
// 1e6) at the demo recipe's 448 + 160 tokens in 640 (as native's
// BenchmarkLoRASFTBig), and a tiny Qwen2 for a run of the same code on a
// CPU.
var gpuHFShapes = map[string]gpuHFShape{
	"qwen2.5-0.5b": {native.Config{Vocab: 151936, DModel: 896, Heads: 14, KVHeads: 2, HeadSize: 64, Layers: 24, FFN: 4864, Ctx: 640,
		RoPEBase: 1e6, Norm: native.NormRMS, NormEps: 1e-6, FFNKind: native.FFNSwiGLU, NoOutBias: true, NoFFNBias: true, NoLMBias: true,
		TiedEmbed: true}, 448, 160},
	"tiny": {native.Config{Vocab: 512, DModel: 64, Heads: 4, KVHeads: 2, HeadSize: 16, Layers: 2, FFN: 128, Ctx: 80,
		RoPEBase: 1e6, Norm: native.NormRMS, NormEps: 1e-6, FFNKind: native.FFNSwiGLU, NoOutBias: true, NoFFNBias: true, NoLMBias: true,
		TiedEmbed: true}, 48, 16},
}

// TestGPUHFShape is scripts/gpu_check.sh's Hugging Face throughput step
// (MLERL_GPU_CHECK=1): the architecture engine on a Qwen2.5-0.5B-shaped
// model with random weights (native's initial ones), on the backend
// GOMLX_BACKEND names, for each base storage: LoRA SFT steps (rank 16,
// alpha 32, dropout 0.05 on every target; the demo recipe's rows, the LM
// head at the response positions, AdamW) and generation steps (a decoder
// of 8 rows, 2 distinct prompts of 4 samples each: the shared prompt
// rows). It prints one "gpu-hf:" line per measurement; it asserts no
// timing, only that the steps run and the loss is finite.
//
// Environment: MLERL_GPU_HF_SHAPE (qwen2.5-0.5b, the default, needs a
// CUDA backend; tiny runs anywhere), MLERL_GPU_HF_BASES (comma list of
// fp32 and bf16; default both), MLERL_GPU_HF_ROWS (SFT rows, default 4),
// MLERL_GPU_HF_STEPS (timed SFT steps after the first, default 5),
// MLERL_GPU_HF_DECODE (timed decoding steps, default 64).
func TestGPUHFShape(t *testing.T) {
	if os.Getenv("MLERL_GPU_CHECK") != "1" {
		t.Skip("run by scripts/gpu_check.sh (make gpu-check) on a GPU machine; MLERL_GPU_CHECK=1 MLERL_GPU_HF_SHAPE=tiny runs it on a CPU")
	}
	name := envDefault("MLERL_GPU_HF_SHAPE", "qwen2.5-0.5b")
	shape, ok := gpuHFShapes[name]
	if !ok {
		t.Fatalf("MLERL_GPU_HF_SHAPE=%q: want qwen2.5-0.5b or tiny", name)
	}
	backend, err := NewBackend()
	if err != nil {
		t.Fatal(err)
	}
	desc := backend.Description()
	if name != "tiny" && !strings.Contains(strings.ToLower(desc), "cuda") {
		t.Fatalf("the %s shape needs a CUDA backend (GOMLX_BACKEND=xla:cuda), not %q: a step would take hours; MLERL_GPU_HF_SHAPE=tiny runs the same code on a CPU", name, desc)
	}
	rows, steps, decode := envInt(t, "MLERL_GPU_HF_ROWS", 4), envInt(t, "MLERL_GPU_HF_STEPS", 5), envInt(t, "MLERL_GPU_HF_DECODE", 64)
	lora := native.LoRAConfig{Rank: 16, Alpha: 32, Dropout: 0.05, Targets: []string{"q", "k", "v", "o", "gate", "up", "down"}}
	t0 := time.Now()
	weights, err := nativeInitialWeights(shape.cfg, lora, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, w := range weights {
		n += len(w.F32)
	}
	fmt.Printf("gpu-hf: %s, %d parameters, LoRA rank %d on every target, on %s (weights drawn in %.1fs)\n", name, n, lora.Rank, desc, time.Since(t0).Seconds())
	for _, base := range strings.Split(envDefault("MLERL_GPU_HF_BASES", "fp32,bf16"), ",") {
		t.Run("base="+base, func(t *testing.T) {
			e, err := NewGomlxEngineArch(shape.cfg, lora, GomlxArchOptions{Backend: backend, Weights: weights, Seed: 1, BaseStorage: base})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			gpuHFSFT(t, e, shape, base, rows, steps)
			gpuHFGenerate(t, e, shape, base, decode)
		})
	}
}

// gpuHFSFT times LoRA SFT steps on the demo recipe's rows; the first step
// (XLA's compilation) is reported apart.
func gpuHFSFT(t *testing.T, e Engine, shape gpuHFShape, base string, rows, steps int) {
	c := shape.cfg
	width := c.Ctx
	r := rand.New(rand.NewPCG(1, 2))
	b := Batch{B: rows, S: width, Tokens: make([]int32, rows*width), Positions: make([]int32, rows*width), Segments: make([]int32, rows*width)}
	var idx, targets []int32
	for row := range rows {
		for j := range 1 + shape.prompt + shape.response {
			at := row*width + j
			b.Tokens[at], b.Positions[at], b.Segments[at] = int32(r.IntN(c.Vocab)), int32(j), 1
		}
		for j := shape.prompt; j < shape.prompt+shape.response; j++ {
			idx, targets = append(idx, int32(row*width+j)), append(targets, b.Tokens[row*width+j+1])
		}
	}
	weights := make([]float32, len(idx))
	for i := range weights {
		weights[i] = 1
	}
	var lossTime time.Duration
	inner := sftLoss(targets, weights, c.Vocab)
	loss := func(logits, values, dLogits, dValues []float32) float64 {
		t0 := time.Now()
		defer func() { lossTime += time.Since(t0) }()
		return inner(logits, values, dLogits, dValues)
	}
	e.SetOptim(OptimConfig{LR: 1e-4, Beta1: 0.9, Beta2: 0.999, ClipNorm: 1})
	t0 := time.Now()
	l, _, err := e.TrainStep(b, idx, loss, 1e-4)
	if err != nil {
		t.Fatal(err)
	}
	first := time.Since(t0)
	lossTime = 0
	t1 := time.Now()
	for range steps {
		if l, _, err = e.TrainStep(b, idx, loss, 1e-4); err != nil {
			t.Fatal(err)
		}
	}
	per := time.Since(t1).Seconds() / float64(max(steps, 1))
	if math.IsNaN(l) || math.IsInf(l, 0) {
		t.Fatalf("SFT loss %v", l)
	}
	fmt.Printf("gpu-hf: base %s: LoRA SFT %dx%d (%d heads): %.3f s/step, %.2f steps/s, %.0f real tok/s (host loss %.3f s/step; first step %.1fs with compilation; loss %.3f)\n",
		base, rows, width, len(idx), per, 1/per, float64(rows*(1+shape.prompt+shape.response))/per,
		lossTime.Seconds()/float64(max(steps, 1)), first.Seconds(), l)
}

// gpuHFGenerate times a decoder of 8 rows: 2 distinct prompts (computed
// once each, their caches gathered into 4 rows each), then one token per
// row and step.
func gpuHFGenerate(t *testing.T, e Engine, shape gpuHFShape, base string, steps int) {
	c := shape.cfg
	const rows = 8
	steps = min(steps, c.Ctx-1-shape.prompt)
	r := rand.New(rand.NewPCG(3, 4))
	var prompts [][]int32
	for range 2 {
		p := make([]int32, 1+shape.prompt)
		for j := range p {
			p[j] = int32(r.IntN(c.Vocab))
		}
		for range rows / 2 {
			prompts = append(prompts, slices.Clone(p))
		}
	}
	d, err := e.NewDecoder(rows)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	t0 := time.Now()
	logits, err := d.Prefill(prompts)
	if err != nil {
		t.Fatal(err)
	}
	prefill := time.Since(t0)
	next := make([][]int32, rows)
	pick := func() {
		for i := range next {
			next[i] = []int32{argmaxF32(logits[i*c.Vocab : (i+1)*c.Vocab])}
		}
	}
	pick()
	if logits, err = d.Extend(next); err != nil { // compiles the decode graph
		t.Fatal(err)
	}
	t1 := time.Now()
	for range steps {
		pick()
		if logits, err = d.Extend(next); err != nil {
			t.Fatal(err)
		}
	}
	per := time.Since(t1).Seconds() / float64(max(steps, 1))
	fmt.Printf("gpu-hf: base %s: generation, %d rows (2 prompts of %d tokens): %.2f decode steps/s, %.0f new tok/s (first prefill %.1fs with compilation)\n",
		base, rows, 1+shape.prompt, 1/per, rows/per, prefill.Seconds())
}

func envDefault(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a whole number", name, v)
	}
	return n
}
