#!/usr/bin/env python3
"""PyTorch CPU reference for the native engine's training benchmarks
(policy/native BenchmarkSFTStep, BenchmarkSFTStepDemo and
BenchmarkPPOLearner), on exactly the batches the Go side packs.

    bench_torch.py sft <batches.bin> [--shape bench|demo] [--head full|targets] [--steps N]
    bench_torch.py ppo <ppo.bin> [--packing unshared|shared] [--steps N]
    common: [--threads T] [--modes eager-fp32,eager-bf16,compile-fp32,compile-bf16]
            [--bf16 auto|force|off] [--compile-mode default] [--max-seconds S]

sft: the policy's transformer (bench_torch_common.Policy; the bench shape
is 2 layers of width 128, the demo recipe's 4 of width 256) trained with
the response-token NLL, block-diagonal causal attention over the packed
examples, AdamW (betas 0.9/0.95, weight decay 0.01) and global-norm
clipping at 1.0, on the batches `MLERL_BENCH_DATA=<file>` makes
BenchmarkSFTStep write. "full" applies the LM head at every position, as
a plain PyTorch training loop does; "targets" only at the response
targets (index_select), as the trainer does.

ppo: the PPO learner step of BenchmarkPPOLearner on the demo policy's
shape: the batches `MLERL_BENCH_PPO_DATA=<file>` makes
TestWritePPOBenchData write (4 states x 8 samples; "unshared": each sample
with its own copy of the prompt, one per row; "shared": each state's
prompt once with its 8 actions after it, which read it through the
attention mask), logits and value at the action positions, the
benchmark's PPO-shaped loss (clipped surrogate with advantages +-1, an
entropy bonus, the value error), backward, clipping and AdamW at 1e-5.

Prints one JSON line per mode (see bench_torch_common.py): tokens per
wall second and per CPU-second of this process over the timed steps
(with 2 threads the CPU figure also counts OpenMP's spin-waiting);
compiled modes also give compile_s, the warm-up's wall time beyond what
its steps take once compiled. sft counts real (non-padding) tokens; ppo
counts real tokens (what the step processes) and sample tokens (each
sample's prompt and action: what it represents).
"""
import argparse

import numpy as np
import torch
import torch.nn.functional as F

import bench_torch_common as common


def read_sft(path):
    """Per batch int32 B, S, then int32 tokens, positions, segments,
    targets and float32 weights, B*S each, little-endian (policy/native
    writeBenchData)."""
    raw = open(path, "rb").read()
    out, off = [], 0
    while off < len(raw):
        b, s = (int(v) for v in np.frombuffer(raw, dtype="<i4", count=2, offset=off))
        off += 8
        arrs = []
        for dt in ("<i4", "<i4", "<i4", "<i4", "<f4"):
            arrs.append(torch.from_numpy(np.frombuffer(raw, dtype=dt, count=b * s, offset=off).reshape(b, s).copy()))
            off += 4 * b * s
        tokens, positions, segments, targets, weights = arrs
        out.append(dict(tokens=tokens, positions=positions, segments=segments, targets=targets.long(), weights=weights))
    return out


def read_ppo(path):
    """Two records, unshared then shared: int32 B, S; tokens, positions,
    segments, prefix (B*S each); int32 n, idx[n], targets[n]; int32 m,
    value_at[m]; int32 real, sample (policy/native benchdata_test.go)."""
    raw = open(path, "rb").read()
    off = 0

    def ints(n):
        nonlocal off
        a = np.frombuffer(raw, dtype="<i4", count=n, offset=off)
        off += 4 * n
        return torch.from_numpy(a.copy())

    recs = {}
    for name in ("unshared", "shared"):
        b, s = (int(v) for v in ints(2))
        rec = {k: ints(b * s).view(b, s) for k in ("tokens", "positions", "segments", "prefix")}
        n = int(ints(1)[0])
        rec["idx"], rec["targets"] = ints(n).long(), ints(n).long()
        m = int(ints(1)[0])
        rec["value_at"] = ints(m).long()
        rec["real"], rec["sample"] = (int(v) for v in ints(2))
        if name == "unshared":
            rec["prefix"] = None  # all zero: no shared prompts
        recs[name] = rec
    return recs


def ppo_loss(logits, values, targets, value_at):
    """BenchmarkPPOLearner's ppoLossGrad as a loss: the same gradients."""
    clip, ent_coef, vf_coef = 0.2, 0.01, 0.5
    n = targets.shape[0]
    i = torch.arange(n)
    logp_all = logits.float().log_softmax(-1)
    logp = logp_all.gather(1, targets[:, None]).squeeze(1)
    adv = 1.0 - 2.0 * (i % 2).float()
    old = logp.detach() + 0.05 * ((i % 3) - 1).float()
    ratio = torch.exp(logp - old)
    pg = -torch.minimum(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv).mean()
    entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
    v = values.float()[value_at]
    return pg - ent_coef * entropy + 0.5 * vf_coef * ((v - 0.5) ** 2).mean()


