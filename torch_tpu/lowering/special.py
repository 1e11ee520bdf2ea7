"""Lowerings: special functions and small ops built from IR arithmetic.

angle (real dtypes), modified Bessel functions i0/i0e/i1/i1e, erfcx, ndtri, polygamma (digamma / trigamma /
Hurwitz zeta), prims::zeta, cummax/cummin helpers, put, tril_indices/triu_indices. Each follows
the CPU kernel's algorithm (ATen's Math.h for the special functions) in the op-math dtype, so
results agree with CPU to rounding; the Bessel functions are the exception (see _bessel_i).
"""

from __future__ import annotations

import math

import torch

from ..ir.builder import GraphBuilder, Value
from .core import Kind, broadcast_shapes, canonical_dim, opmath, result_dtypes
from .nn import check
from .registry import register

aten = torch.ops.aten
prims = torch.ops.prims


def _k(b: GraphBuilder, value: float | int | bool, like: Value) -> Value:
    return b.full(value, like.dtype, like.shape)


def _isnan(b: GraphBuilder, x: Value) -> Value:
    return b.compare("ne", x, x)


def _unary_comp(x: Value) -> tuple[torch.dtype, torch.dtype]:
    """(computation, result) dtypes of a float unary op (ints promote to the default float)."""
    comp, res = result_dtypes(x, kind=Kind.INT_TO_FLOAT)
    return opmath(res), res


# -- angle -------------------------------------------------------------------------------------

@register(aten.angle.default)
def angle(b: GraphBuilder, x: Value) -> Value:
    """Real inputs: pi for negative values, 0 otherwise, NaN propagates (CPU's angle_impl)."""
    comp, res = _unary_comp(x)
    xc = b.convert(x, comp)
    out = b.select(b.compare("lt", xc, _k(b, 0, xc)), _k(b, math.pi, xc), _k(b, 0, xc))
    if comp.is_floating_point:
        out = b.select(_isnan(b, xc), xc, out)
    return b.convert(out, res)


# -- modified Bessel functions I0, I1 (and exp(-|x|)-scaled) ---------------------------------

_SERIES_TERMS = 50     # |x| <= _SERIES_UNTIL: the power series, below double rounding there
_SERIES_UNTIL = 30.0
_ASYMPTOTIC_TERMS = 20  # beyond: Hankel's asymptotic expansion, below double rounding for x > 30


def _asymptotic_coefficients(order: int) -> list[float]:
    """c_k of I_order(x) ~ e^x / sqrt(2 pi x) * sum_k c_k / x^k (DLMF 10.40.1)."""
    mu, coef, out = 4 * order * order, 1.0, [1.0]
    for k in range(1, _ASYMPTOTIC_TERMS):
        coef *= -(mu - (2 * k - 1) ** 2) / (k * 8)
        out.append(coef)
    return out


def _bessel_i(b: GraphBuilder, x: Value, order: int, scaled: bool) -> Value:
    """I_order(x) for order 0 or 1 (times exp(-|x|) when scaled), x in float64: the power series
    sum_k (x^2/4)^k / (k! (k+order)!) (x/2)^order up to |x| = 30, the asymptotic expansion
    beyond it, both accurate to double rounding. CPU's kernels evaluate Cephes' Chebyshev fits
    in the input's dtype instead; in float64 the two agree to ~1.5e-15 relative, in float32
    ours is the closer one (special.i1: 0.2 ulp from exact where CPU is 7 ulps off)."""
    ax = b.abs(x)
    q = b.mul(b.mul(ax, ax), _k(b, 0.25, ax))
    term = _k(b, 1.0, ax)
    total = term
    for k in range(1, _SERIES_TERMS):
        term = b.mul(term, b.div(q, _k(b, float(k * (k + order)), ax)))
        total = b.add(total, term)
    if order == 1:
        total = b.mul(total, b.mul(ax, _k(b, 0.5, ax)))
    series = b.mul(total, b.exp(b.neg(ax))) if scaled else total
    # Asymptotic: sum_k c_k / x^k by Horner in 1/x, over sqrt(2 pi x), times e^x unless scaled.
    big = b.max(ax, _k(b, _SERIES_UNTIL, ax))  # keeps the unused branch finite
    inv = b.div(_k(b, 1.0, ax), big)
    acc = _k(b, 0.0, ax)
    for c in reversed(_asymptotic_coefficients(order)):
        acc = b.add(b.mul(acc, inv), _k(b, c, ax))
    asym = b.div(acc, b.sqrt(b.mul(big, _k(b, 2 * math.pi, ax))))
    if not scaled:
        asym = b.mul(asym, b.exp(big))
    out = b.select(b.compare("le", ax, _k(b, _SERIES_UNTIL, ax)), series, asym)
    # At +-inf ATen's kernels give 0 scaled and NaN unscaled (their e^x * c / sqrt(x) is inf / inf).
    out = b.select(b.compare("eq", ax, _k(b, math.inf, ax)), _k(b, 0.0 if scaled else math.nan, ax), out)
    out = b.select(_isnan(b, x), x, out)
    if order == 1:  # odd
        out = b.select(b.compare("lt", x, _k(b, 0, x)), b.neg(out), out)
    return out


