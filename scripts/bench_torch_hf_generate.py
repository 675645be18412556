#!/usr/bin/env python3
"""PyTorch + transformers CPU reference for policy/native
BenchmarkGenerateBig: greedy generation on a Hugging Face shape with
random weights.

    bench_torch_hf_generate.py SHAPE --batch 1|32 [--reps N]
    common: [--threads T] [--modes eager-fp32,eager-bf16] [--bf16 auto|force|off] [--max-seconds S]

SHAPE is one of bench_torch_lora.py's (qwen2.5-0.5b, smollm2-135m,
qwen3-0.6b): transformers' model built by from_config (float32, SDPA
attention), random weights. --batch 1: one 300-token random prompt, then
128 new tokens. --batch 32: 4 prompts of 300 tokens prefilled once as a
batch of 4, each prompt's cache rows copied to its 8 rows
(DynamicCache.batch_repeat_interleave: what a PyTorch loop does; the
native engine's Cache.Share reads them in place instead), then 64 new
tokens per row. The loop is the model's own forward with its
DynamicCache, as generate() runs it, without generate()'s logits
processors: the prefill computes the LM head at the last prompt token
only (logits_to_keep=1), each decode step feeds one token per row, and
the next token is the argmax.

Only the eager modes run: torch.compile of a transformers model with a
growing DynamicCache recompiles as the cache grows (a StaticCache and
mode="reduce-overhead" would be its compiled setting, minutes of
compiling per shape); compile modes print "not run".

Prints one JSON line per mode (bench_torch_common.py's fields, then):
new tokens/s over the whole time (prefill included) and over the decode
steps only, new tokens per CPU-second of this process, as the Go
benchmark reports them, and peak_rss_gib, the process's peak resident
memory (VmHWM, reset before the model is built; the imported libraries
included). The warm-up is one prefill and 4 decode steps. max_seconds:
after the first timed generation no new one starts once it has passed.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_torch_common as common  # noqa: E402
from bench_torch_lora import make_config, peak_rss_gib, reset_peak_rss  # noqa: E402

PROMPT = 300


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("shape", help="qwen2.5-0.5b, smollm2-135m or qwen3-0.6b")
    p.add_argument("--batch", type=int, choices=(1, 32), default=1, help="1: one prompt; 32: 4 prompts x 8 rows")
    p.add_argument("--reps", type=int, default=2, help="timed generations per mode")
    common.add_args(p)
    args = p.parse_args()
    from transformers import AutoModelForCausalLM, DynamicCache

    prompts_n, per, new = (1, 1, 128) if args.batch == 1 else (4, 8, 64)
    rows = prompts_n * per
    bench = f"hf-{args.shape}-gen-b{rows}"
    cfg = make_config(args.shape)

    def one(mode):
        reset_peak_rss()
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="sdpa").eval()
        g = torch.Generator().manual_seed(1)
        prompts = torch.randint(0, cfg.vocab_size, (prompts_n, PROMPT), generator=g)

        def generate(n):
            """Returns the decode steps' wall seconds."""
            cache = DynamicCache(config=model.config)
            logits = model(input_ids=prompts, cache=cache, use_cache=True, logits_to_keep=1).logits[:, -1]
            if per > 1:  # each prompt's cache rows, copied to its rows
                cache.batch_repeat_interleave(per)
                logits = logits.repeat_interleave(per, 0)
            t0 = common.Clock()
            for _ in range(n):
                tok = logits.argmax(-1, keepdim=True)
                logits = model(input_ids=tok, cache=cache, use_cache=True).logits[:, -1]
            return t0.read()[0]

        with torch.inference_mode(), common.autocast(mode):
            generate(4)  # warm-up
            clock = common.Clock()
            decode_s, gens = 0.0, 0
            for r in range(args.reps):
                if r > 0 and clock.read()[0] > args.max_seconds:
                    break
                decode_s += generate(new)
                gens += 1
            secs, cpu = clock.read()
        n = rows * new * gens
        return {"batch": rows, "prompt": PROMPT, "new": new, "generations": gens,
                "new_tok_per_s": round(n / secs, 2), "new_tok_per_cpu_s": round(n / max(cpu, 1e-9), 2),
                "decode_tok_per_s": round(n / decode_s, 2), "peak_rss_gib": round(peak_rss_gib(), 3)}

    common.run_modes(args, bench, one, skip=common.eager_only)


if __name__ == "__main__":
    main()
