"""Host time per op on the cached strict path vs PyTorch's native CPU eager, same process.

Prints, per op, microseconds per call for native CPU and for "tpu" (strict mode: the host only
enqueues), and the ratio ours/native. Target (device-foundation issue): <= 3x on the cached path.
Run: .venv/bin/python bench/dispatch.py [--iters N]
"""

from __future__ import annotations

import argparse
import time

import torch

import torch_tpu


def per_call_us(fn, iters: int, sync=None) -> float:
    for _ in range(20):
        fn()
    if sync:
        sync()
    best = float("inf")
    for _ in range(5):  # best of 5 repeats: the machine's 2 cores are shared and noisy
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        dt = time.perf_counter() - t0
        if sync:
            sync()
        best = min(best, dt)
    return best / iters * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=2000)
    args = ap.parse_args()
    torch.manual_seed(0)
    cases = {
        "add 1-element": lambda d: (lambda a=torch.ones(1, device=d), b=torch.ones(1, device=d): torch.add(a, b)),
        "add 512x512": lambda d: (lambda a=torch.randn(512, 512, device=d), b=torch.randn(512, 512, device=d): torch.add(a, b)),
        "matmul 128x128": lambda d: (lambda a=torch.randn(128, 128, device=d), b=torch.randn(128, 128, device=d): a @ b),
        "view (transpose)": lambda d: (lambda a=torch.randn(64, 64, device=d): a.t()),
    }
    print(f"{'op':20s} {'native cpu us':>14s} {'tpu strict us':>14s} {'ratio':>7s}")
    for name, make in cases.items():
        cpu = per_call_us(make("cpu"), args.iters)
        tpu = per_call_us(make("tpu"), args.iters, sync=torch.tpu.synchronize)
        print(f"{name:20s} {cpu:14.2f} {tpu:14.2f} {tpu / cpu:7.2f}x")
    m = torch_tpu.metrics()
    print(f"program cache: {m['cache_hits']} hits, {m['cache_misses']} misses")


if __name__ == "__main__":
    main()