def _bessel_lowering(order: int, scaled: bool):
    def lower(b: GraphBuilder, x: Value) -> Value:
        _, res = _unary_comp(x)
        return b.convert(_bessel_i(b, b.convert(x, torch.float64), order, scaled), res)
    return lower


register(aten.i0.default, prims.bessel_i0.default, aten.special_modified_bessel_i0.default)(_bessel_lowering(0, False))
register(aten.special_i0e.default, prims.bessel_i0e.default)(_bessel_lowering(0, True))
register(aten.special_i1.default, prims.bessel_i1.default, aten.special_modified_bessel_i1.default)(
    _bessel_lowering(1, False))
register(aten.special_i1e.default, prims.bessel_i1e.default)(_bessel_lowering(1, True))


# -- erfcx ----------------------------------------------------------------------------------

_ERFCX_SERIES_UNTIL = 2.0  # exp(x^2) (1 - erf(x)) below: erfc(2) = 4.7e-3 loses ~2 digits of 16
_ERFCX_FRACTION_TERMS = 64


def _erfcx(b: GraphBuilder, x: Value) -> Value:
    """exp(x^2) erfc(x) in float64. Below 2 (negative x included, where erfc is in (1, 2) and
    exp(x^2) overflows to inf as CPU's does) directly; from 2 on Laplace's continued fraction
    erfcx(x) = 1 / (sqrt(pi) (x + (1/2) / (x + 1 / (x + (3/2) / (x + ...))))), evaluated from
    its tail: 64 terms give double rounding there. CPU uses Faddeeva-package fits; the two
    agree to ~1e-15 relative."""
    direct = b.mul(b.exp(b.mul(x, x)), b.sub(_k(b, 1.0, x), b.erf(x)))
    big = b.max(x, _k(b, _ERFCX_SERIES_UNTIL, x))  # keeps the unused branch finite
    tail = big
    for k in range(_ERFCX_FRACTION_TERMS, 0, -1):
        tail = b.add(big, b.div(_k(b, k / 2, x), tail))
    fraction = b.div(_k(b, 1.0 / math.sqrt(math.pi), x), tail)
    out = b.select(b.compare("lt", x, _k(b, _ERFCX_SERIES_UNTIL, x)), direct, fraction)
    out = b.select(b.compare("eq", x, _k(b, math.inf, x)), _k(b, 0.0, x), out)
    return b.select(_isnan(b, x), x, out)


@register(aten.special_erfcx.default, prims.erfcx.default)
def erfcx(b: GraphBuilder, x: Value) -> Value:
    _, res = _unary_comp(x)
    return b.convert(_erfcx(b, b.convert(x, torch.float64)), res)


def _ndtri(b: GraphBuilder, p: Value) -> Value:
    """The standard normal quantile in float64, by the lower tail q = min(p, 1 - p): Abramowitz
    and Stegun 26.2.23 (|error| < 4.5e-4) refined by three Newton steps on Phi(z) = q, with
    Phi(z) = erfcx(-z / sqrt 2) exp(-z^2 / 2) / 2 accurate far into the tail (q down to the
    smallest doubles), so the step is sqrt(2 pi) (erfcx(-z / sqrt 2) / 2 - exp(log q + z^2 / 2))."""
    half = _k(b, 0.5, p)
    upper = b.compare("gt", p, half)
    q = b.select(upper, b.sub(_k(b, 1.0, p), p), p)
    q_safe = b.min(b.max(q, _k(b, 5e-324, p)), half)  # keeps unused lanes finite
    log_q = b.log(q_safe)
    t = b.sqrt(b.mul(_k(b, -2.0, p), log_q))
    num = b.add(_k(b, 2.515517, p), b.mul(t, b.add(_k(b, 0.802853, p), b.mul(t, _k(b, 0.010328, p)))))
    den = b.add(_k(b, 1.0, p), b.mul(t, b.add(_k(b, 1.432788, p), b.mul(t, b.add(
        _k(b, 0.189269, p), b.mul(t, _k(b, 0.001308, p)))))))
    z = b.neg(b.sub(t, b.div(num, den)))
    for _ in range(3):
        scaled_tail = b.mul(_erfcx(b, b.mul(z, _k(b, -1 / math.sqrt(2), p))), half)
        step = b.sub(scaled_tail, b.exp(b.add(log_q, b.mul(b.mul(z, z), half))))
        z = b.sub(z, b.mul(step, _k(b, math.sqrt(2 * math.pi), p)))
    z = b.select(upper, b.neg(z), z)
    z = b.select(b.compare("eq", q, _k(b, 0.0, p)), b.select(upper, _k(b, math.inf, p), _k(b, -math.inf, p)), z)
    z = b.select(b.compare("eq", p, half), _k(b, 0.0, p), z)
    outside = b.binary("or", b.compare("lt", p, _k(b, 0.0, p)), b.compare("gt", p, _k(b, 1.0, p)))
    return b.select(b.binary("or", outside, _isnan(b, p)), _k(b, math.nan, p), z)


