"""What the PyTorch benchmark scripts (bench_torch.py, bench_torch_generate.py)
share: the four configurations each row runs in, the model they time, the
timers, and the one JSON line per configuration that scripts/bench.sh reads.

Configurations ("modes"), in the order they run in one process:

    eager-fp32     plain PyTorch, float32
    eager-bf16     torch.autocast(device_type="cpu", dtype=torch.bfloat16)
    compile-fp32   torch.compile of the same step (Inductor, C++ via gcc)
    compile-bf16   torch.compile with autocast inside the compiled function

The bf16 modes run only where /proc/cpuinfo lists avx512_bf16 (without
it oneDNN emulates bf16 products and the row says "no avx512_bf16: not
run"); --bf16 force runs them anyway, to check the code path, never for a
result. A mode that raises (torch.compile needs a C++ compiler and
Python's headers) prints a line with "error" set instead of its rates,
and the next mode still runs.

Works with PyTorch 1.13 too (eager float32 only: no torch.compile, and no
scaled_dot_product_attention, whose place an explicit masked softmax
takes).
"""
import contextlib
import json
import math
import re
import sys
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

MODES = ("eager-fp32", "eager-bf16", "compile-fp32", "compile-bf16")

# The engine's shapes (policy/native bench_test.go): benchShape, demoShape
# and ppoShape (the demo policy with a 640-token context).
SHAPES = {
    "bench": dict(vocab=4096, d=128, heads=4, layers=2, ffn=512, ctx=256),
    "demo": dict(vocab=4096, d=256, heads=4, layers=4, ffn=1024, ctx=512),
    "ppo": dict(vocab=4096, d=256, heads=4, layers=4, ffn=1024, ctx=640),
}

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")


def add_args(p):
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of " + ",".join(MODES))
    p.add_argument("--bf16", choices=("auto", "force", "off"), default="auto",
                   help="auto: bf16 modes only where the CPU has avx512_bf16; force: run them anyway (checking only)")
    p.add_argument("--compile-mode", default="default", help="torch.compile mode (default, max-autotune, ...)")
    p.add_argument("--max-seconds", type=float, default=math.inf, help="stop each timed loop after this, having done at least one unit")


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def onednn_version():
    m = re.search(r"MKL-DNN v(\S+)", torch.__config__.show())
    return m.group(1) if m else "?"


def skip_reason(mode, args):
    """Why mode does not run here, or None."""
    if mode.startswith("compile") and not hasattr(torch, "compile"):
        return f"no torch.compile in torch {torch.__version__}: not run"
    if mode.endswith("bf16"):
        if args.bf16 == "off":
            return "bf16 off: not run"
        if args.bf16 == "auto" and "avx512_bf16" not in cpu_flags():
            return "no avx512_bf16: not run"
    return None


def eager_only(mode):
    """run_modes' skip for the Hugging Face shapes' scripts: their compiled
    configurations are not measured (see bench_torch_hf_generate.py)."""
    if mode.startswith("compile"):
        return "torch.compile not measured on the Hugging Face shapes: not run"
    return None


