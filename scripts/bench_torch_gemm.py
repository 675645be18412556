#!/usr/bin/env python3
"""PyTorch CPU matrix-product peak, the counterpart of policy/native
BenchmarkGemmPeak: one 2,048 x 2,048 x 2,048 float32 product (torch.mm,
17.2 GFLOP) per iteration. Prints one JSON line: GFLOP per wall second and
per CPU second of this process.

Usage: bench_torch_gemm.py [threads] [iterations] [max_seconds]
"""
import json
import sys
import time

import torch

N = 2048


def main():
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
