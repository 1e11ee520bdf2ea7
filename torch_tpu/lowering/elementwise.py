"""Lowerings: elementwise ops (arithmetic, math, clamp and min/max, comparison, logical and
bitwise, selection). Conversion and creation are in creation.py, activations in activations.py;
both share this file's helpers and conventions.

Conventions used throughout:

* Type promotion is PyTorch's own (``core.result_dtypes``); the computation dtype it returns
  is the CPU "opmath" dtype (float32 for half types), so half inputs are computed in float32
  and rounded once at the end, like CPU kernels do.
* Scalar arguments are runtime 0-d Values. Formulas never branch on their value in Python:
  where a CPU kernel branches on a scalar (e.g. ``weight_decay != 0``) the lowering uses a
  ``select`` so one program serves every value.
* Where CPU kernels use a specific formula (lerp's two-sided form, floor division's
  correction, logaddexp's infinity guard...) the same formula is built here, so results agree
  to the last bit wherever the reference interpreter's primitive ops do.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from ..ir.builder import GraphBuilder, Value
from .core import Kind, broadcast_shapes, broadcast_to, promote, result_dtypes, result_type
from .registry import register

aten = torch.ops.aten

_HALF = (torch.float16, torch.bfloat16)


# -- small helpers ---------------------------------------------------------------------------

def _k(b: GraphBuilder, value: float | int | bool, like: Value) -> Value:
    """A constant with like's dtype and shape."""
    return b.full(value, like.dtype, like.shape)


def _s(b: GraphBuilder, v: Value, like: Value) -> Value:
    """A (0-d or broadcastable) Value converted to like's dtype and broadcast to like's shape."""
    return broadcast_to(b, b.convert(v, like.dtype), like.shape)


