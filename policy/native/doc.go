// Package native is a CPU training and inference engine, in plain Go, for
// the policy's transformer: pre-LayerNorm blocks with RoPE attention over
// packed rows and an exact-GELU FFN, an LM head and a value head. It
// computes the same function as the GoMLX engine, with the same
// checkpoint variable names, and is built for small models on a few
// cores, in the spirit of llm.c's train_gpt2.c.
//
// Where to start:
//
// [Config] and [New] build a [Model]; [Model.Params] names every tensor
// (views into one flat parameter array and one gradient array) for loading
// and saving weights. A training step reads top to bottom:
//
//	m.ZeroGrad()
//	err := m.Forward(batch)                               // trunk; activations kept
//	loss, err := m.CrossEntropyBackward(idx, targets, w)  // heads, loss, backward
//	gradNorm := opt.Step(m, lr)                           // AdamW
//
// For other losses (PPO), [Model.Heads] gives logits and values at chosen
// positions and [Model.Backward] takes their gradients; [Batch.Prefix]
// packs a prompt once with the K actions sampled from it (tree
// attention). For generation, [Model.NewCache], then [Model.Extend]
// (prompts, or forced strings) and [Model.Decode] (one token per active
// row); [Cache.Share] lets other rows continue from a prefilled prompt
// without a copy (their decode reads its keys once for all of them), and
// [Cache.CopyRow] copies a row.
//
// model.go holds the forward and backward passes in model order, one
// function per layer in layers.go and attention.go. All matrix products
// go through gemm.go (packed GEMM around a register-tiled micro-kernel);
// kernels.go holds the portable kernels and kernels_simd_amd64.go the
// AVX-512 and AVX2 ones (built with GOEXPERIMENT=simd; their GEMM
// micro-kernels are assembly, micro_amd64.s), chosen at start by
// CPU features or forced with MLERL_NATIVE_KERNEL=avx512|avx2|generic.
// Work is spread over a small pool of blocking worker goroutines, one per
// GOMAXPROCS (pool.go).
//
// BenchmarkSFTStep (bench shape, the same packed batches as train's
// BenchmarkSFT; MLERL_BENCH_DATA writes them for scripts/bench_torch.py),
// BenchmarkGenerate (demo shape; scripts/bench_torch_generate.py is the
// PyTorch counterpart), BenchmarkPPOLearner (demo shape, shared and
// unshared prompts beside the SFT step), BenchmarkGemmPeak (the
// machine's GEMM peak for make bench's utilisation figures) and
// BenchmarkFMAPeak (its register-only FMA peak, fma_amd64.s: the physical
// limit the utilisation is also read against) measure
// throughput; run them with GOEXPERIMENT=simd, and GOMAXPROCS=1 for a
// one-core figure.
//
// The tests check everything against a slow float64 reference
// (reference_test.go): logits, every gradient by finite differences, the
// KV-cache decode against full re-forwards, and each kernel against plain
// loops on every kernel path this CPU has.
package native
