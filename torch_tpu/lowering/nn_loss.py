"""Lowerings: loss functions and their backwards.

Reductions follow at::Reduction: 0 none, 1 mean, 2 sum. Mean is sum / numel (NaN for an empty
input), except NLL whose mean divides by the total weight of the non-ignored targets (0/0 = NaN
when every target is ignored, as on CPU). Everything is computed in the op-math dtype (float32
for half types) and rounded once.
"""

from __future__ import annotations

import math

import torch

from ..ir.builder import GraphBuilder, Value
from .core import broadcast_shapes, broadcast_to, opmath
from .nn import check, full, one_hot_select, rsum, splat
from .registry import register

aten = torch.ops.aten

NONE, MEAN, SUM = 0, 1, 2


def _reduce(b: GraphBuilder, loss: Value, reduction: int) -> Value:
    if reduction == NONE:
        return loss
    tot = rsum(b, loss, list(range(loss.rank)))
    if reduction == MEAN:
        # An empty input gives 0/0 = NaN, like CPU.
        return b.div(tot, full(b, loss.numel(), loss.dtype, ()))
    check(reduction == SUM, f"{reduction} is not a valid value for reduction")
    return tot


def _pair(b: GraphBuilder, x: Value, y: Value) -> tuple[Value, Value, torch.dtype]:
    """Both operands in op-math, broadcast together (the aten ops broadcast like TensorIterator)."""
    check(x.dtype.is_floating_point, f"loss not implemented for '{x.dtype}'")
    comp = opmath(x.dtype)
    shape = broadcast_shapes(x.shape, y.shape)
    return broadcast_to(b, b.convert(x, comp), shape), broadcast_to(b, b.convert(y, comp), shape), comp


def _grad_scale(b: GraphBuilder, go: Value, shape: tuple[int, ...], reduction: int, comp: torch.dtype) -> Value:
    """grad_output broadcast to the input's shape, divided by numel for mean reduction."""
    g = broadcast_to(b, b.convert(go, comp), shape)
    if reduction == MEAN:
        g = b.div(g, full(b, math.prod(shape), comp, shape))
    return g


# -- regression losses -------------------------------------------------------------------------

@register(aten.mse_loss.default)
def mse_loss(b: GraphBuilder, x: Value, y: Value, reduction: int) -> Value:
    xc, yc, _ = _pair(b, x, y)
    d = b.sub(xc, yc)
    return b.convert(_reduce(b, b.mul(d, d), reduction), x.dtype)


@register(aten.mse_loss_backward.default)
def mse_loss_backward(b: GraphBuilder, go: Value, x: Value, y: Value, reduction: int) -> Value:
    xc, yc, comp = _pair(b, x, y)
    g = _grad_scale(b, go, xc.shape, reduction, comp)
    return b.convert(b.mul(b.mul(full(b, 2, comp, xc.shape), b.sub(xc, yc)), g), x.dtype)


@register(aten.l1_loss.default)
def l1_loss(b: GraphBuilder, x: Value, y: Value, reduction: int) -> Value:
    xc, yc, _ = _pair(b, x, y)
    return b.convert(_reduce(b, b.abs(b.sub(xc, yc)), reduction), x.dtype)


@register(aten.smooth_l1_loss.default)
def smooth_l1_loss(b: GraphBuilder, x: Value, y: Value, reduction: int, beta: Value) -> Value:
    xc, yc, comp = _pair(b, x, y)
    d = b.abs(b.sub(xc, yc))
    bt = splat(b, beta, comp, d.shape)
    half = full(b, 0.5, comp, d.shape)
    quad = b.div(b.mul(half, b.mul(d, d)), bt)
    lin = b.sub(d, b.mul(half, bt))
    # beta == 0 is the L1 loss: d < 0 never holds, so the linear branch (d - 0) is taken.
    loss = b.select(b.compare("lt", d, bt), quad, lin)
    return b.convert(_reduce(b, loss, reduction), x.dtype)


@register(aten.smooth_l1_loss_backward.default)
def smooth_l1_loss_backward(b: GraphBuilder, go: Value, x: Value, y: Value, reduction: int, beta: Value) -> Value:
    xc, yc, comp = _pair(b, x, y)
    g = _grad_scale(b, go, xc.shape, reduction, comp)
    d = b.sub(xc, yc)
    bt = splat(b, beta, comp, d.shape)
    one = full(b, 1, comp, d.shape)
    inner = b.div(d, bt)
    # CPU's comparisons are inclusive, so beta == 0 never divides (d == 0 takes the -1 branch).
    slope = b.select(b.compare("le", d, b.neg(bt)), b.neg(one), b.select(b.compare("ge", d, bt), one, inner))
    return b.convert(b.mul(slope, g), x.dtype)


