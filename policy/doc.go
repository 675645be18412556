// Package policy is the trained agent: a decoder-only transformer with
// rotary positions (config.go), its two engines behind one interface
// (engine.go: the native CPU engine of policy/native, the default on CPU,
// and GoMLX for XLA on a GPU), checkpoints both engines read
// (checkpoint.go), the tokenizer and the trimmed vocabulary with byte
// fallback (tokenizer.go, vocab.go), the one prompt-fitting rule that
// SFT, PPO and evaluation share (prompt.go), batched generation with a KV
// cache (generate.go), the MLAB action grammar that constrains decoding
// (grammar.go), and the policy as an env/agents.Agent (agent.go).
package policy
