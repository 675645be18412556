#!/usr/bin/env python3
"""PyTorch CPU reference for policy/native's BenchmarkGenerate and
BenchmarkGenerateShared: greedy generation with a KV cache.

    bench_torch_generate.py --batch 1|8 [--reps N]   # BenchmarkGenerate
    bench_torch_generate.py --shared [--reps N]      # BenchmarkGenerateShared
    common: [--threads T] [--modes ...] [--bf16 auto|force|off] [--compile-mode default] [--max-seconds S]

--batch: the demo shape (4 layers, width 256, vocabulary 4,096), a
300-token random prompt per row, then 160 new tokens per row. --shared:
step-wise PPO's generation (the demo policy, ctx 640): 8 states'
448-token prompts, each prefilled once, then 4 rows per state (32 rows)
decoding 96 new tokens each; the prompt's cache rows are copied to its
4 rows (what a PyTorch loop does; the native engine's fork=share reads
them in place instead).

Eager modes keep the cache as tensors of the full length and attend to
the part written so far (a slice); compiled modes attend to the whole
cache under a mask, with the position as a tensor, so that every decode
step has the same shapes and one compiled graph serves them all, with
Inductor's freezing on (the weights folded in as constants, bf16 casts
done once: its inference setting). bf16 modes run under autocast with
bf16 caches.

Prints one JSON line per mode (see bench_torch_common.py): new tokens/s
over the whole time (prefill included) and over the decode steps only,
as the Go benchmarks report them, and new tokens per CPU-second of this
process. The warm-up is one prefill and 16 decode steps; compiled modes
also give compile_s, the warm-up's wall time beyond what its work takes
once compiled. max_seconds bounds the timed part: after the first
generation no new one starts once it has passed, and a generation still
running past 3x max_seconds stops early; its rate is then extrapolated
to the full count from the steps done and the line says "extrapolated".
"""
import argparse
import math
import time

import torch

import bench_torch_common as common


def prefill(model, tokens, caches):
    """Writes the prompts' keys and values at 0..T-1; returns the logits
    after the last prompt token."""
    t = tokens.shape[1]
    cos, sin = model.cos[:t], model.sin[:t]
    x = model.tok(tokens)
    for blk, (kc, vc) in zip(model.blocks, caches):
        q, k, v = blk.qkv(x, cos, sin)
        kc[:, :, :t] = k
        vc[:, :, :t] = v
        x = blk.finish(x, common.attend(q, k, v, causal=True))
    return model.lm_head(model.ln(x[:, -1]))


def decode_slice(model, tokens, caches, pos):
    """One token per row at position pos (an int), attending to the cache
    up to it: the eager form."""
    cos, sin = model.cos[pos:pos + 1], model.sin[pos:pos + 1]
    x = model.tok(tokens)
    for blk, (kc, vc) in zip(model.blocks, caches):
        q, k, v = blk.qkv(x, cos, sin)
        kc[:, :, pos:pos + 1] = k
        vc[:, :, pos:pos + 1] = v
        x = blk.finish(x, common.attend(q, kc[:, :, :pos + 1], vc[:, :, :pos + 1]))
    return model.lm_head(model.ln(x[:, -1]))


