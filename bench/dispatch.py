"""Host time per op on the cached strict path vs PyTorch's native CPU eager, same process.

Prints, per op, microseconds per call for native CPU and for "tpu" in strict mode: host time (what
the calling thread spends; large programs are only enqueued) and end-to-end time (including
waiting for the device), each as a ratio ours/native. Target (device-foundation issue): host
time <= 3x native on the cached path.
With --mode fused the tpu host time is the cost of recording one op into the pending graph
(the size cap flushes every TORCH_TPU_FUSED_MAX_OPS ops; end-to-end includes running them).
Run: .venv/bin/python bench/dispatch.py [--iters N] [--mode strict|fused]
"""

from __future__ import annotations

import argparse
import time

import torch

import torch_tpu


def timed(fn, iters: int, sync=None) -> tuple[float, float]:
    """(host seconds, end-to-end seconds) for iters calls."""
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    t1 = time.perf_counter()
    if sync:
        sync()
    return t1 - t0, time.perf_counter() - t0


def compare(cpu_fn, tpu_fn, iters: int, repeats: int = 7) -> tuple[float, float, float]:
    """Best-of-N µs per call for native CPU, tpu host and tpu end to end.

    The two sides alternate inside each repeat, so a change in the machine's state (2 shared
    cores, frequency) affects both instead of biasing the ratio."""
    for fn in (cpu_fn, tpu_fn):
        for _ in range(20):
            fn()
    torch.tpu.synchronize()
    cpu = host = total = float("inf")
    for _ in range(repeats):
        cpu = min(cpu, timed(cpu_fn, iters)[0])
        h, t = timed(tpu_fn, iters, sync=torch.tpu.synchronize)
        host, total = min(host, h), min(total, t)
    return cpu / iters * 1e6, host / iters * 1e6, total / iters * 1e6


def _idx(device: str, n: int, k: int) -> torch.Tensor:
    return torch.randint(0, n, (k,), generator=torch.Generator().manual_seed(k)).to(device)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--mode", default="strict", choices=["strict", "fused"])
    ap.add_argument("--only", default="", help="comma-separated case names (default: all)")
    args = ap.parse_args()
    torch_tpu.set_mode(args.mode)
    torch.manual_seed(0)
    cases = {
        "add 1-element": lambda d: (lambda a=torch.ones(1, device=d), b=torch.ones(1, device=d): torch.add(a, b)),
        "add 512x512": lambda d: (lambda a=torch.randn(512, 512, device=d), b=torch.randn(512, 512, device=d): torch.add(a, b)),
        "matmul 128x128": lambda d: (lambda a=torch.randn(128, 128, device=d), b=torch.randn(128, 128, device=d): a @ b),
        "view (transpose)": lambda d: (lambda a=torch.randn(64, 64, device=d): a.t()),
        "view (slice)": lambda d: (lambda a=torch.randn(64, 64, device=d): a[8:40]),
        "view (reshape)": lambda d: (lambda a=torch.randn(64, 64, device=d): a.view(32, 128)),
        # vLLM's model runner, every step (docs/vllm.md): advanced indexing with one index
        # tensor (hidden_states[logits_indices]) against index_select, and host -> device copies
        # into a live buffer (CpuGpuBuffer.copy_to_gpu) against a fresh tensor's. CPU: the same
        # calls on CPU tensors (a CPU -> CPU copy).
        "x[idx]": lambda d: (lambda a=torch.randn(64, 128, device=d), i=_idx(d, 64, 32): a[i]),
        "x[idx] on dim 1": lambda d: (lambda a=torch.randn(64, 128, device=d), i=_idx(d, 128, 16): a[:, i]),
        "index_select": lambda d: (lambda a=torch.randn(64, 128, device=d), i=_idx(d, 64, 32): a.index_select(0, i)),
        "copy_ h2d live": lambda d: (lambda a=torch.empty(256, dtype=torch.int64, device=d), s=_idx("cpu", 9, 256):
                                     a.copy_(s, non_blocking=True)),
        "copy h2d fresh": lambda d: (lambda s=_idx("cpu", 9, 256): s.to(d, copy=True)),
    }
    print(f"{'op':18s} {'cpu us':>8s} {'tpu host us':>12s} {'host ratio':>10s} {'tpu e2e us':>11s} {'e2e ratio':>9s}")
    for name, make in cases.items():
        if args.only and name not in args.only.split(","):
            continue
        cpu, host, total = compare(make("cpu"), make("tpu"), args.iters)
        print(f"{name:18s} {cpu:8.2f} {host:12.2f} {host / cpu:9.2f}x {total:11.2f} {total / cpu:8.2f}x")
    m = torch_tpu.metrics()
    print(f"program cache: {m['cache_hits']} hits, {m['cache_misses']} misses")


if __name__ == "__main__":
    main()
