"""Lowerings: random sampling (uniform, normal, bernoulli, random_, exponential & co., randperm,
multinomial, dropout).

All randomness comes from the IR's counter-based generators (``b.rng_uniform`` /
``b.rng_normal``: Philox keyed by the generator's seed, counters from its offset), so results
are reproducible per (seed, offset) in every mode but are not CPU's bit stream; tests check
distributions. The ``Generator?`` argument always arrives as None (the runtime binds the
generator's state). Half types sample and transform in float32 and round once, as CPU does.

The in-place samplers (``uniform_``, ``exponential_``, ``random_``, ...) reach their functional
overloads through apply.py; ``normal_`` has no same-named functional overload
(``normal_functional`` is its functional form), so it is registered directly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..ir.builder import GraphBuilder, Value
from .core import broadcast_shapes, broadcast_to, opmath
from .registry import register

aten = torch.ops.aten


# -- helpers ------------------------------------------------------------------------------------

def _float_dtype(x: Value, what: str) -> torch.dtype:
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"{what} expects a floating point tensor, but got {x.dtype}")
    return x.dtype


def _u(b: GraphBuilder, dtype: torch.dtype, shape: Sequence[int]) -> Value:
    """Uniform [0, 1) in dtype's compute type (float32 for half types)."""
    return b.rng_uniform(opmath(dtype), shape)


def _s(b: GraphBuilder, v: Value | float, dtype: torch.dtype, shape: Sequence[int]) -> Value:
    """A scalar argument (runtime Value or Python number) broadcast to shape in dtype."""
    c = v if isinstance(v, Value) else b.constant(float(v), dtype)
    return b.broadcast_in_dim(b.convert(b.reshape(c, []) if c.rank else c, dtype), shape, ())


# -- continuous distributions -------------------------------------------------------------------

@register(aten.uniform.default)
def uniform(b: GraphBuilder, x: Value, from_: Value | float = 0.0, to: Value | float = 1.0, generator=None) -> Value:
    dt = _float_dtype(x, "uniform_")
    comp = opmath(dt)
    u = _u(b, dt, x.shape)
    lo = _s(b, from_, comp, x.shape)
    r = b.add(lo, b.mul(u, b.sub(_s(b, to, comp, x.shape), lo)))
    return b.convert(r, dt)


def _normal(b: GraphBuilder, mean: Value, std: Value, shape: Sequence[int], dtype: torch.dtype) -> Value:
    comp = opmath(dtype)
    z = b.rng_normal(comp, shape)
    m = broadcast_to(b, b.convert(mean, comp), shape)
    s = broadcast_to(b, b.convert(std, comp), shape)
    return b.convert(b.add(m, b.mul(z, s)), dtype)


@register(aten.normal_functional.default)
def normal_functional(b: GraphBuilder, x: Value, mean: Value | float = 0.0, std: Value | float = 1.0,
                      generator=None) -> Value:
    dt = _float_dtype(x, "normal_")
    comp = opmath(dt)
    return _normal(b, _s(b, mean, comp, ()), _s(b, std, comp, ()), x.shape, dt)


@register(aten.normal_.default)
def normal_inplace(b: GraphBuilder, x: Value, mean=0.0, std=1.0, generator=None) -> Value:
    # A mutating lowering returns the new value of self (the alias return is handled by apply).
    return normal_functional(b, x, mean, std, generator)


@register(aten.normal.Tensor_float)
def normal_tensor_float(b: GraphBuilder, mean: Value, std: Value, generator=None) -> Value:
    dt = _float_dtype(mean, "normal")
    return _normal(b, mean, std, mean.shape, dt)


@register(aten.normal.float_Tensor)
def normal_float_tensor(b: GraphBuilder, mean: Value, std: Value, generator=None) -> Value:
    dt = _float_dtype(std, "normal")
    return _normal(b, mean, std, std.shape, dt)


@register(aten.normal.Tensor_Tensor)
def normal_tensor_tensor(b: GraphBuilder, mean: Value, std: Value, generator=None) -> Value:
    dt = torch.promote_types(mean.dtype, std.dtype)
    if not dt.is_floating_point:
        raise RuntimeError("normal expects floating-point mean and std")
    shape = broadcast_shapes(mean.shape, std.shape)
    return _normal(b, mean, std, shape, dt)


@register(aten.normal.float_float)
def normal_float_float(b: GraphBuilder, mean: Value, std: Value, size: Sequence[int], generator=None,
                       dtype=None, layout=None, device=None, pin_memory=None) -> Value:
    dt = dtype or torch.get_default_dtype()
    return _normal(b, mean, std, list(size), dt)


@register(aten.exponential.default)
def exponential(b: GraphBuilder, x: Value, lambd: Value | float = 1.0, generator=None) -> Value:
    dt = _float_dtype(x, "exponential_")
    comp = opmath(dt)
    # -log(1 - u) / lambda; 1 - u is in (0, 1], so the result is finite and >= 0.
    one = b.full(1.0, comp, x.shape)
    e = b.neg(b.log(b.sub(one, _u(b, dt, x.shape))))
    return b.convert(b.div(e, _s(b, lambd, comp, x.shape)), dt)


