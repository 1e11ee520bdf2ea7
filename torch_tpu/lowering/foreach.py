"""Lowerings: the ``_foreach_*`` family, the fused optimizer kernels and GradScaler's AMP ops.

A foreach op is one program over a list of tensors, so a whole optimizer step lowers to one
graph. PyTorch's CPU implementation of the ``_foreach_*`` ops is the "slow path": the plain
per-tensor op applied to each list element (``_foreach_add.Scalar`` is ``t.add(scalar)``), so
each element reuses the elementwise lowering and gets exactly its type promotion.

The fused optimizer kernels (``_fused_adam``, ``_fused_adamw``, ``_fused_sgd``) follow the CPU
kernels' math: step-dependent coefficients in float64, elementwise math in the opmath type
(float32 for half parameters), and no update at all where ``found_inf`` is set. The
functional overloads return the new values of every list the in-place op mutates, in schema
order, so ``_fused_adam_`` and friends work through apply.py's write-back.

Scalar[] arguments are Python lists (baked); Scalar/float arguments are runtime 0-d Values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from ..ir.builder import GraphBuilder, Value
from . import creation
from . import elementwise as ew
from .apply import NeedsBakedScalars
from .core import broadcast_to, opmath
from .registry import LOWERINGS, op_key, register

aten = torch.ops.aten


# -- helpers ---------------------------------------------------------------------------------

def _number(b: GraphBuilder, x: Value | float | int | bool) -> Value:
    """An element of a Scalar[] list as a wrapped 0-d value (promotes like a number).

    Elements arrive as runtime inputs (a Value) from the dispatcher, so an optimizer's
    per-step sizes never recompile; as Python numbers when the caller bakes them (compiled
    graphs, baked-scalar retries), which become constants."""
    if isinstance(x, Value):
        return x
    dtype = torch.bool if isinstance(x, bool) else torch.int64 if isinstance(x, int) else torch.float64
    v = b.constant(x, dtype)
    v.wrapped = True
    return v


def _element_scalar(b: GraphBuilder, t: Value, i: int) -> Value:
    """Element i of a 1-D tensor of scalars, as a wrapped number (CPU reads it as a Scalar)."""
    v = b.reshape(b.slice(t, [i], [i + 1]), ())
    v = b.convert(v, torch.float64 if t.dtype.is_floating_point else torch.bool if t.dtype == torch.bool
                  else torch.int64)
    v.wrapped = True
    return v


def _check_lists(*lists: Sequence) -> None:
    n = len(lists[0])
    for other in lists[1:]:
        if len(other) != n:
            raise RuntimeError(f"Tensor lists must have the same number of tensors, got {n} and {len(other)}")


def _scalar0(b: GraphBuilder, v: Value, dtype: torch.dtype) -> Value:
    """A one-element tensor (0-d or [1]) or scalar as a 0-d Value of dtype."""
    return b.convert(b.reshape(v, ()), dtype)


def _bc(b: GraphBuilder, v: Value, like: Value) -> Value:
    """0-d v converted to like's dtype and broadcast to its shape."""
    return broadcast_to(b, b.convert(v, like.dtype), like.shape)


# -- binary and ternary arithmetic -----------------------------------------------------------

def _register_binary(name: str, fn: Callable[[GraphBuilder, Value, Value, Value | None], Value],
                     has_alpha: bool, has_tensor: bool = True) -> None:
    p = getattr(aten, f"_foreach_{name}")

    @register(p.Scalar)
    def scalar(b: GraphBuilder, xs: list[Value], s: Value) -> list[Value]:
        return [fn(b, x, s, None) for x in xs]

    @register(p.ScalarList)
    def scalar_list(b: GraphBuilder, xs: list[Value], ss: list) -> list[Value]:
        _check_lists(xs, ss)
        return [fn(b, x, _number(b, s), None) for x, s in zip(xs, ss)]

    if has_alpha:
        @register(p.List)
        def lst(b: GraphBuilder, xs: list[Value], ys: list[Value], alpha: Value) -> list[Value]:
            _check_lists(xs, ys)
            return [fn(b, x, y, alpha) for x, y in zip(xs, ys)]
    else:
        @register(p.List)
        def lst(b: GraphBuilder, xs: list[Value], ys: list[Value]) -> list[Value]:
            _check_lists(xs, ys)
            return [fn(b, x, y, None) for x, y in zip(xs, ys)]

    if has_tensor:
        if has_alpha:
            @register(p.Tensor)
            def tensor(b: GraphBuilder, xs: list[Value], y: Value, alpha: Value) -> list[Value]:
                return [fn(b, x, y, alpha) for x in xs]
        else:
            @register(p.Tensor)
            def tensor(b: GraphBuilder, xs: list[Value], y: Value) -> list[Value]:
                return [fn(b, x, y, None) for x in xs]


