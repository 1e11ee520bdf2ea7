"""Lowerings: Cholesky factorizations and triangular solves (IR `cholesky`, `triangular_solve`).

linalg.cholesky(_ex), linalg.solve_triangular, triangular_solve, cholesky_solve and
cholesky_inverse, for float32 and float64 (CPU's dtypes for these ops, less complex). Batch
dims broadcast as in ATen before the IR ops, which take equal batch dims as StableHLO does.
`info` of linalg.cholesky_ex comes from the factor: the IR makes columns NaN from the first
failing leading minor on, so the first NaN on the diagonal names its order.
"""

from __future__ import annotations

import torch

from ..ir.builder import GraphBuilder, Value
from .core import broadcast_shapes, broadcast_to
from .creation import eye
from .nn import check
from .registry import register
from .shape import diagonal, full_i64

aten = torch.ops.aten


def _check_float(x: Value, name: str) -> None:
    check(x.dtype in (torch.float32, torch.float64),
          f"{name}: expected a float32 or float64 tensor on tpu, got {x.dtype}", TypeError)


def _square(x: Value, name: str, arg: str = "A") -> None:
    check(x.rank >= 2, f"{name}: The input tensor {arg} must have at least 2 dimensions.")
    check(x.shape[-1] == x.shape[-2], f"{name}: {arg} must be batches of square matrices, "
          f"but they are {x.shape[-2]} by {x.shape[-1]} matrices")


def _batched(b: GraphBuilder, a: Value, rhs: Value) -> tuple[Value, Value]:
    """a and rhs with their batch dims broadcast to one shape."""
    batch = broadcast_shapes(a.shape[:-2], rhs.shape[:-2])
    return broadcast_to(b, a, [*batch, *a.shape[-2:]]), broadcast_to(b, rhs, [*batch, *rhs.shape[-2:]])


@register(aten.linalg_cholesky_ex.default)
def linalg_cholesky_ex(b: GraphBuilder, a: Value, upper: bool = False, check_errors: bool = False):
    _square(a, "linalg.cholesky")
    _check_float(a, "linalg.cholesky")
    factor = b.cholesky(a, lower=not upper)
    n, shape = a.shape[-1], a.shape
    batch = list(shape[:-2])
    if n == 0:
        return factor, b.full(0, torch.int32, batch)
    # A NaN at diagonal position i -> order i + 1 failed; info is the smallest such order.
    diag = diagonal(b, factor, 0, -2, -1)
    nan_diag = b.compare("ne", diag, diag)
    order = b.add(b.iota(torch.int64, [*batch, n], len(batch)), full_i64(b, 1, [*batch, n]))
    first = b.reduce(b.select(nan_diag, order, full_i64(b, n + 1, [*batch, n])), "min", [len(batch)])
    info = b.select(b.compare("gt", first, full_i64(b, n, batch)), full_i64(b, 0, batch), first)
    return factor, b.convert(info, torch.int32)


@register(aten.linalg_solve_triangular.default)
def linalg_solve_triangular(b: GraphBuilder, a: Value, rhs: Value, upper: bool, left: bool = True,
                            unitriangular: bool = False) -> Value:
    name = "linalg.solve_triangular"
    _square(a, name)
    check(rhs.rank >= 2, f"{name}: The input tensor B must have at least 2 dimensions.")
    _check_float(a, name)
    check(a.dtype == rhs.dtype, f"{name}: Expected A and B to have the same dtype, but found A of type "
          f"{a.dtype} and B of type {rhs.dtype} instead.")
    n = a.shape[-1]
    check(rhs.shape[-2 if left else -1] == n, f"{name}: Incompatible shapes of A and B for the equation "
          f"{'AX = B' if left else 'XA = B'} ({a.shape[-2]}x{n} and {rhs.shape[-2]}x{rhs.shape[-1]})")
    a, rhs = _batched(b, a, rhs)
    return b.triangular_solve(a, rhs, left_side=left, lower=not upper, unit_diagonal=unitriangular)


@register(aten.triangular_solve.default)
def triangular_solve(b: GraphBuilder, rhs: Value, a: Value, upper: bool = True, transpose: bool = False,
                     unitriangular: bool = False) -> tuple[Value, Value]:
    """torch.triangular_solve(b, A): the solution of op(A) X = b and A (broadcast)."""
    _square(a, "triangular_solve")
    _check_float(a, "triangular_solve")
    check(rhs.rank >= 2 and rhs.shape[-2] == a.shape[-1] and a.dtype == rhs.dtype,
          f"triangular_solve: incompatible shapes or dtypes of b {rhs.shape} and A {a.shape}")
    a, rhs = _batched(b, a, rhs)
    x = b.triangular_solve(a, rhs, left_side=True, lower=not upper, unit_diagonal=unitriangular,
                           transpose_a=transpose)
    return x, a


@register(aten._cholesky_solve_helper.default)
def cholesky_solve_helper(b: GraphBuilder, rhs: Value, factor: Value, upper: bool) -> Value:
    """A X = B with A = L L^T (or U^T U): two triangular solves (batch dims already broadcast)."""
    _check_float(factor, "cholesky_solve")
    lower = not upper
    y = b.triangular_solve(factor, rhs, left_side=True, lower=lower, transpose_a=upper)
    return b.triangular_solve(factor, y, left_side=True, lower=lower, transpose_a=lower)


@register(aten.cholesky_inverse.default)
def cholesky_inverse(b: GraphBuilder, factor: Value, upper: bool = False) -> Value:
    """(L L^T)^-1 = L^-T L^-1: the identity solved through both triangles."""
    _square(factor, "cholesky_inverse", "input")
    _check_float(factor, "cholesky_inverse")
    identity = broadcast_to(b, eye(b, factor.shape[-1], factor.dtype), factor.shape)
    return cholesky_solve_helper(b, identity, factor, upper)
