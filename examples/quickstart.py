"""Quickstart: train a small GPT-style model on the "tpu" device (host runtime).

    make demo        # or: .venv/bin/python examples/quickstart.py [--steps N] [--mode strict|debug]

Prints the loss every few steps, the throughput, and what the backend did (programs compiled,
cache hits, host syncs), then checks the loss went down.
"""

from __future__ import annotations

import argparse
import time

import torch

import torch_tpu
from torch_tpu.models import TinyGPT, count_parameters, synthetic_text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--mode", default=torch_tpu.get_mode())
    args = ap.parse_args()
    torch_tpu.set_mode(args.mode)

    torch.manual_seed(0)
    device = torch.device("tpu")
    model = TinyGPT(vocab=128, dim=64, heads=4, layers=2, ctx=32).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    data = synthetic_text(args.steps, batch=8, ctx=32, vocab=128)
    print(f"torch_tpu {torch_tpu.__version__}: {torch.tpu.get_device_name()} | mode={torch_tpu.get_mode()} | "
          f"TinyGPT with {count_parameters(model):,} parameters")

    first = last = None
    t0 = time.perf_counter()
    for step, (x, y) in enumerate(data):
        x, y = x.to(device), y.to(device)
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step == 0:
            first = loss.item()
            t_first = time.perf_counter() - t0
            t1 = time.perf_counter()
        if step % 10 == 0 or step == len(data) - 1:
            last = loss.item()
            print(f"step {step:3d}  loss {last:.4f}")
    torch.tpu.synchronize()
    elapsed = time.perf_counter() - t1
    m = torch_tpu.metrics()
    print(f"first step (compiles) {t_first:.2f}s; then {(len(data) - 1) / elapsed:.1f} steps/s")
    print(f"backend: {m['ops_dispatched']} ops, {m['programs_compiled']} programs compiled "
          f"({m['compile_seconds']:.2f}s), cache hit rate {m['cache_hits'] / max(1, m['ops_dispatched']):.1%}, "
          f"{m['host_syncs']} host syncs, CPU fallbacks: {sum(m['fallbacks'].values())}")
    print(f"peak device memory {torch.tpu.max_memory_allocated() / 2**20:.1f} MiB")
    assert last < first, f"loss did not decrease: {first:.4f} -> {last:.4f}"
    print(f"loss {first:.4f} -> {last:.4f}: training works on tpu")


if __name__ == "__main__":
    main()
