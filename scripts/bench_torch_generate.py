#!/usr/bin/env python3
"""PyTorch CPU reference for policy/native's BenchmarkGenerate.

Greedy generation with a KV cache on the demo shape (pre-LayerNorm
transformer with RoPE, rotate_half convention; GELU FFN; 4 layers, d=256,
4 heads, FFN 1024, vocab 4,096): a 300-token random prompt per row, then
160 new tokens per row, batch 1 or 8. Prints one JSON line with new
tokens/s over the whole time (prefill included) and over the decode steps
only, like the Go benchmark, and new tokens per CPU second of this process
(steadier on a shared machine; with 2 threads it also counts OpenMP's
spin-waiting).

Usage: bench_torch_generate.py [threads] [batch] [reps] [max_seconds]

The warm-up is one prefill and 16 decode steps. max_seconds (default:
none) bounds the timed part: after the first generation no new one starts
once it has passed, and a generation still running past 3x max_seconds
stops early; its rate is then extrapolated to 160 tokens from the steps
done (prefill once, decode steps at their measured rate) and the line
says "extrapolated": true.
"""
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, D, HEADS, LAYERS, FFN, CTX = 4096, 256, 4, 4, 1024, 512
DH = D // HEADS
PROMPT, NEW = 300, 160


def rope_tables(ctx):
    inv = 10000.0 ** (-torch.arange(0, DH // 2, dtype=torch.float64) * 2 / DH)
    ang = torch.arange(ctx, dtype=torch.float64)[:, None] * inv[None, :]
    return ang.cos().float(), ang.sin().float()


def rope(x, cos, sin):
    # x [B, H, T, DH]; cos/sin [T, DH/2]
    a, b = x[..., : DH // 2], x[..., DH // 2:]
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D, eps=1e-5), nn.LayerNorm(D, eps=1e-5)
        self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))
        self.ffn_in, self.ffn_out = nn.Linear(D, FFN), nn.Linear(FFN, D)

    def forward(self, x, kc, vc, start, cos, sin):
        b, t, _ = x.shape
        y = self.ln1(x)
        q, k, v = (m(y).view(b, t, HEADS, DH).transpose(1, 2) for m in (self.q, self.k, self.v))
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        kc[:, :, start:start + t] = k
        vc[:, :, start:start + t] = v
        keys, vals = kc[:, :, : start + t], vc[:, :, : start + t]
        scores = (q @ keys.transpose(-2, -1)) / math.sqrt(DH)
        if t > 1:
            mask = torch.ones(t, start + t, dtype=torch.bool).tril(diagonal=start)
            scores = scores.masked_fill(~mask, float("-inf"))
        att = scores.softmax(-1) @ vals
        x = x + self.o(att.transpose(1, 2).reshape(b, t, D))
        return x + self.ffn_out(F.gelu(self.ffn_in(self.ln2(x))))


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(D, eps=1e-5)
        self.lm_head = nn.Linear(D, VOCAB)
        self.cos, self.sin = rope_tables(CTX)

    def forward(self, tokens, caches, start):
        t = tokens.shape[1]
        cos, sin = self.cos[start:start + t], self.sin[start:start + t]
        x = self.tok(tokens)
        for blk, (kc, vc) in zip(self.blocks, caches):
            x = blk(x, kc, vc, start, cos, sin)
        return self.lm_head(self.ln(x[:, -1]))


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    max_seconds = float(sys.argv[4]) if len(sys.argv) > 4 else math.inf
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = Policy().eval()
    prompt = torch.randint(4, VOCAB, (batch, PROMPT))

    def generate(new, deadline=math.inf):
        """Returns (prefill seconds, decode seconds, decode steps done)."""
        caches = [(torch.zeros(batch, HEADS, PROMPT + NEW, DH), torch.zeros(batch, HEADS, PROMPT + NEW, DH)) for _ in range(LAYERS)]
        t0 = time.perf_counter()
        logits = model(prompt, caches, 0)
        t1 = time.perf_counter()
        done = 0
        for i in range(new):
            nxt = logits.argmax(-1, keepdim=True)
            logits = model(nxt, caches, PROMPT + i)
            done += 1
            if time.perf_counter() > deadline:
                break
        return t1 - t0, time.perf_counter() - t1, done

    with torch.inference_mode():
        generate(16)  # warm-up
        prefill = decode = 0.0
        steps = gens = 0
        extrapolated = False
        start, cpu0 = time.perf_counter(), time.process_time()
        for r in range(reps):
            if r > 0 and time.perf_counter() - start > max_seconds:
                break
            p, d, n = generate(NEW, start + 3 * max_seconds)
            prefill, decode, steps, gens = prefill + p, decode + d, steps + n, gens + 1
            if n < NEW:
                extrapolated = True
                break
        secs, cpu = time.perf_counter() - start, time.process_time() - cpu0
    # Per generation of NEW tokens: the prefills as measured, the decode
    # steps at their measured rate (exact unless extrapolated).
    per_gen = (prefill + decode * gens * NEW / steps) / gens
    n = batch * NEW
    print(json.dumps({"impl": "pytorch-cpu", "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "batch": batch, "prompt": PROMPT, "new": NEW, "generations": gens, "extrapolated": extrapolated,
                      "new_tok_per_s": round(n / per_gen, 1), "new_tok_per_cpu_s": round(batch * steps / max(cpu, 1e-9), 1),
                      "decode_tok_per_s": round(batch * steps / decode, 1)}))


if __name__ == "__main__":
    main()
