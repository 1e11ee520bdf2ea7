"""Lowerings: loss functions and their backwards.

Reductions follow at::Reduction: 0 none, 1 mean, 2 sum. Mean is sum / numel (NaN for an empty
input), except NLL whose mean divides by the total weight of the non-ignored targets (0/0 = NaN
when every target is ignored, as on CPU). Everything is computed in the op-math dtype (float32
for half types) and rounded once.

The multi-class margin losses are vectorized versions of CPU's per-sample loops: multi_margin's
per-class hinge terms select through a one-hot of the target, and multilabel_margin's (target
slot, class) hinge terms form an [N, C, C] mask, whose counts the backward scatters back to the
target classes. Target slots after the first negative one are masked out (CPU stops reading
there; a graph cannot stop early). multi_margin's forward is PyTorch's decomposition (its
one-sample unreduced shape fixed to CPU's); multilabel_margin's forward is written here, since
the decomposition also counts the slots after the first -1.
"""

from __future__ import annotations

import math

import torch

from ..ir.builder import GraphBuilder, Value
from .apply import trace_decomposition
from .core import broadcast_shapes, broadcast_to, opmath
from .nn import baked_float, check, full, one_hot_select, rsum, splat
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


# -- multi-class margin losses -----------------------------------------------------------------

@register(aten.multi_margin_loss.default)
def multi_margin_loss(b: GraphBuilder, x: Value, target: Value, p: Value, margin: Value, weight: Value | None,
                      reduction: int) -> Value:
    """PyTorch's decomposition, with CPU's unreduced shape: a 0-d target gives a 0-d loss (the
    decomposition keeps a [1] batch dim for it)."""
    loss = trace_decomposition(b, aten.multi_margin_loss.default, [x, target, p, margin, weight, reduction])
    return b.reshape(loss, ()) if reduction == NONE and target.rank == 0 else loss


_TYPE_NAMES = {torch.float16: "Half", torch.bfloat16: "BFloat16"}


def _margin_frames(x: Value, name: str) -> tuple[int, int]:
    """(samples, classes) of a margin loss input: [C] or a 0-d input is one sample, as on CPU."""
    check(x.rank <= 2 and (x.rank < 2 or x.shape[1] != 0) and (x.rank != 1 or x.shape[0] != 0),
          f"Expected non-empty vector or matrix with optional 0-dim batch size, but got: {list(x.shape)}")
    check(x.dtype in (torch.float32, torch.float64),
          f"\"{name}\" not implemented for '{_TYPE_NAMES.get(x.dtype, str(x.dtype))}'", NotImplementedError)
    if x.rank <= 1:
        return 1, (x.shape[0] if x.rank == 1 else 1)
    return x.shape[0], x.shape[1]


def _times_grad_output(b: GraphBuilder, gi: Value, go: Value, reduction: int) -> Value:
    """gi [N, C] times the incoming gradient: one scalar when reduced (or for a single sample's
    0-d loss), else one per sample, as CPU scales its grad_input."""
    g = b.convert(go, gi.dtype)
    if reduction != NONE or g.rank == 0:
        return b.mul(gi, b.broadcast_in_dim(b.reshape(g, ()), gi.shape, ()))
    return b.mul(gi, b.broadcast_in_dim(b.reshape(g, (gi.shape[0],)), gi.shape, (0,)))


@register(aten.multi_margin_loss_backward.default)
def multi_margin_loss_backward(b: GraphBuilder, go: Value, x: Value, target: Value, p: Value, margin: Value,
                               weight: Value | None, reduction: int) -> Value:
    """d/dx of sum over classes d != y of w[y] max(0, margin - x[y] + x[d])^p / C (mean: also / N).
    Each active hinge gives class d the slope h = g (p = 1) or 2 g z (p = 2), times w[y], and
    the target class -sum of them; g = 1 / C, or 1 / (N C) for mean, as CPU."""
    n, c = _margin_frames(x, "multi_margin_loss_backward_cpu_kernel")
    power = int(baked_float(p))  # CPU reads p as an int: 2.5 is 2
    check(power in (1, 2), "only p == 1 and p == 2 supported")
    check(target.rank <= 1 and target.numel() == n, f"inconsistent target size, expected {n} but got "
          f"{list(target.shape)}")
    check(weight is None or weight.numel() == c,
          f"inconsistent weight size, expected {c} but got {list(weight.shape) if weight is not None else []}")
    comp, shape = x.dtype, (n, c)
    xc = b.reshape(x, shape)
    t = b.reshape(b.convert(target, torch.int64), (n,))
    is_target = one_hot_select(b, t, c, 1, shape)
    x_t = b.broadcast_in_dim(b.reshape(b.gather(xc, b.reshape(t, (n, 1)), 1), (n,)), shape, (0,))
    z = b.add(b.sub(splat(b, margin, comp, shape), x_t), xc)
    g = full(b, 1.0 / max(n * c, 1) if reduction == MEAN else 1.0 / c, comp, shape)
    h = g if power == 1 else b.mul(b.mul(full(b, 2, comp, shape), g), z)
    if weight is not None:
        w_t = b.gather(b.reshape(b.convert(weight, comp), (c,)), t, 0)
        h = b.mul(h, b.broadcast_in_dim(w_t, shape, (0,)))
    zero = full(b, 0, comp, shape)
    active = b.binary("and", b.compare("gt", z, zero), b.unary("not", is_target))
    h = b.select(active, h, zero)
    target_slope = b.broadcast_in_dim(b.neg(rsum(b, h, [1])), shape, (0,))
    gi = b.select(is_target, target_slope, h)
    return b.reshape(_times_grad_output(b, gi, go, reduction), x.shape)


