"""Lowerings: max/avg/adaptive pooling (2d and 3d; PyTorch routes 1d through 2d) and their backwards.

* Max pooling with indices gathers every window candidate (kernel offset j of output position o
  reads padded position o*stride + j*dilation), takes the max over the candidate axis and the
  first argmax (CPU keeps the first maximum), and turns the winner into a flat offset within the
  unpadded input plane, the index layout CPU returns. Padding candidates hold -inf.
* Backward of max pooling (plain and adaptive) scatter-adds grad_output at the saved indices.
* Avg pooling is a reduce_window sum divided by a divisor built with the same window sums over
  ones, which reproduces count_include_pad and the ceil_mode rule that windows starting in the
  right padding are dropped and windows are clipped at input + padding.
* Adaptive average pooling uses per-dimension averaging matrices P[o, i] = 1/len(window o) (built
  from iota), contracted with dot_general; its backward is the transposed contraction.
* Adaptive max pooling gathers candidates start(o) + j clamped to the window's last element
  (duplicates change neither the max nor the first argmax).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..ir.builder import GraphBuilder, Value
from .core import opmath
from .nn import check, full, iota_i64
from .registry import register

aten = torch.ops.aten


def _params(v: Sequence[int], n: int, name: str, default: Sequence[int] | None = None) -> list[int]:
    v = list(v)
    if not v and default is not None:
        return list(default)
    if len(v) == 1:
        v = v * n
    check(len(v) == n, f"max_pool{n}d: {name} must either be a single int, or a tuple of {n} ints")
    return v


def _pool_out(size: int, k: int, pad: int, stride: int, dil: int, ceil_mode: bool) -> int:
    """PyTorch's pooling_output_shape (with the rule that the last window must start inside)."""
    num = size + 2 * pad - dil * (k - 1) - 1 + (stride - 1 if ceil_mode else 0)
    out = num // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _check_pool(x: Value, n: int, k: list[int], stride: list[int], pad: list[int], dil: list[int],
                name: str) -> None:
    check(x.rank in (n + 1, n + 2), f"non-empty {n + 1}D or {n + 2}D (batch mode) tensor expected for input")
    check(all(a > 0 for a in k), f"{name}: kernel_size must be greater than zero")
    check(all(a > 0 for a in stride), f"{name}: stride must be greater than zero")
    check(all(a > 0 for a in dil), f"{name}: dilation must be greater than zero")
    check(all(2 * p <= kk for p, kk in zip(pad, k)), f"pad should be at most half of effective kernel size, "
          f"but got pad={pad[0]}, kernel_size={k[0]} and dilation={dil[0]}")


# -- max pooling -------------------------------------------------------------------------------

def _candidates(b: GraphBuilder, x: Value, idx: list[Value], n: int) -> Value:
    """Gather x along each of its last n dims with idx[d] ([O_d, K_d] int64):
    result lead + [O_0, .., O_{n-1}, K_0 * .. * K_{n-1}]."""
    lead = x.rank - n
    y = x
    for d in range(n):
        o, kk = idx[d].shape
        shape = list(y.shape)
        shape[lead + d] = o * kk
        flat = b.reshape(idx[d], (o * kk,))
        y = b.gather(y, b.broadcast_in_dim(flat, shape, (lead + d,)), lead + d)
    # y: lead + [O0*K0, O1*K1, ...] -> lead + [O0, .., K0, ..]
    split = list(y.shape[:lead])
    for d in range(n):
        split += list(idx[d].shape)
    y = b.reshape(y, split)
    perm = list(range(lead)) + [lead + 2 * d for d in range(n)] + [lead + 2 * d + 1 for d in range(n)]
    y = b.transpose(y, perm)
    kprod = math.prod(i.shape[1] for i in idx)
    return b.reshape(y, (*y.shape[: lead + n], kprod))


def _flat_positions(b: GraphBuilder, idx: list[Value], sizes: Sequence[int], offsets: Sequence[int]) -> Value:
    """[O_0, .., O_{n-1}, prod K] int64: flat offset in the plane of each candidate (idx - offset)."""
    n = len(idx)
    oshape = [i.shape[0] for i in idx]
    kshape = [i.shape[1] for i in idx]
    full_shape = oshape + kshape
    acc = None
    stride = 1
    for d in reversed(range(n)):
        pos = b.sub(idx[d], b.full(offsets[d], torch.int64, idx[d].shape))
        term = b.broadcast_in_dim(pos, full_shape, (d, n + d))
        term = b.mul(term, b.full(stride, torch.int64, full_shape))
        acc = term if acc is None else b.add(acc, term)
        stride *= sizes[d]
    return b.reshape(acc, (*oshape, math.prod(kshape)))


