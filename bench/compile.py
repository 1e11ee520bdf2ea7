"""torch.compile(backend="tpu") vs fused eager vs strict vs native CPU eager vs Inductor on CPU.

Run: .venv/bin/python bench/compile.py [--steps N] [--rounds R] [--skip-inductor] [--skip-compile-time]

One process runs every variant of each workload (TinyGPT training step and inference,
SmallResNet training step and inference) and prints steps/s and ratios:
  compiled   model on tpu, torch.compile(model, backend="tpu") (forward+backward programs;
             the AdamW step runs eagerly in strict mode)
  compiled+opt  the same, and the AdamW step compiled too (torch.compile(opt.step,
             backend="tpu"): one program for every parameter's update); training only
  fused      the same model and step in fused eager mode (TORCH_TPU_MODE=fused)
  strict     the same in strict eager mode
  cpu        native PyTorch CPU eager
  inductor   torch.compile(model) on CPU (Inductor, C++ codegen)
Rounds alternate the variant order; steps/s are medians per variant, and the compiled ratios
are medians of the per-round ratios (2 shared cores make single runs swing by 30%; a pair
measured in the same round shares its swing). Besides wall-clock steps/s, the CPU time of the
whole process per step (every thread: the caller and the tpu stream worker) is reported, and
its ratios: on a machine shared with other jobs the wall clock mostly measures the share of
the cores this process got, while CPU time measures the work (run with --threads 1: idle
OpenMP threads spin and would count as work). Compile time: the first training step (Dynamo, AOTAutograd,
lowering and compiling forward and backward) of a fresh process with an empty cache
directory ("cold") and of a second process sharing it ("warm"), for the tpu backend
(TORCH_TPU_CACHE_DIR) and for Inductor (TORCHINDUCTOR_CACHE_DIR, its FX graph and AOTAutograd
caches). Subprocesses: both caches' disk tiers are per process.
Targets (issue 5): compiled >= 1.2x fused on the GPT training step; compiled >= 0.8x Inductor
on both models; cold compile no slower than Inductor's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch._dynamo
import torch.nn.functional as F

import torch_tpu
from torch_tpu.models import SmallResNet, TinyGPT, synthetic_text

VARIANTS = ("compiled", "compiled+opt", "fused", "strict", "cpu", "inductor")
BATCH_GPT, CTX, VOCAB = 8, 32, 128
BATCH_CNN = 8


def _gpt() -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(vocab=VOCAB, dim=64, heads=4, layers=2, ctx=CTX)


def _resnet() -> SmallResNet:
    torch.manual_seed(0)
    return SmallResNet(classes=10, width=16)


def _data(model: str, n: int, device: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    if model == "gpt":
        return [(x.to(device), y.to(device)) for x, y in synthetic_text(n, BATCH_GPT, CTX, VOCAB)]
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(BATCH_CNN, 3, 32, 32, generator=g).to(device),
             torch.randint(0, 10, (BATCH_CNN,), generator=g).to(device)) for _ in range(n)]


def _loss(model: str, fwd: Callable, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return fwd(x, y)[1] if model == "gpt" else F.cross_entropy(fwd(x), y)


def setup_variant(variant: str, model: str, train: bool) -> tuple[Callable[[], object], Callable[[], None]]:
    """(one step, wait for the device) for a variant; the step runs on a rotating batch."""
    device = "cpu" if variant in ("cpu", "inductor") else "tpu"
    m = (_gpt() if model == "gpt" else _resnet()).to(device)
    m.train(train)
    fwd: Callable = m
    if variant in ("compiled", "compiled+opt"):
        fwd = torch.compile(m, backend="tpu")
    elif variant == "inductor":
        fwd = torch.compile(m, backend="inductor")
    data = _data(model, 4, device)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3) if train else None
    opt_step = torch.compile(opt.step, backend="tpu") if opt is not None and variant == "compiled+opt" else None
    i = [0]
    mode = {"fused": "fused"}.get(variant, "strict")

    def step() -> object:
        x, y = data[i[0] % len(data)]
        i[0] += 1
        with torch_tpu.mode(mode):
            if train:
                loss = _loss(model, fwd, x, y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                (opt_step or opt.step)()
                return loss
            with torch.no_grad():
                return fwd(x, y)[0] if model == "gpt" else fwd(x)

    def wait() -> None:
        if device == "tpu":
            with torch_tpu.mode(mode):
                torch_tpu.sync()  # flushes pending fused work too
                torch.tpu.synchronize()

    return step, wait


# Beyond TORCH_TPU_NATIVE_KERNELS' default (64 runs): the steady state has the native kernels.
WARMUP_STEPS = 70


def _measure(step: Callable, wait: Callable, steps: int) -> tuple[float, float]:
    """(steps per second, CPU milliseconds per step of the whole process, every thread)."""
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(steps):
        out = step()
    if isinstance(out, torch.Tensor):
        out.sum().item()
    wait()
    return steps / (time.perf_counter() - t0), (time.process_time() - c0) / steps * 1e3


def throughput(model: str, train: bool, variants: list[str], steps: int,
               rounds: int) -> tuple[dict[str, float], dict[str, float], dict[tuple[str, str], float]]:
    """Median steps/s and median CPU ms/step per variant, and per pair of variants (a, b) the
    median over rounds of a's steps/s over b's in the same round (paired: drift slower than a
    round cancels)."""
    prepared = {}
    for v in variants:
        step, wait = setup_variant(v, model, train)
        for _ in range(WARMUP_STEPS):  # compile, warm up, and make the fused clusters hot
            step()
        wait()
        torch_tpu.wait_native_kernels()  # the host runtime's native tier, compiled in the background
        prepared[v] = (step, wait)
    runs: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
    for r in range(rounds):
        order = variants if r % 2 == 0 else variants[::-1]
        for v in order:
            runs[v].append(_measure(*prepared[v], steps))
    paired = {(a, b): statistics.median(ra[0] / rb[0] for ra, rb in zip(runs[a], runs[b]))
              for a in variants for b in variants if a != b}
    return ({v: statistics.median(x[0] for x in s) for v, s in runs.items()},
            {v: statistics.median(x[1] for x in s) for v, s in runs.items()}, paired)


_COMPILE_TIME = r"""
import json, sys, time, torch
import torch_tpu
sys.path.insert(0, {bench!r})
import compile as B
backend = sys.argv[1]
model = B._gpt() if sys.argv[2] == "gpt" else B._resnet()
device = "tpu" if backend == "tpu" else "cpu"
model = model.to(device).train()
x, y = B._data(sys.argv[2], 1, device)[0]
fwd = torch.compile(model, backend=backend)
t0 = time.perf_counter()
loss = B._loss(sys.argv[2], fwd, x, y)
loss.backward()
loss.item()
print(json.dumps({{"seconds": time.perf_counter() - t0, "stats": torch_tpu.compile.stats()}}))
"""


def compile_time(backend: str, model: str, kind: str, env: dict) -> float:
    script = _COMPILE_TIME.format(bench=str(Path(__file__).resolve().parent))
    out = subprocess.run([sys.executable, "-c", script, backend, model, kind], env=env, capture_output=True,
                         text=True, timeout=1200)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def compile_times(model: str, inductor: bool) -> dict[str, float]:
    res = {}
    with tempfile.TemporaryDirectory() as tpu_dir, tempfile.TemporaryDirectory() as ind_dir:
        env = dict(os.environ, TORCH_TPU_CACHE_DIR=tpu_dir, TORCHINDUCTOR_CACHE_DIR=ind_dir)
        res["tpu cold"] = compile_time("tpu", model, "cold", env)
        res["tpu warm"] = compile_time("tpu", model, "warm", env)
        if inductor:
            res["inductor cold"] = compile_time("inductor", model, "cold", env)
            res["inductor warm"] = compile_time("inductor", model, "warm", env)
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--skip-inductor", action="store_true")
    ap.add_argument("--skip-compile-time", action="store_true")
    ap.add_argument("--models", default="gpt,resnet")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch.set_num_threads for the CPU baselines (0: PyTorch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    variants = [v for v in VARIANTS if not (args.skip_inductor and v == "inductor")]
    print(f"torch {torch.__version__}, {os.cpu_count()} cores, {torch.get_num_threads()} CPU threads, "
          f"load average {os.getloadavg()[0]:.1f} at start")
    for model in args.models.split(","):
        for train in (True, False):
            run = [v for v in variants if train or v != "compiled+opt"]
            sps, cpu, paired = throughput(model, train, run, args.steps, args.rounds)
            what = f"{'TinyGPT' if model == 'gpt' else 'SmallResNet'} {'training step' if train else 'inference'}"
            print(f"{what}: " + ", ".join(f"{v} {s:.1f}/s" for v, s in sps.items()))
            for c in ("compiled", "compiled+opt")[:2 if train else 1]:
                ratios = [f"{c}/{v} {paired[c, v]:.2f}x" for v in run if not v.startswith("compiled")]
                print("  " + ", ".join(ratios) + "  (median of per-round ratios)")
            print("  CPU ms/step: " + ", ".join(f"{v} {c:.1f}" for v, c in cpu.items()))
            ratios = [f"compiled/{v} {cpu[v] / cpu['compiled']:.2f}x" for v in run if v != "compiled"]
            print("  CPU-time throughput " + ", ".join(ratios))
            torch._dynamo.reset()
        if not args.skip_compile_time:
            t = compile_times(model, not args.skip_inductor)
            line = ", ".join(f"{k} {s:.1f} s" for k, s in t.items())
            print(f"{'TinyGPT' if model == 'gpt' else 'SmallResNet'} first training step (compile): {line}")
    s = torch_tpu.compile.stats()
    print(f"tpu backend: {s['recompiles']} recompiles, {s['fallbacks']} fallbacks {s['fallback_ops']}, "
          f"{s['graph_breaks']} graph breaks")
    print(f"load average {os.getloadavg()[0]:.1f} at end")


if __name__ == "__main__":
    main()