def _is_int(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and dtype != torch.bool


def _reject(cond: bool, msg: str) -> None:
    """Raise PyTorch's error for an unsupported dtype/argument combination."""
    if cond:
        raise RuntimeError(msg)


def _check_fill_const(x: Value, value: Value) -> None:
    """CPU's overflow check of a fill value converted to x's dtype, for a constant value (as in a
    torch.compile graph); the C++ dispatcher checks runtime scalars (check_fill_value)."""
    if value.const is not None and not isinstance(value.const, complex) and x.dtype != torch.bool \
            and not x.dtype.is_complex:
        torch.empty((), dtype=x.dtype).fill_(value.const)  # raises CPU's own error


def _tname(dtype: torch.dtype) -> str:
    return {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
            torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
            torch.uint8: "Byte", torch.bool: "Bool"}.get(dtype, str(dtype))


def _max(b: GraphBuilder, x: Value, y: Value) -> Value:
    """NaN-propagating maximum; logical or for bool (the IR max is numeric only)."""
    return b.binary("or", x, y) if x.dtype == torch.bool else b.max(x, y)


def _min(b: GraphBuilder, x: Value, y: Value) -> Value:
    return b.binary("and", x, y) if x.dtype == torch.bool else b.min(x, y)


def _isnan(b: GraphBuilder, x: Value) -> Value:
    return b.compare("ne", x, x)


def _isinf(b: GraphBuilder, x: Value) -> Value:
    return b.compare("eq", b.abs(x), _k(b, math.inf, x))


def _where(b: GraphBuilder, pred: Value, t: Value, f: Value) -> Value:
    return b.select(pred, t, f)


def _signbit_float(b: GraphBuilder, x: Value) -> Value:
    """x < 0, or x is -0.0 (1/-0.0 = -inf). The sign bit of a NaN is not observable without a
    bitcast, so NaNs count as positive."""
    zero = _k(b, 0, x)
    neg_zero = b.binary("and", b.compare("eq", x, zero), b.compare("lt", b.div(_k(b, 1, x), x), zero))
    return b.binary("or", b.compare("lt", x, zero), neg_zero)


def _promote(b: GraphBuilder, *vals: Value, comp: torch.dtype, res: torch.dtype,
             shape: Sequence[int] | None = None, exact: Sequence[int] = ()) -> list[Value]:
    """Broadcast vals and convert them to the computation dtype *through the result dtype*.

    CPU's TensorIterator first casts every operand to the common dtype and only then widens to
    opmath, so a 0-d float64 operand of a float16 op is rounded to float16 first. Operands whose
    index is in `exact` skip that rounding (mul/div read a scalar operand at full precision)."""
    shape = tuple(shape) if shape is not None else broadcast_shapes(*[v.shape for v in vals])
    out = []
    for i, v in enumerate(vals):
        if i not in exact and v.dtype != res and res != comp:
            v = b.convert(v, res)
        out.append(broadcast_to(b, b.convert(v, comp), shape))
    return out


def _map(b: GraphBuilder, fn: Callable[..., Value], *vals: Value, kind: Kind = Kind.DEFAULT,
         comp: torch.dtype | None = None, res: torch.dtype | None = None, exact: Sequence[int] = ()) -> Value:
    """Promote and broadcast vals, compute fn(*converted) in the opmath dtype, cast to the result."""
    c, r = result_dtypes(*vals, kind=kind)
    c = comp if comp is not None else c
    r = res if res is not None else r
    args = _promote(b, *vals, comp=c, res=r, exact=exact)
    return b.convert(fn(*args), r)


def _unary_float(b: GraphBuilder, x: Value, fn: Callable[[Value], Value]) -> Value:
    """Int/bool inputs promote to the default float dtype; half types compute in float32."""
    return _map(b, fn, x, kind=Kind.INT_TO_FLOAT)


# -- add / sub / mul / div -------------------------------------------------------------------

def _check_alpha(comp: torch.dtype, alpha: Value, name: str = "alpha") -> None:
    _reject(alpha.dtype.is_floating_point and not comp.is_floating_point,
            f"For integral input tensors, argument {name} must not be a floating point number.")
    _reject(alpha.dtype == torch.bool and comp != torch.bool,
            f"Boolean {name} only supported for Boolean results.")


def add_values(b: GraphBuilder, x: Value, y: Value, alpha: Value | None = None, sub: bool = False) -> Value:
    """x + alpha*y (or x - alpha*y) with PyTorch promotion; bool add is logical or."""
    comp, res = result_dtypes(x, y)
    _reject(sub and torch.bool in (x.dtype, y.dtype),
            "Subtraction, the `-` operator, with a bool tensor is not supported. "
            "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.")
    xs, ys = _promote(b, x, y, comp=comp, res=res)
    if alpha is not None:
        _check_alpha(comp, alpha)
    if comp == torch.bool:
        if alpha is not None:
            ys = b.binary("and", ys, _s(b, alpha, ys))
        return b.binary("or", xs, ys)
    if alpha is not None:
        # CPU casts alpha to the tensor's own type first (visible for half types: 0.3 -> 0.2998).
        ys = b.mul(ys, _s(b, b.convert(alpha, res), ys))
    return b.convert(b.sub(xs, ys) if sub else b.add(xs, ys), res)


@register(aten.add.Tensor, aten.add.Scalar)
def add(b: GraphBuilder, x: Value, y: Value, alpha: Value) -> Value:
    return add_values(b, x, y, alpha)


@register(aten.sub.Tensor, aten.sub.Scalar)
def sub(b: GraphBuilder, x: Value, y: Value, alpha: Value) -> Value:
    return add_values(b, x, y, alpha, sub=True)


@register(aten.rsub.Tensor, aten.rsub.Scalar)
def rsub(b: GraphBuilder, x: Value, y: Value, alpha: Value) -> Value:
    return add_values(b, y, x, alpha, sub=True)


def mul_values(b: GraphBuilder, x: Value, y: Value) -> Value:
    comp, res = result_dtypes(x, y)
    xs, ys = _promote(b, x, y, comp=comp, res=res, exact=(1,) if y.rank == 0 else ())
    if comp == torch.bool:
        return b.binary("and", xs, ys)
    return b.convert(b.mul(xs, ys), res)


@register(aten.mul.Tensor, aten.mul.Scalar)
def mul(b: GraphBuilder, x: Value, y: Value) -> Value:
    return mul_values(b, x, y)


def _floor_div_float(b: GraphBuilder, a: Value, d: Value) -> Value:
    """CPU's div_floor_floating: Python-style floor division built from fmod, exact for quotients
    that a plain floor(a / b) would round the wrong way."""
    zero = _k(b, 0, a)
    mod = b.rem(a, d)
    div = b.div(b.sub(a, mod), d)
    fix = b.binary("and", b.compare("ne", mod, zero),
                   b.compare("ne", b.compare("lt", d, zero), b.compare("lt", mod, zero)))
    div = _where(b, fix, b.sub(div, _k(b, 1, div)), div)
    fl = b.floor(div)
    fl = _where(b, b.compare("gt", b.sub(div, fl), _k(b, 0.5, div)), b.add(fl, _k(b, 1, fl)), fl)
    # A zero quotient keeps the sign of the true quotient; division by zero gives a / b.
    true_q = b.div(a, d)
    signed_zero = _where(b, _signbit_float(b, true_q), _k(b, -0.0, a), zero)
    out = _where(b, b.compare("eq", div, zero), signed_zero, fl)
    return _where(b, b.compare("eq", d, zero), true_q, out)


def _floor_div_int(b: GraphBuilder, a: Value, d: Value) -> Value:
    """Truncating quotient minus one where the signs differ and the remainder is non-zero."""
    zero = _k(b, 0, a)
    q = b.div(a, d)
    r = b.rem(a, d)
    fix = b.binary("and", b.compare("ne", r, zero),
                   b.compare("ne", b.compare("lt", a, zero), b.compare("lt", d, zero)))
    return _where(b, fix, b.sub(q, _k(b, 1, q)), q)


def div_values(b: GraphBuilder, x: Value, y: Value, rounding_mode: str | None = None) -> Value:
    scalar_divisor = (1,) if y.rank == 0 else ()
    if rounding_mode is None:
        return _map(b, b.div, x, y, kind=Kind.INT_TO_FLOAT, exact=scalar_divisor)
    _reject(rounding_mode not in ("trunc", "floor"),
            f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{rounding_mode}'")
    res = result_type(x, y)
    _reject(res == torch.bool, f'"div_{rounding_mode}_cpu" not implemented for \'Bool\'')
    # Rounding divisions of half types run in half arithmetic (every step rounds), except by a
    # scalar divisor, which CPU applies in float32 with the divisor's exact value.
    if res in _HALF and scalar_divisor:
        xs, ys = _promote(b, x, y, comp=torch.float32, res=res, exact=scalar_divisor)
    else:
        xs, ys = promote(b, x, y, dtype=res)
    if rounding_mode == "trunc":
        out = b.div(xs, ys) if _is_int(res) else b.trunc(b.div(xs, ys))
    else:
        out = _floor_div_int(b, xs, ys) if _is_int(res) else _floor_div_float(b, xs, ys)
    return b.convert(out, res)


@register(aten.div.Tensor, aten.div.Scalar)
def div(b: GraphBuilder, x: Value, y: Value) -> Value:
    return div_values(b, x, y)


@register(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(b: GraphBuilder, x: Value, y: Value, rounding_mode: str | None) -> Value:
    return div_values(b, x, y, rounding_mode)


@register(aten.floor_divide.default, aten.floor_divide.Scalar)
def floor_divide(b: GraphBuilder, x: Value, y: Value) -> Value:
    return div_values(b, x, y, "floor")


def _remainder(b: GraphBuilder, x: Value, y: Value) -> Value:
    """Python-style modulo: the result takes the divisor's sign."""
    comp, res = result_dtypes(x, y)
    _reject(comp == torch.bool, "\"remainder_cpu\" not implemented for 'Bool'")
    a, d = _promote(b, x, y, comp=comp, res=res)
    zero = _k(b, 0, a)
    r = b.rem(a, d)
    fix = b.binary("and", b.compare("ne", r, zero),
                   b.compare("ne", b.compare("lt", r, zero), b.compare("lt", d, zero)))
    return b.convert(_where(b, fix, b.add(r, d), r), res)


@register(aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor)
def remainder(b: GraphBuilder, x: Value, y: Value) -> Value:
    return _remainder(b, x, y)


@register(aten.fmod.Tensor, aten.fmod.Scalar)
def fmod(b: GraphBuilder, x: Value, y: Value) -> Value:
    _reject(result_type(x, y) == torch.bool, "\"fmod_cpu\" not implemented for 'Bool'")
    return _map(b, b.rem, x, y)


@register(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar)
def pow_(b: GraphBuilder, x: Value, y: Value) -> Value:
    if result_type(x, y) == torch.bool and y.wrapped:
        # CPU special-cases exponents 0 and 1 (the only ones bool supports): x ** e = x | !e.
        xs, ys = promote(b, x, y, dtype=torch.bool)
        return b.binary("or", xs, b.unary("not", ys))
    _reject(result_type(x, y) == torch.bool, "\"pow\" not implemented for 'Bool'")
    # A Python number exponent (pow.Tensor_Scalar) lets the runtime take ATen's recipes for it
    # (x^2 = x*x, ...); a tensor exponent, even a 0-d one, is CPU's general pow.
    scalar = y.wrapped and not x.wrapped
    # ATen's meta function checks this in eager mode; a compiled graph reaches the lowering.
    _reject(scalar and not x.dtype.is_floating_point and not x.dtype.is_complex and not y.dtype.is_floating_point
            and y.const is not None and y.const < 0, "Integers to negative integer powers are not allowed.")
    if scalar and result_type(x, y) == torch.bfloat16:
        # CPU's bfloat16 pow with a scalar exponent rounds every product to bfloat16 (x^3 is
        # (x*x)*x with x*x rounded first; PowKernel.cpp). A bfloat16 IR pow asks the runtime for
        # that; a float32 pow rounded once differs in a quarter of x^3's results.
        return b.pow(*promote(b, x, y, dtype=torch.bfloat16), scalar_exponent=True)
    return _map(b, lambda u, v: b.pow(u, v, scalar_exponent=scalar), x, y)


@register(aten.reciprocal.default)
def reciprocal(b: GraphBuilder, x: Value) -> Value:
    return _unary_float(b, x, lambda v: b.div(_k(b, 1, v), v))


@register(aten.neg.default)
def neg(b: GraphBuilder, x: Value) -> Value:
    _reject(x.dtype == torch.bool, "Negation, the `-` operator, on a bool tensor is not supported. "
                                   "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.")
    return b.neg(x)


@register(aten.abs.default)
def abs_(b: GraphBuilder, x: Value) -> Value:
    _reject(x.dtype == torch.bool, "\"abs_cpu\" not implemented for 'Bool'")
    return b.abs(x)


@register(aten.sign.default, aten.sgn.default)
def sign(b: GraphBuilder, x: Value) -> Value:
    return x if x.dtype == torch.bool else b.sign(x)


# -- unary math ------------------------------------------------------------------------------

def _register_unary_float(op: torch._ops.OpOverload, ir_op: str) -> None:
    def lower(b: GraphBuilder, x: Value) -> Value:
        return _unary_float(b, x, lambda v: b.unary(ir_op, v))
    lower.__name__ = ir_op
    register(op)(lower)


for _op, _ir in [(aten.sqrt, "sqrt"), (aten.rsqrt, "rsqrt"), (aten.exp, "exp"), (aten.expm1, "expm1"),
                 (aten.log, "log"), (aten.log1p, "log1p"), (aten.sin, "sin"), (aten.cos, "cos"),
                 (aten.tan, "tan"), (aten.asin, "asin"), (aten.acos, "acos"), (aten.atan, "atan"),
                 (aten.sinh, "sinh"), (aten.cosh, "cosh"), (aten.tanh, "tanh"), (aten.asinh, "asinh"),
                 (aten.acosh, "acosh"), (aten.atanh, "atanh"), (aten.erf, "erf"), (aten.erfinv, "erfinv"),
                 (aten.lgamma, "lgamma"), (aten.digamma, "digamma"), (aten.sigmoid, "logistic")]:
    _register_unary_float(_op.default, _ir)


@register(aten.exp2.default)
def exp2(b: GraphBuilder, x: Value) -> Value:
    return _unary_float(b, x, lambda v: b.pow(_k(b, 2.0, v), v))


def _log_base(b: GraphBuilder, v: Value, base: float) -> Value:
    """log(v)/log(base), snapped to the integer n where base**n == v exactly, so exact powers
    (log2(8) = 3) come out exact as they do on CPU."""
    r = b.div(b.log(v), _k(b, math.log(base), v))
    n = b.round_even(r)
    return _where(b, b.compare("eq", b.pow(_k(b, base, v), n), v), n, r)


@register(aten.log2.default)
def log2(b: GraphBuilder, x: Value) -> Value:
    return _unary_float(b, x, lambda v: _log_base(b, v, 2.0))


@register(aten.log10.default)
def log10(b: GraphBuilder, x: Value) -> Value:
    return _unary_float(b, x, lambda v: _log_base(b, v, 10.0))


@register(aten.erfc.default)
def erfc(b: GraphBuilder, x: Value) -> Value:
    # 1 - erf(x): absolute error ~1 ulp of 1, so relative precision is lost for large x.
    return _unary_float(b, x, lambda v: b.sub(_k(b, 1, v), b.erf(v)))


@register(aten.sinc.default)
def sinc(b: GraphBuilder, x: Value) -> Value:
    def f(v: Value) -> Value:
        pv = b.mul(v, _k(b, math.pi, v))
        return _where(b, b.compare("eq", v, _k(b, 0, v)), _k(b, 1, v), b.div(b.sin(pv), pv))
    return _unary_float(b, x, f)


@register(aten.deg2rad.default)
def deg2rad(b: GraphBuilder, x: Value) -> Value:
    return _unary_float(b, x, lambda v: b.mul(v, _k(b, math.pi / 180.0, v)))


@register(aten.rad2deg.default)
def rad2deg(b: GraphBuilder, x: Value) -> Value:
    return _unary_float(b, x, lambda v: b.mul(v, _k(b, 180.0 / math.pi, v)))


@register(aten.atan2.default)
def atan2(b: GraphBuilder, x: Value, y: Value) -> Value:
    return _map(b, b.atan2, x, y, kind=Kind.INT_TO_FLOAT)


@register(aten.logit.default)
def logit(b: GraphBuilder, x: Value, eps: Value | None) -> Value:
    def f(v: Value) -> Value:
        if eps is not None:
            e = _s(b, eps, v)
            clamped = b.min(b.max(v, e), b.sub(_k(b, 1, v), e))
            v = _where(b, b.compare("lt", e, _k(b, 0, v)), v, clamped)  # CPU: eps < 0 means no clamp
        return b.log(b.div(v, b.sub(_k(b, 1, v), v)))
    # Computed in the tensor's own type (for half types too: bounds like 1 - eps round there).
    return _map(b, f, x, kind=Kind.INT_TO_FLOAT, comp=result_dtypes(x, kind=Kind.INT_TO_FLOAT)[1])


def _integer_identity(op: str) -> Callable[[GraphBuilder, Value], Value]:
    def lower(b: GraphBuilder, x: Value) -> Value:
        _reject(x.dtype == torch.bool, f"\"{op}_vml_cpu\" not implemented for 'Bool'")
        if not x.dtype.is_floating_point:
            return x
        return b.convert(b.unary({"round": "round_even"}.get(op, op), b.convert(x, _opmath(x.dtype))), x.dtype)
    lower.__name__ = op
    return lower


def _opmath(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in _HALF else dtype


for _name in ("floor", "ceil", "trunc", "round"):
    register(getattr(aten, _name).default)(_integer_identity(_name))


@register(aten.round.decimals)
def round_decimals(b: GraphBuilder, x: Value, decimals: int) -> Value:
    _reject(x.dtype == torch.bool, "\"round_cpu\" not implemented for 'Bool'")
    if not x.dtype.is_floating_point:
        return x
    v = b.convert(x, _opmath(x.dtype))
    p = _k(b, 10.0 ** abs(decimals), v)
    out = b.mul(b.round_even(b.div(v, p)), p) if decimals < 0 else b.div(b.round_even(b.mul(v, p)), p)
    return b.convert(out, x.dtype)


@register(aten.frac.default)
def frac(b: GraphBuilder, x: Value) -> Value:
    _reject(not x.dtype.is_floating_point, f"\"frac_cpu\" not implemented for '{_tname(x.dtype)}'")
    v = b.convert(x, _opmath(x.dtype))
    return b.convert(b.sub(v, b.trunc(v)), x.dtype)


@register(aten.hypot.default)
def hypot(b: GraphBuilder, x: Value, y: Value) -> Value:
    _reject(not result_type(x, y).is_floating_point, f"\"hypot_cpu\" not implemented for '{_tname(result_type(x, y))}'")

    def f(u: Value, v: Value) -> Value:
        au, av = b.abs(u), b.abs(v)
        hi, lo = b.max(au, av), b.min(au, av)
        # Scaling by the larger magnitude avoids overflow/underflow of u*u + v*v.
        r = b.div(lo, hi)
        h = b.mul(hi, b.sqrt(b.add(_k(b, 1, r), b.mul(r, r))))
        h = _where(b, b.compare("eq", hi, _k(b, 0, hi)), _k(b, 0, h), h)
        return _where(b, b.binary("or", _isinf(b, au), _isinf(b, av)), _k(b, math.inf, h), h)
    return _map(b, f, x, y)


def lerp_values(b: GraphBuilder, start: Value, end: Value, weight: Value) -> Value:
    """CPU's two-sided lerp: start + w*(end-start) for |w| < 0.5, else end - (end-start)*(1-w)."""
    _reject(start.dtype != end.dtype, f"expected dtype {start.dtype} for `end` but got dtype {end.dtype}")
    _reject(not start.dtype.is_floating_point, f"\"lerp_kernel_scalar\" not implemented for '{_tname(start.dtype)}'")
    res = start.dtype
    comp = _opmath(res)
    shape = broadcast_shapes(start.shape, end.shape, weight.shape)
    s, e, w = promote(b, start, end, weight, dtype=comp, shape=shape)
    d = b.sub(e, s)
    small = b.compare("lt", b.abs(w), _k(b, 0.5, w))
    out = _where(b, small, b.add(s, b.mul(w, d)), b.sub(e, b.mul(d, b.sub(_k(b, 1, w), w))))
    return b.convert(out, res)


@register(aten.lerp.Scalar, aten.lerp.Tensor)
def lerp(b: GraphBuilder, x: Value, end: Value, weight: Value) -> Value:
    if not weight.wrapped and weight.rank > 0:
        _reject(weight.dtype != x.dtype, f"expected dtype {x.dtype} for `weight` but got dtype {weight.dtype}")
    return lerp_values(b, x, end, weight)


def addcmul_values(b: GraphBuilder, x: Value, t1: Value, t2: Value, value: Value) -> Value:
    comp, res = result_dtypes(x, t1, t2)
    xs, a, c = _promote(b, x, t1, t2, comp=comp, res=res)
    if comp == torch.bool:
        return b.binary("or", xs, b.binary("and", b.binary("and", _s(b, value, a), a), c))
    return b.convert(b.add(xs, b.mul(b.mul(_s(b, value, a), a), c)), res)


def addcdiv_values(b: GraphBuilder, x: Value, t1: Value, t2: Value, value: Value) -> Value:
    _reject(not t1.dtype.is_floating_point and not t2.dtype.is_floating_point,
            "Integer division with addcdiv is no longer supported, and in a future release addcdiv will "
            "perform a true division of tensor1 and tensor2. The historic addcdiv behavior can be implemented "
            "as (input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs and as "
            "(input + value * tensor1 / tensor2) for float inputs. The future addcdiv behavior is just the "
            "latter implementation: (input + value * tensor1 / tensor2), for all dtypes.")
    comp, res = result_dtypes(x, t1, t2)
    xs, a, c = _promote(b, x, t1, t2, comp=comp, res=res)
    return b.convert(b.add(xs, b.mul(_s(b, value, a), b.div(a, c))), res)


@register(aten.addcmul.default)
def addcmul(b: GraphBuilder, x: Value, t1: Value, t2: Value, value: Value) -> Value:
    return addcmul_values(b, x, t1, t2, value)


@register(aten.addcdiv.default)
def addcdiv(b: GraphBuilder, x: Value, t1: Value, t2: Value, value: Value) -> Value:
    return addcdiv_values(b, x, t1, t2, value)


def _xlog(b: GraphBuilder, x: Value, y: Value, log1p: bool) -> Value:
    def f(u: Value, v: Value) -> Value:
        r = b.mul(u, b.log1p(v) if log1p else b.log(v))
        r = _where(b, b.compare("eq", u, _k(b, 0, u)), _k(b, 0, r), r)  # 0 * log(0) = 0
        return _where(b, _isnan(b, v), _k(b, math.nan, r), r)
    res = result_dtypes(x, y, kind=Kind.INT_TO_FLOAT)[1]
    return _map(b, f, x, y, kind=Kind.INT_TO_FLOAT, comp=res)  # half types: half arithmetic, like CPU


@register(aten.xlogy.Tensor, aten.xlogy.Scalar_Self, aten.xlogy.Scalar_Other)
def xlogy(b: GraphBuilder, x: Value, y: Value) -> Value:
    return _xlog(b, x, y, log1p=False)


@register(aten.special_xlog1py.default, aten.special_xlog1py.self_scalar, aten.special_xlog1py.other_scalar)
def xlog1py(b: GraphBuilder, x: Value, y: Value) -> Value:
    return _xlog(b, x, y, log1p=True)


def _logaddexp(b: GraphBuilder, x: Value, y: Value, base2: bool) -> Value:
    common = result_type(x, y)
    _reject(not common.is_floating_point,
            f"\"logaddexp{'2' if base2 else ''}_cpu\" not implemented for '{_tname(common)}'")
    def f(u: Value, v: Value) -> Value:
        m = b.max(u, v)
        negd = b.neg(b.abs(b.sub(u, v)))
        if base2:
            tail = b.mul(b.log1p(b.pow(_k(b, 2.0, negd), negd)), _k(b, 1.0 / math.log(2.0), m))
        else:
            tail = b.log1p(b.exp(negd))
        r = b.add(m, tail)
        # inf - inf is NaN: equal infinities are returned as they are.
        return _where(b, b.binary("and", _isinf(b, u), b.compare("eq", u, v)), u, r)
    return _map(b, f, x, y, kind=Kind.INT_TO_FLOAT)


@register(aten.logaddexp.default)
def logaddexp(b: GraphBuilder, x: Value, y: Value) -> Value:
    return _logaddexp(b, x, y, base2=False)


@register(aten.logaddexp2.default)
def logaddexp2(b: GraphBuilder, x: Value, y: Value) -> Value:
    return _logaddexp(b, x, y, base2=True)


@register(aten.nan_to_num.default)
def nan_to_num(b: GraphBuilder, x: Value, nan: Value | None, posinf: Value | None, neginf: Value | None) -> Value:
    if not x.dtype.is_floating_point:
        return x
    info = torch.finfo(x.dtype)
    nan_v = _s(b, nan, x) if nan is not None else _k(b, 0.0, x)
    pos_v = _s(b, posinf, x) if posinf is not None else _k(b, info.max, x)
    neg_v = _s(b, neginf, x) if neginf is not None else _k(b, info.min, x)
    out = _where(b, b.compare("eq", x, _k(b, math.inf, x)), pos_v, x)
    out = _where(b, b.compare("eq", x, _k(b, -math.inf, x)), neg_v, out)
    return _where(b, _isnan(b, x), nan_v, out)


# -- clamp, min/max --------------------------------------------------------------------------

def clamp_values(b: GraphBuilder, x: Value, lo: Value | None, hi: Value | None) -> Value:
    """min(max(x, lo), hi) in the promoted dtype; NaN in x (or a tensor bound) propagates."""
    _reject(lo is None and hi is None, "torch.clamp: At least one of 'min' or 'max' must not be None")
    res = result_type(x, lo, hi)
    vals = [v for v in (x, lo, hi) if v is not None]
    shape = broadcast_shapes(*[v.shape for v in vals])
    out = broadcast_to(b, b.convert(x, res), shape)
    if lo is not None:
        out = _max(b, out, broadcast_to(b, b.convert(lo, res), shape))
    if hi is not None:
        out = _min(b, out, broadcast_to(b, b.convert(hi, res), shape))
    return out


@register(aten.clamp.default)
def clamp(b: GraphBuilder, x: Value, lo: Value | None, hi: Value | None) -> Value:
    # CPU's scalar-bound clamp rejects bool; the tensor-bound kernels accept it.
    _reject(result_type(x, lo, hi) == torch.bool, "\"clamp_cpu\" not implemented for 'Bool'")
    return clamp_values(b, x, lo, hi)


@register(aten.clamp.Tensor)
def clamp_tensor(b: GraphBuilder, x: Value, lo: Value | None, hi: Value | None) -> Value:
    # With one bound CPU runs the clamp_min/clamp_max kernel, which accepts bool; with both it
    # runs clamp, which does not.
    _reject(lo is not None and hi is not None and result_type(x, lo, hi) == torch.bool,
            "\"clamp_cpu\" not implemented for 'Bool'")
    return clamp_values(b, x, lo, hi)


@register(aten.clamp_min.default, aten.clamp_min.Tensor)
def clamp_min(b: GraphBuilder, x: Value, lo: Value) -> Value:
    return clamp_values(b, x, lo, None)


@register(aten.clamp_max.default, aten.clamp_max.Tensor)
def clamp_max(b: GraphBuilder, x: Value, hi: Value) -> Value:
    return clamp_values(b, x, None, hi)


@register(aten.maximum.default)
def maximum(b: GraphBuilder, x: Value, y: Value) -> Value:
    return _map(b, lambda u, v: _max(b, u, v), x, y, comp=result_type(x, y))


@register(aten.minimum.default)
def minimum(b: GraphBuilder, x: Value, y: Value) -> Value:
    return _map(b, lambda u, v: _min(b, u, v), x, y, comp=result_type(x, y))


def _fminmax(b: GraphBuilder, x: Value, y: Value, is_max: bool) -> Value:
    """fmax/fmin: a NaN operand is ignored unless both are NaN."""
    def f(u: Value, v: Value) -> Value:
        m = _max(b, u, v) if is_max else _min(b, u, v)
        if not u.dtype.is_floating_point:
            return m
        return _where(b, _isnan(b, u), v, _where(b, _isnan(b, v), u, m))
    return _map(b, f, x, y, comp=result_type(x, y))


@register(aten.fmax.default)
def fmax(b: GraphBuilder, x: Value, y: Value) -> Value:
    return _fminmax(b, x, y, True)


@register(aten.fmin.default)
def fmin(b: GraphBuilder, x: Value, y: Value) -> Value:
    return _fminmax(b, x, y, False)


@register(aten.copysign.Tensor, aten.copysign.Scalar)
def copysign(b: GraphBuilder, x: Value, y: Value) -> Value:
    def f(u: Value, v: Value) -> Value:
        a = b.abs(u)
        return _where(b, _signbit_float(b, v), b.neg(a), a)
    return _map(b, f, x, y, kind=Kind.INT_TO_FLOAT)


@register(aten.heaviside.default)
def heaviside(b: GraphBuilder, x: Value, values: Value) -> Value:
    _reject(x.dtype != values.dtype, "heaviside is not yet implemented for tensors with different dtypes")

    def f(u: Value, v: Value) -> Value:
        return _where(b, b.compare("eq", u, _k(b, 0, u)), v, b.convert(b.compare("gt", u, _k(b, 0, u)), u.dtype))
    return _map(b, f, x, values, comp=x.dtype)


@register(aten.signbit.default)
def signbit(b: GraphBuilder, x: Value) -> Value:
    if x.dtype.is_floating_point:
        return _signbit_float(b, x)
    if x.dtype in (torch.bool, torch.uint8):
        return b.full(False, torch.bool, x.shape)
    return b.compare("lt", x, _k(b, 0, x))


# -- comparison ------------------------------------------------------------------------------

def compare_values(b: GraphBuilder, direction: str, x: Value, y: Value) -> Value:
    common = result_type(x, y)
    xs, ys = promote(b, x, y, dtype=common)
    return b.compare(direction, xs, ys)


def _register_compare(name: str) -> None:
    def lower(b: GraphBuilder, x: Value, y: Value) -> Value:
        return compare_values(b, name, x, y)
    lower.__name__ = name
    register(getattr(aten, name).Tensor, getattr(aten, name).Scalar)(lower)


for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    _register_compare(_name)


@register(aten.isnan.default)
def isnan(b: GraphBuilder, x: Value) -> Value:
    return _isnan(b, x) if x.dtype.is_floating_point else b.full(False, torch.bool, x.shape)


@register(aten.isinf.default)
def isinf(b: GraphBuilder, x: Value) -> Value:
    return _isinf(b, x) if x.dtype.is_floating_point else b.full(False, torch.bool, x.shape)


@register(aten.isfinite.default)
def isfinite(b: GraphBuilder, x: Value) -> Value:
    return b.is_finite(x) if x.dtype.is_floating_point else b.full(True, torch.bool, x.shape)


@register(aten.isposinf.default)
def isposinf(b: GraphBuilder, x: Value) -> Value:
    if not x.dtype.is_floating_point:
        return b.full(False, torch.bool, x.shape)
    return b.compare("eq", x, _k(b, math.inf, x))


@register(aten.isneginf.default)
def isneginf(b: GraphBuilder, x: Value) -> Value:
    if not x.dtype.is_floating_point:
        return b.full(False, torch.bool, x.shape)
    return b.compare("eq", x, _k(b, -math.inf, x))


# -- logical and bitwise ---------------------------------------------------------------------

def _to_bool(b: GraphBuilder, x: Value) -> Value:
    return b.convert(x, torch.bool)  # convert to bool is `!= 0` (NaN is true)


def _register_logical(name: str, ir_op: str) -> None:
    def lower(b: GraphBuilder, x: Value, y: Value) -> Value:
        shape = broadcast_shapes(x.shape, y.shape)
        xs, ys = (broadcast_to(b, _to_bool(b, v), shape) for v in (x, y))
        return b.binary(ir_op, xs, ys)
    lower.__name__ = name
    register(getattr(aten, name).default)(lower)


for _name, _ir in (("logical_and", "and"), ("logical_or", "or"), ("logical_xor", "xor")):
    _register_logical(_name, _ir)


@register(aten.logical_not.default)
def logical_not(b: GraphBuilder, x: Value) -> Value:
    return b.unary("not", _to_bool(b, x))


def _bitwise_dtype(x: Value, y: Value | None, name: str) -> torch.dtype:
    dtype = result_type(x, y) if y is not None else x.dtype
    _reject(dtype.is_floating_point, f"\"{name}_cpu\" not implemented for '{_tname(dtype)}'")
    return dtype


def _register_bitwise(name: str, ir_op: str) -> None:
    def lower(b: GraphBuilder, x: Value, y: Value) -> Value:
        dtype = _bitwise_dtype(x, y, name)
        return b.binary(ir_op, *promote(b, x, y, dtype=dtype))
    lower.__name__ = name
    p = getattr(aten, name)
    register(p.Tensor, p.Scalar, p.Scalar_Tensor)(lower)


for _name, _ir in (("bitwise_and", "and"), ("bitwise_or", "or"), ("bitwise_xor", "xor")):
    _register_bitwise(_name, _ir)


@register(aten.bitwise_not.default)
def bitwise_not(b: GraphBuilder, x: Value) -> Value:
    _bitwise_dtype(x, None, "bitwise_not")
    return b.unary("not", x)


def _shift(b: GraphBuilder, x: Value, y: Value, left: bool) -> Value:
    dtype = _bitwise_dtype(x, y, "lshift" if left else "rshift")
    _reject(dtype == torch.bool, f"\"{'lshift' if left else 'rshift'}_cpu\" not implemented for 'Bool'")
    xs, ys = promote(b, x, y, dtype=dtype)
    if left:
        return b.binary("shl", xs, ys)
    # uint8 is the one unsigned type: its right shift fills with zeros.
    return b.binary("shr_logical" if dtype == torch.uint8 else "shr_arith", xs, ys)


@register(aten.bitwise_left_shift.Tensor, aten.bitwise_left_shift.Tensor_Scalar,
          aten.bitwise_left_shift.Scalar_Tensor, aten.__lshift__.Tensor, aten.__lshift__.Scalar)
def lshift(b: GraphBuilder, x: Value, y: Value) -> Value:
    return _shift(b, x, y, left=True)


@register(aten.bitwise_right_shift.Tensor, aten.bitwise_right_shift.Tensor_Scalar,
          aten.bitwise_right_shift.Scalar_Tensor, aten.__rshift__.Tensor, aten.__rshift__.Scalar)
def rshift(b: GraphBuilder, x: Value, y: Value) -> Value:
    return _shift(b, x, y, left=False)


# -- selection -------------------------------------------------------------------------------

@register(aten.where.self)
def where(b: GraphBuilder, cond: Value, x: Value, y: Value) -> Value:
    dtype = result_type(x, y)
    shape = broadcast_shapes(cond.shape, x.shape, y.shape)
    c = broadcast_to(b, _to_bool(b, cond), shape)
    xs, ys = promote(b, x, y, dtype=dtype, shape=shape)
    return b.select(c, xs, ys)


@register(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(b: GraphBuilder, x: Value, mask: Value, value: Value) -> Value:
    _reject(mask.dtype != torch.bool, f"masked_fill_ only supports boolean masks, but got mask with dtype {mask.dtype}")
    _reject(not value.wrapped and value.rank != 0,
            f"masked_fill_ only supports a 0-dimensional value tensor, but got tensor with {value.rank} dimension(s).")
    _check_fill_const(x, value)
    shape = broadcast_shapes(x.shape, mask.shape)
    xs = broadcast_to(b, x, shape)
    return b.select(broadcast_to(b, mask, shape), _s(b, value, xs), xs)
