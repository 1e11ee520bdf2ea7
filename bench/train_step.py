"""Steps/s of the small GPT training step on "tpu" (strict) vs native CPU eager, one process.

Run: .venv/bin/python bench/train_step.py [--steps N] [--mode strict]
Target (device-foundation issue): tpu >= 0.6x native CPU.
"""

from __future__ import annotations

import argparse
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
    ap.add_argument("--mode", default="strict")
    args = ap.parse_args()
    torch_tpu.set_mode(args.mode)
    cpu = steps_per_second("cpu", args.steps)
    tpu = steps_per_second("tpu", args.steps)
    print(f"TinyGPT training step: native cpu {cpu:.2f} steps/s, tpu ({args.mode}) {tpu:.2f} steps/s, "
          f"ratio tpu/cpu {tpu / cpu:.2f}x")


if __name__ == "__main__":
    main()
