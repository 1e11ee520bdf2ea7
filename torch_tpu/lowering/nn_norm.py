"""Lowerings: batch norm (all ATen entry points), layer norm, group norm, fused RMS norm, and backwards.

Statistics are computed in the op-math dtype (float32 for half inputs) with a two-pass variance
(mean first, then the mean of squared deviations), which is what the CPU kernels compute.

Batch-norm running statistics: ``native_batch_norm`` updates running_mean/running_var in place
although its schema does not mark them as mutated; apply.py lists it in UNANNOTATED_MUTATIONS,
and the lowering returns the new values after the results (None in eval mode, when nothing
changes). ``_native_batch_norm_legit`` and ``_batch_norm_with_update`` mark them (a!)/(b!) and
follow the same convention; the ``_functional`` variants return them as results.
"""

from __future__ import annotations

import math

import torch

from ..ir.builder import GraphBuilder, Value
from .core import opmath
from .nn import check, full, keep, rsum, splat
from .registry import register

aten = torch.ops.aten


def _chan(b: GraphBuilder, v: Value, shape: tuple[int, ...], dtype: torch.dtype) -> Value:
    """A per-channel [C] vector broadcast along dim 1 of shape."""
    return b.broadcast_in_dim(b.convert(v, dtype), shape, (1,))


def _bn_stats(b: GraphBuilder, x: Value, dims: list[int]) -> tuple[Value, Value]:
    """Per-channel mean and biased variance over dims (x already in op-math)."""
    cnt = math.prod(x.shape[d] for d in dims)
    nf = full(b, cnt, x.dtype, (x.shape[1],))
    mean = b.div(rsum(b, x, dims), nf)
    dev = b.sub(x, _chan(b, mean, x.shape, x.dtype))
    var = b.div(rsum(b, b.mul(dev, dev), dims), nf)
    return mean, var


def _bn_apply(b: GraphBuilder, xc: Value, mean: Value, invstd: Value, w: Value | None, bias: Value | None) -> Value:
    """y = x * alpha + beta with per-channel alpha = invstd * w, beta = bias - mean * alpha: the
    CPU kernel's formula (batch_norm_cpu_transform_input), so results round like CPU's."""
    comp = xc.dtype
    alpha = b.convert(invstd, comp)
    if w is not None:
        alpha = b.mul(alpha, b.convert(w, comp))
    beta = b.neg(b.mul(b.convert(mean, comp), alpha))
    if bias is not None:
        beta = b.add(b.convert(bias, comp), beta)
    return b.add(b.mul(xc, _chan(b, alpha, xc.shape, comp)), _chan(b, beta, xc.shape, comp))


def _batch_norm(b: GraphBuilder, x: Value, w: Value | None, bias: Value | None, rm: Value | None, rv: Value | None,
                training: bool, momentum: Value, eps: Value):
    """(out, save_mean, save_invstd, new_running_mean | None, new_running_var | None)."""
    check(x.rank >= 2, f"Expected 2D or more input, got {x.rank}D")
    comp = opmath(x.dtype)
    xc = b.convert(x, comp)
    c = x.shape[1]
    dims = [0, *range(2, x.rank)]
    e = splat(b, eps, comp, (c,))
    if training:
        cnt = math.prod(x.shape[d] for d in dims)
        # ATen's kernel accepts one value per channel (the "more than 1 value per channel" check is
        # torch.nn.functional.batch_norm's, in Python): the unbiased running variance is then 0/0 = NaN.
        check(x.numel() > 0, f"input tensor must have at least one element, but got input_sizes = {list(x.shape)}")
        mean, var = _bn_stats(b, xc, dims)
        invstd = b.rsqrt(b.add(var, e))
        out = _bn_apply(b, xc, mean, invstd, w, bias)
        new_rm = new_rv = None
        m = splat(b, momentum, comp, (c,))
        one_m = b.sub(full(b, 1, comp, (c,)), m)
        if rm is not None:
            new_rm = b.convert(b.add(b.mul(one_m, b.convert(rm, comp)), b.mul(m, mean)), rm.dtype)
        if rv is not None:  # running variance is unbiased
            unbiased = (b.mul(var, full(b, cnt / (cnt - 1), comp, (c,))) if cnt > 1
                        else full(b, math.nan, comp, (c,)))
            new_rv = b.convert(b.add(b.mul(one_m, b.convert(rv, comp)), b.mul(m, unbiased)), rv.dtype)
        # CPU saves the statistics in the input dtype in training mode.
        return (b.convert(out, x.dtype), b.convert(mean, x.dtype), b.convert(invstd, x.dtype), new_rm, new_rv)
    check(rm is not None and rv is not None, "running_mean and running_var must be defined in evaluation mode")
    mean = b.convert(rm, comp)
    invstd = b.rsqrt(b.add(b.convert(rv, comp), e))
    out = _bn_apply(b, xc, mean, invstd, w, bias)
    empty = full(b, 0, comp, (0,))
    return b.convert(out, x.dtype), empty, empty, None, None


