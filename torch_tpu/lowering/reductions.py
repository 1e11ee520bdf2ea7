"""Lowerings: reductions and scans (sum, mean, prod, max/min/arg*, var/std, norms, logsumexp,
cumulative ops, any/all, count_nonzero, aminmax, median).

Conventions, all following PyTorch CPU:

* Integer and bool inputs of sum/prod/cumsum/cumprod accumulate in int64 unless a dtype is given.
* Half types (float16/bfloat16) are computed in float32 and rounded once at the end, which is
  what the CPU kernels do (they accumulate in ``acc_type``).
* max/min/amax/amin propagate NaN; arg-reductions return the first extreme, and a NaN counts as
  the extreme (the IR ``reduce`` argmax/argmin has exactly these semantics).
* Reducing an empty dimension with an op that has no identity (max, argmax, ...) is an error,
  decided at lowering time because shapes are static.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..ir.builder import GraphBuilder, Value
from .apply import NeedsBakedScalars
from .core import canonical_dim, canonical_dims, keepdim_shape, numel, opmath
from .registry import register

aten = torch.ops.aten

_INTEGRAL = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)


# -- helpers ------------------------------------------------------------------------------------

def _dims(dim: Sequence[int] | int | None, rank: int) -> list[int]:
    """Reduction dims; None and [] both mean every dim (ATen's convention for most reductions)."""
    return sorted(canonical_dims(dim, rank))


def _finish(b: GraphBuilder, r: Value, in_shape: Sequence[int], dims: Sequence[int], keepdim: bool) -> Value:
    """Re-insert the reduced dims as size 1 when keepdim is set."""
    if keepdim and len(in_shape) > 0:
        return b.reshape(r, keepdim_shape(in_shape, dims))
    return r


def _reduce(b: GraphBuilder, x: Value, kind: str, dims: Sequence[int], keepdim: bool) -> Value:
    return _finish(b, b.reduce(x, kind, dims), x.shape, dims, keepdim)


def _full_like(b: GraphBuilder, value: float | int | bool, like: Value, dtype: torch.dtype | None = None) -> Value:
    return b.full(value, dtype or like.dtype, like.shape)


def _count(b: GraphBuilder, n: int, like: Value) -> Value:
    """The element count n of a reduction as a value shaped like `like` (GraphBuilder.size_count)."""
    c = b.size_count(n, like.dtype)
    return b.broadcast_in_dim(c, like.shape, ()) if like.shape else c


def _bcast_back(b: GraphBuilder, r: Value, shape: Sequence[int], dims: Sequence[int]) -> Value:
    """Broadcast a reduction result (dims removed) back to the input shape."""
    kept = [d for d in range(len(shape)) if d not in dims]
    return b.broadcast_in_dim(r, shape, kept)


def _check_nonempty(x: Value, dims: Sequence[int], name: str) -> None:
    for d in dims:
        if x.shape[d] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")


def _isnan(b: GraphBuilder, x: Value) -> Value:
    return b.compare("ne", x, x)


def _const_scalar(v: Value | None, default: float | int | None = None) -> float | int | None:
    """The compile-time value of a Scalar argument; asks for a re-lowering with baked scalars."""
    if v is None:
        return default
    if not isinstance(v, Value):
        return v
    if v.const is None:
        raise NeedsBakedScalars()
    return v.const


def _sum_dtype(x: Value, dtype: torch.dtype | None) -> torch.dtype:
    if dtype is not None:
        return dtype
    return torch.int64 if x.dtype in _INTEGRAL else x.dtype


def _sum_in(b: GraphBuilder, x: Value, dims: Sequence[int], out_dtype: torch.dtype) -> Value:
    """Sum in out_dtype's opmath, result converted to out_dtype."""
    comp = opmath(out_dtype)
    if comp == torch.bool:  # sum(dtype=bool) is "any nonzero"
        return b.reduce(b.convert(x, comp), "or", dims)
    return b.convert(b.reduce(b.convert(x, comp), "sum", dims), out_dtype)


# -- sum / mean / prod --------------------------------------------------------------------------

@register(aten.sum.dim_IntList)
def sum_dim(b: GraphBuilder, x: Value, dim, keepdim: bool = False, dtype: torch.dtype | None = None) -> Value:
    dims = _dims(dim, x.rank)
    return _finish(b, _sum_in(b, x, dims, _sum_dtype(x, dtype)), x.shape, dims, keepdim)


@register(aten.sum.default)
def sum_all(b: GraphBuilder, x: Value, dtype: torch.dtype | None = None) -> Value:
    return _sum_in(b, x, list(range(x.rank)), _sum_dtype(x, dtype))


def _mean(b: GraphBuilder, x: Value, dims: list[int], keepdim: bool, dtype: torch.dtype | None) -> Value:
    out = dtype or x.dtype
    if not out.is_floating_point:
        raise RuntimeError("mean(): could not infer output dtype. Input dtype must be either a floating point or "
                           f"complex dtype. Got: {str(out).removeprefix('torch.').capitalize()}")
    comp = opmath(out)
    s = b.reduce(b.convert(x, comp), "sum", dims)
    r = b.div(s, _count(b, numel([x.shape[d] for d in dims]), s))  # n == 0 gives 0/0 = nan, like CPU
    return _finish(b, b.convert(r, out), x.shape, dims, keepdim)


@register(aten.mean.dim)
def mean_dim(b: GraphBuilder, x: Value, dim, keepdim: bool = False, dtype: torch.dtype | None = None) -> Value:
    return _mean(b, x, _dims(dim, x.rank), keepdim, dtype)


@register(aten.mean.default)
def mean_all(b: GraphBuilder, x: Value, dtype: torch.dtype | None = None) -> Value:
    return _mean(b, x, list(range(x.rank)), False, dtype)


def _prod(b: GraphBuilder, x: Value, dims: list[int], keepdim: bool, dtype: torch.dtype | None) -> Value:
    out = _sum_dtype(x, dtype)
    comp = opmath(out)
    kind = "and" if comp == torch.bool else "prod"  # prod(dtype=bool) is "all nonzero"
    r = b.convert(b.reduce(b.convert(x, comp), kind, dims), out)
    return _finish(b, r, x.shape, dims, keepdim)


@register(aten.prod.dim_int)
def prod_dim(b: GraphBuilder, x: Value, dim: int, keepdim: bool = False, dtype: torch.dtype | None = None) -> Value:
    return _prod(b, x, [canonical_dim(dim, x.rank)] if x.rank else [], keepdim, dtype)


@register(aten.prod.default)
def prod_all(b: GraphBuilder, x: Value, dtype: torch.dtype | None = None) -> Value:
    return _prod(b, x, list(range(x.rank)), False, dtype)


# -- max / min family ---------------------------------------------------------------------------

def _extreme(b: GraphBuilder, x: Value, kind: str, dims: list[int]) -> Value:
    # The IR has no bool max/min constraint, but reduce over a bool in uint8 keeps every
    # runtime simple; the result converts back exactly.
    if x.dtype == torch.bool:
        return b.convert(b.reduce(b.convert(x, torch.uint8), kind, dims), torch.bool)
    return b.reduce(x, kind, dims)


@register(aten.amax.default)
def amax(b: GraphBuilder, x: Value, dim=(), keepdim: bool = False) -> Value:
    dims = _dims(dim, x.rank)
    _check_nonempty(x, dims, "amax")
    return _finish(b, _extreme(b, x, "max", dims), x.shape, dims, keepdim)


@register(aten.amin.default)
def amin(b: GraphBuilder, x: Value, dim=(), keepdim: bool = False) -> Value:
    dims = _dims(dim, x.rank)
    _check_nonempty(x, dims, "amin")
    return _finish(b, _extreme(b, x, "min", dims), x.shape, dims, keepdim)


def _full_extreme(b: GraphBuilder, x: Value, kind: str) -> Value:
    if x.numel() == 0:
        raise RuntimeError(f"{kind}(): Expected reduction dim to be specified for input.numel() == 0. "
                           "Specify the reduction dim with the 'dim' argument.")
    return _extreme(b, x, kind, list(range(x.rank)))


@register(aten.max.default)
def max_all(b: GraphBuilder, x: Value) -> Value:
    return _full_extreme(b, x, "max")


@register(aten.min.default)
def min_all(b: GraphBuilder, x: Value) -> Value:
    return _full_extreme(b, x, "min")


def _arg(b: GraphBuilder, x: Value, kind: str, dim: int) -> Value:
    """argmax/argmin along one dim (rank >= 1)."""
    if x.dtype == torch.bool:
        x = b.convert(x, torch.uint8)
    return b.reduce(x, kind, [dim])


def _max_min_dim(b: GraphBuilder, x: Value, dim: int, keepdim: bool, kind: str) -> tuple[Value, Value]:
    d = canonical_dim(dim, x.rank)
    if x.rank == 0:  # a 0-d tensor is its own max, at index 0
        return x, b.full(0, torch.int64, ())
    if x.shape[d] == 0:
        raise IndexError(f"{kind}(): Expected reduction dim {d} to have non-zero size.")
    vals = _extreme(b, x, kind, [d])
    idx = _arg(b, x, "arg" + kind, d)
    return _finish(b, vals, x.shape, [d], keepdim), _finish(b, idx, x.shape, [d], keepdim)


@register(aten.max.dim)
def max_dim(b: GraphBuilder, x: Value, dim: int, keepdim: bool = False):
    return _max_min_dim(b, x, dim, keepdim, "max")


@register(aten.min.dim)
def min_dim(b: GraphBuilder, x: Value, dim: int, keepdim: bool = False):
    return _max_min_dim(b, x, dim, keepdim, "min")


def _argext(b: GraphBuilder, x: Value, dim: int | None, keepdim: bool, kind: str) -> Value:
    name = kind
    if x.dtype == torch.bool:  # CPU's first check (the meta kernel torch.compile traces lacks it)
        raise RuntimeError(f"{name}(): does not support bool input")
    if dim is None:
        if x.numel() == 0:
            raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0.")
        r = _arg(b, b.reshape(x, [x.numel()]), kind, 0)
        return b.reshape(r, [1] * x.rank) if keepdim else r
    d = canonical_dim(dim, x.rank)
    if x.rank == 0:
        return b.full(0, torch.int64, ())
    if x.shape[d] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")
    return _finish(b, _arg(b, x, kind, d), x.shape, [d], keepdim)


@register(aten.argmax.default)
def argmax(b: GraphBuilder, x: Value, dim: int | None = None, keepdim: bool = False) -> Value:
    return _argext(b, x, dim, keepdim, "argmax")


@register(aten.argmin.default)
def argmin(b: GraphBuilder, x: Value, dim: int | None = None, keepdim: bool = False) -> Value:
    return _argext(b, x, dim, keepdim, "argmin")


@register(aten.aminmax.default)
def aminmax(b: GraphBuilder, x: Value, dim: int | None = None, keepdim: bool = False):
    if dim is None:
        if x.numel() == 0:
            raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the operation has no "
                               "identity.")
        dims = list(range(x.rank))
        lo, hi = _extreme(b, x, "min", dims), _extreme(b, x, "max", dims)
        if keepdim:
            lo, hi = b.reshape(lo, [1] * x.rank), b.reshape(hi, [1] * x.rank)
        return lo, hi
    d = [canonical_dim(dim, x.rank)] if x.rank else []
    if d and x.shape[d[0]] == 0:
        raise IndexError("aminmax(): cannot compute aminmax over an empty dimension as the operation has no "
                         "identity.")
    return (_finish(b, _extreme(b, x, "min", d), x.shape, d, keepdim),
            _finish(b, _extreme(b, x, "max", d), x.shape, d, keepdim))


