"""Lowerings: activations and their backward ops (relu, relu6, leaky_relu, gelu, silu, mish,
softplus, hardtanh, hardswish, hardsigmoid, elu, celu, selu, threshold, log_sigmoid, glu, and
the sigmoid/tanh backward ops).

Float activations compute in the CPU "opmath" dtype (float32 for half types) and round once to
the input's dtype, as CPU kernels do (elementwise.py has the shared conventions).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..ir.builder import GraphBuilder, Value
from .core import canonical_dim, promote, result_dtypes, result_type
from .elementwise import _k, _map, _opmath, _reject, _s, _tname, _where, neg
from .registry import register

aten = torch.ops.aten

def _act(b: GraphBuilder, x: Value, fn: Callable[[Value], Value], name: str = "") -> Value:
    """Float activations: computed in opmath, returned in x's dtype."""
    _reject(not x.dtype.is_floating_point, f"\"{name}\" not implemented for '{_tname(x.dtype)}'")
    v = b.convert(x, _opmath(x.dtype))
    return b.convert(fn(v), x.dtype)


def _bwd(b: GraphBuilder, dy: Value, x: Value, fn: Callable[[Value, Value], Value]) -> Value:
    """Backward ops: (grad, saved) promoted and broadcast together, computed in opmath."""
    return _map(b, fn, dy, x)


@register(aten.relu.default)
def relu(b: GraphBuilder, x: Value) -> Value:
    _reject(x.dtype == torch.bool, "Boolean inputs not supported for relu")
    return b.max(x, _k(b, 0, x))


def _erf_cdf(b: GraphBuilder, v: Value) -> Value:
    return b.mul(_k(b, 0.5, v), b.add(_k(b, 1, v), b.erf(b.mul(v, _k(b, math.sqrt(0.5), v)))))


_GELU_BETA = math.sqrt(2.0) * (2.0 / math.sqrt(math.pi)) * 0.5  # sqrt(2/pi)
_GELU_KAPPA = 0.044715


@register(aten.gelu.default)
def gelu(b: GraphBuilder, x: Value, approximate: str = "none") -> Value:
    def f(v: Value) -> Value:
        if approximate == "tanh":
            cube = b.mul(b.mul(v, v), v)
            inner = b.mul(_k(b, _GELU_BETA, v), b.add(v, b.mul(_k(b, _GELU_KAPPA, v), cube)))
            return b.mul(b.mul(_k(b, 0.5, v), v), b.add(_k(b, 1, v), b.tanh(inner)))
        return b.mul(v, _erf_cdf(b, v))
    return _act(b, x, f, "GeluKernelImpl")


@register(aten.gelu_backward.default)
def gelu_backward(b: GraphBuilder, dy: Value, x: Value, approximate: str = "none") -> Value:
    def f(g: Value, v: Value) -> Value:
        if approximate == "tanh":
            x_sq = b.mul(v, v)
            cube = b.mul(x_sq, v)
            inner = b.mul(_k(b, _GELU_BETA, v), b.add(v, b.mul(_k(b, _GELU_KAPPA, v), cube)))
            t = b.tanh(inner)
            left = b.mul(_k(b, 0.5, v), v)
            right = b.add(_k(b, 1, v), t)
            left_d = b.mul(_k(b, 0.5, v), right)
            tanh_d = b.sub(_k(b, 1, v), b.mul(t, t))
            inner_d = b.mul(_k(b, _GELU_BETA, v), b.add(_k(b, 1, v), b.mul(_k(b, 3 * _GELU_KAPPA, v), x_sq)))
            right_d = b.mul(b.mul(left, tanh_d), inner_d)
            return b.mul(g, b.add(left_d, right_d))
        pdf = b.mul(b.exp(b.mul(_k(b, -0.5, v), b.mul(v, v))), _k(b, 1.0 / math.sqrt(2 * math.pi), v))
        return b.mul(g, b.add(_erf_cdf(b, v), b.mul(v, pdf)))
    return _bwd(b, dy, x, f)


def _sigmoid(b: GraphBuilder, v: Value) -> Value:
    return b.div(_k(b, 1, v), b.add(_k(b, 1, v), b.exp(b.neg(v))))