def autocast(mode):
    if mode.endswith("bf16"):
        return torch.autocast(device_type="cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def compile_fn(fn, args, **kw):
    mode = None if args.compile_mode == "default" else args.compile_mode
    return torch.compile(fn, mode=mode, **kw)


def graphs_compiled():
    """Dynamo's count of graphs compiled so far in this process (0 without
    torch.compile): a rise during a timed loop means it recompiled there."""
    try:
        from torch._dynamo.utils import counters
        return int(counters["stats"]["unique_graphs"])
    except Exception:
        return 0


def run_modes(args, bench, one, skip=None):
    """Runs one(mode) for each requested mode and prints one JSON line per
    mode: the common fields, then what one returned (rates, compile_s).
    skip(mode), where given, returns why a mode does not run in this
    script (ending "not run"), or None."""
    torch.set_num_threads(args.threads)
    for mode in args.modes.split(","):
        if mode not in MODES:
            sys.exit(f"bench_torch: unknown mode {mode!r}; want some of {','.join(MODES)}")
        line = {"bench": bench, "mode": mode, "threads": torch.get_num_threads(), "torch": torch.__version__,
                "isa": torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else "?"}
        why = (skip and skip(mode)) or skip_reason(mode, args)
        if why:
            line["error"] = why
        else:
            if mode.endswith("bf16") and "avx512_bf16" not in cpu_flags():
                line["forced_bf16"] = True  # no hardware bf16: checking the path only
            try:
                line.update(one(mode))
            except Exception as e:  # noqa: BLE001 - reported per mode, the next mode still runs
                traceback.print_exc(file=sys.stderr)
                first = (str(e).strip().splitlines() or [""])[0][:300]
                what = "compile failed" if mode.startswith("compile") else "failed"
                line["error"] = f"{what}: {type(e).__name__}: {first}"
            if mode.startswith("compile"):
                torch._dynamo.reset()  # the next mode compiles afresh
        print(json.dumps(line), flush=True)


class Clock:
    """Wall and process CPU seconds (every thread of this process, as
    policy/native's cpuSeconds counts getrusage(RUSAGE_SELF))."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def read(self):
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


# --- the policy's transformer ------------------------------------------------

def rope_tables(ctx, dh):
    inv = 10000.0 ** (-torch.arange(0, dh // 2, dtype=torch.float64) * 2 / dh)
    ang = torch.arange(ctx, dtype=torch.float64)[:, None] * inv[None, :]
    return ang.cos().float(), ang.sin().float()


def rope(x, cos, sin):
    # x [B, H, T, DH]; cos/sin broadcast to [.., T, DH/2] (HF's rotate_half
    # convention), in x's dtype so that bf16 stays bf16 under autocast.
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)


def attend(q, k, v, mask=None, causal=False):
    """Softmax attention; mask: bool, True where a query may read a key."""
    if HAVE_SDPA:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal and mask is None:
        t, s = q.shape[-2], k.shape[-2]
        mask = torch.ones(t, s, dtype=torch.bool).tril(diagonal=s - t)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(-1) @ v


class Block(nn.Module):
    """Pre-LayerNorm block: RoPE attention, exact-GELU FFN (policy/native's)."""

    def __init__(self, d, heads, ffn):
        super().__init__()
        self.heads, self.dh = heads, d // heads
        self.ln1, self.ln2 = nn.LayerNorm(d, eps=1e-5), nn.LayerNorm(d, eps=1e-5)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ffn_in, self.ffn_out = nn.Linear(d, ffn), nn.Linear(ffn, d)

    def qkv(self, x, cos, sin):
        b, t, _ = x.shape
        y = self.ln1(x)
        q, k, v = (m(y).view(b, t, self.heads, self.dh).transpose(1, 2) for m in (self.q, self.k, self.v))
        return rope(q, cos, sin), rope(k, cos, sin), v

    def finish(self, x, att):
        b, _, t, _ = att.shape
        x = x + self.o(att.transpose(1, 2).reshape(b, t, -1))
        return x + self.ffn_out(F.gelu(self.ffn_in(self.ln2(x))))

    def forward(self, x, mask, cos, sin):
        q, k, v = self.qkv(x, cos, sin)
        return self.finish(x, attend(q, k, v, mask))


class Policy(nn.Module):
    """Token embedding, blocks, final LayerNorm, LM head and value head."""

    def __init__(self, vocab, d, heads, layers, ffn, ctx):
        super().__init__()
        self.d = d
        self.tok = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads, ffn) for _ in range(layers))
        self.ln = nn.LayerNorm(d, eps=1e-5)
        self.lm_head, self.value_head = nn.Linear(d, vocab), nn.Linear(d, 1)
        cos, sin = rope_tables(ctx, d // heads)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def trunk(self, tokens, positions, segments, prefix=None):
        """Hidden states [B*S, D] of packed rows: a token reads the earlier
        tokens of its segment and, where prefix names one, all of that
        segment (a shared prompt; policy/native Batch.Prefix)."""
        s = tokens.shape[1]
        causal = torch.ones(s, s, dtype=torch.bool, device=tokens.device).tril()
        allowed = segments[:, :, None] == segments[:, None, :]
        if prefix is not None:
            allowed = allowed | ((prefix[:, :, None] != 0) & (prefix[:, :, None] == segments[:, None, :]))
        mask = (allowed & causal)[:, None]  # [B, 1, S, S]
        pos = positions.long()
        cos, sin = self.cos[pos][:, None], self.sin[pos][:, None]  # [B, 1, S, DH/2]
        x = self.tok(tokens.long())
        for blk in self.blocks:
            x = blk(x, mask, cos, sin)
        return x.reshape(-1, self.d)
