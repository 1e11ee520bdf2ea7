"""Resident PJRT buffers against staged transfers, in one process: a GPT-style training step in
strict and fused modes with resident buffers on and off (_C._pjrt_set_resident), alternating
rounds. Prints steps/s, the ratio resident/staged, and host<->device bytes per step.

Needs the PJRT runtime, e.g. on XLA's CPU plugin (where "device" memory is host memory, so
the ratio measures copies and their bookkeeping, not a PCIe bus):

    TORCH_TPU_RUNTIME=pjrt TORCH_TPU_PJRT_PLUGIN=<site-packages>/lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so \\
        .venv/bin/python bench/pjrt_resident.py [--steps 10] [--rounds 3] [--modes strict,fused]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import torch_tpu
from torch_tpu import _C
from torch_tpu.models import TinyGPT, synthetic_text

CONFIG = dict(vocab=256, dim=64, heads=4, layers=2, ctx=64)
BATCH = 8


def _bytes() -> int:
    info = _C._pjrt_info()
    t, r = info["transfers"], info["resident"]
    return t["upload_bytes"] + t["download_bytes"] + r["sync_bytes"]


def train(mode: str, steps: int, warmup: int = 2) -> tuple[float, float, torch.Tensor]:
    """Trains a fresh TinyGPT; returns (steps/s, host<->device bytes per timed step, last loss)."""
    data = synthetic_text(warmup + steps, batch=BATCH, ctx=CONFIG["ctx"], vocab=CONFIG["vocab"])
    torch.manual_seed(0)
    model = TinyGPT(**CONFIG).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with torch_tpu.mode(mode):
        for i, (x, y) in enumerate(data):
            if i == warmup:
                torch.tpu.synchronize()
                t0, b0 = time.perf_counter(), _bytes()
            opt.zero_grad(set_to_none=True)
            loss = model(x.to("tpu"), y.to("tpu"))[1]
            loss.backward()
            opt.step()
        torch.tpu.synchronize()
    elapsed = time.perf_counter() - t0
    return steps / elapsed, (_bytes() - b0) / steps, loss.detach().cpu()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default="strict,fused")
    args = ap.parse_args()
    if _C._pjrt_info() is None:
        raise SystemExit("the PJRT runtime is not active: set TORCH_TPU_RUNTIME=pjrt and TORCH_TPU_PJRT_PLUGIN")
    print(f"PJRT platform: {_C._pjrt_info()['platform']}; TinyGPT {CONFIG}, batch {BATCH}, {args.steps} steps")
    for mode in args.modes.split(","):
        for on in (True, False):  # compile both variants before timing
            _C._pjrt_set_resident(on)
            train(mode, 1, warmup=1)
        ratios, rows = [], {True: [], False: []}
        for _ in range(args.rounds):
            loss = {}
            for on in (False, True):
                _C._pjrt_set_resident(on)
                sps, per_step, loss[on] = train(mode, args.steps)
                rows[on].append((sps, per_step))
            torch.testing.assert_close(loss[True], loss[False], rtol=1e-4, atol=1e-5)  # same training
            ratios.append(rows[True][-1][0] / rows[False][-1][0])
        for on in (False, True):
            sps = statistics.median(r[0] for r in rows[on])
            mib = statistics.median(r[1] for r in rows[on]) / 2**20
            print(f"{mode:6s} {'resident' if on else 'staged':8s} {sps:7.2f} steps/s  {mib:8.3f} MiB moved per step")
        print(f"{mode:6s} resident/staged steps/s: median {statistics.median(ratios):.2f}x "
              f"(rounds {', '.join(f'{r:.2f}' for r in ratios)})")
    _C._pjrt_set_resident(True)


if __name__ == "__main__":
    main()
