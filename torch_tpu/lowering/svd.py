"""Lowerings: the singular value decomposition and the symmetric eigendecomposition
(linalg.svd / svdvals and what builds on them: pinv, matrix_rank, matrix_norm, cond; linalg.eigh
and eigvalsh).

Design: StableHLO has no SVD or eigensolver (XLA calls LAPACK or cuSOLVER), so, as LU and QR
(lowering/lu.py, lowering/qr.py), the algorithm is written in IR ops and runs on every runtime.
It is one-sided Jacobi (Hestenes): the columns of A (the longer side as rows) are rotated in
pairs until they are orthogonal; then A V = U S, with S the column norms and V the product of
the rotations. Pair (p, q)'s rotation is the symmetric Jacobi rotation of the 2x2 Gram matrix
[[|a_p|^2, a_p.a_q], [a_p.a_q, |a_q|^2]]. All n/2 disjoint pairs of a round rotate at once: the
columns are held as two blocks (tops and bottoms, pair i = (top_i, bottom_i)) and after each
round they move one place along a round-robin tournament, so n - 1 rounds pair every column
with every other (a sweep). The graph cannot loop until converged, so it runs a fixed number of
sweeps: Jacobi converges quadratically, and log2(n) + 5 sweeps reach float64 accuracy on
random matrices up to n = 128 (measured against LAPACK). V rides along as extra rows under A,
so one rotation updates both. U comes from Householder QR of A V / S, which gives orthonormal
columns also where a singular value is 0 and completes U for full_matrices.

eigh runs the same iteration on B = A + sigma I, sigma = max row sum of |A| >= the spectral
radius, so B is positive semidefinite and its right singular vectors are A's eigenvectors; the
eigenvalues are the Rayleigh quotients v^T A v (error O(eps |A|), as LAPACK's).

Singular vectors (and eigenvectors) are unique only up to sign, so they may differ from CPU's
by column signs, as CUDA's do; products like U diag(S) V^H and pinv agree. The graph grows by
~40 nodes per round, (n - 1) (log2 n + 5) rounds, so the order is capped at MAX_ORDER.
"""

from __future__ import annotations

import math

import torch

from ..ir.builder import GraphBuilder, Value
from .apply import call
from .decompositions import EXTRA_DECOMPOSITIONS
from .nn import check
from .qr import householder, _q
from .registry import register
from .triangular import _batched, _check_float, _square

aten = torch.ops.aten

# Largest min(m, n) decomposed (64 -> 693 rounds, ~28k nodes).
MAX_ORDER = 64


def _sweeps(n: int) -> int:
    return math.ceil(math.log2(max(n, 2))) + 5


def _rotation(b: GraphBuilder, alpha: Value, beta: Value, gamma: Value) -> tuple[Value, Value]:
    """(c, s) of the Jacobi rotation diagonalizing [[alpha, gamma], [gamma, beta]]: t = tan(theta)
    is the smaller root of t^2 + 2 zeta t - 1 = 0, zeta = (beta - alpha) / (2 gamma); none for
    gamma = 0."""
    zero = call(b, aten.eq.Scalar, gamma, 0)
    safe = call(b, aten.where.self, zero, b.full(1.0, gamma.dtype, gamma.shape), gamma)
    zeta = call(b, aten.div.Tensor, call(b, aten.sub.Tensor, beta, alpha), call(b, aten.mul.Tensor, safe, 2.0))
    sign = call(b, aten.where.self, call(b, aten.lt.Scalar, zeta, 0), b.full(-1.0, gamma.dtype, gamma.shape),
                b.full(1.0, gamma.dtype, gamma.shape))
    root = call(b, aten.sqrt.default, call(b, aten.add.Tensor, call(b, aten.mul.Tensor, zeta, zeta), 1.0))
    t = call(b, aten.div.Tensor, sign, call(b, aten.add.Tensor, call(b, aten.abs.default, zeta), root))
    t = call(b, aten.where.self, zero, b.full(0.0, gamma.dtype, gamma.shape), t)
    c = call(b, aten.rsqrt.default, call(b, aten.add.Tensor, call(b, aten.mul.Tensor, t, t), 1.0))
    return c, call(b, aten.mul.Tensor, t, c)


def _dot(b: GraphBuilder, x: Value, y: Value) -> Value:
    return call(b, aten.sum.dim_IntList, call(b, aten.mul.Tensor, x, y), [-2])


