"""Lowerings: the regularized incomplete gamma functions P(a, x) (igamma, special.gammainc) and
Q(a, x) = 1 - P(a, x) (igammac, special.gammaincc).

Design: the IR has no loops, so both classic expansions are unrolled to a fixed depth and the
one that converges fast for an element is selected per element (torch.where-style select):
- below x < a + 1, the power series P = f * sum_n x^n / (a (a+1) ... (a+n)), whose terms shrink
  by x / (a + n) < 1 from the first on;
- from x >= a + 1 on, Legendre's continued fraction
  Q = f / (x + 1 - a - 1 (1 - a) / (x + 3 - a - 2 (2 - a) / (x + 5 - a - ...))).
Both share the prefactor f = x^a e^-x / Gamma(a), formed in logs (exp(a log x - x - lgamma(a)),
with Stirling's series substituted for lgamma from a >= 20 so the large terms cancel by hand; see
_log_prefactor). The function the expansion does not give directly is 1 minus the other: each
is only subtracted from 1 where it is at most about 1/2 (P below the mean a, Q above it), so the
difference keeps its relative accuracy. The exception is Q for a < 1 on the series side, where
P is near 1: there Q comes from the termwise-integrated series of gamma(a, x) with -expm1.

The continued fraction is evaluated backward from a fixed tail (the depth is fixed anyway, so
the forward modified Lentz recurrence, which exists to stop early, buys nothing here and needs
its tiny-denominator guard). Depths: both expansions need O(sqrt(a)) terms when x is near a
(the series' terms fall like exp(-n^2 / 2a) there), so the fixed depths below set the accurate
range. Measured against mpmath at 30 digits over a = 1e-3 .. 1e5 and x from 1e-4 to a + 10 sqrt(a):
float64 P and Q are within 5e-14 relative for a <= 1000 and 1e-12 for a <= 3000 at every x (CPU's
own kernel is ~1.5e-9 off for a > 20 with x near a, its asymptotic expansion; for a = 1e-3 both
are 2.4e-13 off in tiny Q); float32 within 2e-5 up to a = 1000 and 5e-5 at a = 3000 (CPU: 3e-5).
Beyond a ~ 5000 with |x - a| below a few sqrt(a) the truncated
expansions lose accuracy (7e-5 at a = 1e4, useless at a = 1e5); away from x ~ a they stay
accurate at any a. A uniform (Temme) asymptotic expansion for that corner is not done.

Special values follow CPU's kernel (ATen calc_igamma / calc_igammac), tested in its order: a or
x negative give NaN; a = 0 gives P = 1 (Q = 0) for x > 0, else NaN; x = 0 gives P = 0 (Q = 1);
a = inf gives NaN at x = inf, else P = 0 (Q = 1); x = inf gives P = 1 (Q = 0); other NaNs
propagate. (So x = 0 with a NaN a gives 0, as on CPU.)
Half types compute in float32 and convert, like CPU.
"""

from __future__ import annotations

import math

import torch

from ..ir.builder import GraphBuilder, Value
from .core import broadcast_shapes, broadcast_to, opmath, result_dtypes
from .nn import check
from .registry import register

aten = torch.ops.aten
prims = torch.ops.prims

_SERIES_TERMS = 400    # power series depth (x < a + 1)
_FRACTION_TERMS = 200  # continued fraction depth (x >= a + 1), evaluated from its tail
_SMALL_A_TERMS = 30    # Q's series for a < 1, x < 2: 2^30 / 30! is below double rounding
_STIRLING_FROM = 20.0
# Bernoulli numbers B_2k as (numerator, denominator, k), k = 1..5
_BERNOULLI = ((1.0, 6.0, 1), (-1.0, 30.0, 2), (1.0, 42.0, 3), (-1.0, 30.0, 4), (5.0, 66.0, 5))


def _k(b: GraphBuilder, value: float, like: Value) -> Value:
    """A constant of like's dtype and shape."""
    return b.full(value, like.dtype, like.shape)


