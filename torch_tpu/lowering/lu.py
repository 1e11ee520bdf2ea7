"""Lowerings: LU factorization with partial pivoting and what builds on it: linalg.lu_factor,
linalg.lu, lu_unpack, linalg.lu_solve, linalg.solve, linalg.inv, linalg.det, linalg.slogdet.

Design: StableHLO has no LU op (XLA calls a LAPACK/cuSOLVER custom call), so the factorization
is written in IR ops: LAPACK's getrf, unrolled over the columns. Step k picks the largest
|A[i, k]|, i >= k (the first on ties, as isamax), swaps that row with row k (a gather), scales
the column below the pivot and subtracts the rank-1 update from the trailing matrix. Each step
works on the whole matrix under masks, so every step has the same shapes (3x getrf's flops; the
graph has O(min(m, n)) nodes, and factorizations are capped at MAX_ORDER). Pivots and info
follow LAPACK: 1-based int32 row interchanges; info k + 1 for the first zero pivot (the column
is then left unscaled). Solves use the IR's triangular_solve, as Cholesky solves do.
"""

from __future__ import annotations

import torch

from ..ir.builder import GraphBuilder, Value
from . import layout
from .apply import call
from .nn import check
from .registry import register
from .triangular import _batched, _check_float, _square

aten = torch.ops.aten

# Largest min(m, n) factorized (the unrolled graph grows by ~20 nodes per column).
MAX_ORDER = 512


def _iota(b: GraphBuilder, shape: list[int], dim: int) -> Value:
    return b.iota(torch.int64, shape, dim)


def lu_factor(b: GraphBuilder, a: Value, pivot: bool = True) -> tuple[Value, Value, Value]:
    """(LU, pivots, info) of a [..., m, n] float matrix (getrf)."""
    *batch, m, n = a.shape
    k_max = min(m, n)
    check(k_max <= MAX_ORDER, f"torch_tpu: LU factorization of {m}x{n} matrices is not implemented for the tpu "
          f"device (unrolled in the program up to min(m, n) = {MAX_ORDER})", NotImplementedError)
    full = [*batch, m, n]
    rows, cols = _iota(b, full, len(batch)), _iota(b, full, len(batch) + 1)
    row_ids = _iota(b, [*batch, m], len(batch))
    zero = b.full(0, a.dtype, full)
    pivots, info = [], b.full(0, torch.int64, batch)
    for k in range(k_max):
        col = call(b, aten.select.int, a, -1, k)  # [..., m]
        if pivot:
            cand = call(b, aten.where.self, call(b, aten.ge.Scalar, row_ids, k), call(b, aten.abs.default, col),
                        b.full(-1.0, a.dtype, [*batch, m]))
            piv = call(b, aten.argmax.default, cand, -1)  # [...]: the first largest, as isamax
            p = call(b, aten.unsqueeze.default, piv, -1)
            swap = call(b, aten.where.self, call(b, aten.eq.Scalar, row_ids, k), p,
                        call(b, aten.where.self, call(b, aten.eq.Tensor, row_ids, p), b.full(k, torch.int64, [*batch, m]),
                             row_ids))
            a = call(b, aten.gather.default, a, -2, call(b, aten.expand.default, call(b, aten.unsqueeze.default, swap, -1),
                                                           full))
            pivots.append(call(b, aten.add.Tensor, piv, 1))
        else:
            pivots.append(b.full(k + 1, torch.int64, batch))
        d = call(b, aten.select.int, call(b, aten.select.int, a, -1, k), -1, k)  # the pivot, [...]
        dz = call(b, aten.eq.Scalar, d, 0)
        info = call(b, aten.where.self, call(b, aten.logical_and.default, dz, call(b, aten.eq.Scalar, info, 0)),
                    b.full(k + 1, torch.int64, batch), info)
        safe_d = call(b, aten.where.self, dz, b.full(1.0, a.dtype, batch), d)
        col = call(b, aten.select.int, a, -1, k)
        below = call(b, aten.gt.Scalar, row_ids, k)
        scale = call(b, aten.logical_and.default, below,
                     call(b, aten.logical_not.default, call(b, aten.unsqueeze.default, dz, -1)))
        l = call(b, aten.where.self, scale, call(b, aten.div.Tensor, col, call(b, aten.unsqueeze.default, safe_d, -1)),
                 b.full(0.0, a.dtype, [*batch, m]))  # the multipliers (0 above the pivot, or for a zero pivot)
        row = call(b, aten.where.self, call(b, aten.gt.Scalar, cols, k), call(b, aten.expand.default, call(
            b, aten.unsqueeze.default, call(b, aten.select.int, a, -2, k), -2), full), zero)
        update = call(b, aten.mul.Tensor, call(b, aten.unsqueeze.default, l, -1), row)
        a = call(b, aten.sub.Tensor, a, update)
        stored = call(b, aten.where.self, scale, l, col)
        a = call(b, aten.where.self, call(b, aten.logical_and.default, call(b, aten.eq.Scalar, cols, k),
                                          call(b, aten.gt.Scalar, rows, k)),
                 call(b, aten.expand.default, call(b, aten.unsqueeze.default, stored, -1), full), a)
    piv = call(b, aten.stack.default, pivots, -1) if pivots else b.full(0, torch.int64, [*batch, 0])
    return a, b.convert(piv, torch.int32), b.convert(info, torch.int32)


