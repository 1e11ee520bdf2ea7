"""Seeded differential fuzzer: random ATen ops on "tpu" against the same ops on CPU.

A case is a pure function of its seed (`make_case`): one op drawn from a curated list of common
ATen ops (elementwise unary/binary with integer and bool dtypes and type promotion, reductions
with dims and keepdim, matmul/bmm/addmm, views, indexing, cat/stack, softmax/log_softmax/
layer_norm, cumsum/cumprod, sort/topk, where/clamp, in-place variants through views), on inputs
of random shapes (0-dim, and dims of size 0 and 1 often), random dtypes (float32, float16,
bfloat16, int64, int32, bool) and random non-contiguous layouts (transposed, permuted, sliced
with a step, expanded), sometimes with special values (inf, nan, -0.0) and sometimes with bad
arguments (an index out of range, mismatched shapes, a dim out of range, an in-place write into
an expanded tensor), so error parity is tested too.

Each case runs on CPU and on tpu in one mode: "strict", "fused" (`torch_tpu.set_mode`) or
"compiled" (`torch.compile(backend="tpu")` in strict mode). Verdicts:

- pass: CPU and tpu agree (values, dtype, shape), or both raised errors of the same family;
- wrong: values, dtype or shape differ, or CPU raised and tpu did not, or the error families
  differ (families: IndexError, ValueError, TypeError, RuntimeError, the last including
  NotImplementedError and torch.OutOfMemoryError). In compiled mode any exception counts as the
  same family: Dynamo re-wraps the errors raised while it traces (TorchRuntimeError);
- error (unexpected error): tpu raised where CPU did not;
- crash: the worker process died (a signal or an exit) during the case;
- hang: the case did not finish within --case-timeout seconds (the worker is killed);
- cpu_gap: CPU raised "not implemented for '<dtype>'" (a CPU kernel gap, not bad input) and
  tpu computed a result; counted as a pass, listed separately in the report;
- compile_gap (compiled mode): tpu differs from CPU eager, but CPU under
  torch.compile(backend="aot_eager") does what tpu did (raises too, accepts too, or gives tpu's
  result): torch.compile's own behaviour (Dynamo/AOTAutograd drop the internal-overlap check of
  an in-place write into an expanded tensor, functionalize writes through expanded views, skip
  some dtype checks); counted as a pass, listed separately.

Tolerances (`tolerance`): torch.testing.assert_close's defaults per dtype (float32 rtol 1.3e-6,
atol 1e-5; float16 rtol 1e-3, atol 1e-5; bfloat16 rtol 1.6e-2, atol 1e-5), multiplied by 16 for
ops that accumulate (reductions, matmul, cumsum/cumprod, softmax, layer_norm, std/var, norm,
logsumexp, and index_add/scatter_add/index_put with accumulate, whose duplicate indices may add
in another order: a different summation order moves the last bits of each partial sum) and by 4 for
transcendental functions (exp, log, pow, erf, tanh, ...: the host's vectorised math may be off by
a few ulp from CPU's). Integer and bool results, and data movement (views, indexing, cat, sort
values), must be exact (NaNs compare equal to NaNs). Sort and topk indices are checked by
gathering the input with them (ties may pick either index).

Cases run in subprocess batches (--batch cases per `fuzz_ops.py --worker` child), so a crash or a
hang is recorded with its seed and the run goes on with the next case in a fresh worker.

    python tools/fuzz_ops.py --cases 1000 --seed 0 --modes strict,fused,compiled --jobs 2 --out r.json
    python tools/fuzz_ops.py --repro 123 --mode fused     # prints the case's script and runs it
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import queue
import random
import re
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The worker imports torch_tpu from this checkout when it is not installed.
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

MODES = ("strict", "fused", "compiled")
VERDICTS = ("pass", "cpu_gap", "compile_gap", "wrong", "error", "crash", "hang")
FLOATS = ("float32", "float16", "bfloat16")
INTS = ("int64", "int32")
ALL_DTYPES = FLOATS + INTS + ("bool",)

# Tolerances per result dtype: torch.testing.assert_close's defaults.
BASE_TOL: dict[str, tuple[float, float]] = {
    "float32": (1.3e-6, 1e-5), "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float64": (1e-7, 1e-7)}
SCALE = {"exact": 0.0, "elementwise": 1.0, "transcendental": 4.0, "accumulate": 16.0}

# The helper every case script starts with: inputs made on CPU from the case's own generator,
# moved to the device, then laid out as the view asks (the view is taken on the device).
HELPER = '''
import torch

def _mk(shape, dtype, seed, dev, kind="n", view="", hi=10, special=False):
    """A tensor of `shape` on `dev`: kind "n" normal, "i" ints in [-hi, hi), "x" indices in
    [0, hi), "p" a permutation prefix of range(hi), "b" bools; view "t" (transposed), "p"
    (permuted), "s" (sliced with step 2), "e" (expanded from size-1 dims), "" (contiguous)."""
    g = torch.Generator().manual_seed(seed)
    shape = tuple(shape)
    base = list(shape)
    if view == "t":
        base[-1], base[-2] = base[-2], base[-1]
    elif view == "p":
        base = base[::-1]
    elif view == "s":
        base = [2 * d + 1 for d in base]
    elif view == "e":
        base = [1 if i % 2 == 0 else d for i, d in enumerate(base)]
    if kind == "n":
        t = torch.randn(base, generator=g)
        if special and t.numel():
            flat = t.view(-1)
            pick = torch.randint(0, flat.numel(), (max(1, flat.numel() // 4),), generator=g)
            vals = torch.tensor([float("inf"), float("-inf"), float("nan"), -0.0, 0.0, 1e4])
            flat[pick] = vals[torch.randint(0, len(vals), pick.shape, generator=g)]
    elif kind == "i":
        t = torch.randint(-hi, hi, base, generator=g)
    elif kind == "x":
        t = torch.randint(0, max(hi, 1), base, generator=g)
    elif kind == "p":
        t = torch.randperm(max(hi, 1), generator=g)[: max(1, int(torch.tensor(base).prod()))]
        t = t[: int(torch.tensor(base).prod())].reshape(base)
    else:
        t = torch.rand(base, generator=g) < 0.5
    t = t.to(dtype).to(dev)
    if view == "t":
        t = t.transpose(-1, -2)
    elif view == "p":
        t = t.permute(*reversed(range(t.dim())))
    elif view == "s":
        t = t[tuple(slice(1, None, 2) for _ in base)]
    elif view == "e":
        t = t.expand(shape)
    return t
'''


@dataclasses.dataclass
class Case:
    """One fuzz case: input constructors (`_mk` calls, with `dev` free), the body of `f(...)`
    and how its results compare."""

    seed: int
    op: str
    inputs: list[str]
    body: list[str]
    category: str = "elementwise"  # a key of SCALE
    sort_like: bool = False  # the result is (values, indices) of a sort/topk of x0 along `sort_dim`
    sort_dim: int = -1

    def script(self, mode: str) -> str:
        """A self-contained script that runs the case on CPU and on tpu in `mode` and compares."""
        names = [f"x{i}" for i in range(len(self.inputs))]
        lines = [f"# fuzz_ops case {self.seed} ({self.op}), mode {mode}", HELPER.strip(), "",
                 f"def f({', '.join(names)}):"]
        lines += ["    " + b for b in self.body]
        lines += ["", "def inputs(dev):"]
        lines += [f"    {n} = {src}" for n, src in zip(names, self.inputs)]
        lines += [f"    return [{', '.join(names)}]"]
        return "\n".join(lines) + "\n"

    def repro(self, mode: str) -> str:
        """The one-line command that reruns this case."""
        return f"python tools/fuzz_ops.py --repro {self.seed} --mode {mode}"


# ----------------------------------------------------------------------------------------------
# Case generation


class _Gen:
    """Random choices for one case; every input gets its own generator seed."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.inputs: list[str] = []

    def shape(self, rank: int | None = None, lo: int = 0) -> list[int]:
        """A random shape: rank 0..4 unless given; sizes from {0, 1, 2, 3, 4, 5, 7} (at least `lo`)."""
        r = self.rng.choice([0, 1, 1, 2, 2, 2, 3, 3, 4]) if rank is None else rank
        sizes = [s for s in (0, 1, 1, 2, 3, 4, 5, 7) if s >= lo]
        return [self.rng.choice(sizes) for _ in range(r)]

    def view(self, shape: list[int]) -> str:
        """A layout for an input of `shape` (see `_mk`): contiguous in 3 draws of 5 to 7."""
        opts = ["", "", ""]
        if len(shape) >= 2:
            opts += ["t", "p"]
        if len(shape) >= 1:
            opts += ["s", "e"]
        return self.rng.choice(opts)

    def tensor(self, shape: list[int], dtype: str, kind: str | None = None, view: str | None = None,
               hi: int = 10, contiguous: bool = False) -> str:
        """Adds an input and returns its name."""
        if kind is None:
            kind = "n" if dtype in FLOATS else ("b" if dtype == "bool" else "i")
        v = "" if contiguous else (self.view(shape) if view is None else view)
        special = kind == "n" and self.rng.random() < 0.1
        seed = self.rng.randrange(1 << 30)
        args = f"{tuple(shape)!r}, torch.{dtype}, {seed}, dev"
        if kind != "n":
            args += f", kind={kind!r}"
        if v:
            args += f", view={v!r}"
        if hi != 10:
            args += f", hi={hi}"
        if special:
            args += ", special=True"
        self.inputs.append(f"_mk({args})")
        return f"x{len(self.inputs) - 1}"

    def dtype(self, choices: tuple[str, ...] = ALL_DTYPES) -> str:
        """One of `choices` (dtype names)."""
        return self.rng.choice(choices)

    def dim(self, rank: int, bad: float = 0.03) -> int:
        """A dim of a rank-`rank` tensor, negative or not; out of range with probability `bad`."""
        if rank == 0:
            return self.rng.choice([0, -1]) if self.rng.random() < 0.8 else 1
        if self.rng.random() < bad:
            return rank  # out of range: CPU raises IndexError
        return self.rng.randrange(-rank, rank)

    def broadcast_shape(self, shape: list[int]) -> list[int]:
        """A shape that broadcasts with `shape` (sometimes one that does not)."""
        r = self.rng.random()
        if r < 0.5:
            return list(shape)
        if r < 0.9:
            out = [1 if self.rng.random() < 0.4 else d for d in shape]
            k = self.rng.randrange(0, len(out) + 1)
            return out[k:]
        return [d + 1 for d in shape] if shape else [2]  # mismatched (unless a dim is 0 -> 1)