# -- var / std ----------------------------------------------------------------------------------

def _var_mean(b: GraphBuilder, x: Value, dim, correction: Value | float, keepdim: bool,
              name: str, sqrt: bool = False) -> tuple[Value, Value]:
    """(var, mean) in x's dtype (std with `sqrt`: taken in opmath, so a half-type variance past
    the type's range still gives CPU's finite std). Two-pass: mean first, then the mean of
    squared deviations."""
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"{name}(): std and var only support floating point and complex dtypes")
    dims = _dims(dim, x.rank)
    comp = opmath(x.dtype)
    xc = b.convert(x, comp)
    n = numel([x.shape[d] for d in dims])
    s = b.reduce(xc, "sum", dims)
    mean = b.div(s, _count(b, n, s))
    dev = b.sub(xc, _bcast_back(b, mean, x.shape, dims))
    m2 = b.reduce(b.mul(dev, dev), "sum", dims)
    # divisor = max(N - correction, 0): correction is a runtime scalar, so compute it in-graph.
    c = correction if isinstance(correction, Value) else b.constant(float(correction), comp)
    c = b.convert(c, comp)
    den = b.max(b.sub(_count(b, n, c), c), b.constant(0.0, comp))
    var = b.div(m2, b.broadcast_in_dim(den, m2.shape, ()))
    if sqrt:
        var = b.sqrt(var)
    return (_finish(b, b.convert(var, x.dtype), x.shape, dims, keepdim),
            _finish(b, b.convert(mean, x.dtype), x.shape, dims, keepdim))