@register(aten.silu.default)
def silu(b: GraphBuilder, x: Value) -> Value:
    return _act(b, x, lambda v: b.div(v, b.add(_k(b, 1, v), b.exp(b.neg(v)))), "silu")


@register(aten.silu_backward.default)
def silu_backward(b: GraphBuilder, dy: Value, x: Value) -> Value:
    def f(g: Value, v: Value) -> Value:
        s = _sigmoid(b, v)
        return b.mul(b.mul(g, s), b.add(_k(b, 1, v), b.mul(v, b.sub(_k(b, 1, v), s))))
    return _bwd(b, dy, x, f)


@register(aten.sigmoid_backward.default)
def sigmoid_backward(b: GraphBuilder, dy: Value, y: Value) -> Value:
    # CPU computes float16 in half arithmetic but bfloat16 in float32.
    comp = result_type(dy, y)
    comp = torch.float32 if comp == torch.bfloat16 else comp
    return _map(b, lambda g, v: b.mul(b.mul(g, b.sub(_k(b, 1, v), v)), v), dy, y, comp=comp)


@register(aten.tanh_backward.default)
def tanh_backward(b: GraphBuilder, dy: Value, y: Value) -> Value:
    return _bwd(b, dy, y, lambda g, v: b.mul(g, b.sub(_k(b, 1, v), b.mul(v, v))))


@register(aten.softplus.default)
def softplus(b: GraphBuilder, x: Value, beta: Value, threshold: Value) -> Value:
    def f(v: Value) -> Value:
        bv = b.mul(v, _s(b, beta, v))
        soft = b.div(b.log1p(b.exp(bv)), _s(b, beta, v))
        return _where(b, b.compare("gt", bv, _s(b, threshold, v)), v, soft)
    return _act(b, x, f, "softplus")


@register(aten.softplus_backward.default)
def softplus_backward(b: GraphBuilder, dy: Value, x: Value, beta: Value, threshold: Value) -> Value:
    def f(g: Value, v: Value) -> Value:
        bv = b.mul(v, _s(b, beta, v))
        z = b.exp(bv)
        return _where(b, b.compare("gt", bv, _s(b, threshold, v)), g, b.div(b.mul(g, z), b.add(z, _k(b, 1, z))))
    return _bwd(b, dy, x, f)


@register(aten.leaky_relu.default)
def leaky_relu(b: GraphBuilder, x: Value, negative_slope: Value) -> Value:
    return _act(b, x, lambda v: _where(b, b.compare("gt", v, _k(b, 0, v)), v, b.mul(v, _s(b, negative_slope, v))),
                "leaky_relu")


@register(aten.leaky_relu_backward.default)
def leaky_relu_backward(b: GraphBuilder, dy: Value, x: Value, negative_slope: Value, self_is_result: bool) -> Value:
    return _bwd(b, dy, x, lambda g, v: _where(b, b.compare("gt", v, _k(b, 0, v)), g,
                                              b.mul(g, _s(b, negative_slope, g))))


def _hardsig_core(b: GraphBuilder, v: Value) -> Value:
    return b.min(b.max(b.add(v, _k(b, 3, v)), _k(b, 0, v)), _k(b, 6, v))


@register(aten.hardswish.default)
def hardswish(b: GraphBuilder, x: Value) -> Value:
    return _act(b, x, lambda v: b.div(b.mul(v, _hardsig_core(b, v)), _k(b, 6, v)), "hardswish")


@register(aten.hardswish_backward.default)
def hardswish_backward(b: GraphBuilder, dy: Value, x: Value) -> Value:
    def f(g: Value, v: Value) -> Value:
        mid = b.mul(g, b.add(b.div(v, _k(b, 3, v)), _k(b, 0.5, v)))
        # Tested as (x >= 3) and (x <= -3), so NaN takes the middle branch (NaN), as on CPU.
        out = _where(b, b.compare("ge", v, _k(b, 3, v)), g, mid)
        return _where(b, b.compare("le", v, _k(b, -3, v)), _k(b, 0, g), out)
    return _bwd(b, dy, x, f)


@register(aten.hardsigmoid.default)
def hardsigmoid(b: GraphBuilder, x: Value) -> Value:
    return _act(b, x, lambda v: b.div(_hardsig_core(b, v), _k(b, 6, v)), "hardsigmoid")