@register(aten.geometric.default)
def geometric(b: GraphBuilder, x: Value, p: Value | float, generator=None) -> Value:
    # Number of Bernoulli(p) trials up to the first success: ceil(log(1 - u) / log(1 - p)), >= 1.
    comp = torch.float64
    one = b.full(1.0, comp, x.shape)
    u = b.rng_uniform(comp, x.shape)
    k = b.ceil(b.div(b.log(b.sub(one, u)), b.log(b.sub(one, _s(b, p, comp, x.shape)))))
    k = b.max(k, one)
    return b.convert(k, x.dtype)


@register(aten.log_normal.default)
def log_normal(b: GraphBuilder, x: Value, mean: Value | float = 1.0, std: Value | float = 2.0,
               generator=None) -> Value:
    dt = _float_dtype(x, "log_normal_")
    comp = opmath(dt)
    z = _normal(b, _s(b, mean, comp, ()), _s(b, std, comp, ()), x.shape, comp)
    return b.convert(b.exp(z), dt)


@register(aten.cauchy.default)
def cauchy(b: GraphBuilder, x: Value, median: Value | float = 0.0, sigma: Value | float = 1.0,
           generator=None) -> Value:
    dt = _float_dtype(x, "cauchy_")
    comp = opmath(dt)
    half = b.full(0.5, comp, x.shape)
    t = b.tan(b.mul(b.full(math.pi, comp, x.shape), b.sub(_u(b, dt, x.shape), half)))
    return b.convert(b.add(_s(b, median, comp, x.shape), b.mul(_s(b, sigma, comp, x.shape), t)), dt)


# -- discrete distributions ---------------------------------------------------------------------

def _bernoulli(b: GraphBuilder, x: Value, p: Value) -> Value:
    u = b.rng_uniform(torch.float64, x.shape)
    hit = b.compare("lt", u, broadcast_to(b, b.convert(p, torch.float64), x.shape))
    return b.convert(hit, x.dtype)


@register(aten.bernoulli.default)
def bernoulli(b: GraphBuilder, x: Value, generator=None) -> Value:
    # self holds the probabilities
    return _bernoulli(b, x, x)


@register(aten.bernoulli.p)
def bernoulli_p(b: GraphBuilder, x: Value, p: Value, generator=None) -> Value:
    return _bernoulli(b, x, b.reshape(p, []) if p.rank else p)


@register(aten.bernoulli.Tensor)
def bernoulli_tensor(b: GraphBuilder, x: Value, p: Value, generator=None) -> Value:
    return _bernoulli(b, x, p)


def _dtype_range(dtype: torch.dtype) -> tuple[int, int]:
    """random_()'s default [low, high] (inclusive): integers' full non-negative range, and
    0..2^mantissa for floats (every integer there is exact)."""
    if dtype == torch.bool:
        return 0, 1
    if dtype.is_floating_point:
        digits = {torch.float32: 24, torch.float64: 53, torch.float16: 11, torch.bfloat16: 8}[dtype]
        return 0, 2 ** digits
    return 0, torch.iinfo(dtype).max


def _randint(b: GraphBuilder, x: Value, lo: int, hi_excl: int) -> Value:
    """Uniform integers in [lo, hi_excl) as x's dtype: floor(lo + u * range) with a float64 u."""
    span = hi_excl - lo
    if span <= 0:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={lo} >= to={hi_excl}")
    u = b.rng_uniform(torch.float64, x.shape)
    k = b.floor(b.mul(u, b.full(float(span), torch.float64, x.shape)))
    # float64 rounding can reach span itself for huge spans: clamp to the last value
    k = b.min(k, b.full(float(span - 1), torch.float64, x.shape))
    if span > 2 ** 53:  # add in int64 so lo stays exact
        r = b.add(b.convert(k, torch.int64), b.full(lo, torch.int64, x.shape))
    else:
        r = b.add(k, b.full(float(lo), torch.float64, x.shape))
    return b.convert(r, x.dtype)


@register(aten.random.default)
def random_default(b: GraphBuilder, x: Value, generator=None) -> Value:
    lo, hi = _dtype_range(x.dtype)
    return _randint(b, x, lo, hi + 1)


@register(aten.random.to)
def random_to(b: GraphBuilder, x: Value, to: int, generator=None) -> Value:
    return _randint(b, x, 0, to)


@register(getattr(aten.random, "from"))
def random_from(b: GraphBuilder, x: Value, from_: int, to: int | None, generator=None) -> Value:
    # to=None: up to the dtype's default upper bound, inclusive
    return _randint(b, x, from_, (_dtype_range(x.dtype)[1] + 1) if to is None else to)


