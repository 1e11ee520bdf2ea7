"""The lowering table: ATen op overload -> function that builds IR.

Contract for a lowering function (see docs/lowering.md):

* Called as ``fn(b, *args)`` with ``b`` a ``GraphBuilder`` and one positional argument per
  schema argument, in schema order (keyword-only ones included, defaults filled in):
  Tensor -> ``Value``; Tensor? -> ``Value | None``; Tensor[] -> ``list[Value]``; Tensor?[] ->
  ``list[Value | None]``; Scalar and float -> a 0-d ``Value`` (a runtime input, so changing a
  scalar does not recompile; ``.wrapped`` is True for Python numbers); Scalar[] -> ``list[Value]``
  of such 0-d values (Python numbers when scalars are baked); Generator? -> None (use
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

import hashlib
import inspect
from collections.abc import Callable

import torch

from ..ir.builder import GraphBuilder

LoweringFn = Callable[..., object]

LOWERINGS: dict[str, LoweringFn] = {}

# Lowerings used when a call sees a complex tensor or asks for a complex dtype (complex_ops.py).
COMPLEX_LOWERINGS: dict[str, LoweringFn] = {}

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


# Keys whose lowering a user registered (register_lowering): not covered by the disk tier's
# lowering fingerprint, so compiled graphs using them are not stored on disk.
USER_LOWERINGS: set[str] = set()


def _overloads(op) -> list[torch._ops.OpOverload]:
    if isinstance(op, str):
        ns, _, rest = op.partition("::")
        name, _, overload = rest.partition(".")
        if not ns or not name:
            raise ValueError(f"register_lowering: {op!r} is not a qualified op name like 'mylib::op'")
        op = getattr(getattr(torch.ops, ns), name)
        if overload:
            op = getattr(op, overload)
    if hasattr(op, "_opoverload"):  # a torch.library.custom_op (CustomOpDef)
        op = op._opoverload
    if isinstance(op, torch._ops.OpOverloadPacket):
        return [getattr(op, name) for name in op.overloads()]
    if isinstance(op, torch._ops.OpOverload):
        return [op]
    raise TypeError(f"register_lowering: expected an op (torch.ops.ns.op[.overload], a custom_op, or 'ns::op'), "
                    f"got {type(op).__name__}")


def _code_fingerprint(fn: LoweringFn) -> str:
    """A hash of a lowering's code: its source text when Python can find it (else its bytecode,
    constants and names), plus the reprs of its default arguments and of the values it closes
    over (a factory's parameters). The same in every process for numbers, strings and dtypes;
    an object whose repr shows its address makes it process-specific, so it never matches
    another process's. Helpers the lowering calls are not covered."""
    h = hashlib.sha256()
    code = getattr(fn, "__code__", None)
    try:
        h.update(inspect.getsource(fn).encode())
    except (OSError, TypeError):
        if code is None:  # no code to hash: a per-process identity
            h.update(f"{type(fn).__qualname__}@{id(fn)}".encode())
        else:
            h.update(code.co_code)
            h.update(repr((code.co_consts, code.co_names)).encode())
    cells = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            cells.append(repr(cell.cell_contents))
        except ValueError:  # an empty cell
            cells.append("<empty>")
    h.update(repr((getattr(fn, "__defaults__", None), getattr(fn, "__kwdefaults__", None), cells)).encode())
    return h.hexdigest()[:16]


def register_lowering(*ops, bake_scalars: bool = False) -> Callable[[LoweringFn], LoweringFn]:
    """Decorator giving user ops (``torch.library``) a lowering to the IR, for every mode.

    ``ops``: ``torch.ops.mylib.op`` (all overloads), ``torch.ops.mylib.op.default``, the object
    ``torch.library.custom_op`` returns, or ``"mylib::op"``. The function follows the lowering
    contract at the top of this module: ``fn(b, *args)`` with ``b`` a ``GraphBuilder``
    (torch_tpu/ir/builder.py, docs/ir.md) and tensors as ``Value``s, returning the op's results
    as ``Value``s. Afterwards tpu calls of the op in debug/strict/fused mode run the lowered
    program (cached like any ATen op, with no Python on a cache hit) instead of the op's Python
    implementation, and ``torch.compile`` graphs containing it compile as one program. A
    lowering registered again replaces the previous one: the eager program cache is cleared
    (graphs already compiled by ``torch.compile`` keep the old lowering until they recompile).
    Per-op programs in the disk tier are keyed by a hash of the lowering's source, so an edited
    lowering never loads programs an earlier version stored. See docs/lowering.md, "Custom ops".
    """
    overloads = [o for op in ops for o in _overloads(op)]
    if not overloads:
        raise ValueError("register_lowering: no op given")

    def deco(fn: LoweringFn) -> LoweringFn:
        if not callable(fn):
            raise TypeError("register_lowering: the lowering must be callable")
        from .. import _C

        fingerprint = _code_fingerprint(fn)
        replaced = False
        for o in overloads:
            key = op_key(o)
            replaced = replaced or (key in LOWERINGS and LOWERINGS[key] is not fn)
            LOWERINGS[key] = fn
            _C._set_lowering_fingerprint(o._schema.name, o._schema.overload_name, fingerprint)
            USER_LOWERINGS.add(key)
            if bake_scalars:
                BAKE_SCALARS.add(key)
            if o.namespace != "aten":
                _C._register_lowered_op(o._schema.name, o._overloadname)
        if replaced:  # programs lowered by the previous function must not be hit again
            _C._clear_program_cache()
        return fn

    return deco


def is_user_lowering(op) -> bool:
    return isinstance(op, torch._ops.OpOverload) and op_key(op) in USER_LOWERINGS


__all__ = ["GraphBuilder", "LOWERINGS", "COMPLEX_LOWERINGS", "BAKE_SCALARS", "USER_LOWERINGS", "register", "register_lowering", "lookup",
           "op_key", "is_user_lowering"]