def _jacobi(b: GraphBuilder, a: Value) -> tuple[Value, Value]:
    """(A V, V) for A [..., m, n], m >= n, after the fixed sweeps; the columns in their original
    order (column j of both belongs to one singular pair, unsorted)."""
    *batch, m, n = a.shape
    npad = n + n % 2  # a zero column pairs with nobody: its rotations are the identity
    k = npad // 2
    eye = call(b, aten.expand.default, call(b, aten.eye.m, npad, npad, dtype=a.dtype), [*batch, npad, npad])
    if npad != n:
        a = call(b, aten.cat.default, [a, b.full(0.0, a.dtype, [*batch, m, 1])], -1)
    w = call(b, aten.cat.default, [a, eye], -2)  # [..., m + npad, npad]: A over V
    top, bottom = call(b, aten.slice.Tensor, w, -1, 0, None, 2), call(b, aten.slice.Tensor, w, -1, 1, None, 2)
    order_top, order_bottom = list(range(0, npad, 2)), list(range(1, npad, 2))
    for _ in range(_sweeps(n) * (npad - 1)):
        p_a, q_a = call(b, aten.slice.Tensor, top, -2, 0, m), call(b, aten.slice.Tensor, bottom, -2, 0, m)
        c, s = _rotation(b, _dot(b, p_a, p_a), _dot(b, q_a, q_a), _dot(b, p_a, q_a))
        c, s = call(b, aten.unsqueeze.default, c, -2), call(b, aten.unsqueeze.default, s, -2)
        p = call(b, aten.sub.Tensor, call(b, aten.mul.Tensor, c, top), call(b, aten.mul.Tensor, s, bottom))
        q = call(b, aten.add.Tensor, call(b, aten.mul.Tensor, s, top), call(b, aten.mul.Tensor, c, bottom))
        if k == 1:
            top, bottom = p, q
            continue
        # round robin: top_0 stays, bottom_0 moves up, the last top moves down, the rest shift
        cols = lambda x, lo, hi: call(b, aten.slice.Tensor, x, -1, lo, hi)  # noqa: E731
        top = call(b, aten.cat.default, [cols(p, 0, 1), cols(q, 0, 1), cols(p, 1, k - 1)], -1)
        bottom = call(b, aten.cat.default, [cols(q, 1, k), cols(p, k - 1, k)], -1)
        order_top, order_bottom = ([order_top[0], order_bottom[0], *order_top[1:k - 1]],
                                   [*order_bottom[1:], order_top[k - 1]])
    # back to the original column order (a static permutation), the padding column dropped
    order = order_top + order_bottom
    both = call(b, aten.cat.default, [top, bottom], -1)
    where = {col: i for i, col in enumerate(order)}
    w = call(b, aten.cat.default, [call(b, aten.slice.Tensor, both, -1, where[j], where[j] + 1) for j in range(n)], -1)
    return call(b, aten.slice.Tensor, w, -2, 0, m), call(b, aten.slice.Tensor, w, -2, m, m + n)


def _by(b: GraphBuilder, x: Value, idx: Value) -> Value:
    """x's columns in the order idx [..., n] gives."""
    full = call(b, aten.expand.default, call(b, aten.unsqueeze.default, idx, -2), list(x.shape))
    return call(b, aten.gather.default, x, -1, full)


def _orthonormal(b: GraphBuilder, x: Value, cols: int) -> Value:
    """The first `cols` columns of Q from x = QR [..., m, n], column j having x's column j's
    direction (Q's sign flipped where R's diagonal is negative)."""
    *batch, m, n = x.shape
    r, vs, taus = householder(b, x)
    q = _q(b, vs, taus, batch, m, cols, x.dtype)
    d = call(b, aten.diagonal.default, r, 0, -2, -1)  # [..., min(m, n)] = [..., n]
    sign = call(b, aten.where.self, call(b, aten.lt.Scalar, d, 0), b.full(-1.0, x.dtype, d.shape),
                b.full(1.0, x.dtype, d.shape))
    if cols > n:
        sign = call(b, aten.cat.default, [sign, b.full(1.0, x.dtype, [*batch, cols - n])], -1)
    return call(b, aten.mul.Tensor, q, call(b, aten.unsqueeze.default, sign, -2))


def _check_order(m: int, n: int, name: str) -> None:
    check(min(m, n) <= MAX_ORDER, f"torch_tpu: {name} of {m}x{n} matrices is not implemented for the tpu device "
          f"(Jacobi sweeps unrolled in the program up to min(m, n) = {MAX_ORDER})", NotImplementedError)


def _eyes(b: GraphBuilder, batch: list[int], rows: int, cols: int, dtype: torch.dtype) -> Value:
    return call(b, aten.expand.default, call(b, aten.eye.m, rows, cols, dtype=dtype), [*batch, rows, cols])


