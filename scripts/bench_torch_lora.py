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
Recompute.

    bench_torch_lora.py SHAPE [ROWS] [recompute|keep] [--steps N] [--threads T] [--modes eager-fp32,eager-bf16] [--bf16 auto|force|off] [--max-seconds S]

SHAPE: qwen2.5-0.5b, smollm2-135m or qwen3-0.6b; ROWS default 4. Prints
one JSON line per mode (bench_torch_common.py's fields; bench
"hf-SHAPE-lora"): real tokens per second and per CPU-second of this
process over the timed steps (after one warm-up step), seconds per step,
and peak_rss_gib, the process's peak resident memory (VmHWM, reset before
the model is built; the imported libraries included). eager-bf16 runs the
step under CPU autocast (only where the CPU has avx512_bf16, as
everywhere in bench_torch_common.py); compiled modes are not measured.
max_seconds: no new timed step starts once it has passed (at least one
runs).

Needs torch, transformers and peft (the .deps/pyref virtual environment).
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_torch_common as common  # noqa: E402

PROMPT, RESPONSE = 448, 160


def make_config(shape):
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config
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


def reset_peak_rss():
    """Resets the kernel's record of this process's peak resident memory
    (VmHWM), where Linux allows it, as policy/native's resetPeakRSS does."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_rss_gib():
    """VmHWM of this process in GiB (0 where there is none)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("shape", help="qwen2.5-0.5b, smollm2-135m or qwen3-0.6b")
    p.add_argument("rows", type=int, nargs="?", default=4, help="examples per step (default 4)")
    p.add_argument("recompute", nargs="?", default="recompute", choices=("recompute", "keep"),
                   help="recompute: gradient checkpointing (default); keep: every activation kept")
    p.add_argument("--steps", type=int, default=2, help="timed steps per mode, after one warm-up step")
    common.add_args(p)
    args = p.parse_args()
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    recompute = args.recompute == "recompute"
    cfg = make_config(args.shape)
    n = 1 + PROMPT + RESPONSE

    def one(mode):
        reset_peak_rss()
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="sdpa")
        lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, bias="none", task_type="CAUSAL_LM",
                          target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
        model = get_peft_model(model, lora)
        if recompute:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.enable_input_require_grads()
        model.train()
        params = [q for q in model.parameters() if q.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
        g = torch.Generator().manual_seed(1)
        ids = torch.randint(0, cfg.vocab_size, (args.rows, n), generator=g)
        base = model.get_base_model()

        def step():
            opt.zero_grad(set_to_none=True)
            with common.autocast(mode):
                h = base.model(input_ids=ids).last_hidden_state
                # The LM head only at the positions that predict the response.
                logits = base.lm_head(h[:, PROMPT:PROMPT + RESPONSE])
                loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                       ids[:, PROMPT + 1:PROMPT + RESPONSE + 1].reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            return float(loss.detach())

        t0 = time.perf_counter()
        step()  # warm-up
        first = time.perf_counter() - t0
        clock, steps = common.Clock(), 0
        while steps < args.steps and (steps == 0 or clock.read()[0] <= args.max_seconds):
            step()
            steps += 1
        wall, cpu = clock.read()
        return {"shape": args.shape, "rows": args.rows, "recompute": recompute, "steps": steps,
                "s_per_step": round(wall / steps, 2), "cpu_s_per_step": round(cpu / steps, 2), "first_step_s": round(first, 1),
                "real_tok_per_s": round(args.rows * n * steps / wall, 2), "real_tok_per_cpu_s": round(args.rows * n * steps / cpu, 2),
                "peak_rss_gib": round(peak_rss_gib(), 3), "trainable": sum(q.numel() for q in params)}

    common.run_modes(args, f"hf-{args.shape}-lora", one, skip=common.eager_only)


if __name__ == "__main__":
    main()