_register_binary("add", lambda b, x, y, a: ew.add_values(b, x, y, a), has_alpha=True)
_register_binary("sub", lambda b, x, y, a: ew.add_values(b, x, y, a, sub=True), has_alpha=True, has_tensor=False)
_register_binary("mul", lambda b, x, y, a: ew.mul_values(b, x, y), has_alpha=False)
_register_binary("div", lambda b, x, y, a: ew.div_values(b, x, y), has_alpha=False)
# The CPU slow path of maximum/minimum with a scalar is clamp_min/clamp_max.
_register_binary("clamp_min", lambda b, x, y, a: ew.clamp_values(b, x, y, None), has_alpha=False, has_tensor=False)
_register_binary("clamp_max", lambda b, x, y, a: ew.clamp_values(b, x, None, y), has_alpha=False, has_tensor=False)
_register_binary("maximum", lambda b, x, y, a: ew.clamp_values(b, x, y, None), has_alpha=False, has_tensor=False)
_register_binary("minimum", lambda b, x, y, a: ew.clamp_values(b, x, None, y), has_alpha=False, has_tensor=False)


@register(aten._foreach_maximum.List)
def foreach_maximum_list(b: GraphBuilder, xs: list[Value], ys: list[Value]) -> list[Value]:
    _check_lists(xs, ys)
    return [ew.maximum(b, x, y) for x, y in zip(xs, ys)]


@register(aten._foreach_minimum.List)
def foreach_minimum_list(b: GraphBuilder, xs: list[Value], ys: list[Value]) -> list[Value]:
    _check_lists(xs, ys)
    return [ew.minimum(b, x, y) for x, y in zip(xs, ys)]


def _pow(b: GraphBuilder, x: Value, y: Value) -> Value:
    return ew.pow_(b, x, y)


@register(aten._foreach_pow.List)
def foreach_pow_list(b: GraphBuilder, xs: list[Value], ys: list[Value]) -> list[Value]:
    _check_lists(xs, ys)
    return [_pow(b, x, y) for x, y in zip(xs, ys)]


@register(aten._foreach_pow.Scalar)
def foreach_pow_scalar(b: GraphBuilder, xs: list[Value], e: Value) -> list[Value]:
    return [_pow(b, x, e) for x in xs]


@register(aten._foreach_pow.ScalarList)
def foreach_pow_scalar_list(b: GraphBuilder, xs: list[Value], es: list) -> list[Value]:
    _check_lists(xs, es)
    return [_pow(b, x, _number(b, e)) for x, e in zip(xs, es)]


@register(aten._foreach_pow.ScalarAndTensor)
def foreach_pow_scalar_and_tensor(b: GraphBuilder, s: Value, es: list[Value]) -> list[Value]:
    return [_pow(b, s, e) for e in es]


def _register_pointwise(name: str, fn: Callable[..., Value]) -> None:
    p = getattr(aten, f"_foreach_{name}")

    @register(p.Scalar)
    def scalar(b: GraphBuilder, xs: list[Value], t1: list[Value], t2: list[Value], value: Value) -> list[Value]:
        _check_lists(xs, t1, t2)
        return [fn(b, x, a, c, value) for x, a, c in zip(xs, t1, t2)]

    @register(p.ScalarList)
    def scalar_list(b: GraphBuilder, xs: list[Value], t1: list[Value], t2: list[Value], ss: list) -> list[Value]:
        _check_lists(xs, t1, t2, ss)
        return [fn(b, x, a, c, _number(b, s)) for x, a, c, s in zip(xs, t1, t2, ss)]

    @register(p.Tensor)
    def tensor(b: GraphBuilder, xs: list[Value], t1: list[Value], t2: list[Value], ss: Value) -> list[Value]:
        _check_lists(xs, t1, t2)
        if ss.rank != 1 or ss.shape[0] != len(xs):
            raise RuntimeError(f"Expected length of scalars to match input of length {len(xs)} "
                               f"but got {ss.shape} instead.")
        return [fn(b, x, a, c, _element_scalar(b, ss, i)) for i, (x, a, c) in enumerate(zip(xs, t1, t2))]