UNARY_FLOAT = {"exp": "transcendental", "log": "transcendental", "sqrt": "transcendental",
               "sin": "transcendental", "cos": "transcendental", "tanh": "transcendental",
               "sigmoid": "transcendental", "rsqrt": "transcendental", "erf": "transcendental",
               "log1p": "transcendental", "expm1": "transcendental", "reciprocal": "elementwise",
               "floor": "exact", "ceil": "exact", "round": "exact", "trunc": "exact",
               "nn.functional.gelu": "transcendental", "nn.functional.silu": "transcendental",
               "relu": "exact", "frac": "elementwise"}
UNARY_ANY = {"neg": "exact", "abs": "exact", "sign": "exact", "square": "elementwise",
             "logical_not": "exact", "bitwise_not": "exact", "isnan": "exact", "isinf": "exact"}
BINARY = {"add": "elementwise", "sub": "elementwise", "mul": "elementwise", "div": "elementwise",
          "floor_divide": "elementwise", "remainder": "elementwise", "fmod": "elementwise",
          "maximum": "exact", "minimum": "exact", "pow": "transcendental", "atan2": "transcendental",
          "eq": "exact", "ne": "exact", "lt": "exact", "le": "exact", "gt": "exact", "ge": "exact",
          "logical_and": "exact", "logical_or": "exact", "bitwise_and": "exact", "bitwise_or": "exact",
          "bitwise_xor": "exact"}
REDUCTIONS = ["sum", "mean", "prod", "amax", "amin", "max", "min", "argmax", "argmin", "std", "var", "all",
              "any", "logsumexp", "norm", "nansum", "count_nonzero"]


# Each generator below adds its inputs to `g` and returns the body of f (Python source) and the
# tolerance category of its result (a key of SCALE); sort/topk also say which dim they sort.


def _unary(g: _Gen) -> tuple[str, str]:
    if g.rng.random() < 0.6:
        op = g.rng.choice(sorted(UNARY_FLOAT))
        dt = g.dtype(FLOATS + (("int64",) if g.rng.random() < 0.15 else ()))
        cat = UNARY_FLOAT[op]
    else:
        op = g.rng.choice(sorted(UNARY_ANY))
        dt = g.dtype()
        cat = UNARY_ANY[op]
    x = g.tensor(g.shape(), dt)
    return f"return torch.{op}({x})", cat if dt in FLOATS else "exact"


