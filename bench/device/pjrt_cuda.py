"""GPT-style training step on the PJRT runtime (the CUDA plugin of jax-cuda13-pjrt) in strict,
fused and compiled modes, next to native PyTorch `cuda` eager in the same process. Prints steps/s
and ratios, checks the PJRT losses against CPU, and writes JSON to --out. Run by
bench/device/pjrt_cuda.sh (which sets TORCH_TPU_RUNTIME=pjrt and TORCH_TPU_PJRT_PLUGIN). Without
a CUDA device (a dry run on the CPU plugin) the cuda row is left out and ratios are to fused.

    python bench/device/pjrt_cuda.py --out results.json [--steps 10] [--warmup 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import time

import torch

# Native CUDA runs before torch_tpu is imported: once a PrivateUse1 backend is registered,
# at::getAccelerator() answers PrivateUse1, and torch 2.11's autograd engine then fails CUDA
# backward passes with "opt_ready_stream && opt_parent_stream INTERNAL ASSERT FAILED"
# (seen on the H200 machine, 2026-12-01). The model file is loaded on its own for that reason:
# `import torch_tpu.models` would import (and register) the package.
_spec = importlib.util.spec_from_file_location(
    "tinygpt_models", pathlib.Path(__file__).resolve().parents[2] / "torch_tpu" / "models.py")
_models = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_models)
TinyGPT, synthetic_text = _models.TinyGPT, _models.synthetic_text

CONFIG = dict(vocab=512, dim=256, heads=8, layers=4, ctx=128)
BATCH = 16


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
    elif device == "tpu":
        torch.tpu.synchronize()


def run(device: str, steps: int, warmup: int, config: dict, batch: int, compiled: bool = False) -> dict:
    """Trains TinyGPT for warmup + steps steps; returns losses and steps/s over the timed steps
    (and the wall time of the first step, which includes compiling)."""
    data = synthetic_text(warmup + steps, batch=batch, ctx=config["ctx"], vocab=config["vocab"])
    torch.manual_seed(0)
    model = TinyGPT(**config).to(device)
    if compiled:
        torch._dynamo.reset()  # a fresh frame cache: the small correctness model must not guard the big one
    step_model = torch.compile(model, backend="tpu") if compiled else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, eps=1e-6)
    losses = []
    first_step_s = 0.0
    t0 = start = time.perf_counter()
    for i, (x, y) in enumerate(data):
        if i == warmup:
            _sync(device)
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = step_model(x.to(device), y.to(device))[1]
        loss.backward()
        opt.step()
        losses.append(loss.detach())
        if i == 0:
            _sync(device)
            first_step_s = time.perf_counter() - start
    _sync(device)
    elapsed = time.perf_counter() - t0
    return {"steps_per_s": steps / elapsed, "first_step_s": first_step_s,
            "losses": [float(v.item()) for v in losses]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()

    cuda = run("cuda", args.steps, args.warmup, CONFIG, BATCH) if torch.cuda.is_available() else None

    import torch_tpu
    from torch_tpu import _C

    info = _C._pjrt_info()
    result: dict = {"runtime": _C._runtime_name(), "pjrt": info, "config": CONFIG, "batch": BATCH,
                    "torch": torch.__version__, "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    assert info is not None, "the PJRT runtime is not active (TORCH_TPU_RUNTIME=pjrt, TORCH_TPU_PJRT_PLUGIN)"
    print(f"PJRT: {info['platform']} {info['platform_version']} API {info['api_version']} "
          f"devices {[d['kind'] for d in info['devices']]}", flush=True)

    # Correctness first: a small model, 3 steps, PJRT strict and fused against CPU.
    small = dict(vocab=64, dim=32, heads=4, layers=2, ctx=16)
    ref = run("cpu", 3, 0, small, 4)["losses"]
    for mode in ("strict", "fused", "compiled"):
        try:
            with torch_tpu.mode("fused" if mode == "compiled" else mode):
                got = run("tpu", 3, 0, small, 4, compiled=mode == "compiled")["losses"]
        except Exception as e:  # noqa: BLE001 - reported, then the next mode runs
            print(f"{mode}: FAILED {type(e).__name__}: {str(e)[:2000]}", flush=True)
            result[f"matches_cpu_{mode}"] = f"{type(e).__name__}: {e}"
            continue
        # Tolerance: GPU matmuls and reductions round differently from CPU (TF32 is off in XLA by
        # default for f32, but reduction order differs); 3 steps of AdamW stay within 2e-3.
        ok = torch.allclose(torch.tensor(got), torch.tensor(ref), rtol=2e-3, atol=2e-3)
        result[f"matches_cpu_{mode}"] = ok
        print(f"{mode}: losses {got} vs cpu {ref}: {'match' if ok else 'MISMATCH'}", flush=True)

    rows = []
    if cuda is not None:
        rows.append(("cuda eager (native)", cuda["steps_per_s"]))
        result["losses_cuda"] = cuda["losses"]
    # Each mode is measured on its own: one failing (say, a compile error in compiled mode) still
    # leaves the others' figures.
    def moved_bytes() -> int:  # host<->device bytes so far (program transfers + resident syncs)
        i = _C._pjrt_info()
        return i["transfers"]["upload_bytes"] + i["transfers"]["download_bytes"] + i["resident"]["sync_bytes"]

    for mode in ("fused", "compiled", "strict"):
        try:
            moved = moved_bytes()
            with torch_tpu.mode("fused" if mode == "compiled" else mode):
                r = run("tpu", args.steps, args.warmup, CONFIG, BATCH, compiled=mode == "compiled")
            r["moved_mib_per_step"] = (moved_bytes() - moved) / 2**20 / (args.steps + args.warmup)
            result[f"moved_mib_per_step_{mode}"] = r["moved_mib_per_step"]
        except Exception as e:  # noqa: BLE001 - reported, then the next mode runs
            print(f"tpu {mode}: FAILED {type(e).__name__}: {str(e)[:2000]}", flush=True)
            result[f"error_{mode}"] = f"{type(e).__name__}: {e}"
            continue
        rows.append((f"tpu {mode} (PJRT)", r["steps_per_s"]))
        result[f"losses_{mode}"] = r["losses"]
        result[f"first_step_s_{mode}"] = r["first_step_s"]
        print(f"tpu {mode}: {r['steps_per_s']:.2f} steps/s, first step {r['first_step_s']:.1f} s, "
              f"{r['moved_mib_per_step']:.3f} MiB host<->device per step (warm-up included)", flush=True)
    result["steps_per_s"] = dict(rows)
    result["pjrt_after"] = _C._pjrt_info()
    try:
        result["pjrt_memory"] = _C._pjrt_memory_stats(0)
    except RuntimeError as e:  # memory statistics are optional in PJRT
        result["pjrt_memory"] = str(e)
    print(f"\nTinyGPT {CONFIG} batch {BATCH}, {args.steps} timed steps after {args.warmup} warmup:")
    base_name, base = rows[0] if rows else ("none", 1.0)
    for name, sps in rows:
        print(f"  {name:32s} {sps:8.2f} steps/s   x{sps / base:.3f} of {base_name}")
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
