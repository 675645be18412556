// Package gguf reads and writes GGUF files, llama.cpp's model format, for
// mlerl's policy: a GGUF model runs as the Hugging Face checkpoint it
// converts to (`--policy gguf:FILE`), and what mlerl trained can be
// written back as one (`mlerl export gguf`).
//
// Start with [Load], which opens a file into a policy/hf Checkpoint: the
// architecture from general.architecture and its hyperparameters
// (llama, which covers Llama 2/3 and SmolLM2; qwen2; qwen3), the tensors
// under their Hugging Face names and layout, dequantized to float32 when
// read, the tokenizer from tokenizer.ggml.* and the chat template from
// tokenizer.chat_template. From there everything policy/hf does applies:
// the reference forward pass, PEFT adapters, merged folders (a complete
// Hugging Face folder, config.json and tokenizer.json made from the
// metadata). [Open] is the plain reader; [Write] the plain writer;
// [Export] writes a checkpoint (with its trained weights) as a GGUF file.
//
// What is checked before any tensor is read ([NewFile]): the magic and
// version (2 or 3), every count and length against the bytes the file
// has, all metadata value types (arrays of arrays included), the tensor
// table (names, 1 to 4 dimensions, a type mlerl dequantizes, offsets
// aligned to general.alignment, every tensor inside the file, none
// overlapping). [Load] then refuses, naming the key or tensor, an
// architecture it does not run (gemma3...), a missing tokenizer or chat
// template, a SentencePiece vocabulary, an unknown pre-tokenizer,
// hyperparameters the tensors contradict. Each refusal is one line
// naming the file; nothing is written.
//
// Tensor types read: F32, F16, BF16 and ggml's block quantizations Q8_0,
// Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS
// (quant.go documents their layouts): every type llama.cpp's k-quant
// mixes and legacy files hold, their fallbacks included. They are
// dequantized exactly as the gguf Python package does (bit for bit on
// testdata/quant-*.gguf; on llama.cpp's own mixes of SmolLM2, policy's
// TestLlamaCppMixes). Written: F32, F16, BF16 and Q8_0.
//
// Layout. GGUF lists a tensor's dimensions fastest first, so a Linear's
// [in, out] there is transformers' [out, in]. llama.cpp's converter
// reorders the rows of a llama model's Q and K projections for its RoPE
// (each head's two rotated halves interleaved); Load puts them back in
// transformers' order exactly as transformers' GGUF loader does, and the
// writer reorders them again for llama (permuteRows). Qwen files are not
// reordered.
//
// A split model (llama.cpp's gguf-split, NAME-00001-of-0000N.gguf ...)
// opens by its first shard as one File of every shard's tensors
// (split.go).
//
// Files by concept: format.go (types, values), reader.go (the checked
// reader), split.go (split models), quant.go (dequantization, Q8_0 quantization), tokenizer.go
// (tokenizer.ggml.* to tokenizer.json and back), model.go (GGUF to a
// Hugging Face checkpoint), writer.go and export.go (the way out).
//
// The tests compare with references made by scripts/gguf_reference.py
// with the gguf package and transformers (testdata/), committed so that
// `make test` needs no Python; TestSmolLM2 checks the real
// SmolLM2-135M-Instruct file when MLERL_SMOLLM2_GGUF names it.
package gguf