def _binary(g: _Gen) -> tuple[str, str]:
    op = g.rng.choice(sorted(BINARY))
    shape = g.shape()
    da = g.dtype()
    db = da if g.rng.random() < 0.7 else g.dtype()
    a = g.tensor(shape, da)
    r = g.rng.random()
    if r < 0.2:
        b = g.rng.choice(["2", "-1", "0", "0.5", "3", "True"])
    else:
        b = g.tensor(g.broadcast_shape(shape), db)
    extra = ""
    if op in ("add", "sub") and g.rng.random() < 0.2:
        extra = ", alpha=2"
    if op == "div" and g.rng.random() < 0.4:
        extra = f", rounding_mode={g.rng.choice(['floor', 'trunc'])!r}"
    if r >= 0.2 and g.rng.random() < 0.15:  # the tensor operands swapped (broadcasting the other way)
        return f"return torch.{op}({b}, {a}{extra})", BINARY[op]
    return f"return torch.{op}({a}, {b}{extra})", BINARY[op]


def _reduction(g: _Gen) -> tuple[str, str]:
    op = g.rng.choice(REDUCTIONS)
    shape = g.shape()
    dt = g.dtype()
    x = g.tensor(shape, dt)
    kw = []
    r = g.rng.random()
    if op in ("max", "min") and r < 0.3:
        return f"return torch.{op}({x})", "exact"
    if op in ("max", "min", "argmax", "argmin", "logsumexp", "count_nonzero", "all", "any") or r < 0.7:
        if op in ("logsumexp", "max", "min") or r < 0.5 or op in ("argmax", "argmin", "count_nonzero"):
            kw.append(f"dim={g.dim(len(shape))}")
        else:
            dims = sorted({g.dim(len(shape), bad=0.0) % max(len(shape), 1) for _ in range(2)})
            kw.append(f"dim={tuple(dims)!r}")
        if op != "count_nonzero" and g.rng.random() < 0.5:
            kw.append("keepdim=True")
    if op in ("sum", "prod", "mean", "nansum") and g.rng.random() < 0.2:
        kw.append(f"dtype=torch.{g.dtype(('float32', 'int64'))}")
    if op in ("std", "var") and g.rng.random() < 0.4:
        kw.append(f"correction={g.rng.choice([0, 1, 2])}")
    cat = "exact" if op in ("amax", "amin", "max", "min", "argmax", "argmin", "all", "any", "count_nonzero") \
        else "accumulate"
    return f"return torch.{op}({', '.join([x] + kw)})", cat


def _matmul(g: _Gen) -> tuple[str, str]:
    dt = g.dtype(FLOATS * 3 + INTS)
    m, k, n = (g.rng.choice([0, 1, 2, 3, 5, 8, 17]) for _ in range(3))
    bad = g.rng.random() < 0.05
    op = g.rng.choice(["mm", "bmm", "matmul", "addmm", "linear", "einsum"])
    if op == "mm":
        a, b = g.tensor([m, k], dt), g.tensor([k + bad, n], dt)
        return f"return torch.mm({a}, {b})", "accumulate"
    if op == "bmm":
        bs = g.rng.choice([0, 1, 3])
        a, b = g.tensor([bs, m, k], dt), g.tensor([bs, k + bad, n], dt)
        return f"return torch.bmm({a}, {b})", "accumulate"
    if op == "matmul":
        ra, rb = g.rng.choice([1, 2, 3]), g.rng.choice([1, 2, 3])
        sa = ([2] if ra == 3 else []) + ([m] if ra >= 2 else []) + [k]
        sb = ([g.rng.choice([1, 2])] if rb == 3 else []) + [k + bad] + ([n] if rb >= 2 else [])
        return f"return torch.matmul({g.tensor(sa, dt)}, {g.tensor(sb, dt)})", "accumulate"
    if op == "addmm":
        c = g.tensor(g.broadcast_shape([m, n]) if not bad else [m + 1, n], dt)
        a, b = g.tensor([m, k], dt), g.tensor([k, n], dt)
        return f"return torch.addmm({c}, {a}, {b}, beta=0.5, alpha=2)", "accumulate"
    if op == "linear":
        x, w = g.tensor([m, k], dt), g.tensor([n, k + bad], dt)
        bias = g.tensor([n], dt) if g.rng.random() < 0.5 else "None"
        return f"return torch.nn.functional.linear({x}, {w}, {bias})", "accumulate"
    a, b = g.tensor([2, m, k], dt), g.tensor([2, k + bad, n], dt)
    return f"return torch.einsum('bmk,bkn->bmn', {a}, {b})", "accumulate"


def _views(g: _Gen) -> tuple[str, str]:
    shape = g.shape(g.rng.choice([1, 2, 3, 4]))
    r = len(shape)
    x = g.tensor(shape, g.dtype())
    op = g.rng.choice(["transpose", "permute", "slice", "expand", "select", "narrow", "reshape", "flatten",
                       "unsqueeze", "squeeze", "contiguous", "diagonal", "unfold", "flip", "roll", "repeat"])
    d = g.dim(r)
    if op == "transpose":
        expr = f"{x}.transpose({d}, {g.dim(r)})"
    elif op == "permute":
        perm = list(range(r))
        g.rng.shuffle(perm)
        if g.rng.random() < 0.05:
            perm[0] = perm[-1]  # a repeated dim: CPU raises
        expr = f"{x}.permute({', '.join(map(str, perm))})"
    elif op == "slice":
        a, b, s = g.rng.randrange(-3, 4), g.rng.randrange(-3, 8), g.rng.choice([1, 2, 3])
        expr = f"{x}[{', '.join([':'] * (d % r))}{', ' if d % r else ''}{a}:{b}:{s}]"
    elif op == "expand":
        new = [g.rng.choice([d_, 3]) if d_ == 1 else d_ for d_ in shape]
        if g.rng.random() < 0.05:
            new[0] = shape[0] + 1  # a non-singleton dim to another size: CPU raises
        expr = f"{x}.expand({', '.join(map(str, [2] + new))})"
    elif op == "select":
        i = g.rng.randrange(-shape[d % r] - 1, shape[d % r] + 1) if shape[d % r] else 0
        expr = f"{x}.select({d}, {i})"
    elif op == "narrow":
        n = shape[d % r]
        start = g.rng.randrange(-n, n + 1) if n else 0
        expr = f"{x}.narrow({d}, {start}, {g.rng.randrange(0, max(n - start % max(n, 1), 0) + 2)})"
    elif op == "reshape":
        expr = f"{x}.reshape({g.rng.choice(['-1', '1, -1', '-1, 1', str(max(1, len(shape)))])})"
    elif op == "flatten":
        expr = f"{x}.flatten({g.rng.randrange(0, r)})"
    elif op == "unsqueeze":
        expr = f"{x}.unsqueeze({g.rng.randrange(-r - 1, r + 1)})"
    elif op == "squeeze":
        expr = f"{x}.squeeze({d})"
    elif op == "contiguous":
        expr = f"{x}.contiguous()"
    elif op == "diagonal":
        expr = f"{x}.diagonal({g.rng.randrange(-2, 3)})" if r >= 2 else f"{x}.diagonal()"
    elif op == "unfold":
        expr = f"{x}.unfold({d}, {g.rng.randrange(1, 4)}, {g.rng.randrange(1, 3)})"
    elif op == "flip":
        expr = f"{x}.flip({d})"
    elif op == "roll":
        expr = f"{x}.roll({g.rng.randrange(-3, 4)}, {d})"
    else:
        expr = f"{x}.repeat({', '.join(str(g.rng.choice([1, 2])) for _ in range(r))})"
    if g.rng.random() < 0.3 and op not in ("contiguous",):
        expr = f"({expr}) * 2" if g.rng.random() < 0.5 else f"({expr}).clone()"
    return f"return {expr}", "exact"


