"""Helpers shared by lowerings: type promotion, broadcasting, dims, opmath.

These follow PyTorch's CPU semantics (torch._prims_common is the source of truth for type
promotion), so a lowering written with them produces the dtypes and shapes CPU produces.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from ..ir.builder import GraphBuilder, Value

Kind = ELEMENTWISE_TYPE_PROMOTION_KIND


def _meta(v: Value | float | int | bool):
    """A stand-in PyTorch sees for type promotion: numbers stay numbers, 0-d stays 0-d."""
    if not isinstance(v, Value):
        return v
    if v.wrapped:
        return {torch.float64: 1.0, torch.int64: 1, torch.bool: True}.get(v.dtype, 1.0)
    return torch.empty(v.shape if v.rank == 0 else (1,) * v.rank, dtype=v.dtype, device="meta")


def result_dtypes(*vals: Value | float | int | bool | None,
                  kind: Kind = Kind.DEFAULT) -> tuple[torch.dtype, torch.dtype]:
    """(computation dtype, result dtype) exactly as PyTorch's elementwise type promotion."""
    args = [_meta(v) for v in vals if v is not None]
    return elementwise_dtypes(*args, type_promotion_kind=kind)


def result_type(*vals: Value | float | int | bool | None) -> torch.dtype:
    """torch.result_type over several operands (DEFAULT promotion's result dtype)."""
    return result_dtypes(*vals, kind=Kind.NO_OPMATH)[1]


def opmath(dtype: torch.dtype) -> torch.dtype:
    """Dtype CPU kernels compute in: float32 for half types."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    return tuple(torch.broadcast_shapes(*[tuple(s) for s in shapes]))


def broadcast_to(b: GraphBuilder, v: Value, shape: Sequence[int]) -> Value:
    """Numpy-style broadcast of v to shape (right-aligned)."""
    shape = tuple(shape)
    if v.shape == shape:
        return v
    if v.rank > len(shape):
        raise RuntimeError(f"cannot broadcast {v.shape} to {shape}")
    lead = len(shape) - v.rank
    keep = [d for d in range(v.rank) if v.shape[d] == shape[lead + d] or v.shape[d] != 1]
    if len(keep) != v.rank:  # drop size-1 dims that expand, so broadcast_in_dim stays simple
        v = b.reshape(v, [v.shape[d] for d in keep])
    dims = [lead + d for d in keep]
    for k, d in enumerate(dims):
        if v.shape[k] != shape[d]:
            raise RuntimeError(f"The size of tensor a ({v.shape[k]}) must match the size of tensor b "
                               f"({shape[d]}) at non-singleton dimension {d}")
    return b.broadcast_in_dim(v, shape, dims)


def cast(b: GraphBuilder, v: Value, dtype: torch.dtype) -> Value:
    return b.convert(v, dtype)


def promote(b: GraphBuilder, *vals: Value, dtype: torch.dtype, shape: Sequence[int] | None = None) -> list[Value]:
    """Convert each value to dtype and broadcast all to a common (or the given) shape."""
    shape = tuple(shape) if shape is not None else broadcast_shapes(*[v.shape for v in vals])
    return [broadcast_to(b, b.convert(v, dtype), shape) for v in vals]


def elementwise(b: GraphBuilder, fn, *vals: Value, kind: Kind = Kind.DEFAULT,
                compute: torch.dtype | None = None) -> Value:
    """Promote, broadcast, compute fn(b, *converted) in the computation dtype, cast to the result."""
    comp, res = result_dtypes(*vals, kind=kind)
    if compute is not None:
        comp = compute
    args = promote(b, *vals, dtype=comp)
    return b.convert(fn(b, *args), res)


def scalar_like(b: GraphBuilder, value: float | int | bool, like: Value) -> Value:
    """A constant with like's dtype, broadcast to like's shape."""
    return b.full(value, like.dtype, like.shape)


def canonical_dim(dim: int, rank: int) -> int:
    r = max(rank, 1)
    if not -r <= dim < r:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-r}, {r - 1}], but got {dim})")
    return dim % r


def canonical_dims(dims: Sequence[int] | int | None, rank: int) -> list[int]:
    """Dims for a reduction: None or [] means all dims."""
    if dims is None:
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    if len(dims) == 0:
        return list(range(rank))
    out = [canonical_dim(d, rank) for d in dims]
    if len(set(out)) != len(out):
        raise RuntimeError(f"dim {out} appears multiple times in the list of dims")
    return out if rank > 0 else []


def numel(shape: Sequence[int]) -> int:
    return math.prod(shape)


def contiguous_strides(shape: Sequence[int]) -> list[int]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return strides[::-1]


def is_float(v: Value) -> bool:
    return v.dtype.is_floating_point


def keepdim_shape(shape: Sequence[int], dims: Sequence[int]) -> list[int]:
    return [1 if d in dims else s for d, s in enumerate(shape)]
