#!/usr/bin/env python3
"""PyTorch CPU reference for the SFT benchmarks (policy/native
BenchmarkSFTStep and train BenchmarkSFT).

Trains the policy's shape as the native engine computes it (pre-LayerNorm
transformer with RoPE, HF rotate_half convention, positions restarting at
0 for each example packed in a row; exact-GELU FFN; LM head; 2 layers,
d=128, 4 heads, FFN 512, ctx 256, vocab 4,096, plus the unused value head
so that the parameter count matches) on exactly the batches the Go
benchmark packs (written by `MLERL_BENCH_DATA=<file> go test -bench
SFTStep ./policy/native/`), with the same loss (response-token NLL),
block-diagonal causal attention over the packed examples, AdamW (betas
0.9/0.95, weight decay 0.01) and global-norm clipping at 1.0. Prints one
JSON line: real (non-padding) tokens per wall second and per CPU second
of this process (steadier on a shared machine; with 2 threads it also
counts OpenMP's spin-waiting).

Usage: bench_torch.py <batches.bin> [steps] [threads] [full|targets] [max_seconds]

"full" (the default) applies the LM head at every position, as a plain
PyTorch training loop does; "targets" applies it only at the response
targets (gathered with index_select), as the trainer does. max_seconds
(default: none) stops the timed loop early, after at least one step.
"""
import json
import math
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, D, HEADS, LAYERS, FFN, CTX = 4096, 128, 4, 2, 512, 256
DH = D // HEADS


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


def rope_tables(ctx):
    inv = 10000.0 ** (-torch.arange(0, DH // 2, dtype=torch.float64) * 2 / DH)
    ang = torch.arange(ctx, dtype=torch.float64)[:, None] * inv[None, :]
    return ang.cos().float(), ang.sin().float()


def rope(x, cos, sin):
    # x [B, H, S, DH]; cos/sin [B, 1, S, DH/2] (per-token positions)
    a, b = x[..., : DH // 2], x[..., DH // 2:]
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D, eps=1e-5), nn.LayerNorm(D, eps=1e-5)
        self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))
        self.ffn_in, self.ffn_out = nn.Linear(D, FFN), nn.Linear(FFN, D)

    def forward(self, x, mask, cos, sin):
        b, s, _ = x.shape
        y = self.ln1(x)
        q, k, v = (m(y).view(b, s, HEADS, DH).transpose(1, 2) for m in (self.q, self.k, self.v))
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        # Explicit attention (torch 1.13 has no scaled_dot_product_attention).
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(DH)
        att = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        x = x + self.o(att.transpose(1, 2).reshape(b, s, D))
        return x + self.ffn_out(F.gelu(self.ffn_in(self.ln2(x))))


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(D, eps=1e-5)
        self.lm_head, self.value_head = nn.Linear(D, VOCAB), nn.Linear(D, 1)
        self.cos, self.sin = rope_tables(CTX)

    def forward(self, tokens, positions, segments, target_idx=None):
        s = tokens.shape[1]
        causal = torch.ones(s, s, dtype=torch.bool).tril()
        mask = (segments[:, :, None] == segments[:, None, :]) & causal  # [B,S,S]
        pos = positions.long()
        cos, sin = self.cos[pos][:, None], self.sin[pos][:, None]  # [B,1,S,DH/2]
        x = self.tok(tokens.long())
        for blk in self.blocks:
            x = blk(x, mask[:, None], cos, sin)
        x = x.reshape(-1, D)
        if target_idx is not None:
            x = x.index_select(0, target_idx)
        return self.lm_head(self.ln(x))  # the value head takes no part in the SFT loss


def main():
    path = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    if len(sys.argv) > 3:
        torch.set_num_threads(int(sys.argv[3]))
    targets_only = len(sys.argv) > 4 and sys.argv[4] == "targets"
    max_seconds = float(sys.argv[5]) if len(sys.argv) > 5 else math.inf
    torch.manual_seed(1)
    batches = read_batches(path)
    model = Policy()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01)

    def step(bt):
        tokens, positions, segments, targets, weights = bt
        if targets_only:
            idx = weights.view(-1).nonzero().squeeze(-1)
            logits = model(tokens, positions, segments, idx)
            nll = F.cross_entropy(logits, targets.view(-1)[idx].long(), reduction="sum")
            loss = nll / max(len(idx), 1)
        else:
            logits = model(tokens, positions, segments)
            nll = F.cross_entropy(logits, targets.view(-1).long(), reduction="none")
            loss = (nll * weights.view(-1)).sum() / weights.sum().clamp(min=1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    step(batches[0])  # warm-up
    real = padded = done = 0
    start, cpu0 = time.perf_counter(), time.process_time()
    for i in range(steps):
        bt = batches[i % len(batches)]
        step(bt)
        real += int((bt[2] != 0).sum())
        padded += bt[0].numel()
        done += 1
        if time.perf_counter() - start > max_seconds:
            break
    secs, cpu = time.perf_counter() - start, time.process_time() - cpu0
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"impl": "pytorch-cpu", "lm_head": "targets" if targets_only else "full", "torch": torch.__version__,
                      "threads": torch.get_num_threads(), "steps": done,
                      "real_tok_per_s": round(real / secs, 1), "real_tok_per_cpu_s": round(real / max(cpu, 1e-9), 1),
                      "pad_frac": round(1 - real / padded, 4), "params": params}))


if __name__ == "__main__":
    main()