def _randperm(b: GraphBuilder, n: int, dtype: torch.dtype | None) -> Value:
    if isinstance(dtype, int):  # a schema default (dtype=4) can arrive as its ScalarType code
        from .bridge import _SCALAR_TYPES
        dtype = _SCALAR_TYPES[dtype]
    dtype = dtype or torch.int64
    if n < 0:
        raise RuntimeError(f"n must be non-negative, got{n}")
    if n == 0:
        return b.full(0, dtype, [0])
    # argsort of float64 uniform keys: a uniformly random permutation (ties have probability ~n^2/2^53)
    keys = b.rng_uniform(torch.float64, [n])
    return b.convert(b.sort(keys, 0), dtype)


@register(aten.randperm.default)
def randperm(b: GraphBuilder, n: int, dtype=None, layout=None, device=None, pin_memory=None) -> Value:
    return _randperm(b, n, dtype)


@register(aten.randperm.generator)
def randperm_generator(b: GraphBuilder, n: int, generator=None, dtype=None, layout=None, device=None,
                       pin_memory=None) -> Value:
    return _randperm(b, n, dtype)


@register(aten.multinomial.default)
def multinomial(b: GraphBuilder, probs: Value, num_samples: int, replacement: bool = False,
                generator=None) -> Value:
    if probs.rank not in (1, 2):
        raise RuntimeError(f"prob_dist must be 1 or 2 dim, got {probs.rank}")
    n = probs.shape[-1]
    if n == 0:
        raise RuntimeError("multinomial: number of categories cannot be zero")
    if not replacement and num_samples > n:
        raise RuntimeError("multinomial: cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    p = b.convert(probs if probs.rank == 2 else b.reshape(probs, [1, n]), torch.float64)
    rows = p.shape[0]
    if num_samples == 0:
        return b.full(0, torch.int64, list(probs.shape[:-1]) + [0])
    if replacement:
        # Inverse CDF: sample i is the number of categories whose normalized CDF is <= u.
        # A zero-probability category has cdf[i] == cdf[i-1] and can never be chosen.
        cdf = b.scan(p, "sum", 1)
        total = b.reduce(p, "sum", [1])
        cdf = b.div(cdf, b.broadcast_in_dim(total, [rows, n], [0]))
        shape = [rows, num_samples, n]
        u = b.rng_uniform(torch.float64, [rows, num_samples])
        le = b.compare("le", b.broadcast_in_dim(cdf, shape, [0, 2]), b.broadcast_in_dim(u, shape, [0, 1]))
        idx = b.reduce(b.convert(le, torch.int64), "sum", [2])
        out = b.min(idx, b.full(n - 1, torch.int64, idx.shape))
    else:
        # Exponential race (Gumbel top-k): the num_samples smallest -log(u)/p are a sample without
        # replacement in draw order; p == 0 gives +inf, chosen only after every positive category.
        one = b.full(1.0, torch.float64, [rows, n])
        e = b.neg(b.log(b.sub(one, b.rng_uniform(torch.float64, [rows, n]))))
        keys = b.div(e, p)
        order = b.sort(keys, 1)
        out = b.slice(order, [0, 0], [rows, num_samples])
    return out if probs.rank == 2 else b.reshape(out, [num_samples])


# -- dropout ------------------------------------------------------------------------------------

@register(aten.native_dropout.default)
def native_dropout(b: GraphBuilder, x: Value, p: Value | float, train: bool | None) -> tuple[Value, Value]:
    if train is not None and not train:
        return x, b.full(True, torch.bool, x.shape)
    comp = opmath(x.dtype) if x.dtype.is_floating_point else torch.float32
    p1m = b.sub(b.constant(1.0, torch.float64), b.convert(_s(b, p, torch.float64, ()), torch.float64))
    keep = b.compare("lt", b.rng_uniform(torch.float64, x.shape), b.broadcast_in_dim(p1m, x.shape, ()))
    # scale = 1 / (1 - p), or 0 when p == 1 (everything dropped), as CPU does
    zero = b.constant(0.0, torch.float64)
    scale = b.select(b.compare("eq", p1m, zero), zero, b.div(b.constant(1.0, torch.float64), p1m))
    scale = b.broadcast_in_dim(b.convert(scale, comp), x.shape, ())
    xm = b.select(keep, b.convert(x, comp), b.full(0.0, comp, x.shape))
    return b.convert(b.mul(xm, scale), x.dtype), keep


@register(aten.native_dropout_backward.default)
def native_dropout_backward(b: GraphBuilder, grad: Value, mask: Value, scale: Value | float) -> Value:
    # CPU computes grad * mask * scale: grad * mask keeps grad's dtype (bool & bool for bool grads),
    # and the double scale then promotes integer and bool results to the default float dtype.
    shape = broadcast_shapes(grad.shape, mask.shape)
    g = broadcast_to(b, grad, shape)
    m = broadcast_to(b, b.convert(mask, grad.dtype), shape)
    gm = b.binary("and", g, m) if grad.dtype == torch.bool else b.mul(g, m)
    res = grad.dtype if grad.dtype.is_floating_point else torch.get_default_dtype()
    comp = opmath(res)
    return b.convert(b.mul(b.convert(gm, comp), _s(b, scale, comp, shape)), res)