@register(aten.hardsigmoid_backward.default)
def hardsigmoid_backward(b: GraphBuilder, dy: Value, x: Value) -> Value:
    def f(g: Value, v: Value) -> Value:
        inside = b.binary("and", b.compare("gt", v, _k(b, -3, v)), b.compare("lt", v, _k(b, 3, v)))
        return _where(b, inside, b.div(g, _k(b, 6, g)), _k(b, 0, g))
    return _bwd(b, dy, x, f)


def elu_values(b: GraphBuilder, x: Value, alpha: Value, scale: Value, input_scale: Value) -> Value:
    def f(v: Value) -> Value:
        neg = b.mul(b.expm1(b.mul(v, _s(b, input_scale, v))), b.mul(_s(b, alpha, v), _s(b, scale, v)))
        return _where(b, b.compare("le", v, _k(b, 0, v)), neg, b.mul(v, _s(b, scale, v)))
    return _act(b, x, f, "elu")


@register(aten.elu.default)
def elu(b: GraphBuilder, x: Value, alpha: Value, scale: Value, input_scale: Value) -> Value:
    return elu_values(b, x, alpha, scale, input_scale)


@register(aten.elu_backward.default)
def elu_backward(b: GraphBuilder, dy: Value, alpha: Value, scale: Value, input_scale: Value, is_result: bool,
                 x: Value) -> Value:
    def f(g: Value, v: Value) -> Value:
        negcoef = b.mul(_s(b, alpha, v), _s(b, scale, v))
        ipt = _s(b, input_scale, v)
        if is_result:
            neg = b.mul(b.mul(g, ipt), b.add(v, negcoef))
        else:
            neg = b.mul(b.mul(b.mul(g, ipt), negcoef), b.exp(b.mul(v, ipt)))
        # CPU's vectorized kernel selects on x > 0, so a NaN input takes the negative branch.
        return _where(b, b.compare("gt", v, _k(b, 0, v)), b.mul(g, _s(b, scale, v)), neg)
    return _bwd(b, dy, x, f)


@register(aten.celu.default)
def celu(b: GraphBuilder, x: Value, alpha: Value) -> Value:
    one = b.constant(1.0, torch.float64)
    inv_alpha = b.div(one, b.convert(alpha, torch.float64))  # CPU: elu(x, alpha, 1, 1/alpha) in double
    return elu_values(b, x, alpha, one, inv_alpha)


@register(aten.selu.default)
def selu(b: GraphBuilder, x: Value) -> Value:
    alpha = b.constant(1.6732632423543772848170429916717, torch.float64)
    scale = b.constant(1.0507009873554804934193349852946, torch.float64)
    return elu_values(b, x, alpha, scale, b.constant(1.0, torch.float64))


def _softplus1(b: GraphBuilder, v: Value) -> Value:
    return b.log1p(b.exp(v))


@register(aten.mish.default)
def mish(b: GraphBuilder, x: Value) -> Value:
    return _act(b, x, lambda v: b.mul(v, b.tanh(_softplus1(b, v))), "mish")


@register(aten.mish_backward.default)
def mish_backward(b: GraphBuilder, dy: Value, x: Value) -> Value:
    def f(g: Value, v: Value) -> Value:
        s = _sigmoid(b, v)
        t = b.tanh(_softplus1(b, v))
        return b.mul(g, b.add(t, b.mul(b.mul(v, s), b.sub(_k(b, 1, t), b.mul(t, t)))))
    return _bwd(b, dy, x, f)


@register(aten.hardtanh.default)
def hardtanh(b: GraphBuilder, x: Value, min_val: Value, max_val: Value) -> Value:
    _reject(x.dtype == torch.bool, "Bool inputs not supported for hardtanh")
    # The bounds are cast to x's type (hardtanh does not promote, unlike clamp).
    return b.min(b.max(x, _s(b, min_val, x)), _s(b, max_val, x))