_register_pointwise("addcmul", ew.addcmul_values)
_register_pointwise("addcdiv", ew.addcdiv_values)


@register(aten._foreach_lerp.List)
def foreach_lerp_list(b: GraphBuilder, xs: list[Value], ends: list[Value], ws: list[Value]) -> list[Value]:
    _check_lists(xs, ends, ws)
    return [ew.lerp(b, x, e, w) for x, e, w in zip(xs, ends, ws)]


@register(aten._foreach_lerp.Scalar)
def foreach_lerp_scalar(b: GraphBuilder, xs: list[Value], ends: list[Value], w: Value) -> list[Value]:
    _check_lists(xs, ends)
    return [ew.lerp_values(b, x, e, w) for x, e in zip(xs, ends)]


@register(aten._foreach_lerp.ScalarList)
def foreach_lerp_scalar_list(b: GraphBuilder, xs: list[Value], ends: list[Value], ws: list) -> list[Value]:
    _check_lists(xs, ends, ws)
    return [ew.lerp_values(b, x, e, _number(b, w)) for x, e, w in zip(xs, ends, ws)]


# -- unary -----------------------------------------------------------------------------------

_UNARY = ("abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1", "floor",
          "frac", "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round", "rsqrt", "sigmoid",
          "sign", "sin", "sinh", "sqrt", "tan", "tanh", "trunc")


def _register_unary(name: str) -> None:
    packet = getattr(aten, f"_foreach_{name}", None)
    if packet is None:
        return
    key = op_key(getattr(aten, name).default)

    @register(packet.default)
    def lower(b: GraphBuilder, xs: list[Value]) -> list[Value]:
        fn = LOWERINGS[key]  # looked up at call time: the elementwise table is the source
        return [fn(b, x) for x in xs]


for _name in _UNARY:
    _register_unary(_name)


@register(aten._foreach_zero.default)
def foreach_zero(b: GraphBuilder, xs: list[Value]) -> list[Value]:
    return [b.full(0, x.dtype, x.shape) for x in xs]


@register(aten._foreach_copy.default)
def foreach_copy(b: GraphBuilder, xs: list[Value], srcs: list[Value], non_blocking: bool = False) -> list[Value]:
    _check_lists(xs, srcs)
    return [creation.copy(b, x, s) for x, s in zip(xs, srcs)]


# -- reductions ------------------------------------------------------------------------------

def _vector_norm(b: GraphBuilder, x: Value, p: float, dtype: torch.dtype | None) -> Value:
    """linalg_vector_norm over all elements (what CPU's _foreach_norm runs per tensor)."""
    res = dtype if dtype is not None else x.dtype
    if not res.is_floating_point:
        raise RuntimeError(f"linalg.vector_norm: Expected a floating point or complex tensor as input. Got {res}")
    comp = opmath(res)
    v = b.convert(x, comp)
    dims = list(range(v.rank))
    a = b.abs(v)
    if p == math.inf or p == -math.inf:
        if x.numel() == 0:
            raise RuntimeError("linalg.vector_norm cannot compute the inf norm on an empty tensor because the "
                               "operation does not have an identity")
        out = b.reduce(a, "max" if p > 0 else "min", dims)
    elif p == 0:
        out = b.reduce(b.convert(b.compare("ne", v, b.full(0, comp, v.shape)), comp), "sum", dims)
    elif p == 1:
        out = b.reduce(a, "sum", dims)
    elif p == 2:
        out = b.sqrt(b.reduce(b.mul(a, a), "sum", dims))
    else:
        s = b.reduce(b.pow(a, b.full(p, comp, a.shape)), "sum", dims)
        out = b.pow(s, b.constant(1.0 / p, comp))
    return b.convert(out, res)