@register(aten.var.correction)
def var_correction(b, x, dim=None, correction=None, keepdim=False):
    return _var_mean(b, x, dim, 1.0 if correction is None else correction, keepdim, "var")[0]


@register(aten.var.dim)
def var_dim(b, x, dim, unbiased=True, keepdim=False):
    return _var_mean(b, x, dim, float(unbiased), keepdim, "var")[0]


@register(aten.var.default)
def var_all(b, x, unbiased=True):
    return _var_mean(b, x, None, float(unbiased), False, "var")[0]


@register(aten.std.correction)
def std_correction(b, x, dim=None, correction=None, keepdim=False):
    return _var_mean(b, x, dim, 1.0 if correction is None else correction, keepdim, "std", sqrt=True)[0]


@register(aten.std.dim)
def std_dim(b, x, dim, unbiased=True, keepdim=False):
    return _var_mean(b, x, dim, float(unbiased), keepdim, "std", sqrt=True)[0]


@register(aten.std.default)
def std_all(b, x, unbiased=True):
    return _var_mean(b, x, None, float(unbiased), False, "std", sqrt=True)[0]


@register(aten.var_mean.correction)
def var_mean_correction(b, x, dim=None, correction=None, keepdim=False):
    return _var_mean(b, x, dim, 1.0 if correction is None else correction, keepdim, "var_mean")