def _permutation(b: GraphBuilder, pivots: Value, m: int) -> Value:
    """The row order the interchanges give ([..., m] int64): row i of P^T A is row perm[i] of A."""
    batch = list(pivots.shape[:-1])
    perm = _iota(b, [*batch, m], len(batch))
    ids = perm
    piv = b.convert(pivots, torch.int64)
    for k in range(pivots.shape[-1]):
        p = call(b, aten.unsqueeze.default, call(b, aten.sub.Tensor, call(b, aten.select.int, piv, -1, k), 1), -1)
        at_k = call(b, aten.gather.default, perm, -1, p)  # perm[k] <-> perm[p]
        at_p = call(b, aten.select.int, perm, -1, k)
        perm = call(b, aten.where.self, call(b, aten.eq.Scalar, ids, k), at_k,
                    call(b, aten.where.self, call(b, aten.eq.Tensor, ids, p), call(b, aten.unsqueeze.default, at_p, -1),
                         perm))
    return perm


def _rows(b: GraphBuilder, x: Value, perm: Value) -> Value:
    """x[..., perm, :] for a batched permutation."""
    idx = call(b, aten.expand.default, call(b, aten.unsqueeze.default, perm, -1), list(x.shape))
    return call(b, aten.gather.default, x, -2, idx)


def _inverse_rows(b: GraphBuilder, x: Value, perm: Value) -> Value:
    """y with y[..., perm, :] = x."""
    idx = call(b, aten.expand.default, call(b, aten.unsqueeze.default, perm, -1), list(x.shape))
    return call(b, aten.scatter.src, call(b, aten.zeros_like.default, x), -2, idx, x)


def lu_solve(b: GraphBuilder, lu: Value, pivots: Value, rhs: Value, adjoint: bool = False) -> Value:
    """A X = rhs (A^H X = rhs when adjoint) from A's factorization P L U; batch dims equal."""
    perm = _permutation(b, pivots, lu.shape[-1])
    if not adjoint:
        y = b.triangular_solve(lu, _rows(b, rhs, perm), left_side=True, lower=True, unit_diagonal=True)
        return b.triangular_solve(lu, y, left_side=True, lower=False)
    z = b.triangular_solve(lu, rhs, left_side=True, lower=False, transpose_a=True)
    w = b.triangular_solve(lu, z, left_side=True, lower=True, unit_diagonal=True, transpose_a=True)
    return _inverse_rows(b, w, perm)


@register(aten.linalg_lu_factor_ex.default)
def linalg_lu_factor_ex(b: GraphBuilder, a: Value, pivot: bool = True, check_errors: bool = False):
    check(a.rank >= 2, "linalg.lu_factor: Expected tensor with 2 or more dimensions.")
    _check_float(a, "linalg.lu_factor")
    return lu_factor(b, a, pivot)


def _transposed(b: GraphBuilder, x: Value) -> Value:
    return call(b, aten.transpose.int, x, -2, -1)


@register(aten.linalg_lu_solve.default)
def linalg_lu_solve(b: GraphBuilder, lu: Value, pivots: Value, rhs: Value, left: bool = True,
                    adjoint: bool = False) -> Value:
    _square(lu, "linalg.lu_solve", "LU")
    _check_float(lu, "linalg.lu_solve")
    check(lu.dtype == rhs.dtype, "linalg.lu_solve: Expected LU and B to have the same dtype")
    if not left:  # X A = B  <=>  A^T X^T = B^T
        return _transposed(b, linalg_lu_solve(b, lu, pivots, _transposed(b, rhs), True, not adjoint))
    lu, rhs = _batched(b, lu, rhs)
    pivots = call(b, aten.expand.default, pivots, [*lu.shape[:-2], pivots.shape[-1]])
    return lu_solve(b, lu, pivots, rhs, adjoint)


@register(aten._linalg_solve_ex.default)
def linalg_solve_ex(b: GraphBuilder, a: Value, rhs: Value, left: bool = True, check_errors: bool = False):
    _square(a, "linalg.solve")
    _check_float(a, "linalg.solve")
    check(a.dtype == rhs.dtype, f"linalg.solve: Expected A and B to have the same dtype, but found A of type "
          f"{a.dtype} and B of type {rhs.dtype} instead")
    vector = rhs.rank == 1 or (rhs.rank == a.rank - 1 and rhs.shape == a.shape[:-1])  # ATen's vector case
    lu, pivots, info = lu_factor(b, a)
    x = call(b, aten.unsqueeze.default, rhs, -1) if vector else rhs
    x = linalg_lu_solve(b, lu, pivots, x, left)
    return (call(b, aten.squeeze.dim, x, -1) if vector else x), lu, pivots, info