@register(aten.huber_loss.default)
def huber_loss(b: GraphBuilder, x: Value, y: Value, reduction: int, delta: Value) -> Value:
    xc, yc, comp = _pair(b, x, y)
    d = b.abs(b.sub(xc, yc))
    dl = splat(b, delta, comp, d.shape)
    half = full(b, 0.5, comp, d.shape)
    quad = b.mul(half, b.mul(d, d))
    lin = b.mul(dl, b.sub(d, b.mul(half, dl)))
    loss = b.select(b.compare("lt", d, dl), quad, lin)
    return b.convert(_reduce(b, loss, reduction), x.dtype)


@register(aten.huber_loss_backward.default)
def huber_loss_backward(b: GraphBuilder, go: Value, x: Value, y: Value, reduction: int, delta: Value) -> Value:
    xc, yc, comp = _pair(b, x, y)
    g = _grad_scale(b, go, xc.shape, reduction, comp)
    d = b.sub(xc, yc)
    dl = splat(b, delta, comp, d.shape)
    slope = b.select(b.compare("lt", d, b.neg(dl)), b.neg(dl), b.select(b.compare("gt", d, dl), dl, d))
    return b.convert(b.mul(slope, g), x.dtype)


# -- binary classification losses -------------------------------------------------------------

def _weighted(b: GraphBuilder, loss: Value, weight: Value | None, comp: torch.dtype) -> Value:
    if weight is None:
        return loss
    return b.mul(loss, broadcast_to(b, b.convert(weight, comp), loss.shape))


@register(aten.binary_cross_entropy.default)
def binary_cross_entropy(b: GraphBuilder, x: Value, y: Value, weight: Value | None, reduction: int) -> Value:
    check(x.shape == y.shape, f"Using a target size ({list(y.shape)}) that is different to the input size "
          f"({list(x.shape)}) is deprecated. Please ensure they have the same size.", ValueError)
    xc, yc, comp = _pair(b, x, y)
    one = full(b, 1, comp, xc.shape)
    floor = full(b, -100, comp, xc.shape)  # CPU clamps each log at -100 so 0 * log(0) stays finite
    lx = b.max(b.log(xc), floor)
    l1x = b.max(b.log(b.sub(one, xc)), floor)
    loss = b.neg(b.add(b.mul(yc, lx), b.mul(b.sub(one, yc), l1x)))
    return b.convert(_reduce(b, _weighted(b, loss, weight, comp), reduction), x.dtype)


@register(aten.binary_cross_entropy_backward.default)
def binary_cross_entropy_backward(b: GraphBuilder, go: Value, x: Value, y: Value, weight: Value | None,
                                  reduction: int) -> Value:
    xc, yc, comp = _pair(b, x, y)
    g = _grad_scale(b, go, xc.shape, reduction, comp)
    one = full(b, 1, comp, xc.shape)
    denom = b.max(b.mul(b.sub(one, xc), xc), full(b, 1e-12, comp, xc.shape))
    gi = b.mul(b.div(b.sub(xc, yc), denom), g)
    return b.convert(_weighted(b, gi, weight, comp), x.dtype)


def _log_sigmoid(b: GraphBuilder, x: Value) -> Value:
    """log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)), stable for large |x|."""
    zero = full(b, 0, x.dtype, x.shape)
    return b.sub(b.min(x, zero), b.log1p(b.exp(b.neg(b.abs(x)))))


@register(aten.binary_cross_entropy_with_logits.default)
def binary_cross_entropy_with_logits(b: GraphBuilder, x: Value, y: Value, weight: Value | None,
                                     pos_weight: Value | None, reduction: int) -> Value:
    xc, yc, comp = _pair(b, x, y)
    one = full(b, 1, comp, xc.shape)
    ls = _log_sigmoid(b, xc)
    if pos_weight is not None:  # log_weight = (pos_weight - 1) * target + 1 scales the positive term
        pw = broadcast_to(b, b.convert(pos_weight, comp), xc.shape)
        lw = b.add(b.mul(b.sub(pw, one), yc), one)
        ls = b.mul(lw, ls)
    loss = b.sub(b.mul(b.sub(one, yc), xc), ls)
    return b.convert(_reduce(b, _weighted(b, loss, weight, comp), reduction), x.dtype)


@register(aten.soft_margin_loss.default)
def soft_margin_loss(b: GraphBuilder, x: Value, y: Value, reduction: int) -> Value:
    xc, yc, _ = _pair(b, x, y)
    loss = b.log1p(b.exp(b.neg(b.mul(yc, xc))))
    return b.convert(_reduce(b, loss, reduction), x.dtype)