@register(aten.var_mean.dim)
def var_mean_dim(b, x, dim, unbiased=True, keepdim=False):
    return _var_mean(b, x, dim, float(unbiased), keepdim, "var_mean")


@register(aten.var_mean.default)
def var_mean_all(b, x, unbiased=True):
    return _var_mean(b, x, None, float(unbiased), False, "var_mean")


@register(aten.std_mean.correction)
def std_mean_correction(b, x, dim=None, correction=None, keepdim=False):
    return _var_mean(b, x, dim, 1.0 if correction is None else correction, keepdim, "std_mean", sqrt=True)


@register(aten.std_mean.dim)
def std_mean_dim(b, x, dim, unbiased=True, keepdim=False):
    return _var_mean(b, x, dim, float(unbiased), keepdim, "std_mean", sqrt=True)


@register(aten.std_mean.default)
def std_mean_all(b, x, unbiased=True):
    return _var_mean(b, x, None, float(unbiased), False, "std_mean", sqrt=True)


# -- norms --------------------------------------------------------------------------------------

def _vector_norm(b: GraphBuilder, x: Value, p: float, dims: list[int], keepdim: bool,
                 out_dtype: torch.dtype, name: str) -> Value:
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"{name}: Expected a floating point or complex tensor as input. Got {x.dtype}")
    comp = opmath(out_dtype)
    a = b.abs(b.convert(x, comp))
    if p == math.inf or p == -math.inf:
        if any(x.shape[d] == 0 for d in dims) or (not dims and x.numel() == 0):
            raise RuntimeError(f"{name} cannot compute the {p} norm on an empty tensor because the operation "
                               "does not have an identity")
        r = b.reduce(a, "max" if p > 0 else "min", dims)
    elif p == 0:
        nz = b.convert(b.compare("ne", a, _full_like(b, 0.0, a)), comp)
        r = b.reduce(nz, "sum", dims)
    elif p == 1:
        r = b.reduce(a, "sum", dims)
    elif p == 2:
        r = b.sqrt(b.reduce(b.mul(a, a), "sum", dims))
    else:
        s = b.reduce(b.pow(a, _full_like(b, float(p), a)), "sum", dims)
        r = b.pow(s, _full_like(b, 1.0 / p, s))
    return _finish(b, b.convert(r, out_dtype), x.shape, dims, keepdim)


