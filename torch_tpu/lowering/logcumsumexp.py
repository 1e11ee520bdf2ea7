"""Lowerings: logcumsumexp (aten::_logcumsumexp; torch.logcumsumexp reaches it through ATen's
composite), out[i] = log(sum_{j <= i} exp(x[j])) along one dim, for real float tensors.

Design: a Hillis-Steele prefix scan with logaddexp as the combining operation. After step k
(k = 0 .. ceil(log2 n) - 1), element i holds the log-sum-exp of the 2^(k+1) elements ending at
i: x = logaddexp(x, x shifted by 2^k along dim), the shift filling the vacated front with -inf,
logaddexp's identity. logaddexp is associative, so this is the same sum as CPU's sequential
loop, only grouped as a tree; each combination is max + log1p(exp(min - max)), never
exponentiating anything large, so no partial sum overflows and none underflows to -inf where a
term is finite (the naive log(cumsum(exp(x))) does both). Infinities and NaN follow CPU's
combining rule, which the logaddexp lowering implements: -inf terms add nothing, +inf wins,
and NaN propagates to every later element. The scan costs ceil(log2 n) slice/concatenate/
logaddexp steps on the whole tensor (O(n log n) work, log-depth), and the graph is static.

The scan runs in CPU's accumulation dtype (float64 for float32, float32 for float16/bfloat16) and
rounds once at the end, as CPU's kernel does: with ~29 spare bits the tree grouping's rounding
never shows in the result, which matters for the backward, whose terms like log|g| - out + x
cancel large values (x ~ 1e4 leaves float32 ulps of 1e-3) and so expose the output's last bit.

The backward needs nothing here: ATen's formula is written in flips, where, exp and
logcumsumexp itself, which all lower. Complex inputs have no lowering (a NotImplementedError
naming aten::_logcumsumexp).
"""

from __future__ import annotations

import torch

from ..ir.builder import GraphBuilder, Value
from .apply import _tname, call
from .nn import check
from .registry import register

aten = torch.ops.aten

# CPU's accumulation dtype for this kernel (acc_type<T, /*is_cuda=*/false>): float32 is combined in
# float64, so each output is its correctly rounded value whatever the grouping; half types in float32.
_ACC_DTYPE = {torch.float32: torch.float64, torch.float16: torch.float32, torch.bfloat16: torch.float32}


def _shifted(b: GraphBuilder, x: Value, dim: int, by: int) -> Value:
    """x moved `by` places towards higher indices along dim, the first `by` filled with -inf."""
    n = x.shape[dim]
    pad_shape = list(x.shape)
    pad_shape[dim] = by
    pad = b.full(float("-inf"), x.dtype, pad_shape)
    return call(b, aten.cat.default, [pad, call(b, aten.slice.Tensor, x, dim, 0, n - by)], dim)


def logcumsumexp(b: GraphBuilder, x: Value, dim: int) -> Value:
    """The inclusive log-sum-exp scan of a real float tensor along dim (already wrapped)."""
    out_dtype = x.dtype
    dtype = _ACC_DTYPE.get(out_dtype, out_dtype)
    y = b.convert(x, dtype) if dtype != out_dtype else x
    n = y.shape[dim]
    step = 1
    while step < n:
        y = call(b, aten.logaddexp.default, y, _shifted(b, y, dim, step))
        step *= 2
    if y is x:  # n <= 1: the result is the input itself, as a new value
        y = call(b, aten.clone.default, x)
    return b.convert(y, out_dtype) if dtype != out_dtype else y


@register(aten._logcumsumexp.default)
def _logcumsumexp(b: GraphBuilder, x: Value, dim: int) -> Value:
    check(x.dtype.is_floating_point, f"\"logcumsumexp_out_cpu\" not implemented for '{_tname(x.dtype)}'")
    rank = max(x.rank, 1)
    check(-rank <= dim < rank, f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], "
          f"but got {dim})", IndexError)
    if x.rank == 0:  # one term: log(exp(x)) is x, also for +-inf and NaN (CPU's loop gives it unchanged)
        return call(b, aten.clone.default, x)
    return logcumsumexp(b, x, dim % x.rank)
