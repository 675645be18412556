#!/usr/bin/env python3
"""PyTorch CPU reference for BenchmarkSFT (train/bench_test.go).

Trains the same policy shape (pre-LayerNorm transformer, learned positions,
GELU FFN, LM head + value head; 2 layers, d=128, 4 heads, ctx 256, vocab
4,096) on exactly the batches the Go benchmark packs (written by
`MLERL_BENCH_DATA=<file> go test -bench BenchmarkSFT ./train/`), with the
same loss (response-token NLL), block-diagonal causal attention over packed
examples, AdamW and global-norm clipping, and prints real (non-padding)
tokens/s as one JSON line.

Usage: bench_torch.py <batches.bin> [steps] [threads] [full|targets]

"full" (the default) applies the LM head at every position, as a plain
PyTorch training loop does; "targets" applies it only at the response
targets, as the Go trainer does.
"""
import json
import math
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, D, HEADS, LAYERS, CTX = 4096, 128, 4, 2, 256


def read_batches(path):
    raw = open(path, "rb").read()
    out, off = [], 0
    while off < len(raw):
        b, s = np.frombuffer(raw, dtype="<i4", count=2, offset=off)
        off += 8
        n = int(b) * int(s)
        arrs = []
        for dt in ("<i4", "<i4", "<i4", "<i4", "<f4"):
            arrs.append(np.frombuffer(raw, dtype=dt, count=n, offset=off).reshape(int(b), int(s)))
            off += 4 * n
        out.append([torch.from_numpy(a.copy()) for a in arrs])
    return out


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D, eps=1e-5), nn.LayerNorm(D, eps=1e-5)
        self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))
        self.ffn_in, self.ffn_out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x, mask):
        b, s, _ = x.shape
        y = self.ln1(x)
        q, k, v = (m(y).view(b, s, HEADS, D // HEADS).transpose(1, 2) for m in (self.q, self.k, self.v))
        # Explicit attention (torch 1.13 has no scaled_dot_product_attention).
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(D // HEADS)
        att = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        x = x + self.o(att.transpose(1, 2).reshape(b, s, D))
        return x + self.ffn_out(F.gelu(self.ffn_in(self.ln2(x))))


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, D), nn.Embedding(CTX, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(D, eps=1e-5)
        self.lm_head, self.value_head = nn.Linear(D, VOCAB), nn.Linear(D, 1)

    def forward(self, tokens, positions, segments, target_idx=None):
        s = tokens.shape[1]
        causal = torch.ones(s, s, dtype=torch.bool).tril()
        mask = (segments[:, :, None] == segments[:, None, :]) & causal  # [B,S,S]
        x = self.tok(tokens.long()) + self.pos(positions.long())
        for blk in self.blocks:
            x = blk(x, mask[:, None])
        if target_idx is not None:
            x = x.reshape(-1, D)[target_idx]
        x = self.ln(x)
        return self.lm_head(x), self.value_head(x).squeeze(-1)


def main():
    path = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    if len(sys.argv) > 3:
        torch.set_num_threads(int(sys.argv[3]))
    targets_only = len(sys.argv) > 4 and sys.argv[4] == "targets"
    torch.manual_seed(1)
    batches = read_batches(path)
    model = Policy()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.01)

    def step(bt):
        tokens, positions, segments, targets, weights = bt
        if targets_only:
            idx = weights.view(-1).nonzero().squeeze(-1)
            logits, _ = model(tokens, positions, segments, idx)
            nll = F.cross_entropy(logits, targets.view(-1)[idx].long(), reduction="sum")
            loss = nll / max(len(idx), 1)
        else:
            logits, _ = model(tokens, positions, segments)
            nll = F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1).long(), reduction="none")
            loss = (nll * weights.view(-1)).sum() / weights.sum().clamp(min=1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    step(batches[0])  # warm-up
    real = padded = 0
    start = time.perf_counter()
    for i in range(steps):
        bt = batches[i % len(batches)]
        step(bt)
        real += int((bt[2] != 0).sum())
        padded += bt[0].numel()
    secs = time.perf_counter() - start
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"impl": "pytorch-cpu", "lm_head": "targets" if targets_only else "full", "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "steps": steps, "real_tok_per_s": round(real / secs, 1),
                      "pad_frac": round(1 - real / padded, 4), "params": params}))


if __name__ == "__main__":
    main()