def _indexing(g: _Gen) -> tuple[str, str]:
    shape = g.shape(g.rng.choice([1, 2, 3]))
    r = len(shape)
    dt = g.dtype()
    d = g.dim(r, bad=0.0) % r
    n = shape[d]
    bad = 1 if g.rng.random() < 0.05 else 0  # an index out of range
    hi = n + bad * 3
    op = g.rng.choice(["index_select", "gather", "scatter", "scatter_add", "index_put", "index_put_acc",
                       "masked_fill", "masked_select", "masked_scatter", "getitem_idx", "getitem_mask",
                       "index_add", "take", "index_copy", "setitem"])
    x = g.tensor(shape, dt)
    itype = "int64" if g.rng.random() < 0.85 else "int32"
    if op == "index_select":
        idx = g.tensor([g.rng.choice([0, 1, 3, 5])], itype, kind="x", hi=hi, contiguous=True)
        return f"return torch.index_select({x}, {d}, {idx})", "exact"
    if op in ("gather", "scatter", "scatter_add"):
        ishape = [min(s, g.rng.choice([0, 1, 2, 3])) if i != d else g.rng.choice([0, 1, 2, 4]) for i, s in
                  enumerate(shape)]
        if op == "gather":
            idx = g.tensor(ishape, "int64", kind="x", hi=hi)
            return f"return torch.gather({x}, {d}, {idx})", "exact"
        # scatter without reduce writes duplicates in an unspecified order: indices unique along
        # d (an argsort of random keys, cut to the index's length).
        k = min(ishape[d], n)
        ishape[d] = k
        src = g.tensor(ishape, dt) if g.rng.random() < 0.8 else "1.5"
        if op == "scatter_add":
            idx = g.tensor(ishape, "int64", kind="x", hi=hi)
            return f"return torch.scatter_add({x}, {d}, {idx}, {src})", "accumulate" if dt in FLOATS else "exact"
        if src == "1.5":
            ishape = [min(s, 2) if i != d else k for i, s in enumerate(shape)]
        keys = g.tensor([s if i == d else (ishape[i] if src == "1.5" else min(s, ishape[i]))
                         for i, s in enumerate(shape)], "float32", contiguous=True)
        return (f"i = {keys}.argsort(dim={d}).narrow({d}, 0, {k}){f' + {n}' if bad else ''}\n"
                f"return torch.scatter({x}, {d}, i, {src})"), "exact"
    if op in ("index_put", "index_put_acc"):
        acc = op == "index_put_acc"
        k = g.rng.choice([0, 1, 2, 3])
        idx = g.tensor([min(k, n + bad)] if not acc else [k], "int64", kind="x" if acc else "p", hi=hi,
                       contiguous=True)
        val = g.tensor([1], dt, contiguous=True) if g.rng.random() < 0.5 else g.tensor([], dt)
        if d:
            # index_put takes tensors: put along dim 0 of the moved view
            return f"return {x}.movedim({d}, 0).index_put(({idx},), {val}, accumulate={acc})", \
                "accumulate" if acc and dt in FLOATS else "exact"
        return f"return torch.index_put({x}, ({idx},), {val}, accumulate={acc})", \
            "accumulate" if acc and dt in FLOATS else "exact"
    if op in ("masked_fill", "masked_select", "masked_scatter", "getitem_mask"):
        mask = g.tensor(g.broadcast_shape(shape), "bool")
        if op == "masked_fill":
            v = g.rng.choice(["0.5", "-1", "True", "float('nan')", g.tensor([], dt)])
            return f"return torch.masked_fill({x}, {mask}, {v})", "exact"
        if op == "masked_select":
            return f"return torch.masked_select({x}, {mask})", "exact"
        if op == "masked_scatter":
            src = g.tensor([max(1, math.prod(shape))], dt, contiguous=True)
            return f"return {x}.masked_scatter({mask}, {src})", "exact"
        return f"return {x}[{mask}]", "exact"
    if op == "getitem_idx":
        idx = g.tensor([g.rng.choice([0, 1, 2, 4])], "int64", kind="x", hi=hi)
        return f"return {x}[{', '.join([':'] * d)}{', ' if d else ''}{idx}]", "exact"
    if op == "index_add":
        k = g.rng.choice([0, 1, 2, 3])
        idx = g.tensor([k], itype, kind="x", hi=hi, contiguous=True)
        src = g.tensor([k if i == d else s for i, s in enumerate(shape)], dt)
        return f"return torch.index_add({x}, {d}, {idx}, {src}, alpha=2)", \
            "accumulate" if dt in FLOATS else "exact"
    if op == "index_copy":
        k = min(g.rng.choice([0, 1, 2, 3]), n)
        idx = g.tensor([k], "int64", kind="p", hi=hi, contiguous=True)
        src = g.tensor([k if i == d else s for i, s in enumerate(shape)], dt)
        return f"return torch.index_copy({x}, {d}, {idx}, {src})", "exact"
    if op == "take":
        numel = max(1, math.prod(shape))
        idx = g.tensor(g.shape(g.rng.choice([0, 1, 2])), "int64", kind="x", hi=numel + bad * 3)
        return f"return torch.take({x}, {idx})", "exact"
    # setitem of a slice: a copy, then a write through a view
    v = g.rng.choice(["1", "-2.5", g.tensor([], dt), g.tensor([shape[-1]], dt)])
    return f"y = {x}.clone()\ny[..., ::2] = {v}\nreturn y", "exact"