def _select_max(b: GraphBuilder, cand: Value, flat: Value) -> tuple[Value, Value]:
    """Max over the last axis of cand and the flat index of the first maximum."""
    last = cand.rank - 1
    values = b.reduce(cand, "max", [last])
    arg = b.reduce(cand, "argmax", [last])
    flat_b = b.broadcast_in_dim(flat, cand.shape, tuple(range(cand.rank - flat.rank, cand.rank)))
    ind = b.gather(flat_b, b.reshape(arg, (*arg.shape, 1)), last)
    return values, b.reshape(ind, arg.shape)


def _lowest(dtype: torch.dtype) -> float | int:
    return -math.inf if dtype.is_floating_point else torch.iinfo(dtype).min


def _max_pool(b: GraphBuilder, x: Value, n: int, kernel: list[int], stride: list[int], padding: list[int],
              dilation: list[int], ceil_mode: bool) -> tuple[Value, Value]:
    k = _params(kernel, n, "kernel_size")
    s = _params(stride, n, "stride", default=k)
    p = _params(padding, n, "padding")
    dl = _params(dilation, n, "dilation")
    _check_pool(x, n, k, s, p, dl, f"max_pool{n}d")
    sp = x.shape[x.rank - n:]
    out = [_pool_out(sp[d], k[d], p[d], s[d], dl[d], ceil_mode) for d in range(n)]
    check(all(o > 0 for o in out), f"Given input size: {list(x.shape)}. Calculated output size is too small")
    # Pad so every candidate o*s + j*dil (in padded coordinates) is in range.
    hi = [max((out[d] - 1) * s[d] + (k[d] - 1) * dl[d] + 1 - sp[d] - p[d], 0) for d in range(n)]
    lead = x.rank - n
    xp = b.pad(x, b.constant(_lowest(x.dtype), x.dtype), [0] * lead + p, [0] * lead + hi)
    idx = []
    for d in range(n):
        o = b.broadcast_in_dim(iota_i64(b, out[d]), (out[d], k[d]), (0,))
        j = b.broadcast_in_dim(iota_i64(b, k[d]), (out[d], k[d]), (1,))
        idx.append(b.add(b.mul(o, b.full(s[d], torch.int64, o.shape)), b.mul(j, b.full(dl[d], torch.int64, j.shape))))
    cand = _candidates(b, xp, idx, n)
    flat = _flat_positions(b, idx, sp, p)
    return _select_max(b, cand, flat)


def _scatter_grad(b: GraphBuilder, go: Value, x: Value, indices: Value, n: int) -> Value:
    """grad_input: grad_output added at the saved flat plane indices."""
    lead = list(x.shape[: x.rank - n])
    plane = math.prod(x.shape[x.rank - n:])
    m = math.prod(go.shape[go.rank - n:])
    comp = opmath(go.dtype)
    g = b.reshape(b.convert(go, comp), (*lead, m))
    ind = b.reshape(indices, (*lead, m))
    gi = b.scatter(full(b, 0, comp, (*lead, plane)), ind, g, len(lead), "add")
    return b.convert(b.reshape(gi, x.shape), go.dtype)