@register(aten.native_batch_norm.default)
def native_batch_norm(b: GraphBuilder, x: Value, w: Value | None, bias: Value | None, rm: Value | None,
                      rv: Value | None, training: bool, momentum: Value, eps: Value):
    out, sm, si, nrm, nrv = _batch_norm(b, x, w, bias, rm, rv, training, momentum, eps)
    return out, sm, si, nrm, nrv  # results, then the running stats it updates in place


@register(aten._native_batch_norm_legit.default)
def native_batch_norm_legit(b: GraphBuilder, x: Value, w: Value | None, bias: Value | None, rm: Value, rv: Value,
                            training: bool, momentum: Value, eps: Value):
    out, sm, si, nrm, nrv = _batch_norm(b, x, w, bias, rm, rv, training, momentum, eps)
    return out, sm, si, nrm, nrv


@register(aten._native_batch_norm_legit.no_stats)
def native_batch_norm_legit_no_stats(b: GraphBuilder, x: Value, w: Value | None, bias: Value | None, training: bool,
                                     momentum: Value, eps: Value):
    out, sm, si, _, _ = _batch_norm(b, x, w, bias, None, None, True, momentum, eps)
    return out, sm, si


@register(aten._native_batch_norm_legit_no_training.default)
def native_batch_norm_legit_no_training(b: GraphBuilder, x: Value, w: Value | None, bias: Value | None, rm: Value,
                                        rv: Value, momentum: Value, eps: Value):
    out, sm, si, _, _ = _batch_norm(b, x, w, bias, rm, rv, False, momentum, eps)
    return out, sm, si


@register(aten._native_batch_norm_legit_functional.default)
def native_batch_norm_legit_functional(b: GraphBuilder, x: Value, w: Value | None, bias: Value | None, rm: Value,
                                       rv: Value, training: bool, momentum: Value, eps: Value):
    out, sm, si, nrm, nrv = _batch_norm(b, x, w, bias, rm, rv, training, momentum, eps)
    return out, sm, si, (nrm if nrm is not None else rm), (nrv if nrv is not None else rv)


def _reserve(b: GraphBuilder) -> Value:
    return full(b, 0, torch.uint8, (0,))


@register(aten._batch_norm_with_update.default)
def batch_norm_with_update(b: GraphBuilder, x: Value, w: Value | None, bias: Value | None, rm: Value, rv: Value,
                           momentum: Value, eps: Value):
    out, sm, si, nrm, nrv = _batch_norm(b, x, w, bias, rm, rv, True, momentum, eps)
    return out, sm, si, _reserve(b), nrm, nrv


@register(aten._batch_norm_with_update_functional.default)
def batch_norm_with_update_functional(b: GraphBuilder, x: Value, w: Value | None, bias: Value | None, rm: Value,
                                      rv: Value, momentum: Value, eps: Value):
    out, sm, si, nrm, nrv = _batch_norm(b, x, w, bias, rm, rv, True, momentum, eps)
    return out, sm, si, _reserve(b), nrm, nrv


@register(aten._batch_norm_no_update.default)
def batch_norm_no_update(b: GraphBuilder, x: Value, w: Value | None, bias: Value | None, rm: Value | None,
                         rv: Value | None, momentum: Value, eps: Value):
    training = rm is None or rv is None  # without running stats the batch statistics are used
    out, sm, si, _, _ = _batch_norm(b, x, w, bias, rm, rv, training, momentum, eps)
    return out, sm, si, _reserve(b)