def _misc(g: _Gen) -> tuple[str, str] | tuple[str, str, bool, int]:
    op = g.rng.choice(["cat", "stack", "softmax", "log_softmax", "layer_norm", "cumsum", "cumprod", "sort",
                       "topk", "where", "clamp", "clamp_t"])
    if op in ("cat", "stack"):
        shape = g.shape(g.rng.choice([1, 2, 3]))
        d = g.dim(len(shape) + (op == "stack"), bad=0.03)
        xs = []
        for _ in range(g.rng.choice([1, 2, 3])):
            s = list(shape)
            if op == "cat" and g.rng.random() < 0.4:
                s[d % len(s) if d < len(s) else 0] = g.rng.choice([0, 1, 3])
            if g.rng.random() < 0.04:
                s = s + [2]  # mismatched rank: CPU raises
            if op == "cat" and g.rng.random() < 0.05:
                s = [0]  # the legacy empty 1-d tensor cat skips
            xs.append(g.tensor(s, g.dtype() if g.rng.random() < 0.3 else "float32"))
        return f"return torch.{op}([{', '.join(xs)}], dim={d})", "exact"
    if op in ("softmax", "log_softmax"):
        shape = g.shape()
        dt = g.dtype(FLOATS + (("int64",) if g.rng.random() < 0.1 else ()))
        x = g.tensor(shape, dt)
        kw = f", dtype=torch.float32" if g.rng.random() < 0.2 else ""
        return f"return torch.{op}({x}, {g.dim(len(shape))}{kw})", "accumulate"
    if op == "layer_norm":
        shape = g.shape(g.rng.choice([1, 2, 3]))
        k = g.rng.randrange(1, len(shape) + 1)
        dt = g.dtype(FLOATS)
        x = g.tensor(shape, dt)
        ns = shape[-k:]
        w = g.tensor(ns, dt) if g.rng.random() < 0.5 else "None"
        b = g.tensor(ns, dt) if g.rng.random() < 0.5 else "None"
        return f"return torch.nn.functional.layer_norm({x}, {tuple(ns)!r}, {w}, {b}, eps=1e-5)", "accumulate"
    if op in ("cumsum", "cumprod"):
        shape = g.shape()
        x = g.tensor(shape, g.dtype())
        kw = f", dtype=torch.{g.dtype(('float32', 'int64'))}" if g.rng.random() < 0.2 else ""
        return f"return torch.{op}({x}, {g.dim(len(shape))}{kw})", "accumulate"
    if op in ("sort", "topk"):
        shape = g.shape(g.rng.choice([0, 1, 2, 3]))
        dt = g.dtype(FLOATS + INTS + ("bool",) * (op == "sort"))
        x = g.tensor(shape, dt)
        d = g.dim(len(shape))
        desc = g.rng.random() < 0.5
        if op == "sort":
            return f"return torch.sort({x}, dim={d}, descending={desc}, stable=True)", "exact", True, d
        n = shape[d % len(shape)] if shape and -len(shape) <= d < len(shape) else 1
        k = g.rng.randrange(0, n + 1) if g.rng.random() > 0.05 else n + 1
        return f"return torch.topk({x}, {k}, dim={d}, largest={desc}, sorted=True)", "exact", True, d
    if op == "where":
        shape = g.shape()
        c = g.tensor(g.broadcast_shape(shape), "bool")
        a = g.tensor(shape, g.dtype())
        b = g.tensor(g.broadcast_shape(shape), g.dtype()) if g.rng.random() < 0.7 else g.rng.choice(["0.0", "2"])
        return f"return torch.where({c}, {a}, {b})", "exact"
    shape = g.shape()
    dt = g.dtype(FLOATS + INTS)
    x = g.tensor(shape, dt)
    if op == "clamp":
        lo, hi = g.rng.choice(["-0.5", "None", "0", "1"]), g.rng.choice(["0.5", "None", "-1", "2"])
        if lo == "None" and hi == "None":
            hi = "0"
        return f"return torch.clamp({x}, {lo}, {hi})", "exact"
    lo_t = g.tensor(g.broadcast_shape(shape), dt)
    hi_t = g.tensor(g.broadcast_shape(shape), dt) if g.rng.random() < 0.5 else "None"
    return f"return torch.clamp({x}, {lo_t}, {hi_t})", "exact"


def _inplace(g: _Gen) -> tuple[str, str]:
    """An in-place op on a view of a fresh copy of x0; returns the op's result and the base."""
    shape = g.shape(g.rng.choice([1, 2, 3]), lo=1)
    dt = g.dtype()
    x = g.tensor(shape, dt, contiguous=True)
    view = g.rng.choice(["", ".t()" if len(shape) >= 2 else "", "[::2]", "[1:]", ".unsqueeze(0)",
                         ".expand(2, *base.shape)"])
    vshape_expr = f"base{view}"
    op = g.rng.choice(["add_", "mul_", "clamp_", "masked_fill_", "index_put_", "scatter_", "copy_", "zero_",
                       "fill_", "relu_", "sub_", "div_", "neg_", "exp_", "pow_", "addcmul_", "lerp_"])
    other = g.tensor([shape[-1]] if len(shape) >= 1 and g.rng.random() < 0.5 else [], g.dtype())
    lines = [f"base = {x}.clone()", f"v = {vshape_expr}"]
    if op in ("add_", "mul_", "sub_", "div_", "copy_"):
        arg = other if g.rng.random() < 0.7 else g.rng.choice(["2", "0.5", "-1"])
        if op == "copy_" and not arg.startswith("x"):
            arg = other
        lines.append(f"r = v.{op}({arg})")
    elif op == "pow_":
        lines.append(f"r = v.pow_({g.rng.choice(['2', '0.5', other])})")
    elif op == "clamp_":
        lines.append(f"r = v.clamp_({g.rng.choice(['-0.5', '0'])}, {g.rng.choice(['0.5', '1'])})")
    elif op == "masked_fill_":
        m = g.tensor([shape[-1]], "bool", contiguous=True)
        lines.append(f"r = v.masked_fill_({m}, {g.rng.choice(['0', '-1.5', 'True'])})")
    elif op == "index_put_":
        idx = g.tensor([g.rng.choice([1, 2])], "int64", kind="x", hi=shape[0], contiguous=True)
        lines.append(f"r = v.index_put_(({idx},), {other}, accumulate=True)")
    elif op == "scatter_":
        idx = g.tensor([1] * len(shape), "int64", kind="x", hi=shape[-1], contiguous=True)
        lines.append(f"r = v.scatter_(-1, {idx}, {g.rng.choice(['2.0', '-1'])})")
    elif op in ("zero_", "relu_", "neg_", "exp_"):
        lines.append(f"r = v.{op}()")
    elif op == "fill_":
        lines.append(f"r = v.fill_({g.rng.choice(['3', '-0.25', 'True'])})")
    elif op == "addcmul_":
        lines.append(f"r = v.addcmul_({other}, {other}, value=0.5)")
    else:
        lines.append(f"r = v.lerp_({other}, 0.25)")
    lines.append("return r, base")
    cat = {"exp_": "transcendental", "pow_": "transcendental"}.get(op, "elementwise")
    return "\n".join(lines), cat


