"""Fused (DeferAndFuse) vs strict eager on the host runtime, same process, same inputs.

Workloads (fused-eager issue):
  gpt        training step of the small GPT from the foundation issue (also vs native CPU eager)
  gpt2width  training step at GPT-2-small width (768, 12 heads) with 2 layers, short context
  resnet     training step of a small ResNet (3x32x32, batch norm, residual blocks)
  resnet_cl  the same with the model and images channels-last (also vs native CPU eager)
  preprocess an elementwise-heavy preprocessing function over a batch of images
For each: seconds per step in both modes (warm caches, rounds alternate the modes and the median
ratio is reported because these 2 shared cores drift; each round times at least --steps steps
and --window seconds, since over a few milliseconds one slow step of a noisy neighbour moves the
mean by half), peak device memory of one step per mode, and for gpt and resnet_cl the ratio to
native CPU eager. Cold time-to-first-step (fresh process, empty program caches) is reported per
mode with --cold.

Each step ends in a host read of the loss (`.item()`); --read-every N reads it every N steps
instead (loops that log now and then), which lets the host record ahead of the device.

Run: .venv/bin/python bench/fused_vs_strict.py [--rounds 5] [--steps 5] [--window 0.3]
     [--only gpt,resnet] [--cold] [--read-every N]
Targets: fused/strict speed >= 1.5x on gpt+resnet (geomean) and >= 3x on preprocess; fused peak
memory <= strict; fused gpt step at least as fast as native CPU.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

import torch_tpu
from torch_tpu.models import SmallResNet, TinyGPT, synthetic_text


def gpt_step(device: str, vocab: int = 128, dim: int = 64, heads: int = 4, layers: int = 2, ctx: int = 32,
             batch: int = 8) -> Callable[[], torch.Tensor]:
    torch.manual_seed(0)
    model = TinyGPT(vocab=vocab, dim=dim, heads=heads, layers=layers, ctx=ctx).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x, y = (t.to(device) for t in synthetic_text(1, batch, ctx, vocab)[0])

    def step() -> torch.Tensor:
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


def gpt2width_step(device: str) -> Callable[[], torch.Tensor]:
    return gpt_step(device, vocab=512, dim=768, heads=12, layers=2, ctx=64, batch=4)


def resnet_step(device: str,
                memory_format: torch.memory_format = torch.contiguous_format) -> Callable[[], torch.Tensor]:
    torch.manual_seed(0)
    model = SmallResNet().to(device, memory_format=memory_format)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(16, 3, 32, 32).to(device).contiguous(memory_format=memory_format)
    y = torch.randint(0, 10, (16,)).to(device)

    def step() -> torch.Tensor:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


def preprocess_step(device: str) -> Callable[[], torch.Tensor]:
    torch.manual_seed(0)
    images = (torch.rand(32, 3, 64, 64) * 255).to(device)
    mean = torch.tensor([123.7, 116.3, 103.5]).view(1, 3, 1, 1).to(device)
    std = torch.tensor([58.4, 57.1, 57.4]).view(1, 3, 1, 1).to(device)

    def step() -> torch.Tensor:
        x = (images / 255.0 - mean / 255.0) / (std / 255.0)
        x = x.clamp(-2.5, 2.5)
        bright = x > 1.0
        x = torch.where(bright, x * 0.8 + 0.2, x)
        x = x * (1.0 + 0.1 * torch.tanh(x)) - 0.05 * x.square()
        x = x.masked_fill(x < -2.0, -2.0)
        return (x * x.sigmoid()).sum()

    return step


def resnet_channels_last_step(device: str) -> Callable[[], torch.Tensor]:
    return resnet_step(device, torch.channels_last)


WORKLOADS = {"gpt": gpt_step, "gpt2width": gpt2width_step, "resnet": resnet_step,
             "resnet_cl": resnet_channels_last_step, "preprocess": preprocess_step}
# Workloads also timed in native CPU eager.
NATIVE = ("gpt", "resnet_cl")


def seconds_per_step(step: Callable[[], torch.Tensor], steps: int, read_every: int = 1,
                     window: float = 0.0) -> float:
    """Mean seconds per step over at least `steps` steps and `window` seconds; the loss is read on
    the host every `read_every` steps and after the last one, as training loops log it."""
    t0 = time.perf_counter()
    i = 0
    while True:
        loss = step()
        i += 1
        if i % read_every == 0:
            loss.item()
            if i >= steps and time.perf_counter() - t0 >= window:
                break
    return (time.perf_counter() - t0) / i


def measure(name: str, steps: int, rounds: int, read_every: int = 1, window: float = 0.0) -> dict[str, float]:
    make = WORKLOADS[name]
    runners: dict[str, Callable[[], torch.Tensor]] = {}
    peaks: dict[str, int] = {}
    for mode in ("strict", "fused"):
        with torch_tpu.mode(mode):
            runners[mode] = make("tpu")
            # Warm the program caches, and run the fused clusters past TORCH_TPU_NATIVE_KERNELS'
            # default (64 runs) so their native kernels (compiled in the background) are loaded.
            for _ in range(70):
                runners[mode]()
            runners[mode]().item()
            torch_tpu.wait_native_kernels()
            torch.tpu.synchronize()
            torch.tpu.reset_peak_memory_stats()
            base = torch.tpu.memory_allocated()
            runners[mode]().item()
            torch.tpu.synchronize()
            peaks[mode] = torch.tpu.max_memory_allocated() - base
    native = make("cpu") if name in NATIVE else None
    times: dict[str, list[float]] = {"strict": [], "fused": [], "cpu": []}
    for r in range(rounds):
        order = ["strict", "fused"] if r % 2 == 0 else ["fused", "strict"]
        for mode in order:
            with torch_tpu.mode(mode):
                times[mode].append(seconds_per_step(runners[mode], steps, read_every, window))
        if native is not None:
            native().item()
            times["cpu"].append(seconds_per_step(native, steps, read_every, window))
    speedups = [s / f for s, f in zip(times["strict"], times["fused"])]
    out = {
        "strict_ms": 1e3 * statistics.median(times["strict"]),
        "fused_ms": 1e3 * statistics.median(times["fused"]),
        "speedup": statistics.median(speedups),
        "strict_peak_mib": peaks["strict"] / 2**20,
        "fused_peak_mib": peaks["fused"] / 2**20,
    }
    if native is not None:
        out["cpu_ms"] = 1e3 * statistics.median(times["cpu"])
        out["fused_vs_cpu"] = statistics.median([c / f for c, f in zip(times["cpu"], times["fused"])])
    return out


COLD = """
import sys, time, torch, torch_tpu
sys.path.insert(0, {bench!r})
from fused_vs_strict import WORKLOADS
torch_tpu.set_mode({mode!r})
step = WORKLOADS[{name!r}]("tpu")
t0 = time.perf_counter(); step().item(); t1 = time.perf_counter(); step().item(); t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