@register(aten.linalg_inv_ex.default)
def linalg_inv_ex(b: GraphBuilder, a: Value, check_errors: bool = False):
    _square(a, "linalg.inv")
    _check_float(a, "linalg.inv")
    lu, pivots, info = lu_factor(b, a)
    n = a.shape[-1]
    identity = call(b, aten.expand.default, call(b, aten.eye.default, n, dtype=a.dtype), list(a.shape))
    return lu_solve(b, lu, pivots, identity), info


def _swaps_sign(b: GraphBuilder, pivots: Value, dtype: torch.dtype) -> Value:
    """(-1)^(number of rows interchanged), [...]."""
    k = pivots.shape[-1]
    moved = call(b, aten.ne.Tensor, b.convert(pivots, torch.int64),
                 call(b, aten.add.Tensor, _iota(b, list(pivots.shape), pivots.rank - 1), 1))
    odd = call(b, aten.remainder.Scalar, call(b, aten.sum.dim_IntList, moved, [-1]), 2) if k else None
    if odd is None:
        return b.full(1.0, dtype, list(pivots.shape[:-1]))
    return call(b, aten.rsub.Scalar, call(b, aten.mul.Tensor, b.convert(odd, dtype), 2.0), 1.0)


def _as_aten_factors(b: GraphBuilder, a: Value) -> Value:
    """The matrix ATen's det and slogdet factorize: A^T when A is contiguous (det(A^T) = det(A));
    their backward solves with that factorization (lowering/layout.py)."""
    return _transposed(b, a) if layout.is_contiguous(a) else a


def _det_factors(b: GraphBuilder, a: Value, name: str) -> tuple[Value, Value, Value]:
    """(LU, pivots, U's diagonal) of the matrix ATen's det and slogdet factorize."""
    _square(a, name)
    _check_float(a, name)
    lu, pivots, _ = lu_factor(b, _as_aten_factors(b, a))
    return lu, pivots, call(b, aten.diagonal.default, lu, 0, -2, -1)


@register(aten._linalg_det.default)
def linalg_det(b: GraphBuilder, a: Value):
    lu, pivots, diag = _det_factors(b, a, "linalg.det")
    det = call(b, aten.mul.Tensor, call(b, aten.prod.dim_int, diag, -1), _swaps_sign(b, pivots, a.dtype))
    return det, lu, pivots


@register(aten._linalg_slogdet.default)
def linalg_slogdet(b: GraphBuilder, a: Value):
    lu, pivots, diag = _det_factors(b, a, "linalg.slogdet")
    sign = call(b, aten.mul.Tensor, call(b, aten.prod.dim_int, call(b, aten.sign.default, diag), -1),
                _swaps_sign(b, pivots, a.dtype))
    logabs = call(b, aten.sum.dim_IntList, call(b, aten.log.default, call(b, aten.abs.default, diag)), [-1])
    return sign, logabs, lu, pivots


def _unpack(b: GraphBuilder, lu: Value, pivots: Value | None, unpack_data: bool = True, unpack_pivots: bool = True):
    *batch, m, n = lu.shape
    k = min(m, n)
    if unpack_pivots and pivots is not None:
        perm = _permutation(b, pivots, m)
        identity = call(b, aten.expand.default, call(b, aten.eye.default, m, dtype=lu.dtype), [*batch, m, m])
        p = _transposed(b, _rows(b, identity, perm))  # P with A = P L U
    else:
        p = b.full(0, lu.dtype, [0])
    if not unpack_data:
        return p, b.full(0, lu.dtype, [0]), b.full(0, lu.dtype, [0])
    low = call(b, aten.tril.default, call(b, aten.slice.Tensor, lu, -1, 0, k), -1)
    eye = call(b, aten.expand.default, call(b, aten.eye.m, m, k, dtype=lu.dtype), [*batch, m, k])
    upper = call(b, aten.triu.default, call(b, aten.slice.Tensor, lu, -2, 0, k))
    return p, call(b, aten.add.Tensor, low, eye), upper


@register(aten.lu_unpack.default)
def lu_unpack(b: GraphBuilder, lu: Value, pivots: Value, unpack_data: bool = True, unpack_pivots: bool = True):
    _check_float(lu, "lu_unpack")
    return _unpack(b, lu, pivots, unpack_data, unpack_pivots)


@register(aten.linalg_lu.default)
def linalg_lu(b: GraphBuilder, a: Value, pivot: bool = True):
    check(a.rank >= 2, "linalg.lu: Expected tensor with 2 or more dimensions.")
    _check_float(a, "linalg.lu")
    lu, pivots, _ = lu_factor(b, a, pivot)
    p, low, upper = _unpack(b, lu, pivots if pivot else None, True, pivot)
    return p, low, upper