GENERATORS: list[tuple[float, Callable[[_Gen], Any]]] = [
    (3, _unary), (4, _binary), (3, _reduction), (2, _matmul), (2, _views), (3, _indexing), (3, _misc),
    (2, _inplace)]


def _op_name(body: str) -> str:
    """A short name for the report: the op the case's last statements call."""
    for line in reversed(body.splitlines()):
        m = re.search(r"torch\.([\w.]+)\(", line) or re.search(r"\b(?:x\d+|v|y)\)?\.(\w+)\(", line)
        if m and m.group(1) not in ("clone", "argsort"):
            return m.group(1).replace("nn.functional.", "F.")
        if re.search(r"\] = ", line):
            return "setitem"
        if re.search(r"x\d+\[", line):
            return "getitem"
    return "?"


def make_case(seed: int) -> Case:
    """The case of `seed` (deterministic: the same seed always gives the same case)."""
    g = _Gen(seed)
    fn = g.rng.choices([f for _, f in GENERATORS], weights=[w for w, _ in GENERATORS])[0]
    res = fn(g)
    body, cat = res[0], res[1]
    sort_like, sort_dim = (res[2], res[3]) if len(res) == 4 else (False, -1)
    op = _op_name(body)
    if fn is _inplace:
        op = "inplace:" + op
    return Case(seed, op, g.inputs, body.splitlines(), cat, sort_like, sort_dim)


# ----------------------------------------------------------------------------------------------
# Running and comparing


def _family(e: BaseException) -> str:
    """The exception family of `e` that error parity compares (see the module docstring)."""
    for cls in (IndexError, ValueError, TypeError, RuntimeError):
        if isinstance(e, cls):
            return cls.__name__
    return type(e).__name__


def tolerance(dtype: Any, category: str) -> tuple[float, float]:
    """(rtol, atol) for a result of `dtype` from an op of `category` (see the module docstring)."""
    name = str(dtype).replace("torch.", "")
    if name not in BASE_TOL or SCALE[category] == 0.0:
        return 0.0, 0.0
    rtol, atol = BASE_TOL[name]
    return rtol * SCALE[category], atol * SCALE[category]


def _flatten(out: Any) -> list[Any]:
    """The tensors (and other values) of a possibly nested tuple of results, in order."""
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flatten(o)]
    return [out]


def compare(case: Case, expected: Any, got: Any) -> str | None:
    """None if `got` (tpu results, moved to CPU) matches `expected` (CPU's), else why not."""
    import torch

    exp, act = _flatten(expected), _flatten(got)
    if len(exp) != len(act):
        return f"{len(act)} results, CPU has {len(exp)}"
    for i, (e, a) in enumerate(zip(exp, act)):
        if not isinstance(e, torch.Tensor):
            if e != a and not (isinstance(e, float) and e != e and a != a):
                return f"result {i}: {a!r}, CPU {e!r}"
            continue
        if not isinstance(a, torch.Tensor):
            return f"result {i}: {type(a).__name__}, CPU a tensor"
        if a.dtype != e.dtype or a.shape != e.shape:
            return f"result {i}: {a.dtype} {tuple(a.shape)}, CPU {e.dtype} {tuple(e.shape)}"
        if case.sort_like and i == 1:
            # indices: gather the (CPU) input with them; ties may pick either index
            continue
        rtol, atol = tolerance(e.dtype, case.category)
        if not torch.allclose(a.double() if e.is_floating_point() else a, e.double() if e.is_floating_point() else e,
                              rtol=rtol, atol=atol, equal_nan=True) if e.is_floating_point() else not torch.equal(a, e):
            if e.is_floating_point():
                diff = (a.double() - e.double()).abs().nan_to_num(0.0)
                bad = ~torch.isclose(a.double(), e.double(), rtol=rtol, atol=atol, equal_nan=True)
                return (f"result {i}: {int(bad.sum())} of {e.numel()} elements differ (max abs diff "
                        f"{diff.max().item() if diff.numel() else 0:.3g}, rtol {rtol:g}, atol {atol:g}); "
                        f"first tpu {a[bad][:3].tolist()}, CPU {e[bad][:3].tolist()}")
            ne = a != e
            return (f"result {i}: {int(ne.sum())} of {e.numel()} elements differ; first tpu {a[ne][:3].tolist()}, "
                    f"CPU {e[ne][:3].tolist()}")
    return None


def _check_sort_indices(case: Case, inputs_cpu: list[Any], got: Any, expected: Any) -> str | None:
    """None if tpu's sort/topk indices pick CPU's values from the input (and equal CPU's for a
    stable sort), else why not."""
    import torch

    values, idx = got
    x = inputs_cpu[0]
    d = case.sort_dim
    if x.dim() == 0:
        return None if torch.equal(idx, expected[1]) else "sort of a 0-dim tensor: index not 0"
    picked = torch.gather(x, d, idx)
    if not torch.equal(picked, expected[0]) and not (x.is_floating_point() and torch.allclose(
            picked.double(), expected[0].double(), equal_nan=True, rtol=0, atol=0)):
        return "indices do not gather the sorted values from the input"
    if "stable=True" in case.body[-1] and not torch.equal(idx, expected[1]):
        return (f"stable sort: indices differ from CPU's (first tpu {idx.flatten()[:5].tolist()}, "
                f"CPU {expected[1].flatten()[:5].tolist()})")
    return None


