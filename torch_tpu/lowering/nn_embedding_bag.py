"""Lowerings: nn.EmbeddingBag (``_embedding_bag`` and its backward).

A bag is a run of ``indices`` starting at its offset; every index's bag (offset2bag) comes from
marking each bag's start and a prefix sum, so no [indices x bags] comparison is ever built.
Sum and mean scatter-add the looked-up rows into their bags; max scatter-maxes them and keeps,
per bag and column, the first row reaching the max (max_indices: the weight row, as CPU).
Indices equal to padding_idx belong to no bag's sum, count or max. The auxiliary results are
always complete (CPU leaves some empty in modes that do not need them): the backward here
reads them, and nothing else does.
"""

from __future__ import annotations

import torch

from ..ir.builder import GraphBuilder, Value
from .core import opmath
from .nn import _take_rows, check, full
from .registry import register

aten = torch.ops.aten

_SUM, _MEAN, _MAX = 0, 1, 2


def _offset2bag(b: GraphBuilder, offsets: Value, n: int, bags: int, include_last_offset: bool) -> Value:
    """int64 [n]: the bag of each index, -1 for an index in no bag (before the first offset, or
    after the last bag's end when include_last_offset gives that end). Starts past the end
    (empty trailing bags) land in a spare slot n that is dropped."""
    ends = bags + 1 if include_last_offset else bags  # the end offset is one more start
    starts = b.convert(offsets, torch.int64)
    if ends < offsets.shape[0]:
        starts = b.slice(starts, [0], [ends])
    starts = b.min(starts, full(b, n, torch.int64, (ends,)))
    marks = b.scatter(full(b, 0, torch.int64, (n + 1,)), starts, full(b, 1, torch.int64, (ends,)), 0, "add")
    o2b = b.sub(b.slice(b.scan(marks, "sum", 0), [0], [n]), full(b, 1, torch.int64, (n,)))
    return b.select(b.compare("lt", o2b, full(b, bags, torch.int64, (n,))), o2b, full(b, -1, torch.int64, (n,)))


def _in_bag(b: GraphBuilder, o2b: Value) -> tuple[Value, Value]:
    """(bool [n]: the index is in a bag; its bag, 0 where none, so it can index)."""
    n = o2b.shape[0]
    valid = b.compare("ge", o2b, full(b, 0, torch.int64, (n,)))
    return valid, b.select(valid, o2b, full(b, 0, torch.int64, (n,)))


def _per_bag(b: GraphBuilder, values: Value, o2b: Value, bags: int, mode: str, init: float) -> Value:
    """values [n, ...] combined into [bags, ...] by their bag."""
    shape = (bags, *values.shape[1:])
    index = b.broadcast_in_dim(o2b, values.shape, (0,)) if values.rank > 1 else o2b
    return b.scatter(full(b, init, values.dtype, shape), index, values, 0, mode)


def _plan(b: GraphBuilder, weight: Value, indices: Value, offsets: Value, include_last_offset: bool,
          padding_idx: int) -> tuple[Value, Value, Value, int]:
    """(int64 indices [n], offset2bag [n], kept [n] bool: in a bag and not padding, number of bags)."""
    check(weight.rank == 2, f"embedding_bag: weight has to be a 2D Tensor, but got Tensor of dimension {weight.rank}")
    check(indices.rank == 1, f"embedding_bag: input has to be a 1D or 2D Tensor, but got Tensor of dimension "
                             f"{indices.rank}")
    check(offsets.rank == 1, f"embedding_bag: offsets has to be a 1D Tensor, but got Tensor of dimension "
                             f"{offsets.rank}")
    for what, v in (("indices", indices), ("offsets", offsets)):
        check(v.dtype in (torch.int64, torch.int32), f"embedding_bag: Expected tensor for argument '{what}' to have "
                                                     f"one of the following scalar types: Long, Int; but got "
                                                     f"{v.dtype} instead")
    bags = offsets.shape[0] - (1 if include_last_offset else 0)
    check(bags >= 0, "embedding_bag: include_last_offset needs at least one offset")
    n = indices.shape[0]
    idx = b.convert(indices, torch.int64)
    o2b = _offset2bag(b, offsets, n, bags, include_last_offset)
    kept, _ = _in_bag(b, o2b)
    if padding_idx >= 0:
        kept = b.binary("and", kept, b.compare("ne", idx, full(b, padding_idx, torch.int64, (n,))))
    return idx, o2b, kept, bags