def decode_masked(model, tokens, caches, pos):
    """decode_slice with pos a one-element tensor and the whole cache under
    a mask: the same shapes at every step (the compiled form)."""
    cos, sin = model.cos[pos], model.sin[pos]
    x = model.tok(tokens)
    length = caches[0][0].shape[2]
    mask = (torch.arange(length) <= pos)[None, None, None, :]
    for blk, (kc, vc) in zip(model.blocks, caches):
        q, k, v = blk.qkv(x, cos, sin)
        kc.index_copy_(2, pos, k.to(kc.dtype))
        vc.index_copy_(2, pos, v.to(vc.dtype))
        x = blk.finish(x, common.attend(q, kc, vc, mask))
    return model.lm_head(model.ln(x[:, -1]))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=1, help="rows, each with its own prompt (BenchmarkGenerate: 1 or 8)")
    p.add_argument("--shared", action="store_true", help="BenchmarkGenerateShared's shape instead: 8 prompts x 4 rows")
    p.add_argument("--reps", type=int, default=3, help="timed generations per mode")
    common.add_args(p)
    args = p.parse_args()

    if args.shared:
        shape, states, per_state, prompt_len, new = "ppo", 8, 4, 448, 96
        bench = "gen-b32"
    else:
        shape, states, per_state, prompt_len, new = "demo", args.batch, 1, 300, 160
        bench = f"gen-b{args.batch}"
    rows = states * per_state
    cfg = common.SHAPES[shape]
    heads, dh = cfg["heads"], cfg["d"] // cfg["heads"]

    def one(mode):
        compiled = mode.startswith("compile")
        torch.manual_seed(1)
        model = common.Policy(**cfg).eval()
        prompts = torch.randint(4, cfg["vocab"], (states, prompt_len))
        dtype = torch.bfloat16 if mode.endswith("bf16") else torch.float32
        if compiled:
            import torch._inductor.config as inductor
            inductor.freezing = True
            pre = common.compile_fn(lambda t, c: prefill(model, t, c), args)
            dec = common.compile_fn(lambda t, c, pos: decode_masked(model, t, c, pos), args)
            step = lambda t, c, i: dec(t, c, torch.tensor([prompt_len + i]))  # noqa: E731
        else:
            pre = lambda t, c: prefill(model, t, c)  # noqa: E731
            step = lambda t, c, i: decode_slice(model, t, c, prompt_len + i)  # noqa: E731

        def generate(n, deadline=math.inf):
            """Returns (prefill seconds, decode seconds, decode steps done)."""
            caches = [tuple(torch.zeros(states, heads, prompt_len + new, dh, dtype=dtype) for _ in range(2))
                      for _ in range(cfg["layers"])]
            t0 = time.perf_counter()
            logits = pre(prompts, caches)
            if per_state > 1:  # each prompt's cache row, copied to its rows
                caches = [tuple(c.repeat_interleave(per_state, 0) for c in kv) for kv in caches]
                logits = logits.repeat_interleave(per_state, 0)
            t1 = time.perf_counter()
            done = 0
            for i in range(n):
                logits = step(logits.argmax(-1, keepdim=True), caches, i)
                done += 1
                if time.perf_counter() > deadline:
                    break
            return t1 - t0, time.perf_counter() - t1, done

        grad = torch.no_grad() if compiled else torch.inference_mode()
        with grad, common.autocast(mode):
            clock = common.Clock()
            warm_p, warm_d, warm_n = generate(16)
            warm_s, _ = clock.read()
            graphs = common.graphs_compiled()
            prefill_s = decode_s = 0.0
            steps = gens = 0
            extrapolated = False
            clock = common.Clock()
            for r in range(args.reps):
                if r > 0 and clock.read()[0] > args.max_seconds:
                    break
                pf, d, n = generate(new, clock.wall + 3 * args.max_seconds)
                prefill_s, decode_s, steps, gens = prefill_s + pf, decode_s + d, steps + n, gens + 1
                if n < new:
                    extrapolated = True
                    break
            secs, cpu = clock.read()
        # Per generation of `new` tokens: the prefills as measured, the
        # decode steps at their measured rate (exact unless extrapolated).
        per_gen = (prefill_s + decode_s * gens * new / steps) / gens
        out = {"batch": rows, "prompt": prompt_len, "new": new, "generations": gens, "extrapolated": extrapolated,
               "new_tok_per_s": round(rows * new / per_gen, 1), "new_tok_per_cpu_s": round(rows * steps / max(cpu, 1e-9), 1),
               "decode_tok_per_s": round(rows * steps / decode_s, 1)}
        if compiled:
            steady = prefill_s / gens + warm_n * decode_s / steps
            out["compile_s"] = round(max(0.0, warm_s - steady), 1)
            out["recompiles_timed"] = common.graphs_compiled() - graphs
        return out

    common.run_modes(args, bench, one)


if __name__ == "__main__":
    main()