@register(aten.special_ndtri.default, prims.ndtri.default)
def ndtri(b: GraphBuilder, p: Value) -> Value:
    _, res = _unary_comp(p)
    return b.convert(_ndtri(b, b.convert(p, torch.float64)), res)


# -- polygamma / zeta --------------------------------------------------------------------------

def _trigamma(b: GraphBuilder, x: Value) -> Value:
    """ATen's calc_trigamma: reflection below 0.5, six recurrence steps, asymptotic series."""
    one = _k(b, 1, x)
    neg = b.compare("lt", x, _k(b, 0.5, x))
    s = b.sin(b.mul(_k(b, math.pi, x), x))
    refl = b.neg(b.div(_k(b, math.pi * math.pi, x), b.mul(s, s)))
    result = b.select(neg, refl, _k(b, 0, x))
    sign = b.select(neg, _k(b, -1, x), one)
    x = b.select(neg, b.sub(one, x), x)
    for _ in range(6):
        result = b.add(result, b.div(one, b.mul(x, x)))
        x = b.add(x, one)
    ixx = b.div(one, b.mul(x, x))
    inner = b.sub(_k(b, 1 / 30, x), b.mul(ixx, _k(b, 1 / 42, x)))
    inner = b.sub(_k(b, 1 / 6, x), b.mul(ixx, inner))
    series = b.add(b.add(one, b.div(one, b.mul(_k(b, 2, x), x))), b.mul(ixx, inner))
    result = b.add(result, b.div(series, x))
    return b.mul(sign, result)


_ZETA_A = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
           -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
           1.8152105401943546773e17, -7.1661652561756670113e18)


def _zeta(b: GraphBuilder, x: Value, q: Value, extra_terms: int = 24) -> Value:
    """Hurwitz zeta(x, q) as Cephes/ATen compute it (Euler-Maclaurin summation).

    The direct sum runs while i < 9 or a <= 9; it is unrolled to 9 + extra_terms steps, each
    masked by that condition, so q >= -extra_terms is covered exactly. ATen's early exits on
    convergence (|term/sum| < 1e-16) only skip terms below rounding, so they are not modelled."""
    one, zero = _k(b, 1, x), _k(b, 0, x)
    a = q
    s = b.pow(q, b.neg(x))
    bb = zero
    for i in range(9 + extra_terms):
        active = b.compare("le", a, _k(b, 9, x)) if i >= 9 else None
        a_new = b.add(a, one)
        b_new = b.pow(a_new, b.neg(x))
        if active is None:
            a, bb, s = a_new, b_new, b.add(s, b_new)
        else:
            a = b.select(active, a_new, a)
            bb = b.select(active, b_new, bb)
            s = b.select(active, b.add(s, b_new), s)
    w = a
    s = b.add(s, b.div(b.mul(bb, w), b.sub(x, one)))
    s = b.sub(s, b.mul(_k(b, 0.5, x), bb))
    aa = one
    k = zero
    for coef in _ZETA_A:
        aa = b.mul(aa, b.add(x, k))
        bb = b.div(bb, w)
        t = b.div(b.mul(aa, bb), _k(b, coef, x))
        s = b.add(s, t)
        k = b.add(k, one)
        aa = b.mul(aa, b.add(x, k))
        bb = b.div(bb, w)
        k = b.add(k, one)
    # Domain: x == 1 -> inf; x < 1 -> NaN; q <= 0 integer -> inf; q <= 0 with x non-integer -> NaN.
    inf, nan = _k(b, math.inf, x), _k(b, math.nan, x)
    q_le0 = b.compare("le", q, zero)
    q_int = b.compare("eq", q, b.floor(q))
    x_int = b.compare("eq", x, b.floor(x))
    s = b.select(b.binary("and", q_le0, b.unary("not", x_int)), nan, s)
    s = b.select(b.binary("and", q_le0, q_int), inf, s)
    s = b.select(b.compare("lt", x, one), nan, s)
    s = b.select(b.compare("eq", x, one), inf, s)
    return s