def _bag_size(b: GraphBuilder, o2b: Value, kept: Value, bags: int) -> Value:
    return _per_bag(b, b.convert(kept, torch.int64), o2b, bags, "add", 0)


@register(aten._embedding_bag.default, aten._embedding_bag_forward_only.default)
def embedding_bag(b: GraphBuilder, weight: Value, indices: Value, offsets: Value, scale_grad_by_freq: bool = False,
                  mode: int = 0, sparse: bool = False, per_sample_weights: Value | None = None,
                  include_last_offset: bool = False, padding_idx: int = -1) -> tuple[Value, Value, Value, Value]:
    """(output [bags, D], offset2bag [n], bag_size [bags], max_indices [bags, D] in max mode else [bags])."""
    check(mode in (_SUM, _MEAN, _MAX), f"embedding_bag: mode has to be one of sum, mean or max, got {mode}")
    check(per_sample_weights is None or mode == _SUM,
          "embedding_bag: per_sample_weights was not None. per_sample_weights is only supported for mode='sum' "
          f"(got mode='{['sum', 'mean', 'max'][mode]}'). Please open a feature request on GitHub.")
    idx, o2b, kept, bags = _plan(b, weight, indices, offsets, include_last_offset, padding_idx)
    n, d = idx.shape[0], weight.shape[1]
    comp = opmath(weight.dtype)
    if n == 0 or bags == 0:
        aux = (bags, d) if mode == _MAX else (bags,)
        return (full(b, 0, weight.dtype, (bags, d)), o2b, full(b, 0, torch.int64, (bags,)),
                full(b, 0, torch.int64, aux))
    result_o2b = o2b
    _, o2b = _in_bag(b, o2b)  # excluded indices are masked by `kept` below
    size = _bag_size(b, o2b, kept, bags)
    keep2 = b.broadcast_in_dim(kept, (n, d), (0,))
    rows = b.convert(_take_rows(b, weight, idx), comp)
    if mode == _MAX:
        masked = b.select(keep2, rows, full(b, float("-inf"), comp, (n, d)))
        best = _per_bag(b, masked, o2b, bags, "max", float("-inf"))
        # The first position reaching its bag's max, then the weight row found there.
        at_max = b.binary("and", keep2, b.compare("eq", masked, b.gather(best, b.broadcast_in_dim(o2b, (n, d), (0,)), 0)))
        pos = b.select(at_max, b.iota(torch.int64, (n, d), 0), full(b, n, torch.int64, (n, d)))
        first = _per_bag(b, pos, o2b, bags, "min", n)
        empty = b.compare("eq", b.broadcast_in_dim(size, (bags, d), (0,)), full(b, 0, torch.int64, (bags, d)))
        safe = b.select(empty, full(b, 0, torch.int64, (bags, d)), first)
        max_indices = b.select(empty, full(b, 0, torch.int64, (bags, d)),
                               b.gather(b.broadcast_in_dim(idx, (n, d), (0,)), safe, 0))
        out = b.select(empty, full(b, 0, comp, (bags, d)), best)
        return b.convert(out, weight.dtype), result_o2b, size, max_indices
    if per_sample_weights is not None:
        check(per_sample_weights.shape == (n,), "embedding_bag: expected per_sample_weights to be 1D with the same "
                                               "number of elements as input")
        rows = b.mul(rows, b.broadcast_in_dim(b.convert(per_sample_weights, comp), (n, d), (0,)))
    rows = b.select(keep2, rows, full(b, 0, comp, (n, d)))
    out = _per_bag(b, rows, o2b, bags, "add", 0)
    if mode == _MEAN:
        count = b.convert(b.max(size, full(b, 1, torch.int64, (bags,))), comp)
        out = b.div(out, b.broadcast_in_dim(count, (bags, d), (0,)))
    return b.convert(out, weight.dtype), result_o2b, size, full(b, 0, torch.int64, (bags,))


