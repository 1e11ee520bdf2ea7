"""Where a TinyGPT training step's host time goes: forward, backward, optimizer, final sync.

Times each phase of bench/train_step.py's step (TinyGPT, AdamW) on the host, per step, and
prints medians. On "tpu" the host runs ahead of the device, so a phase's time includes the waits
for the stream worker that happen in it (the strict queue bound, the fused two-graph bound), and
the last phase (`loss.item()`) is the device work left over. Comparing with native CPU shows
which part of the step falls behind.

Run: .venv/bin/python bench/step_phases.py [--steps N] [--devices cpu,tpu] [--modes strict,fused]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import torch_tpu
from torch_tpu.models import TinyGPT, synthetic_text

PHASES = ("forward", "backward", "optimizer", "final sync")


def phase_medians(device: str, steps: int, warmup: int = 20) -> dict[str, float]:
    """Median milliseconds of each phase over `steps` steps after `warmup` steps."""
    torch.manual_seed(0)
    model = TinyGPT(vocab=128, dim=64, heads=4, layers=2, ctx=32).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = [(x.to(device), y.to(device)) for x, y in synthetic_text(steps + warmup, 8, 32, 128)]
    times: dict[str, list[float]] = {p: [] for p in PHASES}
    for i, (x, y) in enumerate(data):
        t0 = time.perf_counter()
        _, loss = model(x, y)
        t1 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        loss.item()
        t4 = time.perf_counter()
        if i >= warmup:
            for p, a, b in zip(PHASES, (t0, t1, t2, t3), (t1, t2, t3, t4)):
                times[p].append((b - a) * 1e3)
    return {p: statistics.median(v) for p, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=180)
    ap.add_argument("--modes", default="strict,fused", help="tpu modes to time (native CPU always runs)")
    args = ap.parse_args()
    runs = [("native cpu", "cpu", "strict")] + [(f"tpu {m}", "tpu", m) for m in args.modes.split(",")]
    print(f"{'':12}" + "".join(f"{p:>12}" for p in PHASES) + f"{'total':>10}   (ms, medians)")
    for label, device, mode in runs:
        torch_tpu.set_mode(mode)
        med = phase_medians(device, args.steps)
        print(f"{label:12}" + "".join(f"{med[p]:12.2f}" for p in PHASES) + f"{sum(med.values()):10.2f}")


if __name__ == "__main__":
    main()