@register(aten.linalg_vector_norm.default, bake_scalars=True)
def linalg_vector_norm(b, x, ord=2, dim=None, keepdim=False, dtype=None):
    p = float(_const_scalar(ord, 2))
    if dtype is not None:
        x = b.convert(x, dtype)
    return _vector_norm(b, x, p, _dims(dim, x.rank), keepdim, dtype or x.dtype, "linalg.vector_norm")


@register(aten.norm.Scalar, bake_scalars=True)
def norm_scalar(b, x, p=2):
    return _vector_norm(b, x, float(_const_scalar(p, 2)), list(range(x.rank)), False, x.dtype, "norm")


@register(aten.norm.ScalarOpt_dim, bake_scalars=True)
def norm_dim(b, x, p, dim, keepdim=False):
    return _vector_norm(b, x, float(_const_scalar(p, 2)), _dims(dim, x.rank), keepdim, x.dtype, "norm")


@register(aten.norm.ScalarOpt_dim_dtype, bake_scalars=True)
def norm_dim_dtype(b, x, p, dim, keepdim, dtype):
    return _vector_norm(b, b.convert(x, dtype), float(_const_scalar(p, 2)), _dims(dim, x.rank), keepdim, dtype,
                        "norm")


@register(aten.norm.ScalarOpt_dtype, bake_scalars=True)
def norm_dtype(b, x, p, dtype):
    return _vector_norm(b, b.convert(x, dtype), float(_const_scalar(p, 2)), list(range(x.rank)), False, dtype,
                        "norm")


# -- logsumexp ----------------------------------------------------------------------------------

@register(aten.logsumexp.default)
def logsumexp(b: GraphBuilder, x: Value, dim, keepdim: bool = False) -> Value:
    out = x.dtype if x.dtype.is_floating_point else torch.get_default_dtype()
    comp = opmath(out)
    dims = _dims(dim, x.rank)
    xc = b.convert(x, comp)
    if x.numel() == 0:
        m = b.full(0.0, comp, [s for d, s in enumerate(x.shape) if d not in dims])
    else:
        m = b.reduce(xc, "max", dims)
        # An infinite max would give inf - inf = nan: shift by 0 there instead (the sum is then
        # exp(-inf) = 0 -> -inf, or inf -> inf, both right).
        m = b.select(b.is_finite(m), m, _full_like(b, 0.0, m))
    e = b.exp(b.sub(xc, _bcast_back(b, m, x.shape, dims)))
    r = b.add(b.log(b.reduce(e, "sum", dims)), m)
    return _finish(b, b.convert(r, out), x.shape, dims, keepdim)


