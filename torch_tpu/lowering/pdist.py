"""Lowerings: torch.nn.functional.pdist (aten._pdist_forward and aten._pdist_backward).

Design: pdist is the p-norm distance of every row pair (i, j), i < j, of an [n, m] matrix, in
the row-major order of the strict upper triangle. The pairs depend only on n, so they are a
static index list: ``triu_indices(n, n, 1)`` (an iota grid numbered by a prefix sum, no constant
tables), and the forward is two row gathers, one subtraction and a reduction over the columns
-- O(n^2 m / 2) work and memory, like the CPU kernel, with no data-dependent shape. The
backward forms each pair's per-column derivative of its distance (a [P, m] array) and
scatter-adds it to row i and subtracts it from row j; the derivative is odd in the difference,
so this is CPU's sum over both orders of the pair.

p decides the formula (0, 1, 2, inf, below 2, general), exactly as CPU's kernel picks one, so
it is read as a compile-time number (``baked_float``: the op is re-lowered with its scalars
baked when p arrives as a runtime input, so each p is its own program). The derivative
conventions are CPU's, including at zero distance: sign(d) for p = 1 (0 where d = 0); for p =
inf only the coordinates whose |d| equals the distance (every tied one); for every other p a
pair at distance 0 contributes 0 (CPU skips the 0/0), and for p < 1 so does each coordinate
with d = 0 (where |d|^(p-1) is infinite); p = 0 (a count) has gradient 0.
CPU implements float32 and float64 only; other dtypes raise its NotImplementedError.
"""

from __future__ import annotations

import math

import torch

from ..ir.builder import GraphBuilder, Value
from .apply import call
from .nn import baked_float, check
from .registry import register

aten = torch.ops.aten