@register(aten.hardtanh_backward.default)
def hardtanh_backward(b: GraphBuilder, dy: Value, x: Value, min_val: Value, max_val: Value) -> Value:
    def f(g: Value, v: Value) -> Value:
        # Tested as min < x < max, so a NaN input gets a zero gradient, as on CPU.
        inside = b.binary("and", b.compare("gt", v, _s(b, min_val, v)), b.compare("lt", v, _s(b, max_val, v)))
        return _where(b, inside, g, _k(b, 0, g))
    return _bwd(b, dy, x, f)


@register(aten.relu6.default)
def relu6(b: GraphBuilder, x: Value) -> Value:
    return b.min(b.max(x, _k(b, 0, x)), _k(b, 6, x))


@register(aten.threshold.default)
def threshold(b: GraphBuilder, x: Value, threshold: Value, value: Value) -> Value:
    # Compared and filled in x's own type, like the CPU kernel's scalar_t arithmetic.
    return _where(b, b.compare("le", x, _s(b, threshold, x)), _s(b, value, x), x)


@register(aten.threshold_backward.default)
def threshold_backward(b: GraphBuilder, dy: Value, x: Value, threshold: Value) -> Value:
    dtype = result_type(dy, x)
    g, v = promote(b, dy, x, dtype=dtype)
    return _where(b, b.compare("le", v, _s(b, threshold, v)), _k(b, 0, g), g)


@register(aten.log_sigmoid_forward.default)
def log_sigmoid_forward(b: GraphBuilder, x: Value) -> tuple[Value, Value]:
    _reject(not x.dtype.is_floating_point, f"\"log_sigmoid_forward_cpu\" not implemented for '{_tname(x.dtype)}'")
    v = b.convert(x, _opmath(x.dtype))
    z = b.exp(b.neg(b.abs(v)))
    out = b.sub(b.min(v, _k(b, 0, v)), b.log1p(z))
    return b.convert(out, x.dtype), b.convert(z, x.dtype)


@register(aten.log_sigmoid_backward.default)
def log_sigmoid_backward(b: GraphBuilder, dy: Value, x: Value, buffer: Value) -> Value:
    comp, res = result_dtypes(dy, x, buffer)
    g, v, z = promote(b, dy, x, buffer, dtype=comp)
    neg = b.compare("lt", v, _k(b, 0, v))
    max_deriv = _where(b, neg, _k(b, 1, v), _k(b, 0, v))
    sgn = _where(b, neg, _k(b, 1, v), _k(b, -1, v))
    d = b.sub(max_deriv, b.mul(sgn, b.div(z, b.add(_k(b, 1, z), z))))
    return b.convert(b.mul(d, g), res)


def _halves(b: GraphBuilder, x: Value, dim: int) -> tuple[Value, Value]:
    n = x.shape[dim]
    _reject(n % 2 != 0, f"Halving dimension must be even, but dimension {dim} is size {n}")
    lo, hi = [0] * x.rank, list(x.shape)
    hi[dim] = n // 2
    a = b.slice(x, lo, hi)
    lo2 = list(lo)
    lo2[dim] = n // 2
    return a, b.slice(x, lo2, list(x.shape))


@register(aten.glu.default)
def glu(b: GraphBuilder, x: Value, dim: int = -1) -> Value:
    _reject(x.rank == 0, "glu does not support scalars because halving size must be even")
    dim = canonical_dim(dim, x.rank)
    a, g = _halves(b, b.convert(x, _opmath(x.dtype)), dim)
    return b.convert(b.mul(a, _sigmoid(b, g)), x.dtype)


@register(aten.glu_backward.default)
def glu_backward(b: GraphBuilder, dy: Value, x: Value, dim: int) -> Value:
    dim = canonical_dim(dim, x.rank)
    comp = _opmath(x.dtype)
    a, g = _halves(b, b.convert(x, comp), dim)
    gy = b.convert(dy, comp)
    # CPU stores sigmoid(second half) in the input's dtype first, then reuses it for both halves.
    s = b.convert(b.convert(_sigmoid(b, g), x.dtype), comp)
    da = b.mul(s, gy)
    dg = b.mul(b.mul(b.mul(b.sub(_k(b, 1, s), s), s), a), gy)
    return b.convert(b.concatenate([da, dg], dim), x.dtype)


__all__ = ["add_values", "mul_values", "div_values", "lerp_values", "addcmul_values", "addcdiv_values",
           "clamp_values", "compare_values", "elu_values"]
