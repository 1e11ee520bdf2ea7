"""The PJRT peers race: our modes on the PJRT runtime against PyTorch/XLA and jax.jit, all on
XLA's CPU PJRT backend, each as a ratio to native PyTorch CPU eager measured in the same process.

Sides (each a subprocess started by the driver with the same thread settings; the driver
combines their JSON):

* ``ours`` (.venv, torch 2.13): native CPU eager, then torch_tpu strict / fused / compiled
  (``torch.compile(backend="tpu")``) on ``TORCH_TPU_RUNTIME=pjrt`` with the CPU plugin of
  ``lammps-jax-pjrt-cpu``.
* ``xla`` (``--peers-python``, .venv-peers made by ``make bench-peers``: torch-xla 2.9.0 and
  its torch 2.9.0): native CPU eager, then PyTorch/XLA lazy (``torch_xla.sync()`` per step),
  eager mode (``torch_xla.experimental.eager_mode``) and ``torch.compile(backend="openxla")``
  on ``PJRT_DEVICE=CPU``.
* ``jax`` (.venv, jax 0.10.2): native CPU eager, then the same GPT written in JAX with the same
  initial weights (copied from the torch model) and the same AdamW, one ``jax.jit`` per step.

Every figure is steps/s divided by that process's native CPU eager steps/s (the common
yardstick across the two torch versions); ours/peer ratios are quotients of those ratios. A
side that is missing (no .venv-peers) is reported as such; a mode that fails prints its error.

Workloads: ``gpt`` (TinyGPT width 128, 2 layers, ctx 64, vocab 512, batch 8, AdamW),
``gpt2`` (GPT-2-small-shaped: 12 layers, width 768, 12 heads, seq 256, batch 4, vocab 8192),
``resnet18`` (ResNet-18-shaped, 3x32x32 inputs, batch 8, SGD momentum), ``decode`` (greedy
decoding of 64 tokens with a static KV cache, TinyGPT width 128, batch 1).

Per contestant it prints the first step's wall time from a fresh model (cold: compiles
included; our executable cache points at an empty directory), steps/s over the timed steps,
and a per-step breakdown: host ms (issuing the step, waits at a run-ahead bound included),
host cpu (the CPU time of the thread issuing it: its own work), wait ms (the final synchronize:
device work the host did not overlap), proc cpu (the whole process's CPU time, which on XLA's
CPU plugin includes the device's work), compiles during the timed steps, programs executed and bytes
moved host<->device per step (ours: ``_C._pjrt_info()``; PyTorch/XLA: its debug metrics).

    .venv/bin/python bench/pjrt_peers.py [--workloads gpt,decode] [--steps 10] [--rounds 3] \\
        [--peers-python .venv-peers/bin/python]
    make bench-peers PEERS_ARGS="--workloads gpt,gpt2"
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]

CONFIGS: dict[str, dict[str, Any]] = {
    "gpt": dict(model=dict(vocab=512, dim=128, heads=4, layers=2, ctx=64), batch=8, steps=10, warmup=3),
    "gpt2": dict(model=dict(vocab=8192, dim=768, heads=12, layers=12, ctx=256), batch=4, steps=2, warmup=2),
    "resnet18": dict(batch=8, size=32, steps=5, warmup=3),
    "decode": dict(model=dict(vocab=512, dim=128, heads=4, layers=2, ctx=80), batch=1, prompt=8, tokens=64,
                   steps=3, warmup=2),
}
SIDES = {"ours": ("strict", "fused", "compiled"), "xla": ("xla-lazy", "xla-eager", "xla-openxla"),
         "jax": ("jax-jit",)}


# ----------------------------------------------------------------------------------------------
# Models and steps (plain torch: loaded without importing torch_tpu, for the torch-xla side)

def load_models() -> Any:
    """torch_tpu/models.py as a module of its own (importing torch_tpu.models would register the
    tpu backend, which the torch-xla side's torch cannot load)."""
    spec = importlib.util.spec_from_file_location("peer_models", ROOT / "torch_tpu" / "models.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def resnet18(torch: Any, models: Any, classes: int = 10) -> Any:
    """ResNet-18's shape for 32x32 inputs: 3x3 stem, four stages of two basic blocks (64..512)."""
    nn = torch.nn

    class ResNet18(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
            blocks, cin = [], 64
            for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                blocks += [models.BasicBlock(cin, cout, stride), models.BasicBlock(cout, cout)]
                cin = cout
            self.stages = nn.Sequential(*blocks)
            self.fc = nn.Linear(512, classes)

        def forward(self, x: Any) -> Any:
            return self.fc(torch.nn.functional.adaptive_avg_pool2d(self.stages(self.stem(x)), 1).flatten(1))

    return ResNet18()


class KVDecoder:
    """Greedy decoding with a static KV cache over TinyGPT's weights: every step has the same
    shapes (the position is a device tensor, the cache is written with index_copy_ and read
    through a mask), so every backend compiles one step program."""

    def __init__(self, torch: Any, model: Any, batch: int, max_len: int, device: Any) -> None:
        self.torch, self.m = torch, model
        blk = model.blocks[0]
        self.heads, self.dim = blk.attn.heads, model.tok.weight.shape[1]
        hd = self.dim // self.heads
        shape = (len(model.blocks), batch, self.heads, max_len, hd)
        self.k = torch.zeros(shape, device=device)
        self.v = torch.zeros(shape, device=device)
        self.ar = torch.arange(max_len, device=device)
        self.scale = 1.0 / math.sqrt(hd)

    def step(self, tok: Any, pos: Any) -> Any:
        """The next token (B, 1) after `tok` (B, 1) at position `pos` (a 1-element long tensor)."""
        torch, m = self.torch, self.m
        b = tok.shape[0]
        x = m.tok(tok) + m.pos(pos)
        keep = (self.ar <= pos).view(1, 1, 1, -1)
        for i, blk in enumerate(m.blocks):
            q, k, v = blk.attn.qkv(blk.ln1(x)).split(self.dim, dim=2)
            q, k, v = (z.view(b, 1, self.heads, -1).transpose(1, 2) for z in (q, k, v))
            self.k[i].index_copy_(2, pos, k)
            self.v[i].index_copy_(2, pos, v)
            att = (q @ self.k[i].transpose(-1, -2)) * self.scale
            att = att.masked_fill(~keep, float("-inf")).softmax(-1)
            y = (att @ self.v[i]).transpose(1, 2).reshape(b, 1, self.dim)
            x = x + blk.attn.proj(y)
            x = x + blk.mlp(blk.ln2(x))
        return m.head(m.ln_f(x))[:, -1].argmax(-1, keepdim=True)


class Contestant:
    """One workload on one device/mode: `step()` issues one training step (or one decoding run)
    and returns a value to check; `sync()` waits for the device."""

    def __init__(self, name: str, step: Callable[[], Any], sync: Callable[[], None],
                 counters: Callable[[], dict[str, float]] | None = None) -> None:
        self.name, self.step, self.sync = name, step, sync
        self.counters = counters or (lambda: {})


def training_step(data: list[tuple[Any, Any]], opt: Any, loss_of: Callable[[Any, Any], Any],
                  ctx: Callable[[], Any], after_step: Callable[[], None]) -> Callable[[], Any]:
    """One optimizer step per call over `data` in turn: zero_grad, loss_of(x, y), backward, step,
    all inside the mode context `ctx`; returns the detached loss."""
    it = [0]

    def step() -> Any:
        x, y = data[it[0] % len(data)]
        it[0] += 1
        with ctx():
            opt.zero_grad(set_to_none=True)
            loss = loss_of(x, y)
            loss.backward()
            opt.step()
        after_step()
        return loss.detach()

    return step


def make_contestant(torch: Any, models: Any, workload: str, name: str, device: Any,
                    wrap: Callable[[Any], Any] | None, ctx: Callable[[], Any], after_step: Callable[[], None],
                    sync: Callable[[], None], counters: Callable[[], dict[str, float]] | None = None) -> Contestant:
    """Builds a fresh model of `workload` on `device` (seed 0, so every contestant has the same
    initial weights) and its step. `wrap` compiles the model (or the decode step); `ctx` is the
    mode context each step runs in; `after_step` ends a step (PyTorch/XLA lazy: sync)."""
    cfg = CONFIGS[workload]
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    if workload in ("gpt", "gpt2"):
        mc = cfg["model"]
        model = models.TinyGPT(**mc).to(device)
        fwd = wrap(model) if wrap else model
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        data = [(x.to(device), y.to(device)) for x, y in models.synthetic_text(4, cfg["batch"], mc["ctx"], mc["vocab"])]
        step = training_step(data, opt, lambda x, y: fwd(x, y)[1], ctx, after_step)
    elif workload == "resnet18":
        model = resnet18(torch, models).to(device)
        fwd = wrap(model) if wrap else model
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        data = [(torch.randn(cfg["batch"], 3, cfg["size"], cfg["size"], generator=g).to(device),
                 torch.randint(0, 10, (cfg["batch"],), generator=g).to(device)) for _ in range(4)]
        step = training_step(data, opt, lambda x, y: torch.nn.functional.cross_entropy(fwd(x), y), ctx, after_step)
    elif workload == "decode":
        mc = cfg["model"]
        model = models.TinyGPT(**mc).to(device).eval()
        dec = KVDecoder(torch, model, cfg["batch"], mc["ctx"], device)
        one = wrap(dec.step) if wrap else dec.step
        prompt = torch.randint(0, mc["vocab"], (cfg["batch"], cfg["prompt"]), generator=g).to(device)
        positions = [torch.tensor([p], device=device) for p in range(cfg["prompt"] + cfg["tokens"])]

        def step() -> Any:
            out = []
            with ctx(), torch.no_grad():
                tok = prompt[:, :1]
                for p in range(cfg["prompt"] + cfg["tokens"] - 1):
                    nxt = one(tok, positions[p])
                    after_step()
                    tok = prompt[:, p + 1:p + 2] if p + 1 < cfg["prompt"] else nxt
                    if p + 1 >= cfg["prompt"]:
                        out.append(nxt)
                return torch.cat(out, 1)
    else:
        raise ValueError(f"unknown workload {workload!r}")
    return Contestant(name, step, sync, counters)


def race(contestants: list[Contestant], workload: str, rounds: int) -> dict[str, dict[str, Any]]:
    """Cold first step, warm-up (until a round compiles nothing), then `rounds` rounds that time every contestant in turn (so a
    load spike on the shared machine hits all alike). Per contestant: first-step seconds,
    median steps/s, median host/wait ms per step, counters per step, first values."""
    cfg = CONFIGS[workload]
    out: dict[str, dict[str, Any]] = {}
    live = []
    for c in contestants:
        try:
            t0 = time.perf_counter()
            first = c.step()
            c.sync()
            first_s = time.perf_counter() - t0 + c.build_s
            values = [first.cpu()]
            for _ in range(cfg["warmup"] - 1):
                values.append(c.step().cpu())
            # Then warm rounds shaped like the timed ones until one compiles nothing (fused
            # graphs are cut differently right after a synchronization), at most 6.
            for _ in range(6):
                c.sync()
                before = c.counters().get("compiles")
                for _ in range(cfg["steps"]):
                    c.step()
                c.sync()
                if before is None or c.counters().get("compiles") == before:
                    break
            out[c.name] = {"first_step_s": first_s, "values": [v.tolist() for v in values], "sps": [], "host_ms": [],
                           "host_cpu_ms": [], "wait_ms": [], "process_cpu_ms": [], "counters": []}
            live.append(c)
            print(f"  {c.name}: first step {first_s:.2f} s", file=sys.stderr, flush=True)
        except Exception as e:  # noqa: BLE001 - reported; the other contestants still run
            out[c.name] = {"error": f"{type(e).__name__}: {str(e)[:600]}"}
            print(f"  {c.name}: FAILED {out[c.name]['error']}", file=sys.stderr, flush=True)
    n = cfg["steps"]
    for _ in range(rounds):
        for c in live:
            r = out[c.name]
            c.sync()
            before = c.counters()
            p0 = _process_cpu_s()
            t0, c0 = time.perf_counter(), time.thread_time()
            for _ in range(n):
                last = c.step()
            t1, c1 = time.perf_counter(), time.thread_time()
            c.sync()
            last.cpu()  # the step's value is on the host: everything done
            t2 = time.perf_counter()
            p2 = _process_cpu_s()
            after = c.counters()
            r["sps"].append(n / (t2 - t0))
            r["host_ms"].append((t1 - t0) / n * 1e3)
            r["host_cpu_ms"].append((c1 - c0) / n * 1e3)
            r["wait_ms"].append((t2 - t1) / n * 1e3)
            r["process_cpu_ms"].append((p2 - p0) / n * 1e3)
            r["counters"].append({k: (after[k] - before.get(k, 0)) / n for k in after})
    for c in live:
        r = out[c.name]
        r["steps_per_s"] = statistics.median(r.pop("sps"))
        r["host_ms"] = statistics.median(r["host_ms"])
        r["wait_ms"] = statistics.median(r["wait_ms"])
        r["host_cpu_ms"] = statistics.median(r["host_cpu_ms"])
        r["process_cpu_ms"] = statistics.median(r["process_cpu_ms"])
        cs = r.pop("counters")
        r["per_step"] = {k: statistics.median(x[k] for x in cs) for k in cs[0]} if cs else {}
    return out


def _process_cpu_s() -> float:
    """CPU seconds of this whole process so far (every thread: on XLA's CPU plugin, the device's
    work is this process's CPU time too)."""
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def timed_build(make: Callable[[], Contestant]) -> Contestant:
    t0 = time.perf_counter()
    c = make()
    c.build_s = time.perf_counter() - t0
    return c


# ----------------------------------------------------------------------------------------------
# Sides

def side_ours(workloads: list[str], rounds: int, modes: list[str]) -> dict[str, Any]:
    import torch

    import torch_tpu
    from torch_tpu import _C

    models = load_models()
    info = _C._pjrt_info()
    if info is None:
        raise SystemExit("ours: the PJRT runtime is not active (TORCH_TPU_RUNTIME=pjrt, TORCH_TPU_PJRT_PLUGIN)")

    def counters() -> dict[str, float]:
        i = _C._pjrt_info()
        t, r = i["transfers"], i["resident"]
        return {"compiles": i["compiles"], "programs": sum(i.get("executions_per_device", [0])),
                "uploads": t["uploads"], "downloads": t["downloads"],
                "moved_kib": (t["upload_bytes"] + t["download_bytes"] + r["sync_bytes"]) / 1024}

    def nothing() -> None:
        pass

    result: dict[str, Any] = {"torch": torch.__version__, "platform": f"{info['platform']} {info['platform_version']}"}
    for w in workloads:
        print(f"ours {w}", file=sys.stderr, flush=True)
        cs = [timed_build(lambda: make_contestant(torch, models, w, "native", "cpu", None, _null, nothing, nothing))]
        for mode in modes:
            tpu_mode = "fused" if mode == "compiled" else mode
            wrap = None
            if mode == "compiled":
                torch._dynamo.reset()

                def wrap(f: Any) -> Any:
                    return torch.compile(f, backend="tpu")
            cs.append(timed_build(lambda: make_contestant(
                torch, models, w, mode, "tpu", wrap, lambda m=tpu_mode: torch_tpu.mode(m), nothing,
                torch.tpu.synchronize, counters)))
        result[w] = race(cs, w, rounds)
    return result


def side_xla(workloads: list[str], rounds: int, modes: list[str]) -> dict[str, Any]:
    import torch
    import torch_xla
    import torch_xla.debug.metrics as met

    models = load_models()
    dev = torch_xla.device()

    def counters() -> dict[str, float]:
        out = {}
        for key, name in (("compiles", "CompileTime"), ("programs", "ExecuteTime"),
                          ("uploads", "TransferToDeviceTime"), ("downloads", "TransferFromDeviceTime")):
            d = met.metric_data(name)
            out[key] = d[0] if d else 0
        return out

    def sync() -> None:
        torch_xla.sync(wait=True)

    def nothing() -> None:
        pass

    result: dict[str, Any] = {"torch": torch.__version__, "torch_xla": torch_xla.__version__}
    for w in workloads:
        print(f"xla {w}", file=sys.stderr, flush=True)
        cs = [timed_build(lambda: make_contestant(torch, models, w, "native", "cpu", None, _null, nothing, nothing))]
        for mode in modes:
            wrap = None
            after = torch_xla.sync
            if mode == "xla-openxla":
                torch._dynamo.reset()

                def wrap(f: Any) -> Any:
                    return torch.compile(f, backend="openxla")
            if mode == "xla-eager":
                after = nothing
            ctx = (lambda: _xla_eager(torch_xla)) if mode == "xla-eager" else _null
            if mode == "xla-openxla" and w == "decode":
                after = nothing  # the compiled graph runs at the call; nothing is traced lazily
            cs.append(timed_build(lambda: make_contestant(torch, models, w, mode, dev, wrap, ctx, after, sync,
                                                          counters)))
        result[w] = race(cs, w, rounds)
    return result


class _null:
    """A context manager that does nothing (native CPU and lazy modes)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


class _xla_eager:
    """PyTorch/XLA's eager mode (each op compiled and executed at once) for a block."""

    def __init__(self, torch_xla: Any) -> None:
        from torch_xla.experimental import eager_mode
        self.set = eager_mode

    def __enter__(self) -> None:
        self.set(True)

    def __exit__(self, *exc: object) -> None:
        self.set(False)


def side_jax(workloads: list[str], rounds: int, modes: list[str]) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp
    import torch

    models = load_models()
    result: dict[str, Any] = {"jax": jax.__version__, "torch": torch.__version__,
                              "backend": jax.default_backend()}

    def nothing() -> None:
        pass

    for w in workloads:
        if w not in ("gpt", "gpt2"):
            continue  # the JAX side races the GPT steps only
        print(f"jax {w}", file=sys.stderr, flush=True)
        cfg = CONFIGS[w]
        mc = cfg["model"]
        cs = [timed_build(lambda: make_contestant(torch, models, w, "native", "cpu", None, _null, nothing, nothing))]

        def make_jax() -> Contestant:
            torch.manual_seed(0)
            model = models.TinyGPT(**mc)
            params = {k: jnp.asarray(v.detach().numpy()) for k, v in model.named_parameters()}
            state = {"p": params, "m": jax.tree.map(jnp.zeros_like, params), "v": jax.tree.map(jnp.zeros_like, params),
                     "t": jnp.zeros((), jnp.float32)}
            data = [(jnp.asarray(x.numpy()), jnp.asarray(y.numpy()))
                    for x, y in models.synthetic_text(4, cfg["batch"], mc["ctx"], mc["vocab"])]
            train = jax.jit(lambda s, x, y: _jax_train_step(jax, jnp, mc, s, x, y), donate_argnums=(0,))
            box = {"s": state, "i": 0}

            def step() -> Any:
                x, y = data[box["i"] % len(data)]
                box["i"] += 1
                box["s"], loss = train(box["s"], x, y)
                return _JaxValue(loss)

            def sync() -> None:
                jax.block_until_ready(box["s"])

            return Contestant("jax-jit", step, sync)

        cs.append(timed_build(make_jax))
        result[w] = race(cs, w, rounds)
    return result


class _JaxValue:
    """A JAX scalar with the `.cpu()` / `.tolist()` the race reads."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def cpu(self) -> "_JaxValue":
        self.value.block_until_ready()
        return self

    def tolist(self) -> float:
        return float(self.value)


def _jax_train_step(jax: Any, jnp: Any, mc: dict, s: dict, x: Any, y: Any) -> tuple[dict, Any]:
    """TinyGPT forward, cross-entropy, gradients and torch's AdamW (lr 1e-3, betas 0.9/0.999,
    eps 1e-8, weight decay 0.01), as one function for jax.jit."""
    heads, dim = mc["heads"], mc["dim"]

    def ln(z: Any, p: dict, name: str) -> Any:
        mu = z.mean(-1, keepdims=True)
        var = ((z - mu) ** 2).mean(-1, keepdims=True)
        return (z - mu) / jnp.sqrt(var + 1e-5) * p[f"{name}.weight"] + p[f"{name}.bias"]

    def lin(z: Any, p: dict, name: str) -> Any:
        return z @ p[f"{name}.weight"].T + p[f"{name}.bias"]

    def loss_fn(p: dict) -> Any:
        b, t = x.shape
        h = p["tok.weight"][x] + p["pos.weight"][:t]
        causal = jnp.tril(jnp.ones((t, t), bool))
        for i in range(mc["layers"]):
            pre = f"blocks.{i}"
            q, k, v = jnp.split(lin(ln(h, p, f"{pre}.ln1"), p, f"{pre}.attn.qkv"), 3, axis=-1)
            q, k, v = (z.reshape(b, t, heads, dim // heads).transpose(0, 2, 1, 3) for z in (q, k, v))
            att = jnp.where(causal, q @ k.transpose(0, 1, 3, 2) / math.sqrt(dim // heads), -jnp.inf)
            o = (jax.nn.softmax(att, -1) @ v).transpose(0, 2, 1, 3).reshape(b, t, dim)
            h = h + lin(o, p, f"{pre}.attn.proj")
            m = jax.nn.gelu(lin(ln(h, p, f"{pre}.ln2"), p, f"{pre}.mlp.0"), approximate=True)
            h = h + lin(m, p, f"{pre}.mlp.2")
        logits = ln(h, p, "ln_f") @ p["tok.weight"].T
        logp = jax.nn.log_softmax(logits, -1)
        return -jnp.take_along_axis(logp, y[..., None], -1).mean()

    loss, g = jax.value_and_grad(loss_fn)(s["p"])
    lr, b1, b2, eps, wd = 1e-3, 0.9, 0.999, 1e-8, 0.01
    t = s["t"] + 1
    m = jax.tree.map(lambda m_, g_: b1 * m_ + (1 - b1) * g_, s["m"], g)
    v = jax.tree.map(lambda v_, g_: b2 * v_ + (1 - b2) * g_ * g_, s["v"], g)
    bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t

    def upd(p_: Any, m_: Any, v_: Any) -> Any:
        p_ = p_ * (1 - lr * wd)
        return p_ - (lr / bc1) * m_ / (jnp.sqrt(v_) / jnp.sqrt(bc2) + eps)

    p = jax.tree.map(upd, s["p"], m, v)
    return {"p": p, "m": m, "v": v, "t": t}, loss


# ----------------------------------------------------------------------------------------------
# Driver

def cpu_plugin() -> str | None:
    spec = importlib.util.find_spec("lammps_jax_pjrt_cpu")
    if spec is None or spec.origin is None:
        return None
    path = pathlib.Path(spec.origin).parent / "pjrt_c_api_cpu_plugin.so"
    return str(path) if path.is_file() else None


def run_side(side: str, python: str, args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [python, __file__, "--side", side, "--workloads", args.workloads, "--rounds", str(args.rounds),
               "--modes", ",".join(m for m in args.modes.split(",") if m in SIDES[side]), "--json", f.name,
               "--threads", str(args.threads)]
        if args.steps:
            cmd += ["--steps", str(args.steps)]
        print(f"[{side}] {' '.join(cmd)}", flush=True)
        p = subprocess.run(cmd, env=env, cwd=ROOT, timeout=args.timeout)
        if p.returncode != 0:
            return {"error": f"exit status {p.returncode}"}
        return json.loads(pathlib.Path(f.name).read_text())


def report(results: dict[str, dict[str, Any]], workloads: list[str]) -> None:
    print()
    for w in workloads:
        rows: dict[str, dict[str, Any]] = {}
        natives = []
        for side, res in results.items():
            if w not in res:
                if "error" in res:
                    rows[f"({side})"] = {"error": res["error"]}
                continue
            nat = res[w].get("native", {})
            if "steps_per_s" in nat:
                natives.append(f"{side}: {nat['steps_per_s']:.3f}/s")
            for name, r in res[w].items():
                if name == "native":
                    continue
                r = dict(r)
                if "steps_per_s" in r and "steps_per_s" in nat:
                    r["ratio"] = r["steps_per_s"] / nat["steps_per_s"]
                    r["native_values"] = nat.get("values")
                rows[name] = r
        print(f"== {w}  (ratio = steps/s / native CPU eager of the same process; native {', '.join(natives)})")
        print(f"  {'contestant':13s} {'x native':>8s} {'steps/s':>8s} {'first s':>8s} {'host ms':>8s} {'host cpu':>8s} "
              f"{'wait ms':>8s} {'proc cpu':>8s} {'progs':>6s} {'compiles':>8s} {'KiB moved':>9s}  values vs native")
        for name, r in rows.items():
            if "error" in r:
                print(f"  {name:13s} FAILED {r['error'][:300]}")
                continue
            if "ratio" not in r:
                continue
            ps = r.get("per_step", {})
            agree = ""
            if r.get("values") and r.get("native_values"):
                a, b = r["values"][0], r["native_values"][0]
                if isinstance(a, float) and isinstance(b, float):
                    agree = f"first {a:.5f} vs {b:.5f}"
                else:
                    agree = "same tokens" if a == b else "TOKENS DIFFER"
            print(f"  {name:13s} {r['ratio']:8.3f} {r['steps_per_s']:8.3f} {r['first_step_s']:8.2f} "
                  f"{r['host_ms']:8.1f} {r.get('host_cpu_ms', float('nan')):8.1f} {r['wait_ms']:8.1f} "
                  f"{r.get('process_cpu_ms', float('nan')):8.1f} {ps.get('programs', float('nan')):6.0f} "
                  f"{ps.get('compiles', float('nan')):8.1f} {ps.get('moved_kib', float('nan')):9.1f}  {agree}")
        pairs = [("compiled", "xla-openxla"), ("compiled", "jax-jit"), ("fused", "xla-lazy"), ("strict", "xla-eager"),
                 ("fused", "jax-jit")]
        for ours, peer in pairs:
            if "ratio" in rows.get(ours, {}) and "ratio" in rows.get(peer, {}):
                cold = rows[ours]["first_step_s"] / rows[peer]["first_step_s"]
                print(f"  {ours}/{peer}: {rows[ours]['ratio'] / rows[peer]['ratio']:.2f}x steps/s, "
                      f"first step {cold:.2f}x the time")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="gpt")
    ap.add_argument("--modes", default="strict,fused,compiled,xla-lazy,xla-eager,xla-openxla,jax-jit")
    ap.add_argument("--steps", type=int, default=0, help="timed steps per round (default: per workload)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--peers-python", default=str(ROOT / ".venv-peers" / "bin" / "python"))
    ap.add_argument("--sides", default="ours,jax,xla")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per side")
    ap.add_argument("--threads", type=int, default=1,
                    help="intra-op threads of native torch and XLA's CPU backend, the same on every side")
    ap.add_argument("--side", help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    ap.add_argument("--out", help="write the combined results here (JSON)")
    args = ap.parse_args()
    workloads = args.workloads.split(",")
    if args.steps:
        for w in workloads:
            CONFIGS[w]["steps"] = args.steps
    if args.side:
        import torch
        torch.set_num_threads(args.threads)
        fn = {"ours": side_ours, "xla": side_xla, "jax": side_jax}[args.side]
        res = fn(workloads, args.rounds, [m for m in args.modes.split(",") if m])
        pathlib.Path(args.json).write_text(json.dumps(res))
        return

    plugin = cpu_plugin()
    if plugin is None:
        raise SystemExit("XLA's CPU PJRT plugin (lammps-jax-pjrt-cpu) is not installed in this Python")
    # The same thread settings for every side: XLA's CPU client and native torch use the cores.
    # (Other TORCH_TPU_* settings pass through to ours, e.g. TORCH_TPU_PJRT_ASYNC=0.)
    set_here = ("TORCH_TPU_RUNTIME", "TORCH_TPU_PJRT_PLUGIN", "TORCH_TPU_CACHE_DIR", "PJRT_DEVICE", "XLA_FLAGS")
    base = {k: v for k, v in os.environ.items() if k not in set_here}
    base["OMP_NUM_THREADS"] = str(args.threads)
    if args.threads == 1:  # XLA's CPU backend: no Eigen thread pool inside an executable
        base["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false"
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as cache:
        envs = {
            "ours": dict(base, TORCH_TPU_RUNTIME="pjrt", TORCH_TPU_PJRT_PLUGIN=plugin, TORCH_TPU_CACHE_DIR=cache,
                         PYTHONPATH=str(ROOT)),
            "jax": dict(base, JAX_PLATFORMS="cpu"),
            "xla": dict(base, PJRT_DEVICE="CPU"),
        }
        for side in args.sides.split(","):
            python = args.peers_python if side == "xla" else sys.executable
            if not pathlib.Path(python).exists():
                results[side] = {"error": f"{python} missing (make bench-peers creates .venv-peers)"}
                continue
            results[side] = run_side(side, python, args, envs[side])
    report(results, workloads)
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