@register(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(b: GraphBuilder, x: Value, kernel: list[int], stride: list[int], padding: list[int],
                            dilation: list[int], ceil_mode: bool) -> tuple[Value, Value]:
    return _max_pool(b, x, 2, kernel, stride, padding, dilation, ceil_mode)


@register(aten.max_pool3d_with_indices.default)
def max_pool3d_with_indices(b: GraphBuilder, x: Value, kernel: list[int], stride: list[int], padding: list[int],
                            dilation: list[int], ceil_mode: bool) -> tuple[Value, Value]:
    return _max_pool(b, x, 3, kernel, stride, padding, dilation, ceil_mode)


@register(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(b: GraphBuilder, go: Value, x: Value, kernel: list[int], stride: list[int],
                                     padding: list[int], dilation: list[int], ceil_mode: bool,
                                     indices: Value) -> Value:
    return _scatter_grad(b, go, x, indices, 2)


@register(aten.max_pool3d_with_indices_backward.default)
def max_pool3d_with_indices_backward(b: GraphBuilder, go: Value, x: Value, kernel: list[int], stride: list[int],
                                     padding: list[int], dilation: list[int], ceil_mode: bool,
                                     indices: Value) -> Value:
    return _scatter_grad(b, go, x, indices, 3)


@register(aten.max_pool2d.default)
def max_pool2d(b: GraphBuilder, x: Value, kernel: list[int], stride: list[int], padding: list[int],
               dilation: list[int], ceil_mode: bool) -> Value:
    return _max_pool(b, x, 2, kernel, stride, padding, dilation, ceil_mode)[0]


# -- adaptive pooling --------------------------------------------------------------------------

def _adaptive_bounds(b: GraphBuilder, in_size: int, out_size: int) -> tuple[Value, Value]:
    """start(o) = floor(o*in/out), end(o) = ceil((o+1)*in/out) as int64 [out]."""
    o = iota_i64(b, out_size)
    c = lambda v: b.full(v, torch.int64, (out_size,))  # noqa: E731
    start = b.div(b.mul(o, c(in_size)), c(out_size))
    end = b.div(b.add(b.mul(b.add(o, c(1)), c(in_size)), c(out_size - 1)), c(out_size))
    return start, end


def _avg_matrix(b: GraphBuilder, in_size: int, out_size: int, dtype: torch.dtype) -> Value:
    """P [out, in]: P[o, i] = 1/(end-start) inside window o, else 0."""
    start, end = _adaptive_bounds(b, in_size, out_size)
    i = b.iota(torch.int64, (out_size, in_size), 1)
    st = b.broadcast_in_dim(start, (out_size, in_size), (0,))
    en = b.broadcast_in_dim(end, (out_size, in_size), (0,))
    inside = b.binary("and", b.compare("ge", i, st), b.compare("lt", i, en))
    cnt = b.convert(b.sub(en, st), dtype)
    w = b.div(full(b, 1, dtype, cnt.shape), cnt)
    return b.select(inside, w, full(b, 0, dtype, w.shape))


def _contract_spatial(b: GraphBuilder, x: Value, mats: list[Value], transpose: bool) -> Value:
    """Apply mats[d] ([out, in], or its transpose) along each of the last len(mats) dims of x."""
    n = len(mats)
    y = x
    for d in range(n):
        axis = y.rank - n + d
        # dot_general puts the free rhs dim last; move it back into place.
        y = b.dot_general(y, mats[d], [], [], [axis], [1 if not transpose else 0])
        perm = list(range(axis)) + [y.rank - 1] + list(range(axis, y.rank - 1))
        y = b.transpose(y, perm)
    return y


def _adaptive_avg(b: GraphBuilder, x: Value, output_size: list[int], n: int) -> Value:
    check(x.rank in (n + 1, n + 2), f"adaptive_avg_pool{n}d(): Expected {n + 1}D or {n + 2}D tensor, but got {list(x.shape)}")
    check(x.dtype.is_floating_point, f"\"adaptive_avg_pool{n}d\" not implemented for '{x.dtype}'", NotImplementedError)
    out = _params(output_size, n, "output_size")
    comp = opmath(x.dtype)
    sp = x.shape[x.rank - n:]
    mats = [_avg_matrix(b, sp[d], out[d], comp) for d in range(n)]
    return b.convert(_contract_spatial(b, b.convert(x, comp), mats, False), x.dtype)


def _adaptive_avg_backward(b: GraphBuilder, go: Value, x: Value, n: int) -> Value:
    comp = opmath(go.dtype)
    sp = x.shape[x.rank - n:]
    out = go.shape[go.rank - n:]
    mats = [_avg_matrix(b, sp[d], out[d], comp) for d in range(n)]
    return b.convert(_contract_spatial(b, b.convert(go, comp), mats, True), x.dtype)


@register(aten._adaptive_avg_pool2d.default)
def adaptive_avg_pool2d(b: GraphBuilder, x: Value, output_size: list[int]) -> Value:
    return _adaptive_avg(b, x, output_size, 2)


@register(aten._adaptive_avg_pool3d.default)
def adaptive_avg_pool3d(b: GraphBuilder, x: Value, output_size: list[int]) -> Value:
    return _adaptive_avg(b, x, output_size, 3)


@register(aten._adaptive_avg_pool2d_backward.default)
def adaptive_avg_pool2d_backward(b: GraphBuilder, go: Value, x: Value) -> Value:
    return _adaptive_avg_backward(b, go, x, 2)


@register(aten._adaptive_avg_pool3d_backward.default)
def adaptive_avg_pool3d_backward(b: GraphBuilder, go: Value, x: Value) -> Value:
    return _adaptive_avg_backward(b, go, x, 3)


def _adaptive_max(b: GraphBuilder, x: Value, output_size: list[int], n: int) -> tuple[Value, Value]:
    check(x.rank in (n + 1, n + 2), f"adaptive_max_pool{n}d(): Expected {n + 1}D or {n + 2}D tensor, but got {list(x.shape)}")
    out = _params(output_size, n, "output_size")
    sp = x.shape[x.rank - n:]
    idx = []
    for d in range(n):
        start, end = _adaptive_bounds(b, sp[d], out[d])
        kmax = max(-(-((o + 1) * sp[d]) // out[d]) - (o * sp[d]) // out[d] for o in range(out[d]))
        shape = (out[d], kmax)
        st = b.broadcast_in_dim(start, shape, (0,))
        last = b.broadcast_in_dim(b.sub(end, b.full(1, torch.int64, end.shape)), shape, (0,))
        idx.append(b.min(b.add(st, b.iota(torch.int64, shape, 1)), last))
    cand = _candidates(b, x, idx, n)
    flat = _flat_positions(b, idx, sp, [0] * n)
    return _select_max(b, cand, flat)


@register(aten.adaptive_max_pool2d.default)
def adaptive_max_pool2d(b: GraphBuilder, x: Value, output_size: list[int]) -> tuple[Value, Value]:
    return _adaptive_max(b, x, output_size, 2)


@register(aten.adaptive_max_pool3d.default)
def adaptive_max_pool3d(b: GraphBuilder, x: Value, output_size: list[int]) -> tuple[Value, Value]:
    return _adaptive_max(b, x, output_size, 3)


@register(aten.adaptive_max_pool2d_backward.default)
def adaptive_max_pool2d_backward(b: GraphBuilder, go: Value, x: Value, indices: Value) -> Value:
    return _scatter_grad(b, go, x, indices, 2)


@register(aten.adaptive_max_pool3d_backward.default)
def adaptive_max_pool3d_backward(b: GraphBuilder, go: Value, x: Value, indices: Value) -> Value:
    return _scatter_grad(b, go, x, indices, 3)


# -- average pooling ---------------------------------------------------------------------------

def _avg_geometry(x_shape: Sequence[int], n: int, kernel: list[int], stride: list[int], padding: list[int],
                  ceil_mode: bool) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    k = _params(kernel, n, "kernel_size")
    s = _params(stride, n, "stride", default=k)
    p = _params(padding, n, "padding")
    sp = list(x_shape[len(x_shape) - n:])
    check(all(a > 0 for a in k) and all(a > 0 for a in s), "avg_pool: kernel_size and stride must be greater than zero")
    check(all(2 * pp <= kk for pp, kk in zip(p, k)), "pad should be at most half of effective kernel size")
    out = [_pool_out(sp[d], k[d], p[d], s[d], 1, ceil_mode) for d in range(n)]
    check(all(o > 0 for o in out), f"Given input size: {list(x_shape)}. Calculated output size is too small")
    return k, s, p, sp, out


def _divisor(b: GraphBuilder, n: int, k: list[int], s: list[int], p: list[int], sp: list[int], out: list[int],
             count_include_pad: bool, divisor_override: int | None, dtype: torch.dtype) -> Value:
    """The per-output divisor [O_0, .., O_{n-1}]: window sizes clipped at input+padding (or at
    the input when padding is excluded), or the override."""
    if divisor_override is not None:
        check(divisor_override != 0, "divisor must be not zero")
        return full(b, divisor_override, dtype, out)
    acc = None
    for d in range(n):
        ones = full(b, 1, dtype, (sp[d],))
        if count_include_pad:  # padding counts, the ceil_mode overhang beyond it does not
            ones = b.pad(ones, b.constant(1, dtype), (p[d],), (p[d],))
            lo = 0
        else:
            lo = p[d]
        hi = max((out[d] - 1) * s[d] + k[d] - ones.shape[0] - lo, 0)
        cnt = b.reduce_window(ones, "sum", (k[d],), (s[d],), (lo,), (hi,))
        cnt = b.broadcast_in_dim(cnt, out, (d,))
        acc = cnt if acc is None else b.mul(acc, cnt)
    return acc


def _avg_pool(b: GraphBuilder, x: Value, n: int, kernel: list[int], stride: list[int], padding: list[int],
              ceil_mode: bool, count_include_pad: bool, divisor_override: int | None) -> Value:
    check(x.rank in (n + 1, n + 2), f"non-empty {n + 1}D or {n + 2}D (batch mode) tensor expected for input")
    k, s, p, sp, out = _avg_geometry(x.shape, n, kernel, stride, padding, ceil_mode)
    lead = x.rank - n
    comp = opmath(x.dtype)
    xc = b.convert(x, comp)
    hi = [max((out[d] - 1) * s[d] + k[d] - sp[d] - p[d], 0) for d in range(n)]
    tot = b.reduce_window(xc, "sum", [1] * lead + k, [1] * lead + s, [0] * lead + p, [0] * lead + hi)
    div = _divisor(b, n, k, s, p, sp, out, count_include_pad, divisor_override, comp)
    return b.convert(b.div(tot, b.broadcast_in_dim(div, tot.shape, tuple(range(lead, lead + n)))), x.dtype)


def _avg_pool_backward(b: GraphBuilder, go: Value, x: Value, n: int, kernel: list[int], stride: list[int],
                       padding: list[int], ceil_mode: bool, count_include_pad: bool,
                       divisor_override: int | None) -> Value:
    k, s, p, sp, out = _avg_geometry(x.shape, n, kernel, stride, padding, ceil_mode)
    lead = x.rank - n
    comp = opmath(go.dtype)
    div = _divisor(b, n, k, s, p, sp, out, count_include_pad, divisor_override, comp)
    g = b.div(b.convert(go, comp), b.broadcast_in_dim(div, go.shape, tuple(range(lead, lead + n))))
    # grad_in[i] = sum over kk of g'[i + p - kk], g' = g with (s-1) zeros between elements: place
    # g' so that a stride-1 window sum of size k ending at i+p collects exactly those terms.
    lo = [k[d] - 1 - p[d] for d in range(n)]
    hi = [sp[d] + p[d] - (out[d] - 1) * s[d] - 1 for d in range(n)]
    gp = b.pad(g, b.constant(0, comp), [0] * lead + lo, [0] * lead + hi, [0] * lead + [a - 1 for a in s])
    gi = b.reduce_window(gp, "sum", [1] * lead + k, [1] * (lead + n), [0] * (lead + n), [0] * (lead + n))
    return b.convert(gi, go.dtype)


@register(aten.avg_pool2d.default)
def avg_pool2d(b: GraphBuilder, x: Value, kernel: list[int], stride: list[int], padding: list[int], ceil_mode: bool,
               count_include_pad: bool, divisor_override: int | None) -> Value:
    return _avg_pool(b, x, 2, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)


@register(aten.avg_pool3d.default)
def avg_pool3d(b: GraphBuilder, x: Value, kernel: list[int], stride: list[int], padding: list[int], ceil_mode: bool,
               count_include_pad: bool, divisor_override: int | None) -> Value:
    return _avg_pool(b, x, 3, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)


@register(aten.avg_pool2d_backward.default)
def avg_pool2d_backward(b: GraphBuilder, go: Value, x: Value, kernel: list[int], stride: list[int],
                        padding: list[int], ceil_mode: bool, count_include_pad: bool,
                        divisor_override: int | None) -> Value:
    return _avg_pool_backward(b, go, x, 2, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)


@register(aten.avg_pool3d_backward.default)
def avg_pool3d_backward(b: GraphBuilder, go: Value, x: Value, kernel: list[int], stride: list[int],
                        padding: list[int], ceil_mode: bool, count_include_pad: bool,
                        divisor_override: int | None) -> Value:
    return _avg_pool_backward(b, go, x, 3, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