@register(aten._foreach_norm.Scalar, bake_scalars=True)
def foreach_norm(b: GraphBuilder, xs: list[Value], ord: Value, dtype: torch.dtype | None = None) -> list[Value]:
    # The norm's algorithm depends on ord, so ord is baked (registered with bake_scalars).
    if ord.const is None:
        raise NeedsBakedScalars()
    p = float(ord.const)
    return [_vector_norm(b, x, p, dtype) for x in xs]


@register(aten._foreach_max.default)
def foreach_max(b: GraphBuilder, xs: list[Value]) -> list[Value]:
    out = []
    for x in xs:
        if x.numel() == 0:
            raise RuntimeError("max(): Expected reduction dim to be specified for input.numel() == 0. "
                               "Specify the reduction dim with the 'dim' argument.")
        v = b.convert(x, torch.int8) if x.dtype == torch.bool else x  # the IR max is numeric
        out.append(b.convert(b.reduce(v, "max", list(range(x.rank))), x.dtype))
    return out


# -- fused optimizers ------------------------------------------------------------------------

def _keep_if(b: GraphBuilder, skip: Value | None, old: Value, new: Value) -> Value:
    """new, or old where found_inf says this step is skipped."""
    if skip is None:
        return new
    return b.select(broadcast_to(b, skip, new.shape), old, new)


def _skip_flag(b: GraphBuilder, found_inf: Value | None) -> Value | None:
    if found_inf is None:
        return None
    f = _scalar0(b, found_inf, torch.float32)
    return b.compare("ne", f, b.constant(0.0, torch.float32))


def _f64(b: GraphBuilder, v: Value) -> Value:
    return _scalar0(b, v, torch.float64)


def _fused_adam(b: GraphBuilder, params: list[Value], grads: list[Value], exp_avgs: list[Value],
                exp_avg_sqs: list[Value], max_exp_avg_sqs: list[Value], state_steps: list[Value], lr: Value,
                beta1: Value, beta2: Value, weight_decay: Value, eps: Value, amsgrad: bool, maximize: bool,
                grad_scale: Value | None, found_inf: Value | None, adamw: bool) -> tuple[list[Value], ...]:
    _check_lists(params, grads, exp_avgs, exp_avg_sqs, state_steps)
    if amsgrad:
        _check_lists(params, max_exp_avg_sqs)
    skip = _skip_flag(b, found_inf)
    one = b.constant(1.0, torch.float64)
    lr64, b1, b2, wd, eps64 = (_f64(b, v) for v in (lr, beta1, beta2, weight_decay, eps))
    wd_nonzero = b.compare("ne", wd, b.constant(0.0, torch.float64))
    lerp_w = b.sub(one, b1)
    sq_coef = b.sub(one, b2)
    lerp_small = b.compare("lt", b.abs(lerp_w), b.constant(0.5, torch.float64))
    decay = b.sub(one, b.mul(lr64, wd))  # AdamW's param scale, 1 - lr * weight_decay
    out_p, out_g, out_m, out_v, out_mx = [], [], [], [], []
    for i, p in enumerate(params):
        comp = opmath(p.dtype)
        step = _f64(b, state_steps[i])  # CPU reads the step as float, then computes in double
        bc1 = b.sub(one, b.pow(b1, step))
        bc2 = b.sub(one, b.pow(b2, step))
        step_size = b.div(lr64, bc1)
        bc2_sqrt = b.sqrt(bc2)

        pv = b.convert(p, comp)
        g = b.convert(grads[i], comp)
        new_grad = grads[i]
        if grad_scale is not None:
            g = b.div(g, _bc(b, _scalar0(b, grad_scale, torch.float32), g))
            new_grad = b.convert(g, grads[i].dtype)  # the kernel writes the unscaled grad back
        if maximize:
            g = b.neg(g)
        if adamw:
            pv = b.mul(pv, _bc(b, decay, pv))
        else:
            g = b.select(broadcast_to(b, wd_nonzero, g.shape), b.add(g, b.mul(pv, _bc(b, wd, pv))), g)
        m = b.convert(exp_avgs[i], comp)
        # exp_avg.lerp_(grad, 1 - beta1), in the two-sided form the kernel uses.
        w = _bc(b, lerp_w, m)
        d = b.sub(g, m)
        m_new = b.select(broadcast_to(b, lerp_small, m.shape), b.add(m, b.mul(w, d)),
                         b.sub(g, b.mul(d, b.sub(b.full(1, comp, m.shape), w))))
        v = b.convert(exp_avg_sqs[i], comp)
        v_new = b.add(b.mul(v, _bc(b, b2, v)), b.mul(b.mul(_bc(b, sq_coef, v), g), g))
        if amsgrad:
            mx = b.max(b.convert(max_exp_avg_sqs[i], comp), v_new)
            denom_src = mx
        else:
            denom_src = v_new
        denom = b.add(b.div(b.sqrt(denom_src), _bc(b, bc2_sqrt, v)), _bc(b, eps64, v))
        p_new = b.sub(pv, b.div(b.mul(_bc(b, step_size, m_new), m_new), denom))

        out_p.append(_keep_if(b, skip, p, b.convert(p_new, p.dtype)))
        out_g.append(_keep_if(b, skip, grads[i], new_grad))
        out_m.append(_keep_if(b, skip, exp_avgs[i], b.convert(m_new, exp_avgs[i].dtype)))
        out_v.append(_keep_if(b, skip, exp_avg_sqs[i], b.convert(v_new, exp_avg_sqs[i].dtype)))
        if amsgrad:
            out_mx.append(_keep_if(b, skip, max_exp_avg_sqs[i], b.convert(mx, max_exp_avg_sqs[i].dtype)))
    if not amsgrad:
        out_mx = list(max_exp_avg_sqs)  # untouched
    return out_p, out_g, out_m, out_v, out_mx


