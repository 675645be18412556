// Package hf reads and writes Hugging Face decoder checkpoints for mlerl's
// policy: the safetensors format, config.json of the Llama, Qwen2 and
// Qwen3 families, the checkpoint's own tokenizer and chat format, LoRA
// adapters in PEFT's layout and merged folders transformers can load.
//
// Start with [Load], which opens a checkpoint folder into a [Checkpoint]
// (its [Arch], lazily read [Tensors], tokenizer, [ChatFormat] and stop
// ids) and refuses anything it cannot run in one line naming the file,
// field and fix. [Assemble] makes the same checks on a checkpoint whose
// small files are made in memory and whose tensors come from elsewhere:
// policy/gguf presents a GGUF file so. [Reference] is the slow, obvious float64 forward pass that
// engines test against; [ReadAdapter] / [WriteAdapter] and [WriteMerged]
// save what training made.
//
// Files by concept: safetensors.go (the format: reader with its checks,
// writer), weights.go (the Tensors interface; one file or a sharded set), config.go (the shared
// architecture and its checks, RoPE frequencies), llama.go / qwen2.go /
// qwen3.go (what each family adds), reference.go, chat.go, peft.go,
// merged.go, checkpoint.go.
//
// Weights are returned in the files' layout: a Linear's weight is
// [out, in] row-major, as torch.nn.Linear stores it; RoPE pairs dimension
// i with i + head_dim/2 (transformers' rotate_half), not adjacent pairs.
//
// The package does not depend on policy/native. Its tests compare with
// references made by scripts/hf_reference.py with transformers, PEFT and
// tokenizers (testdata/), committed so that `make test` needs no Python.
package hf
