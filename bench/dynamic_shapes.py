"""Variable-length training: a new sequence length (almost) every step, in every mode.

Run: .venv/bin/python bench/dynamic_shapes.py [--width 128] [--layers 2] [--steps 50]
         [--min-len 16] [--max-len 512] [--batch 2] [--variants cpu,inductor,strict,fused,compiled]
         [--threads N]

One process trains a randomly initialised Hugging Face GPT-2 (no hub access) with each variant,
on the same 50 batches whose sequence lengths are drawn from [min-len, max-len] (seeded), and
prints per-step time over all steps, compiles included (the figure the issue targets), the
median step after the first five, the programs compiled, and ratios:
  cpu        native PyTorch CPU eager
  inductor   torch.compile(model, dynamic=True) on CPU (Inductor's dynamic shapes)
  strict     the model on tpu, strict eager mode
  fused      the model on tpu, fused eager mode
  compiled   torch.compile(model, backend="tpu") on tpu (Dynamo's default dynamic=None: the
             first length compiles static, the second marks the length dynamic)
Programs: tpu eager modes count program-cache misses (per-op and fused graphs), and how many of
the per-op misses reused a graph learned at other sizes (TORCH_TPU_SHAPE_TEMPLATES); compiled counts
the forward/backward programs torch_tpu.compile built, and how many of them were written into a
graph learned at other sizes instead of lowered (compile/graph_templates.py); inductor counts
Dynamo's frame compiles. "After step 2" leaves out the steps where Dynamo traces (the first
length static, the second dynamic), the part of a longer run that grows with its steps.
Targets (issue 39): compiled >= 1.0x fused and >= 1.0x inductor, at most 8 programs for lengths
16..512; fused >= 1.0x cpu.
With TORCH_TPU_RUNTIME=pjrt (and TORCH_TPU_PJRT_PLUGIN) each tpu row also counts the XLA
executables compiled (per-op programs compile on first run, so this is what ran).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable

# Every length is new to every variant: no disk tier (each variant would load the programs the
# one before it stored, and a previous run's entries for the same seeded lengths would turn the
# misses measured here into loads); bench/disk_cache.py measures the tier. Each tpu variant
# also starts from an empty in-memory program cache (run()).
os.environ.setdefault("TORCH_TPU_CACHE_DIR", "off")

import torch
import torch._dynamo

import torch_tpu
from torch_tpu.lowering import shape_templates

VOCAB = 2048


def batches(steps: int, batch: int, lo: int, hi: int) -> list[torch.Tensor]:
    """Token batches with a fresh length each step (seeded, reproducible)."""
    rng = random.Random(0)
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, VOCAB, (batch, rng.randint(lo, hi)), generator=g) for _ in range(steps)]


def model(width: int, layers: int, max_len: int) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=max_len, n_embd=width, n_layer=layers,
                     n_head=max(1, width // 64), resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    m = GPT2LMHeadModel(cfg)
    # GPT2LMHeadModel's class name maps to no loss type, so its loss_function warns through
    # transformers' lru_cache'd warning_once: a graph break under Dynamo that splits the loss
    # into graphs of its own. The attribute is read from the model, not the config.
    m.loss_type = "ForCausalLM"
    return m


def programs(variant: str) -> int:
    if variant in ("strict", "fused"):
        m = torch_tpu.metrics()
        return int(m.get("cache_misses", 0)) + int(m["fused"].get("graphs_compiled", 0))
    if variant == "compiled":
        s = torch_tpu.compile.stats()
        return s["graphs_compiled"] + s["graphs_loaded"]
    if variant == "inductor":
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    return 0


def _xla_compiles() -> int:
    """XLA executables the PJRT runtime compiled so far (0 on the host runtime)."""
    info = torch_tpu._C._pjrt_info()
    return int(info["compiles"]) if info else 0


def run(variant: str, data: list[torch.Tensor], width: int, layers: int, max_len: int) -> dict:
    device = "cpu" if variant in ("cpu", "inductor") else "tpu"
    torch._dynamo.reset()
    torch_tpu._C._clear_program_cache()  # per-op programs an earlier variant compiled
    shape_templates.reset()  # and the graphs it learned across sizes
    torch_tpu.reset_metrics()
    xla_before = _xla_compiles()
    m = model(width, layers, max_len).to(device)
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    fwd: Callable = m
    if variant == "inductor":
        fwd = torch.compile(m, dynamic=True)
    elif variant == "compiled":
        fwd = torch.compile(m, backend="tpu")
    mode = variant if variant in ("strict", "fused") else "strict"
    times, losses = [], []
    with torch_tpu.mode(mode):
        for x in data:
            t0 = time.perf_counter()
            x = x.to(device)
            loss = fwd(input_ids=x, labels=x).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())  # a host read every step, as a training loop logs
            times.append(time.perf_counter() - t0)
    met = torch_tpu.metrics()
    compile_s = met["compile_seconds"] + met["fused"]["graph_compile_seconds"] if device == "tpu" else 0.0
    reused = met["shape_templates"]["reused"] if variant != "compiled" else met["compile"]["graph_instances"]
    return {"mean": sum(times) / len(times), "steady": statistics.median(times[5:] or times),
            "after2": sum(times[2:]) / max(1, len(times) - 2),
            "times": times, "first": times[0], "programs": programs(variant), "losses": losses, "compile_s": compile_s,
            "reused": reused, "xla": _xla_compiles() - xla_before}


def _runtime() -> str:
    return torch_tpu._C._runtime_name()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--min-len", type=int, default=16)
    p.add_argument("--max-len", type=int, default=512)
    p.add_argument("--per-step", action="store_true", help="also print every step's time (ms) and length")
    p.add_argument("--variants", default="cpu,inductor,strict,fused,compiled")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave torch's default); "
                   "native CPU eager's OpenMP threads slow down 10x when another job shares the cores")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    data = batches(a.steps, a.batch, a.min_len, a.max_len)
    print(f"GPT-2 width {a.width}, {a.layers} layers, batch {a.batch}, {a.steps} steps, "
          f"{len({x.shape[1] for x in data})} distinct lengths in [{a.min_len}, {a.max_len}]", flush=True)
    res = {}
    for v in a.variants.split(","):
        r = res[v] = run(v, data, a.width, a.layers, a.max_len)
        print(f"{v:9s} {1e3 * r['mean']:8.1f} ms/step (all steps)  {1e3 * r['after2']:8.1f} ms after step 2  "
              f"{1e3 * r['steady']:8.1f} ms steady  first {r['first']:6.2f} s  programs {r['programs']}  "
              f"(tpu compile {r['compile_s']:.1f} s, {r['reused']} without lowering"
              + (f", {r['xla']} XLA executables" if _runtime() == "pjrt" else "") + ")", flush=True)
        if a.per_step:
            print("  " + " ".join(f"{x.shape[1]}:{1e3 * t:.0f}" for x, t in zip(data, r["times"])), flush=True)
    if "cpu" in res:
        ref = torch.tensor(res["cpu"]["losses"])
        for v, r in res.items():
            d = (torch.tensor(r["losses"]) - ref).abs().max().item()
            if d > 1e-2:
                print(f"WARNING: {v} losses differ from cpu by up to {d:.3g}", file=sys.stderr)

    def ratio(a_: str, b_: str) -> None:
        if a_ in res and b_ in res:
            print(f"{a_}/{b_}: {res[b_]['mean'] / res[a_]['mean']:.2f}x (all steps), "
                  f"{res[b_]['after2'] / res[a_]['after2']:.2f}x (after step 2), "
                  f"{res[b_]['steady'] / res[a_]['steady']:.2f}x (steady)")

    for pair in (("compiled", "fused"), ("compiled", "inductor"), ("compiled", "cpu"), ("fused", "cpu"),
                 ("fused", "strict"), ("strict", "cpu")):
        ratio(*pair)


if __name__ == "__main__":
    main()