def _log_prefactor(b: GraphBuilder, a: Value, x: Value) -> Value:
    """log(x^a e^-x / Gamma(a)) for a, x > 0 finite.

    Directly, a log x - x - lgamma(a) cancels: near x ~ a its terms are ~a log a while the
    result is ~-log(a)/2, so float32 would lose ~log2(a) bits (1e-4 absolute at a ~ 1000). From
    a >= _STIRLING_FROM on, Stirling's series for lgamma is substituted by hand, leaving
    -a (d - log1p(d)) + (log(a) - log(2 pi)) / 2 - s(a) with d = x/a - 1, whose terms are small
    where the result is; s(a) = lgamma(a) - ((a - 1/2) log a - a + log(2 pi) / 2) is Stirling's
    remainder, from its Bernoulli-number series (5 terms: below 1e-17 for a >= 20)."""
    direct = b.sub(b.sub(b.mul(a, b.log(x)), x), b.unary("lgamma", a))
    big = b.max(a, _k(b, _STIRLING_FROM, a))  # keeps the unused lanes in the series' range
    d = b.sub(b.div(x, big), _k(b, 1.0, a))
    gap = b.sub(d, b.unary("log1p", d))  # d - log(1 + d) >= 0
    inv = b.div(_k(b, 1.0, a), big)
    inv2 = b.mul(inv, inv)
    # s(a) = sum_k B_2k / (2k (2k - 1) a^(2k - 1)), by Horner in 1/a^2
    rem = _k(b, 0.0, a)
    for bern_num, bern_den, k in reversed(_BERNOULLI):
        rem = b.add(b.mul(rem, inv2), _k(b, bern_num / (bern_den * 2 * k * (2 * k - 1)), a))
    rem = b.mul(rem, inv)
    half_log = b.mul(b.sub(b.log(big), _k(b, math.log(2 * math.pi), a)), _k(b, 0.5, a))
    stirling = b.sub(b.sub(half_log, b.mul(big, gap)), rem)
    return b.select(b.compare("ge", a, _k(b, _STIRLING_FROM, a)), stirling, direct)


def _lower_upper(b: GraphBuilder, a: Value, x: Value) -> tuple[Value, Value]:
    """(P, Q) for a > 0 finite and x > 0 finite (other lanes hold finite garbage)."""
    one = _k(b, 1.0, a)
    f = b.exp(_log_prefactor(b, a, x))
    use_series = b.compare("lt", x, b.add(a, one))

    # Power series. Lanes that use the fraction get x clamped below a + 1 so their (unused)
    # terms stay bounded.
    xs = b.select(use_series, x, a)
    term = one
    total = one
    for n in range(1, _SERIES_TERMS):
        term = b.mul(term, b.div(xs, b.add(a, _k(b, float(n), a))))
        total = b.add(total, term)
    p_series = b.div(b.mul(f, total), a)

    # Continued fraction from the tail: t_{n-1} = b_{n-1} - n (n - a) / t_n with
    # b_n = x + 2n + 1 - a. Series lanes get x raised to a + 1 so the fraction is well defined.
    xf = b.select(use_series, b.add(a, one), x)
    base = b.sub(xf, a)  # x - a >= 1 on the lanes that use it
    t = b.add(base, _k(b, float(2 * _FRACTION_TERMS + 1), a))
    for n in range(_FRACTION_TERMS, 0, -1):
        num = b.mul(_k(b, float(n), a), b.sub(_k(b, float(n), a), a))
        t = b.sub(b.add(base, _k(b, float(2 * n - 1), a)), b.div(num, t))
    q_fraction = b.div(f, t)

    p = b.select(use_series, p_series, b.sub(one, q_fraction))
    q = b.select(use_series, b.sub(one, p_series), q_fraction)
    # For a < 1 (so x < 2 on series lanes) P is near 1 and 1 - P would cancel; there Q comes
    # from the termwise-integrated series gamma(a, x) = sum_k (-1)^k x^(a+k) / (k! (a+k)):
    # Q = -expm1(L) - u a T with u = exp(L), L = a log x - lgamma(a + 1),
    # T = sum_{k>=1} (-x)^k / (k! (a + k)), which keeps Q's relative accuracy.
    small_a = b.binary("and", use_series, b.compare("lt", a, one))
    a1 = b.min(a, one)
    xt = b.min(xs, _k(b, 2.0, a))
    log_u = b.sub(b.mul(a1, b.log(xt)), b.unary("lgamma", b.add(a1, one)))
    power = one
    tail = _k(b, 0.0, a)
    for k in range(1, _SMALL_A_TERMS + 1):
        power = b.mul(power, b.div(b.neg(xt), _k(b, float(k), a)))
        tail = b.add(tail, b.div(power, b.add(a1, _k(b, float(k), a))))
    q_small = b.sub(b.neg(b.expm1(log_u)), b.mul(b.mul(b.exp(log_u), a1), tail))
    q = b.select(small_a, q_small, q)
    # rounding can push the directly computed one a hair above 1
    zero = _k(b, 0.0, a)
    p = b.min(b.max(p, zero), one)
    q = b.min(b.max(q, zero), one)
    return p, q


