"""Lowerings: conversion, copy and creation (clone, _to_copy, copy, fill and zero, the full,
zeros and ones factories with their *_like and new_* forms, scalar_tensor, arange, eye).

The elementwise conventions hold here too (elementwise.py): PyTorch's type promotion, runtime
0-d scalars, CPU's formulas where results must agree to the last bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from ..ir.builder import GraphBuilder, Value
from .apply import NeedsBakedScalars
from .core import broadcast_to
from .elementwise import _HALF, _check_fill_const, _k, _reject, _s, _where
from .registry import register

aten = torch.ops.aten

@register(aten.clone.default)
def clone(b: GraphBuilder, x: Value, memory_format=None) -> Value:
    return x  # a fresh output tensor is written from the value; no IR work needed


@register(aten._to_copy.default)
def to_copy(b: GraphBuilder, x: Value, dtype: torch.dtype | None, layout=None, device=None, pin_memory=None,
            non_blocking: bool = False, memory_format=None) -> Value:
    # Device moves are handled by the C++ layer; here only the element type changes.
    return b.convert(x, dtype if dtype is not None else x.dtype)


@register(aten.copy.default)
def copy(b: GraphBuilder, x: Value, src: Value, non_blocking: bool = False) -> Value:
    return broadcast_to(b, b.convert(src, x.dtype), x.shape)


@register(aten.fill.Scalar, aten.fill.Tensor)
def fill(b: GraphBuilder, x: Value, value: Value) -> Value:
    _reject(not value.wrapped and value.rank != 0,
            f"fill_ only supports 0-dimension value tensor but got tensor with {value.rank} dimensions.")
    _check_fill_const(x, value)
    return _s(b, b.reshape(value, ()), x)


@register(aten.zero.default)
def zero(b: GraphBuilder, x: Value) -> Value:
    return _k(b, 0, x)


def _scalar_dtype(v: Value) -> torch.dtype:
    """The dtype torch.full infers from a fill value: bool, int64, or the default float dtype."""
    if v.dtype == torch.bool:
        return torch.bool
    if v.dtype.is_floating_point:
        return torch.get_default_dtype()
    return torch.int64


@register(aten.full.default)
def full(b: GraphBuilder, size: Sequence[int], fill_value: Value, dtype: torch.dtype | None = None,
         layout=None, device=None, pin_memory=None) -> Value:
    dtype = dtype if dtype is not None else _scalar_dtype(fill_value)
    return broadcast_to(b, b.convert(fill_value, dtype), tuple(size))


@register(aten.full_like.default)
def full_like(b: GraphBuilder, x: Value, fill_value: Value, dtype: torch.dtype | None = None, layout=None,
              device=None, pin_memory=None, memory_format=None) -> Value:
    return broadcast_to(b, b.convert(fill_value, dtype or x.dtype), x.shape)


@register(aten.zeros_like.default)
def zeros_like(b: GraphBuilder, x: Value, dtype: torch.dtype | None = None, layout=None, device=None,
               pin_memory=None, memory_format=None) -> Value:
    return b.full(0, dtype or x.dtype, x.shape)


@register(aten.ones_like.default)
def ones_like(b: GraphBuilder, x: Value, dtype: torch.dtype | None = None, layout=None, device=None,
              pin_memory=None, memory_format=None) -> Value:
    return b.full(1, dtype or x.dtype, x.shape)


@register(aten.zeros.default)
def zeros(b: GraphBuilder, size: Sequence[int], dtype: torch.dtype | None = None, layout=None, device=None,
          pin_memory=None) -> Value:
    return b.full(0, dtype or torch.get_default_dtype(), tuple(size))


@register(aten.ones.default)
def ones(b: GraphBuilder, size: Sequence[int], dtype: torch.dtype | None = None, layout=None, device=None,
         pin_memory=None) -> Value:
    return b.full(1, dtype or torch.get_default_dtype(), tuple(size))


@register(aten.new_zeros.default)
def new_zeros(b: GraphBuilder, x: Value, size: Sequence[int], dtype: torch.dtype | None = None, layout=None,
              device=None, pin_memory=None) -> Value:
    return b.full(0, dtype or x.dtype, tuple(size))


@register(aten.new_ones.default)
def new_ones(b: GraphBuilder, x: Value, size: Sequence[int], dtype: torch.dtype | None = None, layout=None,
             device=None, pin_memory=None) -> Value:
    return b.full(1, dtype or x.dtype, tuple(size))


@register(aten.new_full.default)
def new_full(b: GraphBuilder, x: Value, size: Sequence[int], fill_value: Value, dtype: torch.dtype | None = None,
             layout=None, device=None, pin_memory=None) -> Value:
    return broadcast_to(b, b.convert(fill_value, dtype or x.dtype), tuple(size))


@register(aten.scalar_tensor.default)
def scalar_tensor(b: GraphBuilder, s: Value, dtype: torch.dtype | None = None, layout=None, device=None,
                  pin_memory=None) -> Value:
    return b.convert(s, dtype or torch.get_default_dtype())


def _const(v: Value) -> float | int | bool:
    if v.const is None:
        raise NeedsBakedScalars()
    return v.const


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """CPU accumulate type of range kernels: double for float32/64, float for halves, int64 for ints."""
    if dtype in _HALF:
        return torch.float32
    return torch.float64 if dtype.is_floating_point else torch.int64


@register(aten.arange.default, aten.arange.start, aten.arange.start_step, bake_scalars=True)
def arange(b: GraphBuilder, *args) -> Value:
    scalars = [a for a in args if isinstance(a, Value)]
    rest = [a for a in args if not isinstance(a, Value)]
    dtype = rest[0] if rest else None
    if len(scalars) == 1:
        start_v, end_v, step_v = None, scalars[0], None
    elif len(scalars) == 2:
        (start_v, end_v), step_v = scalars, None
    else:
        start_v, end_v, step_v = scalars
    start = _const(start_v) if start_v is not None else 0
    end = _const(end_v)
    step = _const(step_v) if step_v is not None else 1
    if dtype is None:
        is_float = any(v is not None and v.dtype.is_floating_point for v in (start_v, end_v, step_v))
        dtype = torch.get_default_dtype() if is_float else torch.int64
    _reject(step == 0, "step must be nonzero")
    if dtype == torch.int64:  # ATen computes the int64 length in integer arithmetic
        xs, xe, xst = int(start), int(end), int(step)
        sgn = (xst > 0) - (xst < 0)
        size = _trunc_div(xe - xs + xst - sgn, xst)
    else:
        size_d = math.ceil((float(end) - float(start)) / float(step))
        _reject(not math.isfinite(size_d), f"unsupported range: {start} -> {end}")
        size = int(size_d)
    _reject(size < 0, "upper bound and larger bound inconsistent with step sign")
    acc = _acc_dtype(dtype)
    to_acc = (lambda v: int(v)) if acc == torch.int64 else float
    idx = b.iota(acc, (size,), 0)
    out = b.add(_k(b, to_acc(start), idx), b.mul(_k(b, to_acc(step), idx), idx))
    return b.convert(out, dtype)


def _trunc_div(a: int, d: int) -> int:
    q = abs(a) // abs(d)
    return q if (a >= 0) == (d > 0) else -q


def _linspace_steps(b: GraphBuilder, start: Value, end: Value, steps: int, dtype: torch.dtype,
                    step_dtype: torch.dtype) -> tuple[Value, Value, Value, Value]:
    """(start, end, step, index) for CPU's linspace/logspace: the first half counts up from
    start, the second half down from end, so both ends are exact."""
    idx = b.iota(step_dtype, (steps,), 0)
    s = b.convert(b.convert(b.reshape(start, ()), dtype), step_dtype)
    e = b.convert(b.convert(b.reshape(end, ()), dtype), step_dtype)
    step = b.div(b.sub(e, s), b.constant(steps - 1, step_dtype))
    return s, e, step, idx


def _range_halves(b: GraphBuilder, s: Value, e: Value, step: Value, idx: Value, steps: int,
                  fn: Callable[[Value], Value]) -> Value:
    shape = idx.shape
    sb, eb, stb = (broadcast_to(b, v, shape) for v in (s, e, step))
    lo = b.add(sb, b.mul(stb, idx))
    hi = b.sub(eb, b.mul(stb, b.sub(_k(b, steps - 1, idx), idx)))
    first = b.compare("lt", idx, _k(b, steps // 2, idx))
    return _where(b, first, fn(lo), fn(hi))


@register(aten.linspace.default, aten.linspace.Tensor_Tensor, aten.linspace.Tensor_Scalar,
          aten.linspace.Scalar_Tensor)
def linspace(b: GraphBuilder, start: Value, end: Value, steps: int, dtype: torch.dtype | None = None,
             layout=None, device=None, pin_memory=None) -> Value:
    _reject(steps < 0, "number of steps must be non-negative")
    dtype = dtype or torch.get_default_dtype()
    if steps <= 1:
        return b.full(0, dtype, (0,)) if steps == 0 else \
            b.reshape(b.convert(b.reshape(start, ()), dtype), (1,))
    # Integral outputs step in double; float outputs step in their own type.
    step_dtype = torch.float64 if not dtype.is_floating_point else dtype
    s, e, step, idx = _linspace_steps(b, start, end, steps, dtype, step_dtype)
    return b.convert(_range_halves(b, s, e, step, idx, steps, lambda v: v), dtype)


@register(aten.logspace.default, aten.logspace.Tensor_Tensor, aten.logspace.Tensor_Scalar,
          aten.logspace.Scalar_Tensor)
def logspace(b: GraphBuilder, start: Value, end: Value, steps: int, base: Value,
             dtype: torch.dtype | None = None, layout=None, device=None, pin_memory=None) -> Value:
    _reject(steps < 0, "number of steps must be non-negative")
    dtype = dtype or torch.get_default_dtype()
    base_v = b.convert(base, torch.float64)  # a runtime float argument
    if steps <= 1:
        if steps == 0:
            return b.full(0, dtype, (0,))
        v = b.pow(base_v, b.convert(b.reshape(start, ()), torch.float64))
        return b.reshape(b.convert(v, dtype), (1,))
    # CPU: start/end in the result type, step and pow in double.
    s, e, step, idx = _linspace_steps(b, start, end, steps, dtype, torch.float64)
    out = _range_halves(b, s, e, step, idx, steps, lambda v: b.pow(broadcast_to(b, base_v, v.shape), v))
    return b.convert(out, dtype)


@register(aten.eye.default, aten.eye.m)
def eye(b: GraphBuilder, n: int, *args) -> Value:
    m = args[0] if args and isinstance(args[0], int) else n
    rest = args[1:] if args and isinstance(args[0], int) else args
    dtype = (rest[0] if rest else None) or torch.get_default_dtype()
    shape = (n, m)
    eq = b.compare("eq", b.iota(torch.int64, shape, 0), b.iota(torch.int64, shape, 1))
    return b.convert(eq, dtype)