@register(aten.soft_margin_loss_backward.default)
def soft_margin_loss_backward(b: GraphBuilder, go: Value, x: Value, y: Value, reduction: int) -> Value:
    xc, yc, comp = _pair(b, x, y)
    g = _grad_scale(b, go, xc.shape, reduction, comp)
    z = b.exp(b.neg(b.mul(yc, xc)))
    gi = b.mul(b.neg(b.div(b.mul(yc, z), b.add(full(b, 1, comp, z.shape), z))), g)
    return b.convert(gi, x.dtype)


# -- negative log likelihood -------------------------------------------------------------------

def _nll_parts(b: GraphBuilder, x: Value, target: Value, weight: Value | None, ignore_index: int):
    """(comp, keep mask, safe target, per-element weight w[target] (0 where ignored)), all in
    the target's shape; x is [N, C, *] or [C] with target [N, *] or []."""
    comp = opmath(x.dtype)
    check(target.dtype in (torch.int64, torch.uint8, torch.int32),
          f"expected scalar type Long but found {target.dtype}")
    t = b.convert(target, torch.int64)
    valid = b.compare("ne", t, b.full(ignore_index, torch.int64, t.shape))
    # Ignored targets may be out of range: read class 0 for them and zero their weight.
    safe = b.select(valid, t, b.full(0, torch.int64, t.shape))
    if weight is not None:
        wt = b.reshape(b.gather(b.convert(weight, comp), b.reshape(safe, (safe.numel(),)), 0), t.shape)
    else:
        wt = full(b, 1, comp, t.shape)
    wt = b.select(valid, wt, full(b, 0, comp, t.shape))
    return comp, valid, safe, wt


@register(aten.nll_loss_forward.default, aten.nll_loss2d_forward.default)
def nll_loss_forward(b: GraphBuilder, x: Value, target: Value, weight: Value | None, reduction: int,
                     ignore_index: int) -> tuple[Value, Value]:
    check(x.rank >= 1, "input tensor should be 1D or 2D")
    check(x.rank - 1 == target.rank or (x.rank == 1 and target.rank == 0) or (x.rank == 1 and target.rank == 1),
          f"Expected input batch_size to match target batch_size")
    if x.rank == 1 and target.rank == 1:  # a [C] input with a [1] target behaves like [1, C]
        x = b.reshape(x, (1, x.shape[0]))
    comp, valid, safe, wt = _nll_parts(b, x, target, weight, ignore_index)
    xc = b.convert(x, comp)
    if x.rank == 1:
        picked = b.reshape(b.gather(xc, b.reshape(safe, (1,)), 0), ())
    else:
        idx = b.reshape(safe, (safe.shape[0], 1, *safe.shape[1:]))
        picked = b.reshape(b.gather(xc, idx, 1), safe.shape)
    # Ignored elements contribute exactly 0 even if their (unread) logit is inf/NaN.
    loss = b.select(valid, b.neg(b.mul(picked, wt)), full(b, 0, comp, wt.shape))
    total_w = rsum(b, wt, list(range(wt.rank)))
    if reduction == NONE:
        if x.rank == 1:  # a single sample: CPU still reports its weight as total_weight
            return b.convert(loss, x.dtype), b.convert(total_w, x.dtype)
        return b.convert(loss, x.dtype), b.convert(full(b, 0, comp, ()), x.dtype)
    tot = rsum(b, loss, list(range(loss.rank)))
    if reduction == MEAN:
        tot = b.div(tot, total_w)
    return b.convert(tot, x.dtype), b.convert(total_w, x.dtype)


@register(aten.nll_loss_backward.default, aten.nll_loss2d_backward.default)
def nll_loss_backward(b: GraphBuilder, go: Value, x: Value, target: Value, weight: Value | None, reduction: int,
                      ignore_index: int, total_weight: Value) -> Value:
    orig_shape = x.shape
    if x.rank == 1 and target.rank == 1:
        x = b.reshape(x, (1, x.shape[0]))
    comp, valid, safe, wt = _nll_parts(b, x, target, weight, ignore_index)
    g = b.convert(go, comp)
    if reduction == NONE and wt.rank > 0:
        g = b.reshape(g, wt.shape)
    else:
        g = b.broadcast_in_dim(b.reshape(g, ()), wt.shape, ())
    if reduction == MEAN:
        g = b.div(g, b.broadcast_in_dim(b.convert(total_weight, comp), wt.shape, ()))
    val = b.neg(b.mul(g, wt))  # [N, *] or []
    cls_dim = 0 if x.rank == 1 else 1
    rest = [d for d in range(x.rank) if d != cls_dim]
    hit = b.binary("and", one_hot_select(b, safe, x.shape[cls_dim], cls_dim, x.shape),
                   b.broadcast_in_dim(valid, x.shape, rest))
    gi = b.select(hit, b.broadcast_in_dim(val, x.shape, rest), full(b, 0, comp, x.shape))
    return b.convert(b.reshape(gi, orig_shape), x.dtype)