@register(aten._fused_adam.default, aten._fused_adam.tensor_lr)
def fused_adam(b: GraphBuilder, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1,
               beta2, weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None):
    return _fused_adam(b, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2,
                       weight_decay, eps, amsgrad, maximize, grad_scale, found_inf, adamw=False)


@register(aten._fused_adamw.default, aten._fused_adamw.tensor_lr)
def fused_adamw(b: GraphBuilder, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1,
                beta2, weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None):
    return _fused_adam(b, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2,
                       weight_decay, eps, amsgrad, maximize, grad_scale, found_inf, adamw=True)


@register(aten._fused_sgd.default, aten._fused_sgd.tensor_lr)
def fused_sgd(b: GraphBuilder, params: list[Value], grads: list[Value], bufs: list[Value], weight_decay: Value,
              momentum: Value, lr: Value, dampening: Value, nesterov: bool, maximize: bool, is_first_step: bool,
              grad_scale: Value | None = None, found_inf: Value | None = None):
    _check_lists(params, grads)
    # The CPU kernel requires an empty buffer list exactly when momentum == 0, so the list's
    # presence (baked) decides whether momentum is applied; no branch on the runtime value.
    use_momentum = len(bufs) > 0
    if use_momentum:
        _check_lists(params, bufs)
    skip = _skip_flag(b, found_inf)
    one = b.constant(1.0, torch.float64)
    wd, mom, lr64 = _f64(b, weight_decay), _f64(b, momentum), _f64(b, lr)
    wd_nonzero = b.compare("ne", wd, b.constant(0.0, torch.float64))
    damp = b.sub(one, _f64(b, dampening))
    out_p, out_g, out_b = [], [], []
    for i, p in enumerate(params):
        comp = opmath(p.dtype)
        pv = b.convert(p, comp)
        g = b.convert(grads[i], comp)
        new_grad = grads[i]
        if grad_scale is not None:
            g = b.div(g, _bc(b, _scalar0(b, grad_scale, torch.float32), g))
            new_grad = b.convert(g, grads[i].dtype)
        if maximize:
            g = b.neg(g)
        g = b.select(broadcast_to(b, wd_nonzero, g.shape), b.add(g, b.mul(pv, _bc(b, wd, pv))), g)
        if use_momentum:
            if is_first_step:
                buf = g
            else:
                old = b.convert(bufs[i], comp)
                buf = b.add(b.mul(old, _bc(b, mom, old)), b.mul(g, _bc(b, damp, g)))
            g = b.add(g, b.mul(buf, _bc(b, mom, buf))) if nesterov else buf
            out_b.append(_keep_if(b, skip, bufs[i], b.convert(buf, bufs[i].dtype)))
        p_new = b.sub(pv, b.mul(g, _bc(b, lr64, g)))
        out_p.append(_keep_if(b, skip, p, b.convert(p_new, p.dtype)))
        out_g.append(_keep_if(b, skip, grads[i], new_grad))
    return out_p, out_g, out_b