@register(aten._linalg_svd.default)
def linalg_svd(b: GraphBuilder, a: Value, full_matrices: bool = False, compute_uv: bool = True,
               driver: str | None = None):
    check(a.rank >= 2, "linalg.svd: The input tensor A must have at least 2 dimensions.")
    _check_float(a, "linalg.svd")
    *batch, m, n = a.shape
    k = min(m, n)
    _check_order(m, n, "linalg.svd")
    u_cols, v_rows = (m, n) if full_matrices else (k, k)
    if k == 0 or math.prod(batch) == 0:
        s = b.full(0.0, a.dtype, [*batch, k])
        if not compute_uv:
            return b.full(0.0, a.dtype, [0]), s, b.full(0.0, a.dtype, [0])
        return _eyes(b, batch, m, u_cols, a.dtype), s, _eyes(b, batch, v_rows, n, a.dtype)
    tall = m >= n
    x = a if tall else call(b, aten.transpose.int, a, -2, -1)  # [..., M, N], M >= N = k
    av, v = _jacobi(b, x)
    s = call(b, aten.sqrt.default, _dot(b, av, av))
    s, idx = call(b, aten.sort.default, s, -1, True)
    if not compute_uv:
        return b.full(0.0, a.dtype, [0]), s, b.full(0.0, a.dtype, [0])
    av, v = _by(b, av, idx), _by(b, v, idx)
    safe = call(b, aten.where.self, call(b, aten.eq.Scalar, s, 0), b.full(1.0, a.dtype, s.shape), s)
    left = _orthonormal(b, call(b, aten.div.Tensor, av, call(b, aten.unsqueeze.default, safe, -2)),
                        (m if tall else n) if full_matrices else k)
    if tall:  # A = left S v^T, v square (n x n) in both modes
        return left, s, call(b, aten.transpose.int, v, -2, -1)
    # A^T = left S v^T  =>  A = v S left^T: U = v (m x m), Vh = left^T
    return v, s, call(b, aten.transpose.int, left, -2, -1)