def cold_start(name: str, mode: str, env: dict[str, str]) -> tuple[float, float]:
    code = COLD.format(bench=os.path.dirname(os.path.abspath(__file__)), mode=mode, name=name)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    first, second = (float(v) for v in out.stdout.split())
    return first, second


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5, help="at least this many steps per timed window")
    ap.add_argument("--window", type=float, default=0.3, help="at least this many seconds per timed window")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", default=",".join(WORKLOADS))
    ap.add_argument("--cold", action="store_true", help="also measure time-to-first-step in fresh processes")
    ap.add_argument("--read-every", type=int, default=1,
                    help="read the loss on the host every N steps (and at the end of each round)")
    args = ap.parse_args()
    names = args.only.split(",")
    results = {}
    for name in names:
        r = measure(name, args.steps, args.rounds, max(1, args.read_every), args.window)
        results[name] = r
        line = (f"{name:10s} strict {r['strict_ms']:8.2f} ms  fused {r['fused_ms']:8.2f} ms  "
                f"fused/strict speed {r['speedup']:.2f}x  peak MiB strict {r['strict_peak_mib']:.1f} "
                f"fused {r['fused_peak_mib']:.1f}")
        if "cpu_ms" in r:
            line += f"  native cpu {r['cpu_ms']:.2f} ms (fused/cpu speed {r['fused_vs_cpu']:.2f}x)"
        print(line, flush=True)
    training = [results[n]["speedup"] for n in ("gpt", "resnet") if n in results]
    if training:
        print(f"geomean fused/strict speed on gpt+resnet: {math.exp(sum(map(math.log, training)) / len(training)):.2f}x")
    if args.cold:
        import tempfile

        for name in names:
            for mode in ("strict", "fused"):
                with tempfile.TemporaryDirectory() as cache:  # per mode: the modes share per-op programs
                    env = dict(os.environ, TORCH_TPU_CACHE_DIR=cache)
                    cold, _ = cold_start(name, mode, env)
                    warm_disk, steady = cold_start(name, mode, env)  # second process: disk tier populated
                    print(f"{name:10s} {mode:6s} first step: cold {cold:.2f} s, warm disk cache {warm_disk:.2f} s, "
                          f"second step {steady * 1e3:.1f} ms", flush=True)


if __name__ == "__main__":
    main()