def _to_cpu(out: Any) -> Any:
    """`out` with every tensor copied to CPU (named tuples become plain tuples)."""
    import torch

    if isinstance(out, torch.Tensor):
        return out.cpu()
    if isinstance(out, (tuple, list)):
        return type(out)(_to_cpu(o) for o in out) if not hasattr(out, "_fields") else tuple(_to_cpu(o) for o in out)
    return out


def _cpu_compiled_agrees(case: Case, rec: dict[str, Any]) -> str | None:
    """Runs the case on CPU under torch.compile(backend="aot_eager") (the same tracing,
    functionalization and decompositions as the tpu backend, with CPU kernels); returns how it
    agrees with what tpu did (`rec`: tpu raised where CPU eager did not, or did not raise where
    CPU eager did, or gave other values), or None when it does not."""
    import torch

    ns: dict[str, Any] = {}
    exec(compile(case.script("compiled"), f"<fuzz case {case.seed}>", "exec"), ns)
    try:
        want = _to_cpu(torch.compile(ns["f"], backend="aot_eager")(*ns["inputs"]("cpu")))
    except Exception:  # noqa: BLE001 - torch.compile on CPU raises
        return "CPU under torch.compile(aot_eager) raises too" if rec["verdict"] == "error" else None
    if rec["verdict"] == "error":
        return None
    try:
        got = _to_cpu(torch.compile(ns["f"], backend="tpu")(*ns["inputs"]("tpu")))
    except Exception:  # noqa: BLE001 - then they do not agree
        return None
    if compare(case, want, got) is not None:
        return None
    return "CPU under torch.compile(aot_eager) accepts it and gives tpu's result"


def run_case(case: Case, mode: str) -> dict[str, Any]:
    """Runs `case` on CPU and on tpu in `mode` in this process; returns its verdict record. In
    compiled mode a case that fails against CPU eager is compared with CPU under
    torch.compile(backend="aot_eager") too: where that does what tpu did, the difference is
    torch.compile's (verdict compile_gap), not the tpu backend's."""
    rec = _run_case(case, mode)
    if mode == "compiled" and rec["verdict"] in ("wrong", "error"):
        same = _cpu_compiled_agrees(case, rec)
        if same:
            rec.update(verdict="compile_gap", detail=f"{same}; against CPU eager: {rec['detail']}"[:600])
    return rec


def _run_case(case: Case, mode: str) -> dict[str, Any]:
    import torch

    import torch_tpu

    ns: dict[str, Any] = {}
    exec(compile(case.script(mode), f"<fuzz case {case.seed}>", "exec"), ns)
    rec: dict[str, Any] = {"seed": case.seed, "op": case.op, "mode": mode, "verdict": "pass", "detail": ""}
    cpu_err: BaseException | None = None
    expected: Any = None
    cpu_inputs: list[Any] = []
    try:
        cpu_inputs = ns["inputs"]("cpu")
        expected = ns["f"](*[t.clone() if isinstance(t, torch.Tensor) and t.is_contiguous() else t
                             for t in cpu_inputs])
        expected = _to_cpu(expected)
    except Exception as e:  # noqa: BLE001 - the case's outcome on CPU
        cpu_err = e
    torch_tpu.set_mode("fused" if mode == "fused" else "strict")
    tpu_err: BaseException | None = None
    got: Any = None
    try:
        dev_inputs = ns["inputs"]("tpu")
        f = ns["f"]
        if mode == "compiled":
            f = torch.compile(f, backend="tpu", fullgraph=False)
        got = _to_cpu(f(*dev_inputs))
        torch.tpu.synchronize()
    except Exception as e:  # noqa: BLE001 - the case's outcome on tpu
        tpu_err = e
    finally:
        try:
            torch.tpu.synchronize()
        except Exception:  # noqa: BLE001 - an error surfacing late belongs to this case
            if tpu_err is None:
                tpu_err = RuntimeError("error at synchronize after the case")
    if cpu_err is not None:
        if tpu_err is None:
            if "not implemented for" in str(cpu_err):
                rec.update(verdict="cpu_gap", detail=f"CPU: {type(cpu_err).__name__}: {str(cpu_err)[:160]}")
            else:
                first = str(cpu_err).splitlines()[0][:200] if str(cpu_err) else ""
                rec.update(verdict="wrong", detail=f"CPU raised {type(cpu_err).__name__}: {first}; tpu did not")
        elif mode != "compiled" and _family(cpu_err) != _family(tpu_err):
            rec.update(verdict="wrong", detail=f"CPU raised {type(cpu_err).__name__} ({str(cpu_err)[:120]!r}), "
                                               f"tpu {type(tpu_err).__name__} ({str(tpu_err)[:160]!r})")
        return rec
    if tpu_err is not None:
        msg = str(tpu_err).strip().splitlines()
        rec.update(verdict="error", detail=f"{type(tpu_err).__name__}: {msg[0][:300] if msg else ''}")
        return rec
    why = compare(case, expected, got)
    if why is None and case.sort_like:
        why = _check_sort_indices(case, cpu_inputs, got, expected)
    if why is not None:
        rec.update(verdict="wrong", detail=why)
    return rec


def worker(mode: str, first: int, count: int) -> None:
    """Runs cases first..first+count-1 in `mode`, one JSON line per case on stdout, each after a
    "BEGIN seed" line (so the parent can tell which case a crash or hang belongs to)."""
    import torch

    import torch_tpu  # noqa: F401

    out = sys.stdout
    for i, seed in enumerate(range(first, first + count)):
        out.write(f"BEGIN {seed}\n")
        out.flush()
        try:
            rec = run_case(make_case(seed), mode)
        except Exception:  # noqa: BLE001 - a bug of the fuzzer itself, reported as such
            rec = {"seed": seed, "op": "?", "mode": mode, "verdict": "error",
                   "detail": "fuzzer: " + traceback.format_exc(limit=3).replace("\n", " | ")[-400:]}
        out.write("RESULT " + json.dumps(rec) + "\n")
        out.flush()
        if mode == "compiled" and i % 50 == 49:
            torch._dynamo.reset()


# ----------------------------------------------------------------------------------------------
# The parent: batches in subprocesses, crash and hang attribution, the report


