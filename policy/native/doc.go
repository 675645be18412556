// Package native is a CPU training and inference engine, in plain Go, for
// decoder-only transformers: mlerl's own policy (pre-LayerNorm blocks
// with RoPE attention over packed rows, an exact-GELU FFN, biases, an
// untied LM head) and the Hugging Face families Llama (Llama 3.x,
// SmolLM2), Qwen2 (Qwen2.5) and Qwen3, each with a value head; full
// fine-tuning or LoRA. It computes the same function as the GoMLX engine
// for mlerl's model, with the same checkpoint variable names, and is built
// for small models on a few cores, in the spirit of llm.c's
// train_gpt2.c.
//
// Where to start:
//
// [Config] and [New] build a [Model] ([NewWithOptions]: LoRA adapters, a
// frozen base's storage, recomputation); [Model.Params] names every
// tensor (views into flat arrays) for loading and saving weights, and
// [Model.SetParam] / [Model.SetParamOutIn] write one by name. A training
// step reads top to bottom:
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
// without a copy (their decode reads its keys once for all of them),
// [Cache.CopyRow] copies a row, and [Cache.Reserve] sizes a row's own
// storage for the tokens it will hold (each row holds only its own
// slots, a sharing row none of the prompt's).
//
// # Architectures
//
// The fields of [Config] after Ctx choose the architecture; their zero
// values are mlerl's model. The families set them so (with the shape
// fields from config.json: hidden_size DModel, num_attention_heads Heads,
// num_hidden_layers Layers, intermediate_size FFN, vocab_size Vocab,
// rope_theta RoPEBase):
//
//	                 Llama / SmolLM2     Qwen2 (2.5)         Qwen3
//	Norm             NormRMS             NormRMS             NormRMS
//	NormEps          rms_norm_eps        rms_norm_eps        rms_norm_eps
//	FFNKind          FFNSwiGLU           FFNSwiGLU           FFNSwiGLU
//	KVHeads          num_key_value_heads num_key_value_heads num_key_value_heads
//	HeadSize         head_dim (or D/H)   D/H                 head_dim
//	NoQKVBias        true                false               true
//	NoOutBias        true                true                true
//	NoFFNBias        true                true                true
//	NoLMBias         true                true                true
//	QKNorm           false               false               true
//	TiedEmbed        tie_word_embeddings tie_word_embeddings tie_word_embeddings
//	InvFreq          Llama 3's rope_scaling table, else nil (RoPEBase)
//
// RMSNorm is x·rsqrt(mean(x²)+eps)·w in float32 as Hugging Face computes
// it; SwiGLU is down(silu(gate(x))·up(x)); RoPE rotates the first half of
// each head against the second (rotate_half); query head h reads key/value
// head h/(Heads/KVHeads); Qwen3's q/k norm is an RMSNorm over each head
// before RoPE. Each layer kind has one forward and one backward function
// (layers.go, attention.go); a block (model.go blockForward,
// blockBackward) only chooses among them, and the decoder (cache.go)
// runs the same ones.
//
// # Parameters
//
// Weights are kept in the dense convention [in, out] (y = x·W + b), so a
// Hugging Face (PyTorch) Linear weight [out, in] is transposed once at
// load: SetParamOutIn does it, ParamOutIn gives it back for saving.
// Names, with their Hugging Face counterparts ({l} a layer; "model."
// prefixes as in the checkpoints):
//
//	native                                        Hugging Face                                layout
//	/token_embed/embeddings [V, D]                model.embed_tokens.weight [V, D]            as is
//	/block_{l}/ln_attn/rms_normalization/gain     model.layers.{l}.input_layernorm.weight     as is
//	/block_{l}/q/dense/weights [D, H·dh]          ...self_attn.q_proj.weight [H·dh, D]        transposed
//	/block_{l}/q/dense/biases [H·dh]              ...self_attn.q_proj.bias (Qwen2)            as is
//	/block_{l}/k/dense/weights [D, KV·dh]         ...self_attn.k_proj.weight                  transposed
//	/block_{l}/k/dense/biases                     ...self_attn.k_proj.bias (Qwen2)            as is
//	/block_{l}/v/dense/weights, biases            ...self_attn.v_proj.weight, bias            transposed, as is
//	/block_{l}/q_norm/rms_normalization/gain [dh] ...self_attn.q_norm.weight (Qwen3)          as is
//	/block_{l}/k_norm/rms_normalization/gain [dh] ...self_attn.k_norm.weight (Qwen3)          as is
//	/block_{l}/out/dense/weights [H·dh, D]        ...self_attn.o_proj.weight [D, H·dh]        transposed
//	/block_{l}/ln_ffn/rms_normalization/gain      ...post_attention_layernorm.weight          as is
//	/block_{l}/ffn_gate/dense/weights [D, F]      ...mlp.gate_proj.weight [F, D]              transposed
//	/block_{l}/ffn_up/dense/weights [D, F]        ...mlp.up_proj.weight [F, D]                transposed
//	/block_{l}/ffn_down/dense/weights [F, D]      ...mlp.down_proj.weight [D, F]              transposed
//	/ln_final/rms_normalization/gain              model.norm.weight                           as is
//	/lm_head/dense/weights [D, V] (untied only)   lm_head.weight [V, D]                       transposed
//	/value_head/dense/weights [D, 1], biases [1]  (none: PPO's critic, freshly initialised)
//	/block_{l}/{q,k,v,out,ffn_gate,ffn_up,ffn_down}/lora_a [in, r]   ...{q,k,v,o,gate,up,down}_proj.lora_A.weight [r, in]   transposed
//	/block_{l}/{...}/lora_b [r, out]              ...lora_B.weight [out, r]                   transposed
//
// mlerl's own model has, per block, ln_attn and ln_ffn as
// .../layer_normalization/gain and offset, q, k, v, out, ffn_in and
// ffn_out each with dense/weights and dense/biases, and /lm_head/dense
// weights and biases: the GoMLX engine's names, unchanged. A tied model
// has no /lm_head tensors (its logits are h·Eᵀ); a layer without a bias
// lists none. Params lists the base in model order, the value head, then
// the adapters.
//
// # LoRA and a frozen base
//
// [Options].LoRA adds adapters y = x·W + b + (alpha/r)·dropout(x)·A·B to
// any of q, k, v, o, gate, up, down (lora.go), A uniform in ±1/sqrt(in)
// and B zero as PEFT starts them. The base is then frozen: it has no
// gradient and no AdamW moments (NumTrainable counts the adapters and the
// value head), Backward skips its weight gradients and still carries the
// input gradient through it. Dropout draws a mask per layer, adapter and
// training Forward ([Model.SetTraining]; evaluation, Heads and decoding
// use none) from the model's seed, recomputable rather than stored.
// [Model.MergeLoRA] folds W += (alpha/r)·A·B for saving a merged model.
// Without adapters every weight trains (full fine-tuning).
//
// A frozen base may be stored in bfloat16 (Options.BaseStorage bf16):
// half the memory of its matrices, read directly by the bf16 products
// (bf16.go; the model is set to bf16 products). A float32 product on such
// a matrix (decoding, or fewer than gemmSmallM rows) widens it as it
// packs it: exact, but a bf16 base decodes more slowly than a float32
// one. [Options].Frozen freezes a base without adapters, so that a base
// model can be built in the storage of a LoRA model: fresh adapters (B
// zero) then change nothing, bit for bit, in either storage and
// precision. MergeLoRA merges into a bfloat16 base with one rounding of
// each merged weight (lora.go says how far).
//
// A frozen base may also stay in ggml's quantized blocks
// (Options.BaseStorage q8_0, q4_0 or q4_1, or per matrix
// Options.MatrixStorage: a GGUF file's tensors as the file stores them;
// SetParamBlocks takes the file's blocks as they are): a sixth (Q4) to a
// third (Q8) of float32's memory. Q5_1, the K-quants and IQ4_XS are kept
// so too (raw formats: no kernels of their own, each product
// dequantizes the rows it reads; quant.go). Products of more than gemmSmallM rows
// (prefill, the training forward, the backward pass's input gradient
// through the frozen base: QLoRA on CPU) dequantize B a block of columns
// at a time into the micro-kernel's panels, so they compute, bit for bit,
// what a float32 base holding the dequantized weights computes; products
// of fewer rows (decoding) multiply by the blocks (quant_amd64.s: the
// nibbles through a VPERMPS table, scales converted 16 at a time) within
// QuantTolerance of that, or with SetQuantActivations int8 quantize
// their input per block and sum in integers as llama.cpp does
// (AVX512_VNNI; within Int8Bound). quant.go, quantgemm.go and quant8.go
// say how; docs/design/quantized-base.md what each storage costs and
// gives.
//
// Precisions are given, not chosen here: BaseStorage and SetMatmul take
// fp32 or bf16, and "auto" (bf16 where the CPU has AVX512_BF16) is
// resolved by the caller where it builds the model (policy's
// ResolvePrecision, which MLERL_AUTO_PRECISION can force), so that every
// test names the arithmetic it checks and holds on every CPU; the CPU
// picks only which kernels compute it.
//
// # Memory
//
// Forward keeps every block's activations unless [Model.Recompute]
// (Options.Recompute) is set: then it keeps each block's input only and
// the backward pass recomputes one block at a time (the same bits; about
// one more forward of work). CrossEntropyBackward computes the LM head
// over positions in chunks of at most 64M logits (the same bits as one
// product), so a 150k-id vocabulary at a thousand positions does not hold
// its full logits; Heads, which returns them, does.
//
// BenchmarkLoRASFTBig (MLERL_BIG=1) measures LoRA SFT steps (rank 16 on
// every target, dropout 0.05; rows of the demo recipe, BOS + 448 prompt +
// 160 response tokens in 640; LM head at the responses; AdamW) with
// random weights. On the AMD EPYC (Zen 3, AVX2) with 2 vCPUs shared with
// other jobs (load 9-15, so wall time was 2-2.5x the CPU time):
//
//	shape          rows  recompute  cpu-s/step  peak RSS
//	Qwen2.5-0.5B   8     yes        175         4.0 GiB
//	Qwen2.5-0.5B   4     yes         84         3.4 GiB
//	Qwen2.5-0.5B   4     no          66         9.3 GiB
//	SmolLM2-135M   8     yes         63         1.7 GiB
//	SmolLM2-135M   8     no          46         8.8 GiB
//	SmolLM2-135M   4     yes         35         1.2 GiB
//	Qwen3-0.6B     4     yes        120         4.0 GiB
//
// Without recomputation most of the memory is the attention's
// probabilities (heads x n² per example and layer) and the FFN's three
// [n, F] activations per layer. scripts/bench_torch_lora.py is the
// PyTorch + PEFT counterpart: SmolLM2-135M, 4 rows, recomputation
// (gradient checkpointing), one thread each (GOMAXPROCS=1): PyTorch 2.15
// 35.2 cpu-s per step at 4.9 GiB, native 30.3 cpu-s at 1.2 GiB. (With 2
// threads on the busy machine PyTorch's OpenMP spinning took it to 96
// cpu-s.)
//
// # Kernels
//
// All matrix products go through gemm.go (packed GEMM around a
// register-tiled micro-kernel); kernels.go holds the portable kernels and
// kernels_simd_amd64.go the AVX-512 and AVX2 ones (built with
// GOEXPERIMENT=simd; their GEMM micro-kernels are assembly,
// micro_amd64.s), chosen at start by CPU features or forced with
// MLERL_NATIVE_KERNEL=avx512|avx2|generic. LayerNorm, RMSNorm, GELU,
// SwiGLU, RoPE, softmax and AdamW have vector kernels on each path. Work
// is spread over a small pool of blocking worker goroutines, one per
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
// one-core figure. BenchmarkLoRASFTBig (MLERL_BIG=1 only) measures
// Hugging Face-sized LoRA steps: seconds and peak memory (see Memory).
//
// The tests check everything against a slow float64 reference
// (reference_test.go, every architecture and adapters): logits, every
// gradient by finite differences (full fine-tuning, and LoRA with the
// base frozen, with and without dropout), the KV-cache decode against
// full re-forwards, recomputation, chunked cross-entropy and a bf16 base
// bit for bit against their plain counterparts, and each kernel against
// plain loops on every kernel path this CPU has. TestGoldenDemoBits pins
// mlerl's own model's bits on the demo shape (testdata/golden_demo.json).
package native