@register(aten._embedding_bag_dense_backward.default)
def embedding_bag_dense_backward(b: GraphBuilder, grad: Value, indices: Value, offset2bag: Value, bag_size: Value,
                                 maximum_indices: Value, num_weights: int, scale_grad_by_freq: bool, mode: int,
                                 per_sample_weights: Value | None, padding_idx: int = -1) -> Value:
    """The weight's gradient: each bag's gradient back to the rows it read (max: the row that
    won, per column), divided by the bag's size (mean) and optionally the row's frequency."""
    comp = opmath(grad.dtype)
    bags, d = grad.shape
    g = b.convert(grad, comp)
    zeros = full(b, 0, comp, (num_weights, d))
    if mode == _MAX:
        live = b.compare("gt", b.broadcast_in_dim(bag_size, (bags, d), (0,)), full(b, 0, torch.int64, (bags, d)))
        g = b.select(live, g, full(b, 0, comp, (bags, d)))
        out = b.scatter(zeros, b.convert(maximum_indices, torch.int64), g, 0, "add") if bags else zeros
        return b.convert(out, grad.dtype)
    n = indices.shape[0]
    if n == 0 or bags == 0:
        return b.convert(zeros, grad.dtype)
    idx = b.convert(indices, torch.int64)
    valid, o2b = _in_bag(b, b.convert(offset2bag, torch.int64))
    per = b.gather(g, b.broadcast_in_dim(o2b, (n, d), (0,)), 0)
    scale = b.select(valid, full(b, 1, comp, (n,)), full(b, 0, comp, (n,)))
    if mode == _MEAN:
        size = b.gather(bag_size, o2b, 0)
        scale = b.div(scale, b.convert(b.max(size, full(b, 1, torch.int64, (n,))), comp))
    if per_sample_weights is not None:
        scale = b.mul(scale, b.convert(per_sample_weights, comp))
    if scale_grad_by_freq:
        counts = b.scatter(full(b, 0, comp, (num_weights,)), idx, full(b, 1, comp, (n,)), 0, "add")
        scale = b.div(scale, b.gather(counts, idx, 0))
    if padding_idx >= 0:
        pad = b.compare("eq", idx, full(b, padding_idx, torch.int64, (n,)))
        scale = b.select(pad, full(b, 0, comp, (n,)), scale)
    per = b.mul(per, b.broadcast_in_dim(scale, (n, d), (0,)))
    out = b.scatter(zeros, b.broadcast_in_dim(idx, (n, d), (0,)), per, 0, "add")
    return b.convert(out, grad.dtype)


@register(aten._embedding_bag_per_sample_weights_backward.default)
def embedding_bag_per_sample_weights_backward(b: GraphBuilder, grad: Value, weight: Value, indices: Value,
                                              offsets: Value, offset2bag: Value, mode: int,
                                              padding_idx: int = -1) -> Value:
    """d out[bag] / d psw[i] = weight[indices[i]]: the dot product with the bag's gradient."""
    check(mode == _SUM, "embedding_bag_backward: per_sample_weights only supported for mode='sum'")
    n, d = indices.shape[0], grad.shape[1]
    comp = opmath(grad.dtype)
    if n == 0 or grad.shape[0] == 0:
        return full(b, 0, grad.dtype, (n,))
    idx = b.convert(indices, torch.int64)
    valid, o2b = _in_bag(b, b.convert(offset2bag, torch.int64))
    per = b.gather(b.convert(grad, comp), b.broadcast_in_dim(o2b, (n, d), (0,)), 0)
    rows = b.convert(_take_rows(b, weight, idx), comp)
    dot = b.select(valid, b.reduce(b.mul(per, rows), "sum", [1]), full(b, 0, comp, (n,)))
    if padding_idx >= 0:
        pad = b.compare("eq", idx, full(b, padding_idx, torch.int64, (n,)))
        dot = b.select(pad, full(b, 0, comp, (n,)), dot)
    return b.convert(dot, grad.dtype)


@register(aten._embedding_bag_backward.default)
def embedding_bag_backward(b: GraphBuilder, grad: Value, indices: Value, offsets: Value, offset2bag: Value,
                           bag_size: Value, maximum_indices: Value, num_weights: int, scale_grad_by_freq: bool,
                           mode: int, sparse: bool, per_sample_weights: Value | None,
                           padding_idx: int = -1) -> Value:
    """The weight's gradient of nn.EmbeddingBag (dense; sparse gradients are not supported)."""
    if sparse:
        raise NotImplementedError("torch_tpu: nn.EmbeddingBag(sparse=True) needs sparse gradients, which the tpu "
                                  "device does not support; use sparse=False")
    return embedding_bag_dense_backward(b, grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
                                        scale_grad_by_freq, mode, per_sample_weights, padding_idx)