def _batch_norm_backward(b: GraphBuilder, go: Value, x: Value, w: Value | None, rm: Value | None, rv: Value | None,
                         save_mean: Value | None, save_invstd: Value | None, train: bool, eps: Value,
                         output_mask: list[bool]):
    comp = opmath(x.dtype)
    c = x.shape[1]
    dims = [0, *range(2, x.rank)]
    cnt = math.prod(x.shape[d] for d in dims)
    xc, g = b.convert(x, comp), b.convert(go, comp)
    if train:
        mean, invstd = b.convert(save_mean, comp), b.convert(save_invstd, comp)
    else:
        mean = b.convert(rm, comp)
        invstd = b.rsqrt(b.add(b.convert(rv, comp), splat(b, eps, comp, (c,))))
    wc = b.convert(w, comp) if w is not None else full(b, 1, comp, (c,))
    xmu = b.sub(xc, _chan(b, mean, x.shape, comp))
    sum_g = rsum(b, g, dims)
    dotp = rsum(b, b.mul(g, xmu), dims)
    gi = gw = gb = None
    if output_mask[0]:
        scale = b.mul(invstd, wc)
        if train:
            nf = full(b, cnt, comp, (c,))
            proj = b.div(b.mul(b.mul(dotp, invstd), invstd), nf)  # dotp * invstd^2 / n
            gmean = b.div(sum_g, nf)
            t = b.sub(b.sub(g, b.mul(xmu, _chan(b, proj, x.shape, comp))), _chan(b, gmean, x.shape, comp))
            gi = b.mul(t, _chan(b, scale, x.shape, comp))
        else:
            gi = b.mul(g, _chan(b, scale, x.shape, comp))
        gi = b.convert(gi, x.dtype)
    if output_mask[1]:
        gw = b.convert(b.mul(dotp, invstd), w.dtype if w is not None else x.dtype)
    if output_mask[2]:
        gb = b.convert(sum_g, w.dtype if w is not None else x.dtype)
    return gi, gw, gb


@register(aten.native_batch_norm_backward.default)
def native_batch_norm_backward(b: GraphBuilder, go: Value, x: Value, w: Value | None, rm: Value | None,
                               rv: Value | None, save_mean: Value | None, save_invstd: Value | None, train: bool,
                               eps: Value, output_mask: list[bool]):
    return _batch_norm_backward(b, go, x, w, rm, rv, save_mean, save_invstd, train, eps, output_mask)


@register(aten.batch_norm_backward.default)
def batch_norm_backward(b: GraphBuilder, go: Value, x: Value, w: Value, rm: Value | None, rv: Value | None,
                        save_mean: Value | None, save_var: Value | None, update: bool, eps: Value,
                        output_mask: list[bool], reserve: Value):
    # save_var holds invstd (the name is historical); eval mode recomputes from the running stats.
    train = update or rm is None
    return _batch_norm_backward(b, go, x, w, rm, rv, save_mean, save_var, train, eps, output_mask)


# -- layer norm --------------------------------------------------------------------------------

def _row_stats(b: GraphBuilder, xc: Value, dims: list[int]) -> tuple[Value, Value]:
    """mean and biased variance over dims, reduced dims removed."""
    cnt = math.prod(xc.shape[d] for d in dims)
    rest = tuple(s for d, s in enumerate(xc.shape) if d not in dims)
    nf = full(b, cnt, xc.dtype, rest)
    mean = b.div(rsum(b, xc, dims), nf)
    dev = b.sub(xc, keep(b, xc, dims, mean))
    return mean, b.div(rsum(b, b.mul(dev, dev), dims), nf)


def _trailing(b: GraphBuilder, v: Value, shape: tuple[int, ...], comp: torch.dtype) -> Value:
    """An affine parameter of normalized_shape broadcast along the trailing dims of shape."""
    n = len(shape)
    return b.broadcast_in_dim(b.convert(v, comp), shape, tuple(range(n - v.rank, n)))