def make_optimizer(model, lr):
    kw = dict(lr=lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01)
    try:
        return torch.optim.AdamW(model.parameters(), fused=True, **kw)  # one kernel for all tensors (PyTorch >= 2.4 on CPU)
    except (TypeError, RuntimeError):
        return torch.optim.AdamW(model.parameters(), **kw)


def train_rows(args, bench, shape, lr, batches, loss_of, count, warm):
    """Times steps over batches (cycled) in each mode. loss_of(model, bt)
    computes the loss; count(bt) returns the tokens a step counts;
    warm(mode) lists the batch indices of the warm-up (for compiled
    modes, one of each shape the timed loop meets)."""

    def one(mode):
        torch.manual_seed(1)
        model = common.Policy(**common.SHAPES[shape])
        opt = make_optimizer(model, lr)

        def fwd(bt):
            with common.autocast(mode):
                return loss_of(model, bt)

        f = common.compile_fn(fwd, args) if mode.startswith("compile") else fwd

        def step(bt):
            opt.zero_grad(set_to_none=True)
            loss = f(bt)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            return loss.item()

        warm_idx = warm(mode)
        clock = common.Clock()
        for i in warm_idx:
            step(batches[i])
        warm_s, _ = clock.read()
        graphs = common.graphs_compiled()
        done, counted = 0, {}
        clock = common.Clock()
        while done < args.steps:
            bt = batches[done % len(batches)]
            step(bt)
            done += 1
            for k, v in count(bt).items():
                counted[k] = counted.get(k, 0) + v
            if clock.read()[0] > args.max_seconds:
                break
        secs, cpu = clock.read()
        out = {"steps": done}
        for k, v in counted.items():
            out[f"{k}_tok_per_s"] = round(v / secs, 1)
            out[f"{k}_tok_per_cpu_s"] = round(v / max(cpu, 1e-9), 1)
        if mode.startswith("compile"):
            out["compile_s"] = round(max(0.0, warm_s - len(warm_idx) * secs / done), 1)
            out["recompiles_timed"] = common.graphs_compiled() - graphs
        return out

    common.run_modes(args, bench, one)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("row", choices=("sft", "ppo"))
    p.add_argument("data", help="the batches file the Go side wrote")
    p.add_argument("--shape", choices=("bench", "demo"), default="bench", help="sft: model shape")
    p.add_argument("--head", choices=("full", "targets"), default="full", help="sft: LM head positions")
    p.add_argument("--packing", choices=("unshared", "shared"), default="shared", help="ppo: prompt packing")
    p.add_argument("--steps", type=int, default=20, help="timed steps per mode")
    common.add_args(p)
    args = p.parse_args()

    if args.row == "sft":
        batches = read_sft(args.data)
        targets_only = args.head == "targets"
        for bt in batches:
            if targets_only:
                bt["idx"] = bt["weights"].view(-1).nonzero().squeeze(-1)
                bt["tgt"] = bt["targets"].view(-1)[bt["idx"]]

        def loss_of(model, bt):
            h = model.trunk(bt["tokens"], bt["positions"], bt["segments"])
            if targets_only:
                logits = model.lm_head(model.ln(h.index_select(0, bt["idx"])))
                return F.cross_entropy(logits.float(), bt["tgt"])
            w = bt["weights"].view(-1)
            nll = F.cross_entropy(model.lm_head(model.ln(h)).float(), bt["targets"].view(-1), reduction="none")
            return (nll * w).sum() / w.sum().clamp(min=1)

        if targets_only and hasattr(torch, "_dynamo"):
            for bt in batches:  # one compiled graph for every count of targets
                torch._dynamo.mark_dynamic(bt["idx"], 0)
                torch._dynamo.mark_dynamic(bt["tgt"], 0)

        def warm(mode):
            if not mode.startswith("compile"):
                return [0]
            used = range(min(args.steps, len(batches)))
            first = {}
            for i in used:
                first.setdefault(tuple(batches[i]["tokens"].shape), i)
            return sorted(first.values())

        def count(bt):
            return {"real": int((bt["segments"] != 0).sum())}

        name = ("sft" if args.shape == "bench" else "sftdemo") + "-" + args.head
        train_rows(args, name, args.shape, 1e-4, batches, loss_of, count, warm)
    else:
        bt = read_ppo(args.data)[args.packing]

        def loss_of(model, bt):
            h = model.ln(model.trunk(bt["tokens"], bt["positions"], bt["segments"], bt["prefix"]).index_select(0, bt["idx"]))
            return ppo_loss(model.lm_head(h), model.value_head(h).squeeze(-1), bt["targets"], bt["value_at"])

        def count(bt):
            return {"real": bt["real"], "sample": bt["sample"]}

        train_rows(args, "ppo-" + args.packing, "ppo", 1e-5, [bt], loss_of, count, lambda mode: [0])


if __name__ == "__main__":
    main()
