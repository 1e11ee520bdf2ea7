"""Lowerings: QR by Householder reflections (geqrf, linalg.qr, linalg.householder_product, ormqr).

Design: as LU (lowering/lu.py), written in IR ops because StableHLO has no QR: LAPACK's
geqrf unrolled over the columns, with dlarfg's conventions, so Q and R match CPU's signs:
for column j, alpha = R[j, j] and xnorm = |R[j+1:, j]|; if xnorm is 0 the reflection is the
identity (tau = 0); else beta = -sign(alpha) hypot(alpha, xnorm), tau = (beta - alpha) / beta
and v = (1, R[j+1:, j] / (alpha - beta)). R <- (I - tau v v^T) R, applied under masks to the
whole matrix (rows above j are untouched because v is 0 there). Q is the product of the
reflections applied to the identity, last first (orgqr).
"""

from __future__ import annotations

import torch

from ..ir.builder import GraphBuilder, Value
from .apply import call
from .nn import check
from .registry import register
from .triangular import _check_float

aten = torch.ops.aten

MAX_ORDER = 512  # as LU: the unrolled graph grows with min(m, n)


def _rows(b: GraphBuilder, batch: list[int], m: int) -> Value:
    return b.iota(torch.int64, [*batch, m], len(batch))


def _reflect(b: GraphBuilder, x: Value, v: Value, tau: Value) -> Value:
    """(I - tau v v^T) x for x [..., m, c], v [..., m], tau [...]."""
    vt_x = call(b, aten.sum.dim_IntList, call(b, aten.mul.Tensor, call(b, aten.unsqueeze.default, v, -1), x), [-2], True)
    scaled = call(b, aten.mul.Tensor, call(b, aten.unsqueeze.default, v, -1),
                  call(b, aten.unsqueeze.default, call(b, aten.unsqueeze.default, tau, -1), -1))
    return call(b, aten.sub.Tensor, x, call(b, aten.mul.Tensor, scaled, vt_x))


def householder(b: GraphBuilder, a: Value) -> tuple[Value, list[Value], list[Value]]:
    """(R [..., m, n] with zeros below the diagonal, the reflectors v_j [..., m], their tau_j [...])."""
    *batch, m, n = a.shape
    k = min(m, n)
    check(k <= MAX_ORDER, f"torch_tpu: QR of {m}x{n} matrices is not implemented for the tpu device (unrolled in "
          f"the program up to min(m, n) = {MAX_ORDER})", NotImplementedError)
    rows = _rows(b, batch, m)
    cols = b.iota(torch.int64, [*batch, m, n], len(batch) + 1)
    zeros = b.full(0.0, a.dtype, [*batch, m])
    r, vs, taus = a, [], []
    for j in range(k):
        col = call(b, aten.select.int, r, -1, j)
        alpha = call(b, aten.select.int, col, -1, j)
        below = call(b, aten.gt.Scalar, rows, j)
        tail = call(b, aten.where.self, below, col, zeros)
        xnorm = call(b, aten.sqrt.default, call(b, aten.sum.dim_IntList, call(b, aten.mul.Tensor, tail, tail), [-1]))
        identity = call(b, aten.eq.Scalar, xnorm, 0)
        beta = call(b, aten.neg.default, call(b, aten.copysign.Tensor, call(b, aten.hypot.default, alpha, xnorm), alpha))
        safe_beta = call(b, aten.where.self, identity, b.full(1.0, a.dtype, batch), beta)
        tau = call(b, aten.where.self, identity, b.full(0.0, a.dtype, batch),
                   call(b, aten.div.Tensor, call(b, aten.sub.Tensor, safe_beta, alpha), safe_beta))
        denom = call(b, aten.where.self, identity, b.full(1.0, a.dtype, batch), call(b, aten.sub.Tensor, alpha, safe_beta))
        v = call(b, aten.div.Tensor, tail, call(b, aten.unsqueeze.default, denom, -1))
        v = call(b, aten.where.self, call(b, aten.eq.Scalar, rows, j), b.full(1.0, a.dtype, [*batch, m]), v)
        r = _reflect(b, r, v, tau)
        # column j below the diagonal is exactly 0 and R[j, j] = beta (alpha for the identity)
        fixed = call(b, aten.where.self, call(b, aten.gt.Scalar, rows, j), zeros,
                     call(b, aten.where.self, call(b, aten.eq.Scalar, rows, j),
                          call(b, aten.unsqueeze.default, call(b, aten.where.self, identity, alpha, beta), -1),
                          call(b, aten.select.int, r, -1, j)))
        r = call(b, aten.where.self, call(b, aten.eq.Scalar, cols, j),
                 call(b, aten.expand.default, call(b, aten.unsqueeze.default, fixed, -1), [*batch, m, n]), r)
        vs.append(v)
        taus.append(tau)
    return r, vs, taus