@register(aten.native_layer_norm.default)
def native_layer_norm(b: GraphBuilder, x: Value, normalized_shape: list[int], w: Value | None, bias: Value | None,
                      eps: Value):
    k = len(normalized_shape)
    check(tuple(x.shape[x.rank - k:]) == tuple(normalized_shape) and k <= x.rank,
          f"Given normalized_shape={list(normalized_shape)}, expected input with shape [*, "
          f"{', '.join(map(str, normalized_shape))}], but got input of size{list(x.shape)}")
    comp = opmath(x.dtype)
    xc = b.convert(x, comp)
    dims = list(range(x.rank - k, x.rank))
    mean, var = _row_stats(b, xc, dims)
    rstd = b.rsqrt(b.add(var, splat(b, eps, comp, var.shape)))
    y = b.mul(b.sub(xc, keep(b, xc, dims, mean)), keep(b, xc, dims, rstd))
    if w is not None:
        y = b.mul(y, _trailing(b, w, y.shape, comp))
    if bias is not None:
        y = b.add(y, _trailing(b, bias, y.shape, comp))
    stat_shape = tuple(x.shape[: x.rank - k]) + (1,) * k
    return (b.convert(y, x.dtype), b.convert(b.reshape(mean, stat_shape), x.dtype),
            b.convert(b.reshape(rstd, stat_shape), x.dtype))


def _norm_input_grad(b: GraphBuilder, gxhat: Value, xhat: Value, rstd_b: Value, dims: list[int]) -> Value:
    """rstd * (g - mean(g) - xhat * mean(g * xhat)) over dims (all Values in op-math, x's shape)."""
    cnt = math.prod(xhat.shape[d] for d in dims)
    rest = tuple(s for d, s in enumerate(xhat.shape) if d not in dims)
    nf = full(b, cnt, xhat.dtype, rest)
    m1 = keep(b, xhat, dims, b.div(rsum(b, gxhat, dims), nf))
    m2 = keep(b, xhat, dims, b.div(rsum(b, b.mul(gxhat, xhat), dims), nf))
    return b.mul(rstd_b, b.sub(b.sub(gxhat, m1), b.mul(xhat, m2)))


@register(aten.native_layer_norm_backward.default)
def native_layer_norm_backward(b: GraphBuilder, go: Value, x: Value, normalized_shape: list[int], mean: Value,
                               rstd: Value, w: Value | None, bias: Value | None, output_mask: list[bool]):
    k = len(normalized_shape)
    comp = opmath(x.dtype)
    xc, g = b.convert(x, comp), b.convert(go, comp)
    lead = x.rank - k
    dims = list(range(lead, x.rank))
    mean_b = b.broadcast_in_dim(b.reshape(b.convert(mean, comp), x.shape[:lead]), x.shape, tuple(range(lead)))
    rstd_b = b.broadcast_in_dim(b.reshape(b.convert(rstd, comp), x.shape[:lead]), x.shape, tuple(range(lead)))
    xhat = b.mul(b.sub(xc, mean_b), rstd_b)
    gi = gw = gb = None
    if output_mask[0]:
        gx = b.mul(g, _trailing(b, w, x.shape, comp)) if w is not None else g
        gi = b.convert(_norm_input_grad(b, gx, xhat, rstd_b, dims), x.dtype)
    if output_mask[1] and w is not None:
        gw = b.convert(rsum(b, b.mul(g, xhat), list(range(lead))), w.dtype)
    if output_mask[2] and bias is not None:
        gb = b.convert(rsum(b, g, list(range(lead))), bias.dtype)
    return gi, gw, gb


# -- group norm --------------------------------------------------------------------------------