@register(prims.zeta.default, aten.special_zeta.default)
def zeta(b: GraphBuilder, x: Value, q: Value) -> Value:
    comp, res = result_dtypes(x, q, kind=Kind.INT_TO_FLOAT)
    comp = opmath(res)
    shape = broadcast_shapes(x.shape, q.shape)
    xs = [b.broadcast_in_dim(b.convert(v, comp), shape, tuple(range(len(shape) - v.rank, len(shape))))
          if v.shape != shape else b.convert(v, comp) for v in (x, q)]
    return b.convert(_zeta(b, xs[0], xs[1]), res)


@register(aten.polygamma.default)
def polygamma(b: GraphBuilder, n: int, x: Value) -> Value:
    check(n >= 0, "polygamma(n, x) does not support negative n.")
    comp, res = _unary_comp(x)
    xc = b.convert(x, comp)
    if n == 0:
        out = b.digamma(xc)
    elif n == 1:
        out = _trigamma(b, xc)
    else:  # (-1)^(n+1) * n! * zeta(n + 1, x)
        fact = math.exp(math.lgamma(n + 1))
        out = b.mul(_k(b, (1.0 if n % 2 else -1.0) * fact, xc), _zeta(b, _k(b, n + 1, xc), xc))
    return b.convert(out, res)


# -- cummax / cummin ---------------------------------------------------------------------------

def _cum_extreme(b: GraphBuilder, x: Value, dim: int, kind: str) -> tuple[Value, Value]:
    """Values by an inclusive scan; the index is the last position whose element equals the running
    extreme (CPU updates on x >= out / x <= out, and on every NaN once NaN is reached)."""
    if x.rank == 0:
        return x, b.full(0, torch.int64, ())
    d = canonical_dim(dim, x.rank)
    xs = b.convert(x, torch.uint8) if x.dtype == torch.bool else x
    vals = b.scan(xs, kind, d)
    hit = b.compare("eq", xs, vals)
    if xs.dtype.is_floating_point:
        hit = b.binary("or", hit, _isnan(b, xs))
    pos = b.iota(torch.int64, x.shape, d)
    idx = b.scan(b.select(hit, pos, b.full(-1, torch.int64, x.shape)), "max", d)
    return b.convert(vals, x.dtype), idx


@register(aten._cummax_helper.default)
def cummax_helper(b: GraphBuilder, x: Value, values: Value, indices: Value, dim: int):
    return _cum_extreme(b, x, dim, "max")


@register(aten._cummin_helper.default)
def cummin_helper(b: GraphBuilder, x: Value, values: Value, indices: Value, dim: int):
    return _cum_extreme(b, x, dim, "min")


# -- put ---------------------------------------------------------------------------------------

@register(aten.put.default)
def put(b: GraphBuilder, x: Value, index: Value, source: Value, accumulate: bool = False) -> Value:
    check(index.dtype == torch.int64, f"put_(): Expected a long tensor for index, but got {index.dtype}")
    check(source.dtype == x.dtype, f"put_(): self and source expected to have the same dtype, but got "
          f"self.dtype = {x.dtype} and source.dtype = {source.dtype}")
    check(index.numel() == source.numel(), f"put_(): Expected source and index to have the same number of "
          f"elements, but got source.numel() = {source.numel()}, index.numel() = {index.numel()}")
    n = x.numel()
    if index.numel() == 0:
        return x
    check(n > 0, "put_(): Tried to put elements into an empty tensor")
    m = index.numel()
    raw = b.reshape(index, (m,))
    zero, nn = b.full(0, torch.int64, (m,)), b.full(n, torch.int64, (m,))
    idx = b.select(b.compare("lt", raw, zero), b.add(raw, nn), raw)
    ok = b.binary("and", b.compare("ge", idx, zero), b.compare("lt", idx, nn))
    # Out of range: the index as written (still out of range), an IndexError naming it at run time.
    idx = b.select(ok, idx, raw)
    flat = b.reshape(x, (n,))
    src = b.reshape(source, (m,))
    if accumulate and x.dtype == torch.bool:
        out = b.scatter(flat, idx, src, 0, "max")
    else:
        out = b.scatter(flat, idx, src, 0, "add" if accumulate else "replace")
    return b.reshape(out, x.shape)