def _q(b: GraphBuilder, vs: list[Value], taus: list[Value], batch: list[int], m: int, cols: int, dtype) -> Value:
    """H_0 ... H_{k-1} applied to the first `cols` columns of the identity (orgqr)."""
    q = call(b, aten.expand.default, call(b, aten.eye.m, m, cols, dtype=dtype), [*batch, m, cols])
    for v, tau in zip(reversed(vs), reversed(taus)):
        q = _reflect(b, q, v, tau)
    return q


@register(aten.linalg_qr.default)
def linalg_qr(b: GraphBuilder, a: Value, mode: str = "reduced"):
    check(a.rank >= 2, "linalg.qr: The input tensor A must have at least 2 dimensions.")
    _check_float(a, "linalg.qr")
    check(mode in ("reduced", "complete", "r"), f"qr received unrecognized mode '{mode}' but expected one of "
          "'reduced' (default), 'r', or 'complete'")
    *batch, m, n = a.shape
    k = min(m, n)
    r, vs, taus = householder(b, a)
    if mode == "complete":
        return _q(b, vs, taus, batch, m, m, a.dtype), r
    r = call(b, aten.slice.Tensor, r, -2, 0, k)
    if mode == "r":
        return b.full(0.0, a.dtype, [0]), r
    return _q(b, vs, taus, batch, m, k, a.dtype), r


@register(aten.geqrf.default)
def geqrf(b: GraphBuilder, a: Value):
    check(a.rank >= 2, "geqrf: input must have at least 2 dimensions.")
    _check_float(a, "geqrf")
    *batch, m, n = a.shape
    r, vs, taus = householder(b, a)
    if not vs:
        return r, b.full(0.0, a.dtype, [*batch, 0])
    # LAPACK's compact form: R on and above the diagonal, v_j below it in column j
    v = call(b, aten.stack.default, vs, -1)  # [..., m, k]
    if n > v.shape[-1]:
        v = call(b, aten.cat.default, [v, b.full(0.0, a.dtype, [*batch, m, n - v.shape[-1]])], -1)
    packed = call(b, aten.add.Tensor, call(b, aten.triu.default, r), call(b, aten.tril.default, v, -1))
    return packed, call(b, aten.stack.default, taus, -1)


def _unpacked(b: GraphBuilder, a: Value, tau: Value) -> tuple[list[Value], list[Value]]:
    """The reflectors v_j (1 at j, a[j+1:, j] below, 0 above) and tau_j of geqrf's compact form."""
    *batch, m, _ = a.shape
    rows = _rows(b, batch, m)
    vs, taus = [], []
    for j in range(tau.shape[-1]):
        col = call(b, aten.select.int, a, -1, j)
        v = call(b, aten.where.self, call(b, aten.gt.Scalar, rows, j), col, b.full(0.0, a.dtype, [*batch, m]))
        vs.append(call(b, aten.where.self, call(b, aten.eq.Scalar, rows, j), b.full(1.0, a.dtype, [*batch, m]), v))
        taus.append(call(b, aten.select.int, tau, -1, j))
    return vs, taus


@register(aten.linalg_householder_product.default)
def householder_product(b: GraphBuilder, a: Value, tau: Value) -> Value:
    check(a.rank >= 2, "torch.linalg.householder_product: input must have at least 2 dimensions.")
    _check_float(a, "linalg.householder_product")
    *batch, m, n = a.shape
    k = tau.shape[-1]
    check(k <= n <= m, "torch.linalg.householder_product: input.shape[-2] must be greater than or equal to "
          "input.shape[-1] and input.shape[-1] must be greater than or equal to tau.shape[-1]")
    vs, taus = _unpacked(b, a, tau)
    return _q(b, vs, taus, batch, m, n, a.dtype)


@register(aten.ormqr.default)
def ormqr(b: GraphBuilder, a: Value, tau: Value, other: Value, left: bool = True, transpose: bool = False) -> Value:
    """Q C, Q^T C, C Q or C Q^T with Q = H_0 ... H_{k-1} from geqrf's compact form, without
    forming Q: the reflections are applied to C in the order the product asks."""
    check(a.rank >= 2 and other.rank >= 2, "torch.ormqr: input and other must have at least 2 dimensions.")
    _check_float(a, "torch.ormqr")
    check(a.dtype == tau.dtype == other.dtype, "torch.ormqr: input, tau and other must have the same dtype")
    m = a.shape[-2]
    check(other.shape[-2 if left else -1] == m, f"torch.ormqr: other.shape[{-2 if left else -1}] must be equal "
          f"to input.shape[-2]")
    check(tau.shape[-1] <= min(m, a.shape[-1]), "torch.ormqr: tau.shape[-1] must be less than or equal to "
          "input.shape[-1]")
    vs, taus = _unpacked(b, a, tau)
    c = other if left else call(b, aten.transpose.int, other, -2, -1)  # C Q = (Q^T C^T)^T
    first_to_last = transpose if left else not transpose  # Q^T C applies H_0 first
    for v, t in (zip(vs, taus) if first_to_last else zip(reversed(vs), reversed(taus))):
        c = _reflect(b, c, v, t)
    return c if left else call(b, aten.transpose.int, c, -2, -1)