@register(aten.native_group_norm.default)
def native_group_norm(b: GraphBuilder, x: Value, w: Value | None, bias: Value | None, n: int, c: int, hxw: int,
                      group: int, eps: Value):
    check(c % group == 0, f"Expected number of channels in input to be divisible by num_groups, but got input of "
          f"shape {list(x.shape)} and num_groups={group}")
    comp = opmath(x.dtype)
    xg = b.reshape(b.convert(x, comp), (n, group, (c // group) * hxw))
    mean, var = _row_stats(b, xg, [2])
    rstd = b.rsqrt(b.add(var, splat(b, eps, comp, var.shape)))
    y = b.mul(b.sub(xg, keep(b, xg, [2], mean)), keep(b, xg, [2], rstd))
    y = b.reshape(y, (n, c, hxw))
    if w is not None:
        y = b.mul(y, b.broadcast_in_dim(b.convert(w, comp), y.shape, (1,)))
    if bias is not None:
        y = b.add(y, b.broadcast_in_dim(b.convert(bias, comp), y.shape, (1,)))
    return b.convert(b.reshape(y, x.shape), x.dtype), b.convert(mean, x.dtype), b.convert(rstd, x.dtype)


@register(aten.native_group_norm_backward.default)
def native_group_norm_backward(b: GraphBuilder, go: Value, x: Value, mean: Value, rstd: Value, w: Value | None,
                               n: int, c: int, hxw: int, group: int, output_mask: list[bool]):
    comp = opmath(x.dtype)
    cg = c // group
    shape4 = (n, group, cg, hxw)
    xc = b.reshape(b.convert(x, comp), shape4)
    g = b.reshape(b.convert(go, comp), shape4)
    mean_b = b.broadcast_in_dim(b.convert(mean, comp), shape4, (0, 1))
    rstd_b = b.broadcast_in_dim(b.convert(rstd, comp), shape4, (0, 1))
    xhat = b.mul(b.sub(xc, mean_b), rstd_b)
    gi = gw = gb = None
    if output_mask[0]:
        gx = g
        if w is not None:
            gx = b.mul(g, b.broadcast_in_dim(b.reshape(b.convert(w, comp), (group, cg)), shape4, (1, 2)))
        gi = b.convert(b.reshape(_norm_input_grad(b, gx, xhat, rstd_b, [2, 3]), x.shape), x.dtype)
    wdt = w.dtype if w is not None else x.dtype
    if output_mask[1]:
        gw = b.convert(b.reshape(rsum(b, b.mul(g, xhat), [0, 3]), (c,)), wdt)
    if output_mask[2]:
        gb = b.convert(b.reshape(rsum(b, g, [0, 3]), (c,)), wdt)
    return gi, gw, gb


# -- RMS norm ----------------------------------------------------------------------------------

@register(aten._fused_rms_norm.default)
def fused_rms_norm(b: GraphBuilder, x: Value, normalized_shape: list[int], w: Value | None, eps: Value | None):
    k = len(normalized_shape)
    comp = opmath(x.dtype)
    xc = b.convert(x, comp)
    dims = list(range(x.rank - k, x.rank))
    cnt = math.prod(normalized_shape)
    rest = tuple(x.shape[: x.rank - k])
    ms = b.div(rsum(b, b.mul(xc, xc), dims), full(b, cnt, comp, rest))
    # eps=None means the machine epsilon of the computation dtype (F.rms_norm's default on CPU:
    # float32's for bfloat16 and float16 inputs, not theirs).
    e = full(b, torch.finfo(comp).eps, comp, rest) if eps is None else splat(b, eps, comp, rest)
    rstd = b.rsqrt(b.add(ms, e))
    y = b.mul(xc, keep(b, xc, dims, rstd))
    if w is not None:
        y = b.mul(y, _trailing(b, w, y.shape, comp))
    return b.convert(y, x.dtype), b.reshape(rstd, rest + (1,) * k)


@register(aten._fused_rms_norm_backward.default)
def fused_rms_norm_backward(b: GraphBuilder, go: Value, x: Value, normalized_shape: list[int], rstd: Value,
                            w: Value | None, output_mask: list[bool]):
    k = len(normalized_shape)
    comp = opmath(x.dtype)
    lead = x.rank - k
    dims = list(range(lead, x.rank))
    xc, g = b.convert(x, comp), b.convert(go, comp)
    rstd_b = b.broadcast_in_dim(b.reshape(b.convert(rstd, comp), x.shape[:lead]), x.shape, tuple(range(lead)))
    xhat = b.mul(xc, rstd_b)
    gi = gw = None
    if output_mask[0]:
        gx = b.mul(g, _trailing(b, w, x.shape, comp)) if w is not None else g
        cnt = math.prod(normalized_shape)
        m = b.div(rsum(b, b.mul(gx, xhat), dims), full(b, cnt, comp, tuple(x.shape[:lead])))
        gi = b.convert(b.mul(rstd_b, b.sub(gx, b.mul(xhat, keep(b, xc, dims, m)))), x.dtype)
    if output_mask[1] and w is not None:
        gw = b.convert(rsum(b, b.mul(g, xhat), list(range(lead))), w.dtype)
    return gi, gw