# -- scans --------------------------------------------------------------------------------------

def _scan(b: GraphBuilder, x: Value, kind: str, dim: int, dtype: torch.dtype | None) -> Value:
    out = _sum_dtype(x, dtype)
    d = canonical_dim(dim, x.rank)
    comp = opmath(out)
    return b.convert(b.scan(b.convert(x, comp), kind, d), out)


@register(aten.cumsum.default)
def cumsum(b, x, dim, dtype=None):
    return _scan(b, x, "sum", dim, dtype)


@register(aten.cumprod.default)
def cumprod(b, x, dim, dtype=None):
    return _scan(b, x, "prod", dim, dtype)


def _cum_ext(b: GraphBuilder, x: Value, dim: int, kind: str) -> tuple[Value, Value]:
    """cummax/cummin values and indices.

    CPU updates the running extreme when the new element is NaN or compares >= (<= for min) to
    it, so the index is the LAST position j <= i whose element equals values[i] (or is NaN when
    values[i] is NaN). That is a running max over "iota where x matches values, else -1".
    """
    d = canonical_dim(dim, x.rank)
    if x.rank == 0:
        return x, b.full(0, torch.int64, ())
    xs = b.convert(x, torch.uint8) if x.dtype == torch.bool else x
    vals = b.scan(xs, kind, d)
    match = b.compare("eq", xs, vals)
    if xs.dtype.is_floating_point:
        match = b.binary("or", match, b.binary("and", _isnan(b, xs), _isnan(b, vals)))
    iota = b.iota(torch.int64, x.shape, d)
    cand = b.select(match, iota, _full_like(b, -1, iota))
    idx = b.scan(cand, "max", d)
    return b.convert(vals, x.dtype), idx


@register(aten.cummax.default)
def cummax(b, x, dim):
    return _cum_ext(b, x, dim, "max")


@register(aten.cummin.default)
def cummin(b, x, dim):
    return _cum_ext(b, x, dim, "min")


@register(aten.logcumsumexp.default)
def logcumsumexp(b: GraphBuilder, x: Value, dim: int) -> Value:
    """The graph form torch.compile meets; the scan is lowering/logcumsumexp.py's (stable where a
    shift by the slice max underflows), which eager calls reach through ATen's _logcumsumexp."""
    from .logcumsumexp import _logcumsumexp

    return _logcumsumexp(b, x, dim)


# -- logical reductions -------------------------------------------------------------------------

def _logical(b: GraphBuilder, x: Value, kind: str, dims: list[int], keepdim: bool) -> Value:
    t = x if x.dtype == torch.bool else b.compare("ne", x, _full_like(b, 0, x))
    r = _finish(b, b.reduce(t, kind, dims), x.shape, dims, keepdim)
    # uint8 input keeps uint8 output (a legacy CPU rule)
    return b.convert(r, torch.uint8) if x.dtype == torch.uint8 else r


@register(aten.any.default)
def any_all_dims(b, x):
    return _logical(b, x, "or", list(range(x.rank)), False)


@register(aten.all.default)
def all_all_dims(b, x):
    return _logical(b, x, "and", list(range(x.rank)), False)


@register(aten.any.dim)
def any_dim(b, x, dim, keepdim=False):
    return _logical(b, x, "or", _dims([dim], x.rank), keepdim)


@register(aten.all.dim)
def all_dim(b, x, dim, keepdim=False):
    return _logical(b, x, "and", _dims([dim], x.rank), keepdim)


def _dims_or_none(dim, rank: int) -> list[int]:
    """any.dims/all.dims: None reduces everything, but an empty list reduces nothing."""
    if dim is None:
        return list(range(rank))
    return sorted(canonical_dim(d, rank) for d in dim) if rank else []


