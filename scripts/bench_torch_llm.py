#!/usr/bin/env python3
"""PyTorch 2.x + transformers + PEFT CPU reference for the real model's rows
of `make bench` (BENCH_LLM=1, issue 61): policy/native llm_test.go's
BenchmarkLLMGenerate, BenchmarkLLMLoRASFT and BenchmarkLLMPPOLearner, on a
pretrained Hugging Face folder (SmolLM2-135M-Instruct's, .deps/smollm2-hf)
at the demo recipe's lengths (448-token prompts, 160-token responses).

    bench_torch_llm.py DIR gen --batch 1|8|32 [--reps N]
    bench_torch_llm.py DIR lora [--rows R] [--steps N]
    bench_torch_llm.py DIR ppo PPO_BIN [--steps N]
    common: [--threads T] [--modes eager-fp32,eager-bf16,compile-fp32,compile-bf16]
            [--bf16 auto|force|off] [--compile-mode default] [--max-seconds S]

gen: greedy generation with a KV cache: batch 1 one 448-token prompt;
batch 8 and 32 2 and 8 prompts prefilled once as a batch, each prompt's
cache rows copied to its 4 rows (what a PyTorch loop does; the native
engine shares them in place); 160 new tokens per row. Eager modes run the
model's own forward with its DynamicCache, as generate() does, without
generate()'s logits processors. Compiled modes prefill eagerly the same
way, copy the cache into a StaticCache of the rows (transformers' cache
for torch.compile) and decode with torch.compile of the model's forward
(one graph: the cache's length is a tensor). Rates: new tokens/s over the
whole time and per CPU-second, over the decode steps only, and prompt
tokens/s over the prefills.

lora: LoRA SFT as bench_torch_lora.py times it (rank 16, alpha 32, dropout
0.05 on every projection; rows of BOS + 448 + 160 tokens; the LM head at
the 160 positions that predict the response; gradient checkpointing;
AdamW with clipping at 1) with the folder's weights; compiled modes
compile the loss (forward and head) as bench_torch.py does.

ppo: the PPO learner step of BenchmarkLLMPPOLearner on the batch
TestWritePPOBenchData writes (its "shared" packing: 4 states, each
prompt once with its 8 actions after it, reading it through the
attention mask): LoRA rank 16 on every projection without dropout, a
value head (Linear(d, 1)) on the final hidden state detached from the
trunk, gradient checkpointing, logits and value at the action positions,
bench_torch.py's PPO-shaped loss, backward, clipping and AdamW (betas
0.9/0.95, weight decay 0.01) at 1e-5. The attention mask is a 4-D
boolean [B, 1, S, S] (a token reads the earlier tokens of its segment and
the whole prompt its prefix names), which transformers passes to SDPA as
it is; positions restart per sample as the packing says.

Prints one JSON line per mode (bench_torch_common.py's fields, then the
rates, s/step or the generation's, compile_s for compiled modes: the
warm-up's time beyond a timed step's, and peak_rss_gib: the process's
peak resident memory, VmHWM, reset before the model is loaded). Each mode
loads the model afresh. max_seconds: no new timed unit starts once it has
passed (at least one runs).
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_torch_common as common  # noqa: E402
from bench_torch import ppo_loss, read_ppo  # noqa: E402
from bench_torch_lora import peak_rss_gib, reset_peak_rss  # noqa: E402

PROMPT, RESPONSE, PER_STATE = 448, 160, 4
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def load(path):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa")


def peft(model, dropout, recompute=True):
    from peft import LoraConfig, get_peft_model
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=dropout, bias="none", task_type="CAUSAL_LM", target_modules=TARGETS)
    model = get_peft_model(model, lora)
    if recompute:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    model.train()
    return model


def gen(args):
    from transformers import DynamicCache, StaticCache

    prompts_n, per = {1: (1, 1), 8: (2, PER_STATE), 32: (8, PER_STATE)}[args.batch]
    rows, new = prompts_n * per, RESPONSE

    def one(mode):
        reset_peak_rss()
        torch.manual_seed(0)
        model = load(args.dir).eval()
        cfg = model.config
        g = torch.Generator().manual_seed(1)
        prompts = torch.randint(0, cfg.vocab_size, (prompts_n, PROMPT), generator=g)
        compiled = mode.startswith("compile")
        static = StaticCache(config=cfg, max_cache_len=PROMPT + new) if compiled else None
        fwd = common.compile_fn(model.forward, args) if compiled else model.forward
        times = {"prefill": 0.0, "decode": 0.0}

        def generate(n):
            clock = common.Clock()
            dyn = DynamicCache(config=cfg)
            logits = model(input_ids=prompts, cache=dyn, use_cache=True, logits_to_keep=1).logits[:, -1]
            if compiled:  # the prefill's rows, repeated, into the static cache the compiled graph reads
                static.reset()
                for src, dst in zip(dyn.layers, static.layers):
                    dst.update(src.keys.repeat_interleave(per, 0), src.values.repeat_interleave(per, 0))
                cache = static
            else:
                cache = dyn
                if per > 1:
                    cache.batch_repeat_interleave(per)
            if per > 1:
                logits = logits.repeat_interleave(per, 0)
            times["prefill"] += clock.read()[0]
            clock = common.Clock()
            for _ in range(n):
                tok = logits.argmax(-1, keepdim=True)
                logits = fwd(input_ids=tok, cache=cache, use_cache=True).logits[:, -1]
            times["decode"] += clock.read()[0]

        with torch.inference_mode(), common.autocast(mode):
            warm = common.Clock()
            generate(4)  # warm-up (and, compiled, the compile)
            warm_s = warm.read()[0]
            times["prefill"] = times["decode"] = 0.0
            graphs = common.graphs_compiled()
            clock = common.Clock()
            gens = 0
            for r in range(args.reps):
                if r > 0 and clock.read()[0] > args.max_seconds:
                    break
                generate(new)
                gens += 1
            secs, cpu = clock.read()
        n = rows * new * gens
        out = {"batch": rows, "prompts": prompts_n, "prompt": PROMPT, "new": new, "generations": gens,
               "new_tok_per_s": round(n / secs, 2), "new_tok_per_cpu_s": round(n / max(cpu, 1e-9), 2),
               "decode_tok_per_s": round(n / times["decode"], 2),
               "prefill_tok_per_s": round(prompts_n * PROMPT * gens / times["prefill"], 1),
               "peak_rss_gib": round(peak_rss_gib(), 3)}
        if compiled:
            out["compile_s"] = round(max(0.0, warm_s - (times["prefill"] + times["decode"] * 4 / new) / gens), 1)
            out["recompiles_timed"] = common.graphs_compiled() - graphs
        return out

    common.run_modes(args, f"llm-gen-b{rows}", one)


def train_modes(args, bench, build, count):
    """Times steps in each mode: build(mode) returns (params, loss_fn);
    count is the tokens one step counts, by kind."""

    def one(mode):
        reset_peak_rss()
        torch.manual_seed(0)
        params, loss_of = build(mode)
        opt = torch.optim.AdamW(params, **args.adamw)

        def fwd():
            with common.autocast(mode):
                return loss_of()

        f = common.compile_fn(fwd, args) if mode.startswith("compile") else fwd

        def step():
            opt.zero_grad(set_to_none=True)
            loss = f()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            return float(loss.detach())

        clock = common.Clock()
        step()  # warm-up (and, compiled, the compile)
        warm_s = clock.read()[0]
        graphs = common.graphs_compiled()
        clock, steps = common.Clock(), 0
        while steps < args.steps and (steps == 0 or clock.read()[0] <= args.max_seconds):
            step()
            steps += 1
        secs, cpu = clock.read()
        out = {"steps": steps, "s_per_step": round(secs / steps, 2), "cpu_s_per_step": round(cpu / steps, 2)}
        for k, v in count.items():
            out[f"{k}_tok_per_s"] = round(v * steps / secs, 2)
            out[f"{k}_tok_per_cpu_s"] = round(v * steps / max(cpu, 1e-9), 2)
        out["peak_rss_gib"] = round(peak_rss_gib(), 3)
        out["trainable"] = sum(p.numel() for p in params)
        if mode.startswith("compile"):
            out["compile_s"] = round(max(0.0, warm_s - secs / steps), 1)
            out["recompiles_timed"] = common.graphs_compiled() - graphs
        return out

    common.run_modes(args, bench, one)


def lora(args):
    n = 1 + PROMPT + RESPONSE
    args.adamw = dict(lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)

    def build(mode):
        model = peft(load(args.dir), 0.05)
        base = model.get_base_model()
        g = torch.Generator().manual_seed(1)
        ids = torch.randint(0, base.config.vocab_size, (args.rows, n), generator=g)

        def loss_of():
            h = base.model(input_ids=ids).last_hidden_state
            logits = base.lm_head(h[:, PROMPT:PROMPT + RESPONSE])  # the LM head at the response targets only
            return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), ids[:, PROMPT + 1:PROMPT + RESPONSE + 1].reshape(-1))

        return [p for p in model.parameters() if p.requires_grad], loss_of

    train_modes(args, f"llm-lora", build, {"real": args.rows * n})


def ppo_mask(bt):
    """BenchmarkPPOLearner's attention as a boolean [B, 1, S, S] mask:
    True where a query reads a key (bench_torch_common.Policy.trunk's)."""
    seg, pre = bt["segments"], bt["prefix"]
    s = seg.shape[1]
    causal = torch.ones(s, s, dtype=torch.bool).tril()
    allowed = seg[:, :, None] == seg[:, None, :]
    if pre is not None:
        allowed = allowed | ((pre[:, :, None] != 0) & (pre[:, :, None] == seg[:, None, :]))
    return (allowed & causal)[:, None]


def ppo(args):
    bt = read_ppo(args.data)["shared"]
    args.adamw = dict(lr=1e-5, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01)
    mask, pos = ppo_mask(bt), bt["positions"].long()

    def build(mode):
        model = peft(load(args.dir), 0.0)
        base = model.get_base_model()
        value = torch.nn.Linear(base.config.hidden_size, 1)
        ids = bt["tokens"].long()

        def loss_of():
            h = base.model(input_ids=ids, attention_mask=mask, position_ids=pos).last_hidden_state
            h = h.reshape(-1, h.shape[-1]).index_select(0, bt["idx"])
            # The value head reads the hidden state detached (train ppo's DetachValue).
            return ppo_loss(base.lm_head(h), value(h.detach()).squeeze(-1), bt["targets"], bt["value_at"])

        return [p for p in model.parameters() if p.requires_grad] + list(value.parameters()), loss_of

    train_modes(args, "llm-ppo-shared", build, {"real": bt["real"], "sample": bt["sample"]})


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir", help="the Hugging Face folder (e.g. .deps/smollm2-hf)")
    sub = p.add_subparsers(dest="row", required=True)
    g = sub.add_parser("gen")
    g.add_argument("--batch", type=int, choices=(1, 8, 32), default=1)
    g.add_argument("--reps", type=int, default=2, help="timed generations per mode, after a warm-up")
    lo = sub.add_parser("lora")
    lo.add_argument("--rows", type=int, default=4)
    lo.add_argument("--steps", type=int, default=2, help="timed steps per mode, after a warm-up step")
    pp = sub.add_parser("ppo")
    pp.add_argument("data", help="the file TestWritePPOBenchData wrote (MLERL_BENCH_PPO_DATA)")
    pp.add_argument("--steps", type=int, default=2, help="timed steps per mode, after a warm-up step")
    for q in (g, lo, pp):
        common.add_args(q)
    args = p.parse_args()
    {"gen": gen, "lora": lora, "ppo": ppo}[args.row](args)


if __name__ == "__main__":
    main()