@register(aten._linalg_eigh.default)
def linalg_eigh(b: GraphBuilder, a: Value, UPLO: str = "L", compute_v: bool = True):
    _square(a, "linalg.eigh")
    _check_float(a, "linalg.eigh")
    check(UPLO in ("L", "U", "l", "u"), f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    *batch, n, _ = a.shape
    _check_order(n, n, "linalg.eigh")
    if n == 0 or math.prod(batch) == 0:
        vals = b.full(0.0, a.dtype, [*batch, n])
        return vals, (_eyes(b, batch, n, n, a.dtype) if compute_v else b.full(0.0, a.dtype, [0]))
    lower = UPLO in ("L", "l")
    tri = call(b, aten.tril.default if lower else aten.triu.default, a)
    strict = call(b, aten.tril.default if lower else aten.triu.default, a, -1 if lower else 1)
    sym = call(b, aten.add.Tensor, tri, call(b, aten.transpose.int, strict, -2, -1))
    sigma = call(b, aten.amax.default, call(b, aten.sum.dim_IntList, call(b, aten.abs.default, sym), [-1]), [-1],
                 True)  # [..., 1]: the largest absolute row sum bounds every |eigenvalue|
    shift = call(b, aten.mul.Tensor, _eyes(b, batch, n, n, a.dtype), call(b, aten.unsqueeze.default, sigma, -1))
    bv, v = _jacobi(b, call(b, aten.add.Tensor, sym, shift))
    av = call(b, aten.sub.Tensor, bv, call(b, aten.mul.Tensor, v, call(b, aten.unsqueeze.default, sigma, -1)))
    vals, idx = call(b, aten.sort.default, _dot(b, v, av), -1, False)
    if not compute_v:
        return vals, b.full(0.0, a.dtype, [0])
    return vals, _by(b, v, idx)


@register(aten.linalg_lstsq.default)
def linalg_lstsq(b: GraphBuilder, a: Value, rhs: Value, rcond: float | None = None, driver: str | None = None):
    """Least squares through the SVD: X = V diag(1/s) U^T B over the singular values above
    rcond * max(s) (the minimum-norm solution, as gelsy/gelsd give for rank-deficient A). The
    outputs follow CPU's drivers: rank for all but gels, singular values for gelsd/gelss, and the
    residuals |A X - B|^2 per column when m > n (except gelsy). CPU leaves the residuals empty
    when some matrix is rank-deficient; a program cannot pick its output shape from the data,
    so here they are computed for every matrix."""
    driver = driver or "gelsy"
    check(driver in ("gels", "gelsy", "gelsd", "gelss"), f"torch.linalg.lstsq: parameter `driver` should be one of "
          f"(gels, gelsy, gelsd, gelss)")
    check(a.rank >= 2, "torch.linalg.lstsq: input must have at least 2 dimensions.")
    _check_float(a, "torch.linalg.lstsq")
    check(a.dtype == rhs.dtype, f"torch.linalg.lstsq: Expected input and other to have the same dtype, but got "
          f"input's dtype {a.dtype} and other's dtype {rhs.dtype}")
    vector = rhs.rank == a.rank - 1
    x_rhs = call(b, aten.unsqueeze.default, rhs, -1) if vector else rhs
    check(x_rhs.shape[-2] == a.shape[-2], f"torch.linalg.lstsq: input.size(-2) should match other.size(-2)")
    a, x_rhs = _batched(b, a, x_rhs)
    *batch, m, n = a.shape
    u, s, vh = linalg_svd(b, a, False, True)
    cutoff = rcond if rcond is not None and rcond > 0 else torch.finfo(a.dtype).eps * max(m, n)
    keep = call(b, aten.gt.Tensor, s, call(b, aten.mul.Tensor, call(b, aten.amax.default, s, [-1], True), cutoff)) \
        if min(m, n) else s
    inv = call(b, aten.where.self, keep, call(b, aten.reciprocal.default, s), b.full(0.0, a.dtype, s.shape)) \
        if min(m, n) else s
    coeff = call(b, aten.mul.Tensor, call(b, aten.unsqueeze.default, inv, -1),
                 call(b, aten.matmul.default, call(b, aten.transpose.int, u, -2, -1), x_rhs))
    x = call(b, aten.matmul.default, call(b, aten.transpose.int, vh, -2, -1), coeff)
    empty = b.full(0.0, a.dtype, [0])
    if m > n and driver != "gelsy":
        diff = call(b, aten.sub.Tensor, call(b, aten.matmul.default, a, x), x_rhs)
        residuals = call(b, aten.sum.dim_IntList, call(b, aten.mul.Tensor, diff, diff), [-2])  # [..., 1] for a vector, as CPU
    else:
        residuals = empty
    rank = b.full(0, torch.int64, [0]) if driver == "gels" else (
        call(b, aten.sum.dim_IntList, b.convert(keep, torch.int64), [-1]) if min(m, n) else
        b.full(0, torch.int64, batch))
    values = s if driver in ("gelsd", "gelss") else empty
    return (call(b, aten.squeeze.dim, x, -1) if vector else x), residuals, rank, values


def _pinv(a: torch.Tensor, atol: torch.Tensor | None = None, rtol: torch.Tensor | None = None,
          hermitian: bool = False) -> torch.Tensor:
    """linalg.pinv with tensor tolerances (the overload torch.compile graphs hold; eager calls
    reach it through ATen's kernel): singular values at most max(atol, rtol * max(s)) count as
    zero; rtol defaults to eps * max(m, n) unless only a positive atol is given, as ATen."""
    m, n = a.shape[-2:]
    # a graph may hold the tolerances as Python numbers (constants)
    atol, rtol = (torch.full((), t, dtype=a.dtype, device=a.device) if isinstance(t, (int, float)) else t
                  for t in (atol, rtol))
    if rtol is None:
        default = torch.finfo(a.dtype).eps * max(m, n)
        rtol = torch.zeros((), dtype=a.dtype, device=a.device) if atol is not None else torch.full(
            (), default, dtype=a.dtype, device=a.device)
        if atol is not None:  # ATen: rtol is 0 when atol > 0, else the default
            rtol = torch.where(atol > 0, rtol, torch.full((), default, dtype=a.dtype, device=a.device))
    if atol is None:
        atol = torch.zeros((), dtype=a.dtype, device=a.device)
    if hermitian:
        w, v = torch.linalg.eigh(a)
        s, left, right_h = w.abs(), v, v.mT
    else:
        left, s, right_h = torch.linalg.svd(a, full_matrices=False)
    if s.shape[-1] == 0:
        return torch.zeros(*a.shape[:-2], n, m, dtype=a.dtype, device=a.device)
    tol = torch.maximum(atol.unsqueeze(-1), rtol.unsqueeze(-1) * s.amax(-1, keepdim=True))
    # hermitian: V diag(1/w) V^T, w's signs kept (s = |w| only picks what counts as zero)
    inv = torch.where(s > tol, 1.0 / (w if hermitian else s), torch.zeros_like(s))
    return (right_h.mT * inv.unsqueeze(-2)) @ left.mT


EXTRA_DECOMPOSITIONS[aten.linalg_pinv.atol_rtol_tensor] = _pinv
