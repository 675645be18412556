// Package policy is the trained agent. Start with [Policy] (policy.go):
// the one thing that says what a policy is (its tokenizer, vocabulary,
// chat format and architecture) and that the stages ask to encode
// prompts and responses, decode, stop and build engines: mlerl's own
// model ([NewMLERL]) or a Hugging Face checkpoint folder ([OpenHF],
// policy_hf.go: Llama, Qwen2, Qwen3 with their own tokenizer and chat
// format, LoRA or full fine-tuning from tuning.go, PEFT adapters in and
// out, merged folders), or a GGUF file run as the checkpoint it converts
// to ([OpenGGUF], policy/gguf; [Policy.WriteGGUF] writes one). Then: a decoder-only transformer with
// rotary positions (config.go), its two engines behind one interface
// (engine.go: the native CPU engine of policy/native, the default on CPU,
// and GoMLX for XLA on a GPU, every architecture of policy/native
// (engine_gomlx_hf.go; engine_gomlx_policy.go builds it for a Hugging
// Face policy); buildEngine is where the engine key chooses),
// checkpoints both engines read (checkpoint.go; a Hugging Face policy's
// add policy.json and the PEFT adapter), the tokenizer and the trimmed
// vocabulary with byte fallback (tokenizer.go, vocab.go), the one prompt-fitting rule that
// SFT, PPO and evaluation share (prompt.go), batched generation with a KV
// cache (generate.go), the MLAB action grammar that constrains decoding
// (grammar.go), and the policy as an env/agents.Agent (agent.go).
// precision.go is the one place where `auto` (base_storage, matmul)
// becomes bf16 or fp32 from the CPU, once per stage (docs/precision.md).
package policy