# -- tril_indices / triu_indices ---------------------------------------------------------------

def _tri_indices(b: GraphBuilder, row: int, col: int, offset: int, lower: bool, dtype: torch.dtype | None) -> Value:
    """[2, N] coordinates of the kept triangle in row-major order: mask a [row, col] iota grid,
    number the kept cells with a prefix sum, and scatter their coordinates to those slots."""
    check(row >= 0, f"row must be non-negative, got{row}")
    check(col >= 0, f"col must be non-negative, got{col}")
    if isinstance(dtype, int):  # a schema default (ScalarType code) rather than a torch.dtype
        from .bridge import _SCALAR_TYPES
        dtype = _SCALAR_TYPES[dtype]
    dtype = dtype or torch.int64
    if lower:
        count = sum(max(0, min(col, r + offset + 1)) for r in range(row))
    else:
        count = sum(max(0, col - max(0, r + offset)) for r in range(row))
    if count == 0 or row * col == 0:
        return b.full(0, dtype, (2, count))
    shape = (row, col)
    r = b.iota(torch.int64, shape, 0)
    c = b.iota(torch.int64, shape, 1)
    rel = b.sub(c, r)
    off = b.full(offset, torch.int64, shape)
    keep = b.compare("le", rel, off) if lower else b.compare("ge", rel, off)
    flat_keep = b.reshape(keep, (row * col,))
    slot = b.sub(b.scan(b.convert(flat_keep, torch.int64), "sum", 0), b.full(1, torch.int64, (row * col,)))
    slot = b.select(flat_keep, slot, b.full(count, torch.int64, (row * col,)))  # dropped cells -> spare slot
    outs = []
    for coord in (r, c):
        dst = b.full(0, torch.int64, (count + 1,))
        placed = b.scatter(dst, slot, b.reshape(coord, (row * col,)), 0, "replace")
        outs.append(b.reshape(b.slice(placed, (0,), (count,)), (1, count)))
    return b.convert(b.concatenate(outs, 0), dtype)


@register(aten.tril_indices.default)
def tril_indices(b: GraphBuilder, row: int, col: int, offset: int = 0, dtype=None, layout=None, device=None,
                 pin_memory=None) -> Value:
    return _tri_indices(b, row, col, offset, True, dtype)


@register(aten.triu_indices.default)
def triu_indices(b: GraphBuilder, row: int, col: int, offset: int = 0, dtype=None, layout=None, device=None,
                 pin_memory=None) -> Value:
    return _tri_indices(b, row, col, offset, False, dtype)


# -- cross -------------------------------------------------------------------------------------

@register(aten.linalg_cross.default)
def linalg_cross(b: GraphBuilder, x: Value, y: Value, dim: int = -1) -> Value:
    """r_i = x_{i+1} y_{i+2} - x_{i+2} y_{i+1} along dim. Like CPU's cross kernel, half types round
    each product and the difference to their own dtype (no float32 accumulation across them)."""
    check(x.rank == y.rank, "linalg.cross: inputs must have the same number of dimensions.")
    dtype = result_dtypes(x, y, kind=Kind.NO_OPMATH)[1]
    shape = broadcast_shapes(x.shape, y.shape)
    d = canonical_dim(dim, len(shape))
    check(x.shape[d] == 3 and y.shape[d] == 3, f"linalg.cross: inputs dimension {dim} must have length 3. "
          f"Got {x.shape[d]} and {y.shape[d]}")
    from .core import broadcast_to
    xs, ys = (broadcast_to(b, b.convert(v, dtype), shape) for v in (x, y))
    comp = opmath(dtype)

    def comp_of(v: Value, i: int) -> Value:
        lo = [0] * len(shape)
        hi = list(shape)
        lo[d], hi[d] = i, i + 1
        return b.convert(b.slice(v, lo, hi), comp)

    def rnd(v: Value) -> Value:
        return b.convert(b.convert(v, dtype), comp)

    parts = []
    for i in range(3):
        j, k = (i + 1) % 3, (i + 2) % 3
        p1 = rnd(b.mul(comp_of(xs, j), comp_of(ys, k)))
        p2 = rnd(b.mul(comp_of(xs, k), comp_of(ys, j)))
        parts.append(b.convert(b.sub(p1, p2), dtype))
    return b.concatenate(parts, d)