_DTYPE_NAMES = {torch.float16: "Half", torch.bfloat16: "BFloat16", torch.int64: "Long", torch.int32: "Int",
                torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte", torch.bool: "Bool"}


def _check_input(x: Value) -> None:
    check(x.rank == 2, f"pdist only supports 2D tensors, got: {x.rank}D")
    check(x.dtype in (torch.float32, torch.float64),
          f"\"pdist\" not implemented for '{_DTYPE_NAMES.get(x.dtype, str(x.dtype))}'", NotImplementedError)


def _pairs(b: GraphBuilder, n: int) -> tuple[Value, Value]:
    """(first rows, second rows) of the P = n (n - 1) / 2 pairs, int64 [P] each, in pdist's order."""
    idx = call(b, aten.triu_indices.default, n, n, 1, dtype=torch.int64)
    return call(b, aten.select.int, idx, 0, 0), call(b, aten.select.int, idx, 0, 1)


def _differences(b: GraphBuilder, x: Value) -> tuple[Value, Value, Value]:
    """(x[i] - x[j] as [P, m], i, j) over every pair."""
    i, j = _pairs(b, x.shape[0])
    rows_i = call(b, aten.index_select.default, x, 0, i)
    rows_j = call(b, aten.index_select.default, x, 0, j)
    return call(b, aten.sub.Tensor, rows_i, rows_j), i, j


@register(aten._pdist_forward.default)
def pdist_forward(b: GraphBuilder, x: Value, p: Value) -> Value:
    """The [n (n - 1) / 2] distances; empty for n <= 1, zeros when the rows are empty (m = 0)."""
    _check_input(x)
    pv = baked_float(p)
    n, m = x.shape
    count = n * (n - 1) // 2
    if count == 0 or m == 0:  # no pairs, or no coordinates: every distance is 0 (CPU fills 0)
        return b.full(0.0, x.dtype, (count,))
    diff, _, _ = _differences(b, x)
    ad = call(b, aten.abs.default, diff)
    if pv == 0:  # the number of differing coordinates
        return call(b, aten.sum.dim_IntList, b.convert(call(b, aten.ne.Scalar, ad, 0), x.dtype), [1])
    if pv == 1:
        return call(b, aten.sum.dim_IntList, ad, [1])
    if pv == 2:
        return call(b, aten.sqrt.default, call(b, aten.sum.dim_IntList, call(b, aten.mul.Tensor, ad, ad), [1]))
    if math.isinf(pv):
        return call(b, aten.amax.default, ad, [1])
    total = call(b, aten.sum.dim_IntList, call(b, aten.pow.Tensor_Scalar, ad, pv), [1])
    return call(b, aten.pow.Tensor_Scalar, total, 1.0 / pv)


def _pair_gradient(b: GraphBuilder, diff: Value, grad: Value, dist: Value, p: float) -> Value:
    """d dist_k / d x[i_k] times grad_k for each pair k and column, [P, m]; CPU's formulas."""
    g = call(b, aten.unsqueeze.default, grad, 1)
    d = call(b, aten.unsqueeze.default, dist, 1)
    zero = b.full(0.0, diff.dtype, diff.shape)
    sign = call(b, aten.sign.default, diff)
    if p == 1:
        return call(b, aten.mul.Tensor, sign, g)
    if math.isinf(p):  # only the coordinates that attain the maximum
        hit = call(b, aten.eq.Tensor, call(b, aten.abs.default, diff), d)
        return call(b, aten.where.self, hit, call(b, aten.mul.Tensor, sign, g), zero)
    dist_zero = call(b, aten.expand.default, call(b, aten.eq.Scalar, d, 0), list(diff.shape))
    # A zero distance would divide 0 by 0: CPU defines that pair's gradient as 0.
    safe_d = call(b, aten.where.self, call(b, aten.eq.Scalar, d, 0), b.full(1.0, d.dtype, d.shape), d)
    if p == 2:
        per = call(b, aten.div.Tensor, call(b, aten.mul.Tensor, diff, g), safe_d)
        return call(b, aten.where.self, dist_zero, zero, per)
    ad = call(b, aten.abs.default, diff)
    denom = call(b, aten.pow.Tensor_Scalar, safe_d, p - 1)

    def times_grad_over_dist(v: Value) -> Value:  # CPU's order: (v * grad) / dist^(p - 1)
        return call(b, aten.div.Tensor, call(b, aten.mul.Tensor, v, g), denom)

    if p < 2:
        per = times_grad_over_dist(call(b, aten.mul.Tensor, sign, call(b, aten.pow.Tensor_Scalar, ad, p - 1)))
        skip = dist_zero
        if p < 1:  # |0|^(p - 1) is infinite: CPU zeroes the coordinates that do not differ
            skip = call(b, aten.logical_or.default, skip, call(b, aten.eq.Scalar, diff, 0))
        return call(b, aten.where.self, skip, zero, per)
    per = times_grad_over_dist(call(b, aten.mul.Tensor, diff, call(b, aten.pow.Tensor_Scalar, ad, p - 2)))
    return call(b, aten.where.self, dist_zero, zero, per)


@register(aten._pdist_backward.default)
def pdist_backward(b: GraphBuilder, grad: Value, x: Value, p: Value, dist: Value) -> Value:
    """The gradient for x [n, m]: row r gains the pair derivatives where it is the first row and
    loses them where it is the second (d|x_i - x_j| / d x_j = -d|x_i - x_j| / d x_i)."""
    _check_input(x)
    pv = baked_float(p)
    n, m = x.shape
    if pv == 0 or n <= 1 or m == 0:  # the p = 0 count is piecewise constant; CPU fills 0
        return b.full(0.0, x.dtype, x.shape)
    diff, i, j = _differences(b, x)
    per = _pair_gradient(b, diff, b.convert(grad, x.dtype), b.convert(dist, x.dtype), pv)
    pos = b.full(0.0, x.dtype, x.shape)
    out = call(b, aten.index_add.default, pos, 0, i, per)
    return call(b, aten.index_add.default, out, 0, j, per, alpha=-1)
