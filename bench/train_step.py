"""Steps/s of the small GPT training step on "tpu" (strict) vs native CPU eager, one process.

Run: .venv/bin/python bench/train_step.py [--steps N] [--rounds R] [--mode strict]
Target (device-foundation issue): tpu >= 0.6x native CPU.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import torch_tpu
from torch_tpu.models import TinyGPT, synthetic_text


def steps_per_second(device: str, steps: int, warmup: int = 3) -> float:
    torch.manual_seed(0)
    model = TinyGPT(vocab=128, dim=64, heads=4, layers=2, ctx=32).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = [(x.to(device), y.to(device)) for x, y in synthetic_text(steps + warmup, 8, 32, 128)]

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    for x, y in data[:warmup]:
        step(x, y).item()
    t0 = time.perf_counter()
    for x, y in data[warmup:]:
        loss = step(x, y)
    loss.item()  # wait for the device
    return steps / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mode", default="strict")
    args = ap.parse_args()
    torch_tpu.set_mode(args.mode)
    # Alternate the two devices over several rounds and report the median ratio: on 2 shared
    # cores native CPU eager (two OpenMP threads) swings by 30% or more between runs.
    ratios = []
    for r in range(args.rounds):
        first, second = ("cpu", "tpu") if r % 2 == 0 else ("tpu", "cpu")
        sps = {first: steps_per_second(first, args.steps), second: steps_per_second(second, args.steps)}
        ratios.append(sps["tpu"] / sps["cpu"])
        print(f"round {r}: native cpu {sps['cpu']:.2f} steps/s, tpu ({args.mode}) {sps['tpu']:.2f} steps/s, "
              f"ratio {ratios[-1]:.2f}x")
    print(f"TinyGPT training step: median ratio tpu/cpu {statistics.median(ratios):.2f}x over {args.rounds} rounds")


if __name__ == "__main__":
    main()
