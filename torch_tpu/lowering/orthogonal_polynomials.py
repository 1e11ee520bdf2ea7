"""Lowerings: the torch.special orthogonal polynomials P_n(x).

Chebyshev T/U/V/W and their shifted forms (on [0, 1]), Hermite H/He, Laguerre L and Legendre P.
Each follows the CPU kernel's algorithm (ATen's Math.h) step by step in the result dtype: the
recurrences agree with CPU to the last bit, the closed forms to the last bits of cos / acos.

- n is cast to the common dtype of (x, n) and truncated toward zero, as CPU's static_cast<int64_t>;
  n < 0, and n that CPU's cast cannot represent (NaN, +-inf, >= 2^63, which x86 turns into
  INT64_MIN), give 0.
- CPU's shortcuts are kept: |x| == 1 for the Chebyshev and Legendre polynomials (x == 0 or 1 for the
  shifted Chebyshev ones), x == 0 for Laguerre, and the trigonometric closed forms CPU uses for
  Chebyshev polynomials when |x| < 1 and n is above a small threshold (cos(n acos x) and friends).
  Those need no loop, so they hold for every n.
- Otherwise the three-term recurrence. The IR has no loops or data-dependent control flow, so the
  recurrence is unrolled to a static cap of _MAX_DEGREE (128) degrees, and each step is applied
  (by a select) only to the elements whose degree still needs it. Elements whose degree is above
  the cap and which need the recurrence get NaN, never a plausible wrong number. CPU computes
  those (its loop has no bound) except for Hermite, where it returns NaN itself above 128 in
  float32 (so float32 Hermite agrees exactly) and above 512 in float64 (so float64 Hermite degrees
  129..512 are NaN here but finite on CPU).

Why 128: the unrolled graph grows linearly with the cap (a select pair and one rounded-once step
per degree, about 10 ops in float32 and 25 in float64), so the cap bounds the program's size and
compile time; 128 is CPU's own float32 Hermite limit; outside [-1, 1] most families overflow
float32 well before it; and inside [-1, 1] the Chebyshev polynomials take the closed forms, which
have no cap. What the cap does cost: Hermite, Laguerre and Legendre of degree > 128 (and Chebyshev
of degree > 128 for |x| >= 1 off the endpoints) are NaN, where CPU returns a number.

Only the Tensor-Tensor overloads need lowerings: the x_scalar / n_scalar overloads are ATen
composites that wrap the scalar into a tensor and call the .default overload. Integer and bool
inputs promote to the default float dtype (as on CPU); half types are rejected as CPU does.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..ir.builder import GraphBuilder, Value
from .apply import call
from .core import Kind, result_dtypes
from .nn import check
from .registry import register

aten = torch.ops.aten

# The largest degree the unrolled recurrence computes; above it the recurrence's elements are NaN.
_MAX_DEGREE = 128

_DTYPE_NAMES = {torch.float16: "Half", torch.bfloat16: "BFloat16"}


def _where(b: GraphBuilder, mask: Value, a: Value, c: Value) -> Value:
    return call(b, aten.where.self, mask, a, c)


def _const(b: GraphBuilder, value: float, like: Value) -> Value:
    return b.full(value, like.dtype, like.shape)


def _fms(b: GraphBuilder, a: Value, q: Value, c: Value) -> Value:
    """a * q - c rounded once, as the fused multiply-subtract CPU's compiled kernels use for their
    recurrences (the compiler contracts `a * q - c`; rounding the product first differs in the last
    bit, and the recurrences amplify that). float32: the product is exact in float64, so one float64
    subtraction and a conversion (double rounding, which only differs on exact ties). float64:
    Dekker's exact product (Veltkamp splitting) and a compensated subtraction; where the split
    overflows (|a| or |q| near the top of the range) the plain a * q - c is used."""
    if a.dtype == torch.float32:
        a64, q64, c64 = (b.convert(v, torch.float64) for v in (a, q, c))
        return b.convert(call(b, aten.sub.Tensor, call(b, aten.mul.Tensor, a64, q64), c64), torch.float32)
    plain_product = call(b, aten.mul.Tensor, a, q)
    plain = call(b, aten.sub.Tensor, plain_product, c)

    def split(v: Value) -> tuple[Value, Value]:
        t = call(b, aten.mul.Tensor, v, 134217729.0)  # 2^27 + 1
        hi = call(b, aten.sub.Tensor, t, call(b, aten.sub.Tensor, t, v))
        return hi, call(b, aten.sub.Tensor, v, hi)

    (ah, al), (qh, ql) = split(a), split(q)
    err = call(b, aten.sub.Tensor, call(b, aten.mul.Tensor, ah, qh), plain_product)
    err = call(b, aten.add.Tensor, err, call(b, aten.mul.Tensor, ah, ql))
    err = call(b, aten.add.Tensor, err, call(b, aten.mul.Tensor, al, qh))
    err = call(b, aten.add.Tensor, err, call(b, aten.mul.Tensor, al, ql))  # product - plain_product, exactly
    # plain = plain_product - c with its rounding error (Knuth's TwoSum)
    back = call(b, aten.sub.Tensor, plain, plain_product)
    sum_err = call(b, aten.add.Tensor, call(b, aten.sub.Tensor, plain_product, call(b, aten.sub.Tensor, plain, back)),
                   call(b, aten.sub.Tensor, call(b, aten.neg.default, c), back))
    fused = call(b, aten.add.Tensor, plain, call(b, aten.add.Tensor, sum_err, err))
    return _where(b, call(b, aten.isfinite.default, fused), fused, plain)


def _signed_by_parity(b: GraphBuilder, even: Value, v: Value) -> Value:
    """v for even degrees, -v for odd ones (CPU's `n % 2 == 0 ? v : -v`)."""
    return _where(b, even, v, call(b, aten.neg.default, v))


# -- the polynomial families ------------------------------------------------------------------
# Each family gives: P_1(x) (P_0 is 1), the step P_{j+1} from (j, x, P_j, P_{j-1}), and optionally
# a list of (mask, value) shortcuts CPU takes before the recurrence, in CPU's order of precedence.

class _Chebyshev:
    """Chebyshev polynomials of kind T/U/V/W, plain (y = x) or shifted (y = 2x - 1)."""

    def __init__(self, kind: str, shifted: bool, threshold: int) -> None:
        self.kind, self.shifted, self.threshold = kind, shifted, threshold

    def argument(self, b: GraphBuilder, x: Value) -> Value:
        # CPU writes the shifted argument as x + x - 1 (and its double as y + y)
        return call(b, aten.sub.Tensor, call(b, aten.add.Tensor, x, x), 1.0) if self.shifted else x

    def first(self, b: GraphBuilder, y: Value) -> Value:
        if self.kind == "t":
            return y
        yy = call(b, aten.add.Tensor, y, y)
        return {"u": yy, "v": call(b, aten.sub.Tensor, yy, 1.0), "w": call(b, aten.add.Tensor, yy, 1.0)}[self.kind]

    @staticmethod
    def step(b: GraphBuilder, j: int, y: Value, q: Value, p: Value) -> Value:
        return _fms(b, call(b, aten.add.Tensor, y, y), q, p)

    def endpoints(self, b: GraphBuilder, d: Value, even: Value) -> tuple[Value, Value]:
        """CPU's values at y = 1 and y = -1 (exact integers)."""
        one = _const(b, 1.0, d)
        n1 = call(b, aten.add.Tensor, d, 1.0)
        n2 = call(b, aten.add.Tensor, call(b, aten.add.Tensor, d, d), 1.0)
        return {"t": (one, _signed_by_parity(b, even, one)),
                "u": (n1, _signed_by_parity(b, even, n1)),
                "v": (one, _signed_by_parity(b, even, n2)),
                "w": (n2, _signed_by_parity(b, even, one))}[self.kind]

    def shortcuts(self, b: GraphBuilder, x: Value, y: Value, d: Value, even: Value) -> list[tuple[Value, Value]]:
        at_plus, at_minus = self.endpoints(b, d, even)
        if self.shifted:  # CPU tests x itself (x == 1, x == 0), not 2x - 1, which rounds to -1 for tiny x
            plus, minus = call(b, aten.eq.Scalar, x, 1.0), call(b, aten.eq.Scalar, x, 0.0)
        else:
            plus, minus = call(b, aten.eq.Scalar, x, 1.0), call(b, aten.eq.Scalar, x, -1.0)
        out = [(plus, at_plus), (minus, at_minus)]
        closed = call(b, aten.logical_and.default, call(b, aten.gt.Scalar, d, float(self.threshold)),
                      call(b, aten.lt.Scalar, call(b, aten.abs.default, y), 1.0))
        out.append((closed, self.closed_form(b, x, y, d, even, at_plus)))
        return out

    def closed_form(self, b: GraphBuilder, x: Value, y: Value, d: Value, even: Value, at_plus: Value) -> Value:
        """CPU's trigonometric form for |y| < 1 with its guards where a denominator rounds to 0."""
        theta = call(b, aten.acos.default, y)

        def angle(offset: float) -> Value:
            return call(b, aten.mul.Tensor, call(b, aten.add.Tensor, d, offset), theta)

        if self.kind == "t":
            return call(b, aten.cos.default, call(b, aten.mul.Tensor, d, theta))
        if self.kind == "u":
            s = call(b, aten.sin.default, theta)
            main = call(b, aten.div.Tensor, call(b, aten.sin.default, angle(1.0)), s)
            guard = call(b, aten.div.Tensor, call(b, aten.mul.Tensor, call(b, aten.add.Tensor, d, 1.0),
                                                  call(b, aten.cos.default, angle(1.0))), y)
            return _where(b, call(b, aten.ne.Scalar, s, 0.0), main, guard)
        half = call(b, aten.div.Tensor, theta, 2.0)
        n2 = call(b, aten.add.Tensor, call(b, aten.add.Tensor, d, d), 1.0)
        if self.kind == "v":
            main = call(b, aten.div.Tensor, call(b, aten.cos.default, angle(0.5)), call(b, aten.cos.default, half))
            ok = call(b, aten.ne.Scalar, call(b, aten.sin.default, half), 1.0)
            return _where(b, ok, main, _signed_by_parity(b, even, n2))
        main = call(b, aten.div.Tensor, call(b, aten.sin.default, angle(0.5)), call(b, aten.sin.default, half))
        ok = call(b, aten.ne.Scalar, call(b, aten.cos.default, half), 1.0)
        guard = _signed_by_parity(b, even, _const(b, 1.0, d))
        if not self.shifted:  # plain W's guard repeats its x > 0 endpoint value; the shifted one does not
            guard = _where(b, call(b, aten.gt.Scalar, x, 0.0), n2, guard)
        return _where(b, ok, main, guard)


class _Recurrence:
    """Hermite, Laguerre and Legendre: a first term, a step, and CPU's shortcuts."""

    def __init__(self, name: str) -> None:
        self.name = name

    @staticmethod
    def argument(b: GraphBuilder, x: Value) -> Value:
        return x

    def first(self, b: GraphBuilder, x: Value) -> Value:
        if self.name == "h":
            return call(b, aten.add.Tensor, x, x)
        if self.name == "l":
            return call(b, aten.rsub.Scalar, x, 1.0)
        return x  # He, Legendre

    def step(self, b: GraphBuilder, j: int, x: Value, q: Value, p: Value) -> Value:
        # The integer coefficients are the loop counters CPU converts to the float type.
        kp = call(b, aten.mul.Tensor, p, float(2 * j if self.name == "h" else j))  # H's k runs over 2, 4, ...
        if self.name == "h":
            return _fms(b, call(b, aten.add.Tensor, x, x), q, kp)
        if self.name == "he":
            return _fms(b, x, q, kp)
        if self.name == "l":
            a = call(b, aten.add.Tensor, call(b, aten.rsub.Scalar, x, 1.0), float(2 * j))
        else:  # Legendre: (2j + 1) * x, then times q
            a = call(b, aten.mul.Tensor, x, float(2 * j + 1))
        return call(b, aten.div.Tensor, _fms(b, a, q, kp), float(j + 1))

    def shortcuts(self, b: GraphBuilder, x: Value, y: Value, d: Value, even: Value) -> list[tuple[Value, Value]]:
        one = _const(b, 1.0, d)
        if self.name == "l":
            return [(call(b, aten.eq.Scalar, x, 0.0), one)]
        if self.name == "p":
            return [(call(b, aten.eq.Scalar, x, 1.0), one),
                    (call(b, aten.eq.Scalar, x, -1.0), _signed_by_parity(b, even, one))]
        return []


def _evaluate(b: GraphBuilder, family: _Chebyshev | _Recurrence, name: str, x: Value, n: Value) -> Value:
    _, res = result_dtypes(x, n, kind=Kind.INT_TO_FLOAT)
    check(res in (torch.float32, torch.float64),
          f"\"{name}_cpu\" not implemented for '{_DTYPE_NAMES.get(res, str(res))}'", NotImplementedError)
    shape = list(torch.broadcast_shapes(tuple(x.shape), tuple(n.shape)))
    x = call(b, aten.expand.default, b.convert(x, res), shape)
    # TensorIterator casts n to the common dtype first; the kernel then truncates it to int64.
    n = call(b, aten.expand.default, b.convert(n, res), shape)
    d = call(b, aten.trunc.default, n)
    # NaN, +-inf and values past int64's range become INT64_MIN in CPU's cast: negative, so 0
    invalid = call(b, aten.logical_or.default,
                   call(b, aten.logical_or.default, call(b, aten.isnan.default, d), call(b, aten.lt.Scalar, d, 0.0)),
                   call(b, aten.ge.Scalar, d, 2.0 ** 63))
    d = _where(b, invalid, _const(b, -1.0, d), d)
    even = call(b, aten.eq.Scalar, call(b, aten.fmod.Scalar, d, 2.0), 0.0)

    y = family.argument(b, x)
    # The recurrence: p = P_{j-1}, q = P_j; step j makes P_{j+1}, needed only where j < d.
    p, q = _const(b, 1.0, x), family.first(b, y)
    for j in range(1, _MAX_DEGREE):
        live = call(b, aten.gt.Scalar, d, float(j))
        r = family.step(b, j, y, q, p)
        p, q = _where(b, live, q, p), _where(b, live, r, q)
    out = _where(b, call(b, aten.eq.Scalar, d, 0.0), _const(b, 1.0, x), q)
    out = _where(b, call(b, aten.gt.Scalar, d, float(_MAX_DEGREE)), _const(b, float("nan"), x), out)
    # CPU's shortcuts, applied lowest precedence first so the earlier tests win
    for mask, value in reversed(family.shortcuts(b, x, y, d, even)):
        out = _where(b, mask, value, out)
    return _where(b, call(b, aten.lt.Scalar, d, 0.0), _const(b, 0.0, x), out)


def _lowering(family: _Chebyshev | _Recurrence, name: str) -> Callable[[GraphBuilder, Value, Value], Value]:
    def lower(b: GraphBuilder, x: Value, n: Value) -> Value:
        return _evaluate(b, family, name, x, n)
    lower.__name__ = name
    lower.__doc__ = f"special.{name}(x, n): see the module docstring (degrees above {_MAX_DEGREE} that need the " \
                    "recurrence give NaN)."
    return lower


_FAMILIES: dict[str, _Chebyshev | _Recurrence] = {
    "chebyshev_polynomial_t": _Chebyshev("t", False, 6),
    "chebyshev_polynomial_u": _Chebyshev("u", False, 8),
    "chebyshev_polynomial_v": _Chebyshev("v", False, 8),
    "chebyshev_polynomial_w": _Chebyshev("w", False, 8),
    "shifted_chebyshev_polynomial_t": _Chebyshev("t", True, 6),
    "shifted_chebyshev_polynomial_u": _Chebyshev("u", True, 6),
    "shifted_chebyshev_polynomial_v": _Chebyshev("v", True, 6),
    "shifted_chebyshev_polynomial_w": _Chebyshev("w", True, 4),
    "hermite_polynomial_h": _Recurrence("h"),
    "hermite_polynomial_he": _Recurrence("he"),
    "laguerre_polynomial_l": _Recurrence("l"),
    "legendre_polynomial_p": _Recurrence("p"),
}

for _name, _family in _FAMILIES.items():
    register(getattr(aten, f"special_{_name}").default)(_lowering(_family, _name))