# -- automatic mixed precision (GradScaler) --------------------------------------------------

@register(aten._amp_foreach_non_finite_check_and_unscale.default)
def amp_non_finite_check_and_unscale(b: GraphBuilder, xs: list[Value], found_inf: Value,
                                     inv_scale: Value) -> tuple[list[Value], Value]:
    """Multiply every grad by inv_scale (in opmath); set found_inf to 1 if any is inf/NaN."""
    inv = _scalar0(b, inv_scale, torch.float32)
    bad = None
    outs = []
    for x in xs:
        comp = opmath(x.dtype)
        v = b.convert(x, comp)
        outs.append(b.convert(b.mul(v, _bc(b, inv, v)), x.dtype))
        if x.numel() == 0:
            continue
        nonfinite = b.reduce(b.unary("not", b.is_finite(v)), "or", list(range(v.rank)))
        bad = nonfinite if bad is None else b.binary("or", bad, nonfinite)
    new_found = found_inf
    if bad is not None:
        one = b.full(1.0, found_inf.dtype, found_inf.shape)
        new_found = b.select(broadcast_to(b, bad, found_inf.shape), one, found_inf)
    return outs, new_found


@register(aten._amp_update_scale.default)
def amp_update_scale(b: GraphBuilder, scale: Value, growth_tracker: Value, found_inf: Value, growth_factor: Value,
                     backoff_factor: Value, growth_interval: int) -> tuple[Value, Value]:
    """GradScaler.update: back off on overflow, grow after growth_interval clean steps."""
    s64 = b.convert(scale, torch.float64)
    found0 = b.compare("ne", _scalar0(b, found_inf, torch.float32), b.constant(0.0, torch.float32))
    found = broadcast_to(b, found0, scale.shape)
    backed = b.convert(b.mul(s64, _bc(b, _f64(b, backoff_factor), s64)), scale.dtype)
    grown = b.convert(b.mul(s64, _bc(b, _f64(b, growth_factor), s64)), scale.dtype)
    successful = b.add(growth_tracker, b.full(1, growth_tracker.dtype, growth_tracker.shape))
    at_interval = b.compare("eq", successful, b.full(growth_interval, growth_tracker.dtype, growth_tracker.shape))
    zero_t = b.full(0, growth_tracker.dtype, growth_tracker.shape)
    # The scale never grows past the float range: an inf grown scale keeps the old one.
    grown_scale = b.select(b.is_finite(grown), grown, scale)
    no_inf_scale = b.select(broadcast_to(b, at_interval, scale.shape), grown_scale, scale)
    new_scale = b.select(found, backed, no_inf_scale)
    no_inf_tracker = b.select(at_interval, zero_t, successful)
    new_tracker = b.select(broadcast_to(b, found0, growth_tracker.shape), zero_t, no_inf_tracker)
    return new_scale, new_tracker


def _route_foreach_ops() -> None:
    """Makes tpu calls of the ``_foreach_*`` ops reach their lowerings.

    Their CompositeExplicitAutograd kernels (the per-tensor slow path) rank above a backend
    fallback, so without a PrivateUse1 kernel an AdamW step ran one program per tensor and op
    (224 for TinyGPT); with it, one program per foreach op. In-place variants share the
    functional lowering (registry.py)."""
    from .. import _C

    for key in list(LOWERINGS):
        if not key.startswith("aten::_foreach_"):
            continue
        name, _, overload = key[len("aten::"):].partition(".")
        overload = overload or "default"
        for variant in (name, name + "_"):
            packet = getattr(aten, variant, None)
            if packet is not None and overload in packet.overloads():
                _C._register_lowered_op(f"aten::{variant}", overload)


_route_foreach_ops()