def _check_multilabel(x: Value, target: Value, name: str) -> tuple[int, int]:
    n, c = _margin_frames(x, name)
    check(target.numel() == n * c and (x.rank == 2) == (target.rank == 2),
          f"inconsistent target size: {list(target.shape)} for input of size: {list(x.shape)}")
    return n, c


def _multilabel_hinges(b: GraphBuilder, xc: Value, target: Value, not_target: Value | None):
    """The hinge terms of multilabel_margin over [N, slot k, class d], xc [N, C]: (z = 1 - x[t_k]
    + x[d], active = slot k counts, d is not a target class and z > 0, the slots' clamped target
    classes [N, C], which slots count [N, C], the listed classes [N, C] bool). not_target: the
    classes to consider (the backward's saved is_target), else those the target lists."""
    n, c = xc.shape
    shape, cube = (n, c), (n, c, c)
    t = b.reshape(b.convert(target, torch.int64), shape)
    zero_i = b.full(0, torch.int64, shape)
    # Slot k counts while no negative target precedes or is at it: CPU's loop breaks there.
    negatives_so_far = b.scan(b.convert(b.compare("lt", t, zero_i), torch.int64), "sum", 1)
    valid = b.compare("eq", negatives_so_far, zero_i)
    safe_t = b.select(valid, t, zero_i)
    listed = b.binary("and", b.broadcast_in_dim(valid, cube, (0, 1)),
                      b.compare("eq", b.iota(torch.int64, cube, 2), b.broadcast_in_dim(safe_t, cube, (0, 1))))
    is_target = b.reduce(listed, "or", [1])
    if not_target is None:
        not_target = b.unary("not", is_target)
    x_t = b.gather(xc, safe_t, 1)  # x at each slot's target class
    z = b.add(b.sub(full(b, 1, xc.dtype, cube), b.broadcast_in_dim(x_t, cube, (0, 1))),
              b.broadcast_in_dim(xc, cube, (0, 2)))
    active = b.binary("and", b.compare("gt", z, full(b, 0, xc.dtype, cube)),
                      b.binary("and", b.broadcast_in_dim(valid, cube, (0, 1)),
                               b.broadcast_in_dim(not_target, cube, (0, 2))))
    return z, active, safe_t, is_target


@register(aten.multilabel_margin_loss_forward.default)
def multilabel_margin_loss_forward(b: GraphBuilder, x: Value, target: Value, reduction: int) -> tuple[Value, Value]:
    """(loss, is_target): per sample, sum over target slots k (up to the first negative target)
    and non-target classes d of max(0, 1 - x[t_k] + x[d]) / C. Written here rather than traced
    from PyTorch's decomposition, which also counts the slots after the first -1 and keeps a
    [1] batch dim for one sample's unreduced loss (CPU: 0-d)."""
    n, c = _check_multilabel(x, target, "multilabel_margin_loss_forward_out_frame")
    comp = x.dtype
    z, active, _, is_target = _multilabel_hinges(b, b.reshape(x, (n, c)), target, None)
    per_sample = b.div(rsum(b, b.select(active, z, full(b, 0, comp, z.shape)), [1, 2]), full(b, c, comp, (n,)))
    if reduction == NONE:
        loss = per_sample if target.rank == 2 else b.reshape(per_sample, ())
    else:
        loss = rsum(b, per_sample, [0])
        if reduction == MEAN:  # an empty batch gives 0/0 = NaN, as on CPU
            loss = b.div(loss, full(b, n, comp, ()))
    return loss, b.reshape(b.convert(is_target, comp), target.shape)


@register(aten.multilabel_margin_loss_backward.default)
def multilabel_margin_loss_backward(b: GraphBuilder, go: Value, x: Value, target: Value, reduction: int,
                                    is_target: Value) -> Value:
    """Every active (k, d) hinge adds g to class d and -g to class t_k (a class listed twice
    counts twice, as on CPU); g = 1 / C, or 1 / (N C) for mean. Which classes are targets comes
    from the saved is_target, as CPU reads it."""
    n, c = _check_multilabel(x, target, "multilabel_margin_loss_backward_out_frame")
    check(tuple(is_target.shape) == tuple(target.shape),
          f"Expected tensor for argument #3 'target' to have same size as tensor for argument #5 'is_target'; but "
          f"{list(target.shape)} does not equal {list(is_target.shape)}")
    comp, shape = x.dtype, (n, c)
    not_target = b.compare("eq", b.reshape(b.convert(is_target, comp), shape), full(b, 0, comp, shape))
    _, active, safe_t, _ = _multilabel_hinges(b, b.reshape(x, shape), target, not_target)
    hits = b.convert(active, comp)
    per_class = rsum(b, hits, [1])  # [N, d]: how often class d was pushed up
    per_slot = rsum(b, hits, [2])  # [N, k]: how often slot k's class was pushed down (0 past the end)
    pulled = b.scatter(full(b, 0, comp, shape), safe_t, per_slot, 1, "add")
    g = full(b, 1.0 / max(n * c, 1) if reduction == MEAN else 1.0 / c, comp, shape)
    gi = b.mul(b.sub(per_class, pulled), g)
    return b.reshape(_times_grad_output(b, gi, go, reduction), x.shape)