@register(aten.any.dims)
def any_dims(b, x, dim=None, keepdim=False):
    return _logical(b, x, "or", _dims_or_none(dim, x.rank), keepdim)


@register(aten.all.dims)
def all_dims(b, x, dim=None, keepdim=False):
    return _logical(b, x, "and", _dims_or_none(dim, x.rank), keepdim)


@register(aten.count_nonzero.dim_IntList)
def count_nonzero_dims(b, x, dim):
    nz = b.convert(b.compare("ne", x, _full_like(b, 0, x)), torch.int64)
    return b.reduce(nz, "sum", _dims(dim, x.rank))


@register(aten.count_nonzero.default)
def count_nonzero(b, x, dim=None):
    return count_nonzero_dims(b, x, [] if dim is None else [dim])


# -- median -------------------------------------------------------------------------------------

def _median_dim(b: GraphBuilder, x: Value, d: int, ignore_nan: bool) -> tuple[Value, Value]:
    """Lower median along d via a stable sort (NaN sorts last).

    median: any NaN in the slice makes the result the first NaN (its value and index), which in
    the stable sort sits at position n - count(NaN). nanmedian: the lower median of the non-NaN
    elements, i.e. position (n - count(NaN) - 1) // 2 (a slice of only NaNs gives position 0, NaN).
    """
    n = x.shape[d]
    perm = b.sort(x, d)
    svals = b.gather(x, perm, d)
    red_shape = [s for i, s in enumerate(x.shape) if i != d]
    if x.dtype.is_floating_point:
        nan_cnt = b.reduce(b.convert(_isnan(b, x), torch.int64), "sum", [d])
    else:
        nan_cnt = b.full(0, torch.int64, red_shape)
    nn = b.sub(b.full(n, torch.int64, red_shape), nan_cnt)
    if ignore_nan:
        pos = b.div(b.sub(nn, b.full(1, torch.int64, red_shape)), b.full(2, torch.int64, red_shape))
        pos = b.max(pos, b.full(0, torch.int64, red_shape))
    else:
        has_nan = b.compare("gt", nan_cnt, b.full(0, torch.int64, red_shape))
        pos = b.select(has_nan, nn, b.full((n - 1) // 2, torch.int64, red_shape))
    pos_shape = keepdim_shape(x.shape, [d])
    pos = b.reshape(pos, pos_shape)
    return b.gather(svals, pos, d), b.gather(perm, pos, d)


def _median_impl(b, x, dim, keepdim, ignore_nan, name):
    if x.rank == 0:
        return x, b.full(0, torch.int64, ())
    d = canonical_dim(dim, x.rank)
    if x.shape[d] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")
    v, i = _median_dim(b, x, d, ignore_nan)
    if not keepdim:
        shape = [s for k, s in enumerate(x.shape) if k != d]
        v, i = b.reshape(v, shape), b.reshape(i, shape)
    return v, i


@register(aten.median.dim)
def median_dim(b, x, dim, keepdim=False):
    return _median_impl(b, x, dim, keepdim, False, "median")


@register(aten.nanmedian.dim)
def nanmedian_dim(b, x, dim, keepdim=False):
    return _median_impl(b, x, dim, keepdim, True, "nanmedian")


def _median_all(b, x, ignore_nan):
    if x.numel() == 0:
        return b.full(math.nan, x.dtype, ()) if x.dtype.is_floating_point else b.full(0, x.dtype, ())
    flat = b.reshape(x, [x.numel()])
    v, _ = _median_dim(b, flat, 0, ignore_nan)
    return b.reshape(v, [])


@register(aten.median.default)
def median_all(b, x):
    return _median_all(b, x, False)


@register(aten.nanmedian.default)
def nanmedian_all(b, x):
    return _median_all(b, x, True)
