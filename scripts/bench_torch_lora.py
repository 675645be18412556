#!/usr/bin/env python3
"""PyTorch + PEFT CPU reference for policy/native BenchmarkLoRASFTBig.

Builds a Hugging Face model of the named shape with random weights
(transformers' from_config, float32), adds PEFT LoRA adapters as the Go
benchmark does (rank 16, alpha 32, dropout 0.05 on q, k, v, o, gate, up and
down projections; the base frozen), and times SFT steps on the demo
recipe's lengths: rows of BOS + 448 prompt + 160 response tokens (609, one
example per row, no padding), the LM head applied only at the 160 positions
that predict the response, mean cross-entropy there, backward, AdamW (betas
0.9/0.999, clipping at 1.0). With "recompute" the blocks use gradient
checkpointing (non-reentrant), the counterpart of the native engine's
Recompute. Prints one JSON line: seconds per step (wall and CPU of this
process) and the peak resident memory (ru_maxrss).

Usage: bench_torch_lora.py <qwen2.5-0.5b|smollm2-135m|qwen3-0.6b> [rows] [recompute|keep] [threads] [steps]

Needs torch, transformers and peft (the .deps/pyref virtual environment).
"""
import json
import resource
import sys
import time

import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config

PROMPT, RESPONSE = 448, 160


def make_config(shape):
    common = dict(hidden_act="silu", max_position_embeddings=1024, tie_word_embeddings=True)
    if shape == "qwen2.5-0.5b":
        return Qwen2Config(vocab_size=151936, hidden_size=896, num_attention_heads=14, num_key_value_heads=2,
                           num_hidden_layers=24, intermediate_size=4864, rms_norm_eps=1e-6, rope_theta=1e6, **common)
    if shape == "smollm2-135m":
        return LlamaConfig(vocab_size=49152, hidden_size=576, num_attention_heads=9, num_key_value_heads=3, head_dim=64,
                           num_hidden_layers=30, intermediate_size=1536, rms_norm_eps=1e-5, rope_theta=100000, **common)
    if shape == "qwen3-0.6b":
        return Qwen3Config(vocab_size=151936, hidden_size=1024, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                           num_hidden_layers=28, intermediate_size=3072, rms_norm_eps=1e-6, rope_theta=1e6, **common)
    raise SystemExit(f"unknown shape {shape}")


def main():
    shape = sys.argv[1]
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    recompute = (sys.argv[3] if len(sys.argv) > 3 else "recompute") == "recompute"
    threads = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    steps = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(make_config(shape), dtype=torch.float32, attn_implementation="sdpa")
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, bias="none", task_type="CAUSAL_LM",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    model = get_peft_model(model, lora)
    if recompute:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    n = 1 + PROMPT + RESPONSE
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (rows, n), generator=g)
    base = model.get_base_model()

    def step():
        opt.zero_grad(set_to_none=True)
        h = base.model(input_ids=ids).last_hidden_state
        # The LM head only at the positions that predict the response.
        hr = h[:, PROMPT:PROMPT + RESPONSE]
        logits = base.lm_head(hr)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, PROMPT + 1:PROMPT + RESPONSE + 1].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return float(loss.detach())

    t0 = time.time()
    step()  # warm-up
    first = time.time() - t0
    w0, c0 = time.time(), time.process_time()
    for _ in range(steps):
        step()
    wall, cpu = (time.time() - w0) / steps, (time.process_time() - c0) / steps
    print(json.dumps({
        "shape": shape, "rows": rows, "recompute": recompute, "threads": threads, "steps": steps,
        "s_per_step": round(wall, 2), "cpu_s_per_step": round(cpu, 2), "first_step_s": round(first, 1),
        "tok_per_cpu_s": round(rows * n / cpu, 2),
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3),
        "trainable": sum(p.numel() for p in params), "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()
