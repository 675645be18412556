#!/usr/bin/env python3
"""PyTorch CPU reference for policy/native's BenchmarkGenerate.

Greedy generation with a KV cache on the demo shape (pre-LayerNorm
transformer with RoPE, rotate_half convention; GELU FFN; 4 layers, d=256,
4 heads, FFN 1024, vocab 4,096): a 300-token random prompt per row, then
160 new tokens per row, batch 1 or 8. Prints one JSON line with new
tokens/s over the whole time (prefill included) and over the decode steps
only, like the Go benchmark.

Usage: bench_torch_generate.py [threads] [batch] [reps]
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
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = Policy().eval()
    prompt = torch.randint(4, VOCAB, (batch, PROMPT))

    def generate():
        caches = [(torch.zeros(batch, HEADS, PROMPT + NEW, DH), torch.zeros(batch, HEADS, PROMPT + NEW, DH)) for _ in range(LAYERS)]
        logits = model(prompt, caches, 0)
        t0 = time.perf_counter()
        for i in range(NEW):
            nxt = logits.argmax(-1, keepdim=True)
            logits = model(nxt, caches, PROMPT + i)
        return time.perf_counter() - t0

    with torch.inference_mode():
        generate()  # warm-up
        decode = 0.0
        start = time.perf_counter()
        for _ in range(reps):
            decode += generate()
        secs = time.perf_counter() - start
    n = reps * batch * NEW
    print(json.dumps({"impl": "pytorch-cpu", "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "batch": batch, "prompt": PROMPT, "new": NEW,
                      "new_tok_per_s": round(n / secs, 1), "decode_tok_per_s": round(n / decode, 1)}))


if __name__ == "__main__":
    main()