def _igamma(b: GraphBuilder, a: Value, x: Value, upper: bool) -> Value:
    _, res = result_dtypes(a, x)
    check(res.is_floating_point, f"\"{'igammac' if upper else 'igamma'}_cpu\" not implemented for "
          f"'{str(res).replace('torch.', '').capitalize()}'", NotImplementedError)
    comp = opmath(res)
    shape = list(broadcast_shapes(a.shape, x.shape))
    a = broadcast_to(b, b.convert(a, comp), shape)
    x = broadcast_to(b, b.convert(x, comp), shape)
    zero, one, nan, inf = _k(b, 0.0, a), _k(b, 1.0, a), _k(b, math.nan, a), _k(b, math.inf, a)
    regular = b.binary("and", b.binary("and", b.compare("gt", a, zero), b.compare("gt", x, zero)),
                       b.binary("and", b.compare("lt", a, inf), b.compare("lt", x, inf)))
    # the expansions only ever see a regular (a, x); 1 stands in elsewhere (NaN lanes included:
    # they are not regular, and their NaN is put back below unless a rule before it applies)
    p, q = _lower_upper(b, b.select(regular, a, one), b.select(regular, x, one))
    out = b.select(regular, q if upper else p, nan)
    lo, hi = (one, zero) if upper else (zero, one)  # (the value "P = 0", the value "P = 1")
    # CPU's kernel tests these in order, first match wins, and NaN fails every comparison (so,
    # e.g., x = 0 gives P = 0 even for a NaN a); applied here from the last test to the first.
    x_inf = b.compare("eq", x, inf)
    out = b.select(x_inf, hi, out)
    out = b.select(b.compare("eq", a, inf), b.select(x_inf, nan, lo), out)
    out = b.select(b.compare("eq", x, zero), lo, out)
    out = b.select(b.compare("eq", a, zero), b.select(b.compare("gt", x, zero), hi, nan), out)
    out = b.select(b.binary("or", b.compare("lt", a, zero), b.compare("lt", x, zero)), nan, out)
    return b.convert(out, res)


@register(aten.igamma.default, prims.igamma.default)
def igamma(b: GraphBuilder, a: Value, x: Value) -> Value:
    """The regularized lower incomplete gamma function P(a, x)."""
    return _igamma(b, a, x, upper=False)


@register(aten.igammac.default, prims.igammac.default)
def igammac(b: GraphBuilder, a: Value, x: Value) -> Value:
    """The regularized upper incomplete gamma function Q(a, x)."""
    return _igamma(b, a, x, upper=True)
