"""A/B of a change inside one process: alternate an environment switch per round.

These 2 shared cores drift by 10-50% between runs, so two builds (or two processes) compared
back to back mostly measure the drift. Instead, guard the change with a temporary
`std::getenv("NAME")` check (read at run time, not cached in a static), build once, and run:

    .venv/bin/python bench/ab_switch.py NAME gpt fused --rounds 11 --steps 10

Rounds alternate the switch (unset/set, then set/unset) with one warm-up step after each flip,
and the median of the per-round ratios is reported, which cancels drift slower than a round.
A switch read at compile time (a cached program or fused graph) is not toggled by this.
Workloads are bench/fused_vs_strict.py's (gpt, gpt2width, resnet, preprocess); mode is
strict, fused, native (CPU eager) or compiled (bench/compile.py's torch.compile(backend="tpu")
training step, for gpt and resnet).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

import torch_tpu

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fused_vs_strict import WORKLOADS, seconds_per_step  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("switch", help="environment variable the change under test reads")
    ap.add_argument("workload", choices=sorted(WORKLOADS))
    ap.add_argument("mode", choices=["strict", "fused", "native", "compiled"])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--read-every", type=int, default=1,
                    help="read the loss on the host every N steps (and at the end of each round)")
    args = ap.parse_args()
    device = "cpu" if args.mode == "native" else "tpu"
    if args.mode == "compiled":
        from compile import setup_variant

        if args.workload not in ("gpt", "resnet"):
            raise SystemExit("compiled mode runs the gpt and resnet training steps only")
        step, _ = setup_variant("compiled", args.workload, train=True)
    else:
        if args.mode != "native":
            torch_tpu.set_mode(args.mode)
        step = WORKLOADS[args.workload](device)
    for _ in range(3):
        step().item()
    times: dict[bool, list[float]] = {False: [], True: []}
    for r in range(args.rounds):
        for on in (False, True) if r % 2 == 0 else (True, False):
            if on:
                os.environ[args.switch] = "1"
            else:
                os.environ.pop(args.switch, None)
            step().item()
            times[on].append(seconds_per_step(step, args.steps, max(1, args.read_every)) * 1e3)
    os.environ.pop(args.switch, None)
    ratios = sorted(s / u for s, u in zip(times[True], times[False]))
    print(f"{args.workload} {args.mode}: {args.switch} unset {statistics.median(times[False]):.2f} ms/step, "
          f"set {statistics.median(times[True]):.2f} ms/step; set/unset time, median of rounds "
          f"{statistics.median(ratios):.3f} (range {ratios[0]:.2f}-{ratios[-1]:.2f})")


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
