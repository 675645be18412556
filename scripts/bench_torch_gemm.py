#!/usr/bin/env python3
"""PyTorch CPU matrix-product peak, the counterpart of policy/native
BenchmarkGemmPeak: one 2,048 x 2,048 x 2,048 float32 product (torch.mm,
17.2 GFLOP) per iteration. Prints one JSON line: GFLOP per wall second and
per CPU second of this process.

Usage: bench_torch_gemm.py [threads] [iterations] [max_seconds]
       bench_torch_gemm.py shapes [threads] [seconds]

"shapes" times instead the products of policy/native BenchmarkGemm (an
SFT step's on the bench and demo shapes, the transposed operands as
views, as autograd hands them to torch.mm), best of 5 rounds of about
`seconds` (default 0.3) each, one JSON line per shape.
"""
import json
import sys
import time

import torch

N = 2048

# name, A transposed, B transposed, m, n, k: BenchmarkGemm's list.
SHAPES = [
    ("ffn_in fwd", False, False, 1900, 512, 128),
    ("ffn_in dW", True, False, 128, 512, 1900),
    ("ffn_in dX", False, True, 1900, 128, 512),
    ("qkv fwd", False, False, 1900, 128, 128),
    ("lm_head fwd", False, False, 800, 4096, 128),
    ("lm_head dW", True, False, 128, 4096, 800),
    ("lm_head dX", False, True, 800, 128, 4096),
    ("demo ffn_in fwd", False, False, 2048, 1024, 256),
    ("demo ffn_in dW", True, False, 256, 1024, 2048),
    ("demo ffn_in dX", False, True, 2048, 256, 1024),
    ("demo ffn_out fwd", False, False, 2048, 256, 1024),
    ("demo ffn_out dW", True, False, 1024, 256, 2048),
    ("demo qkv fwd", False, False, 2048, 256, 256),
    ("demo lm_head fwd", False, False, 800, 4096, 256),
    ("demo lm_head dW", True, False, 256, 4096, 800),
    ("demo lm_head dX", False, True, 800, 256, 4096),
]


def shapes(threads, seconds):
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(1)
    for name, ta, tb, m, n, k in SHAPES:
        a = torch.randn(k, m, generator=g).t() if ta else torch.randn(m, k, generator=g)
        b = torch.randn(n, k, generator=g).t() if tb else torch.randn(k, n, generator=g)
        c = torch.empty(m, n)
        torch.mm(a, b, out=c)  # warm-up
        best, best_cpu = 0.0, 0.0
        for _ in range(5):
            done = 0
            start, cpu0 = time.perf_counter(), time.process_time()
            while time.perf_counter() - start < seconds:
                torch.mm(a, b, out=c)
                done += 1
            secs, cpu = time.perf_counter() - start, time.process_time() - cpu0
            flops = done * 2.0 * m * n * k
            best, best_cpu = max(best, flops / secs / 1e9), max(best_cpu, flops / cpu / 1e9)
        print(json.dumps({"impl": "pytorch-cpu", "torch": torch.__version__, "threads": threads, "shape": name, "key": name.replace(" ", "_"),
                          "m": m, "n": n, "k": k, "gflop_per_s": round(best, 1), "gflop_per_cpu_s": round(best_cpu, 1)}))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "shapes":
        shapes(int(sys.argv[2]) if len(sys.argv) > 2 else 1, float(sys.argv[3]) if len(sys.argv) > 3 else 0.3)
        return
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    iters = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    max_s = float(sys.argv[3]) if len(sys.argv) > 3 else float("inf")
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(3)
    a = torch.randn(N, N, generator=g)
    b = torch.randn(N, N, generator=g)
    c = torch.empty(N, N)
    torch.mm(a, b, out=c)  # warm-up
    done = 0
    start, cpu0 = time.perf_counter(), time.process_time()
    while done < iters:
        torch.mm(a, b, out=c)
        done += 1
        if time.perf_counter() - start > max_s:
            break
    secs, cpu = time.perf_counter() - start, time.process_time() - cpu0
    flops = done * 2.0 * N ** 3
    print(json.dumps({"impl": "pytorch-cpu", "torch": torch.__version__, "threads": threads, "n": N, "iterations": done,
                      "gflop_per_s": round(flops / secs / 1e9, 1), "gflop_per_cpu_s": round(flops / cpu / 1e9, 1)}))


if __name__ == "__main__":
    main()
