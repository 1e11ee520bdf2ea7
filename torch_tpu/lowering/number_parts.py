"""Lowerings: integer gcd and lcm, frexp and nextafter.

Design: the IR has no loops and no bitcast, so each is written in arithmetic the IR has.
- gcd is Euclid's algorithm unrolled to its worst case for the dtype (consecutive Fibonacci
  numbers need the most steps: 12 for int8 up to 92 for int64), each step (a, b) <- (b, a mod b)
  applied only where b is still non-zero.
- frexp takes the exponent from floor(log2|x|) + 1 and corrects it by one where log2 rounded
  across a power of two, so the mantissa lands in [0.5, 1) exactly (a division by a power of two
  is exact); zeros, infinities and NaNs give CPU's (x, 0).
- nextafter steps by one unit in the last place, which frexp's exponent gives: 2^(e - p) for a
  p-bit significand, half that when stepping toward zero from an exact power of two, and the
  smallest subnormal below the normal range.
"""

from __future__ import annotations

import torch

from ..ir.builder import GraphBuilder, Value
from .apply import call
from .nn import check
from .registry import register

aten = torch.ops.aten
prims = torch.ops.prims

# Euclid's worst case per integer width: the number of steps for the largest consecutive
# Fibonacci pair that fits.
_EUCLID_STEPS = {torch.uint8: 12, torch.int8: 12, torch.int16: 23, torch.int32: 46, torch.int64: 92}


@register(aten.gcd.default, prims.gcd.default)
def gcd(b: GraphBuilder, x: Value, y: Value) -> Value:
    check(x.dtype in _EUCLID_STEPS, f"\"gcd_cpu\" not implemented for '{x.dtype}'", NotImplementedError)
    check(x.dtype == y.dtype, "gcd: expected both operands to have the same integer dtype")
    shape = list(torch.broadcast_shapes(tuple(x.shape), tuple(y.shape)))
    a = call(b, aten.abs.default, call(b, aten.expand.default, x, shape))
    c = call(b, aten.abs.default, call(b, aten.expand.default, y, shape))
    zero, one = b.full(0, x.dtype, shape), b.full(1, x.dtype, shape)
    for _ in range(_EUCLID_STEPS[x.dtype]):
        live = call(b, aten.ne.Scalar, c, 0)
        rem = call(b, aten.remainder.Tensor, a, call(b, aten.where.self, live, c, one))
        a, c = call(b, aten.where.self, live, c, a), call(b, aten.where.self, live, rem, zero)
    return a


def _scaled(b: GraphBuilder, x: Value, e: Value) -> Value:
    """x * 2^-e, exact: in two halves, since 2^e alone overflows for the largest finite x."""
    half = call(b, aten.floor.default, call(b, aten.mul.Tensor, e, 0.5))
    x = call(b, aten.mul.Tensor, x, call(b, aten.exp2.default, call(b, aten.neg.default, half)))
    return call(b, aten.mul.Tensor, x, call(b, aten.exp2.default, call(b, aten.sub.Tensor, half, e)))


def _exponent(b: GraphBuilder, ax: Value) -> Value:
    """e with 2^(e-1) <= ax < 2^e for finite ax > 0, as a float tensor of ax's dtype."""
    e = call(b, aten.add.Tensor, call(b, aten.floor.default, call(b, aten.log2.default, ax)), 1.0)
    m = _scaled(b, ax, e)
    e = call(b, aten.where.self, call(b, aten.ge.Scalar, m, 1.0), call(b, aten.add.Tensor, e, 1.0), e)
    m = _scaled(b, ax, e)
    return call(b, aten.where.self, call(b, aten.lt.Scalar, m, 0.5), call(b, aten.sub.Tensor, e, 1.0), e)


def _finite_nonzero(b: GraphBuilder, x: Value) -> Value:
    return call(b, aten.logical_and.default, call(b, aten.isfinite.default, x), call(b, aten.ne.Scalar, x, 0))


@register(aten.frexp.Tensor, prims.frexp.default)
def frexp(b: GraphBuilder, x: Value) -> tuple[Value, Value]:
    check(x.dtype.is_floating_point, "torch.frexp() only supports floating-point dtypes", RuntimeError)
    # computed in float32 at least: log2 and exp2 of a half's exponents stay exact there
    comp = torch.float64 if x.dtype == torch.float64 else torch.float32
    xc = b.convert(x, comp)
    ok = _finite_nonzero(b, xc)
    ax = call(b, aten.where.self, ok, call(b, aten.abs.default, xc), b.full(1.0, comp, x.shape))
    e = _exponent(b, ax)
    mantissa = call(b, aten.where.self, ok, _scaled(b, xc, e), xc)
    exponent = call(b, aten.where.self, ok, e, b.full(0.0, comp, x.shape))
    return b.convert(mantissa, x.dtype), b.convert(exponent, torch.int32)