def _run_batch(mode: str, seeds: list[int], case_timeout: float, tool: str) -> list[dict[str, Any]]:
    """Runs `seeds` (consecutive) in worker children, restarting after a crash or a hang."""
    results: list[dict[str, Any]] = []
    pending = list(seeds)
    while pending:
        env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
        proc = subprocess.Popen([sys.executable, tool, "--worker", "--mode", mode, "--first", str(pending[0]),
                                 "--count", str(len(pending))], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env)
        lines: queue.Queue[str | None] = queue.Queue()
        stderr_tail: list[str] = []

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)

        def pump_err() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                stderr_tail.append(line)
                del stderr_tail[:-20]

        threading.Thread(target=pump, daemon=True).start()
        threading.Thread(target=pump_err, daemon=True).start()
        current: int | None = None
        # The first case also pays for the interpreter's start-up and imports.
        deadline = time.monotonic() + case_timeout + 60
        while True:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                proc.kill()
                proc.wait()
                seed = current if current is not None else pending[0]
                case = make_case(seed)
                results.append({"seed": seed, "op": case.op, "mode": mode, "verdict": "hang",
                                "detail": f"no result within {case_timeout:.0f} s"})
                pending = [s for s in pending if s > seed]
                break
            if line is None:
                rc = proc.wait()
                if current is not None:
                    case = make_case(current)
                    results.append({"seed": current, "op": case.op, "mode": mode, "verdict": "crash",
                                    "detail": f"worker exited with {rc} during the case: "
                                              + " ".join(s.strip() for s in stderr_tail[-3:])[-300:]})
                    pending = [s for s in pending if s > current]
                elif pending and rc != 0:
                    # No case started: the environment is broken, not a case.
                    raise RuntimeError(f"fuzz worker failed to start (rc {rc}): " + "".join(stderr_tail)[-2000:])
                break
            if line.startswith("BEGIN "):
                current = int(line.split()[1])
                deadline = time.monotonic() + case_timeout
            elif line.startswith("RESULT "):
                rec = json.loads(line[len("RESULT "):])
                results.append(rec)
                pending = [s for s in pending if s > rec["seed"]]
                current = None
    return results


def fuzz(cases: int, seed: int, modes: list[str], jobs: int, batch: int, case_timeout: float,
         log: Callable[[str], None] = print) -> dict[str, Any]:
    """Runs `cases` cases (seeds seed..seed+cases-1) in each mode; returns the report."""
    tool = str(Path(__file__).resolve())
    work = [(m, list(range(s, min(s + batch, seed + cases)))) for m in modes for s in range(seed, seed + cases, batch)]
    results: list[dict[str, Any]] = []
    lock = threading.Lock()
    todo: queue.Queue[tuple[str, list[int]]] = queue.Queue()
    for w in work:
        todo.put(w)
    start = time.monotonic()

    def run() -> None:
        while True:
            try:
                m, seeds = todo.get_nowait()
            except queue.Empty:
                return
            res = _run_batch(m, seeds, case_timeout, tool)
            with lock:
                results.extend(res)
                log(f"  {m}: seeds {seeds[0]}..{seeds[-1]} done ({time.monotonic() - start:.0f} s)")

    threads = [threading.Thread(target=run) for _ in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.sort(key=lambda r: (modes.index(r["mode"]), r["seed"]))
    summary = {m: {v: sum(1 for r in results if r["mode"] == m and r["verdict"] == v) for v in VERDICTS}
               for m in modes}
    for m in modes:
        summary[m]["cases"] = sum(1 for r in results if r["mode"] == m)
    failures = [dict(r, repro=make_case(r["seed"]).repro(r["mode"])) for r in results
                if r["verdict"] not in ("pass", "cpu_gap", "compile_gap")]
    return {"command": " ".join(sys.argv), "seed": seed, "cases": cases, "modes": modes,
            "seconds": round(time.monotonic() - start, 1), "summary": summary, "failures": failures,
            "gaps": [r for r in results if r["verdict"] in ("cpu_gap", "compile_gap")]}


def print_summary(report: dict[str, Any]) -> None:
    """The summary table and one line per failing case (its seed, verdict, detail and repro)."""
    print(f"fuzz_ops: {report['cases']} cases per mode from seed {report['seed']} in {report['seconds']} s")
    print(f"{'mode':10} {'cases':>6} {'pass':>6} {'crash':>6} {'hang':>6} {'wrong':>6} {'error':>6} {'cpu_gap':>8} "
          f"{'compile_gap':>12}")
    for m, s in report["summary"].items():
        print(f"{m:10} {s['cases']:6} {s['pass']:6} {s['crash']:6} {s['hang']:6} {s['wrong']:6} {s['error']:6} "
              f"{s['cpu_gap']:8} {s['compile_gap']:12}")
    for f in report["failures"]:
        print(f"  [{f['mode']}] seed {f['seed']} {f['verdict']} {f['op']}: {f['detail'][:240]}\n      {f['repro']}")


def repro(seed: int, mode: str) -> int:
    """Prints case `seed`'s script and runs it in this process; returns 0 when it passes."""
    case = make_case(seed)
    print(case.script(mode))
    print(f"# run with: python tools/fuzz_ops.py --repro {seed} --mode {mode}")
    import torch_tpu  # noqa: F401

    rec = run_case(case, mode)
    print(json.dumps(rec, indent=1))
    return 0 if rec["verdict"] in ("pass", "cpu_gap", "compile_gap") else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=200, help="cases per mode")
    p.add_argument("--seed", type=int, default=0, help="first case seed (cases are seed..seed+cases-1)")
    p.add_argument("--modes", default="strict,fused,compiled")
    p.add_argument("--jobs", type=int, default=1, help="worker processes at a time")
    p.add_argument("--batch", type=int, default=200, help="cases per worker process")
    p.add_argument("--case-timeout", type=float, default=60.0, help="seconds before a case counts as hung")
    p.add_argument("--out", help="write the JSON report here")
    p.add_argument("--repro", type=int, metavar="SEED", help="print and run one case")
    p.add_argument("--mode", default="strict", choices=MODES)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--print", action="store_true", help="print the script of --repro without running it")
    a = p.parse_args(argv)
    if a.worker:
        worker(a.mode, a.first, a.count)
        return 0
    if a.repro is not None:
        if a.print:
            print(make_case(a.repro).script(a.mode))
            return 0
        return repro(a.repro, a.mode)
    modes = [m for m in a.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad:
        p.error(f"unknown modes {bad}; choose from {MODES}")
    report = fuzz(a.cases, a.seed, modes, a.jobs, a.batch, a.case_timeout, log=lambda s: print(s, file=sys.stderr))
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(report, indent=1))
    print_summary(report)
    bad_total = sum(s[v] for s in report["summary"].values() for v in ("wrong", "error", "crash", "hang"))
    return 1 if bad_total else 0


if __name__ == "__main__":
    sys.exit(main())
