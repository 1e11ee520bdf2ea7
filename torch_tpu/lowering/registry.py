"""The lowering table: ATen op overload -> function that builds IR.

Contract for a lowering function (see docs/lowering.md):

* Called as ``fn(b, *args)`` with ``b`` a ``GraphBuilder`` and one positional argument per
  schema argument, in schema order (keyword-only ones included, defaults filled in):
  Tensor -> ``Value``; Tensor? -> ``Value | None``; Tensor[] -> ``list[Value]``; Tensor?[] ->
  ``list[Value | None]``; Scalar and float -> a 0-d ``Value`` (a runtime input, so changing a
  scalar does not recompile; ``.wrapped`` is True for Python numbers); Generator? -> None (use
  ``b.rng_uniform``/``b.rng_normal``); everything else (int, int[], bool, str, float[],
  ScalarType as torch.dtype, Layout, Device, MemoryFormat) -> the Python value, baked into the
  program and the cache key.
* Returns the op's results: a ``Value``, or a tuple/list matching the schema's returns (a list
  for Tensor[]).
* Mutating ops (``add_``, ``add.out``, ``_foreach_add_``...) normally need no lowering: the
  functional variant is lowered and its results are written into the mutated arguments. A
  lowering registered directly for a mutating op returns the non-aliased returns followed by
  the new value of each mutated argument in schema order (a list for Tensor(a!)[], None for an
  absent optional).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..ir.builder import GraphBuilder

LoweringFn = Callable[..., object]

LOWERINGS: dict[str, LoweringFn] = {}

# Ops whose Scalar arguments decide output shapes (arange): their scalars are baked in.
BAKE_SCALARS: set[str] = set()


def op_key(op: torch._ops.OpOverload | str) -> str:
    """Canonical table key, e.g. 'aten::add.Tensor' (overload 'default' -> 'aten::relu')."""
    if isinstance(op, str):
        return op
    name = op._schema.name
    return name if op._overloadname == "default" else f"{name}.{op._overloadname}"


def register(*ops: torch._ops.OpOverload | torch._ops.OpOverloadPacket | str,
             bake_scalars: bool = False) -> Callable[[LoweringFn], LoweringFn]:
    """Decorator: register fn as the lowering of each op (a packet registers all overloads)."""

    def deco(fn: LoweringFn) -> LoweringFn:
        for op in ops:
            overloads = ([getattr(op, name) for name in op.overloads()]
                         if isinstance(op, torch._ops.OpOverloadPacket) else [op])
            for o in overloads:
                key = op_key(o)
                LOWERINGS[key] = fn
                if bake_scalars:
                    BAKE_SCALARS.add(key)
        return fn

    return deco


def lookup(op: torch._ops.OpOverload) -> LoweringFn | None:
    return LOWERINGS.get(op_key(op))


__all__ = ["GraphBuilder", "LOWERINGS", "BAKE_SCALARS", "register", "lookup", "op_key"]