@register(aten.nextafter.default, prims.nextafter.default)
def nextafter(b: GraphBuilder, x: Value, y: Value) -> Value:
    check(x.dtype == y.dtype and x.dtype.is_floating_point,
          "nextafter: expected both operands to have the same floating-point dtype", RuntimeError)
    fi = torch.finfo(x.dtype)
    bits = {torch.float64: 53, torch.float32: 24, torch.bfloat16: 8, torch.float16: 11}[x.dtype]
    comp = torch.float64 if x.dtype == torch.float64 else torch.float32
    shape = list(torch.broadcast_shapes(tuple(x.shape), tuple(y.shape)))
    xc = call(b, aten.expand.default, b.convert(x, comp), shape)
    yc = call(b, aten.expand.default, b.convert(y, comp), shape)
    ax = call(b, aten.abs.default, xc)
    normal = call(b, aten.logical_and.default, call(b, aten.isfinite.default, xc), call(b, aten.ge.Scalar, ax, fi.tiny))
    e = _exponent(b, call(b, aten.where.self, normal, ax, b.full(1.0, comp, shape)))
    ulp = call(b, aten.exp2.default, call(b, aten.sub.Tensor, e, float(bits)))
    # toward zero from an exact power of two the spacing below is half the spacing above
    power = call(b, aten.eq.Tensor, ax, call(b, aten.exp2.default, call(b, aten.sub.Tensor, e, 1.0)))
    # (a sign test, not x * (y - x) < 0, which underflows to 0 for tiny x)
    toward_zero = call(b, aten.logical_or.default,
                       call(b, aten.logical_and.default, call(b, aten.gt.Scalar, xc, 0), call(b, aten.lt.Tensor, yc, xc)),
                       call(b, aten.logical_and.default, call(b, aten.lt.Scalar, xc, 0), call(b, aten.gt.Tensor, yc, xc)))
    ulp = call(b, aten.where.self, call(b, aten.logical_and.default, power, toward_zero),
               call(b, aten.mul.Tensor, ulp, 0.5), ulp)
    # the subnormal range (and zero) is evenly spaced by the smallest subnormal, also just below
    # the smallest normal number
    smallest = float(fi.smallest_normal) * 2.0 ** (1 - bits)
    ulp = call(b, aten.where.self, normal, call(b, aten.clamp_min.default, ulp, smallest), b.full(smallest, comp, shape))
    up = call(b, aten.gt.Tensor, yc, xc)
    step = call(b, aten.where.self, up, ulp, call(b, aten.neg.default, ulp))
    out = call(b, aten.add.Tensor, xc, step)
    # a step from +-smallest to zero keeps x's sign (-smallest + smallest would give +0.0)
    out = call(b, aten.where.self, call(b, aten.eq.Scalar, out, 0), call(b, aten.copysign.Tensor, out, xc), out)
    out = call(b, aten.where.self, call(b, aten.eq.Tensor, xc, yc), yc, out)  # equal: y (also -0.0 vs 0.0)
    # from +-inf toward finite values: the largest finite number
    inf = call(b, aten.isinf.default, xc)
    out = call(b, aten.where.self, call(b, aten.logical_and.default, inf, call(b, aten.ne.Tensor, xc, yc)),
               call(b, aten.mul.Tensor, call(b, aten.sign.default, xc), float(fi.max)), out)
    nan = call(b, aten.logical_or.default, call(b, aten.isnan.default, xc), call(b, aten.isnan.default, yc))
    out = call(b, aten.where.self, nan, call(b, aten.add.Tensor, xc, yc), out)  # NaN, with C's payload sign
    return b.convert(out, x.dtype)


@register(aten.lcm.default)
def lcm(b: GraphBuilder, x: Value, y: Value) -> Value:
    """|x / gcd * y| in the integer dtype (0 where the gcd is 0), as ATen: the division first
    keeps the intermediate in range whenever the result is."""
    g = gcd(b, x, y)
    zero = call(b, aten.eq.Scalar, g, 0)
    safe = call(b, aten.where.self, zero, b.full(1, g.dtype, g.shape), g)
    q = call(b, aten.div.Tensor_mode, x, safe, rounding_mode="trunc")
    # C++ promotes narrow integers to int before the product and abs, then narrows (wrapping)
    wide = torch.int32 if g.dtype in (torch.uint8, torch.int8, torch.int16) else g.dtype
    out = call(b, aten.abs.default, call(b, aten.mul.Tensor, b.convert(q, wide), b.convert(y, wide)))
    return call(b, aten.where.self, zero, b.full(0, g.dtype, g.shape), b.convert(out, g.dtype))
